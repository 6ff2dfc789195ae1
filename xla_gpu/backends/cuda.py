"""The cuda backend: an emitted kernel through the cuda stages of the
pipeline to LLVM + NVVM, then PTX (LLVM's NVPTX backend, in process, with
libdevice) and a cubin (ptxas or nvJitLink), with the kernel's registers,
shared memory and block size checked against what the GPU gives a block.

    from xla_gpu.backends import cuda
    binary = cuda.compile_module(module, arch="sm_90")   # module: emitted MLIR
    binary.ptx, binary.cubin                              # cubin None without ptxas

The binary is launched by `xla_gpu.runtime.cuda` (cuda-python only).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from mlir import ir as _ir

from .. import codegen, pipeline

__all__ = ["CudaBinary", "compile_module", "stages"]


@dataclass
class CudaBinary:
    ptx: str
    cubin: bytes | None
    timings: dict[str, float] = field(default_factory=dict)


def stages() -> tuple[pipeline.Stage, ...]:
    """The pipeline stages a kernel goes through for cuda."""
    return pipeline.stages_for("cuda")


def compile_module(module: _ir.Module, *, arch: str = "sm_90", name: str = "kernel",
                   dump_dir: str | Path | None = None, dump_regex: str = ".*",
                   timings: dict[str, float] | None = None) -> CudaBinary:
    """Lowers the emitted `module` in place through the cuda stages, then to
    PTX for `arch` and a cubin. Raises mlir.ir.MLIRError when a pass fails,
    codegen.CodegenError (a CompileError) when code generation does, and
    codegen.LaunchLimitError when the kernel exceeds the GPU's limits."""
    timings = {} if timings is None else timings
    start = time.perf_counter()
    pipeline.run(module, stages=stages(), dump_dir=dump_dir, dump_regex=dump_regex,
                 timings=timings if dump_dir is not None else None)
    timings["pipeline"] = time.perf_counter() - start
    start = time.perf_counter()
    ptx = codegen.to_ptx(module, arch)
    timings["ptx"] = time.perf_counter() - start
    start = time.perf_counter()
    cubin = codegen.to_cubin(ptx, arch)
    timings["cubin"] = time.perf_counter() - start
    if dump_dir is not None:
        Path(dump_dir, f"{name}.ptx").write_text(ptx)
    return CudaBinary(ptx, cubin, timings)
