"""Sorts through jax: compile and run time of `jnp.sort`, a stable
`jnp.argsort` and `lax.top_k` over rows of several lengths, through the
PJRT plugin ("xla_gpu", cpu target) next to XLA:CPU ("cpu"), in one process.

A sort is the bitonic network of the sort emitter on the cpu target (the
GPU's kernels, their grid emulated), and a call into a library sort on
XLA:CPU: their compile times differ by what each compiles. Per case and
backend: the median over the rounds of `jax.jit(f).lower(x).compile()`
(ms; each round's shape is new to both backends: rows + round), then the
median run time of the first round's compiled function (us, inputs already
on the device, `block_until_ready`), and every result checked against
numpy. Rounds alternate the backends' order; xla_gpu's compile cache is a
fresh directory.

    JAX_PLATFORMS=xla_gpu,cpu python bench/jax_sorts.py [--rounds 3] [--runs 30] [--only top_k]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "xla_gpu,cpu")
os.environ.setdefault("XLA_GPU_CACHE_DIR", tempfile.mkdtemp(prefix="xla_gpu_bench_cache_"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from benchlib import geomean  # noqa: E402

# (rows, row length): a few short rows, rows that fill one shared-memory
# tile (1024 elements), rows longer than a tile (several kernels), one
# long row.
SIZES = ((9, 83), (16, 1000), (4, 5000), (1, 65536))


def _cases():
    return {
        "sort": (lambda x: jnp.sort(x, axis=-1),
                 lambda x: np.sort(x, axis=-1)),
        "argsort": (lambda x: jnp.argsort(x, axis=-1, stable=True),
                    lambda x: np.argsort(x, axis=-1, kind="stable")),
        "top_k": (lambda x: jax.lax.top_k(x, 8)[0],
                  lambda x: -np.sort(-x, axis=-1)[..., :8]),
    }


def _compile(fn, x, backend: str):
    arg = jax.device_put(x, jax.devices(backend)[0])
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(arg).compile()
    return (time.perf_counter() - start) * 1e3, compiled, arg


def _run_us(compiled, arg, runs: int) -> float:
    compiled(arg).block_until_ready()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        compiled(arg).block_until_ready()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--only", default="", help="comma-separated cases (sort,argsort,top_k)")
    args = parser.parse_args()
    backends = ("xla_gpu", "cpu")
    rng = np.random.default_rng(0)
    for backend in backends:   # warm-up: both backends loaded
        _compile(jnp.sin, np.ones((3, 5), np.float32), backend)
    rows = []
    cases = _cases()
    if args.only:
        cases = {k: cases[k] for k in args.only.split(",")}
    for name, (fn, reference) in cases.items():
        for r, n in SIZES:
            compile_ms = {b: [] for b in backends}
            run_us = {}
            for k in range(args.rounds):
                x = rng.standard_normal((r + k, n)).astype(np.float32)
                order = backends if k % 2 == 0 else backends[::-1]
                for backend in order:
                    ms, compiled, arg = _compile(fn, x, backend)
                    compile_ms[backend].append(ms)
                    got = np.asarray(compiled(arg))
                    if not np.array_equal(got, reference(x)):
                        raise SystemExit(f"{name} {r}x{n} on {backend}: wrong result")
                    if k == 0:             # the case's own shape
                        run_us[backend] = _run_us(compiled, arg, args.runs)
            rows.append((f"{name} {r}x{n}", statistics.median(compile_ms["xla_gpu"]),
                         statistics.median(compile_ms["cpu"]), run_us["xla_gpu"],
                         run_us["cpu"]))
    print(f"jax {jax.__version__}; compile: median of {args.rounds} (ms); run: median of "
          f"{args.runs} (us); every result equal to numpy's\n")
    print("| case | compile | XLA:CPU | ratio | run | XLA:CPU | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case, ours, xla, run, xla_run in rows:
        print(f"| {case} | {ours:.1f} | {xla:.1f} | {ours / xla:.2f}x | {run:.0f} | "
              f"{xla_run:.0f} | {run / xla_run:.2f}x |")
    print(f"\ngeomean: compile {geomean([o / x for _, o, x, _, _ in rows]):.2f}x XLA:CPU, "
          f"run {geomean([o / x for _, _, _, o, x in rows]):.2f}x")


if __name__ == "__main__":
    main()
