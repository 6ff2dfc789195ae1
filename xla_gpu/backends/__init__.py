"""Backends that run compiled kernels: `cpu` (the launch grid emulated on
the host through MLIR's ExecutionEngine)."""
