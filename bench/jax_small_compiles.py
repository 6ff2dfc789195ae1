"""Compile time of the small jitted functions a jax test suite compiles by the
thousand, through the PJRT plugin ("xla_gpu", cpu target) next to XLA:CPU
("cpu"), in one process.

Each function is compiled once per backend per round, on fresh shapes
(a round's shapes are new to both backends, so neither jax's caches nor
xla_gpu's in-memory kernel cache answer), rounds alternating between the
backends so that load from other processes falls on both alike; xla_gpu's
compile cache is a fresh directory. Printed: the median per function over
the rounds (ms, `jax.jit(f).lower(x).compile()`, which includes jax's own
tracing and lowering, the same on both sides), then the median and the
geometric mean of the per-function ratios.

    JAX_PLATFORMS=xla_gpu,cpu python bench/jax_small_compiles.py [--rounds 5] [--only sin,sort]
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


def _functions():
    lax = jax.lax
    return {
        "add": lambda x: x + 1.0,
        "sin": jnp.sin,
        "tanh_mul": lambda x: jnp.tanh(x) * x,
        "exp_log": lambda x: jnp.log1p(jnp.exp(x)),
        "where": lambda x: jnp.where(x > 0, x, 0.1 * x),
        "sum": jnp.sum,
        "row_max": lambda x: jnp.max(x, axis=1),
        "col_mean": lambda x: jnp.mean(x, axis=0),
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "logsumexp": lambda x: jax.scipy.special.logsumexp(x, axis=0),
        "transpose": lambda x: x.T + 1.0,
        "matmul": lambda x: x @ x.T,
        "cumsum": lambda x: jnp.cumsum(x, axis=1),
        "sort": lambda x: jnp.sort(x, axis=-1),
        "argmax": lambda x: jnp.argmax(x, axis=-1),
        "take": lambda x: jnp.take(x, jnp.array([0, 2, 1]), axis=0),
        "scatter_add": lambda x: x.at[jnp.array([0, 1, 0])].add(1.0),
        "dynamic_slice": lambda x: lax.dynamic_slice(x, (1, 1), (2, 2)),
        "concat": lambda x: jnp.concatenate([x, 2 * x], axis=0),
        "pad": lambda x: jnp.pad(x, 1),
        "fori_loop": lambda x: lax.fori_loop(0, 3, lambda i, c: c * 0.5 + 1.0, x),
        "cond": lambda x: lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x),
        "rng_uniform": lambda x: x + jax.random.uniform(jax.random.key(0), x.shape),
        "fft": lambda x: jnp.abs(jnp.fft.fft(x)),
        "grad_tanh": jax.grad(lambda x: jnp.sum(jnp.tanh(x) ** 2)),
        "int_ops": lambda x: (x.astype(jnp.int32) * 3) // 2,
    }


def _compile_ms(fn, x, backend: str) -> float:
    device = jax.devices(backend)[0]
    arg = jax.device_put(x, device)
    start = time.perf_counter()
    jax.jit(fn).lower(arg).compile()
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated function names")
    args = parser.parse_args()
    functions = _functions()
    if args.only:
        functions = {k: functions[k] for k in args.only.split(",")}
    backends = ("xla_gpu", "cpu")
    rng = np.random.default_rng(0)
    # Warm-up: both backends loaded, the compiler's one-time set-up done.
    for backend in backends:
        _compile_ms(jnp.sin, np.ones((3, 5), np.float32), backend)
    times = {name: {b: [] for b in backends} for name in functions}
    for r in range(args.rounds):
        for k, (name, fn) in enumerate(functions.items()):
            # Shapes no earlier round used: (7 + r, 8 + k) and so on.
            x = rng.standard_normal((7 + r, 8 + k + 30 * r)).astype(np.float32)
            order = backends if (r + k) % 2 == 0 else backends[::-1]
            for backend in order:
                times[name][backend].append(_compile_ms(fn, x, backend))
    print(f"jax {jax.__version__}; median of {args.rounds} compiles per function, ms\n")
    print("| function | xla_gpu | XLA:CPU | ratio |")
    print("| --- | ---: | ---: | ---: |")
    ratios = []
    for name, t in times.items():
        ours, xla = statistics.median(t["xla_gpu"]), statistics.median(t["cpu"])
        ratios.append(ours / xla)
        print(f"| {name} | {ours:.1f} | {xla:.1f} | {ours / xla:.2f}x |")
    all_ours = statistics.median(statistics.median(t["xla_gpu"]) for t in times.values())
    all_xla = statistics.median(statistics.median(t["cpu"]) for t in times.values())
    print(f"\nmedian over functions: {all_ours:.1f} ms against {all_xla:.1f} ms; "
          f"ratio geomean {geomean(ratios):.2f}x (max {max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
