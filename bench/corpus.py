"""The benchmark corpus: realistic XLA:GPU fusions written as JAX functions.

Each case is one fusion as XLA:GPU would form it (a softmax is three
kernels there, so the corpus holds its pieces), with the jnp function that
XLA runs for the same computation, and argument shapes at two sizes:

  gpu: tens to hundreds of MB per kernel, the sizes that matter on an H200
  cpu: 64x smaller, for the cpu target (grid emulation) on this machine

Their HLO is stored next to this file, `corpus/NAME.hlo` (gpu sizes) and
`corpus/NAME.cpu.hlo` (cpu sizes): the PRE-optimization text of jax's
lowering (`jax.jit(f).lower(*specs).as_text(dialect="hlo")`), an ENTRY of
plain ops that `xla_gpu.compile` takes as one fusion (calls inlined).
XLA:CPU's post-optimization HLO is not used: it fuses differently from
XLA:GPU.

    python bench/corpus.py --regenerate     # rewrite corpus/*.hlo (needs jax)
    python bench/corpus.py                  # list the cases and their sizes

This module imports jax only when a case's function is called or the HLO is
regenerated: `run_gpu.py run` reads it on a machine without MLIR, and the
case list (names, shapes, fixups) needs numpy only.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS_DIR = HERE / "corpus"
SIZES = ("gpu", "cpu")

Arg = tuple[tuple[int, ...], str]          # (shape, HLO element type)


def _jnp():
    import jax
    import jax.numpy as jnp
    return jax, jnp


# -- the functions (XLA's side runs exactly these) -----------------------------

def gelu(x):
    jax, _ = _jnp()
    return jax.nn.gelu(x, approximate=True)


def bias_relu(x, b):
    _, jnp = _jnp()
    return jnp.maximum(x + b, 0)


def softmax_exp(x, row_max):
    # softmax's second kernel on XLA:GPU: exp(x - max) (its row sum is a
    # reduction fused after it; here the loop part alone).
    _, jnp = _jnp()
    return jnp.exp(x - row_max[:, None])


def softmax_normalize(e, row_sum):
    # softmax's last kernel: e * (1 / sum).
    return e * (1.0 / row_sum)[:, None]


def layer_norm_moments(x):
    # layer norm's statistics: mean and mean of squares, one multi-output
    # row reduction (XLA:GPU fuses the sibling reductions).
    _, jnp = _jnp()
    return jnp.mean(x, axis=-1), jnp.mean(x * x, axis=-1)


def layer_norm_normalize(x, mean, var, gamma, beta):
    jax, _ = _jnp()
    inv = jax.lax.rsqrt(var + 1e-5)
    return (x - mean[:, None]) * inv[:, None] * gamma + beta


def rms_norm_bf16_sumsq(x):
    # RMS norm's reduction: the f32 sum of squares of a bf16 activation.
    _, jnp = _jnp()
    xf = x.astype(jnp.float32)
    return jnp.sum(xf * xf, axis=-1)


def rms_norm_bf16(x, sumsq, w):
    # RMS norm's scaling kernel: bf16 in, f32 math, bf16 out.
    jax, jnp = _jnp()
    r = jax.lax.rsqrt(sumsq / x.shape[-1] + 1e-6)
    return (x.astype(jnp.float32) * r[:, None]).astype(jnp.bfloat16) * w


def transpose_021(x):
    _, jnp = _jnp()
    return jnp.transpose(x, (0, 2, 1))


def transpose_102(x):
    # attention's [seq, heads, dim] -> [heads, seq, dim]
    _, jnp = _jnp()
    return jnp.transpose(x, (1, 0, 2))


def transpose_210(x):
    _, jnp = _jnp()
    return jnp.transpose(x, (2, 1, 0))


def reduce_row(x):
    _, jnp = _jnp()
    return jnp.sum(x, axis=1)


def reduce_column(x):
    _, jnp = _jnp()
    return jnp.sum(x, axis=0)


def reduce_multirow(x):
    # short rows (32): XLA:GPU reduces several rows per warp
    _, jnp = _jnp()
    return jnp.sum(x, axis=1)


def argmax(x):
    _, jnp = _jnp()
    return jnp.argmax(x, axis=1).astype(jnp.int32)


def scatter_add(x, idx, upd):
    return x.at[idx].add(upd)


def segment_sum_sorted(x, idx, upd):
    # jax.ops.segment_sum(..., indices_are_sorted=True) into existing rows:
    # runs of equal, sorted indices (a graph's edges grouped by node)
    return x.at[idx].add(upd, indices_are_sorted=True)


def concatenate(a, b, c):
    _, jnp = _jnp()
    return jnp.concatenate([jnp.sin(a), b * 2, c], axis=1)


def dynamic_update_slice(x, u, i, j):
    # a KV-cache style write of a block of rows, in place
    jax, _ = _jnp()
    return jax.lax.dynamic_update_slice(x, u, (i, j))


def adam(p, g, m, v, step):
    _, jnp = _jnp()
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat = m / (1 - b1 ** step)
    vhat = v / (1 - b2 ** step)
    return p - lr * mhat / (jnp.sqrt(vhat) + eps), m, v


def gemm_seed(a, b):
    # The seed's running example: an s8 operand converted in the GEMM's
    # load, the scale and negate in its store (one GEMM fusion on XLA:GPU).
    _, jnp = _jnp()
    return -((a.astype(jnp.bfloat16) @ b) * jnp.bfloat16(0.125))


def gemm_bf16(a, b):
    return a @ b


def gemm_bias_relu(x, w, bias):
    # an MLP's up-projection: bias and ReLU after the GEMM (a chain of
    # single-user ops, all in the GEMM's epilogue; tanh GELU reads its
    # input four times and stays a kernel of its own)
    _, jnp = _jnp()
    return jnp.maximum(x @ w + bias, 0)


# -- input fixups: realistic values where uniform [-2, 2) is not ----------------

def _adam_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    p, g, m, v, step = inputs
    v = np.abs(v)                                   # a second moment is >= 0
    step = np.asarray(10.0, dtype=step.dtype)       # a step count
    return [p, g, m, v, step]


def _positive_sum(inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, s, *rest = inputs
    return [x, np.abs(s) + np.asarray(1.0, s.dtype), *rest]   # a row sum of exps


def _scatter_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    # Rows spread over the whole table (an embedding gradient): random_inputs
    # cannot see through jax's negative-index wrap-around (a select) and
    # would draw indices in [-64, 64), 128 rows hit 128 times each.
    x, idx, upd = inputs
    rng = np.random.default_rng(7)
    return [x, rng.integers(0, x.shape[0], idx.shape).astype(idx.dtype), upd]


def _sorted_segment_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    # Sorted rows, about 64 updates each (runs of equal indices).
    x, idx, upd = inputs
    rng = np.random.default_rng(7)
    rows = np.sort(rng.integers(0, x.shape[0], idx.shape))
    return [x, rows.astype(idx.dtype), upd]


def _norm_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, mean, var, *rest = inputs
    return [x, mean, np.abs(var), *rest]


def _rms_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, sumsq, w = inputs
    return [x, (np.abs(sumsq) + 1).astype(sumsq.dtype) * x.shape[-1], w]


# -- bytes a kernel must move at least (for bandwidth) ---------------------------

def _dus_bytes(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
    return 2 * inputs[1].nbytes                      # read the update, write it


def _scatter_bytes(inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
    # read indices and updates, read-modify-write the rows they hit
    return inputs[1].nbytes + 3 * inputs[2].nbytes


@dataclass
class Case:
    name: str
    fn: Callable
    args: dict[str, list[Arg]]          # size -> argument shapes
    what: str
    fix_inputs: Callable | None = None  # post-processes random_inputs
    donate: tuple[int, ...] = ()        # XLA on the GPU: donated (in place) args
    min_bytes: Callable | None = None   # (inputs, outputs) -> bytes; default all in + out
    notes: list[str] = field(default_factory=list)
    gemm: bool = False                  # a [M,K] @ [K,N] product of the first two args

    def flops(self, size: str = "gpu") -> int:
        """2·M·N·K of a GEMM case (TFLOP/s); 0 for the others."""
        if not self.gemm:
            return 0
        (m, k), (_, n) = self.args[size][0][0], self.args[size][1][0]
        return 2 * m * n * k

    def hlo_path(self, size: str = "gpu") -> Path:
        return CORPUS_DIR / (f"{self.name}.hlo" if size == "gpu" else f"{self.name}.{size}.hlo")

    def hlo(self, size: str = "gpu") -> str:
        return self.hlo_path(size).read_text()

    def specs(self, size: str = "gpu"):
        jax, jnp = _jnp()
        return [jax.ShapeDtypeStruct(shape, jnp.dtype(_JNP_DTYPES[t]))
                for shape, t in self.args[size]]

    def inputs(self, comp, seed: int = 1) -> list[np.ndarray]:
        """Seeded inputs for the fusion computation `comp` (both sides get
        the same arrays)."""
        from xla_gpu.hlo.numerics import random_inputs
        inputs = random_inputs(comp, seed=seed)
        return self.fix_inputs(inputs) if self.fix_inputs else inputs

    def bytes_moved(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> int:
        """The bytes a kernel must read and write at least: every input and
        output once, or less for in-place kernels (dynamic-update-slice,
        scatter)."""
        if self.min_bytes is not None:
            return int(self.min_bytes(inputs, outputs))
        return int(sum(a.nbytes for a in inputs) + sum(a.nbytes for a in outputs))


_JNP_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "s32": "int32",
               "s8": "int8", "pred": "bool"}


def _case(name, fn, gpu: list[Arg], cpu: list[Arg], what: str, **kw) -> Case:
    return Case(name, fn, {"gpu": gpu, "cpu": cpu}, what, **kw)


CASES: list[Case] = [
    _case("gelu_bf16", gelu, [((8192, 8192), "bf16")], [((1024, 1024), "bf16")],
          "tanh GELU, bf16 (loop)"),
    _case("gelu_f32", gelu, [((8192, 4096), "f32")], [((1024, 512), "f32")],
          "tanh GELU, f32 (loop)"),
    _case("bias_relu_bf16", bias_relu, [((16384, 4096), "bf16"), ((4096,), "bf16")],
          [((2048, 512), "bf16"), ((512,), "bf16")], "x + bias, ReLU, bf16 (loop)"),
    _case("softmax_exp", softmax_exp, [((32768, 1024), "f32"), ((32768,), "f32")],
          [((512, 1024), "f32"), ((512,), "f32")], "softmax: exp(x - row max) (loop)"),
    _case("softmax_normalize", softmax_normalize,
          [((32768, 1024), "f32"), ((32768,), "f32")],
          [((512, 1024), "f32"), ((512,), "f32")],
          "softmax: e * (1 / row sum) (loop)", fix_inputs=_positive_sum),
    _case("layer_norm_moments", layer_norm_moments, [((32768, 1024), "f32")],
          [((512, 1024), "f32")], "layer norm: mean and mean of squares "
          "(2-output row reduction)"),
    _case("layer_norm_normalize", layer_norm_normalize,
          [((32768, 1024), "f32"), ((32768,), "f32"), ((32768,), "f32"),
           ((1024,), "f32"), ((1024,), "f32")],
          [((512, 1024), "f32"), ((512,), "f32"), ((512,), "f32"),
           ((1024,), "f32"), ((1024,), "f32")],
          "layer norm: (x - mean) * rsqrt(var + eps) * gamma + beta (loop)",
          fix_inputs=_norm_inputs),
    _case("rms_norm_bf16_sumsq", rms_norm_bf16_sumsq, [((16384, 4096), "bf16")],
          [((256, 4096), "bf16")], "RMS norm: f32 sum of squares of bf16 rows "
          "(row reduction)"),
    _case("rms_norm_bf16", rms_norm_bf16,
          [((16384, 4096), "bf16"), ((16384,), "f32"), ((4096,), "bf16")],
          [((256, 4096), "bf16"), ((256,), "f32"), ((4096,), "bf16")],
          "RMS norm: x * rsqrt(mean sq + eps) * w, bf16 (loop)", fix_inputs=_rms_inputs),
    _case("transpose_021", transpose_021, [((32, 1024, 1024), "f32")],
          [((8, 256, 256), "f32")], "transpose 0,2,1 (tiled transpose)"),
    _case("transpose_102", transpose_102, [((8192, 64, 128), "bf16")],
          [((512, 16, 128), "bf16")], "attention heads [s,h,d] -> [h,s,d] "
          "(102, minor dim kept: loop)"),
    _case("transpose_210", transpose_210, [((512, 256, 256), "f32")],
          [((64, 64, 128), "f32")], "transpose 2,1,0 (tiled transpose)"),
    _case("reduce_row", reduce_row, [((32768, 1024), "f32")], [((512, 1024), "f32")],
          "sum over rows of 1024 (row reduction)"),
    _case("reduce_column", reduce_column, [((1024, 32768), "f32")],
          [((1024, 512), "f32")], "sum over columns (column reduction)"),
    _case("reduce_multirow", reduce_multirow, [((1048576, 32), "f32")],
          [((16384, 32), "f32")], "sum over rows of 32 (multi-row reduction)"),
    _case("argmax", argmax, [((32768, 1024), "f32")], [((512, 1024), "f32")],
          "argmax over rows of 1024 (variadic row reduction)"),
    _case("scatter_add", scatter_add,
          [((65536, 512), "f32"), ((16384,), "s32"), ((16384, 512), "f32")],
          [((1024, 512), "f32"), ((256,), "s32"), ((256, 512), "f32")],
          "x.at[idx].add(rows) (scatter)", donate=(0,), min_bytes=_scatter_bytes,
          fix_inputs=_scatter_inputs),
    _case("segment_sum_sorted", segment_sum_sorted,
          [((4096, 128), "f32"), ((262144,), "s32"), ((262144, 128), "f32")],
          [((256, 128), "f32"), ((16384,), "s32"), ((16384, 128), "f32")],
          "x.at[sorted idx].add(rows) (sorted-indices scatter)", donate=(0,),
          min_bytes=_scatter_bytes, fix_inputs=_sorted_segment_inputs),
    _case("concatenate", concatenate,
          [((8192, 1024), "f32"), ((8192, 2048), "f32"), ((8192, 1024), "f32")],
          [((128, 1024), "f32"), ((128, 2048), "f32"), ((128, 1024), "f32")],
          "concat(sin(a), 2b, c) on the minor dim (concatenate)"),
    _case("dynamic_update_slice", dynamic_update_slice,
          [((8192, 8192), "f32"), ((2048, 8192), "f32"), ((), "s32"), ((), "s32")],
          [((1024, 1024), "f32"), ((256, 1024), "f32"), ((), "s32"), ((), "s32")],
          "write a [2048, 8192] block into [8192, 8192] in place "
          "(in-place dynamic-update-slice)", donate=(0,), min_bytes=_dus_bytes),
    _case("adam", adam, [((16 << 20,), "f32")] * 4 + [((), "f32")],
          [((256 << 10,), "f32")] * 4 + [((), "f32")],
          "Adam update: p, m, v from p, g, m, v, step (3-output loop)",
          fix_inputs=_adam_inputs),
    # GEMM fusions (the GEMM emitter's one kernel) against XLA:GPU's own
    # choice (its autotuned Triton GEMM or cuBLAS), and cuBLAS alone.
    _case("gemm_seed", gemm_seed, [((1024, 512), "s8"), ((512, 2048), "bf16")],
          [((128, 64), "s8"), ((64, 256), "bf16")],
          "-((s8 @ bf16) * 0.125): convert prologue, scale/negate epilogue (GEMM)",
          gemm=True),
    _case("gemm_bf16", gemm_bf16, [((4096, 4096), "bf16"), ((4096, 4096), "bf16")],
          [((128, 128), "bf16"), ((128, 128), "bf16")], "plain bf16 GEMM (GEMM)", gemm=True),
    _case("gemm_bias_relu", gemm_bias_relu,
          [((8192, 1024), "bf16"), ((1024, 4096), "bf16"), ((4096,), "bf16")],
          [((128, 64), "bf16"), ((64, 256), "bf16"), ((256,), "bf16")],
          "MLP up-projection: relu(x @ w + bias), bf16 (GEMM)", gemm=True),
]

BY_NAME = {c.name: c for c in CASES}


def select(names: list[str] | None) -> list[Case]:
    if not names:
        return CASES
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(unknown)} "
                         f"(known: {', '.join(BY_NAME)})")
    return [BY_NAME[n] for n in names]


def regenerate(cases: list[Case]) -> None:
    import jax
    CORPUS_DIR.mkdir(exist_ok=True)
    for case in cases:
        for size in SIZES:
            text = jax.jit(case.fn).lower(*case.specs(size)).as_text(dialect="hlo")
            case.hlo_path(size).write_text(text)
        print(f"wrote {case.hlo_path('gpu').relative_to(HERE.parent)} (+ .cpu.hlo)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regenerate", action="store_true",
                        help="rewrite corpus/*.hlo from jax's lowering")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args(argv)
    cases = select(args.cases)
    if args.regenerate:
        regenerate(cases)
        return 0
    for c in cases:
        shapes = {size: ", ".join(f"{t}[{','.join(map(str, s))}]" for s, t in c.args[size])
                  for size in SIZES}
        print(f"{c.name:22s} {c.what}\n{'':22s} gpu: {shapes['gpu']}\n{'':22s} cpu: {shapes['cpu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
