"""GEMM fusions vs the gemm thunk + epilogue kernels, on the cpu target.

    python bench/gemm_fusion.py                  # the table below
    python bench/gemm_fusion.py --iterations 5 --no-jax
    python bench/gemm_fusion.py --out bench/results/gemm_fusion.md

Cases: the stored programs whose pre-optimization text has a dot
(tests/python/programs/*/before_optimizations.hlo) and the seed example,
jax's text of `-((a @ b) * 0.125)` with a: s8[1024,512], b: bf16[512,2048].
Each is compiled twice through xla_gpu's HLO passes: with GEMM fusions
(the GemmFusion pass: a dot, its prologue and epilogue as one kernel of
the GEMM emitter) and without (XLA_GPU_GEMM_FUSION=0: a gemm thunk, numpy
on the cpu target, and separate kernels for converts and epilogues).

Per case and mode:
  fusions   GEMM kernels (the GEMM emitter's) in the program
  kernels   distinct compiled kernels; launches: kernel launches + gemm
            calls of one run (loops counted per iteration)
  bytes     bytes the thunks read and write, from their buffer slices
            (a loop body's thunks counted once)
  run       milliseconds per run on the cpu target (median of up to 200
            runs or 3 s after 3 warm-up runs), and XLA:CPU's (jax.jit on the
            cpu backend, same inputs)

The whole-program compile cache is keyed by the text, not by
XLA_GPU_GEMM_FUSION, so every compile here bypasses it (cache=False).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROGRAMS = ROOT / "tests" / "python" / "programs"
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(HERE))

SEED_TEXT = (ROOT / "examples" / "seed_gemm.hlo").read_text()


def _median_ms(fn, iterations: int, budget_s: float = 3.0) -> float:
    """Median milliseconds of `fn` over `iterations` calls (fewer when they
    take more than `budget_s` in all, at least 3) after 3 warm-up calls
    (the first runs of a program pay for loading its kernels)."""
    for _ in range(3):
        fn()
    times = []
    begin = time.perf_counter()
    while len(times) < iterations and (len(times) < 3 or
                                       time.perf_counter() - begin < budget_s):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _cases(names):
    """(name, text, inputs, check) per case; check(results) -> bool."""
    from program_data import load_program, program_names
    from xla_gpu import hlo
    from xla_gpu.hlo.numerics import compare, random_inputs
    out = []
    for name in program_names():
        if names and name not in names:
            continue
        text = (PROGRAMS / name / "before_optimizations.hlo").read_text()
        if " dot(" not in text:
            continue
        data = load_program(name)
        module = hlo.parse_module(text)
        out.append((name, text, data.inputs,
                    lambda results, d=data, m=module: not d.mismatches(results, m)))
    if not names or "seed" in names:
        module = hlo.parse_module(SEED_TEXT)
        inputs = random_inputs(module.entry, 0)
        (want,) = hlo.evaluate(module, *inputs)

        def check(results, want=want):
            return compare(np.asarray(results[0]), np.asarray(want), "bf16", 0, "bf16",
                           True) is None
        out.append(("seed s8x bf16 1024x512x2048", SEED_TEXT, inputs, check))
    return out


def _measure(text, inputs, check, fused: bool, iterations: int) -> dict:
    import xla_gpu
    from xla_gpu.runtime.thunks import walk
    os.environ["XLA_GPU_GEMM_FUSION"] = "1" if fused else "0"
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    results = exe.run(*inputs)
    thunks = [t for t in walk(exe.thunks) if t.kind != "command_buffer"]
    stats = exe.stats
    return {
        "match": check(results),
        "fusions": sum(1 for k in exe.kernels.values() if k.spec.emitter == "gemm"),
        "kernels": len(exe.kernels),
        "launches": int(stats.get("kernels", 0)) + int(stats.get("gemms", 0)),
        "gemms": sum(1 for t in thunks if t.kind == "gemm"),
        "bytes": sum(s.size for t in thunks for s, _ in t.buffer_uses()),
        "temp": exe.memory_analysis().temp_size_in_bytes,
        "ms": _median_ms(lambda: exe.run(*inputs), iterations),
    }


def _xla_cpu_ms(name, inputs, iterations: int) -> float | None:
    """jax.jit of the program (generate.py's function) or of the seed's
    function on jax's cpu backend."""
    import jax
    import jax.numpy as jnp
    if name.startswith("seed"):
        def fn(a, b):
            return -((a @ b) * 0.125)
        args = [jnp.asarray(x) for x in inputs]
        x64 = False
    else:
        from programs import _jax_programs
        progs = _jax_programs() or {}
        prog = progs.get(name)
        if prog is None:
            return None
        if prog.setup is not None:
            prog.setup()
        fn, args, x64 = prog.fn, prog.make_inputs(np.random.default_rng(0)), prog.x64
    with jax.enable_x64(x64):
        jitted = jax.jit(fn, keep_unused=True)
        args = jax.device_put(args, jax.devices("cpu")[0])
        return _median_ms(lambda: jax.block_until_ready(jitted(*args)), iterations)


HEADER = ("| case | GEMM kernels | kernels fused / unfused | launches+gemms fused / unfused "
          "| bytes moved fused / unfused | run ms fused | run ms unfused | XLA:CPU ms | "
          "match |\n|---|---|---|---|---|---|---|---|---|")


def _row(name, fused, plain, xla_ms) -> str:
    xla = "-" if xla_ms is None else f"{xla_ms:.3f}"
    match = "ok" if fused["match"] and plain["match"] else \
        f"fused {fused['match']}, unfused {plain['match']}"
    return (f"| {name} | {fused['fusions']} | {fused['kernels']} / {plain['kernels']} | "
            f"{fused['launches']} / {plain['launches']} | "
            f"{fused['bytes']:,} / {plain['bytes']:,} | {fused['ms']:.3f} | {plain['ms']:.3f} | "
            f"{xla} | {match} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="programs (and/or 'seed'); default: all")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--no-jax", action="store_true", help="skip XLA:CPU")
    parser.add_argument("--out", type=Path, help="also write the table there")
    args = parser.parse_args(argv)
    import tempfile
    os.environ.setdefault("XLA_GPU_CACHE_DIR", tempfile.mkdtemp(prefix="xla_gpu_bench_"))
    from xla_gpu.hlo import interpreter

    def add_scaled(x, y, scale, mode):
        return {0: scale * x, 1: scale * x + y, 2: scale * (x - y)}[int(mode)]
    interpreter.register_custom_call("xla_gpu_test_add_scaled", add_scaled)
    saved = os.environ.get("XLA_GPU_GEMM_FUSION")
    rows = []
    try:
        for name, text, inputs, check in _cases(args.names):
            fused = _measure(text, inputs, check, True, args.iterations)
            plain = _measure(text, inputs, check, False, args.iterations)
            rows.append((name, inputs, fused, plain))
            print(f"  {name}: done", file=sys.stderr, flush=True)
    finally:
        if saved is None:
            os.environ.pop("XLA_GPU_GEMM_FUSION", None)
        else:
            os.environ["XLA_GPU_GEMM_FUSION"] = saved
    # XLA:CPU after ours: jax retypes ctypes.pythonapi.PyCapsule_New for the
    # whole process (see bench/programs.py).
    lines = [HEADER]
    for name, inputs, fused, plain in rows:
        xla_ms = None
        if not args.no_jax:
            try:
                xla_ms = _xla_cpu_ms(name, inputs, args.iterations)
            except Exception as e:   # noqa: BLE001 - a program jax cannot rerun here
                print(f"  {name}: XLA:CPU timing failed: {e}", file=sys.stderr)
        lines.append(_row(name, fused, plain, xla_ms))
    table = "\n".join(lines)
    print(table)
    if args.out is not None:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
