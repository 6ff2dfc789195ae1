"""Ops along a cut dim that once gathered it and now keep it cut as XLA's
partitioner does: slices, pads and windows shifting the dim by more than a
chunk (XLA's compact halo exchange: each device's window cut into pieces,
each from the one device holding it, packed into few
collective-permutes; or a pair of permutes per distance where the reach
is short), and a concatenate of uneven rows on a 2-D mesh whose other
axis cuts the columns (the rows' cut moved into the columns by
all-to-alls within each column group). jax's programs
(tests/python/data/spmd/kept_cut, made by the script there) against jax's
outputs and XLA's collectives; hand-written ones (uneven cuts with NaN
padding, replicas, 2-D meshes) against one device, run partitioned on
emulated devices in the reference interpreter."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes.sharding_annotations import ShardingAnnotationRemover
from xla_gpu.hlo.passes.spmd import SpmdFallbackWarning
from xla_gpu.hlo.passes.spmd.far_halo import compact_choice, compact_plan
from xla_gpu.hlo.passes.spmd.reshard import Emitter
from spmd_cases import MODULE_WITH_ADD, run_partitioned
from spmd_cases import collective_counts, run_stored_case

KEPT_CUT = Path(__file__).resolve().parents[1] / "data" / "spmd" / "kept_cut"


@pytest.fixture(autouse=True)
def nan_padding(monkeypatch):
    monkeypatch.setattr(Emitter, "padding_value", float("nan"))


def _normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _check(text: str, n: int, args):
    """The partitioned run against one device; nothing computed whole but
    an uneven result returned whole."""
    single = parse_module(text)
    ShardingAnnotationRemover().run(single)
    want = evaluate(single, *args)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpmdFallbackWarning)
        got, result = run_partitioned(text, n, args)
    assert all("returned whole" in note for note in result.notes), result.notes
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    return result


# ------------------------------------------------------------ the packing

def test_pieces_are_packed_as_xlas_compact_exchange():
    """rows 20..59 of 64 in chunks of 8, the result in chunks of 5: a whole
    chunk to five devices, rows 6..7 of one, rows 0..2 of three (XLA's
    text for a[20:60] sends exactly these)."""
    starts = [20 + 5 * i for i in range(8)]
    assert compact_choice(starts, 5, 8, 8) is True
    _, permutes = compact_plan(starts, 5, 8, 8)
    assert permutes == [(0, 8, [(2, 0), (3, 1), (4, 3), (5, 4), (6, 7)]),
                        (6, 8, [(3, 2)]),
                        (0, 3, [(3, 0), (4, 2), (6, 5)])]


def test_near_windows_and_whole_dim_windows_are_not_compact():
    # a halo of one row each side: a pair of permutes
    assert compact_choice([8 * i - 1 for i in range(8)], 10, 8, 8) is False
    # windows of 16 rows in chunks of 2 (a running sum): the dim is gathered
    assert compact_choice([2 * i - 15 for i in range(8)], 17, 2, 8) is None


def test_a_padding_chunk_of_the_result_reads_nothing():
    """rows 59..60 of 64 over 4 devices (chunks of 16): the result's chunks
    2 and 3 are padding; only two rows move, one permute each."""
    starts = [59 + i for i in range(4)]
    _, permutes = compact_plan(starts, 1, 16, 4, real=[True, True, False, False])
    assert [pairs for _, _, pairs in permutes] == [[(3, 0)], [(3, 1)]]


# ------------------------------------------------------------ hand-written

@pytest.mark.parametrize("op,rows,out,sharding,permutes", [
    # rows 20..27 of 64: each device's row from the device holding it
    ("slice(c), slice={[20:28], [0:3]}", 64, 8, "{devices=[8,1]<=[8]}", 4),
    # uneven rows (61 over 8: chunks of 8, the last of 5) shifted by 21
    ("slice(c), slice={[21:58], [0:3]}", 61, 37, "{devices=[8,1]<=[8]}", None),
    # a strided slice far away
    ("slice(c), slice={[30:61:2], [0:3]}", 61, 16, "{devices=[8,1]<=[8]}", None),
    # a pad shifting the rows by 40 (the padding value on the first devices)
    ("pad(c, z), padding=40_0x0_0", 24, 64, "{devices=[8,1]<=[8]}", None),
    # a negative pad cutting 30 rows off the front of uneven rows
    ("pad(c, z), padding=-30_3x0_0", 61, 34, "{devices=[8,1]<=[8]}", None),
    # replicas (4 chunks, each on 2 devices)
    ("slice(c), slice={[40:56], [0:3]}", 64, 16,
     "{devices=[4,1,2]<=[8] last_tile_dim_replicate}", None),
    # a 2-D mesh, the rows cut over its second axis
    ("slice(c), slice={[40:56], [0:3]}", 64, 16, "{devices=[4,2]0,2,4,6,1,3,5,7}", None),
])
def test_a_far_shift_is_sent_piece_by_piece(op, rows, out, sharding, permutes):
    """Before, each of these gathered the rows (one all-gather per cut)."""
    cols = 3 if "devices=[4,2]" not in sharding else 4
    op = op.replace("[0:3]", f"[0:{cols}]")
    text = f"""ENTRY e {{
  x = f32[{rows},{cols}] parameter(0)
  c = f32[{rows},{cols}] custom-call(x), custom_call_target="Sharding", sharding={sharding}
  z = f32[] constant(0.5)
  s = f32[{out},{cols}] {op}
  e = f32[{out},{cols}] exponential(s)
  z0 = f32[] constant(0)
  ROOT r = f32[{cols}] reduce(e, z0), dimensions={{0}}, to_apply=add
}}"""
    result = _check(MODULE_WITH_ADD + text, 8, [_normal(rows, cols)])
    kinds = collective_counts(result.module)
    assert kinds["all-gather"] == 0, kinds
    assert kinds["collective-permute"] >= 1
    if permutes is not None:
        assert kinds["collective-permute"] == permutes
    # the exponential ran on the result's chunks
    chunk = -(-out // 4) if "devices=[4" in sharding else -(-out // 8)
    assert [i.shape.dims[0] for i in result.module.entry.instructions
            if i.opcode == "exponential"] == [chunk]


def test_a_window_far_from_its_chunk_is_sent_piece_by_piece():
    """A window of 2 padded by 20 on the left and -19 on the right reads
    rows 20 before its chunk: two permutes (XLA's), the window run on
    chunks, the padding masked to the init value."""
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[64,4] parameter(0), sharding={devices=[8,1]<=[8]}
  z = f32[] constant(0)
  ROOT w = f32[64,4] reduce-window(x, z), window={size=2x1 pad=20_-19x0_0}, to_apply=add,
      sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(64, 4)])
    assert collective_counts(result.module) == Counter({"collective-permute": 2})
    assert result.module.entry.root.shape.dims == (8, 4)


@pytest.mark.parametrize("op,out", [
    # interior padding shifted by 41 rows (61 rows in chunks of 8)
    ("pad(c, z), padding=41_-8_1x0_0", 154),
    # a dilated base read 40 positions before each device's chunk
    ("reduce-window(c, z), window={size=1x1 pad=40_-37x0_0 lhs_dilate=2x1}, to_apply=add",
     124),
    # the same, strided
    ("reduce-window(c, z), window={size=1x1 stride=2x1 pad=50_-40x0_0 lhs_dilate=3x1}, "
     "to_apply=add", 96),
])
def test_far_interior_padding_and_dilated_windows(op, out):
    """Interior padding and dilated bases (windows counting the operand's
    elements) far from each chunk: sent piece by piece too (before: the
    rows were gathered); the padding of the uneven rows (NaN) never shows."""
    text = MODULE_WITH_ADD + f"""ENTRY e {{
  x = f32[61,3] parameter(0)
  c = f32[61,3] custom-call(x), custom_call_target="Sharding", sharding={{devices=[8,1]<=[8]}}
  z = f32[] constant(0.5)
  s = f32[{out},3] {op}
  e = f32[{out},3] exponential(s), sharding={{devices=[8,1]<=[8]}}
  z0 = f32[] constant(0)
  ROOT r = f32[3] reduce(e, z0), dimensions={{0}}, to_apply=add
}}"""
    result = _check(text, 8, [_normal(61, 3)])
    kinds = collective_counts(result.module)
    assert kinds["all-gather"] == 0 and kinds["collective-permute"] >= 1, kinds


@pytest.mark.parametrize("a,b,tiles", [(10, 7, "[4,2]0,4,1,5,2,6,3,7"), (9, 7, "[2,4]<=[8]"),
                                       (5, 7, "[4,2]<=[8]")])
def test_concatenate_of_uneven_rows_on_a_2d_mesh_keeps_the_cut(a, b, tiles):
    """Rows cut unevenly, columns cut by the other mesh axis: the rows'
    cut moves into the columns within each column group (one all-to-all
    per operand, the padding sliced off), the rows join whole, the cut
    moves back (before: the rows were gathered)."""
    text = MODULE_WITH_ADD + f"""ENTRY e {{
  x = f32[{a},8] parameter(0)
  p = f32[{a},8] custom-call(x), custom_call_target="Sharding", sharding={{devices={tiles}}}
  y = f32[{b},8] parameter(1)
  q = f32[{b},8] custom-call(y), custom_call_target="Sharding", sharding={{devices={tiles}}}
  c = f32[{a + b},8] concatenate(p, q), dimensions={{0}}
  t = f32[{a + b},8] tanh(c), sharding={{devices={tiles}}}
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(t, z), dimensions={{0}}, to_apply=add
}}"""
    result = _check(text, 8, [_normal(a, 8), _normal(b, 8, seed=1)])
    kinds = collective_counts(result.module)
    assert kinds["all-gather"] == 0 and kinds["all-to-all"] == 3, kinds
    assert [i.shape.dims for i in result.module.entry.instructions
            if i.opcode == "concatenate"] == [(a + b, 1)]


# ------------------------------------------------------------ jax's programs

# The collectives of each stored program, XLA's too (before, each gathered
# its cut rows: an all-gather, no collective-permute or all-to-all).
STORED = {
    "slice_far": {"collective-permute": 3},
    "slice_far_rows": {"collective-permute": 4},
    "pad_far": {"collective-permute": 2},
    "slice_far_2d": {"collective-permute": 2},
    "window_far_shift": {"collective-permute": 2},
    "pad_interior_far": {"collective-permute": 2},
    "window_base_dilation_far": {"collective-permute": 2},
    "uneven_concatenate_2d": {"all-to-all": 3},
}


@pytest.mark.parametrize("name", sorted(STORED))
def test_stored_program_matches_jax_with_xlacollective_counts(name):
    result = run_stored_case(KEPT_CUT, name, STORED[name])
    assert not result.notes, result.notes
