"""Regenerates the whole-program test data with jax (XLA:CPU).

    python tests/python/programs/generate.py            # every program
    python tests/python/programs/generate.py mlp_train_step cond_switch

jax is NOT a test dependency: the tests read only the stored files. For each
program a folder NAME/ holds

  before_optimizations.hlo      the module as JAX hands it to XLA
                                (`lower(...).as_text(dialect="hlo")`)
  after_optimizations_cpu.hlo   the module after XLA:CPU's passes
                                (`lower(...).compile().as_text()`)
  inputs.npz / outputs.npz      arg0, arg1, ... / out0, out1, ...: the
                                flattened leaves, in the order of the entry
                                parameters and of the result tuple; bf16 is
                                stored as its uint16 bit pattern (npz has no
                                bf16) -- program.json names each leaf's type
  xla_memory.json               `compiled.memory_analysis()`'s fields
  program.json                  name, description, jax version, leaf types,
                                tolerance

Inputs are seeded (numpy's default_rng(0) per program); sort keys are
distinct so that an unstable sort cannot reorder equal keys differently.
The ffi_call program builds handler.cc (next to its data) with g++ against
`jax.ffi.include_dir()` and registers it with jax before tracing.
"""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
f32, bf16, i32, u32, u8 = (jnp.float32, jnp.bfloat16, jnp.int32, jnp.uint32,
                           jnp.uint8)
_HLO_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
              np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(np.float16): "f16",
              np.dtype(np.int32): "s32", np.dtype(np.int64): "s64",
              np.dtype(np.int8): "s8", np.dtype(np.uint8): "u8",
              np.dtype(np.uint32): "u32", np.dtype(np.uint16): "u16",
              np.dtype(np.uint64): "u64", np.dtype(np.bool_): "pred",
              np.dtype(np.complex64): "c64"}


@dataclass
class Program:
    name: str
    fn: Callable
    make_inputs: Callable[[np.random.Generator], tuple]
    description: str
    dtype_notes: str = "f32 throughout"
    setup: Callable[[], None] | None = None
    # Trace with 64-bit types enabled (u64 rng states and bits).
    x64: bool = False


def normal(rng, shape, scale=1.0, dtype=np.float32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# ------------------------------------------------------------ the programs


def mlp_loss(params, x, labels):
    w1, b1, w2, b2 = params
    h = jax.nn.relu(x @ w1 + b1)
    logits = h @ w2 + b2
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def mlp_train_step(params, x, labels):
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, labels)
    new_params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params,
                                        grads)
    return loss, new_params


def mlp_inputs(rng):
    params = (normal(rng, (32, 64), 0.2), normal(rng, (64,), 0.1),
              normal(rng, (64, 10), 0.2), normal(rng, (10,), 0.1))
    x = normal(rng, (8, 32))
    labels = rng.integers(0, 10, (8,)).astype(np.int32)
    return params, x, labels


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta


def transformer_block(x, p):
    seq, d_model = x.shape
    heads, d_head = 2, d_model // 2
    h = layer_norm(x, p["ln1_g"], p["ln1_b"])
    q = (h @ p["wq"]).reshape(seq, heads, d_head).transpose(1, 0, 2)
    k = (h @ p["wk"]).reshape(seq, heads, d_head).transpose(1, 0, 2)
    v = (h @ p["wv"]).reshape(seq, heads, d_head).transpose(1, 0, 2)
    scores = jnp.einsum("hqd,hkd->hqk", q, k) / np.sqrt(d_head).astype(
        np.float32)
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    scores = jnp.where(causal, scores, -1e9)
    attn = jax.nn.softmax(scores, axis=-1)
    ctx = jnp.einsum("hqk,hkd->hqd", attn, v).transpose(1, 0, 2).reshape(
        seq, d_model)
    x = x + ctx @ p["wo"]
    h = layer_norm(x, p["ln2_g"], p["ln2_b"])
    h = jax.nn.gelu(h @ p["w1"] + p["b1"], approximate=True)
    return x + h @ p["w2"] + p["b2"]


def transformer_inputs(rng):
    d, f = 32, 64
    p = {"ln1_g": 1 + normal(rng, (d,), 0.1), "ln1_b": normal(rng, (d,), 0.1),
         "wq": normal(rng, (d, d), 0.2), "wk": normal(rng, (d, d), 0.2),
         "wv": normal(rng, (d, d), 0.2), "wo": normal(rng, (d, d), 0.2),
         "ln2_g": 1 + normal(rng, (d,), 0.1), "ln2_b": normal(rng, (d,), 0.1),
         "w1": normal(rng, (d, f), 0.2), "b1": normal(rng, (f,), 0.1),
         "w2": normal(rng, (f, d), 0.2), "b2": normal(rng, (d,), 0.1)}
    return normal(rng, (16, d)), p


def scan_rnn(h0, xs, wx, wh, b):
    def cell(h, x):
        h = jnp.tanh(x @ wx + h @ wh + b)
        return h, h
    h, hs = jax.lax.scan(cell, h0, xs)
    return h, hs


def scan_rnn_inputs(rng):
    return (normal(rng, (16,), 0.5), normal(rng, (12, 8)),
            normal(rng, (8, 16), 0.3), normal(rng, (16, 16), 0.3),
            normal(rng, (16,), 0.1))


def kv_cache_update(cache, new_rows, start):
    def write(i, c):
        row = jax.lax.dynamic_slice_in_dim(new_rows, i, 1, axis=0) * 2.0
        return jax.lax.dynamic_update_slice(c, row, (start + i, 0))
    cache = jax.lax.fori_loop(0, new_rows.shape[0], write, cache)
    return cache, jnp.sum(cache, axis=0)


def kv_cache_inputs(rng):
    return (normal(rng, (16, 8)), normal(rng, (4, 8)), np.int32(5))


def cond_switch(pred, index, preds, indices, x):
    a = jax.lax.cond(pred, lambda v: jnp.sin(v) * 2.0, lambda v: jnp.cos(v) + v,
                     x)
    branches = [lambda v: v * 3.0, lambda v: jnp.exp(-v * v),
                lambda v: jnp.maximum(v, 0.5) - jnp.sum(v)]
    b = jax.lax.switch(index, branches, x)

    def per_row(args):
        p, k, row = args
        c = jax.lax.cond(p, lambda v: v + 1.0, lambda v: v * v, row)
        return jax.lax.switch(k, branches, c)
    rows = jax.lax.map(per_row, (preds, indices, jnp.stack([x, -x, x * 0.5,
                                                            x + 1.0])))
    return a, b, rows


def cond_switch_inputs(rng):
    # indices outside [0, 3) exercise jax's clamping of the branch index.
    return (np.bool_(True), np.int32(1),
            np.array([True, False, False, True]),
            np.array([0, 2, 1, 7], np.int32), normal(rng, (6,)))


def sort_topk(x, keys, payload):
    s = jnp.sort(x, axis=1)
    order = jnp.argsort(x, axis=0)
    values, idx = jax.lax.top_k(x, 3)
    # Two-operand sort: payload follows its keys.
    k2, p2 = jax.lax.sort((keys, payload), dimension=0, num_keys=1)
    return s, order, values, idx, k2, p2


def sort_topk_inputs(rng):
    x = (rng.permutation(6 * 10).reshape(6, 10).astype(np.float32) - 30) / 7
    keys = rng.permutation(12).astype(np.int32)
    return x, keys, normal(rng, (12,))


def layer_norm_bf16(x, gamma, beta):
    xf = x.astype(f32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + 1e-5)
    return (y * gamma.astype(f32) + beta.astype(f32)).astype(bf16)


def layer_norm_bf16_inputs(rng):
    return (normal(rng, (8, 64), 2.0, ml_dtypes.bfloat16),
            (1 + normal(rng, (64,), 0.1)).astype(ml_dtypes.bfloat16),
            normal(rng, (64,), 0.1, ml_dtypes.bfloat16))


def cumsum_argmax(x, y):
    return (jnp.cumsum(x, axis=1), jnp.argmax(x, axis=1),
            jnp.cumsum(y, axis=0), jnp.argmin(y))


def cumsum_argmax_inputs(rng):
    x = normal(rng, (6, 16))
    x[2, 5] = x[2, 9] = 10.0  # a tie: argmax takes the first
    return x, rng.integers(-20, 20, (10,)).astype(np.int32)


def small_conv(x, kernel, bias):
    y = jax.lax.conv_general_dilated(
        x, kernel, window_strides=(1, 1), padding="SAME",
        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jax.nn.relu(y + bias)


def small_conv_inputs(rng):
    return (normal(rng, (1, 8, 8, 3)), normal(rng, (3, 3, 3, 4), 0.3),
            normal(rng, (4,), 0.1))


def softmax_xent(logits, labels):
    logp = jax.nn.log_softmax(logits, axis=-1)
    probs = jnp.exp(logp)
    loss = -jnp.mean(jnp.sum(labels * logp, axis=-1))
    return loss, probs


def softmax_xent_inputs(rng):
    logits = normal(rng, (64, 100), 3.0)
    labels = jax.nn.one_hot(rng.integers(0, 100, (64,)), 100)
    return logits, np.asarray(labels * 0.9 + 0.001, np.float32)


def adam_step(params, grads, m, v, step):
    b1, b2, lr, eps = 0.9, 0.999, 1e-2, 1e-8
    step = step + 1
    t = step.astype(f32)
    m = jax.tree_util.tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v,
                               grads)
    corr1, corr2 = 1 - b1 ** t, 1 - b2 ** t

    def update(p, m_, v_):
        return p - lr * (m_ / corr1) / (jnp.sqrt(v_ / corr2) + eps)
    params = jax.tree_util.tree_map(update, params, m, v)
    return params, m, v, step


def adam_inputs(rng):
    shapes = {"w": (8, 4), "b": (4,), "emb": (10, 3)}
    mk = lambda s: {k: normal(rng, v, s) for k, v in shapes.items()}  # noqa
    params, grads, m = mk(1.0), mk(0.5), mk(0.05)
    v = {k: np.abs(a) for k, a in mk(0.01).items()}
    return params, grads, m, v, np.int32(3)


def ffi_call_program(x, y):
    call = jax.ffi.ffi_call("xla_gpu_test_add_scaled",
                            jax.ShapeDtypeStruct(x.shape, x.dtype))
    a = call(jnp.sin(x), y, scale=np.float32(2.0), mode=np.int32(1))
    b = call(a, x, scale=np.float32(-0.5), mode=np.int32(2))
    return a * 2.0 + 1.0, jnp.sum(b, axis=0)


def ffi_call_inputs(rng):
    return normal(rng, (4, 8)), normal(rng, (4, 8))


def ffi_register() -> None:
    """Builds handler.cc and registers it with jax (platform cpu)."""
    build = Path(tempfile.mkdtemp(prefix="xla_gpu_ffi_"))
    lib_path = build / "libhandler.so"
    subprocess.run(["g++", "-std=c++17", "-O2", "-shared", "-fPIC", "-w",
                    f"-I{jax.ffi.include_dir()}",
                    str(HERE / "ffi_call" / "handler.cc"), "-o",
                    str(lib_path)], check=True)
    lib = ctypes.cdll.LoadLibrary(str(lib_path))
    jax.ffi.register_ffi_target("xla_gpu_test_add_scaled",
                                jax.ffi.pycapsule(lib.XlaGpuTestAddScaled),
                                platform="cpu")
    shutil.rmtree(build, ignore_errors=True)


# ---- more programs


def embedding_lookup(table, ids, target):
    def loss(t):
        e = jnp.take(t, ids, axis=0)  # gather
        return jnp.sum((jnp.tanh(e) - target) ** 2)
    value, grad = jax.value_and_grad(loss)(table)  # scatter-add
    return value, grad


def embedding_inputs(rng):
    ids = np.array([3, 0, 7, 3, 19, 11], np.int32)  # 3 repeats
    return normal(rng, (20, 8)), ids, normal(rng, (6, 8), 0.5)


def scan_two_layer(h1, h2, xs, w1, u1, w2, u2):
    def cell(carry, x):
        a, b = carry
        a = jnp.tanh(x @ w1 + a @ u1)
        b = jax.nn.sigmoid(a @ w2 + b @ u2)
        return (a, b), a.sum() + b.sum()
    (h1, h2), sums = jax.lax.scan(cell, (h1, h2), xs, reverse=True)
    return h1, h2, sums


def scan_two_layer_inputs(rng):
    return (normal(rng, (8,)), normal(rng, (6,)), normal(rng, (10, 4)),
            normal(rng, (4, 8), 0.4), normal(rng, (8, 8), 0.3),
            normal(rng, (8, 6), 0.4), normal(rng, (6, 6), 0.3))


def reductions(x, m):
    return (jnp.sum(x, axis=(0, 2)), jnp.max(x, axis=1), jnp.prod(x[:, :2], axis=(1, 2)),
            jnp.var(x, axis=(0, 1)), jax.nn.logsumexp(x, axis=-1),
            jnp.min(m), jnp.any(m > 60, axis=0), jnp.all(m > -60, axis=1),
            jnp.sum(m, axis=1))


def reductions_inputs(rng):
    return normal(rng, (4, 5, 6)), rng.integers(-64, 64, (7, 9)).astype(np.int32)


def integer_ops(a, b, c):
    q = a // jnp.where(b == 0, 1, b)  # floor division (jnp semantics)
    r = jnp.mod(a, jnp.where(b == 0, 1, b))
    bits = (a << 3) ^ (b >> 1) | (a & 0xF0)
    pc = jax.lax.population_count(a)
    clz = jax.lax.clz(b)
    us = c.astype(u32) * np.uint32(2654435761) + np.uint32(7)
    mixed = jax.lax.shift_right_logical(us, np.uint32(13)) ^ us
    narrow = (a.astype(u8) + c) .astype(i32)
    return q, r, bits, pc, clz, mixed, narrow, jnp.clip(a, -10, 10)


def integer_ops_inputs(rng):
    a = rng.integers(-1000, 1000, (5, 6)).astype(np.int32)
    b = rng.integers(-9, 9, (5, 6)).astype(np.int32)
    c = rng.integers(0, 255, (5, 6)).astype(np.uint8)
    return a, b, c


def bmm_einsum(a, b, q, k, w):
    c = jnp.einsum("bij,bjk->bik", a, b)
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k,
                   preferred_element_type=f32)  # bf16 inputs, f32 result
    t = jnp.einsum("ijk,kl->jil", a, w)
    return c, s, t


def bmm_einsum_inputs(rng):
    return (normal(rng, (3, 4, 5)), normal(rng, (3, 5, 6)),
            normal(rng, (2, 2, 4, 8), 1.0, ml_dtypes.bfloat16),
            normal(rng, (2, 2, 6, 8), 1.0, ml_dtypes.bfloat16),
            normal(rng, (5, 7)))


def maxpool_grad(x, cot):
    def pool(v):
        return jax.lax.reduce_window(v, -jnp.inf, jax.lax.max, (1, 2, 2, 1),
                                     (1, 2, 2, 1), "VALID")
    y, vjp = jax.vjp(pool, x)
    (dx,) = vjp(cot)  # select-and-scatter
    return y, dx


def maxpool_grad_inputs(rng):
    x = (rng.permutation(2 * 6 * 6 * 3).reshape(2, 6, 6, 3).astype(np.float32)
         / 10)  # distinct: the argmax of a window is unique
    return x, normal(rng, (2, 3, 3, 3))


def conv_grouped_grad(x, kernel):
    def conv(inp, ker):
        return jax.lax.conv_general_dilated(
            inp, ker, window_strides=(2, 1), padding=((1, 1), (2, 0)),
            rhs_dilation=(1, 2), feature_group_count=2,
            dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def loss(inp, ker):
        return jnp.sum(jnp.sin(conv(inp, ker)))
    y = conv(x, kernel)
    dx, dk = jax.grad(loss, argnums=(0, 1))(x, kernel)
    return y, dx, dk


def conv_grouped_grad_inputs(rng):
    return normal(rng, (2, 4, 7, 6)), normal(rng, (6, 2, 3, 2), 0.3)


def random_dropout(key_data, x):
    key = jax.random.wrap_key_data(key_data, impl="threefry2x32")
    k1, k2 = jax.random.split(key)
    keep = jax.random.bernoulli(k1, 0.7, x.shape)
    noise = jax.random.normal(k2, x.shape)
    return jnp.where(keep, x / 0.7, 0.0) + 0.01 * noise, keep


def random_dropout_inputs(rng):
    return np.array([0, 42], np.uint32), normal(rng, (4, 8))


def random_rbg(key_data, x):
    key = jax.random.wrap_key_data(key_data, impl="rbg")
    k1, k2 = jax.random.split(key)
    return (jax.random.uniform(k1, x.shape) + x,
            jax.random.bits(k2, (3, 5), u32),
            jax.random.key_data(k2))


def random_rbg_inputs(rng):
    return (np.array([0, 7, 0, 123456789], np.uint32), normal(rng, (4, 8)))


def rng_bit_generator(key, key2):
    gen = jax.lax.rng_bit_generator
    algo = jax.lax.RandomAlgorithm
    k1, a = gen(key, (3, 5), dtype=jnp.uint32, algorithm=algo.RNG_THREE_FRY)
    k2, b = gen(k1, (7,), dtype=jnp.uint64, algorithm=algo.RNG_PHILOX)
    k3, c = gen(key2, (3, 3), dtype=jnp.uint8, algorithm=algo.RNG_PHILOX)
    k4, d = gen(key2, (2, 3), dtype=jnp.uint64, algorithm=algo.RNG_THREE_FRY)
    k5, e = gen(key, (5,), dtype=jnp.uint16, algorithm=algo.RNG_THREE_FRY)
    k6, f = gen(key2, (2, 2), dtype=jnp.uint32, algorithm=algo.RNG_DEFAULT)
    return a, b, c, d, e, f, k2, k3, k4, k5, k6


def rng_bit_generator_inputs(rng):
    # key2's counter wraps around 2^64 within the calls that use it.
    return (np.array([1, 2], np.uint64),
            np.array([5, 2**64 - 3], np.uint64))


def fft_ops(x, z):
    return (jnp.fft.fft(z), jnp.fft.ifft(z, axis=0), jnp.fft.rfft(x),
            jnp.fft.irfft(jnp.fft.rfft(x), n=x.shape[-1]),
            jnp.fft.fft2(z), jnp.abs(z) * jnp.angle(z))


def fft_ops_inputs(rng):
    z = (normal(rng, (4, 8)) + 1j * normal(rng, (4, 8))).astype(np.complex64)
    return normal(rng, (3, 10)), z


def scatter_modes(x, idx, upd, idx2d, upd2d, table, far):
    a = x.at[idx].set(upd)              # distinct indices: a defined order
    b = x.at[idx].max(upd * 3.0)
    c = x.at[idx].mul(upd)
    d = x.at[jnp.array([0, 9, 2])].add(1.0, mode="drop")  # 9 is out of bounds
    e = table.at[idx2d[:, 0], idx2d[:, 1]].add(upd2d)
    f = jnp.take(table, far, axis=0, mode="fill", fill_value=-1.0)
    g = x.at[idx].min(-upd)
    return a, b, c, d, e, f, g


def scatter_modes_inputs(rng):
    return (normal(rng, (6,)), np.array([4, 1, 3], np.int32),
            normal(rng, (3,)), np.array([[0, 1], [2, 3], [0, 1], [3, 0]],
                                        np.int32),
            normal(rng, (4,)), normal(rng, (4, 5)),
            np.array([1, 7, -2, 3], np.int32))


def int8_matmul(a, b, scale):
    acc = jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())),
                              preferred_element_type=jnp.int32)
    wide = jnp.matmul(a.astype(i32), b.astype(i32))
    return acc, acc.astype(f32) * scale, wide - acc


def int8_matmul_inputs(rng):
    return (rng.integers(-128, 128, (6, 16)).astype(np.int8),
            rng.integers(-128, 128, (16, 5)).astype(np.int8),
            np.float32(0.01))


def remat_mlp(w1, w2, x):
    @jax.checkpoint
    def block(w, h):
        return jnp.sin(h @ w)

    def loss(ws):
        a, b = ws
        return jnp.sum(block(b, block(a, x)) ** 2)
    return jax.grad(loss)((w1, w2))


def remat_mlp_inputs(rng):
    return normal(rng, (8, 8), 0.4), normal(rng, (8, 4), 0.4), normal(rng, (5, 8))


def array_manipulation(x, v):
    return (jnp.pad(x, ((1, 2), (3, 0)), mode="reflect"),
            jnp.roll(x, 2, axis=1), jnp.flip(x, axis=0),
            jnp.tile(v, 3), jnp.repeat(v, 2),
            jnp.concatenate([x, x[:, :2] * 2], axis=1),
            x[::2, 1::3], jnp.triu(x), jnp.diag(x[:, :5]),
            jnp.stack([v, v[::-1]], axis=1).reshape(-1),
            jnp.pad(x, ((0, 1), (1, 1)), mode="edge"))


def array_manipulation_inputs(rng):
    return normal(rng, (5, 7)), normal(rng, (4,))


def special_functions(x, y):
    pos = jnp.abs(x) + 0.1
    return (jax.scipy.special.erf(x), jax.lax.lgamma(pos), jax.lax.digamma(pos),
            jax.scipy.special.erfinv(jnp.tanh(x) * 0.9), jnp.expm1(x),
            jnp.log1p(pos), jax.nn.sigmoid(x), jnp.cbrt(x), jnp.arctan2(x, y),
            jnp.sinh(x), jnp.cosh(x), jnp.arcsin(jnp.tanh(x)),
            jnp.arccos(jnp.tanh(y)), jnp.round(x * 3), jnp.isfinite(x / y),
            jnp.nextafter(x, y), jax.nn.softplus(x), jnp.sign(x) * jnp.floor(y),
            jnp.power(pos, y), jax.lax.integer_pow(x, 3), jax.lax.rsqrt(pos),
            jnp.tan(x * 0.5), jnp.logaddexp(x, y))


def special_functions_inputs(rng):
    y = normal(rng, (40,))
    y[3] = 0.0  # x / 0 -> inf: is_finite false
    return normal(rng, (40,), 2.0), y


def half_precision(x, w, b):
    h = jnp.dot(x, w) + b             # f16 dot
    h = jax.nn.gelu(h)
    m = jnp.mean(h.astype(f32), axis=0)
    return h, m, jnp.max(h, axis=1)


def half_precision_inputs(rng):
    return (normal(rng, (8, 16), 1.0, np.float16),
            normal(rng, (16, 12), 0.3, np.float16),
            normal(rng, (12,), 0.1, np.float16))


def transposes_layouts(x, y, z):
    a = x.T @ y                                  # contracting dim first
    b = jnp.transpose(z, (2, 0, 1)) + 1.0
    c = jnp.einsum("abc->cab", z) * jnp.einsum("abc->cab", z)
    d = (x @ x.T).T
    return a, b, jnp.sum(c, axis=1), d


def transposes_layouts_inputs(rng):
    return normal(rng, (6, 4)), normal(rng, (6, 5)), normal(rng, (3, 4, 5))


def associative_scan(x):
    return (jax.lax.associative_scan(jnp.add, x, axis=0),
            jax.lax.associative_scan(jnp.maximum, x, axis=1, reverse=True),
            jax.lax.cummax(x, axis=0), jax.lax.cumprod(x * 0.5 + 1.0, axis=1),
            jax.lax.cumlogsumexp(x, axis=1))


def associative_scan_inputs(rng):
    return (normal(rng, (9, 6)),)


def sharding_constraint(x, w):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(jax.devices()[:1], ("data",))
    h = jax.lax.with_sharding_constraint(
        x @ w, NamedSharding(mesh, PartitionSpec("data")))
    return jnp.tanh(h), jnp.sum(h, axis=0)


def sharding_constraint_inputs(rng):
    return normal(rng, (8, 6)), normal(rng, (6, 4))


def while_newton(x):
    # Newton's iteration for sqrt until converged: data-dependent trip count.
    def cond(state):
        y, i, err = state
        return (err > 1e-6) & (i < 50)

    def body(state):
        y, i, _ = state
        y_new = 0.5 * (y + x / y)
        return y_new, i + 1, jnp.max(jnp.abs(y_new - y))
    y, iters, _ = jax.lax.while_loop(cond, body, (x, 0, jnp.float32(1.0)))
    return y, iters


def while_newton_inputs(rng):
    return (np.abs(normal(rng, (10,))) * 5 + 0.5,)


def argsort_stable(x):
    # jnp.argsort is stable: equal keys keep their index order.
    return jnp.argsort(x, stable=True), jnp.sort(x)


def argsort_stable_inputs(rng):
    return (rng.integers(0, 4, (3, 12)).astype(np.float32),)


PROGRAMS = [
    Program("mlp_train_step", mlp_train_step, mlp_inputs,
            "2-layer MLP 32->64->10 on a batch of 8, softmax cross-entropy, "
            "value_and_grad and an SGD step (lr 0.1); returns the loss and the "
            "new params"),
    Program("transformer_block", transformer_block, transformer_inputs,
            "pre-LN causal self-attention block (seq 16, d_model 32, 2 heads) "
            "followed by a GELU MLP (32->64->32), residuals"),
    Program("scan_rnn", scan_rnn, scan_rnn_inputs,
            "lax.scan of a tanh RNN cell (8 -> 16) over 12 steps: a while "
            "loop with dynamic-slice reads and dynamic-update-slice writes"),
    Program("kv_cache_update", kv_cache_update, kv_cache_inputs,
            "fori_loop writing 4 scaled rows into a [16,8] cache at a "
            "run-time start with dynamic_update_slice (in place in a while)",
            "f32 cache, s32 start"),
    Program("cond_switch", cond_switch, cond_switch_inputs,
            "lax.cond on a pred input, lax.switch over 3 branches on an s32 "
            "index, and both inside lax.map (a while loop over conditionals; "
            "one index out of range, clamped)", "f32 data, pred / s32 selectors"),
    Program("sort_topk", sort_topk, sort_topk_inputs,
            "jnp.sort along axis 1, jnp.argsort along axis 0, lax.top_k (k=3) "
            "and a two-operand lax.sort (s32 keys carrying f32 payload); all "
            "keys distinct", "f32 and s32 keys, s32 indices"),
    Program("layer_norm_bf16", layer_norm_bf16, layer_norm_bf16_inputs,
            "layer norm of a bf16 [8,64] with statistics in f32, bf16 result",
            "bf16 in/out (stored as uint16 bits), f32 statistics"),
    Program("cumsum_argmax", cumsum_argmax, cumsum_argmax_inputs,
            "jnp.cumsum (reduce-window) on f32 and s32, jnp.argmax with a tie "
            "and jnp.argmin (variadic reduce)", "f32 and s32"),
    Program("small_conv", small_conv, small_conv_inputs,
            "conv_general_dilated NHWC 1x8x8x3 with a 3x3x3x4 HWIO kernel, "
            "SAME padding, + bias + relu"),
    Program("softmax_xent", softmax_xent, softmax_xent_inputs,
            "log-softmax, softmax and cross-entropy with soft labels on "
            "[64,100]"),
    Program("adam_step", adam_step, adam_inputs,
            "one Adam update over a pytree of 3 arrays with bias correction "
            "from an s32 step counter", "f32 params, s32 step"),
    Program("ffi_call", ffi_call_program, ffi_call_inputs,
            "two jax.ffi.ffi_call custom calls to 'xla_gpu_test_add_scaled' "
            "(handler.cc) with attributes scale (f32) and mode (s32), between "
            "ordinary ops", setup=ffi_register),
    Program("embedding_lookup", embedding_lookup, embedding_inputs,
            "embedding gather with a repeated id and its gradient "
            "(scatter-add into the table)", "f32 table, s32 ids"),
    Program("scan_two_layer", scan_two_layer, scan_two_layer_inputs,
            "reverse lax.scan of a two-layer recurrent cell with a tuple "
            "carry; emits a per-step scalar"),
    Program("reductions", reductions, reductions_inputs,
            "sums / max / prod / var / logsumexp over several axes, integer "
            "min / sum and pred any / all", "f32 and s32"),
    Program("integer_ops", integer_ops, integer_ops_inputs,
            "floor division and mod of s32 (negative operands), shifts and "
            "bitwise ops, popcount, clz, u32 hashing with wraparound, u8 "
            "arithmetic and clip", "s32, u32, u8"),
    Program("bmm_einsum", bmm_einsum, bmm_einsum_inputs,
            "batched matmul, a bf16 attention-score einsum with "
            "preferred_element_type=f32, and a contraction that transposes",
            "f32; bf16 inputs of the second einsum (uint16 bits)"),
    Program("maxpool_grad", maxpool_grad, maxpool_grad_inputs,
            "2x2 stride-2 max pool (reduce-window) and its VJP "
            "(select-and-scatter); distinct inputs"),
    Program("conv_grouped_grad", conv_grouped_grad, conv_grouped_grad_inputs,
            "NCHW grouped convolution (2 groups, stride 2x1, asymmetric "
            "padding, rhs dilation 1x2) and its gradients w.r.t. input "
            "(lhs dilation) and kernel (batch_group_count)"),
    Program("random_dropout", random_dropout, random_dropout_inputs,
            "jax.random with a threefry2x32 key from an input: split, "
            "bernoulli dropout mask and normal noise (integer ops in HLO)",
            "u32 key, f32 data, pred mask"),
    Program("random_rbg", random_rbg, random_rbg_inputs,
            "jax.random with an 'rbg' key: rng-bit-generator "
            "(algorithm=rng_default, XLA:CPU expands it to Philox4x32) for "
            "uniform floats and raw u32 bits", "u32 key and bits, f32 data"),
    Program("rng_bit_generator", rng_bit_generator,
            rng_bit_generator_inputs,
            "lax.rng_bit_generator with the three_fry, philox and default "
            "algorithms on u8/u16/u32/u64 bits of odd shapes, chained "
            "states and a counter that wraps", "u64 states (x64 enabled)",
            x64=True),
    Program("fft_ops", fft_ops, fft_ops_inputs,
            "fft / ifft along either axis, rfft, irfft and fft2 of small "
            "c64 and f32 arrays, plus complex abs and angle",
            "c64 and f32"),
    Program("scatter_modes", scatter_modes, scatter_modes_inputs,
            "scatters as .at[].set / max / mul / min, an add with an "
            "out-of-bounds index dropped, a 2-D point scatter-add with a "
            "repeated point and a gather with mode='fill'",
            "f32 data, s32 indices"),
    Program("int8_matmul", int8_matmul, int8_matmul_inputs,
            "s8 x s8 matmul accumulating in s32 (preferred_element_type), "
            "rescaled to f32, and the same product in s32", "s8, s32, f32"),
    Program("remat_mlp", remat_mlp, remat_mlp_inputs,
            "gradient of two jax.checkpoint'ed sin(h @ w) blocks "
            "(optimization barriers in the HLO)"),
    Program("array_manipulation", array_manipulation,
            array_manipulation_inputs,
            "reflect and edge padding, roll, flip, tile, repeat, concatenate, "
            "strided slices, triu, diag, stack (pad / slice / concatenate / "
            "reverse / gather in the HLO)"),
    Program("special_functions", special_functions, special_functions_inputs,
            "erf, lgamma, digamma, erfinv, expm1, log1p, logistic, cbrt, "
            "atan2, sinh, cosh, asin, acos, round, is_finite, nextafter, "
            "softplus, power, integer_pow, rsqrt, tan, logaddexp on f32"),
    Program("half_precision", half_precision, half_precision_inputs,
            "an f16 dense layer (dot + bias + GELU) with f32 statistics",
            "f16 in and out, f32 mean"),
    Program("transposes_layouts", transposes_layouts,
            transposes_layouts_inputs,
            "matmuls of transposed operands and 3-D transposes: XLA:CPU's "
            "text holds copies and bitcasts between layouts"),
    Program("associative_scan", associative_scan, associative_scan_inputs,
            "lax.associative_scan with add and a reverse maximum, cummax, "
            "cumprod, cumlogsumexp"),
    Program("sharding_constraint", sharding_constraint,
            sharding_constraint_inputs,
            "with_sharding_constraint on a one-device mesh: a 'Sharding' "
            "custom call in the text JAX hands to XLA (gone after XLA's "
            "passes)"),
    Program("while_newton", while_newton, while_newton_inputs,
            "lax.while_loop of Newton's sqrt iteration until converged "
            "(data-dependent trip count, tuple carry of f32/s32/f32)"),
    Program("argsort_stable", argsort_stable, argsort_stable_inputs,
            "stable argsort with many equal keys (is_stable=true sort) and "
            "the sorted values", "f32 keys, s32 indices"),
]


# ------------------------------------------------------------- the writer


def _leaf_record(a: np.ndarray) -> dict:
    return {"type": _HLO_TYPES[np.dtype(a.dtype)], "shape": list(a.shape)}


def _storable(a: np.ndarray) -> np.ndarray:
    if a.dtype == ml_dtypes.bfloat16:
        return a.view(np.uint16)
    return a


def generate(prog: Program) -> None:
    if prog.setup is not None:
        prog.setup()
    rng = np.random.default_rng(0)
    args = prog.make_inputs(rng)
    with jax.enable_x64(prog.x64):
        jitted = jax.jit(prog.fn, keep_unused=True)
        lowered = jitted.lower(*args)
        compiled = lowered.compile()
        outputs = compiled(*args)
    in_leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    out_leaves = [np.asarray(a) for a in jax.tree_util.tree_leaves(outputs)]

    folder = HERE / prog.name
    folder.mkdir(exist_ok=True)
    (folder / "before_optimizations.hlo").write_text(
        lowered.as_text(dialect="hlo"))
    (folder / "after_optimizations_cpu.hlo").write_text(compiled.as_text())
    np.savez_compressed(folder / "inputs.npz", **{
        f"arg{i}": _storable(a) for i, a in enumerate(in_leaves)})
    np.savez_compressed(folder / "outputs.npz", **{
        f"out{i}": _storable(a) for i, a in enumerate(out_leaves)})
    mem = compiled.memory_analysis()
    fields = ("temp_size_in_bytes", "argument_size_in_bytes",
              "output_size_in_bytes", "alias_size_in_bytes",
              "generated_code_size_in_bytes")
    (folder / "xla_memory.json").write_text(json.dumps(
        {f: int(getattr(mem, f)) for f in fields}, indent=2) + "\n")
    meta: dict[str, Any] = {
        "name": prog.name,
        "description": prog.description,
        "jax_version": jax.__version__,
        "jaxlib_version": jax.lib.__version__ if hasattr(jax.lib, "__version__")
        else None,
        "backend": "cpu",
        "dtype_notes": prog.dtype_notes,
        "inputs": [_leaf_record(a) for a in in_leaves],
        "outputs": [_leaf_record(a) for a in out_leaves],
        "tolerance": "floats: xla_gpu.hlo.numerics.compare with the "
                     "tolerance of tolerance_type(entry, output type), "
                     "scale_relative=True; integers and pred: exact",
    }
    text = json.dumps(meta, indent=2)
    # One line per leaf record: `{"type": "f32", "shape": [8, 32]}`.
    text = re.sub(r"\{\s+\"type\": (\"\w+\"),\s+\"shape\": \[([^\]]*)\]\s+\}",
                  lambda m: '{"type": %s, "shape": [%s]}' % (
                      m.group(1), ", ".join(x.strip() for x in
                                            m.group(2).split(",") if x.strip())),
                  text)
    (folder / "program.json").write_text(text + "\n")
    print(f"wrote {prog.name}: {len(in_leaves)} inputs, {len(out_leaves)} "
          "outputs")


def main(argv: list[str]) -> None:
    jax.config.update("jax_platforms", "cpu")
    wanted = set(argv)
    unknown = wanted - {p.name for p in PROGRAMS}
    if unknown:
        sys.exit(f"unknown programs: {sorted(unknown)}")
    for prog in PROGRAMS:
        if not wanted or prog.name in wanted:
            generate(prog)


if __name__ == "__main__":
    main(sys.argv[1:])
