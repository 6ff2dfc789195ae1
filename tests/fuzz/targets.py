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


# (prog, the _cli function, argv after the input file): data[0] picks one.
CLI_TOOLS = (
    ("python -m xla_gpu.hlo.passes", "passes", []),
    ("python -m xla_gpu.hlo.passes", "passes", ["--verify", "--no-metadata"]),
    ("xla-gpu-fusion-to-mlir", "fusion_to_mlir", []),
    ("xla-gpu-translate", "translate", ["--target=cpu"]),
    ("xla-gpu-translate", "translate", ["--target=cuda", "--emit=mlir"]),
    ("xla-gpu-translate", "translate", ["--target=cpu", "--stop-after=xla-flatten-tensors"]),
)
_input_dir = None


class CliFailure(AssertionError):
    """A tool ended otherwise than with exit status 0 or 2 and one line."""


def run_cli(data: bytes) -> None:
    """Runs a command-line tool's entry function in process, on `data[1:]`
    written to a file (`data[0]` picks the tool and its flags), as its
    console script does: it must end with exit status 0, or 2 and exactly
    one line on stderr that is neither a traceback nor an internal error;
    no control character may reach the terminal. (xla-gpu-run is left out:
    a valid program may loop for as long as it likes.)"""
    global _input_dir
    import contextlib
    import io
    import os
    import re
    import tempfile

    from xla_gpu import _cli
    from xla_gpu.hlo.passes import __main__ as passes

    if not data:
        return
    prog, function, flags = CLI_TOOLS[data[0] % len(CLI_TOOLS)]
    if _input_dir is None:
        import atexit
        import shutil
        _input_dir = tempfile.mkdtemp(prefix="xla_gpu_fuzz_cli_")
        atexit.register(shutil.rmtree, _input_dir, True)
    path = os.path.join(_input_dir, "input")
    with open(path, "wb") as f:
        f.write(data[1:])
    main = passes.main if function == "passes" else getattr(_cli, function)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = _cli._guarded(prog, main, [path, *flags])
        except SystemExit as e:  # argparse
            status = e.code
    text = err.getvalue()
    if status not in (0, 2):
        raise CliFailure(f"{prog}: exit status {status}: {text[-2000:]}")
    if status == 2 and (text.count("\n") != 1 or not text.endswith("\n")):
        raise CliFailure(f"{prog}: the error is not one line: {text[-2000:]!r}")
    # "internal error", "internal parser error", "internal compiler error":
    # an exception outside xla_gpu's errors, caught at the last moment.
    if "Traceback" in text or re.search(r"internal (\w+ )?error", text):
        raise CliFailure(f"{prog}: {text[-2000:]}")
    if "\x1b" in text:
        raise CliFailure(f"{prog}: a raw escape character in: {text[-2000:]!r}")
