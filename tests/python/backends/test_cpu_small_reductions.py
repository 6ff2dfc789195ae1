"""Small reductions on the cpu target (from HOST_SMALL_MIN_ELEMENTS input
elements on): column reductions take a thread per kept column (SIMD across
columns; a concatenate along them read per operand), rows of at most
HOST_SHORT_ROW elements a thread per row, instead of the GPU's shared tiles and warp shuffles that
the grid emulation runs as loops over every thread. cuda keeps XLA's
variants. Results against the reference interpreter for several shapes,
element types, reducers, variadic reduces, side outputs and epilogues."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.analysis.device import H200, HOST_EMULATION
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.emitters.reduction import (ColumnReductionEmitter, MultiRowReductionEmitter,
                                        RowReductionEmitter, SmallColumnReductionEmitter,
                                        ThreadPerColumnReductionEmitter,
                                        ThreadPerRowReductionEmitter, reduction_emitter)
from xla_gpu.hlo.numerics import compare, random_inputs

_REDUCERS = {"add": "add", "max": "maximum", "min": "minimum", "mul": "multiply"}
_INITS = {("add", "int"): "0", ("add", "float"): "0", ("mul", "int"): "1",
          ("mul", "float"): "1", ("max", "int"): "-2147483648", ("max", "float"): "-inf",
          ("min", "int"): "2147483647", ("min", "float"): "inf"}


def _reduce_module(dims: str, reduced: str, kept: str, element: str = "f32",
                   kind: str = "add") -> str:
    family = "int" if element.startswith("s") else "float"
    init = _INITS[(kind, family)]
    return f"""HloModule m
red {{
  a = {element}[] parameter(0)
  b = {element}[] parameter(1)
  ROOT s = {element}[] {_REDUCERS[kind]}(a, b)
}}
fused {{
  x = {element}[{dims}] parameter(0)
  z = {element}[] constant({init})
  ROOT r = {element}[{kept}] reduce(x, z), dimensions={{{reduced}}}, to_apply=red
}}
ENTRY e {{
  p = {element}[{dims}] parameter(0)
  ROOT f = {element}[{kept}] fusion(p), kind=kInput, calls=fused
}}
"""


def _emitter(text: str, device):
    return reduction_emitter(select_fusion(hlo.parse_module(text), device=device))


def _check(text: str, seed: int = 0):
    module = hlo.parse_module(text)
    args = random_inputs(module.entry, seed)
    got = xla_gpu.compile(text, target="cpu", cache=False).run(*args)
    want = hlo.evaluate(module, *args)
    want = want if isinstance(want, (list, tuple)) else [want]
    types = [leaf.element_type for leaf in module.entry.root.shape.leaves()]
    for n, (g, w, t) in enumerate(zip(got, want, types)):
        mismatch = compare(np.asarray(g), np.asarray(w), t, n, scale_relative=True)
        assert mismatch is None, mismatch


# An LSTM backward step's gate gradients: a concatenate of four gates, written
# out and summed over the batch (16 x 512: 8192 elements).
CONCATENATE_COLUMN_SUM = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  p0 = f32[16,128] parameter(0)
  p1 = f32[16,128] parameter(1)
  p2 = f32[16,128] parameter(2)
  m = f32[16,128] multiply(p0, p1)
  t = f32[16,128] tanh(p2)
  s = f32[16,128] subtract(p1, p2)
  c = f32[16,512] concatenate(m, t, s, p0), dimensions={1}
  z = f32[] constant(0)
  r = f32[512] reduce(c, z), dimensions={0}, to_apply=add
  ROOT o = (f32[16,512], f32[512]) tuple(c, r)
}
ENTRY e {
  a = f32[16,128] parameter(0)
  b = f32[16,128] parameter(1)
  c = f32[16,128] parameter(2)
  ROOT f = (f32[16,512], f32[512]) fusion(a, b, c), kind=kInput, calls=fused
}
"""


def test_small_column_reduction_takes_a_thread_per_column_on_the_host():
    host = _emitter(CONCATENATE_COLUMN_SUM, HOST_EMULATION)
    assert type(host) is ThreadPerColumnReductionEmitter
    assert host.threads == 128 and host.blocks == 4 and host.steps == 16
    assert type(_emitter(CONCATENATE_COLUMN_SUM, H200)) is ColumnReductionEmitter
    _check(CONCATENATE_COLUMN_SUM, seed=1)


def test_short_rows_take_a_thread_per_row_on_the_host():
    # Attention's softmax max over keys: 1024 rows of 32 (32768 elements).
    text = _reduce_module("8,4,32,32", "3", "8,4,32", kind="max")
    host = _emitter(text, HOST_EMULATION)
    assert type(host) is ThreadPerRowReductionEmitter
    assert host.threads == 128 and host.blocks == 8 and host.steps == 32
    assert type(_emitter(text, H200)) is MultiRowReductionEmitter
    _check(text, seed=2)


def test_tiny_and_long_rows_keep_their_variants():
    # Below 2048 elements the GPU's configuration runs on the host (what
    # the emitter tests check); rows longer than HOST_SHORT_ROW keep the
    # row emitter's host configuration.
    assert type(_emitter(_reduce_module("32,32", "1", "32"), HOST_EMULATION)) is \
        MultiRowReductionEmitter
    assert type(_emitter(_reduce_module("64,512", "1", "64"), HOST_EMULATION)) is \
        RowReductionEmitter
    assert type(_emitter(_reduce_module("1024,4", "0", "4"), HOST_EMULATION)) is \
        SmallColumnReductionEmitter


@pytest.mark.parametrize("dims,reduced,kept", [
    ("16,512", "0", "512"),             # the LSTM's gate sums
    ("100,40", "0", "40"),              # kept not a multiple of 32
    ("3,40,72", "1", "3,72"),           # K0 > 1
    ("8,16,24", "0,1", "24"),           # two reduced dims
    ("256,256", "1", "256"),            # rows of 256: the row emitter
    ("1024,32", "1", "1024"),           # short rows
    ("300,17", "1", "300"),             # odd rows, K not a multiple of a block
    ("4,96,20", "2", "4,96"),           # short rows over two kept dims
])
@pytest.mark.parametrize("element", ["f32", "f64", "bf16", "s32"])
def test_sums_of_small_reductions(dims, reduced, kept, element):
    _check(_reduce_module(dims, reduced, kept, element), seed=3)


@pytest.mark.parametrize("kind", ["max", "min", "mul"])
@pytest.mark.parametrize("dims,reduced,kept", [("64,96", "0", "96"), ("96,64", "1", "96")])
def test_other_reducers(kind, dims, reduced, kept):
    element = "s32" if kind == "mul" else "f32"
    _check(_reduce_module(dims, reduced, kept, element, kind), seed=5)


def _argmax_module(dims: str, reduced: str, kept: str, iota_dim: int) -> str:
    return f"""HloModule m
argmax {{
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(i, j), direction=LT
  tie = pred[] and(eq, lt)
  pick = pred[] or(gt, tie)
  v = f32[] select(pick, a, b)
  k = s32[] select(pick, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}}
fused {{
  x = f32[{dims}] parameter(0)
  io = s32[{dims}] iota(), iota_dimension={iota_dim}
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[{kept}], s32[{kept}]) reduce(x, io, ninf, zero), dimensions={{{reduced}}}, to_apply=argmax
}}
ENTRY e {{
  p = f32[{dims}] parameter(0)
  ROOT f = (f32[{kept}], s32[{kept}]) fusion(p), kind=kInput, calls=fused
}}
"""


@pytest.mark.parametrize("dims,reduced,kept,iota_dim,variant", [
    ("64,96", "0", "96", 0, ThreadPerColumnReductionEmitter),
    ("160,48", "1", "160", 1, ThreadPerRowReductionEmitter),
])
def test_variadic_argmax(dims, reduced, kept, iota_dim, variant):
    text = _argmax_module(dims, reduced, kept, iota_dim)
    assert type(_emitter(text, HOST_EMULATION)) is variant
    _check(text, seed=7)


ROW_SIDE_OUTPUT_AND_EPILOGUE = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  x = f32[200,48] parameter(0)
  e = f32[200,48] exponential(x)
  z = f32[] constant(0)
  r = f32[200] reduce(e, z), dimensions={1}, to_apply=add
  l = f32[200] log(r)
  ROOT t = (f32[200], f32[200,48]) tuple(l, e)
}
ENTRY e {
  p = f32[200,48] parameter(0)
  ROOT f = (f32[200], f32[200,48]) fusion(p), kind=kInput, calls=fused
}
"""


def test_short_rows_with_a_side_output_and_an_epilogue():
    assert type(_emitter(ROW_SIDE_OUTPUT_AND_EPILOGUE, HOST_EMULATION)) is \
        ThreadPerRowReductionEmitter
    _check(ROW_SIDE_OUTPUT_AND_EPILOGUE, seed=8)


def _concatenate_module(dims: list[int], widths: list[int], reduced: str) -> str:
    """A column sum of a concatenate along the minor dimension (written out
    too) of `widths`: products, tanh and a parameter as operands."""
    major = ",".join(str(d) for d in dims)
    total = sum(widths)
    kept = [d for i, d in enumerate(dims + [total]) if str(i) not in reduced.split(",")]
    lines, names, params = [], [], []
    for n, w in enumerate(widths):
        shape = f"f32[{major},{w}]"
        params.append((f"p{n}", shape))
        lines.append(f"  p{n} = {shape} parameter({n})")
        if n % 3 == 0:
            lines.append(f"  o{n} = {shape} multiply(p{n}, p{n})")
        elif n % 3 == 1:
            lines.append(f"  o{n} = {shape} tanh(p{n})")
        else:
            lines.append(f"  o{n} = {shape} copy(p{n})")
            names.append(f"p{n}")
            continue
        names.append(f"o{n}")
    cshape = f"f32[{major},{total}]"
    kshape = f"f32[{','.join(str(k) for k in kept)}]"
    body = "\n".join(lines)
    entry_params = "\n".join(f"  a{n} = {s} parameter({n})" for n, (_, s) in enumerate(params))
    args = ", ".join(f"a{n}" for n in range(len(params)))
    return f"""HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
fused {{
{body}
  c = {cshape} concatenate({", ".join(names)}), dimensions={{{len(dims)}}}
  z = f32[] constant(0)
  r = {kshape} reduce(c, z), dimensions={{{reduced}}}, to_apply=add
  ROOT t = ({cshape}, {kshape}) tuple(c, r)
}}
ENTRY e {{
{entry_params}
  ROOT f = ({cshape}, {kshape}) fusion({args}), kind=kInput, calls=fused
}}
"""


def test_a_concatenate_summed_over_columns_is_read_per_operand_on_the_host():
    # Each block of the LSTM's gate sums takes one gate: the block picks
    # its operand, its threads read it without the concatenate's chain of
    # comparisons (which kept the thread loop scalar).
    host = _emitter(CONCATENATE_COLUMN_SUM, HOST_EMULATION)
    assert host._concat is not None
    exe = xla_gpu.compile(CONCATENATE_COLUMN_SUM, target="cpu", cache=False)
    assert "scf.index_switch" in exe.mlir()
    _check(CONCATENATE_COLUMN_SUM, seed=9)


@pytest.mark.parametrize("dims,widths,reduced,piecewise", [
    ([64], [64, 96, 32], "0", True),           # blocks of 32 threads
    ([4, 8], [64, 128], "1", True),            # K0 > 1: blocks per row of 6
    ([3, 40], [96, 32, 64, 32], "0,1", True),  # two reduced dims
    ([48], [40, 24], "0", False),              # widths share only 8 columns
])
def test_concatenates_summed_over_columns(dims, widths, reduced, piecewise):
    text = _concatenate_module(dims, widths, reduced)
    host = _emitter(text, HOST_EMULATION)
    assert type(host) is ThreadPerColumnReductionEmitter
    assert (host._concat is not None) is piecewise
    _check(text, seed=10)
