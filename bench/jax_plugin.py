"""jax on "xla_gpu" (the PJRT plugin, cpu target) next to jax on "cpu" (XLA:CPU):
compile time of a jitted function and dispatch time per call of a tiny program,
plus a direct `exe.run` of the same program through xla_gpu.

    JAX_PLATFORMS=xla_gpu,cpu python bench/jax_plugin.py
"""
import os
import time

os.environ.setdefault("JAX_PLATFORMS", "xla_gpu,cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


def per_call_us(fn, arg, n=2000):
    fn(arg).block_until_ready()
    t = time.perf_counter()
    for _ in range(n):
        out = fn(arg)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / n * 1e6


def main():
    x = np.arange(16, dtype=np.float32)
    rows = []
    for platform in ("cpu", "xla_gpu"):
        dev = jax.devices(platform)[0]
        arg = jax.device_put(x, dev)
        # A fresh function each time so that jax's in-memory cache misses.
        f = jax.jit(lambda v, p=platform: jnp.tanh(v) * 2 + 1)
        t = time.perf_counter()
        f.lower(arg).compile()
        compile_ms = (time.perf_counter() - t) * 1e3
        rows.append((platform, compile_ms, per_call_us(f, arg)))
    import xla_gpu
    text = jax.jit(lambda v: jnp.tanh(v) * 2 + 1).lower(x).as_text(dialect="hlo")
    exe = xla_gpu.compile(text, target="cpu")
    exe.run(x)
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        exe.run(x)
    direct = (time.perf_counter() - t) / n * 1e6
    print(f"{'backend':<10} {'compile ms':>11} {'us/call':>9}")
    for platform, c, d in rows:
        print(f"{platform:<10} {c:>11.1f} {d:>9.1f}")
    print(f"{'exe.run':<10} {'':>11} {direct:>9.1f}")


if __name__ == "__main__":
    main()
