"""Regenerates the stored HLO of real training steps written with flax nnx
and optax (jax, flax and optax are not test dependencies: the tests read
the stored `.hlo` files only):

    JAX_PLATFORMS=cpu python tests/python/hlo_inputs/models/generate.py

`gpt_adamw_1layer.hlo`: one training step of a GPT-style language model
(token and position embeddings, one pre-LayerNorm transformer block with
causal attention, d=256, 4 heads, vocab 2048, sequence 64, batch 8, adamw,
cross-entropy loss), as `jax.jit(step).lower(...).as_text(dialect="hlo")`
prints it. Its layer-norm gradients (six column reductions of
f32[512,256]) once formed one multi-output fusion whose tiles took 49920
bytes of shared memory, over the 48 KiB a block has: ptxas refused it.
`gpt_layer_norm_grads.hlo` is that fusion alone (as the fusion passes
formed it then), extracted by hand from the optimized module.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from flax import nnx

HERE = Path(__file__).resolve().parent
D, HEADS, VOCAB, SEQ, BATCH, LAYERS = 256, 4, 2048, 64, 8, 1


class Block(nnx.Module):
    def __init__(self, rngs):
        self.ln1 = nnx.LayerNorm(D, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=HEADS, in_features=D, decode=False,
                                           rngs=rngs)
        self.ln2 = nnx.LayerNorm(D, rngs=rngs)
        self.fc1 = nnx.Linear(D, 4 * D, rngs=rngs)
        self.fc2 = nnx.Linear(4 * D, D, rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.fc2(nnx.gelu(self.fc1(self.ln2(x))))


class GPT(nnx.Module):
    def __init__(self, rngs):
        self.tok = nnx.Embed(VOCAB, D, rngs=rngs)
        self.pos = nnx.Embed(SEQ, D, rngs=rngs)
        self.blocks = nnx.List([Block(rngs) for _ in range(LAYERS)])
        self.lnf = nnx.LayerNorm(D, rngs=rngs)
        self.head = nnx.Linear(D, VOCAB, rngs=rngs)

    def __call__(self, ids):
        x = self.tok(ids) + self.pos(jnp.arange(SEQ))[None]
        mask = nnx.make_causal_mask(ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.lnf(x))


def main() -> None:
    model = GPT(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, ids, targets):
        def loss_fn(m):
            logits = m(ids)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    ids = jnp.zeros((BATCH, SEQ), jnp.int32)
    text = step.lower(model, optimizer, ids, ids).as_text(dialect="hlo")
    (HERE / "gpt_adamw_1layer.hlo").write_text(text)


if __name__ == "__main__":
    main()
