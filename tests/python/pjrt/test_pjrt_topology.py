"""Compiling ahead of time through the plugin (jax.experimental.topologies):
a topology of xla_gpu devices with no client behind it, a compile for it
(PJRT_Compile), the executable serialized with its compiled program and
loaded on a client without compiling again; the cuda target compiled on a
machine with no GPU; the client's own topology; and the refusals."""

from __future__ import annotations

import json
import textwrap

import pytest

from test_pjrt import run_jax

pytest.importorskip("jax")

_PRELUDE = """
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental import topologies
from jax.experimental.serialize_executable import serialize, deserialize_and_load
import xla_gpu
from xla_gpu.pjrt import _plugin
res = {}

def compile_for(topo, rows):
    n = len(topo.devices)
    mesh = topologies.make_mesh(topo, (n,), ("x",))
    x = jax.ShapeDtypeStruct((rows, 4), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    return jax.jit(lambda v: jnp.tanh(v) @ jnp.ones((4, 3), jnp.float32) + v.sum()).lower(x).compile()
"""


def _run_aot(script: str, **kwargs) -> dict:
    return run_jax(_PRELUDE + textwrap.dedent(script), **kwargs)


def test_compile_for_a_topology_then_load_without_compiling():
    out = _run_aot("""
        for n in (1, 4):
            topo = topologies.get_topology_desc("cpu", platform="xla_gpu", num_devices=n)
            res[f"{n} kind"] = topo.devices[0].client.runtime_type
            res[f"{n} ids"] = [d.id for d in topo.devices]
            blob, in_tree, out_tree = serialize(compile_for(topo, 8))
            compiles = []
            real = xla_gpu.compile
            xla_gpu.compile = lambda *a, **k: compiles.append(1) or real(*a, **k)
            try:
                devices = jax.devices("xla_gpu")[:n]
                loaded = deserialize_and_load(blob, in_tree, out_tree, backend="xla_gpu",
                                              execution_devices=devices)
            finally:
                xla_gpu.compile = real
            res[f"{n} compiles at load"] = len(compiles)
            v = np.arange(32, dtype=np.float32).reshape(8, 4) / 7
            mesh = Mesh(np.array(devices), ("x",))
            got = loaded(jax.device_put(v, NamedSharding(mesh, P("x"))))
            want = np.tanh(v) @ np.ones((4, 3), np.float32) + v.sum()
            res[f"{n} matches"] = bool(np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-4))
            res[f"{n} spec"] = list(got.sharding.spec)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={"XLA_GPU_NUM_DEVICES": "4"})
    for n in (1, 4):
        assert out[f"{n} kind"] == "compile_only_runtime", out
        assert out[f"{n} ids"] == list(range(n)), out
        assert out[f"{n} compiles at load"] == 0, out
        assert out[f"{n} matches"] is True, out
    assert out["4 spec"] == ["x"], out


def test_cuda_target_compiled_without_a_gpu_and_refused_by_a_cpu_client():
    out = _run_aot("""
        topo = topologies.get_topology_desc("cuda:sm_90", platform="xla_gpu")
        res["kind"] = topo.devices[0].device_kind
        res["version"] = topo.devices[0].client.platform_version
        blob, in_tree, out_tree = serialize(compile_for(topo, 8))
        res["ptx for sm_90"] = b".target sm_90" in blob
        res["cubin"] = b"kernel.cubin" in blob
        try:
            deserialize_and_load(blob, in_tree, out_tree, backend="xla_gpu",
                                 execution_devices=jax.devices("xla_gpu")[:1])
            res["load"] = "loaded"
        except Exception as e:
            res["load"] = str(e)
        print(json.dumps(res))
    """, platforms="xla_gpu,cpu", extra_env={"XLA_GPU_PJRT_TARGET": "cpu"})
    assert out["kind"] == "xla_gpu cuda target (sm_90)", out
    assert "GPU target, sm_90" in out["version"] and "cuda" not in out["version"], out
    assert out["ptx for sm_90"] and out["cubin"], out
    assert "compiled for the cuda target (sm_90); this client runs the cpu target" in \
        out["load"], out


def test_client_topology():
    out = run_jax("""
        from jax._src.lib import xla_client as xc
        from jax.experimental import topologies
        client = jax.devices()[0].client
        topo = xc.get_topology_for_devices(jax.devices())
        res = {"same version": topo.platform_version == client.platform_version,
               "platform": topo.platform,
               "count": len(topo._make_compile_only_devices())}
        aot = topologies.get_topology_desc("", platform="xla_gpu")
        res["default count"] = len(aot.devices)
        res["aot version"] = aot.devices[0].client.platform_version
        res["client version"] = client.platform_version
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_NUM_DEVICES": "3", "XLA_GPU_PJRT_TARGET": "cpu"})
    assert out["same version"] and out["platform"] == "xla_gpu" and out["count"] == 3, out
    assert out["default count"] == 3, out
    assert out["aot version"] == out["client version"][:-1] + ", ahead of time)", out


def test_topology_refusals_and_damaged_executables():
    out = _run_aot("""
        def refusal(name, **options):
            try:
                topologies.get_topology_desc(name, platform="xla_gpu", **options)
                return "accepted"
            except Exception as e:
                return str(e)
        res["name"] = refusal("tpu")
        res["arch"] = refusal("cuda:ampere")
        res["cpu arch"] = refusal("cpu:sm_90")
        res["cuda count"] = refusal("cuda", num_devices=2)
        res["option"] = refusal("cpu", slices=2)
        res["shape"] = refusal("cpu", topology="2x?")
        res["disagree"] = refusal("cpu", topology="2x2", num_devices=3)
        res["zero"] = refusal("cpu", num_devices=0)
        res["shape ok"] = refusal("cpu", topology="1x2x2")
        topo = topologies.get_topology_desc("cpu", platform="xla_gpu", num_devices=1)
        blobs = []
        real = _plugin._serialize
        _plugin._serialize = lambda e: blobs.append(real(e)) or blobs[-1]
        serialize(compile_for(topo, 4))
        payload = bytearray(blobs[0])
        def load(data):
            try:
                _plugin._deserialize(bytes(data))
                return "loaded"
            except Exception as e:
                return str(e)
        res["cut"] = load(payload[:-10])
        flipped = bytearray(payload)
        flipped[-100] ^= 1
        res["flipped"] = load(flipped)
        res["foreign"] = load(b"not an executable")
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_PJRT_TARGET": "cpu"})
    assert "unknown topology name 'tpu'" in out["name"], out
    assert "'ampere' is not a GPU architecture" in out["arch"], out
    assert "the cpu target has no GPU architecture" in out["cpu arch"], out
    assert "a cuda topology has one device" in out["cuda count"], out
    assert "unknown option(s) slices" in out["option"], out
    assert "topology='2x?' is not of the form" in out["shape"], out
    assert "disagree" in out["disagree"], out
    assert "0 devices; a topology has 1 to 256" in out["zero"], out
    assert out["shape ok"] == "accepted", out
    assert "truncated serialized executable" in out["cut"], out
    assert "does not match its digest" in out["flipped"], out
    assert "not a serialized xla_gpu executable" in out["foreign"], out


def _call(name: str, **fields) -> tuple[int, "ctypes.Array"]:
    """Calls slot `name` of the plugin's table as jaxlib does: (the error
    handle or 0, the argument words after the call)."""
    import ctypes

    from xla_gpu.pjrt import _abi as A
    from xla_gpu.pjrt import _plugin, _topology  # noqa: F401 - its slots
    layout = A.ARGS[name]
    words = (ctypes.c_uint64 * (layout.size // 8))()
    words[0] = layout.size
    for field, value in fields.items():
        words[layout.fields[field] // 8] = value
    table = _plugin.api_table()
    slot = ctypes.c_uint64.from_address(table + A.slot_offset(name)).value
    if name in A.VOID_SLOTS:
        A.VOID_SLOT_FN(slot)(ctypes.addressof(words))
        return 0, words
    return A.SLOT_FN(slot)(ctypes.addressof(words)) or 0, words


def test_topology_slots_through_the_table():
    """Create, the queries, Serialize and Deserialize (a round trip), and
    Destroy, called through the C table in this process."""
    import ctypes

    from xla_gpu.pjrt import _abi as A
    name = b"cuda:sm_80"
    err, w = _call("TopologyDescription_Create", topology_name=ctypes.cast(
        ctypes.c_char_p(name), ctypes.c_void_p).value, topology_name_size=len(name))
    assert err == 0
    topology = w[A.TOPOLOGY_CREATE.topology // 8]
    err, w = _call("TopologyDescription_PlatformName", topology=topology)
    assert err == 0 and ctypes.string_at(w[3], w[4]) == b"xla_gpu"
    err, w = _call("TopologyDescription_GetDeviceDescriptions", topology=topology)
    assert err == 0 and w[4] == 1
    err, w = _call("TopologyDescription_Serialize", topology=topology)
    assert err == 0
    text = ctypes.string_at(w[3], w[4])
    assert json.loads(text) == {"format": "xla_gpu-topology-1", "target": "cuda",
                                "arch": "sm_80", "num_devices": 1}
    err, w = _call("TopologyDescription_Deserialize", serialized_topology=ctypes.cast(
        ctypes.c_char_p(text), ctypes.c_void_p).value, serialized_topology_size=len(text))
    assert err == 0
    again = w[A.TOPOLOGY_DESERIALIZE.topology // 8]
    err, w = _call("TopologyDescription_PlatformVersion", topology=again)
    assert err == 0 and ctypes.string_at(w[3], w[4]).endswith(b"(GPU target, sm_80, ahead of time)")
    err, w = _call("TopologyDescription_Attributes", topology=again)
    assert err == 0 and w[4] == 3
    bad = b'{"format": "something else"}'
    err, _ = _call("TopologyDescription_Deserialize", serialized_topology=ctypes.cast(
        ctypes.c_char_p(bad), ctypes.c_void_p).value, serialized_topology_size=len(bad))
    assert err != 0
    _call("Error_Destroy", error=err)
    for handle in (topology, again):
        assert _call("TopologyDescription_Destroy", topology=handle)[0] == 0


def test_load_code_off_compiles_the_hlo_instead():
    """XLA_GPU_PJRT_LOAD_CODE=0: a serialized executable's compiled program
    is never run; loading compiles the HLO it carries (the same values)."""
    out = _run_aot("""
        topo = topologies.get_topology_desc("cpu", platform="xla_gpu", num_devices=1)
        blob, in_tree, out_tree = serialize(compile_for(topo, 4))
        compiles = []
        real = xla_gpu.compile
        xla_gpu.compile = lambda *a, **k: compiles.append(1) or real(*a, **k)
        loaded = deserialize_and_load(blob, in_tree, out_tree, backend="xla_gpu",
                                      execution_devices=jax.devices("xla_gpu")[:1])
        xla_gpu.compile = real
        v = np.arange(16, dtype=np.float32).reshape(4, 4) / 5
        want = np.tanh(v) @ np.ones((4, 3), np.float32) + v.sum()
        res["compiles"] = len(compiles)
        res["matches"] = bool(np.allclose(np.asarray(loaded(v)), want, rtol=1e-5, atol=1e-4))
        print(json.dumps(res))
    """, extra_env={"XLA_GPU_PJRT_LOAD_CODE": "0"})
    assert out == {"compiles": 1, "matches": True}, out
