"""The sorted-indices scatter (XLA:GPU's distributed-indices scatter): a
scatter that promises sorted, repeated indices, with more index vectors
than the GPU runs warps, walks runs of equal indices per warp and adds
their updates in registers before one atomic per element. Checked: which
scatters take it, its launch, the atomics in its PTX, and the cpu target's
results against the interpreter with runs of equal, out-of-range and
negative indices."""

from __future__ import annotations

import re

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.emitters.scatter import ScatterEmitter
from xla_gpu.hlo.numerics import compare
from xla_gpu.runtime.device import H200, HOST_EMULATION, RTX_A6000

# A scatter fusion as jax's x.at[idx].add(rows) gives it after XLA's
# passes (segment_sum's: rows of updates added into the rows their indices
# name); test_scatter_vector_atomics.py builds its cases from it too.
TEXT = """HloModule m
combine {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] {op}(a, b)
}}
fused {{
  x = {t}[{operand}] parameter(0)
  i = {it}[{n}{ivec}] parameter(1)
  u = {t}[{n}{window}] parameter(2){updates}
  ROOT s = {t}[{operand}] scatter(x, i, {scattered}), update_window_dims={{{uwd}}},
      inserted_window_dims={{{inserted}}}, scatter_dims_to_operand_dims={{{to_operand}}},
      index_vector_dim=1, indices_are_sorted={sorted}, unique_indices={unique},
      to_apply=combine
}}
ENTRY e {{
  x = {t}[{operand}] parameter(0)
  i = {it}[{n}{ivec}] parameter(1)
  u = {t}[{n}{window}] parameter(2)
  ROOT f = {t}[{operand}] fusion(x, i, u), kind=kInput, calls=fused
}}
"""


def scatter_text(n=2048, operand="64,24", window=",24", uwd="1", inserted="0",
                 to_operand="0", ivec=",1", t="f32", it="s32", op="add", sorted="true",
                 unique="false", fused_updates=False):
    """The fusion's HLO; `fused_updates`: the updates scaled by 0.5 inside
    the fusion (a gradient's), not a parameter."""
    updates, scattered = "", "u"
    if fused_updates:
        updates = (f"\n  h = {t}[] constant(0.5)\n  b = {t}[{n}{window}] broadcast(h), "
                   f"dimensions={{}}\n  m = {t}[{n}{window}] multiply(u, b)")
        scattered = "m"
    return TEXT.format(n=n, operand=operand, window=window, uwd=uwd, inserted=inserted,
                       to_operand=to_operand, ivec=ivec, t=t, it=it, op=op, sorted=sorted,
                       unique=unique, updates=updates, scattered=scattered)


_text = scatter_text


def _emitter(text: str, device=H200) -> ScatterEmitter:
    return ScatterEmitter(select_fusion(hlo.parse_module(text), None, device))


def _inputs(text: str, seed: int) -> list[np.ndarray]:
    """Small integers (exact in any order of combining); sorted indices in
    runs, some below 0 or past the last row (whose updates are dropped)."""
    rng = np.random.default_rng(seed)
    spec = select_fusion(hlo.parse_module(text), None)
    x_shape, i_shape, u_shape = (p.shape for p in spec.computation.parameters)
    dtype = hlo.numpy_dtype(x_shape.element_type)
    x = rng.integers(1, 4, x_shape.dims).astype(dtype)
    u = rng.integers(1, 4, u_shape.dims).astype(dtype)
    rows = x_shape.dims[0]
    low = 0 if i_shape.element_type.startswith("u") else -3
    i = np.sort(rng.integers(low, rows + 3, i_shape.dims[0]))
    i = np.repeat(i[:, None], i_shape.dims[1], axis=1) if i_shape.rank == 2 else i
    return [x, i.astype(hlo.numpy_dtype(i_shape.element_type)), u]


@pytest.mark.parametrize("case", [
    dict(),                                              # f32 rows of 24
    dict(op="multiply", t="s32"),                        # a CAS combiner
    dict(op="maximum", t="f16", window=",40", operand="64,40"),
    dict(t="s8", window=",96", operand="64,96"),         # 16 lanes a vector
    dict(it="u32"),                                      # unsigned indices
    dict(window=",3,5", operand="64,3,5", uwd="1,2"),    # a 2-D window
    dict(window=",150", operand="64,150"),               # several steps, a ragged end
    dict(window=",128", operand="64,128"),               # 4 lanes: vector atomics
    dict(operand="64", window="", uwd="", ivec=""),      # one element per index
    # a 2-D index vector: rows and a column window start
    dict(operand="16,40", window=",8", ivec=",2", inserted="0", to_operand="0,1"),
])
def test_sorted_scatter_matches_the_interpreter(case):
    text = _text(**case)
    assert _emitter(text).sorted is not None
    spec = select_fusion(hlo.parse_module(text), None)
    # The cpu target runs it for a GPU's description (its own emulation
    # keeps one thread per update element).
    exe = xla_gpu.compile(text, target="cpu", cache=False, device=H200)
    assert exe.spec.emitter == "scatter" and exe.spec.threads == 128
    for seed in range(3):
        inputs = _inputs(text, seed)
        if case.get("ivec") == ",2":   # column starts within [0, 40 - 8]
            inputs[1][:, 1] = np.random.default_rng(seed).integers(0, 33, len(inputs[1]))
        (got,) = exe.run(*inputs)
        (want,) = hlo.evaluate(spec.computation, *inputs)
        t = spec.output_shapes[0].element_type
        assert compare(np.asarray(got), np.asarray(want), t, 0) is None


def test_which_scatters_take_it():
    assert _emitter(_text()).sorted is not None
    assert _emitter(_text(sorted="false")).sorted is None        # XLA's rule
    assert _emitter(_text(n=400)).sorted is None                 # fewer than 528 warps' worth
    assert _emitter(_text(n=400), RTX_A6000).sorted is not None  # 336 warps on an A6000
    assert _emitter(_text(t="c64")).sorted is None
    assert _emitter(_text(), HOST_EMULATION).sorted is None
    # a window of more elements than a warp keeps in registers
    assert _emitter(_text(window=",4096", operand="64,4096")).sorted is None


def test_launch_and_atomics():
    plan = _emitter(_text()).sorted
    # 2048 indices over at most 528 warps: 4 per warp, 128 warps of 4 per block.
    assert (plan.per_warp, plan.window, plan.vector, plan.steps) == (4, 24, 1, 1)
    exe = xla_gpu.compile(_text(), target="cuda", cache=False)
    assert (exe.spec.threads, exe.spec.blocks) == (128, 128)
    # One f32 add per element where a run ends: hardware atomics, no CAS loop.
    assert re.search(r"(atom|red)\.global\.add\.f32", exe.ptx)
    assert "atom.global.cas" not in exe.ptx and ".cas." not in exe.ptx


def test_rows_of_f32_adds_are_written_by_vector_reductions():
    # A lane's 4 (2) consecutive row elements: one red.global.add.v4.f32
    # (v2) where a run ends, on sm_90; one atomic each before it.
    for window, lanes in ((128, 4), (150, 2)):
        text = _text(window=f",{window}", operand=f"64,{window}")
        ptx = xla_gpu.compile(text, target="cuda", cache=False).ptx
        assert set(re.findall(r"red\.global\.add\.v(\d)\.f32", ptx)) == {str(lanes)}
        older = xla_gpu.compile(text, target="cuda", arch="sm_80", cache=False).ptx
        assert not re.search(r"\.v\d\.f32", older)
        assert re.search(r"(red|atom)\.global\.add\.f32", older)

