"""Ops that read along a cut dim (slice, pad, reduce-window, a convolution's
spatial dims) kept cut by halo exchange, reshapes that split or merge a cut
dim, and reshards by collective-permute, as XLA's partitioner does them.
jax's programs (tests/python/data/spmd/windowed, made by the script there)
run partitioned in the reference interpreter against jax's outputs, with
XLA's collectives; hand-written ones (uneven cuts with NaN padding, halos
along two dims, windows out of a halo's reach) against one device. Before
these, every case here all-gathered the cut dim."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes.sharding_annotations import ShardingAnnotationRemover
from xla_gpu.hlo.passes.spmd import SpmdFallbackWarning, partition_module
from xla_gpu.hlo.passes.spmd.reshard import Emitter
from spmd_cases import MODULE_WITH_ADD, global_arrays, run_partitioned

DATA = Path(__file__).resolve().parents[1] / "data" / "spmd" / "windowed"
CASES = sorted(p.name.removesuffix(".pre.hlo") for p in DATA.glob("*.pre.hlo"))
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

# The collectives each stored case needs (XLA's too: checked below).
EXPECTED = {
    "halo_slice": {"collective-permute": 2},
    "halo_pad": {"collective-permute": 2},
    "halo_reduce_window": {"collective-permute": 2},
    # the 63-row difference and the 31-row max are uneven: the result is
    # gathered whole at the end
    "halo_stencil": {"collective-permute": 2, "all-gather": 1},
    "halo_conv1d": {"collective-permute": 2},
    "reshape_split": {},
    "reshape_merge": {},
    "reshape_split_minor": {},
    "mesh2d_device_order": {"collective-permute": 1},
    "mesh2d_axis_move": {"collective-permute": 1},
    "mesh2d_axes_swapped": {"all-to-all": 1, "collective-permute": 1},
    # other ops along a cut dim kept cut (before, each gathered the dim)
    "move_concatenate": {"all-to-all": 3},
    "move_reverse": {"collective-permute": 1},
    "move_update_row": {},
    "halo_interior_pad": {},
    "halo_dilated_window": {"collective-permute": 2},
    "conv_feature_cut": {"all-reduce": 1},
}


def _collectives(module) -> Counter:
    out: Counter = Counter()
    for comp in module.computations:
        for inst in comp.instructions:
            kind = inst.opcode.removesuffix("-start")
            if kind in KINDS:
                out[kind] += len(inst.operands) if kind == "all-reduce" else 1
    return out


def _no_fallback(text: str, n: int, args):
    """The partitioned run (a SpmdFallbackWarning is an error here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpmdFallbackWarning)
        return run_partitioned(text, n, args)


def test_the_stored_cases_are_here():
    assert CASES == sorted(EXPECTED)


@pytest.mark.parametrize("name", CASES)
def test_stored_case_matches_jax_without_fallback(name):
    npz = np.load(DATA / f"{name}.npz")
    n = int(npz["num_partitions"])
    text = (DATA / f"{name}.pre.hlo").read_text()
    if name == "halo_stencil":
        # its result is uneven: returned whole, which a note says
        with pytest.warns(SpmdFallbackWarning, match="returned whole"):
            got, result = run_partitioned(text, n, global_arrays(npz, "in"))
        assert all("returned whole" in note for note in result.notes)
    else:
        got, result = _no_fallback(text, n, global_arrays(npz, "in"))
        assert result.notes == []
    want = global_arrays(npz, "out")
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    assert _collectives(result.module) == Counter(EXPECTED[name])


@pytest.mark.parametrize("name", CASES)
def test_stored_case_uses_xla_collectives(name):
    xla = parse_module((DATA / f"{name}.partitioned.hlo").read_text())
    assert _collectives(xla) == Counter(EXPECTED[name])


def test_halo_chunks_stay_small():
    """The sliced rows stay 7 a device (56 over 8): nothing whole."""
    text = (DATA / "halo_slice.pre.hlo").read_text()
    npz = np.load(DATA / "halo_slice.npz")
    _, result = _no_fallback(text, 8, global_arrays(npz, "in"))
    shapes = [i.shape.dims for i in result.module.entry.instructions]
    assert (7, 4) in shapes and not any(s[0] >= 56 for s in shapes if len(s) == 2)
    permutes = [i for i in result.module.entry.instructions
                if i.opcode == "collective-permute"]
    # each sends at most a few edge rows, never a chunk's worth
    assert all(p.shape.dims[0] <= 4 for p in permutes)


# ------------------------------------------------------------ hand-written

@pytest.fixture
def nan_padding(monkeypatch):
    """Padding made of NaN: any padding read into a real result shows."""
    monkeypatch.setattr(Emitter, "padding_value", float("nan"))


def _one_device(text: str, args):
    single = parse_module(text)
    ShardingAnnotationRemover().run(single)
    out = evaluate(single, *args)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _check(text: str, n: int, args, fallback_ok=False):
    want = _one_device(text, args)
    if fallback_ok:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpmdFallbackWarning)
            got, result = run_partitioned(text, n, args)
    else:
        got, result = _no_fallback(text, n, args)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    return result


def _normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


MAX = """
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""


def test_uneven_windows_mask_the_padding(nan_padding):
    """10 rows over 4 devices (chunks of 3, the last one 1 real row): a
    window sum, a strided max, a pad with a negative edge and a strided
    slice, each kept cut by halos; the padding (NaN) never shows."""
    text = MODULE_WITH_ADD + MAX + """ENTRY e {
  x = f32[10,6] parameter(0)
  c = f32[10,6] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  e = f32[10,6] exponential(c)
  z = f32[] constant(0)
  w = f32[10,6] reduce-window(e, z), window={size=3x1 pad=1_1x0_0}, to_apply=add
  lo = f32[] constant(-inf)
  m = f32[5,6] reduce-window(e, lo), window={size=3x1 stride=2x1 pad=1_0x0_0}, to_apply=max
  v = f32[] constant(7)
  p = f32[11,6] pad(e, v), padding=-1_2x0_0
  s = f32[4,6] slice(e), slice={[1:9:2], [0:6]}
  ROOT out = (f32[10,6], f32[5,6], f32[11,6], f32[4,6]) tuple(w, m, p, s)
}"""
    result = _check(text, 4, [_normal(10, 6)], fallback_ok=True)
    kinds = _collectives(result.module)
    # every op exchanged halos; the uneven results are gathered whole
    # (the slice's 4 rows are one a device)
    assert kinds["collective-permute"] >= 4
    assert kinds["all-gather"] == 3
    assert all("returned whole" in note for note in result.notes)
    shapes = [i.shape.dims for i in result.module.entry.instructions
              if i.opcode in ("reduce-window", "pad", "slice")]
    assert (3, 6) in shapes and (2, 6) in shapes


def test_halos_along_two_cut_dims_reach_the_corners():
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[16,16] parameter(0), sharding={devices=[2,4]<=[8]}
  z = f32[] constant(0)
  ROOT w = f32[16,16] reduce-window(x, z), window={size=3x3 pad=1_1x1_1}, to_apply=add,
      sharding={devices=[2,4]<=[8]}
}"""
    result = _check(text, 8, [_normal(16, 16)])
    assert _collectives(result.module) == Counter({"collective-permute": 4})
    assert result.module.entry.root.shape.dims == (8, 4)


def test_pad_and_slice_with_stride_keep_their_cut():
    text = """
HloModule m
ENTRY e {
  x = f32[64,3] parameter(0), sharding={devices=[8,1]<=[8]}
  s = f32[30,3] slice(x), slice={[3:63:2], [0:3]}
  v = f32[] constant(-2)
  p = f32[32,3] pad(s, v), padding=1_1x0_0
  ROOT n = f32[32,3] negate(p), sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(64, 3)])
    kinds = _collectives(result.module)
    assert kinds["all-gather"] == 0 and kinds["collective-permute"] >= 2
    assert result.module.entry.root.shape.dims == (4, 3)


def test_a_window_out_of_a_halo_reach_is_sent_piece_by_piece():
    """Taking 8 rows of 64 over 8 devices reads far past the neighbours:
    each device's row comes from the device holding it, packed into 4
    collective-permutes (XLA's compact halo exchange; before, the dim was
    gathered), the result correct, no warning."""
    text = """
HloModule m
ENTRY e {
  x = f32[64,3] parameter(0), sharding={devices=[8,1]<=[8]}
  s = f32[8,3] slice(x), slice={[20:28], [0:3]}
  ROOT n = f32[8,3] negate(s)
}"""
    result = _check(text, 8, [_normal(64, 3)])
    assert _collectives(result.module) == Counter({"collective-permute": 4})


def test_reshape_split_and_merge_keep_the_cut():
    text = """
HloModule m
ENTRY e {
  x = f32[64] parameter(0), sharding={devices=[8]<=[8]}
  r = f32[4,16] reshape(x)
  t = f32[4,16] tanh(r)
  b = f32[4,2,8] reshape(t)
  ROOT m = f32[64] reshape(b), sharding={devices=[8]<=[8]}
}"""
    result = _check(text, 8, [_normal(64)])
    assert _collectives(result.module) == Counter()
    shapes = {i.opcode: i.shape.dims for i in result.module.entry.instructions}
    assert shapes["tanh"] == (1, 8)          # 4 x 2 chunks of the 4 x 16


def test_a_reshape_whose_chunks_would_break_moves_the_cut_first():
    """[8,8] cut on its minor dim cannot be a [64] chunk: the cut moves to
    the major dim (one all-to-all) first."""
    text = """
HloModule m
ENTRY e {
  x = f32[8,8] parameter(0), sharding={devices=[1,8]<=[8]}
  ROOT r = f32[64] reshape(x), sharding={devices=[8]<=[8]}
}"""
    result = _check(text, 8, [_normal(8, 8)])
    assert _collectives(result.module) == Counter({"all-to-all": 1})


def test_reshard_to_another_device_order_is_one_permute():
    text = """
HloModule m
ENTRY e {
  x = f32[16,4] parameter(0), sharding={devices=[8,1]<=[8]}
  n = f32[16,4] negate(x)
  ROOT c = f32[16,4] custom-call(n), custom_call_target="Sharding", sharding={devices=[8,1]7,6,5,4,3,2,1,0}
}"""
    result = _check(text, 8, [_normal(16, 4)])
    assert _collectives(result.module) == Counter({"collective-permute": 1})


def test_reshard_to_a_finer_cut_of_replicas_is_a_permute_and_a_slice():
    """Rows over 2 devices (4 replicas each) to rows over 4 devices in
    another order (2 replicas each)."""
    text = """
HloModule m
ENTRY e {
  x = f32[16,4] parameter(0), sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}
  n = f32[16,4] negate(x)
  ROOT c = f32[16,4] custom-call(n), custom_call_target="Sharding", sharding={devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}
}"""
    result = _check(text, 8, [_normal(16, 4)])
    assert _collectives(result.module) == Counter({"collective-permute": 1})
    assert any(i.opcode == "dynamic-slice" and i.shape.dims == (4, 4)
               for i in result.module.entry.instructions)


@pytest.mark.parametrize("sharding", [
    "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",    # replicas of each chunk
    "{devices=[8,1]7,6,5,4,3,2,1,0}",                      # devices in reverse
    "{devices=[4,2]<=[2,4]T(1,0)}",                        # both dims cut
])
def test_halos_follow_the_tile_assignment(sharding):
    text = MODULE_WITH_ADD + f"""ENTRY e {{
  x = f32[16,4] parameter(0), sharding={sharding}
  z = f32[] constant(0)
  w = f32[16,4] reduce-window(x, z), window={{size=5x1 pad=2_2x0_0}}, to_apply=add
  ROOT n = f32[16,4] negate(w), sharding={sharding}
}}"""
    result = _check(text, 8, [_normal(16, 4)])
    kinds = _collectives(result.module)
    assert kinds["all-gather"] == 0 and kinds["collective-permute"] == 2


# ------------------------------------------- windows past the neighbours

@pytest.mark.parametrize("size,sharding,sent", [
    (7, "{devices=[8,1]<=[8]}", [1, 1, 2, 2]),
    (7, "{devices=[8,1]7,6,5,4,3,2,1,0}", [1, 1, 2, 2]),           # devices in reverse
    (11, "{devices=[4,1,2]<=[8] last_tile_dim_replicate}", [1, 1, 4, 4]),  # replicas
])
def test_a_wide_window_takes_halos_from_several_devices(nan_padding, size, sharding, sent):
    """A window reaching past the neighbours (7 over chunks of 2 rows, 11
    over chunks of 4): a whole chunk from each neighbour and the edge rows
    of the devices past them (a pair of permutes per distance, as XLA),
    nothing gathered."""
    text = MODULE_WITH_ADD + f"""ENTRY e {{
  x = f32[16,4] parameter(0), sharding={sharding}
  z = f32[] constant(0)
  w = f32[16,4] reduce-window(x, z), window={{size={size}x1 pad={size // 2}_{size // 2}x0_0}},
      to_apply=add
  ROOT n = f32[16,4] negate(w), sharding={sharding}
}}"""
    result = _check(text, 8, [_normal(16, 4)])
    assert _collectives(result.module) == Counter({"collective-permute": 4})
    permutes = [i for i in result.module.entry.instructions
                if i.opcode == "collective-permute"]
    assert sorted(p.shape.dims[0] for p in permutes) == sent


def test_a_window_spanning_the_whole_dim_gathers_it():
    """A running sum over all 16 rows cut into chunks of 2 (each window
    reaching 7 devices back): halos would move the whole dim, so it is
    gathered instead (XLA's bound, as its cumulative sums)."""
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[16,4] parameter(0), sharding={devices=[8,1]<=[8]}
  z = f32[] constant(0)
  ROOT w = f32[16,4] reduce-window(x, z), window={size=16x1 pad=15_0x0_0}, to_apply=add,
      sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(16, 4)])
    assert _collectives(result.module) == Counter({"all-gather": 1})


def test_wide_uneven_and_dilated_windows_mask_the_padding(nan_padding):
    """13 rows over 8 devices (chunks of 2, the last one padding): a max
    of 9, a sum of 6 with uneven edges and a dilated window all reach past
    the neighbours; the padding (NaN) never shows."""
    text = MODULE_WITH_ADD + MAX + """ENTRY e {
  x = f32[13,3] parameter(0)
  c = f32[13,3] custom-call(x), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
  e = f32[13,3] exponential(c)
  lo = f32[] constant(-inf)
  m = f32[16,3] reduce-window(e, lo), window={size=9x1 pad=4_7x0_0}, to_apply=max
  z = f32[] constant(0)
  s = f32[16,3] reduce-window(e, z), window={size=6x1 pad=2_7x0_0}, to_apply=add
  d = f32[16,3] reduce-window(e, z), window={size=3x1 pad=4_6x0_0 rhs_dilate=3x1}, to_apply=add
  ROOT out = (f32[16,3], f32[16,3], f32[16,3]) tuple(m, s, d)
}"""
    result = _check(text, 8, [_normal(13, 3)])
    kinds = _collectives(result.module)
    # distances (left, right): max 2 and 2, sum 1 and 2, dilated 2 and 1
    assert kinds == Counter({"collective-permute": 10})


def test_a_wide_kernel_along_a_cut_length_takes_far_halos(nan_padding):
    """A convolution with a kernel of 7 along a length cut into chunks of
    2: halos from two devices each side, no gather."""
    text = """
HloModule m
ENTRY e {
  x = f32[2,3,16] parameter(0), sharding={devices=[1,1,8]<=[8]}
  w = f32[4,3,7] parameter(1), sharding={replicated}
  ROOT c = f32[2,4,16] convolution(x, w), window={size=7 pad=3_3}, dim_labels=bf0_oi0->bf0,
      sharding={devices=[1,1,8]<=[8]}
}"""
    result = _check(text, 8, [_normal(2, 3, 16), _normal(4, 3, 7, seed=1)])
    kinds = _collectives(result.module)
    assert kinds == Counter({"collective-permute": 4})
    assert result.module.entry.root.shape.dims == (2, 4, 2)


def test_a_slice_far_away_is_two_collective_permutes():
    """A slice's one-row windows reaching far (rows 5..12 of 16 in chunks
    of 2 for chunks of 1): each device's row straight from its holder,
    packed into two collective-permutes as XLA's compact halo exchange
    does (not a pair per distance; before, the rows were gathered)."""
    text = """
HloModule m
ENTRY e {
  x = f32[16,3] parameter(0), sharding={devices=[8,1]<=[8]}
  s = f32[8,3] slice(x), slice={[5:13], [0:3]}
  ROOT n = f32[8,3] negate(s), sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(16, 3)])
    assert _collectives(result.module) == Counter({"collective-permute": 2})


def test_far_and_near_halos_along_two_cut_dims(nan_padding):
    """Rows in chunks of 3 with a window of 9 (two devices each side),
    columns in chunks of 6 with a window of 3 (one): the column halos
    carry the row halos, corners included."""
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[12,12] parameter(0), sharding={devices=[4,2]<=[8]}
  z = f32[] constant(0)
  ROOT w = f32[12,12] reduce-window(x, z), window={size=9x3 pad=4_4x1_1}, to_apply=add,
      sharding={devices=[4,2]<=[8]}
}"""
    result = _check(text, 8, [_normal(12, 12)])
    assert _collectives(result.module) == Counter({"collective-permute": 6})
    assert result.module.entry.root.shape.dims == (3, 6)
