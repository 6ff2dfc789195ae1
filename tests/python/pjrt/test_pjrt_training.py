"""A real training loop through the PJRT plugin: a small GPT-style language
model written with flax nnx and trained with optax's adamw for 10 steps on
jax's "xla_gpu" platform gives the losses jax's own cpu backend gives.

Nothing here is written for xla_gpu: the model, the optimizer and the jitted
step are ordinary flax/optax code, run once per platform in one process.
"""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("optax")

SCRIPT = r"""
import json
import jax, jax.numpy as jnp, numpy as np, optax
from flax import nnx


class Block(nnx.Module):
    def __init__(self, width, heads, rngs):
        self.norm1 = nnx.LayerNorm(width, rngs=rngs)
        self.norm2 = nnx.LayerNorm(width, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(num_heads=heads, in_features=width,
                                                decode=False, rngs=rngs)
        self.up = nnx.Linear(width, 4 * width, rngs=rngs)
        self.down = nnx.Linear(4 * width, width, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attention(self.norm1(x), mask=mask)
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


class LanguageModel(nnx.Module):
    def __init__(self, vocab, width, heads, layers, length, rngs):
        self.tokens = nnx.Embed(vocab, width, rngs=rngs)
        self.positions = nnx.Embed(length, width, rngs=rngs)
        self.blocks = nnx.List([Block(width, heads, rngs) for _ in range(layers)])
        self.norm = nnx.LayerNorm(width, rngs=rngs)
        self.head = nnx.Linear(width, vocab, rngs=rngs)

    def __call__(self, ids):
        x = self.tokens(ids) + self.positions(jnp.arange(ids.shape[1]))
        mask = nnx.make_causal_mask(ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def train(platform, steps=10):
    device = jax.devices(platform)[0]
    with jax.default_device(device):
        model = LanguageModel(vocab=64, width=32, heads=2, layers=2, length=16,
                              rngs=nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)

        @nnx.jit
        def step(model, optimizer, ids):
            def loss_fn(m):
                logits = m(ids[:, :-1])
                return optax.softmax_cross_entropy_with_integer_labels(
                    logits, ids[:, 1:]).mean()
            loss, grads = nnx.value_and_grad(loss_fn)(model)
            optimizer.update(model, grads)
            return loss

        data = np.random.default_rng(0).integers(0, 64, (4, 17)).astype(np.int32)
        ids = jax.device_put(data, device)
        losses = [float(step(model, optimizer, ids)) for _ in range(steps)]
        leaf = jax.tree_util.tree_leaves(nnx.state(model, nnx.Param))[0]
        return losses, str(list(leaf.devices())[0].platform)


cpu, _ = train("cpu")
ours, where = train("xla_gpu")
print(json.dumps({"cpu": cpu, "xla_gpu": ours, "where": where}))
"""


def test_flax_gpt_training_step_matches_jax_cpu():
    env = dict(os.environ, JAX_PLATFORMS="cpu,xla_gpu")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["where"] == "xla_gpu", "the parameters did not live on the xla_gpu device"
    cpu, ours = result["cpu"], result["xla_gpu"]
    assert len(ours) == 10
    # Training moves: the loss falls over the 10 steps on both platforms.
    assert ours[-1] < 0.5 * ours[0]
    for step, (a, b) in enumerate(zip(cpu, ours)):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (step, cpu, ours)
