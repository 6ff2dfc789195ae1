"""Whole programs (tests/python/programs/) compiled by xla_gpu, side by side
with XLA.

    # here (cpu target): kernels, launches, temp memory vs XLA's, compile
    # time, run time vs XLA:CPU (jax on cpu, when jax is importable)
    python bench/programs.py [NAME...] [--form after|before|both] [--iterations 20]

    # the GPU side (bench/run_gpu.py calls these):
    python bench/programs.py prepare-gpu --out build/run_gpu_programs   # here (MLIR)
    python bench/programs.py run-gpu build/run_gpu_programs --out "$OUT" # on the GPU
    python bench/programs.py run-gpu DIR --target cpu   # the same logic, cpu target

Per program and form (`after`: XLA:CPU's after_optimizations text run as
fused; `before`: JAX's text through xla_gpu's own HLO passes):
  kernels   distinct compiled kernels; launches: kernel launches of one run
            (loops counted per iteration)
  temp      temp_size_in_bytes of ours and of XLA (xla_memory.json: jax's
            `compiled.memory_analysis()` on XLA:CPU) and their ratio
  compile   seconds, with the kernel cache cold (a fresh cache directory)
  run       cpu-target milliseconds per run (wall, after a warm-up), and
            XLA:CPU's (jax.jit of the same program on the same inputs)

On the GPU: ours with and without command buffers (CUDA graphs) and jax.jit
(XLA:GPU), milliseconds per run (wall clock over back-to-back runs, inputs
already on the device, outputs left there), and ours' host time to issue
one run divided by its kernel launches (the CPU launch overhead per kernel).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROGRAMS = ROOT / "tests" / "python" / "programs"
sys.path.insert(0, str(ROOT / "tests" / "python"))
try:
    import xla_gpu  # noqa: F401
except ImportError:   # a bare source tree (the GPU machine: runtime + hlo)
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from program_data import load_program as load_data, program_names  # noqa: E402

FORMS = {"after": "after_optimizations_cpu.hlo", "before": "before_optimizations.hlo"}


def _jax_programs():
    """generate.py's jax functions by name, or None without jax."""
    try:
        import jax  # noqa: F401
    except ImportError:
        return None
    spec = importlib.util.spec_from_file_location("program_generate", PROGRAMS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # its dataclasses look it up
    spec.loader.exec_module(module)
    return {p.name: p for p in module.PROGRAMS}


def _register_python_handlers():
    """ffi_call's handler (handler.cc) as a Python handler for the cpu target."""
    from xla_gpu.hlo import interpreter

    def add_scaled(x, y, scale, mode):
        return {0: scale * x, 1: scale * x + y, 2: scale * (x - y)}[int(mode)]
    interpreter.register_custom_call("xla_gpu_test_add_scaled", add_scaled)


def _time(fn, iterations: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return (time.perf_counter() - start) / iterations


_set_up: set[str] = set()


def _set_up_once(prog) -> bool:
    """Runs a program's jax-side setup (ffi_call builds and registers its
    handler) once per process; False when it fails."""
    if prog.setup is not None and prog.name not in _set_up:
        try:
            prog.setup()
        except Exception:
            return False
        _set_up.add(prog.name)
    return True


def _jax_time(prog, iterations: int, backend: str) -> float | None:
    import jax
    if not _set_up_once(prog):
        return None
    args = prog.make_inputs(np.random.default_rng(0))
    with jax.enable_x64(prog.x64):
        jitted = jax.jit(prog.fn, keep_unused=True)
        args = jax.device_put(args, jax.devices(backend)[0])

        def call():
            jax.block_until_ready(jitted(*args))
        return _time(call, iterations)


def cpu_table(names, forms, iterations: int, with_jax: bool) -> list[dict]:
    """Ours first for every program, XLA:CPU after: jax's ffi.pycapsule
    retypes ctypes.pythonapi.PyCapsule_New for the whole process, which
    breaks xla_gpu's native handles compiled after it (reported)."""
    import xla_gpu
    from xla_gpu import hlo
    _register_python_handlers()
    rows = []
    for name in names:
        data = load_data(name)
        for form in forms:
            row = {"program": name, "form": form, "xla_temp": data.xla_memory.get(
                "temp_size_in_bytes"), "xla_cpu_ms": None}
            text = (data.folder / FORMS[form]).read_text()
            cache = tempfile.mkdtemp(prefix="xla_gpu_bench_")
            os.environ["XLA_GPU_CACHE_DIR"] = cache
            xla_gpu.compiler.clear_memory_cache()
            try:
                start = time.perf_counter()
                exe = xla_gpu.compile(text, target="cpu")
                row["compile_s"] = time.perf_counter() - start
                results = exe.run(*data.inputs)
                row["match"] = not data.mismatches(results, hlo.parse_module(text))
                row["kernels"] = len(exe.kernels)
                row["launches"] = exe.kernel_launches()
                row["temp"] = exe.memory_analysis().temp_size_in_bytes
                row["run_ms"] = _time(lambda: exe.run(*data.inputs), iterations) * 1e3
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            rows.append(row)
            print(f"  {name} {form}: {'error' if 'error' in row else 'done'}",
                  file=sys.stderr, flush=True)
    jax_programs = _jax_programs() if with_jax else None
    for name in names if jax_programs else ():
        if name not in jax_programs:
            continue
        try:
            seconds = _jax_time(jax_programs[name], iterations, "cpu")
        except Exception as e:   # a program jax cannot rerun here
            print(f"  {name}: XLA:CPU timing failed: {e}", file=sys.stderr)
            continue
        for row in rows:
            if row["program"] == name and seconds is not None:
                row["xla_cpu_ms"] = seconds * 1e3
    print(HEADER)
    for row in rows:
        print(_row_text(row))
    return rows


def _fmt(value, spec=".2f", none="-"):
    return none if value is None else format(value, spec)


def _row_text(row: dict) -> str:
    if "error" in row:
        return f"| {row['program']} | {row['form']} | error: {row['error']} |"
    ratio = row["temp"] / row["xla_temp"] if row.get("xla_temp") else None
    return (f"| {row['program']} | {row['form']} | {'ok' if row['match'] else 'MISMATCH'} | "
            f"{row['kernels']} | {row['launches']} | {row['temp']} | "
            f"{_fmt(row.get('xla_temp'), 'd')} | {_fmt(ratio)} | {row['compile_s']:.1f} | "
            f"{row['run_ms']:.2f} | {_fmt(row.get('xla_cpu_ms'))} |")


HEADER = ("| program | form | result | kernels | launches/run | temp B | XLA temp B | "
          "ratio | compile s | run ms (cpu target) | XLA:CPU ms |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")


# -- the GPU side -------------------------------------------------------------------


def prepare_gpu(out: Path, names, arch: str, form: str = "before") -> int:
    """cuda programs (with and without command buffers) for the GPU machine,
    from jax's text through xla_gpu's passes ("before", what jax.jit gives
    XLA:GPU too) or from XLA:CPU's optimized text ("after")."""
    import xla_gpu
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    prepared = []
    for name in names:
        data = load_data(name)
        text = (data.folder / FORMS[form]).read_text()
        try:
            for variant, buffers in (("cb", True), ("nocb", False)):
                exe = xla_gpu.compile(text, target="cuda", arch=arch,
                                      command_buffers=buffers)
                exe.save(out / name / variant)
        except Exception as e:
            print(f"{name}: not prepared: {type(e).__name__}: {str(e).splitlines()[0]}")
            shutil.rmtree(out / name, ignore_errors=True)
            continue
        prepared.append(name)
        print(f"{name}: {len(exe.kernels)} kernels")
    (out / "index.json").write_text(json.dumps({"programs": prepared, "arch": arch,
                                                "form": form}))
    return 0 if prepared else 1


def _jax_outputs(prog, inputs: list[np.ndarray], backend: str) -> list[np.ndarray] | None:
    """jax.jit's outputs (flattened) on `backend` for the stored inputs;
    None when the program's jax inputs are not those leaves (or its setup
    fails)."""
    import jax
    if not _set_up_once(prog):
        return None
    args = prog.make_inputs(np.random.default_rng(0))
    leaves = jax.tree_util.tree_leaves(args)
    if len(leaves) != len(inputs) or not all(
            np.array_equal(np.asarray(a), b) for a, b in zip(leaves, inputs)):
        return None
    with jax.enable_x64(prog.x64):
        args = jax.device_put(args, jax.devices(backend)[0])
        out = jax.jit(prog.fn, keep_unused=True)(*args)
        return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def _register_cuda_handlers(ffi_directory: Path | None) -> None:
    """The ffi_call program's handler for "cuda": bench/gpu_check.py
    prepare builds it (bench/ffi_gpu_check.py) into build/gpu_check/ffi."""
    if ffi_directory is None or not (ffi_directory / "ffi_cases.json").exists():
        return
    sys.path.insert(0, str(HERE))
    import ffi_gpu_check
    ffi_gpu_check.register_cuda_handlers(ffi_directory)


def run_gpu(directory: Path, target: str, iterations: int, budget: float,
            ffi_directory: Path | None = None) -> dict:
    """Ours (both variants) against jax.jit on the programs `prepare_gpu`
    wrote; outputs checked against jax's stored ones (XLA:CPU's) and, on a
    GPU, against XLA:GPU's on the same inputs, with TF32's tolerance where
    f32 dots compute in it (as on XLA:GPU)."""
    from xla_gpu import hlo
    from xla_gpu.runtime.program import load_program
    index = json.loads((directory / "index.json").read_text())
    jax_programs = _jax_programs()
    backend = "gpu" if target == "cuda" else "cpu"
    tf32 = target == "cuda"
    if target == "cpu":
        _register_python_handlers()
    else:
        _register_cuda_handlers(ffi_directory)
    results = {"target": target, "programs": []}
    deadline = time.perf_counter() + budget
    for name in index["programs"]:
        if time.perf_counter() > deadline:
            results["programs"].append({"program": name, "skipped": "time budget"})
            continue
        data = load_data(name)
        row: dict = {"program": name}
        try:
            form = index.get("form", "after")
            module = hlo.parse_module((data.folder / FORMS[form]).read_text())
            xla_out = None
            if jax_programs and name in jax_programs and target == "cuda":
                xla_out = _jax_outputs(jax_programs[name], data.inputs, backend)
            for variant in ("cb", "nocb"):
                exe = load_program(directory / name / variant, trusted=True)
                if target == "cpu":
                    exe = _as_cpu(exe, data, form)
                    args = data.inputs
                    kwargs = {}
                else:
                    from xla_gpu.runtime.cuda import DeviceArray
                    args = [DeviceArray.from_host(np.require(a, requirements="C"))
                            for a in data.inputs]
                    kwargs = {"device_outputs": True}
                out = exe.run(*args, **kwargs)
                host = [o if isinstance(o, np.ndarray) else o.to_host() for o in out]
                found = data.mismatches(host, module, tf32=tf32)
                row[f"{variant}_match"] = not found
                if found:
                    row[f"{variant}_mismatches"] = [f[:160] for f in found[:3]]
                if xla_out is not None:
                    found = data.mismatches(host, module, tf32=tf32, expected=xla_out)
                    row[f"{variant}_match_xla"] = not found
                    if found:
                        row[f"{variant}_mismatches_xla"] = [f[:160] for f in found[:3]]
                row[f"{variant}_ms"] = _time(lambda: exe.run(*args, **kwargs),
                                             iterations) * 1e3
                launches = exe.kernel_launches()
                row["launches"] = launches
                issue = exe.timings.get("last_issue", exe.timings.get("last_run"))
                if issue is not None and launches:
                    row[f"{variant}_issue_us_per_kernel"] = issue / launches * 1e6
            if jax_programs and name in jax_programs:
                seconds = _jax_time(jax_programs[name], iterations, backend)
                row["xla_ms"] = None if seconds is None else seconds * 1e3
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            traceback.print_exc()
        results["programs"].append(row)
        print(json.dumps(row), flush=True)
    return results


def _as_cpu(exe, data, form: str):
    """A cuda program cannot run on the cpu target: recompile (the logic
    check of run-gpu without a GPU)."""
    import xla_gpu
    return xla_gpu.compile((data.folder / FORMS[form]).read_text(), target="cpu",
                           command_buffers=exe.command_buffers)


def gpu_report(results: dict) -> str:
    lines = ["| program | launches/run | ours ms (graphs) | ours ms (no graphs) | XLA ms | "
             "issue us/kernel (graphs / none) | outputs vs XLA:CPU (stored) / XLA:GPU |",
             "|---|---|---|---|---|---|---|"]
    details = []
    for row in results["programs"]:
        if "error" in row or "skipped" in row:
            lines.append(f"| {row['program']} | {row.get('error', row.get('skipped'))} |")
            continue
        ok = "ok" if row.get("cb_match") and row.get("nocb_match") else "MISMATCH"
        if "cb_match_xla" in row:
            ok += " / " + ("ok" if row["cb_match_xla"] and row.get("nocb_match_xla")
                           else "MISMATCH")
        lines.append(
            f"| {row['program']} | {row.get('launches')} | {_fmt(row.get('cb_ms'), '.3f')} | "
            f"{_fmt(row.get('nocb_ms'), '.3f')} | {_fmt(row.get('xla_ms'), '.3f')} | "
            f"{_fmt(row.get('cb_issue_us_per_kernel'), '.1f')} / "
            f"{_fmt(row.get('nocb_issue_us_per_kernel'), '.1f')} | {ok} |")
        for key, against in (("cb_mismatches", "XLA:CPU"), ("cb_mismatches_xla", "XLA:GPU")):
            for text in row.get(key, ()):
                details.append(f"- {row['program']} vs {against}: {text}")
    return "\n".join(lines + ([""] + details if details else []))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "prepare-gpu":
        p = argparse.ArgumentParser(prog="programs.py prepare-gpu")
        p.add_argument("names", nargs="*")
        p.add_argument("--out", type=Path, default=ROOT / "build" / "run_gpu_programs")
        p.add_argument("--arch", default="sm_90")
        p.add_argument("--form", choices=["before", "after"], default="before",
                       help="jax's text through our passes, or XLA:CPU's optimized text")
        args = p.parse_args(argv[1:])
        return prepare_gpu(args.out, args.names or program_names(), args.arch, args.form)
    if argv and argv[0] == "run-gpu":
        p = argparse.ArgumentParser(prog="programs.py run-gpu")
        p.add_argument("directory", type=Path)
        p.add_argument("--target", choices=["cuda", "cpu"], default="cuda")
        p.add_argument("--iterations", type=int, default=50)
        p.add_argument("--budget", type=float, default=300.0)
        p.add_argument("--ffi", type=Path, default=ROOT / "build" / "gpu_check" / "ffi",
                       help="the cuda FFI handlers bench/gpu_check.py prepare built")
        p.add_argument("--out", type=Path, default=None, help="a folder for programs.json")
        args = p.parse_args(argv[1:])
        results = run_gpu(args.directory, args.target, args.iterations, args.budget,
                          args.ffi)
        print(gpu_report(results))
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "programs.json").write_text(json.dumps(results, indent=1))
        return 0 if results["programs"] else 1
    p = argparse.ArgumentParser(prog="programs.py", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--form", choices=["after", "before", "both"], default="both")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--no-jax", action="store_true", help="skip XLA:CPU's timings")
    p.add_argument("--out", type=Path, default=HERE / "results" / "programs.json")
    args = p.parse_args(argv)
    forms = ["after", "before"] if args.form == "both" else [args.form]
    rows = cpu_table(args.names or program_names(), forms, args.iterations, not args.no_jax)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
