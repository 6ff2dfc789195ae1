"""The GPU check of custom calls through XLA's FFI: handlers registered for
platform "cuda" run inside whole programs compiled for the cuda target.

    # here (compiler, nvcc, jaxlib's FFI headers): build and compile
    python bench/ffi_gpu_check.py prepare --out build/ffi_gpu_check
    # on the GPU machine (numpy + cuda-python + this source tree; no MLIR,
    # no C++ or CUDA compiler needed):
    python bench/ffi_gpu_check.py run build/ffi_gpu_check

`prepare` builds, for x86-64 Linux, libXlaGpuFfi.so (the FFI runtime) and
the cuda test handlers (tests/python/ffi_handlers/cuda_handlers.cu, with
libstdc++ and the CUDA runtime linked statically so the GPU machine needs
only its driver), compiles the check's HLO programs for cuda and saves them
with their inputs. `ffi_gpu_cases(directory)` (what `run` prints, and what
bench/gpu_check.py can call) registers the handlers for "cuda" exactly as
with jax (`register_ffi_target(name, pycapsule(lib.Symbol), "cuda")`), plus
Python handlers on device arrays, runs every program, compares with numpy
(the stored ffi_call program: with jax's stored outputs) and returns one
row per case.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

HANDLERS_DIR = ROOT / "tests" / "python" / "ffi_handlers"
FFI_LIBRARY = "libXlaGpuFfi.so"
HANDLER_LIBRARY = "libxla_gpu_test_cuda_handlers.so"

# (symbol in the handler library, target name) registered for "cuda".
CUDA_TARGETS = [
    ("XlaGpuTestCudaAddBroadcast", "xla_gpu_test_add_broadcast"),
    ("XlaGpuTestCudaAddScaled", "xla_gpu_test_add_scaled"),
    ("XlaGpuTestCudaVariadic", "xla_gpu_test_variadic"),
    ("XlaGpuTestCudaScratch", "xla_gpu_test_scratch"),
    ("XlaGpuTestAlwaysFails", "xla_gpu_test_always_fails"),
]

_TYPED = 'api_version=API_VERSION_TYPED_FFI'

# name -> (HLO text, input shapes); the expected results are computed by
# `_expected` from the inputs.
PROGRAMS: dict[str, tuple[str, list[tuple[int, ...]]]] = {
    "add_broadcast": (f"""HloModule ffi_add_broadcast
ENTRY e {{
  a = f32[64] parameter(0)
  b = f32[4096] parameter(1)
  two = f32[] constant(2)
  twos = f32[4096] broadcast(two), dimensions={{}}
  b2 = f32[4096] multiply(b, twos)
  c = f32[4096] custom-call(a, b2), custom_call_target="xla_gpu_test_add_broadcast", {_TYPED}
  one = f32[] constant(1)
  ones = f32[4096] broadcast(one), dimensions={{}}
  ROOT r = f32[4096] add(c, ones)
}}""", [(64,), (4096,)]),
    "variadic": (f"""HloModule ffi_variadic
ENTRY e {{
  a = f32[1000] parameter(0)
  b = f32[1000] parameter(1)
  c = f32[1000] parameter(2)
  ROOT r = (f32[1000], f32[1000]) custom-call(a, b, c), custom_call_target="xla_gpu_test_variadic", {_TYPED}
}}""", [(1000,), (1000,), (1000,)]),
    "scratch": (f"""HloModule ffi_scratch
ENTRY e {{
  x = f32[777] parameter(0)
  e = f32[777] exponential(x)
  ROOT r = f32[777] custom-call(e), custom_call_target="xla_gpu_test_scratch", {_TYPED}
}}""", [(777,)]),
    "always_fails": (f"""HloModule ffi_always_fails
ENTRY e {{
  x = f32[8] parameter(0)
  ROOT r = f32[8] custom-call(x), custom_call_target="xla_gpu_test_always_fails", {_TYPED}
}}""", [(8,)]),
    "legacy_abi": ("""HloModule ffi_legacy_abi
ENTRY e {
  a = f32[64] parameter(0)
  b = f32[4096] parameter(1)
  ROOT c = f32[4096] custom-call(a, b), custom_call_target="xla_gpu_test_legacy_add_broadcast", api_version=API_VERSION_STATUS_RETURNING, backend_config="64,4096"
}""", [(64,), (4096,)]),
    "python_in_place": (f"""HloModule ffi_python_in_place
ENTRY e {{
  x = f32[2048] parameter(0)
  c = f32[2048] custom-call(x), custom_call_target="xla_gpu_test_py_copy", {_TYPED}, backend_config={{scale = 3.0 : f32}}
  three = f32[] constant(3)
  threes = f32[2048] broadcast(three), dimensions={{}}
  ROOT r = f32[2048] multiply(c, threes)
}}""", [(2048,)]),
    "python_returning": (f"""HloModule ffi_python_returning
ENTRY e {{
  x = f32[300] parameter(0)
  ROOT r = f32[300] custom-call(x), custom_call_target="xla_gpu_test_py_plus_one", {_TYPED}
}}""", [(300,)]),
}


def _expected(case: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    if case == "add_broadcast":
        a, b = inputs
        return [a[np.arange(b.size) % a.size] + b * np.float32(2) + np.float32(1)]
    if case == "legacy_abi":
        a, b = inputs
        return [a[np.arange(b.size) % a.size] + b]
    if case == "variadic":
        a, b, c = inputs
        base = a + b * np.float32(2) + c * np.float32(3)
        return [base, base + np.float32(1)]
    if case == "scratch":
        return [np.exp(inputs[0])[::-1]]
    if case == "python_in_place":
        return [inputs[0] * np.float32(3)]
    if case == "python_returning":
        return [inputs[0] + np.float32(1)]
    raise KeyError(case)


# --- prepare (here) ------------------------------------------------------------


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{' '.join(command)}\n{done.stderr[-4000:]}")


def build_libraries(out: Path) -> None:
    """libXlaGpuFfi.so and the cuda handler library, self-contained
    (static libstdc++ / libgcc / CUDA runtime)."""
    import jax
    include = jax.ffi.include_dir()
    cxx = os.environ.get("CXX") or shutil.which("g++") or "c++"
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("prepare needs nvcc (the CUDA toolkit) to build the cuda handlers")
    static = ["-static-libstdc++", "-static-libgcc"]
    _run([cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
          "-fno-exceptions", f"-Wl,--version-script={ROOT / 'ffi' / 'exports.map'}",
          str(ROOT / "ffi" / "xla_gpu_ffi.cc"), "-o", str(out / FFI_LIBRARY), "-ldl",
          "-pthread", *static], "building libXlaGpuFfi.so")
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "cuda_handlers.o"
        _run([nvcc, "-std=c++17", "-O2", "-arch=sm_90", "-Xcompiler", "-fPIC", "-w",
              f"-I{include}", f"-I{HANDLERS_DIR}", "-c", str(HANDLERS_DIR / "cuda_handlers.cu"),
              "-o", str(obj)], "compiling cuda_handlers.cu")
        cuda_lib = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64"
        _run([cxx, "-shared", "-o", str(out / HANDLER_LIBRARY), str(obj), f"-L{cuda_lib}",
              "-lcudart_static", "-ldl", "-lrt", "-pthread", *static, "-Wl,--no-undefined"],
             "linking the cuda handlers")


def prepare(out: Path, arch: str = "sm_90") -> int:
    import xla_gpu
    out.mkdir(parents=True, exist_ok=True)
    build_libraries(out)
    rng = np.random.default_rng(15)
    index = []
    cases = dict(PROGRAMS)
    stored = ROOT / "tests" / "python" / "programs" / "ffi_call"
    cases["ffi_call_program"] = ((stored / "after_optimizations_cpu.hlo").read_text(), None)
    for case, (text, shapes) in cases.items():
        entry: dict = {"case": case}
        try:
            exe = xla_gpu.compile(text, target="cuda", arch=arch)
            exe.save(out / case)
            if shapes is not None:
                inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
                np.savez(out / case / "ffi_inputs.npz",
                         **{f"arg{i}": a for i, a in enumerate(inputs)})
        except Exception as e:  # report and go on: the table shows it
            entry["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
        index.append(entry)
    (out / "ffi_cases.json").write_text(json.dumps(index, indent=1))
    bad = [e for e in index if "error" in e]
    print(f"wrote {len(index) - len(bad)} ffi programs and the handler libraries to {out}")
    for e in bad:
        print(f"  {e['case']}: {e['error']}")
    return 1 if bad else 0


# --- run (on the GPU) ----------------------------------------------------------


def _python_handlers(ffi) -> None:
    """Python handlers on device arrays: one writes its result in place
    with the driver on the call's stream, one returns a host array."""
    from cuda.bindings import driver as cu

    def copy_in_place(x, out, *, scale, stream):
        assert scale == np.float32(3.0), scale
        cai = x.__cuda_array_interface__
        assert cai["shape"] == out.shape and cai["stream"] == (stream or 1)
        (err,) = cu.cuMemcpyDtoDAsync(out.ptr, cai["data"][0], out.nbytes, stream)
        assert err == cu.CUresult.CUDA_SUCCESS, err

    def plus_one(x, *, stream):
        return x.to_host() + np.float32(1)

    ffi.register_ffi_target("xla_gpu_test_py_copy", copy_in_place, platform="cuda")
    ffi.register_ffi_target("xla_gpu_test_py_plus_one", plus_one, platform="cuda")


def register_cuda_handlers(directory: Path):
    """Loads the carried libraries and registers every cuda handler."""
    os.environ.setdefault("XLA_GPU_FFI_LIBRARY", str(directory / FFI_LIBRARY))
    import xla_gpu.ffi as ffi
    lib = ffi.load_library(directory / HANDLER_LIBRARY)
    for symbol, target in CUDA_TARGETS:
        ffi.register_ffi_target(target, ffi.pycapsule(getattr(lib, symbol)), platform="cuda")
    ffi.register_ffi_target("xla_gpu_test_legacy_add_broadcast",
                            ffi.pycapsule(lib.XlaGpuTestCudaLegacyAddBroadcast),
                            platform="cuda", api_version=0)
    _python_handlers(ffi)
    return lib


def _compare(got: list[np.ndarray], want: list[np.ndarray]) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} results, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        if g.shape != w.shape:
            return f"result {k}: shape {g.shape}, expected {w.shape}"
        if not np.allclose(g, w, rtol=2e-6, atol=1e-6):
            worst = float(np.max(np.abs(g.astype(np.float64) - w)))
            return f"result {k}: max abs error {worst:.3g}"
    return None


def ffi_gpu_cases(directory: str | os.PathLike, iterations: int = 20) -> list[dict]:
    """Runs every prepared case on the GPU; one row per case: case, result
    ("ok", "MISMATCH: ...", "ERROR: ..."), ms (median of `iterations` runs
    including the host copies), detail."""
    directory = Path(directory)
    index = json.loads((directory / "ffi_cases.json").read_text())
    rows: list[dict] = []
    try:
        register_cuda_handlers(directory)
    except Exception as e:
        return [{"case": "register", "result": f"ERROR: {type(e).__name__}: {e}",
                 "ms": None, "detail": traceback.format_exc(limit=3)}]
    from xla_gpu.ffi import FfiError
    from xla_gpu.runtime.program import load_program
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    for entry in index:
        case = entry["case"]
        row = {"case": case, "result": "ok", "ms": None, "detail": ""}
        rows.append(row)
        if "error" in entry:
            row["result"] = "NOT COMPILED: " + entry["error"][:100]
            continue
        try:
            exe = load_program(directory / case, trusted=True)
            if case == "ffi_call_program":
                from program_data import load_program as load_data
                from xla_gpu import hlo
                data = load_data("ffi_call")
                inputs = data.inputs
                module = hlo.parse_module(data.before_path.read_text())
            else:
                with np.load(directory / case / "ffi_inputs.npz") as stored:
                    inputs = [stored[f"arg{i}"] for i in range(len(stored.files))]
            if case == "always_fails":
                try:
                    exe.run(*inputs)
                    row["result"] = "MISMATCH: the handler's error did not surface"
                except FfiError as e:
                    ok = e.code == "FAILED_PRECONDITION" and "always fails" in str(e)
                    row["result"] = "ok" if ok else f"MISMATCH: {e}"
                    row["detail"] = str(e)[:200]
                continue
            got = [np.asarray(r) for r in exe.run(*inputs)]
            if case == "ffi_call_program":
                problems = data.mismatches(got, module)
                problem = "; ".join(problems) if problems else None
            else:
                problem = _compare(got, _expected(case, inputs))
            if problem:
                row["result"] = "MISMATCH: " + problem
                continue
            times = []
            for _ in range(iterations):
                start = time.perf_counter()
                exe.run(*inputs)
                times.append(time.perf_counter() - start)
            row["ms"] = round(float(np.median(times)) * 1e3, 3)
            row["detail"] = f"custom calls per run: {exe.stats.get('custom_calls', 0)}"
        except Exception as e:
            row["result"] = f"ERROR: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            row["detail"] = traceback.format_exc(limit=4)
    return rows


def run(directory: Path, iterations: int) -> int:
    rows = ffi_gpu_cases(directory, iterations)
    width = max(len(r["case"]) for r in rows)
    print(f"{'case':<{width}}  {'result':<10}  ms (median, with host copies)")
    for r in rows:
        ms = "" if r["ms"] is None else f"{r['ms']:.3f}"
        print(f"{r['case']:<{width}}  {r['result']:<10}  {ms}")
        if r["result"] != "ok" and r["detail"]:
            print("    " + r["detail"].replace("\n", "\n    "))
    return 0 if all(r["result"] == "ok" for r in rows) else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="build the libraries and compile the programs")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "ffi_gpu_check")
    p.add_argument("--arch", default="sm_90")
    r = sub.add_parser("run", help="run the prepared cases on the GPU")
    r.add_argument("directory", type=Path)
    r.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args(argv)
    if args.cmd == "prepare":
        return prepare(args.out, args.arch)
    return run(args.directory, args.iterations)


if __name__ == "__main__":
    sys.exit(main())
