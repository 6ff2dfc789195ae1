"""Memory kinds through the plugin: each device has its own memory
("device", the default) and the host's ("pinned_host"), as XLA:GPU's
client does. Arrays are put in either, moved between them, and a program's
parameters and results live where jax's shardings say (the compiled
program states host ones in memory space 5, as XLA prints them).
Another kind is refused by jax, naming the kinds there are."""

from __future__ import annotations

import pytest

from test_pjrt import run_jax

pytest.importorskip("jax")


def test_each_device_has_its_memory_and_the_hosts():
    out = run_jax("""
        res = {}
        d0, d1 = jax.devices()[:2]
        res["memories"] = [[m.kind for m in d.addressable_memories()] for d in (d0, d1)]
        res["default"] = d0.default_memory().kind
        names = [str(m) for d in jax.devices() for m in d.addressable_memories()]
        res["distinct"] = len(set(names)) == len(names) == 4
        try:
            jax.device_put(np.ones(2), jax.sharding.SingleDeviceSharding(
                d0, memory_kind="unpinned_host"))
            res["unpinned"] = "accepted"
        except Exception as exc:
            res["unpinned"] = str(exc)
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "2"})
    assert out["memories"] == [["device", "pinned_host"]] * 2, out
    assert out["default"] == "device"
    assert out["distinct"] is True
    assert "pinned_host" in out["unpinned"] and "unpinned_host" in out["unpinned"], out


def test_arrays_move_between_memories_and_devices():
    out = run_jax("""
        from jax.sharding import SingleDeviceSharding as S
        d0, d1 = jax.devices()[:2]
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        host = jax.device_put(x, S(d0, memory_kind="pinned_host"))
        back = jax.device_put(host, S(d0, memory_kind="device"))
        other = jax.device_put(host, S(d1, memory_kind="pinned_host"))   # another device
        again = jax.device_put(back, S(d0, memory_kind="pinned_host"))
        res = {
            "kinds": [a.sharding.memory_kind for a in (host, back, other, again)],
            "values": all(np.array_equal(np.asarray(a), x) for a in (host, back, other, again)),
            "other device": other.devices() == {d1},
            "independent": None,
        }
        back.delete()
        res["independent"] = np.array_equal(np.asarray(host), x)
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "2"})
    assert out["kinds"] == ["pinned_host", "device", "pinned_host", "pinned_host"], out
    assert out["values"] is True and out["other device"] is True
    assert out["independent"] is True


def test_parameters_and_results_live_where_the_shardings_say():
    out = run_jax("""
        from jax.sharding import SingleDeviceSharding as S
        d = jax.devices()[0]
        host, dev = S(d, memory_kind="pinned_host"), S(d, memory_kind="device")

        def f(x, y):
            z = jax.device_put(x, dev) * 2 + y
            return jax.device_put(z, host), z

        x = jax.device_put(np.ones(4, np.float32), host)
        y = jnp.arange(4, dtype=jnp.float32)
        compiled = jax.jit(f, in_shardings=(host, dev),
                           out_shardings=(host, dev)).lower(x, y).compile()
        a, b = compiled(x, y)
        header = compiled.as_text().split("\\n", 1)[0]
        res = {"kinds": [a.sharding.memory_kind, b.sharding.memory_kind],
               "values": [np.asarray(a).tolist(), np.asarray(b).tolist()],
               "header": header,
               "out kinds": [s.memory_kind for s in compiled.output_shardings]}
        # A result in host memory feeds the next call (jax moves nothing).
        step = jax.jit(lambda v: v + 1, out_shardings=host)
        c = step(step(a))
        res["chained"] = [c.sharding.memory_kind, np.asarray(c).tolist()]
        print(json.dumps(res))
    """)
    assert out["kinds"] == ["pinned_host", "device"], out
    assert out["out kinds"] == ["pinned_host", "device"], out
    assert out["values"] == [[2.0, 3.0, 4.0, 5.0]] * 2
    assert "entry_computation_layout={(f32[4]{0:S(5)}, f32[4]{0})->" \
        "(f32[4]{0:S(5)}, f32[4]{0})}" in out["header"], out["header"]
    assert out["chained"] == ["pinned_host", [4.0, 5.0, 6.0, 7.0]]


def test_sharded_parameter_streaming_and_a_scan_over_host_memory():
    out = run_jax("""
        from jax.sharding import NamedSharding, PartitionSpec as P
        Auto = jax.sharding.AxisType.Auto
        mesh = jax.make_mesh((2, 2), ("x", "y"), axis_types=(Auto, Auto))
        host = NamedSharding(mesh, P("x", "y"), memory_kind="pinned_host")
        dev = host.with_memory_kind("device")
        x = np.arange(32, dtype=np.float32).reshape(8, 4)
        a = jax.device_put(x, host)
        b = jax.device_put(x, dev)

        @jax.jit
        def f(a, b):
            return jax.device_put(jax.device_put(a, dev) * b, host), b * 2

        p, q = f(a, b)
        res = {"kinds": [p.sharding.memory_kind, q.sharding.memory_kind],
               "specs": [str(p.sharding.spec), str(q.sharding.spec)],
               "values": [np.array_equal(np.asarray(p), x * x),
                          np.array_equal(np.asarray(q), 2 * x)],
               "shard kinds": sorted({s.data.sharding.memory_kind
                                      for s in p.addressable_shards})}
        # A scan reading its steps from host memory: the stacked result is
        # cut as each step is (dim 2 over z), as XLA's propagation gives it.
        mesh3 = jax.make_mesh((1, 1, 2), ("x", "y", "z"), axis_types=(Auto,) * 3)
        xs = np.arange(2 * 4 * 6, dtype=np.float32).reshape(2, 4, 6)
        hs = jax.device_put(xs, NamedSharding(mesh3, P("x", "y", "z"),
                                              memory_kind="pinned_host"))

        @jax.jit
        def g(xs):
            def body(carry, x):
                return carry, jax.device_put(x, jax.memory.Space.Device) + carry
            return jax.lax.scan(body, 1.0, xs)

        _, ys = g(hs)
        res["scan"] = [np.array_equal(np.asarray(ys), xs + 1), str(ys.sharding.spec),
                       ys.sharding.memory_kind]
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "4"})
    assert out["kinds"] == ["pinned_host", "device"], out
    assert out["values"] == [True, True]
    assert out["specs"][0] in ("P('x', 'y')", "PartitionSpec('x', 'y')"), out
    assert out["shard kinds"] == ["pinned_host"]
    assert out["scan"][0] is True and out["scan"][2] == "device", out
    assert out["scan"][1] in ("P(None, None, 'z')", "PartitionSpec(None, None, 'z')"), out


def test_a_serialized_executable_keeps_its_memory_kinds():
    out = run_jax("""
        from jax.experimental.serialize_executable import serialize, deserialize_and_load
        from jax.sharding import SingleDeviceSharding as S
        d = jax.devices()[0]
        host = S(d, memory_kind="pinned_host")
        f = jax.jit(lambda v: v * 3, out_shardings=host)
        compiled = f.lower(jnp.ones(3, jnp.float32)).compile()
        blob, i, o = serialize(compiled)
        loaded = deserialize_and_load(blob, i, o, backend="xla_gpu")
        r = loaded(jnp.ones(3, jnp.float32))
        print(json.dumps({"kind": r.sharding.memory_kind, "value": np.asarray(r).tolist()}))
    """)
    assert out == {"kind": "pinned_host", "value": [3.0, 3.0, 3.0]}, out
