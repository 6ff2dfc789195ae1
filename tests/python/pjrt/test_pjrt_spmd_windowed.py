"""jax.jit on a mesh of 4 xla_gpu devices (the cpu target) of programs
whose ops read along a cut dim (halo exchange: slice, pad, reduce-window, a
1-D convolution), reshapes splitting / merging a cut dim and 2-D mesh
reshards by collective-permute, partitioned by xla_gpu's partitioner
without a fall-back, against jax's cpu backend on as many host devices."""

from __future__ import annotations

import pytest

from test_pjrt import run_jax

pytest.importorskip("jax")


def test_windowed_reshaped_and_permuted_programs_match_jax_cpu():
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

        def both(name, f, shape, axes, specs, out_spec, *args):
            outs = []
            for platform in ("xla_gpu", "cpu"):
                mesh = Mesh(np.array(jax.devices(platform)).reshape(shape), axes)
                placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
                jitted = jax.jit(f, out_shardings=NamedSharding(mesh, out_spec))
                if platform == "xla_gpu":
                    # the partitioned program's collectives (ours: its text)
                    text = jitted.lower(*placed).compile().as_text()
                    res[name + " kinds"] = sorted(
                        {k for k in ("collective-permute", "all-gather", "all-to-all",
                                     "all-reduce") if f" {k}(" in text or f" {k}-start(" in text})
                outs.append([np.asarray(o) for o in jax.tree.leaves(jitted(*placed))])
            res[name] = all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(*outs))

        line, grid = ((4,), ("x",)), ((2, 2), ("a", "b"))
        both("slice", lambda a: a[2:30] * 2, *line, [P("x")], P("x"), normal(32, 4))
        both("pad", lambda a: jnp.pad(a, ((2, 2), (0, 0)), constant_values=1.5), *line,
             [P("x")], P("x"), normal(32, 4))
        both("reduce-window", lambda a: jax.lax.reduce_window(
            a, 0.0, jax.lax.add, (3, 1), (1, 1), "SAME"), *line, [P("x")], P("x"),
             normal(32, 4))
        both("conv1d", lambda a, w: jax.lax.conv_general_dilated(a, w, (1,), "SAME"), *line,
             [P(None, None, "x"), P()], P(None, None, "x"), normal(2, 3, 32), normal(4, 3, 3))
        both("reshape", lambda a: jnp.tanh(a.reshape(4, 8)).reshape(32), *line, [P("x")],
             P("x"), normal(32))
        both("device order", lambda a: a * 2, *grid, [P(("a", "b"))], P(("b", "a")),
             normal(8, 4))
        both("axes swapped", lambda a: a * 2, *grid, [P("a", "b")], P("b", "a"), normal(8, 8))
        res["counts"] = dict(_plugin.partitioner_counts)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={
        "XLA_GPU_NUM_DEVICES": "4",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    for name in ("slice", "pad", "reduce-window", "conv1d", "reshape", "device order",
                 "axes swapped"):
        assert out[name] is True, (name, out)
    assert out["counts"] == {"xla_gpu": 7, "xla": 0}, out
    for name in ("slice", "pad", "reduce-window", "conv1d", "device order", "axes swapped"):
        assert out[name + " kinds"] == ["collective-permute"], (name, out)
    assert out["reshape kinds"] == [], out
