"""jax on "xla_gpu" (the PJRT plugin, cpu target) next to jax on "cpu" (XLA:CPU):
compile time of a jitted function and dispatch time per call of a tiny program,
plus a direct `exe.run` of the same program through xla_gpu, and per call of a
donated training-style step (`p = step(p, x)`, `donate_argnums=0`: the
parameters' buffer is consumed by each call).

    JAX_PLATFORMS=xla_gpu,cpu python bench/jax_plugin.py

The per-call figures are medians over rounds that alternate between the
backends in this one process, so that load from other processes on a shared
machine falls on both alike; "us/call" is wall time, "cpu us" the process's
CPU time per call (all threads), which other processes' load disturbs least.
"""
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "xla_gpu,cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

ROUNDS = 7
CALLS = 2000


def per_call_us(fn, arg, n=CALLS) -> tuple[float, float]:
    """(wall, CPU) microseconds per call of `n` calls."""
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        out = fn(arg)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / n * 1e6, (time.process_time() - c) / n * 1e6


def per_donated_call_us(step, p, x, n=CALLS) -> tuple[tuple[float, float], object]:
    """(wall, CPU) microseconds per call of `n` chained donated calls, and
    the last parameters (the next round starts from them: the earlier ones
    are consumed)."""
    t, c = time.perf_counter(), time.process_time()
    for _ in range(n):
        p = step(p, x)
    jax.block_until_ready(p)
    return ((time.perf_counter() - t) / n * 1e6, (time.process_time() - c) / n * 1e6), p


def main():
    x = np.arange(16, dtype=np.float32)
    cases = []
    for platform in ("cpu", "xla_gpu"):
        dev = jax.devices(platform)[0]
        arg = jax.device_put(x, dev)
        # A fresh function each time so that jax's in-memory cache misses.
        f = jax.jit(lambda v, p=platform: jnp.tanh(v) * 2 + 1)
        t = time.perf_counter()
        f.lower(arg).compile()
        compile_ms = (time.perf_counter() - t) * 1e3
        f(arg).block_until_ready()
        cases.append((platform, compile_ms, f, arg))
    donated = []
    for platform in ("cpu", "xla_gpu"):
        dev = jax.devices(platform)[0]
        step = jax.jit(lambda p, v, q=platform: p - 0.01 * jnp.tanh(p * v), donate_argnums=0)
        p, v = jax.device_put(x, dev), jax.device_put(x + 1, dev)
        p = step(step(p, v), v)
        donated.append([platform, step, p, v])
    import xla_gpu
    text = jax.jit(lambda v: jnp.tanh(v) * 2 + 1).lower(x).as_text(dialect="hlo")
    exe = xla_gpu.compile(text, target="cpu")
    exe.run(x)
    direct = exe.run, x
    samples = {name: [] for name in ("cpu", "xla_gpu", "exe.run", "cpu donated",
                                     "xla_gpu donated")}
    for _ in range(ROUNDS):
        for platform, _, f, arg in cases:
            samples[platform].append(per_call_us(f, arg))
        for case in donated:
            platform, step, p, v = case
            timing, case[2] = per_donated_call_us(step, p, v)
            samples[f"{platform} donated"].append(timing)
        samples["exe.run"].append(per_call_us(*direct))

    def medians(name):
        return (statistics.median(w for w, _ in samples[name]),
                statistics.median(c for _, c in samples[name]))

    print(f"{'backend':<10} {'compile ms':>11} {'us/call':>9} {'cpu us':>8}")
    for platform, c, _, _ in cases:
        wall, cpu = medians(platform)
        print(f"{platform:<10} {c:>11.1f} {wall:>9.1f} {cpu:>8.1f}")
    wall, cpu = medians("exe.run")
    print(f"{'exe.run':<10} {'':>11} {wall:>9.1f} {cpu:>8.1f}")
    print(f"\n{'donated step':<16} {'us/call':>9} {'cpu us':>8}")
    for platform, *_ in donated:
        wall, cpu = medians(f"{platform} donated")
        print(f"{platform:<16} {wall:>9.1f} {cpu:>8.1f}")


if __name__ == "__main__":
    main()
