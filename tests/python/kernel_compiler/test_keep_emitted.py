"""A kernel built for a caller that caches nothing and only takes its code
(a program compiled without a cache) keeps no text of its emitted IR; one
that is cached, saved or asked for its IR keeps it."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo, kernel_compiler
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.errors import ArgumentError
from xla_gpu.program.kernels import ProgramKernels, kernel_fusions

EXP = """HloModule m
fused {
  p = f32[256] parameter(0)
  ROOT e = f32[256] exponential(p)
}
"""

PROGRAM = """HloModule p, is_scheduled=true

fused_exp {
  a = f32[64] parameter(0)
  ROOT e = f32[64] exponential(a)
}

ENTRY main {
  x = f32[64] parameter(0)
  ROOT f = f32[64] fusion(x), kind=kLoop, calls=fused_exp
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_GPU_CACHE_DIR", str(tmp_path / "cache"))
    xla_gpu.compiler.clear_memory_cache()
    yield tmp_path / "cache"
    xla_gpu.compiler.clear_memory_cache()


def _fusion():
    return select_fusion(hlo.parse_module(EXP))


def test_a_kernel_without_its_emitted_ir_runs_and_says_why_it_has_none(cache, tmp_path):
    exe = kernel_compiler.compile_kernel(_fusion(), "cpu", cache=False, keep_emitted=False)
    assert exe.emitted_mlir is None
    x = np.linspace(-2, 2, 256, dtype=np.float32)
    (y,) = exe.run(x)
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-5)
    with pytest.raises(ArgumentError, match="emitted IR was not kept"):
        exe.mlir()
    with pytest.raises(ArgumentError, match="emitted IR was not kept"):
        exe.save(tmp_path / "artifact")


def test_a_cached_kernel_keeps_its_emitted_ir(cache):
    # The cache saves the emitted IR with the kernel.
    exe = kernel_compiler.compile_kernel(_fusion(), "cpu", cache=True, keep_emitted=False)
    assert "func.func" in exe.emitted_mlir
    assert "llvm.func" in exe.mlir("llvm")


def test_by_default_a_kernel_keeps_its_emitted_ir(cache):
    exe = kernel_compiler.compile_kernel(_fusion(), "cpu", cache=False)
    assert "func.func" in exe.mlir("emitted")


@pytest.mark.parametrize("cached", [False, True])
def test_a_programs_kernels_keep_their_emitted_ir_only_when_cached(cache, cached):
    module = hlo.parse_module(PROGRAM)
    kernels = ProgramKernels("cpu", "sm_90", cached, module)
    ((inst, comp),) = kernel_fusions(module.entry)
    exe = kernels._build(inst, *kernels._kernel_of(inst, comp))
    assert (exe.emitted_mlir is not None) == cached
    # Its host code waits in a batch with the program's other kernels
    # until the program links; compiled, the batch gives it its object.
    assert exe.host_object is None and exe.host_pending is not None
    kernels.backend.finish_batches(kernels._batcher)
    assert exe.host_object
