"""Scatter-adds of f32 rows: each thread adds 4 (or 2) consecutive update
elements with one atomic_rmw on a vector, which sm_90 does as one
`red.global.add.v4.f32` (the cpu target and older GPUs as one atomic per
lane). Checked here: when the emitter takes that form, the PTX it gives,
and the cpu target's results against the interpreter with repeated and
out-of-range indices."""

from __future__ import annotations

import re

import numpy as np
import pytest

import xla_gpu
from xla_gpu import emitters, hlo, pipeline
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.backends.cuda import codegen
from xla_gpu.errors import CompileError
from xla_gpu.hlo.numerics import compare
from test_sorted_scatter import scatter_text

PTXAS = codegen.find_ptxas()

def _text(width=32, n=40, t="f32", combiner="add", unique="false", fused_updates=False):
    """x.at[idx].add(rows): rows of `width` into 64."""
    return scatter_text(n=n, operand=f"64,{width}", window=f",{width}", t=t, op=combiner,
                        sorted="false", unique=unique, fused_updates=fused_updates)


def _ptx(text: str, arch: str = "sm_90") -> str:
    exe = xla_gpu.compile(text, target="cuda", arch=arch, cache=False)
    assert exe.spec.emitter == "scatter"
    return exe.ptx


def _inputs(text: str, seed: int) -> list[np.ndarray]:
    """Operand and updates of small integers (exact sums in any order);
    indices repeated, some out of range (-3 and 64: those rows skipped)."""
    rng = np.random.default_rng(seed)
    spec = select_fusion(hlo.parse_module(text), None)
    x_shape, i_shape, u_shape = (p.shape for p in spec.computation.parameters)
    x = rng.integers(-8, 8, x_shape.dims).astype(np.float32)
    u = rng.integers(-8, 8, u_shape.dims).astype(np.float32)
    i = rng.integers(0, 6, i_shape.dims).astype(np.int32)   # many repeats
    i[0, 0], i[-1, 0] = -3, 64
    return [x, i, u]


@pytest.mark.parametrize("width,lanes", [(32, 4), (6, 2), (4, 4)])
def test_rows_of_f32_adds_are_one_vector_reduction_per_thread(width, lanes):
    ptx = _ptx(_text(width=width))
    reductions = re.findall(r"red\.global\.add\.v(\d)\.f32", ptx)
    assert reductions and set(reductions) == {str(lanes)}
    assert "atom.global.add.f32" not in ptx and "red.global.add.f32" not in ptx
    # Vector reductions need PTX ISA 8.1; nothing else asks for more.
    assert re.search(r"^\.version 8\.1$", ptx, re.M)
    # The updates (a fusion parameter) are read as one vector too.
    assert re.search(rf"ld\.global(\.nc)?\.v{lanes}\.", ptx)
    if PTXAS:
        codegen.to_cubin(ptx, "sm_90", use_ptxas=True)


@pytest.mark.parametrize("case", [
    dict(width=5),                         # rows of odd length
    dict(t="f64"),                         # no f64 vector reduction
    dict(combiner="maximum"),              # not an add
    dict(unique="true"),                   # no atomics at all
])
def test_other_scatters_keep_scalar_updates(case):
    ptx = _ptx(_text(**case))
    assert not re.search(r"red\.global\.add\.v\d", ptx)
    assert re.search(r"^\.version 7\.8$", ptx, re.M)


def test_older_gpus_get_one_atomic_per_lane():
    # sm_80 has no vector reductions: the emitter, configured for the arch,
    # adds each lane of the thread's vector with an atomic of its own.
    ptx = _ptx(_text(), arch="sm_80")
    assert not re.search(r"red\.global\.add\.v\d", ptx)
    assert len(re.findall(r"(red|atom)\.global\.add\.f32", ptx)) == 4
    assert re.search(r"ld\.global(\.nc)?\.v4\.", ptx)   # the lanes still read as one vector


def test_a_vector_reduction_for_an_older_gpu_is_refused_with_a_reason():
    # sm_90 code given to the PTX serializer for sm_80: an error naming the
    # instruction and the arch, not a ptxas failure or a crash.
    kernel = emitters.emit(_text())
    pipeline.run(kernel.module)
    with pytest.raises(CompileError, match=r"vector reduction .* needs sm_90 or newer, not sm_80"):
        codegen.to_ptx(kernel.module, "sm_80")


@pytest.mark.parametrize("case", [
    dict(width=32), dict(width=6), dict(width=4), dict(width=32, fused_updates=True),
    dict(width=5), dict(width=32, n=1),
])
def test_cpu_target_matches_the_interpreter(case):
    text = _text(**case)
    spec = select_fusion(hlo.parse_module(text), None)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    for seed in range(3):
        inputs = _inputs(text, seed)
        (got,) = exe.run(*inputs)
        (want,) = hlo.evaluate(spec.computation, *inputs)
        assert compare(np.asarray(got), np.asarray(want), "f32", 0) is None
