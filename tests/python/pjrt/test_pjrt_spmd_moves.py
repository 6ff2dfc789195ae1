"""jax.jit on a mesh of 4 xla_gpu devices (the cpu target) of programs with
ops along a cut dim that the partitioner keeps cut as XLA's does: a
concatenate moving its cut to the columns (all-to-alls), a reverse
(collective-permute), a one-row dynamic-update-slice (no collective),
interior padding (none), a dilated window (halo exchange), a convolution
over cut input features (all-reduce), a transposed convolution along a
cut length (halo exchange), a convolution over the kernel's cut output
features (none), a window over a dilated base (halo exchange), a reverse
and a concatenate of rows cut unevenly (collective-permutes, all-to-alls),
a window reaching two devices away (collective-permutes) and a depthwise
convolution over cut groups (none);
compiled and run by xla_gpu without a fall-back, against jax's cpu backend
on as many host devices."""

from __future__ import annotations

import pytest

from test_pjrt import run_jax

pytest.importorskip("jax")

# name -> the collectives its partitioned program uses
KINDS = {
    "concatenate": ["all-to-all"],
    "reverse": ["collective-permute"],
    "update row": [],
    "interior pad": [],
    "dilated window": ["collective-permute"],
    "conv features": ["all-reduce"],
    "conv transpose": ["collective-permute"],
    # (before these, each gathered its operand: an all-gather)
    "conv out features": [],
    "base dilated window": ["collective-permute"],
    # (rows cut unevenly inside by sharding constraints)
    "uneven reverse": ["all-reduce", "collective-permute"],
    "uneven concatenate": ["all-to-all"],
    # a window of 9 over chunks of 3 rows: halos from two devices each side
    "wide window": ["collective-permute"],
    # a depthwise convolution over cut groups: each device its own
    "depthwise conv": [],
}


def test_ops_along_cut_dims_match_jax_cpu():
    out = run_jax("""
        import warnings
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.hlo.passes.spmd import SpmdFallbackWarning
        from xla_gpu.pjrt import _plugin
        warnings.simplefilter("error", SpmdFallbackWarning)
        res = {}
        rng = np.random.default_rng(0)

        def normal(*shape):
            return rng.standard_normal(shape).astype(np.float32)

        def both(name, f, specs, out_spec, *args, inside=False):
            # inside: f(mesh) is the function (it cuts values by sharding
            # constraints on the mesh: jax places only even chunks)
            outs = []
            for platform in ("xla_gpu", "cpu"):
                mesh = Mesh(np.array(jax.devices(platform)), ("x",))
                placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
                g = f(mesh) if inside else f
                jitted = jax.jit(g) if out_spec is None else \\
                    jax.jit(g, out_shardings=NamedSharding(mesh, out_spec))
                if platform == "xla_gpu":
                    text = jitted.lower(*placed).compile().as_text()
                    res[name + " kinds"] = sorted(
                        {k for k in ("collective-permute", "all-gather", "all-to-all",
                                     "all-reduce", "reduce-scatter")
                         if f" {k}(" in text or f" {k}-start(" in text})
                outs.append([np.asarray(o) for o in jax.tree.leaves(jitted(*placed))])
            res[name] = all(np.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(*outs))

        rows = P("x")
        both("concatenate", lambda a, b: jnp.concatenate([a, b]) * 2, [rows, rows], rows,
             normal(16, 8), normal(8, 8))
        both("reverse", lambda a: a[::-1] * 2, [rows], None, normal(32, 4))
        # (offsets inside the array: XLA's partitioned program drops an update
        # past the end where the op clamps it, so jax's cpu result would
        # differ; test_spmd_moves.py checks the clamp against one device)
        for i in (0, 13, 31):
            both(f"update row {i}", lambda a, v, i: jax.lax.dynamic_update_slice(
                a, v, (i, 0)), [rows, P(), P()], rows, normal(32, 4), normal(1, 4),
                np.int32(i))
        both("interior pad", lambda a: jax.lax.pad(a, 0.5, ((0, 1, 1), (0, 0, 0))),
             [rows], rows, normal(32, 4))
        both("dilated window", lambda a: jax.lax.reduce_window(
            a, 0.0, jax.lax.add, (3, 1), (1, 1), ((2, 2), (0, 0)), window_dilation=(2, 1)),
            [rows], rows, normal(32, 4))
        both("conv features", lambda a, w: jax.lax.conv_general_dilated(a, w, (1,), "SAME"),
             [P(None, "x"), P()], None, normal(2, 8, 10), normal(4, 8, 3))
        both("conv transpose", lambda a, w: jax.lax.conv_general_dilated(
            a, w, (1,), ((1, 2),), lhs_dilation=(2,)), [P(None, None, "x"), P()],
            P(None, None, "x"), normal(2, 3, 32), normal(4, 3, 3))
        both("conv out features", lambda a, w: jax.lax.conv_general_dilated(a, w, (1,), "SAME"),
             [P(), P("x")], None, normal(2, 3, 10), normal(8, 3, 3))
        both("base dilated window", lambda a: jax.lax.reduce_window(
            a, 0.0, jax.lax.add, (3, 1), (1, 1), ((1, 2), (0, 0)), base_dilation=(2, 1)),
            [rows], rows, normal(32, 4))

        def cut(mesh, v):
            return jax.lax.with_sharding_constraint(v, NamedSharding(mesh, rows))
        # (summed over the rows with weights, the row order shows; an
        # uneven result would be returned whole)
        weights = np.arange(10, dtype=np.float32)[:, None]
        both("uneven reverse", lambda mesh: lambda a: (
            cut(mesh, jnp.exp(cut(mesh, a))[::-1]) * weights).sum(0),
             [P()], None, normal(10, 4), inside=True)
        both("uneven concatenate", lambda mesh: lambda a, b: cut(mesh, jnp.concatenate(
            [jnp.exp(cut(mesh, a)), jnp.exp(cut(mesh, b))])) * 2, [P(), P()], None,
             normal(10, 8), normal(6, 8), inside=True)
        both("wide window", lambda a: jax.lax.reduce_window(
            a, 0.0, jax.lax.add, (9, 1), (1, 1), ((4, 4), (0, 0))), [rows], rows,
            normal(12, 4))
        both("depthwise conv", lambda a, w: jax.lax.conv_general_dilated(
            a, w, (1,), "SAME", feature_group_count=8), [P(None, "x"), P("x")],
            P(None, "x"), normal(2, 8, 10), normal(8, 1, 3))
        res["counts"] = dict(_plugin.partitioner_counts)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={
        "XLA_GPU_NUM_DEVICES": "4",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    names = [n for n in KINDS if n != "update row"] + \
        [f"update row {i}" for i in (0, 13, 31)]
    for name in names:
        assert out[name] is True, (name, out)
        kinds = KINDS["update row" if name.startswith("update row") else name]
        assert out[name + " kinds"] == kinds, (name, out)
    assert out["counts"] == {"xla_gpu": len(names), "xla": 0}, out
