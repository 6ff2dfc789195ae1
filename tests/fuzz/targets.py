"""What the fuzzers exercise, importable without atheris (the regression
tests replay saved inputs through the same functions)."""

from __future__ import annotations

PIPELINES = (
    "builtin.module(canonicalize,cse,inline)",
    "builtin.module(func.func(xla-lower-xla-to-scf),xla-flatten-tensors,"
    "func.func(xla-vectorize-loads-stores),xla-lower-tensors)",
    "builtin.module(xla-propagate-slice-indices,xla-simplify-affine,canonicalize,"
    "xla-erase-dead-functions)",
)
_context = None


def parse_hlo(data: bytes) -> None:
    """Parses `data` as HLO text: HloError (a diagnostic) is the only
    acceptable failure."""
    from xla_gpu.errors import HloError
    from xla_gpu.hlo import parser
    try:
        parser.parse_module(data.decode("utf-8", errors="replace"), source="<fuzz>")
    except HloError:
        pass


def run_passes(data: bytes) -> None:
    """Parses `data[1:]` as MLIR with the xla_gpu dialect and runs the
    pipeline `data[0]` picks: a diagnostic is fine, a crash is not."""
    global _context
    if len(data) < 2:
        return
    from mlir import ir as mlir_ir
    from mlir.passmanager import PassManager

    from xla_gpu import ir
    if _context is None:
        _context = ir.Context()
    pipeline = PIPELINES[data[0] % len(PIPELINES)]
    try:
        module = mlir_ir.Module.parse(data[1:].decode("utf-8", errors="replace"), _context)
        module.operation.verify()
        PassManager.parse(pipeline, _context).run(module.operation)
    except (mlir_ir.MLIRError, ValueError):
        pass
