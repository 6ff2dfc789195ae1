"""Whole programs: an HLO module's ENTRY computation compiled into one
executable (kernels + thunk sequence + buffer assignment + optimized HLO).

    module ──prepare (prepare.py)──► thunk ops only: HLO passes, sort
                                     rewrites, wrapped ops, copies
           ──schedule──► order per computation
           ──buffer assignment──► slices of allocations
           ──thunk emission (thunk_emitter.py)──► kernel / copy / memset /
                 gemm / fft / while / conditional / custom_call / sort /
                 topk / convolution thunks, and the collectives' (SPMD
                 programs of several devices: runtime.collective_thunks);
                 kernels from kernels.py (the fusions, through the kernel
                 compiler) and op_kernels
           ──command buffers──► runs of device thunks, one graph each
           ──driver.py──► a runtime.program.ProgramExecutable

What is compiled:
  * a module XLA already fused (after_optimizations dumps of XLA:GPU or
    XLA:CPU: kLoop / kInput fusions, "wrapped_*" ones) runs as fused;
    XLA:GPU's `__triton_gemm` fusions are one kernel of the GEMM emitter
    with their tiling (on the cpu target only small ones: larger GEMMs run
    faster through BLAS); other kCustom fusions whose root is a dot
    (XLA:CPU's `__ynn_fusion`, cuBLAS fusions) and GEMM fusions the emitter
    refuses become a gemm with their other work as kernels;
    `__cublas$gemm` / `__cublas$lt$matmul` custom calls become gemm thunks
    with their epilogues, `TopK` a topk thunk; `fft` instructions become fft
    thunks (cuFFT on cuda), their operand and result relayouted to the
    default layout by copies where the HLO gives another;
  * a module of plain ops (as JAX prints it before optimizations) goes
    through `xla_gpu.hlo.passes.optimize` (XLA's fusion pipeline); with
    `optimize=False` each op that is not a thunk of its own becomes its own
    small fusion (XLA's "wrapped_<op>"). A pass that fails is an error
    naming it, unless `fallback_unfused=True` (or XLA_GPU_UNFUSED_FALLBACK=1)
    asks for the per-op fusions instead.

Every kernel compiles through the kernel compiler (`xla_gpu.kernel_compiler`)
and its cache, keyed by the fusion's canonical fingerprint
(`xla_gpu.compile(..., fusion=NAME)` builds the same kernel): a program
recompiled, or another program with the same fusion, reuses the kernel. A
whole program is also kept on disk by `xla_gpu.compile` (under the key of
its text and options).

Buffers hold arrays in the physical order their layout gives (as XLA); a
kernel whose parameters or outputs have non-row-major layouts is compiled
from a copy of its computation that reads and writes row-major physical
buffers through bitcasts, so that the emitters keep seeing logical arrays.
"""

from __future__ import annotations

from .driver import compile_program
from .kernels import kernel_computation
from .prepare import THUNK_OPCODES, is_whole_program, prepare_module

__all__ = ["compile_program", "is_whole_program", "prepare_module", "kernel_computation",
           "THUNK_OPCODES"]
