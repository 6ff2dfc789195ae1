"""Whole programs (the `xla_gpu.program` package, by job: prepare, kernels,
thunk emission, constants, the driver); this module keeps the names
callers import from it."""

from __future__ import annotations

from .program import (THUNK_OPCODES, compile_program, is_whole_program,  # noqa: F401
                      kernel_computation, prepare_module)

__all__ = ["compile_program", "is_whole_program", "prepare_module", "kernel_computation",
           "THUNK_OPCODES"]
