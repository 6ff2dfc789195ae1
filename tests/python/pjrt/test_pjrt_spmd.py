"""jax.jit of sharded programs on a mesh of xla_gpu devices, partitioned by
xla_gpu's own SPMD partitioner (jaxlib's only where ours refuses), against
jax's cpu backend on as many host devices."""

from __future__ import annotations

import numpy as np
import pytest

from test_pjrt import run_jax

pytest.importorskip("jax")


def test_named_sharding_programs_use_our_partitioner():
    out = run_jax("""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.pjrt import _plugin
        res = {}
        rng = np.random.default_rng(0)

        def normal(*shape):
            return rng.standard_normal(shape).astype(np.float32)

        def both(name, make, specs, out_spec, *args):
            outs = []
            for platform in ("xla_gpu", "cpu"):
                mesh = Mesh(np.array(jax.devices(platform)), ("x",))
                placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
                f = make(mesh)
                jitted = jax.jit(f) if out_spec is None else \\
                    jax.jit(f, out_shardings=NamedSharding(mesh, out_spec))
                got = jitted(*placed)
                outs.append([np.asarray(o) for o in jax.tree.leaves(got)])
                if platform == "xla_gpu":
                    res[name + " specs"] = [list(o.sharding.spec) for o in jax.tree.leaves(got)]
            res[name] = all(np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(*outs))

        both("megatron", lambda mesh: lambda x, w1, w2: jax.nn.gelu(x @ w1) @ w2,
             [P(), P(None, "x"), P("x", None)], P(), normal(4, 8), normal(8, 16), normal(16, 8))
        both("fsdp", lambda mesh: lambda w1, w2, x: jnp.tanh(x @ w1) @ w2, [P("x", None)] * 3,
             P("x", None), normal(8, 16), normal(16, 8), normal(16, 8))
        both("softmax", lambda mesh: lambda x: (jax.nn.softmax(x, axis=1), jnp.sum(x, axis=1)),
             [P(None, "x")], None, normal(4, 16))
        both("psum", lambda mesh: jax.shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh,
                                                in_specs=(P("x"),), out_specs=P()),
             [P("x")], None, normal(8, 4))
        res["counts"] = dict(_plugin.partitioner_counts)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={
        "XLA_GPU_NUM_DEVICES": "4",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    for name in ("megatron", "fsdp", "softmax", "psum"):
        assert out[name] is True, (name, out)
    assert out["fsdp specs"] == [["x", None]]
    assert out["counts"] == {"xla_gpu": 4, "xla": 0}, out


def test_shard_map_over_some_axes_pmap_and_refusals():
    """A shard_map manual over one of two mesh axes runs through ours (the
    body is whole along the other), as does pmap; a program ours refuses
    (GSPMD's partly manual sharding) is left to XLA's partitioner."""
    out = run_jax("""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.pjrt import _plugin
        res = {}
        mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
        f = jax.shard_map(lambda v: jax.lax.psum(v, "a"), mesh=mesh, in_specs=(P("a"),),
                          out_specs=P(), axis_names={"a"})
        x = np.arange(16, dtype=np.float32).reshape(4, 4)
        got = jax.jit(f)(jax.device_put(x, NamedSharding(mesh, P("a"))))
        res["partial"] = bool(np.allclose(np.asarray(got), x[:2] + x[2:]))
        res["after partial"] = dict(_plugin.partitioner_counts)
        y = np.arange(8, dtype=np.float32).reshape(4, 2)
        got = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(y)
        res["pmap"] = bool(np.allclose(np.asarray(got), np.broadcast_to(y.sum(0), (4, 2))))
        res["counts"] = dict(_plugin.partitioner_counts)
        import jaxlib._hlo as hlo
        from jax._src.lib import xla_client
        manual = "sharding={devices=[2,1,4]<=[8] last_tile_dims={manual}}"
        text = (f"HloModule m\\nENTRY e {{\\n  x = f32[8,4] parameter(0), {manual}\\n"
                f"  ROOT n = f32[8,4] negate(x), {manual}\\n}}")
        proto = hlo.hlo_module_from_text(text).as_serialized_hlo_module_proto()
        res["refused"] = _plugin._partition_ourselves(xla_client.XlaComputation(proto), 8) is None
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "4"})
    assert out["partial"] and out["pmap"], out
    assert out["after partial"] == {"xla_gpu": 1, "xla": 0}, out
    assert out["counts"] == {"xla_gpu": 2, "xla": 0}, out
    assert out["refused"] is True


def test_many_ops_on_sharded_values_match_jax_cpu():
    """Data movement, reductions, control flow, gathers / scatters, dots of
    every cut and 2-D meshes on 8 xla_gpu devices through our partitioner,
    each against jax's cpu backend on 8 host devices."""
    out = run_jax("""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.pjrt import _plugin
        res = {}
        rng = np.random.default_rng(0)

        def normal(*s):
            return rng.standard_normal(s).astype(np.float32)

        def both(name, f, specs, *args, shape=(8,), axes=("x",), out=None):
            outs = []
            try:
                for platform in ("xla_gpu", "cpu"):
                    mesh = Mesh(np.array(jax.devices(platform)).reshape(shape), axes)
                    placed = [jax.device_put(a, NamedSharding(mesh, s))
                              for a, s in zip(args, specs)]
                    j = jax.jit(f) if out is None else \\
                        jax.jit(f, out_shardings=NamedSharding(mesh, out))
                    got = j(*placed)
                    outs.append([np.asarray(o) for o in jax.tree.leaves(got)])
                res[name] = all(a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-4)
                                for a, b in zip(*outs))
            except Exception as e:
                res[name] = "ERR " + str(e)[:300]
        x = normal(16, 8)
        both("transpose", lambda a: a.T * 2, [P("x")], x)
        both("reshape_split", lambda a: a.reshape(16, 2, 4).sum(-1), [P("x")], x)
        both("reshape_merge", lambda a: a.reshape(128), [P("x")], x)
        both("reshape_cols", lambda a: a.reshape(8, 16), [P(None, "x")], x)
        both("concat", lambda a: jnp.concatenate([a, a * 2], axis=0), [P("x")], x)
        both("concat1", lambda a: jnp.concatenate([a, a * 2], axis=1), [P("x")], x)
        both("slice", lambda a: a[3:11, 1:5], [P("x")], x)
        both("pad", lambda a: jnp.pad(a, ((1, 2), (0, 3))), [P("x")], x)
        both("rev", lambda a: a[::-1], [P("x")], x)
        both("cumsum0", lambda a: jnp.cumsum(a, 0), [P("x")], x)
        both("argmax", lambda a: jnp.argmax(a, axis=0), [P("x")], x)
        both("argmax1", lambda a: jnp.argmax(a, axis=1), [P("x")], x)
        both("max_all", lambda a: jnp.max(a), [P("x")], x)
        both("mean", lambda a: jnp.mean(a, axis=0), [P("x")], x)
        both("sort", lambda a: jnp.sort(a, axis=0), [P("x")], x)
        both("take", lambda a, i: a[i], [P("x"), P()], x, np.array([3, 0, 15, 7], np.int32))
        both("embed", lambda t, i: t[i] * 2, [P(), P("x")], normal(10, 4),
             (np.arange(16, dtype=np.int32).reshape(8, 2) * 3) % 10)
        both("scatter", lambda a: a.at[2, 3].add(10.0), [P("x")], x)
        both("dyn_slice", lambda a, i: jax.lax.dynamic_slice(a, (i, 0), (4, 8)), [P("x"), P()],
             x, np.int32(5))
        both("dus", lambda a, i: jax.lax.dynamic_update_slice(a, jnp.ones((4, 8)), (i, 0)),
             [P("x"), P()], x, np.int32(5))
        both("where", lambda a: jnp.where(a > 0, a, 0.0), [P("x")], x)
        both("iota", lambda a: a + jnp.arange(16.0)[:, None], [P("x")], x)
        both("fori", lambda a: jax.lax.fori_loop(0, 3, lambda i, c: c * 1.5 + 1, a), [P("x")], x)
        both("cond", lambda a, p: jax.lax.cond(p > 0, lambda v: v * 2, lambda v: v - 1, a),
             [P("x"), P()], x, np.float32(1))
        both("einsum_batch", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), [P("x"), P("x")],
             normal(8, 4, 6), normal(8, 6, 3))
        both("einsum_mixed", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), [P("x"),
             P(None, None, "x")], normal(8, 4, 6), normal(8, 6, 16))
        both("dot_k_lhs_only", lambda a, b: a @ b, [P(None, "x"), P()], normal(4, 16),
             normal(16, 8))
        both("dot_k_rhs_only", lambda a, b: a @ b, [P(), P("x")], normal(4, 16), normal(16, 8))
        both("dot_mn", lambda a, b: a @ b, [P("x"), P(None, "x")], normal(16, 4), normal(4, 16))
        both("outer_sharded", lambda a, b: a @ b, [P("x"), P(None, "x")], normal(16, 4),
             normal(4, 16), out=P(None, "x"))
        both("mesh2d_ew", lambda a: jnp.sin(a) + a.T.T, [P("a", "b")], normal(8, 8),
             shape=(2, 4), axes=("a", "b"))
        both("mesh2d_dot", lambda a, b: a @ b, [P("a", "b"), P("b", None)], normal(8, 16),
             normal(16, 8), shape=(2, 4), axes=("a", "b"))
        both("mesh2d_dot2", lambda a, b: a @ b, [P("a", "b"), P("a", None)], normal(8, 16),
             normal(16, 8), shape=(2, 4), axes=("a", "b"))
        both("mesh2d_reshard", lambda a: a * 2, [P("a", "b")], normal(8, 8), shape=(2, 4),
             axes=("a", "b"), out=P("b", "a"))
        both("mesh2d_reduce", lambda a: a.sum(0), [P(("a", "b"))], normal(16, 8), shape=(2, 4),
             axes=("a", "b"))
        both("conv", lambda a, w: jax.lax.conv_general_dilated(a, w, (1,), "SAME"), [P("x"),
             P()], normal(8, 2, 10), normal(3, 2, 3))
        both("softmax_ce", lambda l, y: -jnp.mean(jnp.sum(jax.nn.log_softmax(l) * y, -1)),
             [P("x"), P("x")], normal(16, 5), normal(16, 5))
        both("grad_mlp", jax.grad(lambda w, a: jnp.sum(jnp.tanh(a @ w) ** 2)), [P(None, "x"),
             P("x")], normal(8, 16), normal(16, 8))
        both("bcast_in_dim", lambda a, b: a[:, None, :] * b[None, :, None], [P("x"), P("x")],
             normal(16, 8), normal(8))
        both("int_ops", lambda a: (a * 3) // 2 % 5, [P("x")],
             rng.integers(0, 100, (16, 8)).astype(np.int32))
        both("bool_reduce", lambda a: jnp.any(a > 1.0, axis=0), [P("x")], x)
        both("rng", lambda k: jax.random.normal(k, (16, 8)), [P()],
             jax.random.key_data(jax.random.key(0)))
        res["counts"] = dict(_plugin.partitioner_counts)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={
        "XLA_GPU_NUM_DEVICES": "8",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8"})
    counts = out.pop("counts")
    wrong = {name: value for name, value in out.items() if value is not True}
    assert not wrong, wrong
    assert len(out) == 42 and counts == {"xla_gpu": 42, "xla": 0}, counts


def test_empty_results_donation_and_constraints_in_shard_map_bodies():
    """Three things jax's shard_map tests do: a program of several devices
    with no results at all (jax forwards every output), donated sharded
    arguments (consumed on every device), and a sharding constraint along
    a mesh axis a shard_map leaves automatic (its result's placement as
    XLA gives it: XLA's partitioner makes that program)."""
    out = run_jax("""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.pjrt import _plugin
        res = {}
        mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("i", "j"))
        x = jax.device_put(np.arange(8, dtype=np.float32).reshape(4, 2),
                           NamedSharding(mesh, P("i")))

        def forward(v):
            out, _ = jax.lax.scan(lambda c, _: (c, None), v, None, length=1)
            return out

        got = jax.shard_map(forward, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)
        res["forwarded"] = np.asarray(got).tolist()
        donated = jax.device_put(np.ones((4, 2), np.float32), NamedSharding(mesh, P("i", "j")))
        doubled = jax.jit(lambda v: v * 2, donate_argnums=0)(donated)
        res["donated"] = [np.asarray(doubled).tolist(), donated.is_deleted()]
        cut = NamedSharding(mesh, P("i"))

        def body(v):
            return jax.lax.with_sharding_constraint(v * v, cut)

        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(), out_specs=P(),
                                  check_vma=False, axis_names=frozenset({"j"})))
        before = _plugin.partitioner_counts["xla"]
        got = f(x)
        res["partial"] = [np.asarray(got).tolist(), str(got.sharding.spec)]
        res["by xla"] = _plugin.partitioner_counts["xla"] - before
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "4"})
    x = [[2.0 * r, 2.0 * r + 1] for r in range(4)]
    assert out["forwarded"] == x
    assert out["donated"] == [[[2.0, 2.0]] * 4, True]
    assert out["partial"][0] == [[v * v for v in row] for row in x]
    assert out["partial"][1] in ("P('i',)", "PartitionSpec('i',)"), out
    assert out["by xla"] == 1, out


def test_inspect_array_sharding_reports_what_the_partitioner_chose():
    """jax.debug.inspect_array_sharding inside jit (the propagated sharding)
    and inside a shard_map (a manual value: an empty spec), called at
    compile time through jaxlib's callback, as XLA's partitioner calls it."""
    out = run_jax("""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.pjrt import _plugin
        seen = []
        mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
        x = jax.device_put(np.arange(16.0).reshape(4, 4), NamedSharding(mesh, P("a", "b")))

        def f(v):
            jax.debug.inspect_array_sharding(v * 2, callback=lambda s: seen.append(str(s.spec)))
            return v + 1

        got = jax.jit(f)(x)
        body = jax.jit(jax.shard_map(
            lambda v: (jax.debug.inspect_array_sharding(
                v, callback=lambda s: seen.append("manual " + str(s.spec))), v * 3)[1],
            mesh=mesh, in_specs=P("a"), out_specs=P("a")))(x)
        print(json.dumps({"seen": seen, "values": [np.asarray(got).tolist(),
                                                   np.asarray(body).tolist()],
                          "counts": dict(_plugin.partitioner_counts)}))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "4"})
    x = [[4.0 * r + c for c in range(4)] for r in range(4)]
    assert out["values"] == [[[v + 1 for v in row] for row in x],
                             [[v * 3 for v in row] for row in x]]
    assert [s.replace("PartitionSpec", "P") for s in out["seen"]] == \
        ["P('a', 'b')", "manual P()"], out
    assert out["counts"] == {"xla_gpu": 2, "xla": 0}, out


def test_custom_partitioning_goes_to_the_partitioner_that_calls_jax_back():
    """jax.experimental.custom_partitioning cuts a call by Python rules it
    registers with XLA's partitioner: such a program is left to XLA's (ours
    cannot call them), and it runs through the rule's per-shard body and
    collectives, as on jax's cpu backend."""
    out = run_jax("""
        from jax.experimental.custom_partitioning import custom_partitioning
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.pjrt import _plugin
        res = {}

        @custom_partitioning
        def row_sums(x):
            return jnp.sum(x, axis=1)

        calls = []

        def partition(mesh, arg_shapes, result_shape):
            calls.append(mesh.shape)
            spec = arg_shapes[0].sharding.spec
            # Each device sums its rows (plus a mark the default body lacks).
            return mesh, (lambda x: jnp.sum(x, axis=1) + 1000.0), \\
                NamedSharding(mesh, P(spec[0])), (NamedSharding(mesh, P(spec[0], None)),)

        def infer(mesh, arg_shapes, result_shape):
            return NamedSharding(mesh, P(arg_shapes[0].sharding.spec[0]))

        row_sums.def_partition(infer_sharding_from_operands=infer, partition=partition,
                               sharding_rule="i j -> i")
        x = np.arange(32, dtype=np.float32).reshape(8, 4)
        outs = {}
        for platform in ("xla_gpu", "cpu"):
            mesh = Mesh(np.array(jax.devices(platform)), ("x",))
            got = jax.jit(row_sums)(jax.device_put(x, NamedSharding(mesh, P("x", None))))
            outs[platform] = np.asarray(got).tolist()
            res[platform + " spec"] = list(got.sharding.spec)
        res["same"] = outs["xla_gpu"] == outs["cpu"]
        res["marked"] = outs["xla_gpu"] == (x.sum(1) + 1000.0).tolist()
        res["rule called"] = len(calls) >= 2
        res["counts"] = dict(_plugin.partitioner_counts)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={
        "XLA_GPU_NUM_DEVICES": "4",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert out["same"] and out["marked"] and out["rule called"], out
    assert out["xla_gpu spec"] == out["cpu spec"] == ["x"], out
    assert out["counts"] == {"xla_gpu": 0, "xla": 1}, out


def test_ragged_all_to_all_in_a_shard_map():
    """jax.lax.ragged_all_to_all (which jax's cpu backend cannot run)
    through the plugin, against jax's own description of it: rows
    operand[input_offsets[i]:][:send_sizes[i]] go to device i // (N/n),
    at that device's output_offsets as its sender states them."""
    out = run_jax("""
        from jax.sharding import Mesh, PartitionSpec as P
        n = 4
        mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
        rng = np.random.default_rng(3)
        sizes = rng.integers(0, 3, size=(n, n))       # sizes[s, d]: rows s sends d
        operand = rng.standard_normal((n, 8, 2)).astype(np.float32)
        io = np.zeros((n, n), np.int32); oo = np.zeros((n, n), np.int32)
        for s in range(n):
            io[s] = np.concatenate([[0], np.cumsum(sizes[s])[:-1]])
            for d in range(n):
                oo[s, d] = sizes[:s, d].sum()
        rs = sizes.T.copy()                              # rs[d, s] = sizes[s, d]
        want = np.full((n, 12, 2), -1.0, np.float32)
        for s in range(n):
            for d in range(n):
                k = sizes[s, d]
                want[d, oo[s, d]:oo[s, d] + k] = operand[s, io[s, d]:io[s, d] + k]
        f = jax.jit(jax.shard_map(
            lambda *a: jax.lax.ragged_all_to_all(*a, axis_name="x"), mesh=mesh,
            in_specs=(P("x"),) * 6, out_specs=P("x")))
        got = f(operand.reshape(n * 8, 2), np.full((n * 12, 2), -1.0, np.float32),
                io.reshape(-1), sizes.astype(np.int32).reshape(-1), oo.reshape(-1),
                rs.astype(np.int32).reshape(-1))
        print(json.dumps({"match": bool(np.array_equal(np.asarray(got), want.reshape(-1, 2))),
                          "moved": int(sizes.sum())}))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "4"})
    assert out["match"] is True and out["moved"] > 0, out


def test_as_text_of_a_program_with_an_async_collective():
    """jax's asynchronous all_gather (all-gather-start / -done in the
    per-device program): it runs, and `compiled.as_text()` reads the
    program back (jaxlib's importer refuses async pairs: it is shown
    the synchronous form)."""
    out = run_jax("""
        from jax._src.lax import parallel
        from jax.sharding import AxisType
        mesh = jax.make_mesh((2,), ("i",), axis_types=(AxisType.Explicit,))
        with jax.set_mesh(mesh):
            @jax.jit
            @jax.shard_map(out_specs=jax.P(None, reduced={"i"}))
            def f(x):
                return parallel.all_gather_start(x, "i", tiled=True, to="reduced").done()
            x = jnp.arange(16.0, out_sharding=jax.P("i"))
            got = np.asarray(f(x)).tolist()
            text = f.lower(x).compile().as_text()
        print(json.dumps({"got": got, "all-gather": "all-gather(" in text}))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "2"})
    assert out["got"] == [float(v) for v in range(16)] and out["all-gather"], out


def test_shard_alike_goes_to_xla_partitioner_and_keeps_the_group_together():
    """jax.experimental.shard_alike ties values into a sharding group, which
    XLA's partitioner (Shardy) settles: the result is cut as the argument."""
    out = run_jax("""
        from jax.experimental.shard_alike import shard_alike
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.pjrt import _plugin
        mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("x", "y"))
        s = NamedSharding(mesh, P("x", "y"))
        x = jax.device_put(np.arange(16).reshape(8, 2), s)
        out = jax.jit(lambda v: shard_alike(v, jnp.arange(16).reshape(8, 2) * 3)[1])(x)
        print(json.dumps({"spec": list(out.sharding.spec), "value": np.asarray(out).tolist(),
                          "counts": dict(_plugin.partitioner_counts)}))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "4"})
    assert out["spec"] == ["x", "y"], out
    assert out["value"] == (np.arange(16).reshape(8, 2) * 3).tolist()
    assert out["counts"] == {"xla_gpu": 0, "xla": 1}, out


def test_control_deps_schedule_an_fsdp_scan_as_on_jax_cpu():
    """jax.experimental.control_deps: `schedule` orders an async all-gather
    of the next weights before the product with these inside a scan (the
    gather's result is the next loop state, written while the old one is
    still read: a copy keeps it), and a plain schedule of three products;
    the values are jax cpu's."""
    out = run_jax("""
        from jax._src.lax import parallel
        from jax.experimental.control_deps import schedule
        res = {}
        for platform in ("xla_gpu", "cpu"):
            devices = jax.devices(platform)[:4]
            mesh = jax.sharding.Mesh(np.array(devices), ("i",),
                                     axis_types=(jax.sharding.AxisType.Explicit,))
            with jax.set_mesh(mesh):
                @jax.jit
                @jax.shard_map(out_specs=jax.P("i"), check_vma=False)
                def fsdp(x, ws):
                    w0 = jax.lax.all_gather(ws[0], "i", tiled=True)

                    def step(carry, w_shard):
                        w, x = carry
                        fut = parallel.all_gather_start(w_shard, "i", tiled=True)
                        y = x @ w
                        w_next = fut.done()
                        schedule([fut.x, y, w_next])
                        return (w_next, jnp.tanh(y)), None
                    (w, x), _ = jax.lax.scan(step, (w0, x), ws[1:])
                    return x @ w

                rng = np.random.default_rng(0)
                x = jax.device_put(rng.standard_normal((64, 256)).astype(np.float32),
                                   jax.NamedSharding(mesh, jax.P("i", None)))
                ws = jax.device_put(rng.standard_normal((3, 256, 256)).astype(np.float32) / 16,
                                    jax.NamedSharding(mesh, jax.P(None, "i", None)))
                res[platform] = np.asarray(fsdp(x, ws)).tolist()

            def three(a, b, c):
                p, q, r = jnp.sin(a @ a), jnp.cos(b @ b), jnp.exp(c @ c / 10)
                schedule([r, q, p])
                return p + q + r
            m = jax.device_put(rng.standard_normal((6, 6)).astype(np.float32), devices[0])
            res[platform + " three"] = np.asarray(jax.jit(three)(m, m + 1, m - 1)).tolist()
        res["fsdp close"] = bool(np.allclose(res["xla_gpu"], res["cpu"], rtol=1e-4, atol=1e-4))
        res["three close"] = bool(np.allclose(res["xla_gpu three"], res["cpu three"],
                                              rtol=1e-4, atol=1e-4))
        print(json.dumps({k: v for k, v in res.items() if "close" in k}))
    """, platforms="xla_gpu,cpu", extra_env={
        "XLA_GPU_NUM_DEVICES": "4", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert out == {"fsdp close": True, "three close": True}, out


def test_results_of_xla_partitioned_programs_have_a_placement():
    """A program ours leaves to XLA's partitioner (a Cholesky of a matrix
    cut by rows: jaxlib's LAPACK call) reports the shardings XLA chose,
    kept in XLA's module as it hands it over: the result is an ordinary
    array, the factor jax cpu computes."""
    out = run_jax("""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from xla_gpu.pjrt import _plugin
        mesh = Mesh(np.array(jax.devices()[:2]), ("i",))
        a = np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32)
        a = a @ a.T + 6 * np.eye(6, dtype=np.float32)
        got = jax.jit(jax.lax.linalg.cholesky)(jax.device_put(a, NamedSharding(mesh, P("i"))))
        print(json.dumps({"kind": type(got.sharding).__name__,
                          "close": bool(np.allclose(np.asarray(got), np.linalg.cholesky(a),
                                                    atol=1e-4)),
                          "counts": dict(_plugin.partitioner_counts)}))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "2"})
    assert out["kind"] == "NamedSharding" and out["close"], out
    assert out["counts"]["xla"] == 1, out
