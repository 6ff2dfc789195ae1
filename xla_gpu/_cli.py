"""The console scripts: xla-gpu-translate, xla-gpu-fusion-to-mlir and
xla-gpu-run here, xla-gpu-opt handed over to the native tool.

Every tool reads its input with bounds (xla_gpu._input: a regular file or
stdin, at most XLA_GPU_MAX_INPUT_BYTES, default 1 GiB) and ends with exit
status 0 (done), 1 (xla-gpu-run: a numerical mismatch) or 2 (any error: one
line on stderr, control characters escaped, never a traceback); Ctrl-C
ends it with one line and status 130."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from ._paths import native_dir


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
    """An MLIRError's diagnostics on one line: `file:line:col: error:
    message`, its notes in parentheses, several errors joined by "; "."""

    def where(location) -> str:
        text = str(location)
        match = re.fullmatch(r'loc\("(.*)":(\d+):(\d+)\)', text)
        if not match:
            return text
        path = (rename or {}).get(match.group(1), match.group(1))
        return f"{path}:{match.group(2)}:{match.group(3)}"

    errors = []
    for diag in getattr(error, "error_diagnostics", []):
        text = f"{where(diag.location)}: error: {diag.message}"
        notes = [f"{where(note.location)}: note: {note.message}" for note in diag.notes]
        errors.append(text + (f" ({'; '.join(notes)})" if notes else ""))
    return _one_line("; ".join(errors) or str(error))


# C0 controls but tab and newline, DEL, C1 controls, lone surrogates.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(text: str) -> str:
    """`text` with every control character written as \\xNN (\\uNNNN): a
    message quoting hostile input must not drive the terminal."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                            else f"\\u{ord(m.group()):04x}", text)


def _one_line(error) -> str:
    """An error (or a message) as one line: its lines joined by "; ", its
    control characters escaped."""
    text = str(error).strip() or type(error).__name__
    return _escape("; ".join(line.strip() for line in text.splitlines() if line.strip()))


def _error(text: str) -> None:
    sys.stderr.write(_one_line(text) + "\n")


def _check_regex(flag: str, pattern: str) -> None:
    from .errors import ArgumentError
    try:
        re.compile(pattern)
    except re.error as e:
        raise ArgumentError(f"{flag}: invalid regular expression {pattern!r}: {e}") from None


def _read_text(path: str, hlo_text: bool) -> tuple[str, str]:
    """The input's text and the name diagnostics give it: a regular file,
    or stdin for "-", read with bounds (ArgumentError), UTF-8
    (HloParseError for HLO, else ArgumentError, at the first bad byte)."""
    from ._input import decode_utf8, read_input
    data, source = read_input(path, stdin_ok=True)
    if hlo_text:
        from ._input import decode_hlo_text
        return decode_hlo_text(data, source), source
    return decode_utf8(data, source), source


def pipeline_targets() -> tuple[str, ...]:
    return ("cuda", "cpu")  # xla_gpu.pipeline.TARGETS, without importing MLIR


def translate(argv: list[str] | None = None) -> int:
    """xla-gpu-translate FILE.mlir --emit=mlir|llvm|ptx|cubin --arch=sm_90:
    runs the lowering pipeline on the input and prints the result."""
    import argparse

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
    _check_regex("--dump-regex", args.dump_regex)
    _make_dump_dir(args.dump_dir)
    text, source = _read_text(args.input, hlo_text=False)

    from mlir import ir as mlir_ir

    from . import ir, pipeline
    from .backends.cuda import codegen

    ctx = ir.Context()
    # MLIR names a buffer parsed from text "-".
    rename = {"-": source}
    try:
        try:
            module = mlir_ir.Module.parse(text, ctx)
        except RuntimeError as e:
            # The bindings cannot turn a diagnostic that is not UTF-8 into a
            # str (a parser that quotes one byte of a multi-byte character).
            from .errors import ArgumentError
            raise ArgumentError(f"{source}: not valid MLIR, and MLIR's diagnostic is not "
                                f"UTF-8 text ({e}); xla-gpu-opt shows it escaped") from None
        passes = pipeline.passes_for(args.target, threads=args.threads,
                                     blocks=args.blocks)
        if args.stop_after:
            names = [pipeline.pass_name(p) for p in passes]
            if args.stop_after not in names:
                _error(f"xla-gpu-translate: no pass named '{args.stop_after}' in the "
                       f"pipeline: {', '.join(dict.fromkeys(names))}")
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
                    _error("xla-gpu-translate: no ptxas found (install "
                           "nvidia-cuda-nvcc or a CUDA toolkit)")
                    return 2
                out = cubin
    except mlir_ir.MLIRError as e:
        _error(_diagnostics(e, rename))
        return 2
    except (codegen.CodegenError, ValueError) as e:
        _error(f"xla-gpu-translate: {e}")
        return 2
    _write_output(args.output, out)
    return 0


def _write_output(path: str, out: str | bytes) -> None:
    """Writes `out` to `path`, or to stdout for "-"."""
    if path == "-":
        if isinstance(out, bytes):
            sys.stdout.buffer.write(out)
        else:
            sys.stdout.write(out)
        return
    try:
        if isinstance(out, bytes):
            Path(path).write_bytes(out)
        else:
            Path(path).write_text(out)
    except OSError as e:
        from .errors import ArgumentError
        raise ArgumentError(f"cannot write '{path}': {e.strerror}") from None


def _make_dump_dir(path: str | None) -> None:
    """--dump-dir, created before the work starts (an unusable one is an
    error up front, not a failure in the middle of the pipeline)."""
    if path is not None:
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            from .errors import ArgumentError
            raise ArgumentError(f"--dump-dir: cannot create '{path}': {e.strerror}") from None


def _guarded(prog: str, main, argv=None) -> int:
    """Runs a CLI's main: any error becomes one line on stderr and exit
    status 2 (1 is kept for numerical mismatches), Ctrl-C one line and 130;
    XLA_GPU_TRACEBACK=1 shows the traceback of unexpected errors instead."""
    from .errors import XlaGpuError
    try:
        return main(argv)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        _error(f"{prog}: interrupted")
        return 130
    except MemoryError:
        _error(f"{prog}: out of host memory")
        return 2
    except RecursionError:
        _error(f"{prog}: the input nests too deeply")
        return 2
    except XlaGpuError as e:
        _error(f"{prog}: {e}")
        return 2
    except Exception as e:  # a bug: still one line, never a traceback
        if os.environ.get("XLA_GPU_TRACEBACK"):
            raise
        _error(f"{prog}: internal error: {type(e).__name__}: {_one_line(e)} "
               "(set XLA_GPU_TRACEBACK=1 for the traceback)")
        return 2


def console(prog: str, main) -> None:
    """A console script's entry: Ctrl-C raises KeyboardInterrupt (also
    where the tool was started with SIGINT ignored, as a background job
    of a script is), then `_guarded` runs `main` and its status is the
    exit status."""
    import signal
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread
        pass
    raise SystemExit(_guarded(prog, main))


def translate_main() -> None:
    console("xla-gpu-translate", translate)


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

    from . import hlo
    try:
        text, source = _read_text(args.input, hlo_text=True)
        module = hlo.parse_module(text, source=source)
    except hlo.HloParseError as e:
        _error(str(e))
        return 2

    from mlir import ir as mlir_ir

    from . import emitters, ir
    try:
        kernel = emitters.emit(module, ir.Context(), fusion=args.fusion)
        kernel.module.operation.verify()
    except hlo.HloError as e:
        _error(f"xla-gpu-fusion-to-mlir: {source}: {e}")
        return 2
    except mlir_ir.MLIRError as e:
        _error(f"xla-gpu-fusion-to-mlir: invalid IR emitted: {_diagnostics(e)}")
        return 2
    launch = kernel.launch
    header = (f"// fusion: {kernel.fusion.name}, emitter: {kernel.emitter} "
              f"(hero: {kernel.fusion.hero_kind}), threads: {launch.threads}, "
              f"blocks: {launch.blocks}\n")
    header += "".join(f"// note: {n}\n" for n in kernel.notes)
    _write_output(args.output, header + str(kernel.module))
    return 0


def fusion_to_mlir_main() -> None:
    console("xla-gpu-fusion-to-mlir", fusion_to_mlir)


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
    parser.add_argument("input", help="an .hlo file, or - for stdin")
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
    parser.add_argument("--profile", metavar="TRACE.json",
                        help="write a trace of the compile and the first run (Chrome "
                             "trace-event JSON: open it in ui.perfetto.dev or "
                             "chrome://tracing), and TRACE.html beside it (a picture "
                             "of it that needs no viewer)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress line and no compile summary on stderr")
    parser.add_argument("--num-partitions", type=int, metavar="N",
                        help="run the SPMD program on N partitions (default: the module "
                             "header's num_partitions); device d's inputs are seeded "
                             "with --seed + d")
    parser.add_argument("--num-replicas", type=int, metavar="R",
                        help="... and R replicas (default: the header's replica_count)")
    args = parser.parse_args(argv)

    import numpy as np

    import xla_gpu
    from xla_gpu import hlo
    from xla_gpu.analysis.fusion import select_fusion
    from xla_gpu.errors import ArgumentError
    from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type

    prog = "xla-gpu-run"
    _check_regex("--dump-regex", args.dump_regex)
    if args.seed < 0:
        raise ArgumentError(f"--seed must be a non-negative integer, got {args.seed}")
    if args.iterations < 1:
        raise ArgumentError(f"--iterations must be at least 1, got {args.iterations}")
    for flag, value in (("--num-partitions", args.num_partitions),
                        ("--num-replicas", args.num_replicas)):
        if value is not None and value < 1:
            raise ArgumentError(f"{flag} must be a positive integer, got {value}")
    _make_dump_dir(args.dump_dir)
    if args.ffi:
        from xla_gpu import ffi
        for spec in args.ffi:
            ffi.register_from_spec(spec)
    profile = _Profile(args.profile)
    try:
        text, source = _read_text(args.input, hlo_text=True)
        start = time.perf_counter()
        with _progress_line(args.quiet), profile.recording():
            exe = xla_gpu.compile(text, target=args.target, arch=args.arch,
                                  fusion=args.fusion, cache=not args.no_cache,
                                  dump_dir=args.dump_dir, dump_regex=args.dump_regex,
                                  command_buffers=not args.no_command_buffers,
                                  num_partitions=args.num_partitions,
                                  num_replicas=args.num_replicas)
        compile_s = time.perf_counter() - start
        if not args.quiet:
            _error(f"{prog}: {compile_summary(exe, compile_s)}")
        if not isinstance(exe, xla_gpu.Executable) and exe.num_devices > 1:
            return _run_devices(args, text, source, exe, compile_s, profile)
        if not isinstance(exe, xla_gpu.Executable):   # a whole program
            return _run_program(args, text, source, exe, compile_s, profile)
        module = hlo.parse_module(text, source=source)
        fusion = select_fusion(module, args.fusion)
        inputs = random_inputs(fusion.computation, args.seed)
        start = time.perf_counter()
        with profile.recording():
            outputs = exe.run(*inputs)
        run_s = time.perf_counter() - start
        profile.write()
        for _ in range(args.iterations - 1):
            exe.run(*inputs)
        if args.iterations > 1:
            run_s = exe.time(*inputs, iterations=args.iterations, warmup=1)
        expected = hlo.evaluate(fusion.computation, *inputs)
    except hlo.HloError as e:
        _error(f"{prog}: {source}: {e}" if not isinstance(e, hlo.HloParseError) else str(e))
        return 2
    except (xla_gpu.XlaGpuError, ValueError) as e:
        _error(f"{prog}: {e}")
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
        print(f"{_escape(args.input)}: fusion '{fusion.name}' on {where}: OK, "
              f"{len(outputs)} output(s) match the reference; {times}")
        return 0
    print(f"{_escape(args.input)}: fusion '{fusion.name}' on {where}: MISMATCH: {worst}; {times}")
    return 1


def _run_program(args, text: str, source: str, exe, compile_s: float, profile) -> int:
    """xla-gpu-run on a whole module: every output leaf of the ENTRY is
    compared with the reference interpreter's."""
    import time

    import numpy as np

    from xla_gpu import hlo
    from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type

    module = hlo.parse_module(text, source=source)
    entry = module.entry
    inputs = random_inputs(entry, args.seed)
    start = time.perf_counter()
    with profile.recording():
        outputs = exe.run(*inputs)
    run_s = time.perf_counter() - start
    profile.write()
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
        print(f"{_escape(args.input)}: program '{exe.name}' on {where}: OK, {len(outputs)} "
              f"output(s) match the reference; {times}")
        return 0
    print(f"{_escape(args.input)}: program '{exe.name}' on {where}: MISMATCH: {worst}; {times}")
    return 1


def _run_devices(args, text: str, source: str, exe, compile_s: float, profile) -> int:
    """xla-gpu-run on an SPMD program of several devices: each device runs
    on inputs seeded with --seed + its id, and every output leaf of every
    device is compared with the reference interpreter's run of all the
    devices (evaluate_devices)."""
    import time

    import numpy as np

    from xla_gpu import hlo
    from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type

    module = hlo.parse_module(text, source=source)
    entry = module.entry
    R, P = exe.num_replicas, exe.num_partitions
    inputs = [random_inputs(entry, args.seed + d) for d in range(R * P)]
    start = time.perf_counter()
    with profile.recording():
        outputs = exe.run_partitioned(inputs)
    run_s = time.perf_counter() - start
    profile.write()
    launches = exe.kernel_launches()
    if args.iterations > 1:
        start = time.perf_counter()
        for _ in range(args.iterations - 1):
            exe.run_partitioned(inputs)
        run_s = (time.perf_counter() - start) / (args.iterations - 1)
    expected = hlo.evaluate_devices(module, inputs, num_replicas=R, num_partitions=P)
    reduces = any(has_reduction(c) for c in module.computations)
    worst = worst_device = None
    for d, (got_leaves, want_leaves) in enumerate(zip(outputs, expected)):
        for k, (got, want) in enumerate(zip(got_leaves, want_leaves)):
            etype = exe.outputs[k].element_type
            mismatch = compare(np.asarray(got), np.asarray(want), etype, k,
                               tolerance_type(entry, etype), reduces)
            if mismatch is not None and (worst is None or mismatch.count > worst.count):
                worst, worst_device = mismatch, d
    devices = (f"{R * P} devices ({R} replica{'s' if R != 1 else ''} x {P} "
               f"partition{'s' if P != 1 else ''})")
    where = (f"{exe.target}, {devices} ({len(exe.kernels)} kernels, {launches} kernel "
             f"launches and {exe.stats.get('collectives', 0)} collectives on device 0, "
             f"{len(exe.thunks)} thunks)")
    times = f"compile {compile_s * 1e3:.1f} ms, run {run_s * 1e3:.3f} ms"
    if worst is None:
        print(f"{_escape(args.input)}: program '{exe.name}' on {where}: OK, "
              f"{len(outputs[0])} output(s) of each device match the reference; {times}")
        return 0
    print(f"{_escape(args.input)}: program '{exe.name}' on {where}: MISMATCH on device "
          f"{worst_device}: {worst}; {times}")
    return 1


class _Profile:
    """--profile: one trace of the compile and the first run, written
    after that run (the timed runs after it are not recorded)."""

    def __init__(self, path: str | None):
        from xla_gpu._trace import Trace, _check_path
        if path is not None:
            _check_path(path)
        self.path = path
        self.trace = Trace() if path is not None else None

    def recording(self):
        from contextlib import nullcontext

        from xla_gpu._trace import recording
        return nullcontext() if self.trace is None else recording(self.trace)

    def write(self) -> None:
        if self.trace is None:
            return
        from xla_gpu.runtime.trace_picture import write_trace_html
        self.trace.write(self.path)
        page = Path(self.path)
        page = page.with_suffix(".html") if page.suffix == ".json" else \
            page.with_name(page.name + ".html")
        write_trace_html(self.trace.to_json(), page, title=f"xla-gpu-run trace ({page.stem})")


def _progress_line(quiet: bool):
    """The compile's progress line on stderr (a terminal only)."""
    from xla_gpu._progress import Progress, reporting
    return reporting(Progress(sys.stderr, enabled=False if quiet else None,
                              label="xla-gpu-run"))


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1e3:.0f} ms"


def compile_summary(exe, seconds: float) -> str:
    """One line: what a compile made and where its time went."""
    t = exe.timings
    counts = getattr(exe, "kernel_counts", None)
    kernel_stages = [f"{key} {_seconds(t[key])}"
                     for key in ("emit", "pipeline", "llvm", "ptx", "cubin") if key in t]
    if counts:
        made = (f"{counts['kernels']} kernels ({counts['compiled']} compiled, "
                f"{counts['cached']} from the cache)")
        stages = [("HLO passes", "prepare"), ("scheduling", "schedule"),
                  ("buffer assignment", "buffer_assignment"),
                  ("kernels and thunks", "thunks+kernels")]
        parts = [f"{label} {_seconds(t[key])}" for label, key in stages if key in t]
        text = f"compiled in {_seconds(seconds)}: {made}; " + ", ".join(parts)
        if kernel_stages:
            text += " (per kernel, summed over threads: " + ", ".join(kernel_stages) + ")"
        return text
    if not kernel_stages:
        return f"compiled in {_seconds(seconds)}: 1 kernel (from the cache)"
    return f"compiled in {_seconds(seconds)}: 1 kernel; " + ", ".join(kernel_stages)


def run_hlo_main() -> None:
    console("xla-gpu-run", run_hlo)
