"""Ops along a cut dim that the partitioner keeps cut the way XLA's
partitioner does (before these, each gathered the dim whole or ran the
op whole): a concatenate moving its cut to another dim (all-to-alls), a
reverse taking the mirrored chunks (one collective-permute), a
dynamic-update-slice inside one chunk (no collective), a pad with interior
padding and a dilated window or base (halo exchange), a reverse of an
uneven cut (the chunks of the value padded on the left), a concatenate of
uneven operands (all-to-alls), a convolution over cut input features (a
partial convolution and an all-reduce) or over the kernel's cut output
features (the kernel slice, no collective), a grouped (depthwise) or
batch-grouped convolution over cut groups (no collective), and a batched dot keeping its
larger operand in place; jax's programs of tests/python/data/spmd/kept_cut
against jax's outputs and XLA's collectives. Each runs partitioned on emulated
devices in the reference interpreter against one device, padding made of
NaN where cuts are uneven (padding read into a real result shows)."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes.sharding_annotations import ShardingAnnotationRemover
from xla_gpu.hlo.passes.spmd import SpmdFallbackWarning
from xla_gpu.hlo.passes.spmd.reshard import Emitter
from spmd_cases import MODULE_WITH_ADD, run_partitioned
from spmd_cases import collective_counts, run_stored_case


@pytest.fixture(autouse=True)
def nan_padding(monkeypatch):
    monkeypatch.setattr(Emitter, "padding_value", float("nan"))


def _one_device(text: str, args):
    single = parse_module(text)
    ShardingAnnotationRemover().run(single)
    out = evaluate(single, *args)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _check(text: str, n: int, args, returned_whole: bool = False):
    """The partitioned run against one device; no op computed whole (an
    uneven result returned whole is the only note allowed)."""
    want = _one_device(text, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if returned_whole else "error", SpmdFallbackWarning)
        got, result = run_partitioned(text, n, args)
    assert all("returned whole" in note for note in result.notes), result.notes
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    return result


def _normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _shapes(module, opcode):
    return [i.shape.dims for i in module.entry.instructions if i.opcode == opcode]


# ------------------------------------------------------------ concatenate

def test_concatenate_along_cut_rows_moves_the_cut_to_the_columns():
    """XLA's: rows cut 8 ways move to the 16 columns (one all-to-all per
    operand), the chunks concatenate locally, the cut moves back."""
    text = """
HloModule m
ENTRY e {
  a = f32[32,16] parameter(0), sharding={devices=[8,1]<=[8]}
  b = f32[32,16] parameter(1), sharding={devices=[8,1]<=[8]}
  ROOT c = f32[64,16] concatenate(a, b), dimensions={0}, sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(32, 16), _normal(32, 16, seed=1)])
    assert collective_counts(result.module) == Counter({"all-to-all": 3})
    assert _shapes(result.module, "concatenate") == [(64, 2)]


def test_concatenate_on_a_2d_mesh_merges_the_cut_into_the_columns():
    text = """
HloModule m
ENTRY e {
  a = f32[8,16] parameter(0), sharding={devices=[2,4]<=[8]}
  b = f32[16,16] parameter(1), sharding={devices=[2,4]<=[8]}
  ROOT c = f32[24,16] concatenate(a, b), dimensions={0}, sharding={devices=[2,4]<=[8]}
}"""
    result = _check(text, 8, [_normal(8, 16), _normal(16, 16, seed=1)])
    kinds = collective_counts(result.module)
    assert kinds["all-gather"] == 0 and kinds["all-to-all"] == 3
    assert _shapes(result.module, "concatenate") == [(24, 2)]


def test_concatenate_with_no_dim_to_move_to_gathers_the_rows():
    """4 columns cannot take a cut of 8: the rows are gathered (XLA too)."""
    text = """
HloModule m
ENTRY e {
  a = f32[32,4] parameter(0), sharding={devices=[8,1]<=[8]}
  b = f32[32,4] parameter(1), sharding={devices=[8,1]<=[8]}
  ROOT c = f32[64,4] concatenate(a, b), dimensions={0}, sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(32, 4), _normal(32, 4, seed=1)])
    assert collective_counts(result.module) == Counter({"all-gather": 2})


@pytest.mark.parametrize("a,b,n", [(10, 6, 4), (8, 6, 4), (5, 7, 8), (10, 10, 4)])
def test_concatenate_of_uneven_rows_moves_the_cut_to_the_columns(a, b, n):
    """Operands cut unevenly along the rows move their padded chunks to
    the columns too (XLA's): the padding is sliced off once the rows are
    whole, before the join; an uneven result is padded for the way back.
    Before, the rows were gathered."""
    text = f"""
HloModule m
ENTRY e {{
  x = f32[{a},8] parameter(0)
  p = f32[{a},8] custom-call(x), custom_call_target="Sharding", sharding={{devices=[{n},1]<=[{n}]}}
  y = f32[{b},8] parameter(1)
  q = f32[{b},8] custom-call(y), custom_call_target="Sharding", sharding={{devices=[{n},1]<=[{n}]}}
  c = f32[{a + b},8] concatenate(p, q), dimensions={{0}}
  ROOT t = f32[{a + b},8] tanh(c), sharding={{devices=[{n},1]<=[{n}]}}
}}"""
    result = _check(text, n, [_normal(a, 8), _normal(b, 8, seed=1)],
                    returned_whole=(a + b) % n != 0)
    kinds = collective_counts(result.module)
    # (an all-gather: only the uneven result returned whole)
    assert kinds == +Counter({"all-to-all": 3, "all-gather": int((a + b) % n != 0)})
    assert _shapes(result.module, "concatenate") == [(a + b, 8 // n)]


# ------------------------------------------------------------ reverse

def test_reverse_of_cut_rows_is_one_collective_permute():
    text = """
HloModule m
ENTRY e {
  x = f32[64,4] parameter(0), sharding={devices=[8,1]<=[8]}
  r = f32[64,4] reverse(x), dimensions={0}
  ROOT n = f32[64,4] negate(r)
}"""
    result = _check(text, 8, [_normal(64, 4)])
    assert collective_counts(result.module) == Counter({"collective-permute": 1})
    assert _shapes(result.module, "reverse") == [(8, 4)]
    # the result stays cut in the devices' order (as jax states it)
    assert str(result.output_shardings[0]) == "{devices=[8,1]<=[8]}"


def test_reverse_along_both_cut_dims_of_a_2d_mesh():
    text = """
HloModule m
ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[2,4]<=[8]}
  ROOT r = f32[8,16] reverse(x), dimensions={0,1}, sharding={devices=[2,4]<=[8]}
}"""
    result = _check(text, 8, [_normal(8, 16)])
    assert collective_counts(result.module) == Counter({"collective-permute": 1})


@pytest.mark.parametrize("rows,n,permutes", [
    (10, 4, 2),     # chunks of 3, 2 of padding: parts of two chunks
    (13, 4, 2),
    (5, 4, 2),      # 3 of padding, more than a chunk: from two chunks back
    (6, 4, 1),      # 2 of padding, a whole chunk: one chunk back
    (17, 8, 2),
])
def test_reverse_of_uneven_rows_pads_them_on_the_left(rows, n, permutes):
    """Reversed, the padding would come first: each device takes its
    chunk of the rows padded on the left instead (XLA's), straight from
    the one or two devices holding its parts; before, the rows were
    gathered."""
    text = f"""
HloModule m
ENTRY e {{
  x = f32[{rows},4] parameter(0)
  c = f32[{rows},4] custom-call(x), custom_call_target="Sharding", sharding={{devices=[{n},1]<=[{n}]}}
  e = f32[{rows},4] exponential(c)
  r = f32[{rows},4] reverse(e), dimensions={{0}}
  ROOT n = f32[{rows},4] negate(r), sharding={{devices=[{n},1]<=[{n}]}}
}}"""
    result = _check(text, n, [_normal(rows, 4)], returned_whole=True)
    # (the one all-gather: the uneven result returned whole)
    assert collective_counts(result.module) == Counter({"collective-permute": permutes,
                                                   "all-gather": 1})
    assert _shapes(result.module, "reverse") == [(-(-rows // n), 4)]


def test_reverse_of_uneven_rows_and_even_columns_on_a_2d_mesh():
    """The even columns take the mirrored chunks (one collective-permute),
    the uneven rows their left-padded chunks (two)."""
    text = """
HloModule m
ENTRY e {
  x = f32[10,16] parameter(0)
  c = f32[10,16] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,2]<=[2,4]T(1,0)}
  r = f32[10,16] reverse(c), dimensions={0,1}
  ROOT n = f32[10,16] negate(r), sharding={devices=[4,2]<=[2,4]T(1,0)}
}"""
    result = _check(text, 8, [_normal(10, 16)], returned_whole=True)
    # (the two all-gathers: the uneven result returned whole, dim by dim)
    assert collective_counts(result.module) == Counter({"collective-permute": 3,
                                                   "all-gather": 2})
    assert _shapes(result.module, "reverse") == [(3, 8)]


# ------------------------------------------------------------ dynamic-update-slice

DUS_ROW = """
HloModule m
ENTRY e {
  x = f32[64,4] parameter(0), sharding={devices=[8,1]<=[8]}
  u = f32[1,4] parameter(1), sharding={replicated}
  i = s32[] parameter(2), sharding={replicated}
  z = s32[] constant(0)
  d = f32[64,4] dynamic-update-slice(x, u, i, z)
  ROOT n = f32[64,4] negate(d), sharding={devices=[8,1]<=[8]}
}"""


@pytest.mark.parametrize("index", [0, 13, 63, 100, -5])
def test_dynamic_update_slice_of_one_row_writes_where_it_falls(index):
    """XLA's single-partition update: every device holds the row; the one
    whose chunk the (clamped) offset falls in writes it; no collective."""
    result = _check(DUS_ROW, 8, [_normal(64, 4), _normal(1, 4, seed=1), np.int32(index)])
    assert collective_counts(result.module) == Counter()
    assert _shapes(result.module, "dynamic-update-slice") == [(8, 4)]


def test_dynamic_update_slice_with_an_unsigned_offset_past_the_end():
    """u32 4000000000 clamps to the last row (not a negative s32)."""
    text = DUS_ROW.replace("i = s32[] parameter(2)", "i = u32[] parameter(2)").replace(
        "z = s32[] constant(0)", "z = u32[] constant(0)")
    result = _check(text, 8, [_normal(64, 4), _normal(1, 4, seed=1), np.uint32(4000000000)])
    assert collective_counts(result.module) == Counter()


def test_dynamic_update_slice_at_a_constant_offset_inside_a_chunk():
    text = """
HloModule m
ENTRY e {
  x = f32[64,4] parameter(0), sharding={devices=[8,1]<=[8]}
  u = f32[4,4] parameter(1), sharding={replicated}
  i = s32[] constant(10)
  z = s32[] constant(0)
  ROOT d = f32[64,4] dynamic-update-slice(x, u, i, z), sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(64, 4), _normal(4, 4, seed=1)])
    assert collective_counts(result.module) == Counter()


def test_dynamic_update_slice_of_uneven_rows_and_cut_columns():
    """10 rows over 2 devices by 4 column chunks; the update (one row, all
    columns) is cut with the columns."""
    text = """
HloModule m
ENTRY e {
  x = f32[10,8] parameter(0)
  c = f32[10,8] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,2]<=[8]}
  u = f32[1,8] parameter(1)
  i = s64[] parameter(2)
  z = s64[] constant(0)
  d = f32[10,8] dynamic-update-slice(c, u, i, z)
  ROOT n = f32[10,8] negate(d), sharding={devices=[4,2]<=[8]}
}"""
    for index in (9, 4, 3):
        result = _check(text, 8, [_normal(10, 8), _normal(1, 8, seed=1), np.int64(index)],
                        returned_whole=True)
        assert _shapes(result.module, "dynamic-update-slice") == [(3, 4)]


def test_dynamic_update_slice_across_chunks_gathers_the_rows():
    """4 rows at a dynamic offset may straddle two chunks: the rows are
    gathered (XLA too), the result cut again."""
    text = """
HloModule m
ENTRY e {
  x = f32[64,4] parameter(0), sharding={devices=[8,1]<=[8]}
  u = f32[4,4] parameter(1), sharding={replicated}
  i = s32[] parameter(2), sharding={replicated}
  z = s32[] constant(0)
  ROOT d = f32[64,4] dynamic-update-slice(x, u, i, z), sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(64, 4), _normal(4, 4, seed=1), np.int32(6)])
    assert collective_counts(result.module) == Counter({"all-gather": 1})


# ------------------------------------------------------------ dynamic-slice

def test_dynamic_slice_along_a_cut_dim_gathers_it_as_xla():
    """XLA partitions a dynamic-slice only along dims it does not slice: a
    chunk's worth of rows at a dynamic offset gathers the rows."""
    text = """
HloModule m
ENTRY e {
  x = f32[64,4] parameter(0), sharding={devices=[8,1]<=[8]}
  i = s32[] parameter(1), sharding={replicated}
  z = s32[] constant(0)
  ROOT d = f32[8,4] dynamic-slice(x, i, z), dynamic_slice_sizes={8,4}
}"""
    result = _check(text, 8, [_normal(64, 4), np.int32(8)])
    assert collective_counts(result.module) == Counter({"all-gather": 1})


def test_dynamic_slice_of_uncut_rows_keeps_the_column_cut():
    text = """
HloModule m
ENTRY e {
  x = f32[64,16] parameter(0), sharding={devices=[1,8]<=[8]}
  i = s32[] parameter(1), sharding={replicated}
  j = s32[] parameter(2), sharding={replicated}
  ROOT d = f32[8,16] dynamic-slice(x, i, j), dynamic_slice_sizes={8,16}
}"""
    result = _check(text, 8, [_normal(64, 16), np.int32(60), np.int32(3)])
    assert collective_counts(result.module) == Counter()
    assert _shapes(result.module, "dynamic-slice")[-1] == (8, 2)


# ------------------------------------------------------------ interior padding

@pytest.mark.parametrize("n_in,config,n,permutes", [
    (64, (0, 1, 1), 8, 0),        # each chunk spreads into its own result chunk
    (16, (1, 1, 2), 4, 0),
    (64, (3, 0, 1), 8, 2),        # shifted: halos both ways
    (16, (-1, 2, 1), 8, 1),
    (10, (0, 0, 1), 4, None),     # uneven operand and result
    (12, (2, 3, 3), 4, None),
])
def test_pad_with_interior_padding_keeps_the_cut(n_in, config, n, permutes):
    low, high, interior = config
    n_out = (n_in - 1) * (interior + 1) + 1 + low + high
    text = f"""
HloModule m
ENTRY e {{
  x = f32[{n_in},3] parameter(0)
  c = f32[{n_in},3] custom-call(x), custom_call_target="Sharding", sharding={{devices=[{n},1]<=[{n}]}}
  v = f32[] constant(7)
  p = f32[{n_out},3] pad(c, v), padding={low}_{high}_{interior}x0_0
  ROOT r = f32[{n_out},3] custom-call(p), custom_call_target="Sharding", sharding={{devices=[{n},1]<=[{n}]}}
}}"""
    result = _check(text, n, [_normal(n_in, 3)], returned_whole=True)
    kinds = collective_counts(result.module)
    # the pad ran on chunks: the only gather is of an uneven result
    assert kinds["all-gather"] == (0 if n_out % n == 0 else 1)
    if permutes is not None:
        assert kinds["collective-permute"] == permutes
    assert all(shape[0] < n_out for shape in _shapes(result.module, "pad"))


# ------------------------------------------------------------ dilated windows

def test_dilated_window_along_cut_rows_is_a_halo_exchange():
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[64,4] parameter(0), sharding={devices=[8,1]<=[8]}
  z = f32[] constant(0)
  ROOT w = f32[64,4] reduce-window(x, z), window={size=3x1 pad=2_2x0_0 rhs_dilate=2x1},
      to_apply=add, sharding={devices=[8,1]<=[8]}
}"""
    result = _check(text, 8, [_normal(64, 4)])
    assert collective_counts(result.module) == Counter({"collective-permute": 2})
    assert _shapes(result.module, "reduce-window") == [(8, 4)]


def test_dilated_strided_window_over_uneven_rows():
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[10,4] parameter(0)
  c = f32[10,4] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  z = f32[] constant(0)
  w = f32[5,4] reduce-window(c, z), window={size=2x1 stride=2x1 pad=1_1x0_0 rhs_dilate=3x1},
      to_apply=add
  ROOT n = f32[5,4] negate(w), sharding={devices=[4,1]<=[4]}
}"""
    result = _check(text, 4, [_normal(10, 4)], returned_whole=True)
    assert collective_counts(result.module)["collective-permute"] >= 1
    assert (2, 4) in _shapes(result.module, "reduce-window")


@pytest.mark.parametrize("n_in,n,size,stride,lo,hi,base,rhs,init,permutes", [
    (64, 8, 3, 1, 1, 2, 2, 1, "0", 1),      # each chunk reads its right neighbour
    (64, 8, 2, 2, 0, 1, 2, 1, "0", 0),      # each result chunk its own chunk
    (16, 4, 3, 1, 2, 4, 3, 2, "-inf", 1),   # dilated both ways
    (10, 4, 3, 2, 1, 1, 2, 1, "0", None),   # uneven operand and result
    (12, 4, 2, 3, 0, 0, 3, 1, "-inf", None),
])
def test_reduce_window_with_base_dilation_along_cut_rows(n_in, n, size, stride, lo, hi,
                                                         base, rhs, init, permutes):
    """XLA's halo exchange for a dilated base: each device takes the
    operand rows its result chunk reads (a collective-permute from a
    neighbour), spreads them out itself with the init value and reduces
    them undilated; before, the rows were gathered."""
    dilated = (n_in - 1) * base + 1 + lo + hi
    n_out = (dilated - ((size - 1) * rhs + 1)) // stride + 1
    reducer = "add" if init == "0" else "maximum"
    window = f"size={size}x1 stride={stride}x1 pad={lo}_{hi}x0_0 lhs_dilate={base}x1 " \
        f"rhs_dilate={rhs}x1"
    text = MODULE_WITH_ADD.replace("add(", f"{reducer}(") + f"""ENTRY e {{
  x = f32[{n_in},3] parameter(0)
  c = f32[{n_in},3] custom-call(x), custom_call_target="Sharding", sharding={{devices=[{n},1]<=[{n}]}}
  z = f32[] constant({init})
  w = f32[{n_out},3] reduce-window(c, z), window={{{window}}}, to_apply=add
  ROOT r = f32[{n_out},3] custom-call(w), custom_call_target="Sharding", sharding={{devices=[{n},1]<=[{n}]}}
}}"""
    result = _check(text, n, [_normal(n_in, 3)], returned_whole=True)
    kinds = collective_counts(result.module)
    # the window ran on chunks: the only gather is of an uneven result
    assert kinds["all-gather"] == (0 if n_out % n == 0 else 1)
    if permutes is not None:
        assert kinds == Counter({"collective-permute": permutes} if permutes else {})
    windows = [i for i in result.module.entry.instructions if i.opcode == "reduce-window"]
    assert [w.shape.dims for w in windows] == [(-(-n_out // n), 3)]
    assert tuple(windows[0].attrs["window"]["lhs_dilate"]) == (1, 1)


# ------------------------------------------------------------ convolution

@pytest.mark.parametrize("features,n", [(16, 8), (10, 4)])
def test_convolution_over_cut_input_features_is_a_partial_sum(features, n):
    """The input features are the convolution's contracting dim: the
    kernel is cut alike, each device convolves its features, one
    all-reduce sums (XLA's); 10 features over 4 devices zero the padding."""
    text = f"""
HloModule m
ENTRY e {{
  x = f32[2,{features},10] parameter(0)
  a = f32[2,{features},10] custom-call(x), custom_call_target="Sharding", sharding={{devices=[1,{n},1]<=[{n}]}}
  k = f32[4,{features},3] parameter(1), sharding={{replicated}}
  ROOT c = f32[2,4,10] convolution(a, k), window={{size=3 pad=1_1}}, dim_labels=bf0_oi0->bf0
}}"""
    result = _check(text, n, [_normal(2, features, 10), _normal(4, features, 3, seed=1)])
    assert collective_counts(result.module) == Counter({"all-reduce": 1})
    assert _shapes(result.module, "convolution") == [(2, 4, 10)]


@pytest.mark.parametrize("batch,features", [(4, 16), (3, 10)])
def test_convolution_over_cut_batch_and_features_on_a_2d_mesh(batch, features):
    """Batch over 2 devices, features over 4: each device convolves its
    batch chunk's features, the partial sums are all-reduced over the 4
    feature chunks; the result stays cut by batch."""
    text = f"""
HloModule m
ENTRY e {{
  x = f32[{batch},{features},10] parameter(0)
  a = f32[{batch},{features},10] custom-call(x), custom_call_target="Sharding", sharding={{devices=[2,4,1]<=[8]}}
  k = f32[4,{features},3] parameter(1), sharding={{replicated}}
  c = f32[{batch},4,10] convolution(a, k), window={{size=3 pad=1_1}}, dim_labels=bf0_oi0->bf0
  ROOT n = f32[{batch},4,10] negate(c)
}}"""
    result = _check(text, 8, [_normal(batch, features, 10), _normal(4, features, 3, seed=1)],
                    returned_whole=True)
    kinds = collective_counts(result.module)
    assert kinds["all-reduce"] == 1 and kinds["all-to-all"] == 0
    assert _shapes(result.module, "convolution") == [(-(-batch // 2), 4, 10)]


@pytest.mark.parametrize("length,n,size,stride,lo,hi,base,rhs", [
    (64, 8, 3, 1, 1, 2, 2, 1),      # a transposed convolution
    (16, 4, 2, 2, 3, 0, 3, 2),      # strided, dilated both ways
    (10, 4, 3, 1, 0, 2, 2, 1),      # uneven input and result
])
def test_convolution_with_input_dilation_along_a_cut_length(length, n, size, stride, lo,
                                                            hi, base, rhs):
    """XLA's halo exchange for a dilated input: each device takes the
    input elements its result chunk reads (a collective-permute from a
    neighbour), spreads them out itself and convolves them undilated."""
    out = ((length - 1) * base + 1 + lo + hi - ((size - 1) * rhs + 1)) // stride + 1
    window = f"size={size} stride={stride} pad={lo}_{hi} lhs_dilate={base} rhs_dilate={rhs}"
    text = f"""
HloModule m
ENTRY e {{
  x = f32[2,3,{length}] parameter(0)
  a = f32[2,3,{length}] custom-call(x), custom_call_target="Sharding", sharding={{devices=[1,1,{n}]<=[{n}]}}
  k = f32[4,3,{size}] parameter(1)
  c = f32[2,4,{out}] convolution(a, k), window={{{window}}}, dim_labels=bf0_oi0->bf0
  ROOT r = f32[2,4,{out}] custom-call(c), custom_call_target="Sharding", sharding={{devices=[1,1,{n}]<=[{n}]}}
}}"""
    result = _check(text, n, [_normal(2, 3, length), _normal(4, 3, size, seed=1)],
                    returned_whole=True)
    assert collective_counts(result.module)["collective-permute"] >= 1
    # the convolution ran on each device's chunk of the result, undilated
    convs = [i for i in result.module.entry.instructions if i.opcode == "convolution"]
    assert [c.shape.dims for c in convs] == [(2, 4, -(-out // n))]
    assert tuple(convs[0].attrs["window"].get("lhs_dilate", (1,))) == (1,)


# ------------------------------------------------------------ dot propagation

def test_batched_dot_keeps_the_larger_operand_in_place():
    """lhs cut by batch, the 4x larger rhs by its free dim: the result takes
    the rhs's cut (XLA's propagation tries the larger operand first) and
    the lhs is gathered, instead of an all-to-all of the rhs."""
    text = """
HloModule m
ENTRY e {
  a = f32[8,4,6] parameter(0), sharding={devices=[8,1,1]<=[8]}
  b = f32[8,6,16] parameter(1), sharding={devices=[1,1,8]<=[8]}
  ROOT d = f32[8,4,16] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2},
      rhs_batch_dims={0}, rhs_contracting_dims={1}
}"""
    result = _check(text, 8, [_normal(8, 4, 6), _normal(8, 6, 16, seed=1)])
    assert collective_counts(result.module) == Counter({"all-gather": 1})
    assert str(result.output_shardings[0]) == "{devices=[1,1,8]<=[8]}"


# ------------------------------------------------------------ convolution output features

@pytest.mark.parametrize("features,n", [(16, 8), (10, 4)])
def test_convolution_over_cut_output_features_uses_the_kernel_slice(features, n):
    """The kernel cut along its output features, the input whole: each
    device convolves the input with its kernel slice, the result cut along
    its features (XLA's: no collective; 10 features over 4 devices: an
    uneven result, returned whole)."""
    text = f"""
HloModule m
ENTRY e {{
  x = f32[2,3,10] parameter(0), sharding={{replicated}}
  w = f32[{features},3,3] parameter(1)
  k = f32[{features},3,3] custom-call(w), custom_call_target="Sharding", sharding={{devices=[{n},1,1]<=[{n}]}}
  c = f32[2,{features},10] convolution(x, k), window={{size=3 pad=1_1}}, dim_labels=bf0_oi0->bf0
  ROOT t = f32[2,{features},10] tanh(c)
}}"""
    result = _check(text, n, [_normal(2, 3, 10), _normal(features, 3, 3, seed=1)],
                    returned_whole=features % n != 0)
    kinds = collective_counts(result.module)
    assert kinds == (Counter() if features % n == 0 else Counter({"all-gather": 1}))
    assert _shapes(result.module, "convolution") == [(2, -(-features // n), 10)]


def test_convolution_over_cut_batch_and_output_features_on_a_2d_mesh():
    """Input batch over 2 devices, kernel output features over 4: each
    device's result chunk reads its own batch chunk and kernel slice."""
    text = """
HloModule m
ENTRY e {
  x = f32[4,3,10] parameter(0), sharding={devices=[2,1,1,4]<=[8] last_tile_dim_replicate}
  k = f32[16,3,3] parameter(1), sharding={devices=[4,1,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}
  ROOT c = f32[4,16,10] convolution(x, k), window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0
}"""
    result = _check(text, 8, [_normal(4, 3, 10), _normal(16, 3, 3, seed=1)])
    assert collective_counts(result.module) == Counter()
    assert _shapes(result.module, "convolution") == [(2, 4, 10)]
    assert str(result.output_shardings[0]) == "{devices=[2,4,1]<=[8]}"


def test_convolution_over_cut_length_and_output_features_on_a_2d_mesh():
    """The length over 2 devices (halo exchange), the output features over
    4 (the kernel slice): two collective-permutes, nothing gathered."""
    text = """
HloModule m
ENTRY e {
  x = f32[2,3,16] parameter(0), sharding={devices=[1,1,2,4]<=[8] last_tile_dim_replicate}
  k = f32[16,3,3] parameter(1), sharding={devices=[4,1,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}
  ROOT c = f32[2,16,16] convolution(x, k), window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0,
      sharding={devices=[1,4,2]<=[2,4]T(1,0)}
}"""
    result = _check(text, 8, [_normal(2, 3, 16), _normal(16, 3, 3, seed=1)])
    assert collective_counts(result.module) == Counter({"collective-permute": 2})
    assert _shapes(result.module, "convolution") == [(2, 4, 8)]


def test_convolution_with_batch_and_output_features_cut_alike_gathers_the_input():
    """Input batch and kernel output features over the same 8 devices, the
    kernel the larger: the result takes the kernel's cut (its features),
    the smaller input is gathered (XLA's; before, the kernel was)."""
    text = """
HloModule m
ENTRY e {
  x = f32[8,3,4] parameter(0), sharding={devices=[8,1,1]<=[8]}
  k = f32[64,3,3] parameter(1), sharding={devices=[8,1,1]<=[8]}
  ROOT c = f32[8,64,4] convolution(x, k), window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0
}"""
    result = _check(text, 8, [_normal(8, 3, 4), _normal(64, 3, 3, seed=1)])
    assert collective_counts(result.module) == Counter({"all-gather": 1})
    assert _shapes(result.module, "all-gather") == [(8, 3, 4)]
    assert _shapes(result.module, "convolution") == [(8, 8, 4)]


# ------------------------------------------------------------ feature groups

@pytest.mark.parametrize("groups,features,out,n", [
    (16, 16, 16, 8),     # depthwise: a group a feature, 2 a device
    (16, 16, 32, 8),     # depthwise with 2 output features a group
    (8, 16, 24, 8),      # 8 groups of 2 input and 3 output features
    (8, 16, 8, 4),       # 2 groups a device
])
def test_grouped_convolution_over_cut_groups_stays_local(groups, features, out, n):
    """Input features and kernel output features cut along whole groups
    (XLA's for a depthwise convolution): each device convolves its own
    groups, no collective (before, the convolution ran whole)."""
    per = features // groups
    text = f"""
HloModule m
ENTRY e {{
  x = f32[2,{features},10] parameter(0), sharding={{devices=[1,{n},1]<=[{n}]}}
  k = f32[{out},{per},3] parameter(1), sharding={{devices=[{n},1,1]<=[{n}]}}
  ROOT c = f32[2,{out},10] convolution(x, k), window={{size=3 pad=1_1}}, dim_labels=bf0_oi0->bf0,
      feature_group_count={groups}
}}"""
    result = _check(text, n, [_normal(2, features, 10), _normal(out, per, 3, seed=1)])
    assert collective_counts(result.module) == Counter()
    convs = [i for i in result.module.entry.instructions if i.opcode == "convolution"]
    assert [c.shape.dims for c in convs] == [(2, out // n, 10)]
    assert convs[0].attrs["feature_group_count"] == groups // n


def test_depthwise_convolution_over_cut_batch_groups_and_length():
    """A 2x4 mesh: the groups over 4 devices (each device its groups'
    features and kernel slices), the length over 2 (a halo exchange, one
    permute each side)."""
    text = """
HloModule m
ENTRY e {
  x = f32[2,8,16] parameter(0), sharding={devices=[1,4,2]<=[8]}
  k = f32[8,1,5] parameter(1), sharding={devices=[4,1,1,2]<=[8] last_tile_dim_replicate}
  ROOT c = f32[2,8,16] convolution(x, k), window={size=5 pad=2_2}, dim_labels=bf0_oi0->bf0,
      feature_group_count=8, sharding={devices=[1,4,2]<=[8]}
}"""
    result = _check(text, 8, [_normal(2, 8, 16), _normal(8, 1, 5, seed=1)])
    assert collective_counts(result.module) == Counter({"collective-permute": 2})
    assert _shapes(result.module, "convolution") == [(2, 2, 8)]


@pytest.mark.parametrize("groups,n,labels", [
    (8, 8, "bf0_oi0->bf0"),
    (8, 4, "bf0_oi0->bf0"),      # 2 groups a device
    (16, 8, "fb0_io0->fb0"),     # jax's kernel gradient of a depthwise one
])
def test_batch_grouped_convolution_over_cut_groups_stays_local(groups, n, labels):
    """batch_group_count: the input batch holds the groups (group-major),
    the kernel's output features and the result's features alike; cut
    along whole groups, each device convolves its own (XLA's, no
    collective; before, the convolution ran whole)."""
    batch = 2 * groups
    lhs = f"f32[{batch},3,10]" if labels.startswith("b") else f"f32[3,{batch},10]"
    lhs_cut = "[8,1,1]" if labels.startswith("b") else "[1,8,1]"
    lhs_cut = lhs_cut.replace("8", str(n))
    o_first = labels.split("_")[1].startswith("o")
    rhs = f"f32[{2 * groups},3,3]" if o_first else f"f32[3,{2 * groups},3]"
    rhs_cut = ("[8,1,1]" if o_first else "[1,8,1]").replace("8", str(n))
    out = f"f32[2,{2 * groups},8]" if labels.endswith("bf0") else f"f32[{2 * groups},2,8]"
    out_cut = ("[1,8,1]" if labels.endswith("bf0") else "[8,1,1]").replace("8", str(n))
    text = f"""
HloModule m
ENTRY e {{
  x = {lhs} parameter(0), sharding={{devices={lhs_cut}<=[{n}]}}
  k = {rhs} parameter(1), sharding={{devices={rhs_cut}<=[{n}]}}
  ROOT c = {out} convolution(x, k), window={{size=3}}, dim_labels={labels},
      batch_group_count={groups}, sharding={{devices={out_cut}<=[{n}]}}
}}"""
    shape = lambda t: tuple(int(v) for v in t[4:-1].split(","))
    args = [_normal(*shape(lhs)), _normal(*shape(rhs), seed=1)]
    result = _check(text, n, args)
    assert collective_counts(result.module) == Counter()
    convs = [i for i in result.module.entry.instructions if i.opcode == "convolution"]
    assert len(convs) == 1 and convs[0].attrs["batch_group_count"] == groups // n


def test_batch_grouped_convolution_with_its_result_batch_cut_is_computed_whole():
    """A batch-grouped result's batch reads every group's slice of the
    input batch (group-major): not a cut to keep; made whole, correct."""
    text = """
HloModule m
ENTRY e {
  x = f32[16,3,10] parameter(0), sharding={devices=[8,1,1]<=[8]}
  k = f32[16,3,3] parameter(1), sharding={devices=[8,1,1]<=[8]}
  ROOT c = f32[2,16,8] convolution(x, k), window={size=3}, dim_labels=bf0_oi0->bf0,
      batch_group_count=8, sharding={devices=[2,4,1]<=[8]}
}"""
    args = [_normal(16, 3, 10), _normal(16, 3, 3, seed=1)]
    want = _one_device(text, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpmdFallbackWarning)
        got, _ = run_partitioned(text, 8, args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_grouped_convolution_cut_across_groups_is_computed_whole():
    """4 groups of 4 features over 8 devices: a chunk of 2 features splits
    a group; the convolution is made whole (correct, with a note)."""
    text = """
HloModule m
ENTRY e {
  x = f32[2,16,10] parameter(0), sharding={devices=[1,8,1]<=[8]}
  k = f32[8,4,3] parameter(1), sharding={devices=[8,1,1]<=[8]}
  ROOT c = f32[2,8,10] convolution(x, k), window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0,
      feature_group_count=4
}"""
    want = _one_device(text, [_normal(2, 16, 10), _normal(8, 4, 3, seed=1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpmdFallbackWarning)
        got, _ = run_partitioned(text, 8, [_normal(2, 16, 10), _normal(8, 4, 3, seed=1)])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ jax's programs

KEPT_CUT = Path(__file__).resolve().parents[1] / "data" / "spmd" / "kept_cut"
# The collectives of each stored program (made by the script there), XLA's
# too; before, each gathered a cut operand (an all-gather more).
KEPT_CUT_EXPECTED = {
    "conv_output_features": {},
    "conv_batch_and_output_features": {},
    "conv_length_and_output_features": {"collective-permute": 2},
    "window_base_dilation": {"collective-permute": 1},
    # (30 rows over 8 are uneven: the result is returned whole)
    "uneven_reverse": {"collective-permute": 2, "all-gather": 1},
    "uneven_concatenate": {"all-to-all": 3},
    # windows of 7 over chunks of 2 rows: halos from 2 devices each side
    "window_wide": {"collective-permute": 4},
    "conv_wide_kernel": {"collective-permute": 4},
    # a depthwise convolution over cut groups: each device its own (before,
    # it ran whole: two all-gathers)
    "conv_depthwise": {},
    # its kernel's gradient (batch groups): the same (before, 2 all-gathers)
    "conv_depthwise_kernel_grad": {},
}


@pytest.mark.parametrize("name", sorted(KEPT_CUT_EXPECTED))
def test_stored_program_matches_jax_with_xlacollective_counts(name):
    result = run_stored_case(KEPT_CUT, name, KEPT_CUT_EXPECTED[name])
    assert all("returned whole" in note for note in result.notes), result.notes
