"""Makes the SPMD test cases of tests/python/hlo/test_collectives_reference.py:
small sharded jax programs, the per-device HLO XLA's SPMD partitioner made
of each, and each device's input and output shards.

    JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 \
        python tests/python/data/spmd/make_spmd_cases.py

(the script sets both itself when they are unset). Run by hand, with the
jax version the files were made with (recorded in each .npz as
`jax_version`); the tests only read what it wrote:

    <case>.partitioned.hlo   jit(f).lower(*args).compile().as_text(): the
                             program every device runs
    <case>.pre.hlo           jit(f).lower(*args).as_text(dialect="hlo"): the
                             program with its sharding annotations
    <case>.npz               num_replicas, num_partitions, the global inputs
                             and outputs (in_<i>, out_<i>) and each device's
                             shards (in_<i>_dev<d>, out_<i>_dev<d>; device d
                             is partition d of the executable)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(20240611)


def normal(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mesh1d():
    return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


def mesh2d():
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def save_case(name, f, mesh, args, in_specs, out_specs=None):
    """Compiles jit(f) with the given shardings and writes the case's files."""
    in_shardings = tuple(NamedSharding(mesh, s) for s in in_specs)
    out_shardings = None if out_specs is None else \
        tuple(NamedSharding(mesh, s) for s in out_specs)
    if out_shardings is not None and len(out_shardings) == 1:
        out_shardings = out_shardings[0]    # f returns one array
    jitted = jax.jit(f, in_shardings=in_shardings, out_shardings=out_shardings)
    placed = [jax.device_put(a, s) for a, s in zip(args, in_shardings)]
    lowered = jitted.lower(*placed)
    compiled = lowered.compile()
    outs = jitted(*placed)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    # Partition p of the executable runs on the mesh's p-th device.
    devices = list(mesh.devices.flat)
    data = {"num_replicas": np.int64(1), "num_partitions": np.int64(len(devices)),
            "jax_version": np.array(jax.__version__)}
    for kind, values in (("in", placed), ("out", outs)):
        for i, value in enumerate(values):
            data[f"{kind}_{i}"] = np.asarray(value)
            by_device = {s.device: np.asarray(s.data) for s in value.addressable_shards}
            for d, device in enumerate(devices):
                data[f"{kind}_{i}_dev{d}"] = by_device[device]
    (HERE / f"{name}.partitioned.hlo").write_text(compiled.as_text())
    (HERE / f"{name}.pre.hlo").write_text(lowered.as_text(dialect="hlo"))
    np.savez_compressed(HERE / f"{name}.npz", **data)
    print(f"{name}: {len(placed)} inputs, {len(outs)} outputs")


def shard_mapped(name, body, mesh, args, in_specs, out_specs, check_vma=True):
    f = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                      check_vma=check_vma)
    save_case(name, f, mesh, args, in_specs, None)


# ------------------------------------------------------------- the programs

def mlp(params, x):
    w1, b1, w2, b2 = params
    h = jnp.tanh(x @ w1 + b1)
    return h @ w2 + b2


def dp_mlp_step():
    """Data parallel: the batch sharded, the parameters replicated; the
    gradients are summed across devices."""
    def step(w1, b1, w2, b2, x, y):
        def loss(params):
            return jnp.mean((mlp(params, x) - y) ** 2)
        value, grads = jax.value_and_grad(loss)((w1, b1, w2, b2))
        new = tuple(p - 0.1 * g for p, g in zip((w1, b1, w2, b2), grads))
        return (*new, value)
    args = [normal(4, 8, scale=0.5), normal(8, scale=0.1), normal(8, 2, scale=0.5),
            normal(2, scale=0.1), normal(16, 4), normal(16, 2)]
    rep = P()
    save_case("dp_mlp_step", step, mesh1d(), args,
              [rep, rep, rep, rep, P("x", None), P("x", None)])


def fsdp_mlp():
    """FSDP: the parameters sharded along their first dimension, the batch
    too; every layer all-gathers its weights."""
    def forward(w1, w2, x):
        return jnp.tanh(x @ w1) @ w2
    args = [normal(8, 16, scale=0.5), normal(16, 8, scale=0.5), normal(16, 8)]
    save_case("fsdp_mlp", forward, mesh1d(), args,
              [P("x", None), P("x", None), P("x", None)], [P("x", None)])


def megatron_mlp():
    """Megatron: the first matmul's weight split by columns, the second's by
    rows; the partial results are summed."""
    def forward(x, w1, w2):
        return jax.nn.gelu(x @ w1) @ w2
    args = [normal(4, 8), normal(8, 16, scale=0.5), normal(16, 8, scale=0.5)]
    save_case("megatron_mlp", forward, mesh1d(), args,
              [P(), P(None, "x"), P("x", None)], [P()])


def mesh2d_mlp():
    """A 2x4 mesh: the batch over 'data', the hidden dimension over 'model'."""
    def forward(x, w1, w2):
        return jax.nn.relu(x @ w1) @ w2
    args = [normal(4, 8), normal(8, 16, scale=0.5), normal(16, 8, scale=0.5)]
    save_case("mesh2d_mlp", forward, mesh2d(), args,
              [P("data", None), P(None, "model"), P("model", None)], [P("data", None)])


def permuted_mesh():
    """A 2x4 mesh over the devices in a shuffled order, an array sharded over
    both axes (b major): XLA's replica groups name the mesh's device order
    (device_ids=...); the second output is resharded from rows to columns."""
    devices = np.array(jax.devices())[[3, 1, 0, 2, 7, 5, 6, 4]].reshape(2, 4)
    mesh = jax.sharding.Mesh(devices, ("a", "b"), axis_types=(AxisType.Auto,) * 2)

    def f(x):
        return jnp.sum(x, axis=0), x * 2
    save_case("permuted_mesh", f, mesh, [normal(16, 4)], [P(("b", "a"), None)],
              [P(), P(None, "b")])


def sharded_reductions():
    """A sum, a softmax and a cumsum along a sharded dimension."""
    def f(x):
        return jnp.sum(x, axis=1), jax.nn.softmax(x, axis=1), jnp.cumsum(x, axis=1)
    save_case("sharded_reductions", f, mesh1d(), [normal(4, 16)], [P(None, "x")],
              [P(), P(None, "x"), P(None, "x")])


def collectives():
    """Every collective through shard_map on the 1-D mesh of 8."""
    m = mesh1d()
    x = normal(16, 4)
    xi = rng.integers(-100, 100, (16, 4)).astype(np.int32)
    shard_mapped("psum", lambda a, b: (jax.lax.psum(a, "x"), jax.lax.psum(b, "x")), m,
                 [x, xi], (P("x"), P("x")), (P(), P()))
    shard_mapped("pmax", lambda a: jax.lax.pmax(a, "x"), m, [x], (P("x"),), P())
    shard_mapped("all_gather", lambda a: (jax.lax.all_gather(a, "x", tiled=True),
                                          jax.lax.all_gather(a, "x", axis=1)),
                 m, [x], (P("x"),), (P(None), P(None)), check_vma=False)
    shard_mapped("psum_scatter", lambda a: jax.lax.psum_scatter(a, "x", tiled=True), m,
                 [normal(64, 2)], (P("x"),), P("x"))
    shard_mapped("all_to_all",
                 lambda a, b: (jax.lax.all_to_all(a, "x", 0, 0, tiled=True),
                               jax.lax.all_to_all(b, "x", 1, 0, tiled=True)),
                 m, [normal(64, 3), rng.integers(0, 1000, (16, 16)).astype(np.int32)],
                 (P("x"), P("x")), (P("x"), P("x")))
    cycle = [(i, (i + 1) % 8) for i in range(8)]
    partial = [(0, 3), (3, 5), (5, 0), (6, 7)]
    shard_mapped("ppermute", lambda a: (jax.lax.ppermute(a, "x", cycle),
                                        jax.lax.ppermute(a, "x", partial)),
                 m, [x], (P("x"),), (P("x"), P("x")))
    shard_mapped("axis_index",
                 lambda a: a * jax.lax.axis_index("x").astype(jnp.float32)
                 + jax.lax.axis_index("x").astype(jnp.float32), m, [x], (P("x"),), P("x"))

    def loop(a):
        def body(i, c):
            return jax.lax.psum(c, "x") * 0.125 + c * 0.5 + i.astype(jnp.float32)
        return jax.lax.fori_loop(0, 3, body, a)
    shard_mapped("psum_in_loop", loop, m, [x], (P("x"),), P("x"))
    m2 = mesh2d()
    shard_mapped("mesh2d_collectives",
                 lambda a: (jax.lax.psum(a, "data"), jax.lax.psum(a, "model"),
                            jax.lax.all_gather(a, "model", tiled=True),
                            jax.lax.ppermute(a, "model", [(i, (i + 1) % 4) for i in range(4)])),
                 m2, [normal(8, 8)], (P("data", "model"),),
                 (P(None, "model"), P("data", None), P("data", None), P("data", "model")),
                 check_vma=False)


def main() -> int:
    if jax.device_count() < 8:
        print("needs 8 devices (XLA_FLAGS=--xla_force_host_platform_device_count=8)",
              file=sys.stderr)
        return 1
    for make in (dp_mlp_step, fsdp_mlp, megatron_mlp, mesh2d_mlp, permuted_mesh,
                 sharded_reductions, collectives):
        make()
    total = sum(p.stat().st_size for p in HERE.iterdir() if p.suffix in (".hlo", ".npz"))
    print(f"total {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
