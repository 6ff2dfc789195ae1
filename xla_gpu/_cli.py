"""Console-script entry points that hand over to the native tools."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import native_dir


def _exec(tool: str) -> None:
    path = native_dir() / "bin" / tool
    if not path.exists():
        sys.stderr.write(
            f"{tool}: the native tool is missing at {path}; reinstall xla_gpu "
            "(pip install .) so that its native part is built\n")
        raise SystemExit(2)
    os.execv(str(path), [tool, *sys.argv[1:]])


def opt() -> None:
    """xla-gpu-opt: mlir-opt with the xla_gpu dialect and passes."""
    _exec("xla-gpu-opt")


def _diagnostics(error, rename: dict[str, str] | None = None) -> str:
    """An MLIRError's diagnostics as `file:line:col: error: message` lines."""
    import re

    def where(location) -> str:
        text = str(location)
        match = re.fullmatch(r'loc\("(.*)":(\d+):(\d+)\)', text)
        if not match:
            return text
        path = (rename or {}).get(match.group(1), match.group(1))
        return f"{path}:{match.group(2)}:{match.group(3)}"

    lines = []
    for diag in getattr(error, "error_diagnostics", []):
        lines.append(f"{where(diag.location)}: error: {diag.message}")
        for note in diag.notes:
            lines.append(f"{where(note.location)}: note: {note.message}")
    return "\n".join(lines) or str(error)


def pipeline_targets() -> tuple[str, ...]:
    return ("cuda", "cpu")  # xla_gpu.pipeline.TARGETS, without importing MLIR


def translate(argv: list[str] | None = None) -> int:
    """xla-gpu-translate FILE.mlir --emit=mlir|llvm|ptx|cubin --arch=sm_90:
    runs the lowering pipeline on the input and prints the result."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(
        prog="xla-gpu-translate",
        description="Runs the xla_gpu lowering pipeline on an MLIR file and "
                    "emits the LLVM-dialect MLIR, LLVM IR, PTX or a cubin.")
    parser.add_argument("input", help="an .mlir file, or - for stdin")
    parser.add_argument("--emit", choices=["mlir", "llvm", "ptx", "cubin"],
                        help="default: ptx for cuda, mlir for cpu")
    parser.add_argument("--arch", default="sm_90", help="sm_XX (default sm_90)")
    parser.add_argument("--target", choices=list(pipeline_targets()),
                        default="cuda", help="cuda (NVVM, default) or cpu "
                        "(the grid emulated on the host, LLVM-dialect MLIR)")
    parser.add_argument("--threads", type=int,
                        help="cpu: threads per block (default: from xla.range)")
    parser.add_argument("--blocks", type=int,
                        help="cpu: blocks (default: from xla.range)")
    parser.add_argument("-o", "--output", default="-",
                        help="output file (default stdout)")
    parser.add_argument("--dump-dir", help="write the IR after each pass here")
    parser.add_argument("--dump-regex", default=".*",
                        help="only passes whose name matches (with --dump-dir)")
    parser.add_argument("--stop-after", metavar="PASS",
                        help="run the pipeline up to the first PASS (e.g. "
                             "xla-flatten-tensors) and emit the MLIR there")
    args = parser.parse_args(argv)
    if args.emit is None:
        args.emit = "ptx" if args.target == "cuda" else "mlir"
    if args.target == "cpu" and args.emit != "mlir":
        parser.error("--target=cpu emits only --emit=mlir")
    if args.target == "cuda" and (args.threads is not None or args.blocks is not None):
        parser.error("--threads and --blocks are options of --target=cpu")

    from mlir import ir as mlir_ir

    from . import codegen, ir, pipeline

    ctx = ir.Context()
    rename: dict[str, str] = {}
    try:
        if args.input == "-":
            with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
                f.write(sys.stdin.read())
            path = f.name
            rename[path] = "<stdin>"
        else:
            path = args.input
        if not os.path.exists(path):
            sys.stderr.write(f"xla-gpu-translate: cannot open input file '{path}'\n")
            return 2
        module = mlir_ir.Module.parseFile(path, ctx)
        passes = pipeline.passes_for(args.target, threads=args.threads,
                                     blocks=args.blocks)
        if args.stop_after:
            names = [pipeline.pass_name(p) for p in passes]
            if args.stop_after not in names:
                sys.stderr.write(f"xla-gpu-translate: no pass named "
                                 f"'{args.stop_after}' in the pipeline: "
                                 f"{', '.join(dict.fromkeys(names))}\n")
                return 2
            passes = passes[:names.index(args.stop_after) + 1]
        pipeline.run(module, dump_dir=args.dump_dir, dump_regex=args.dump_regex,
                     passes=passes)
        if args.emit == "mlir" or args.stop_after:
            out: str | bytes = str(module)
        elif args.emit == "llvm":
            out = codegen.to_llvm_ir(module, args.arch)
        else:
            out = codegen.to_ptx(module, args.arch)
            if args.emit == "cubin":
                cubin = codegen.to_cubin(out, args.arch)
                if cubin is None:
                    sys.stderr.write("xla-gpu-translate: no ptxas found (install "
                                     "nvidia-cuda-nvcc or a CUDA toolkit)\n")
                    return 2
                out = cubin
    except mlir_ir.MLIRError as e:
        sys.stderr.write(_diagnostics(e, rename) + "\n")
        return 2
    except (codegen.CodegenError, ValueError) as e:
        sys.stderr.write(f"xla-gpu-translate: {e}\n")
        return 2
    finally:
        for temp in rename:
            os.unlink(temp)
    _write_output(args.output, out)
    return 0


def _write_output(path: str, out: str | bytes) -> None:
    """Writes `out` to `path`, or to stdout for "-"."""
    if path == "-":
        if isinstance(out, bytes):
            sys.stdout.buffer.write(out)
        else:
            sys.stdout.write(out)
    elif isinstance(out, bytes):
        Path(path).write_bytes(out)
    else:
        Path(path).write_text(out)


def _guarded(prog: str, main, argv=None) -> int:
    """Runs a CLI's main: any error becomes one line on stderr and exit
    status 2 (1 is kept for numerical mismatches); XLA_GPU_TRACEBACK=1 shows
    the traceback of unexpected errors instead."""
    from .errors import XlaGpuError
    try:
        return main(argv)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except MemoryError:
        sys.stderr.write(f"{prog}: out of host memory\n")
        return 2
    except XlaGpuError as e:
        sys.stderr.write(f"{prog}: {_one_line(e)}\n")
        return 2
    except Exception as e:  # a bug: still one line, never a traceback
        if os.environ.get("XLA_GPU_TRACEBACK"):
            raise
        sys.stderr.write(f"{prog}: internal error: {type(e).__name__}: {_one_line(e)} "
                         "(set XLA_GPU_TRACEBACK=1 for the traceback)\n")
        return 2


def _one_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text if "\n" not in text else text.replace("\n", "\n  ")


def translate_main() -> None:
    raise SystemExit(_guarded("xla-gpu-translate", translate))


def fusion_to_mlir(argv: list[str] | None = None) -> int:
    """xla-gpu-fusion-to-mlir FILE.hlo [--fusion NAME]: prints the MLIR the
    emitter XLA would choose produces for one fusion (before any pass)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="xla-gpu-fusion-to-mlir",
        description="Emits one HLO fusion as MLIR in the xla_gpu dialect.")
    parser.add_argument("input", help="an .hlo file, or - for stdin")
    parser.add_argument("--fusion", help="the fusion instruction (or its "
                        "computation) to emit; default: the only one")
    parser.add_argument("-o", "--output", default="-", help="default stdout")
    args = parser.parse_args(argv)

    from mlir import ir as mlir_ir

    from . import emitters, hlo, ir

    source = "<stdin>" if args.input == "-" else args.input
    try:
        text = sys.stdin.read() if args.input == "-" else Path(args.input).read_text()
    except OSError as e:
        sys.stderr.write(f"xla-gpu-fusion-to-mlir: cannot read '{source}': {e.strerror}\n")
        return 2
    try:
        module = hlo.parse_module(text, source=source)
        kernel = emitters.emit(module, ir.Context(), fusion=args.fusion)
        kernel.module.operation.verify()
    except hlo.HloError as e:
        sys.stderr.write(f"xla-gpu-fusion-to-mlir: {source}: {e}\n"
                         if not isinstance(e, hlo.HloParseError) else f"{e}\n")
        return 2
    except mlir_ir.MLIRError as e:
        sys.stderr.write(f"xla-gpu-fusion-to-mlir: invalid IR emitted: {_diagnostics(e)}\n")
        return 2
    launch = kernel.launch
    header = (f"// fusion: {kernel.fusion.name}, emitter: {kernel.emitter} "
              f"(hero: {kernel.fusion.hero_kind}), threads: {launch.threads}, "
              f"blocks: {launch.blocks}\n")
    header += "".join(f"// note: {n}\n" for n in kernel.notes)
    _write_output(args.output, header + str(kernel.module))
    return 0


def fusion_to_mlir_main() -> None:
    raise SystemExit(_guarded("xla-gpu-fusion-to-mlir", fusion_to_mlir))


def run_hlo(argv: list[str] | None = None) -> int:
    """xla-gpu-run FILE.hlo: compile, run on seeded random inputs, compare
    with the reference interpreter; exit 1 on mismatch (run_hlo_module)."""
    import argparse
    import time

    parser = argparse.ArgumentParser(
        prog="xla-gpu-run",
        description="Compiles an HLO module (its whole ENTRY, or one fusion with "
                    "--fusion), runs it on seeded random inputs and compares the "
                    "outputs with the numpy reference interpreter. Exit status: 0 "
                    "match, 1 mismatch, 2 error.")
    parser.add_argument("input", help="an .hlo file")
    parser.add_argument("--target", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--fusion", help="the fusion to run (default: the only one)")
    parser.add_argument("--dump-dir", help="write the IR after each pass and the PTX here")
    parser.add_argument("--dump-regex", default=".*",
                        help="only passes whose name matches (with --dump-dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=1,
                        help="runs to time (the first is checked)")
    parser.add_argument("--no-cache", action="store_true", help="bypass the compile cache")
    parser.add_argument("--no-command-buffers", action="store_true",
                        help="whole programs: run every thunk on its own (no CUDA graphs)")
    parser.add_argument("--ffi", action="append", default=[],
                        metavar="TARGET=LIBRARY:SYMBOL[@PLATFORM]",
                        help="register an XLA FFI handler for custom calls (repeatable); "
                             "the reference interpreter needs the cpu one, a cuda run "
                             "also the @cuda one")
    args = parser.parse_args(argv)

    import numpy as np

    import xla_gpu
    from xla_gpu import hlo
    from xla_gpu.analysis.fusion import select_fusion
    from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type

    prog = "xla-gpu-run"
    if args.ffi:
        from xla_gpu import ffi
        for spec in args.ffi:
            ffi.register_from_spec(spec)
    try:
        text = Path(args.input).read_text()
    except OSError as e:
        sys.stderr.write(f"{prog}: cannot read '{args.input}': {e.strerror}\n")
        return 2
    try:
        start = time.perf_counter()
        exe = xla_gpu.compile(text, target=args.target, arch=args.arch, fusion=args.fusion,
                              cache=not args.no_cache, dump_dir=args.dump_dir,
                              dump_regex=args.dump_regex,
                              command_buffers=not args.no_command_buffers)
        compile_s = time.perf_counter() - start
        if not isinstance(exe, xla_gpu.Executable):   # a whole program
            return _run_program(args, text, exe, compile_s)
        module = hlo.parse_module(text, source=args.input)
        fusion = select_fusion(module, args.fusion)
        inputs = random_inputs(fusion.computation, args.seed)
        start = time.perf_counter()
        outputs = exe.run(*inputs)
        run_s = time.perf_counter() - start
        for _ in range(args.iterations - 1):
            exe.run(*inputs)
        if args.iterations > 1:
            run_s = exe.time(*inputs, iterations=args.iterations, warmup=1)
        expected = hlo.evaluate(fusion.computation, *inputs)
    except hlo.HloError as e:
        sys.stderr.write(f"{prog}: {args.input}: {e}\n" if not isinstance(e, hlo.HloParseError)
                         else f"{e}\n")
        return 2
    except (xla_gpu.XlaGpuError, ValueError) as e:
        sys.stderr.write(f"{prog}: {_one_line(e)}\n")
        return 2
    worst = None
    for k, (got, want, shape) in enumerate(zip(outputs, expected, fusion.output_shapes)):
        mismatch = compare(np.asarray(got), np.asarray(want), shape.element_type, k,
                           tolerance_type(fusion.computation, shape.element_type),
                           has_reduction(fusion.computation))
        if mismatch is not None and (worst is None or mismatch.count > worst.count):
            worst = mismatch
    launch = exe.launch_dims
    where = (f"{exe.target} ({exe.spec.emitter} emitter, {launch['blocks']}x"
             f"{launch['threads']} threads)")
    times = f"compile {compile_s * 1e3:.1f} ms, run {run_s * 1e3:.3f} ms"
    if worst is None:
        print(f"{args.input}: fusion '{fusion.name}' on {where}: OK, "
              f"{len(outputs)} output(s) match the reference; {times}")
        return 0
    print(f"{args.input}: fusion '{fusion.name}' on {where}: MISMATCH: {worst}; {times}")
    return 1


def _run_program(args, text: str, exe, compile_s: float) -> int:
    """xla-gpu-run on a whole module: every output leaf of the ENTRY is
    compared with the reference interpreter's."""
    import time

    import numpy as np

    from xla_gpu import hlo
    from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type

    module = hlo.parse_module(text, source=args.input)
    entry = module.entry
    inputs = random_inputs(entry, args.seed)
    start = time.perf_counter()
    outputs = exe.run(*inputs)
    run_s = time.perf_counter() - start
    launches = exe.kernel_launches()
    if args.iterations > 1:
        run_s = exe.time(*inputs, iterations=args.iterations - 1, warmup=0)
    expected = hlo.evaluate(module, *inputs)
    reduces = any(has_reduction(c) for c in module.computations)
    worst = None
    for k, (got, want) in enumerate(zip(outputs, expected)):
        etype = exe.outputs[k].element_type
        mismatch = compare(np.asarray(got), np.asarray(want), etype, k,
                           tolerance_type(entry, etype), reduces)
        if mismatch is not None and (worst is None or mismatch.count > worst.count):
            worst = mismatch
    where = (f"{exe.target} ({len(exe.kernels)} kernels, {launches} kernel launches, "
             f"{len(exe.thunks)} thunks)")
    times = f"compile {compile_s * 1e3:.1f} ms, run {run_s * 1e3:.3f} ms"
    if worst is None:
        print(f"{args.input}: program '{exe.name}' on {where}: OK, {len(outputs)} "
              f"output(s) match the reference; {times}")
        return 0
    print(f"{args.input}: program '{exe.name}' on {where}: MISMATCH: {worst}; {times}")
    return 1


def run_hlo_main() -> None:
    raise SystemExit(_guarded("xla-gpu-run", run_hlo))
