"""A compile-cache hit in a fresh process, end to end: what
`python -c "import xla_gpu; xla_gpu.compile(text, target='cpu')"` costs
when the program is in the disk cache, next to what numpy's own import and
`import xla_gpu.runtime` cost, and the compiler's identity (computed before
every cache lookup).

Each row is the median of --repeat fresh interpreters (the time after
interpreter start-up: each child times itself from its first line); the
cache is a private temporary directory filled once beforehand. "total CPU"
is the child's CPU time over the same span (less sensitive to a busy
machine than the wall times). The last columns say whether the child
imported MLIR or ml_dtypes (a hit of f32 kernels needs neither).

    python bench/cache_hit.py [--repeat 9] [--program examples/mlp_train_step.hlo]
                              [--fusion examples/gelu.hlo] [--target cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Each child prints one JSON line: its own timings (ms) and what it imported.
_CHILD = r"""
import time
_t0, _c0 = time.perf_counter(), time.process_time()
import sys, json
stage = sys.argv[1]
out = {}
if stage == "numpy":
    import numpy
elif stage == "runtime":
    import numpy
    out["numpy"] = (time.perf_counter() - _t0) * 1e3
    import xla_gpu.runtime
elif stage == "identity":
    import xla_gpu
    from xla_gpu import compile_cache
    t = time.perf_counter()
    compile_cache.compiler_identity(sys.argv[2])
    out["identity"] = (time.perf_counter() - t) * 1e3
else:                                   # a cache hit: import + compile
    text = open(sys.argv[2]).read()
    t = time.perf_counter()
    import xla_gpu
    out["import"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    exe = xla_gpu.compile(text, target=sys.argv[3])
    out["compile"] = (time.perf_counter() - t) * 1e3
    # A program loaded from the cache says so; a kernel loaded has no
    # compile timings.
    out["hit"] = "loaded from the compile cache" in exe.notes or \
        (isinstance(exe, xla_gpu.Executable) and "total" not in exe.timings)
out["total"] = (time.perf_counter() - _t0) * 1e3
out["cpu"] = (time.process_time() - _c0) * 1e3
out["mlir"] = "mlir" in sys.modules
out["ml_dtypes"] = "ml_dtypes" in sys.modules
print(json.dumps(out))
"""


_F32_FUSION = """HloModule f32_fusion

fused {
  p0 = f32[1024,256] parameter(0)
  p1 = f32[1024,256] parameter(1)
  m = f32[1024,256] multiply(p0, p1)
  t = f32[1024,256] tanh(m)
  ROOT a = f32[1024,256] add(t, p0)
}
"""


def _child(env: dict, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, *args], env=env,
                          capture_output=True, text=True, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _startup(env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True,
                   cwd=tempfile.gettempdir())
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--program", default=str(ROOT / "examples" / "mlp_train_step.hlo"))
    parser.add_argument("--fusion", default=None,
                        help="an HLO file of one fusion (default: an f32 elementwise "
                        "fusion; examples/gelu.hlo is bf16, whose kernel needs ml_dtypes)")
    parser.add_argument("--target", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="xla_gpu_cache_hit_") as work:
        cache = str(Path(work) / "cache")
        if args.fusion is None:
            args.fusion = str(Path(work) / "f32_fusion.hlo")
            Path(args.fusion).write_text(_F32_FUSION)
        env = dict(os.environ, XLA_GPU_CACHE_DIR=cache, PYTHONSAFEPATH="1")
        # As an installed package runs: bytecode cached (a development
        # environment that sets PYTHONDONTWRITEBYTECODE recompiles every
        # edited module in every child).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cases = [("interpreter start-up (python -c pass, wall)", None),
                 ("import numpy", ("numpy",)),
                 ("import xla_gpu.runtime", ("runtime",)),
                 (f"compiler_identity('{args.target}') after import", ("identity", args.target)),
                 (f"program hit: {Path(args.program).name}",
                  ("hit", args.program, args.target)),
                 (f"fusion hit: {Path(args.fusion).name}", ("hit", args.fusion, args.target))]
        for _, case in cases:                      # fill the cache (and the OS's)
            if case and case[0] == "hit":
                first = _child(env, *case)
                if not first.get("compile"):
                    raise SystemExit(f"{case}: no compile time")
        rows = []
        for label, case in cases:
            for attempt in range(3):
                runs = [{"total": _startup(env)} if case is None else _child(env, *case)
                        for _ in range(args.repeat)]
                if not (case and case[0] == "hit") or all(r["hit"] for r in runs):
                    break
                # The compiler changed under the benchmark (its identity with
                # it: a reinstall, an edited source): fill the cache again.
                _child(env, *case)
            else:
                raise SystemExit(f"{label}: not a cache hit")
            rows.append((label, runs))

    def med(runs, field):
        values = [r[field] for r in runs if field in r]
        return f"{statistics.median(values):.1f}" if values else "-"

    print(f"# compile-cache hit in a fresh process (target {args.target}; median of "
          f"{args.repeat}, ms after interpreter start-up)\n")
    print("| case | numpy | import | identity | compile | total | total CPU | mlir | ml_dtypes |")
    print("|---|---:|---:|---:|---:|---:|---:|:---:|:---:|")
    for label, runs in rows:
        flags = ["-" if "mlir" not in runs[0] else ("yes" if any(r[f] for r in runs) else "no")
                 for f in ("mlir", "ml_dtypes")]
        print(f"| {label} | {med(runs, 'numpy')} | {med(runs, 'import')} | "
              f"{med(runs, 'identity')} | {med(runs, 'compile')} | {med(runs, 'total')} | "
              f"{med(runs, 'cpu')} | "
              f"{flags[0]} | {flags[1]} |")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{os.cpu_count()} CPUs, load average {load:.1f} while measuring")


if __name__ == "__main__":
    main()
