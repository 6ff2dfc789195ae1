"""Compiling ahead of time through the plugin, against XLA:CPU: a flax GPT
training step (bench/models.py's) compiled for a topology with no client,
serialized with jax's `serialize_executable`, then loaded in a fresh
process with an empty xla_gpu compile cache and run once.

Per side (xla_gpu: `topologies.get_topology_desc("cpu", platform="xla_gpu")`;
XLA:CPU: jax's own cpu backend, its `jax.jit(...).lower().compile()`):

  compile     the compile for the topology (s)
  bytes       the serialized executable
  load        `deserialize_and_load` in the fresh process (s)
  first run   the loaded step's first call, to its loss (s)

and for xla_gpu what loading the form without the compiled program costs
(it carries only the HLO, which loading compiles: what the plugin
serialized before stop 51): `xla_gpu.compile` of that text in a fresh
process; and the cuda target's compile for `cuda:sm_90` (no GPU needed). The losses of the loaded steps are checked
against the step jax compiles directly.

    JAX_PLATFORMS=xla_gpu,cpu python bench/jax_aot.py [--layers 4]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _step_and_args(layers: int):
    import models
    return models.gpt("small", layers)


def _load(path: str, backend: str) -> dict:
    """In this (fresh) process: load the executable, run it once."""
    import jax
    from jax.experimental.serialize_executable import deserialize_and_load
    with open(path, "rb") as f:
        blob, in_tree, out_tree, layers = pickle.load(f)
    step, args = _step_and_args(layers)
    leaves = jax.device_put(jax.tree.leaves(args), jax.devices(backend)[0])
    t0 = time.perf_counter()
    loaded = deserialize_and_load(blob, in_tree, out_tree, backend=backend,
                                  execution_devices=jax.devices(backend)[:1])
    t1 = time.perf_counter()
    out = loaded(*jax.tree.unflatten(jax.tree.structure(args), leaves))
    loss = float(out[2])
    t2 = time.perf_counter()
    return {"load": t1 - t0, "first run": t2 - t1, "loss": loss}


def _fresh_load(blob, in_tree, out_tree, layers: int, backend: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "exe.pkl")
        with open(path, "wb") as f:
            pickle.dump((blob, in_tree, out_tree, layers), f)
        env = dict(os.environ, XLA_GPU_CACHE_DIR=os.path.join(tmp, "cache"))
        proc = subprocess.run([sys.executable, __file__, "--load", path, "--backend", backend],
                              capture_output=True, text=True, env=env, timeout=1800)
        if proc.returncode:
            raise RuntimeError(proc.stderr[-2000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])


def _compile_text(path: str) -> dict:
    """In this (fresh) process: what loading the HLO-only form costs, the
    compile of the HLO text it carries (xla_gpu.compile, empty cache)."""
    import xla_gpu
    with open(path) as f:
        text = f.read()
    t0 = time.perf_counter()
    xla_gpu.compile(text, target="cpu")
    return {"load": time.perf_counter() - t0}


def _fresh(args: list[str], files: dict[str, bytes]) -> dict:
    """Runs this script with `args` in a fresh process with an empty
    xla_gpu compile cache, `files` written to a temporary directory
    (their paths replace the names in `args`)."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            args = [path if x == name else x for x in args]
        env = dict(os.environ, XLA_GPU_CACHE_DIR=os.path.join(tmp, "cache"))
        proc = subprocess.run([sys.executable, __file__, *args], capture_output=True,
                              text=True, env=env, timeout=1800)
        if proc.returncode:
            raise RuntimeError(proc.stderr[-2000:])
        return json.loads(proc.stdout.strip().splitlines()[-1])


def _fresh_load(blob, in_tree, out_tree, layers: int, backend: str) -> dict:
    return _fresh(["--load", "exe.pkl", "--backend", backend],
                  {"exe.pkl": pickle.dumps((blob, in_tree, out_tree, layers))})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--load", help=argparse.SUPPRESS)
    parser.add_argument("--compile-text", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="xla_gpu", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.load:
        print(json.dumps(_load(a.load, a.backend)))
        return
    if a.compile_text:
        print(json.dumps(_compile_text(a.compile_text)))
        return
    # Every compile here is a real one: a fresh xla_gpu compile cache, and
    # jax's caches cleared before each.
    os.environ["XLA_GPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="jax_aot-cache-")
    import jax
    from jax.experimental import topologies
    from jax.experimental.serialize_executable import serialize
    from xla_gpu.pjrt import _plugin
    step, args = _step_and_args(a.layers)
    rows = {}
    shapes = jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype), args)
    for name, topo in (("xla_gpu", topologies.get_topology_desc("cpu", platform="xla_gpu",
                                                                num_devices=1)),
                       ("XLA:CPU", None)):
        if topo is None:
            device = jax.devices("cpu")[0]
            specs = jax.tree.map(lambda s: jax.ShapeDtypeStruct(
                s.shape, s.dtype, sharding=jax.sharding.SingleDeviceSharding(device)), shapes)
        else:
            mesh = topologies.make_mesh(topo, (1,), ("x",))
            sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
            specs = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype,
                                                                sharding=sharding), shapes)
        jax.clear_caches()
        t0 = time.perf_counter()
        blobs = []
        if topo is not None:
            real = _plugin._serialize
            _plugin._serialize = lambda e: blobs.append(real(e)) or blobs[-1]
        compiled = jax.jit(step).lower(*specs).compile()
        compile_s = time.perf_counter() - t0
        blob, in_tree, out_tree = serialize(compiled)
        if topo is not None:
            _plugin._serialize = real
        row = {"compile": compile_s, "bytes": len(blob)}
        row.update(_fresh_load(blob, in_tree, out_tree, a.layers,
                               "xla_gpu" if topo is not None else "cpu"))
        rows[name] = row
        if topo is not None:
            header, sections = _plugin._read_serialized(blobs[0])
            rows["xla_gpu: HLO only"] = dict(
                _fresh(["--compile-text", "text.hlo"], {"text.hlo": sections["text"]}),
                bytes=len(blob) - len(sections["program"]))
    topo = topologies.get_topology_desc("cuda:sm_90", platform="xla_gpu")
    mesh = topologies.make_mesh(topo, (1,), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    specs = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                         shapes)
    jax.clear_caches()
    t0 = time.perf_counter()
    jax.jit(step).lower(*specs).compile()
    rows["xla_gpu cuda:sm_90"] = {"compile": time.perf_counter() - t0}
    want = float(jax.jit(step)(*jax.device_put(args, jax.devices("cpu")[0]))[2])
    print(f"gpt small, {a.layers} layers; loss compiled directly {want:.6f}")
    print(f"{'':22s} {'compile s':>10s} {'bytes':>10s} {'load s':>8s} {'first run s':>12s} "
          f"{'loss err':>9s}")
    for name, r in rows.items():
        err = abs(r["loss"] - want) / abs(want) if "loss" in r else None
        cells = [f"{r['compile']:10.2f}" if "compile" in r else f"{'':10s}",
                 f"{r['bytes']:10d}" if "bytes" in r else f"{'':10s}",
                 f"{r['load']:8.3f}" if "load" in r else f"{'':8s}",
                 f"{r['first run']:12.3f}" if "first run" in r else f"{'':12s}",
                 f"{err:9.1e}" if err is not None else ""]
        print(f"{name:22s} " + " ".join(cells))


if __name__ == "__main__":
    main()
