"""What the SPMD tests share: jax's annotated programs (tests/python/data/
spmd, with their global inputs and outputs), a partitioned run in the
interpreter on global arrays, and the f32 `add` reducer their HLO texts use."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from xla_gpu.hlo import evaluate_devices, parse_module
from xla_gpu.hlo.passes.spmd import assemble, partition_module, split
from xla_gpu.hlo.printer import module_to_text

SPMD = Path(__file__).resolve().parent / "data" / "spmd"
CASES = sorted(p.name.removesuffix(".pre.hlo") for p in SPMD.glob("*.pre.hlo"))

# The header and reducer an annotated test module starts with.
MODULE_WITH_ADD = """
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def global_arrays(npz, kind: str) -> list[np.ndarray]:
    """A case's global inputs (kind "in") or outputs ("out"), in order (not
    the per-device `_devN` ones)."""
    count = sum(1 for k in npz.files if k.startswith(f"{kind}_") and "_dev" not in k)
    return [npz[f"{kind}_{i}"] for i in range(count)]


def run_partitioned(text: str, n: int, args):
    """Partitions `text`, runs it on n devices in the interpreter (after a
    round trip through the printed text), returns the global outputs and
    the partition result."""
    result = partition_module(parse_module(text), n)
    module = parse_module(module_to_text(result.module))
    per_parameter = [split(np.asarray(a), s, n)
                     for a, s in zip(args, result.parameter_shardings)]
    outs = evaluate_devices(module, [[p[d] for p in per_parameter] for d in range(n)],
                            num_partitions=n)
    return [assemble([outs[d][i] for d in range(n)], s, shape.dims, None)
            for i, (s, shape) in enumerate(zip(result.output_shardings,
                                               result.output_shapes))], result


# The collectives a partitioned module's counts compare (an async pair's
# `-start` counts as its op).
COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                    "collective-permute")


def collective_counts(module) -> Counter:
    """How many of each collective kind `module` holds, over every
    computation."""
    out: Counter = Counter()
    for comp in module.computations:
        for inst in comp.instructions:
            kind = inst.opcode.removesuffix("-start")
            if kind in COLLECTIVE_KINDS:
                out[kind] += 1
    return out


def run_stored_case(folder: Path, name: str, expected: dict):
    """Stored program `name` of `folder` (jax's `.pre.hlo`, inputs and
    outputs, XLA's `.partitioned.hlo`) partitioned and run: its outputs
    must be jax's and its collectives, like XLA's, `expected` (kind ->
    count). Returns the partitioning's result (its notes: the caller's)."""
    from xla_gpu.hlo.passes.spmd import SpmdFallbackWarning
    npz = np.load(folder / f"{name}.npz")
    n = int(npz["num_partitions"])
    text = (folder / f"{name}.pre.hlo").read_text()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpmdFallbackWarning)
        got, result = run_partitioned(text, n, global_arrays(npz, "in"))
    for i, (g, w) in enumerate(zip(got, global_arrays(npz, "out"))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")
    assert collective_counts(result.module) == Counter(expected)
    xla = parse_module((folder / f"{name}.partitioned.hlo").read_text())
    assert collective_counts(xla) == Counter(expected)
    return result


# jax's `x_ref[0] += 1; x_ref[1] += 5` on a mutable array cut over two
# devices: one-element slices of a cut vector, squeezed to scalars.
ONE_ELEMENT_UPDATES = """HloModule m, input_output_alias={ {}: (0, {}, may-alias) }
ENTRY e {
  x = f32[8] parameter(0), sharding={devices=[2]<=[2]}
  s0 = f32[1] slice(x), slice={[0:1]}
  r0 = f32[] reshape(s0)
  one = f32[] constant(1)
  a0 = f32[] add(r0, one)
  b0 = f32[1] reshape(a0)
  zero = s32[] constant(0)
  u0 = f32[8] dynamic-update-slice(x, b0, zero)
  s1 = f32[1] slice(u0), slice={[1:2]}
  r1 = f32[] reshape(s1)
  five = f32[] constant(5)
  a1 = f32[] add(r1, five)
  b1 = f32[1] reshape(a1)
  first = s32[] constant(1)
  ROOT u1 = f32[8] dynamic-update-slice(u0, b1, first), sharding={devices=[2]<=[2]}
}"""
