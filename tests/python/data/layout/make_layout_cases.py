"""Makes the layout-assignment test cases of
tests/python/passes/test_layout_assignment.py: small jax programs whose
parameters (and some results) have non-default layouts, with s8 x s8 -> s32
dots among them, and what XLA:CPU made of each.

    JAX_PLATFORMS=cpu python tests/python/data/layout/make_layout_cases.py

Run by hand, with the jax version the files were made with (recorded in
each .npz as `jax_version`); the tests only read what it wrote:

    <case>.pre.hlo   the program as jax hands it to XLA
                     (jit(f).lower(...).as_text(dialect="hlo")), its header's
                     entry_computation_layout replaced by the one XLA compiled
                     it with: jax passes the layouts asked for in compile
                     options, not in the text, so the text alone says
                     row-major everywhere
    <case>.cpu.hlo   jit(f).lower(...).compile().as_text(): XLA:CPU's
                     optimized program (its layout assignment's copies are
                     there, fused or not)
    <case>.npz       in_<i> / out_<i>: the logical inputs and jax's outputs

XLA:GPU is not reachable here (no CUDA jaxlib); the tests hold XLA:GPU's
copy counts as derived from its layout rules, next to the XLA:CPU counts
read from these files.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental.layout import Format, Layout  # noqa: E402

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(20261202)
DEVICE = jax.sharding.SingleDeviceSharding(jax.devices()[0])


def layout(*major_to_minor):
    return Format(Layout(major_to_minor=tuple(major_to_minor)), DEVICE)


ROW2, COL2 = layout(0, 1), layout(1, 0)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def int8(*shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def s32_dot(a, b, contracting=((1,), (0,)), batch=((), ())):
    return jax.lax.dot_general(a, b, (contracting, batch), preferred_element_type=jnp.int32)


_HEADER_LAYOUT = re.compile(r"entry_computation_layout=\{.*?\}(?=, [a-z_]+=|\s*$)", re.M)


def _compiled_layout(compiled_text: str) -> str:
    header = compiled_text.splitlines()[0]
    match = _HEADER_LAYOUT.search(header)
    assert match, header
    return match.group(0)


def save_case(name, f, args, in_formats, out_formats=None):
    jitted = jax.jit(f, in_shardings=in_formats, out_shardings=out_formats)
    lowered = jitted.lower(*args)
    compiled = lowered.compile()
    optimized = compiled.as_text()
    pre = lowered.as_text(dialect="hlo")
    lines = pre.splitlines()
    lines[0] = _HEADER_LAYOUT.sub(_compiled_layout(optimized), lines[0], count=1)
    outs = jitted(*args)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    data = {"jax_version": np.array(jax.__version__)}
    for i, a in enumerate(args):
        data[f"in_{i}"] = np.asarray(a)
    for i, o in enumerate(outs):
        data[f"out_{i}"] = np.asarray(o)
    (HERE / f"{name}.pre.hlo").write_text("\n".join(lines) + "\n")
    (HERE / f"{name}.cpu.hlo").write_text(optimized)
    np.savez_compressed(HERE / f"{name}.npz", **data)
    print(f"{name}: {lines[0][:160]}")


def main():
    x, y = normal(4, 8), normal(4, 8)
    # Elementwise on a column-major parameter, row-major result.
    save_case("exp_col_in", lambda x: jnp.exp(x) + 1.0, (x,), (COL2,))
    # The same with a column-major result: no relayout at all.
    save_case("exp_col_inout", lambda x: jnp.exp(x) * 2.0, (x,), (COL2,), COL2)
    # Operands in two layouts meet in an add.
    save_case("add_mixed", lambda x, y: jnp.tanh(x) + y, (x, y), (COL2, ROW2))
    a, b = int8(8, 16), int8(16, 8)
    # s8 x s8 -> s32 with a row-major RHS (XLA:GPU wants it K-minor).
    save_case("int8_dot_rhs_row", s32_dot, (a, b), (ROW2, ROW2))
    # ... with a {0,1} RHS (what XLA:GPU wants; XLA:CPU wants row-major).
    save_case("int8_dot_rhs_col", s32_dot, (a, b), (ROW2, COL2))
    # ... with a {0,1} LHS too (K major there: XLA:GPU relayouts it).
    save_case("int8_dot_lhs_col", s32_dot, (a, b), (COL2, COL2))
    # The program: a {0,1} f32 parameter through elementwise ops and
    # an int8 dot whose rescaled result meets it.
    p = normal(8, 8)

    def int8_dot_scaled(p, a, b):
        return jnp.exp(p) * s32_dot(a, b).astype(jnp.float32), s32_dot(a, b)
    save_case("int8_dot_scaled", int8_dot_scaled, (p, a, b), (COL2, ROW2, ROW2))
    # f32 matrices: XLA:GPU takes either order of a plain matrix.
    fa, fb = normal(8, 16), normal(16, 8)
    save_case("f32_dot_col", lambda a, b: a @ b, (fa, fb), (COL2, ROW2))
    # Batched f32 dot whose LHS has its batch dimension most minor (not a
    # strided batch of matrices: XLA:GPU relayouts it).
    ba, bb = normal(2, 4, 8), normal(2, 8, 3)
    save_case("batched_dot_batch_minor",
              lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (ba, bb),
              (layout(1, 2, 0), layout(0, 1, 2)))


if __name__ == "__main__":
    main()
