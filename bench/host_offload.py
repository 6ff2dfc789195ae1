"""Device memory that offloading to host memory saves: the gradient of a
deep MLP under three remat policies, lowered by jax through the xla_gpu
plugin (which states jax's `device_put`s to pinned_host), compiled by
xla_gpu for the cuda target (sm_90: no GPU needed to compile) and for the
cpu target, which runs it against jax's XLA:CPU gradient.

    JAX_PLATFORMS=xla_gpu,cpu python bench/host_offload.py [--layers 16 --width 1024 --batch 512]

Columns: the compiled program's device temporaries and host temporaries
(buffer assignment's, what the cuda target allocates per run), the
largest gradient error against XLA:CPU's un-rematerialized gradient, and
the cpu target's run time (median) next to XLA:CPU's for the same policy.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "xla_gpu,cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    import xla_gpu
    from benchlib import alternating_median_seconds
    from jax.ad_checkpoint import Offloadable

    cp = jax.checkpoint_policies
    policies = {
        "save all (no remat)": None,
        "recompute (nothing saveable)": cp.nothing_saveable,
        "offload dots to pinned_host": cp.offload_dot_with_no_batch_dims("device", "pinned_host"),
        "offload every residual to pinned_host": lambda prim, *avals, **params:
            Offloadable(src="device", dst="pinned_host"),
    }
    rng = np.random.default_rng(0)
    weights = [(rng.standard_normal((args.width, args.width)) / np.sqrt(args.width)
                ).astype(np.float32) for _ in range(args.layers)]
    x = rng.standard_normal((args.batch, args.width)).astype(np.float32)

    def layer(h, w):
        return jnp.tanh(h @ w)

    def loss(ws, h, policy):
        for w in ws:
            h = (jax.checkpoint(layer, policy=policy) if policy is not None else layer)(h, w)
        return jnp.sum(h * h)

    plugin, cpu = jax.devices("xla_gpu")[0], jax.devices("cpu")[0]
    reference = jax.jit(jax.grad(lambda ws, h: loss(ws, h, None)))(*jax.device_put((weights, x), cpu))
    print(f"MLP gradient: {args.layers} layers of {args.width}x{args.width}, batch {args.batch}; "
          f"device {jax.devices('xla_gpu')[0].device_kind}")
    print()
    print("| policy | cuda device temp (MiB) | cuda host temp (MiB) | cpu-target gradient "
          "error | cpu-target run (ms) | XLA:CPU run (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, policy in policies.items():
        grad = jax.grad(lambda ws, h, p=policy: loss(ws, h, p))
        text = jax.jit(grad).trace(weights, x).lower(
            lowering_platforms=("xla_gpu",)).as_text(dialect="hlo")
        cuda = xla_gpu.compile(text, target="cuda", cache=False).memory_analysis()
        exe = xla_gpu.compile(text, target="cpu", cache=False)
        got = exe.run(*weights, x)
        err = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                  for a, b in zip(got, reference))
        on_cpu = jax.jit(grad)
        weights_cpu, x_cpu = jax.device_put((weights, x), cpu)
        ours, theirs = alternating_median_seconds(
            [lambda: exe.run(*weights, x),
             lambda: jax.block_until_ready(on_cpu(weights_cpu, x_cpu))], args.repeat)
        print(f"| {name} | {cuda.temp_size_in_bytes / 2**20:.1f} | "
              f"{cuda.host_temp_size_in_bytes / 2**20:.1f} | {err:.2e} | "
              f"{ours * 1e3:.1f} | {theirs * 1e3:.1f} |")
    del plugin
    print()
    print(f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, xla_gpu {xla_gpu.__version__})")


if __name__ == "__main__":
    main()
