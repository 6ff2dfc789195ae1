"""HloSharding: XLA's sharding attribute read and printed, device chunks,
Shardy's form, and bad shardings refused naming the instruction."""

from __future__ import annotations

import numpy as np
import pytest

from xla_gpu.errors import HloError
from xla_gpu.hlo import parse_module
from xla_gpu.hlo.passes.spmd import HloSharding, ShardingError, parse_sharding, sharding_of
from xla_gpu.hlo.passes.spmd.placement import device_coords, groups_along, same_placement
from xla_gpu.hlo.passes.spmd.sharding import parse_sdy_shardings


@pytest.mark.parametrize("text", [
    "{replicated}", "{manual}", "{maximal device=3}",
    "{devices=[2,4]<=[8]}", "{devices=[2,2]3,1,0,2}",
    "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
    "{devices=[2,2,2]<=[8] last_tile_dims={manual}}",
    "{devices=[2,2,2,2]<=[16] last_tile_dims={manual, replicated}}",
    "{{replicated}, {devices=[8,1]<=[8]}}", "{}",
])
def test_print_reads_back_as_the_same_sharding(text):
    sharding = parse_sharding(text)
    assert parse_sharding(str(sharding)) == sharding


def test_iota_with_transpose_is_the_explicit_assignment():
    iota = parse_sharding("{devices=[4,2]<=[2,4]T(1,0)}")
    explicit = parse_sharding("{devices=[4,2]0,4,1,5,2,6,3,7}")
    assert iota == explicit
    assert iota.array().tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert str(parse_sharding("{devices=[2,4]<=[8]}")) == "{devices=[2,4]<=[8]}"


def test_chunks_of_a_partly_replicated_tiling():
    s = parse_sharding("{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}")
    assert s.counts(2) == (1, 4)
    assert s.local_dims((16, 8)) == (16, 2)
    coords = device_coords(s, 2, 8)
    # Devices d and d + 4 hold the same column chunk d % 4.
    assert [c[1] for c in coords] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert groups_along(s, 2, [1]) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_replica_order_does_not_change_the_placement():
    a = parse_sharding("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}")
    b = parse_sharding("{devices=[2,1,2]1,0,3,2 last_tile_dim_replicate}")
    c = parse_sharding("{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}")
    assert a != b and same_placement(a, b, 2, 4)
    assert not same_placement(a, c, 2, 4)


def test_one_tile_everywhere_is_replicated_and_metadata_is_skipped():
    assert parse_sharding("{devices=[1,1,8]<=[8] last_tile_dim_replicate}") == \
        HloSharding.replicated()
    assert parse_sharding('{replicated metadata={op_name="a {b}"}}').is_replicated


@pytest.mark.parametrize("text, why", [
    ("{devices=[2,2]0,1,2}", "3 devices for a tile assignment of 4"),
    ("{devices=[2,2]0,1,1,2}", "names a device twice"),
    ("{devices=[2,0]<=[0]}", "positive"),
    ("{devices=[2,2]<=[2,2]T(0,0)}", "not a permutation"),
    ("{maximal}", "maximal needs device=N"),
    ("{devices=[2,2]<=[4] last_tile_dims={sideways}}", "unknown subgroup kind"),
    ("{bogus}", "unknown word"),
    ("{replicated", "expected"),
    ("{unknown}", "cannot be partitioned"),
    ("{replicated} x", "trailing text"),
])
def test_bad_shardings_raise(text, why):
    with pytest.raises(ShardingError, match=why):
        parse_sharding(text)


def test_a_bad_sharding_names_its_instruction():
    module = parse_module("""
HloModule m
ENTRY e {
  p = f32[8,4] parameter(0), sharding={devices=[2,2,2]<=[8]}
  ROOT n = f32[8,4] negate(p)
}""")
    p = module.entry.parameters[0]
    with pytest.raises(ShardingError, match="instruction 'p'.*tiles 3 dimensions"):
        sharding_of(p, 8)
    assert issubclass(ShardingError, HloError)
    module.entry.parameters[0].attrs["sharding"] = "{devices=[2,1]0,9}"
    with pytest.raises(ShardingError, match="instruction 'p'.*outside 0..7"):
        sharding_of(p, 8)
    module.entry.parameters[0].attrs["sharding"] = "{devices=[2,1]0,1"
    with pytest.raises(ShardingError, match="instruction 'p'"):
        sharding_of(p, 8)


def test_shardy_sharding_read_against_its_mesh():
    attrs = {"frontend_attributes":
             '{xla.sdy.meshes={mesh = #sdy.mesh<["a"=2, "b"=4]>}}'}
    both, = parse_sdy_shardings('#sdy.sharding<@mesh, [{"b", "a"}, {}]>', attrs, "x")
    assert both == parse_sharding("{devices=[8,1]<=[2,4]T(1,0)}")
    b_only = parse_sdy_shardings('#sdy.sharding_per_value<[<@mesh, [{}, {"b"}]>, '
                                 '<@mesh, [{}]>]>', attrs, "x")
    assert b_only[0] == parse_sharding(
        "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}")
    assert b_only[1].is_replicated
    with pytest.raises(ShardingError, match="axis 'c'"):
        parse_sdy_shardings('#sdy.sharding<@mesh, [{"c"}]>', attrs, "x")
    with pytest.raises(ShardingError, match="'@other'"):
        parse_sdy_shardings('#sdy.sharding<@other, [{"a"}]>', attrs, "x")


def test_tile_assignment_array_matches_numpy_iota():
    s = parse_sharding("{devices=[2,2,2]<=[2,2,2]T(2,0,1)}")
    assert np.array_equal(s.array(), np.arange(8).reshape(2, 2, 2).transpose(2, 0, 1))
