"""The per-target halves of compilation, after the shared pipeline stages:
`cuda` (NVVM → PTX → cubin, launched through cuda-python) and `cpu` (the
launch grid emulated on the host through MLIR's ExecutionEngine, or a
shared object that `xla_gpu.runtime` loads without MLIR)."""
