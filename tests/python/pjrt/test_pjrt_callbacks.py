"""Python callbacks in jitted programs on xla_gpu's cpu target: jax's
pure_callback, io_callback (ordered: a token threads through the program),
jax.debug.print and jax.debug.callback, each against what the same program
gives on jax's cpu backend."""

from __future__ import annotations

import pytest

from test_pjrt import run_jax

pytest.importorskip("jax")

ENV = {"XLA_GPU_PJRT_TARGET": "cpu"}


def test_callbacks_run_in_jitted_programs_as_on_jax_cpu():
    out = run_jax("""
        from jax.experimental import io_callback
        res = {}
        for platform in ("xla_gpu", "cpu"):
            seen = []

            def f(x):
                jax.debug.callback(lambda s: seen.append(("debug", float(s))), x.sum())
                y = jax.pure_callback(lambda a: np.sin(a), jax.ShapeDtypeStruct(x.shape, x.dtype), x)
                two = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((), jnp.int32))
                z, n = jax.pure_callback(lambda a: (a * 2, np.int32(a.size)), two, x)
                io_callback(lambda a: seen.append(("io", float(a))), None, y[1], ordered=True)
                k = io_callback(lambda a: np.float32(a + 1), jax.ShapeDtypeStruct((), jnp.float32),
                                x[0], ordered=True)
                return y + z + n + k

            x = jax.device_put(np.arange(4, dtype=np.float32), jax.devices(platform)[0])
            got = jax.jit(f)(x)
            jax.effects_barrier()
            res[platform] = [np.asarray(got).tolist(), sorted(seen)]
        res["vmapped"] = np.asarray(jax.jit(jax.vmap(lambda v: jax.pure_callback(
            lambda a: a * 3, jax.ShapeDtypeStruct((), jnp.float32), v,
            vmap_method="sequential")))(jnp.arange(3.0, dtype=jnp.float32))).tolist()
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env=ENV)
    assert out["xla_gpu"] == out["cpu"], out
    values, seen = out["xla_gpu"]
    assert [round(v, 5) for v in values] == [round(float(__import__("math").sin(i)) + 2 * i + 4 + 1, 5)
                                             for i in range(4)]
    assert seen == [["debug", 6.0], ["io", pytest.approx(0.841471, abs=1e-6)]]
    assert out["vmapped"] == [0.0, 3.0, 6.0]


def test_debug_print_prints_and_a_failing_callback_names_itself():
    out = run_jax("""
        import contextlib, io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            jax.jit(lambda x: jax.debug.print("total {t}", t=x.sum()) or x * 2)(jnp.ones(3))
            jax.effects_barrier()
        res = {"printed": buf.getvalue()}
        from jax.experimental import checkify
        try:
            jax.jit(lambda v: checkify.debug_check(v > 0, "x must be positive") or v)(
                jnp.float32(-1))
            jax.effects_barrier()
            res["checked"] = "no error"
        except Exception as exc:
            res["checked"] = str(exc)

        def bad(a):
            raise ValueError("callback refused its input")

        try:
            jax.jit(lambda x: jax.pure_callback(bad, jax.ShapeDtypeStruct((), jnp.float32), x))(
                jnp.float32(1))
            res["error"] = None
        except Exception as exc:
            res["error"] = str(exc)
        try:
            jax.jit(lambda x: jax.pure_callback(lambda a: np.zeros(2, np.float32),
                                                jax.ShapeDtypeStruct((3,), jnp.float32), x))(
                jnp.float32(1))
            res["shape"] = None
        except Exception as exc:
            res["shape"] = str(exc)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env=ENV)
    assert out["printed"] == "total 3.0\n"
    assert out["checked"] == "no error", out   # lowered (a no-op outside checkify)
    assert "callback refused its input" in out["error"]
    assert "xla_gpu_python_callback" in out["error"]
    assert "result 0 has shape (2,), the program expects (3,)" in out["shape"]


def test_callbacks_in_sharded_programs_run_once_or_per_shard_as_on_jax_cpu():
    """On a mesh, jax places a callback on device 0 (it runs once, on the
    whole value) unless it sits in a shard_map (it runs on every device):
    the counts and values match jax's cpu on as many devices."""
    out = run_jax("""
        from jax.experimental import io_callback
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        res = {}
        for platform in ("xla_gpu", "cpu"):
            calls = []
            mesh = Mesh(np.array(jax.devices(platform)), ("x",))
            x = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("x")))

            def f(v):
                y = jax.pure_callback(lambda a: (calls.append("pure"), np.cos(a))[1],
                                      jax.ShapeDtypeStruct(v.shape, v.dtype), v)
                io_callback(lambda a: calls.append("io %.4f" % a), None, y.sum(), ordered=True)
                jax.debug.callback(lambda s: calls.append("debug %.1f" % s), v.sum())
                return y * 2

            got = jax.jit(f)(x)
            per_shard = jax.jit(jax.shard_map(
                lambda v: (jax.debug.callback(lambda s: calls.append("shard %.1f" % s), v.sum()),
                           v + 1)[1], mesh=mesh, in_specs=P("x"), out_specs=P("x")))(x)
            jax.effects_barrier()
            res[platform] = [np.asarray(got).round(5).tolist(), np.asarray(per_shard).tolist(),
                             sorted(calls)]
        from xla_gpu.pjrt import _plugin
        res["counts"] = dict(_plugin.partitioner_counts)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={
        **ENV, "XLA_GPU_NUM_DEVICES": "4",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert out["xla_gpu"] == out["cpu"], out
    calls = out["xla_gpu"][2]
    assert calls.count("pure") == 1 and calls.count("debug 28.0") == 1
    assert sorted(c for c in calls if c.startswith("shard")) == \
        ["shard 1.0", "shard 13.0", "shard 5.0", "shard 9.0"]
    assert out["counts"] == {"xla_gpu": 2, "xla": 0}, out


def test_buffer_callback_fills_results_in_place():
    """jax.experimental.buffer_callback on the cpu target: the callable gets
    read-only operand buffers and writeable result buffers (numpy and
    DLPack), an aliased result in the operand's memory (the caller's array
    untouched), pytrees of arguments, and a side effect that runs though
    nothing reads it; a callable that returns a value is an error."""
    out = run_jax("""
        from jax.experimental import buffer_callback as bc
        res = {}
        seen = {}

        def add(ctx, out, x, y, *, scale):
            seen["stage"] = str(ctx.stage)
            seen["flags"] = [x.writeable, out["sum"].writeable]
            seen["types"] = [str(out["sum"].dtype), list(out["sum"].shape)]
            np.asarray(out["sum"])[...] = (np.from_dlpack(x) + np.asarray(y)) * scale
            np.asarray(out["first"])[...] = np.asarray(x)[0]
        f = bc.buffer_callback(add, {"sum": jax.ShapeDtypeStruct((4,), jnp.float32),
                                     "first": jax.ShapeDtypeStruct((), jnp.float32)})
        got = jax.jit(lambda x, y: f(x, y, scale=2.0))(jnp.arange(4.0), jnp.ones(4))
        res["sum"] = np.asarray(got["sum"]).tolist()
        res["first"] = float(got["first"])
        res["seen"] = seen

        def bump(ctx, out, x):
            seen["same memory"] = np.asarray(out).ctypes.data == np.asarray(x).ctypes.data
            np.asarray(out)[1] += 10
        g = bc.buffer_callback(bump, jax.ShapeDtypeStruct((3,), jnp.int32),
                               input_output_aliases={0: 0})
        a = jnp.arange(3, dtype=jnp.int32)
        res["bumped"] = np.asarray(jax.jit(g)(a)).tolist()
        res["input kept"] = np.asarray(a).tolist()

        calls = []
        h = bc.buffer_callback(lambda ctx, out: calls.append(1),
                               jax.ShapeDtypeStruct((), jnp.float32), has_side_effect=True)
        jax.jit(lambda: (h(), 1.0)[1])()
        res["side effect"] = len(calls)
        try:
            jax.jit(bc.buffer_callback(lambda ctx, out: 1,
                                       jax.ShapeDtypeStruct((), jnp.float32)))()
            res["returns"] = "accepted"
        except Exception as e:
            res["returns"] = str(e)
        print(json.dumps(res))
    """)
    assert out["sum"] == [2.0, 4.0, 6.0, 8.0] and out["first"] == 0.0, out
    assert out["seen"]["stage"] == "ExecutionStage.EXECUTE", out
    assert out["seen"]["flags"] == [False, True], out
    assert out["seen"]["types"] == ["float32", [4]], out
    assert out["seen"]["same memory"] is True, out
    assert out["bumped"] == [0, 11, 2] and out["input kept"] == [0, 1, 2], out
    assert out["side effect"] == 1, out
    assert "must not return any values" in out["returns"], out


def test_ordered_io_callback_carries_the_loop_state():
    """An ordered io_callback computing a while loop's next state: the call
    (its token and value the new state) reads the old value while writing
    the new one, which gets a buffer of its own (it used to be refused:
    "the module needs a copy there")."""
    out = run_jax("""
        from jax import core, lax
        from jax.experimental import io_callback
        seen = []

        def step(x):
            seen.append(float(x))
            return (x + 1.0).astype(x.dtype)
        f = jax.jit(lambda x: lax.while_loop(
            lambda v: v < 5, lambda v: io_callback(step, core.ShapedArray((), v.dtype), v,
                                                   ordered=True), x))
        got = float(f(0.0))
        jax.effects_barrier()
        print(json.dumps({"got": got, "seen": seen}))
    """, platforms="xla_gpu,cpu")
    assert out == {"got": 5.0, "seen": [0.0, 1.0, 2.0, 3.0, 4.0]}, out
