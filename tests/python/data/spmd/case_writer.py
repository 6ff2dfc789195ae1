"""What the scripts that store jax's sharded programs for the SPMD tests
and bench/spmd_collectives.py share (windowed/make_windowed_cases.py,
kept_cut/make_kept_cut_cases.py): jax on 8 host devices, the random
inputs, and one case's files:

    <case>.partitioned.hlo   XLA's per-device program (compile().as_text())
    <case>.pre.hlo           the annotated program (as_text(dialect="hlo"))
    <case>.npz               num_partitions, jax_version, the global inputs
                             and outputs (in_<i>, out_<i>)

Imported before jax: XLA reads its device count when jax starts.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=8").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402


class CaseWriter:
    """Writes cases into `folder`; inputs drawn from one generator seeded
    with `seed`. With `only` (case names), only those are written, but
    every case's inputs are still drawn in order, so that each case keeps
    its inputs whichever are written."""

    def __init__(self, folder: Path, seed: int, only=()):
        self.folder = Path(folder)
        self.rng = np.random.default_rng(seed)
        self.only = set(only)

    def normal(self, *shape):
        return self.rng.standard_normal(shape).astype(np.float32)

    def save(self, name, f, mesh, args, in_specs, out_spec=None):
        if self.only and name not in self.only:
            return
        in_shardings = tuple(NamedSharding(mesh, s) for s in in_specs)
        out_sharding = None if out_spec is None else NamedSharding(mesh, out_spec)
        jitted = jax.jit(f, in_shardings=in_shardings, out_shardings=out_sharding)
        placed = [jax.device_put(a, s) for a, s in zip(args, in_shardings)]
        lowered = jitted.lower(*placed)
        outs = jax.tree.leaves(jitted(*placed))
        data = {"num_replicas": np.int64(1), "num_partitions": np.int64(mesh.devices.size),
                "jax_version": np.array(jax.__version__)}
        for kind, values in (("in", placed), ("out", outs)):
            for i, value in enumerate(values):
                data[f"{kind}_{i}"] = np.asarray(value)
        (self.folder / f"{name}.partitioned.hlo").write_text(lowered.compile().as_text())
        (self.folder / f"{name}.pre.hlo").write_text(lowered.as_text(dialect="hlo"))
        np.savez_compressed(self.folder / f"{name}.npz", **data)
        print(f"{name}: {len(placed)} inputs, {len(outs)} outputs")
