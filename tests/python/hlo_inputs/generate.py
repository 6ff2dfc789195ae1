"""Regenerates the stored HLO texts of the parser/interpreter tests with jax.

    python tests/python/hlo_inputs/generate.py

jax is not a test dependency: the tests read the stored `.hlo` files only.
`NAME.pre.hlo` is the text before XLA's passes (`lower().as_text("hlo")`),
`NAME.post.hlo` after XLA:CPU's pipeline (`compile().as_text()`, fusions).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

HERE = Path(__file__).resolve().parent
f32, bf16, i32 = jnp.float32, jnp.bfloat16, jnp.int32


def gelu(x):
    return jax.nn.gelu(x, approximate=True)


def softmax(x):
    return jax.nn.softmax(x, axis=-1)


def layer_norm(x, gamma, beta):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta


def adam(p, g, m, v, step):
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat = m / (1 - b1 ** step)
    vhat = v / (1 - b2 ** step)
    return p - lr * mhat / (jnp.sqrt(vhat) + eps), m, v


def rms_norm_bf16(x, w):
    xf = x.astype(f32)
    r = jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)
    return (xf * r).astype(bf16) * w


def argmax(x):
    return jnp.argmax(x, axis=1).astype(i32)


def scatter_add(x, idx, upd):
    return x.at[idx].add(upd)


def concat(a, b, c):
    return jnp.concatenate([jnp.sin(a), b * 2, c], axis=1)


def dus(x, u, i, j):
    return jax.lax.dynamic_update_slice(x, jnp.exp(u), (i, j))


def gather_rows(x, idx):
    return jnp.take(x, idx, axis=0, mode="clip") + 1.0


def misc_int(a, b):
    # integer ops: div/rem, shifts, clamp, select, pad, reverse, iota, slice
    q = jax.lax.div(a, b)
    r = jax.lax.rem(a, b)
    s = jax.lax.shift_right_logical(a, jnp.int32(3)) ^ jax.lax.shift_left(b, jnp.int32(2))
    c = jnp.clip(a, -5, 5)
    w = jnp.where(a > b, q, r)
    p = jax.lax.pad(w, jnp.int32(7), ((1, -1, 1), (0, 2, 0)))
    io = jax.lax.broadcasted_iota(i32, p.shape, 1)
    return (p + io)[::-1, 1:5:2], s + c


CASES = {
    "gelu": (gelu, [jax.ShapeDtypeStruct((4, 8), f32)]),
    "softmax": (softmax, [jax.ShapeDtypeStruct((4, 16), f32)]),
    "layer_norm": (layer_norm, [jax.ShapeDtypeStruct((8, 32), f32),
                                jax.ShapeDtypeStruct((32,), f32),
                                jax.ShapeDtypeStruct((32,), f32)]),
    "adam": (adam, [jax.ShapeDtypeStruct((64,), f32)] * 4 +
             [jax.ShapeDtypeStruct((), f32)]),
    "rms_norm_bf16": (rms_norm_bf16, [jax.ShapeDtypeStruct((4, 64), bf16),
                                      jax.ShapeDtypeStruct((64,), bf16)]),
    "argmax": (argmax, [jax.ShapeDtypeStruct((5, 7), f32)]),
    "scatter_add": (scatter_add, [jax.ShapeDtypeStruct((10, 4), f32),
                                  jax.ShapeDtypeStruct((6,), i32),
                                  jax.ShapeDtypeStruct((6, 4), f32)]),
    "concatenate": (concat, [jax.ShapeDtypeStruct((3, 2), f32),
                             jax.ShapeDtypeStruct((3, 5), f32),
                             jax.ShapeDtypeStruct((3, 1), f32)]),
    "dynamic_update_slice": (dus, [jax.ShapeDtypeStruct((8, 8), f32),
                                   jax.ShapeDtypeStruct((3, 2), f32),
                                   jax.ShapeDtypeStruct((), i32),
                                   jax.ShapeDtypeStruct((), i32)]),
    "gather": (gather_rows, [jax.ShapeDtypeStruct((6, 3), f32),
                             jax.ShapeDtypeStruct((4,), i32)]),
    "misc_int": (misc_int, [jax.ShapeDtypeStruct((4, 6), i32),
                            jax.ShapeDtypeStruct((4, 6), i32)]),
}


def main() -> None:
    for name, (fn, args) in CASES.items():
        lowered = jax.jit(fn).lower(*args)
        (HERE / f"{name}.pre.hlo").write_text(lowered.as_text(dialect="hlo"))
        (HERE / f"{name}.post.hlo").write_text(lowered.compile().as_text())
        print("wrote", name)


if __name__ == "__main__":
    main()
