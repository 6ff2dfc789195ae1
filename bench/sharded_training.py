"""A sharded GPT training step through the plugin, on 8 devices of the cpu
target against XLA:CPU's 8 devices: a (data 4 x model 2) mesh, the batch
cut along data, each block's MLP hidden layer constrained along model;
plain blocks, and the same blocks under `nn.remat` in an `nn.scan`.

    JAX_PLATFORMS=xla_gpu,cpu python bench/sharded_training.py [--repeat 5]

Columns: the ops xla_gpu's SPMD partitioner computed whole on every device
(SpmdFallbackWarning), the collectives of its per-device program, compile
and run time (median of alternating runs) on each side, and the loss and
largest parameter difference against XLA:CPU after one step.
"""

from __future__ import annotations

import argparse
import os
import re
import time
import warnings
from collections import Counter

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "xla_gpu,cpu")
os.environ.setdefault("XLA_GPU_NUM_DEVICES", "8")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

COLLECTIVE = re.compile(r"= [^=]*? (all-reduce|all-gather|reduce-scatter|all-to-all|"
                        r"collective-permute)(-start)?\(")


def _step(mesh, remat_scan: bool, width=256, heads=4, vocab=2048, seq=64, batch=16, layers=4):
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import NamedSharding, PartitionSpec as P

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, _=None):
            h = nn.LayerNorm()(x)
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            x = x + nn.MultiHeadDotProductAttention(num_heads=heads)(h, h, mask=mask)
            h = nn.Dense(4 * width)(nn.LayerNorm()(x))
            h = jax.lax.with_sharding_constraint(h, NamedSharding(mesh, P("data", None, "model")))
            return x + nn.Dense(width)(nn.gelu(h)), None

    class Gpt(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            embed = nn.Embed(vocab, width)
            x = embed(tokens)
            if remat_scan:
                x, _ = nn.scan(nn.remat(Block), variable_axes={"params": 0},
                               split_rngs={"params": True}, length=layers)()(x, None)
            else:
                for _ in range(layers):
                    x, _ = Block()(x)
            return embed.attend(nn.LayerNorm()(x))

    model, tx = Gpt(), optax.adamw(3e-4)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (batch, seq + 1), 0, vocab)
    params = model.init(jax.random.PRNGKey(0), tokens[:, :-1])

    def step(p, s, b):
        def loss(p):
            logits = model.apply(p, b[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, b[:, 1:]).mean()
        value, grads = jax.value_and_grad(loss)(p)
        updates, s = tx.update(grads, s, p)
        return optax.apply_updates(p, updates), s, value
    return step, (params, tx.init(params), tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P
    from benchlib import alternating_median_seconds

    print("| model | ops computed whole | collectives (ours, per device) | compile xla_gpu (s) "
          "| compile XLA:CPU (s) | run xla_gpu (ms) | run XLA:CPU (ms) | loss diff | "
          "param diff |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    auto = (jax.sharding.AxisType.Auto,) * 2
    for remat_scan in (False, True):
        sides = {}
        for platform in ("xla_gpu", "cpu"):
            devices = np.array(jax.devices(platform)[:8]).reshape(4, 2)
            mesh = jax.sharding.Mesh(devices, ("data", "model"), axis_types=auto)
            step, inputs = _step(mesh, remat_scan)
            params, opt, tokens = jax.device_put(inputs, NamedSharding(mesh, P()))
            tokens = jax.device_put(tokens, NamedSharding(mesh, P("data")))
            jitted = jax.jit(step)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                start = time.perf_counter()
                compiled = jitted.lower(params, opt, tokens).compile()
                seconds = time.perf_counter() - start
            whole = sum(str(w.message).count("computed whole") for w in caught
                        if type(w.category) is type and w.category.__name__ ==
                        "SpmdFallbackWarning")
            text = compiled.as_text() or ""
            kinds = Counter(m.group(1) for m in COLLECTIVE.finditer(text))
            out = compiled(params, opt, tokens)
            sides[platform] = dict(compiled=compiled, inputs=(params, opt, tokens),
                                   seconds=seconds, whole=whole, kinds=kinds, out=out)
        ours, theirs = sides["xla_gpu"], sides["cpu"]
        runs = alternating_median_seconds(
            [lambda: jax.block_until_ready(ours["compiled"](*ours["inputs"])),
             lambda: jax.block_until_ready(theirs["compiled"](*theirs["inputs"]))], args.repeat)
        loss_diff = abs(float(ours["out"][2]) - float(theirs["out"][2]))
        param_diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
                         for a, b in zip(jax.tree_util.tree_leaves(ours["out"][0]),
                                         jax.tree_util.tree_leaves(theirs["out"][0])))
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(ours["kinds"].items())) or "-"
        name = "gpt, remat blocks in a scan" if remat_scan else "gpt, 4 blocks"
        print(f"| {name} | {ours['whole']} | {kinds} | {ours['seconds']:.2f} | "
              f"{theirs['seconds']:.2f} | {runs[0] * 1e3:.1f} | {runs[1] * 1e3:.1f} | "
              f"{loss_diff:.1e} | {param_diff:.1e} |")
    print()
    print(f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")


if __name__ == "__main__":
    main()
