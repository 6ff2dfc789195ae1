"""jax on "xla_gpu" (the PJRT plugin, cpu target) next to jax on "cpu" (XLA:CPU):
compile time of a jitted function and dispatch time per call of a tiny program,
plus a direct `exe.run` of the same program through xla_gpu, and per call of a
donated training-style step (`p = step(p, x)`, `donate_argnums=0`: the
parameters' buffer is consumed by each call), and per step of a donated SGD
update of large parameters (4M f32, `p - lr * g`): xla_gpu writing the
donated parameters in place (their buffer is the output's) next to the
copying run it replaced (`xla_gpu.pjrt.set_in_place_donation(False)`: the
donated input copied in, the output copied out) and XLA:CPU.

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


LARGE = 1 << 22     # SGD parameters (f32)
LARGE_ROUNDS = 7
LARGE_STEPS = 20


def large_sgd() -> None:
    """Per step of `p = sgd(p, g)` over LARGE f32 parameters, donated."""
    import xla_gpu.pjrt
    rng = np.random.default_rng(0)
    p_host = rng.standard_normal(LARGE).astype(np.float32)
    g_host = rng.standard_normal(LARGE).astype(np.float32)
    cases = []
    for name, platform, in_place in (("cpu", "cpu", None), ("xla_gpu in place", "xla_gpu", True),
                                     ("xla_gpu copying", "xla_gpu", False)):
        dev = jax.devices(platform)[0]
        sgd = jax.jit(lambda p, g, n=name: p - 0.01 * g, donate_argnums=0)
        p, g = jax.device_put(p_host, dev), jax.device_put(g_host, dev)
        p = sgd(sgd(p, g), g)
        cases.append([name, in_place, sgd, p, g])
    samples = {case[0]: [] for case in cases}
    for _ in range(LARGE_ROUNDS):
        for case in cases:
            name, in_place, sgd, p, g = case
            if in_place is not None:
                xla_gpu.pjrt.set_in_place_donation(in_place)
            timing, case[3] = per_donated_call_us(sgd, p, g, LARGE_STEPS)
            samples[name].append(timing)
    xla_gpu.pjrt.set_in_place_donation(True)
    print(f"\n{'donated sgd, 4M f32':<20} {'ms/step':>8} {'cpu ms':>8}")
    for name, *_ in cases:
        wall = statistics.median(w for w, _ in samples[name]) / 1e3
        cpu = statistics.median(c for _, c in samples[name]) / 1e3
        print(f"{name:<20} {wall:>8.2f} {cpu:>8.2f}")


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
    large_sgd()


if __name__ == "__main__":
    main()
