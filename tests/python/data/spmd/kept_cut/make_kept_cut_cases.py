"""Makes the SPMD cases bench/spmd_collectives.py compares against XLA's
collectives (beside ../ and ../windowed): ops along a cut dim that the
partitioner keeps cut where it once gathered the dim: a convolution over
the kernel's cut output features, a window over a dilated base (halo
exchange), a reverse and a concatenate of rows cut unevenly (by sharding
constraints inside: jax places only even chunks), windows reaching past
the neighbours, a depthwise convolution and its kernel's gradient (batch
groups) over cut groups, slices and pads shifting a cut dim by more than
a chunk (compact halo exchange), a concatenate of uneven rows on a 2-D
mesh. Same files as
../windowed/make_windowed_cases.py:

    JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 \\
        python tests/python/data/spmd/kept_cut/make_kept_cut_cases.py [CASE ...]

    <case>.partitioned.hlo   XLA's per-device program (compile().as_text())
    <case>.pre.hlo           the annotated program (as_text(dialect="hlo"))
    <case>.npz               num_partitions, jax_version, the global inputs
                             and outputs (in_<i>, out_<i>)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from case_writer import CaseWriter  # noqa: E402  (before jax: the device count)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

_cases = CaseWriter(Path(__file__).resolve().parent, 20261204, sys.argv[1:])
normal, save_case = _cases.normal, _cases.save


def main() -> int:
    if jax.device_count() < 8:
        print("needs 8 devices", file=sys.stderr)
        return 1
    line = Mesh(np.array(jax.devices()), ("x",))
    grid = Mesh(np.array(jax.devices()).reshape(2, 4), ("a", "b"))

    def conv(a, w):
        return jax.lax.conv_general_dilated(a, w, (1,), "SAME")

    def rows(v):
        return jax.lax.with_sharding_constraint(v, NamedSharding(line, P("x")))
    # the kernel's output features cut: each device convolves with its slice
    save_case("conv_output_features", conv, line, [normal(2, 3, 10), normal(16, 3, 3)],
              [P(), P("x")])
    save_case("conv_batch_and_output_features", conv, grid,
              [normal(8, 3, 10), normal(16, 3, 3)], [P("a"), P("b")])
    save_case("conv_length_and_output_features", conv, grid,
              [normal(2, 3, 16), normal(16, 3, 3)], [P(None, None, "a"), P("b")])
    # a window over a dilated base (halo exchange)
    save_case("window_base_dilation", lambda a: jax.lax.reduce_window(
        a, 0.0, jax.lax.add, (3, 1), (1, 1), ((1, 2), (0, 0)), base_dilation=(2, 1)),
        line, [normal(64, 4)], [P("x")], P("x"))
    # rows cut unevenly (30 over 8: chunks of 4, 2 of padding)
    save_case("uneven_reverse", lambda a: rows(jnp.exp(rows(a))[::-1]) * 2, line,
              [normal(30, 4)], [P()])
    save_case("uneven_concatenate", lambda a, b: rows(jnp.concatenate(
        [jnp.exp(rows(a)), jnp.exp(rows(b))])) * 2, line, [normal(10, 8), normal(6, 8)],
        [P(), P()])
    # windows reaching past the neighbours (7 over chunks of 2): halos from
    # two devices each side
    save_case("window_wide", lambda a: jax.lax.reduce_window(
        a, 0.0, jax.lax.add, (7, 1), (1, 1), ((3, 3), (0, 0))),
        line, [normal(16, 4)], [P("x")], P("x"))
    save_case("conv_wide_kernel", lambda a, w: jax.lax.conv_general_dilated(
        a, w, (1,), ((3, 3),)), line, [normal(2, 3, 16), normal(4, 3, 7)],
        [P(None, None, "x"), P()], P(None, None, "x"))
    # a depthwise convolution with its groups' features cut: each device
    # convolves its groups alone
    save_case("conv_depthwise", lambda a, w: jax.lax.conv_general_dilated(
        a, w, (1,), "SAME", feature_group_count=16), line,
        [normal(2, 16, 10), normal(16, 1, 3)], [P(None, "x"), P("x")], P(None, "x"))

    # its kernel's gradient: a convolution with 16 batch groups (the input's
    # features as its batch), those cut 8 ways
    def depthwise_kernel_grad(a, dy):
        def conv(w):
            return jax.lax.conv_general_dilated(a, w, (1,), "SAME", feature_group_count=16)
        return jax.vjp(conv, jnp.zeros((16, 1, 3), jnp.float32))[1](dy)[0]
    save_case("conv_depthwise_kernel_grad", depthwise_kernel_grad, line,
              [normal(2, 16, 10), normal(2, 16, 10)], [P(None, "x"), P(None, "x")], P("x"))

    # slices and pads shifting a cut dim by more than a chunk: each device's
    # rows straight from the devices holding them (XLA's compact halo
    # exchange: pieces packed into few collective-permutes)
    save_case("slice_far", lambda a: a[20:60] * 2, line, [normal(64, 4)], [P("x")], P("x"))
    save_case("slice_far_rows", lambda a: -a[20:28], line, [normal(64, 3)], [P("x")], P("x"))
    save_case("pad_far", lambda a: jnp.pad(a, ((24, 0), (0, 0))), line, [normal(64, 4)],
              [P("x")], P("x"))
    save_case("slice_far_2d", lambda a: a[40:56] * 2, grid, [normal(64, 8)], [P("b", "a")],
              P("b", "a"))
    save_case("window_far_shift", lambda a: jax.lax.reduce_window(
        a, 0.0, jax.lax.add, (2, 1), (1, 1), ((20, -19), (0, 0))), line, [normal(64, 4)],
        [P("x")], P("x"))
    # the same for interior padding and a dilated base (the windows count
    # the operand's elements)
    save_case("pad_interior_far", lambda a: jax.lax.pad(a, 0.0, ((41, -8, 1), (0, 0, 0))),
              line, [normal(32, 4)], [P("x")], P("x"))
    save_case("window_base_dilation_far", lambda a: jax.lax.reduce_window(
        a, 0.0, jax.lax.add, (3, 1), (1, 1), ((40, -37), (0, 0)), base_dilation=(2, 1)),
        line, [normal(32, 4)], [P("x")], P("x"))

    # a concatenate of rows cut unevenly on a 2-D mesh whose other axis cuts
    # the columns: the rows' cut moves into the columns within each column
    # group (all-to-alls), no gather
    def grid_rows(v):
        return jax.lax.with_sharding_constraint(v, NamedSharding(grid, P("b", "a")))
    save_case("uneven_concatenate_2d", lambda a, b: grid_rows(jnp.concatenate(
        [jnp.exp(grid_rows(a)), jnp.exp(grid_rows(b))])) * 2, grid,
        [normal(10, 8), normal(6, 8)], [P(), P()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
