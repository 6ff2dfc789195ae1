"""Makes the SPMD cases of tests/python/passes/test_spmd_windowed.py: jax
programs whose ops read along a cut dim (slice, pad, reduce-window, a 1-D
convolution: XLA's halo exchange; concatenate, reverse, a one-row update,
interior padding, a dilated window, a convolution over cut features),
reshapes that split or merge a cut dim, and 2-D mesh reshards XLA does
with a collective-permute. Same files as
../make_spmd_cases.py (kept in this folder: the stored-case tests there
count theirs):

    JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        python tests/python/data/spmd/windowed/make_windowed_cases.py [CASE ...]

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
from jax.sharding import Mesh, PartitionSpec as P  # noqa: E402

_cases = CaseWriter(Path(__file__).resolve().parent, 20261203, sys.argv[1:])
normal, save_case = _cases.normal, _cases.save


def main() -> int:
    if jax.device_count() < 8:
        print("needs 8 devices", file=sys.stderr)
        return 1
    line = Mesh(np.array(jax.devices()), ("x",))
    grid = Mesh(np.array(jax.devices()).reshape(2, 4), ("a", "b"))
    rows = [P("x")]
    # halo exchange
    save_case("halo_slice", lambda a: a[4:60] * 2, line, [normal(64, 4)], rows, P("x"))
    save_case("halo_pad", lambda a: jnp.pad(a, ((4, 4), (0, 0)), constant_values=1.5),
              line, [normal(64, 4)], rows, P("x"))
    save_case("halo_reduce_window", lambda a: jax.lax.reduce_window(
        a, 0.0, jax.lax.add, (3, 1), (1, 1), "SAME"), line, [normal(64, 4)], rows, P("x"))
    save_case("halo_stencil", lambda a: jax.lax.reduce_window(
        a[1:] - a[:-1], -jnp.inf, jax.lax.max, (4, 1), (2, 1), "VALID"),
        line, [normal(64, 4)], rows)
    save_case("halo_conv1d", lambda a, w: jax.lax.conv_general_dilated(a, w, (1,), "SAME"),
              line, [normal(2, 3, 64), normal(4, 3, 3)], [P(None, None, "x"), P()],
              P(None, None, "x"))
    # reshapes splitting / merging a cut dim
    save_case("reshape_split", lambda a: jnp.tanh(a.reshape(8, 8)), line, [normal(64)],
              rows, P("x"))
    save_case("reshape_merge", lambda a: jnp.tanh(a.reshape(64)), line, [normal(8, 8)],
              rows, P("x"))
    save_case("reshape_split_minor", lambda a: jnp.tanh(a.reshape(8, 4, 16)), grid,
              [normal(8, 64)], [P(None, "a")], P(None, "a"))
    # 2-D mesh reshards by collective-permute
    save_case("mesh2d_device_order", lambda a: a * 2, grid, [normal(16, 8)],
              [P(("a", "b"))], P(("b", "a")))
    save_case("mesh2d_axis_move", lambda a: a * 2, grid, [normal(8, 8)], [P("a")], P("b"))
    save_case("mesh2d_axes_swapped", lambda a: a * 2, grid, [normal(8, 8)], [P("a", "b")],
              P("b", "a"))
    # other ops along a cut dim kept cut: a concatenate moving its cut to
    # the columns (all-to-alls), a reverse (collective-permute), a one-row
    # update (none), interior padding and a dilated window (halo exchange),
    # a convolution over cut input features (all-reduce)
    save_case("move_concatenate", lambda a, b: jnp.concatenate([a, b]), line,
              [normal(32, 16), normal(32, 16)], rows * 2, P("x"))
    save_case("move_reverse", lambda a: a[::-1] * 2, line, [normal(64, 4)], rows, P("x"))
    save_case("move_update_row", lambda a, v, i: jax.lax.dynamic_update_slice(a, v, (i, 0)),
              line, [normal(64, 4), normal(1, 4), np.int32(37)], [P("x"), P(), P()], P("x"))
    save_case("halo_interior_pad", lambda a: jax.lax.pad(a, 0.5, ((0, 1, 1), (0, 0, 0))),
              line, [normal(64, 4)], rows, P("x"))
    save_case("halo_dilated_window", lambda a: jax.lax.reduce_window(
        a, 0.0, jax.lax.add, (3, 1), (1, 1), ((2, 2), (0, 0)), window_dilation=(2, 1)),
        line, [normal(64, 4)], rows, P("x"))
    save_case("conv_feature_cut", lambda a, w: jax.lax.conv_general_dilated(
        a, w, (1,), "SAME"), line, [normal(2, 16, 10), normal(4, 16, 3)], [P(None, "x"), P()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
