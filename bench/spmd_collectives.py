"""The collectives of each stored SPMD program (tests/python/data/spmd):
XLA's partitioned text beside xla_gpu's partitioner's output for jax's
annotated text, by kind and count. Prints a markdown table (the one in
CONFORMANCE.md, "SPMD partitioner vs XLA's").

    python bench/spmd_collectives.py          # the stored programs
    python bench/spmd_collectives.py --jax    # also dots, reshards, windows
                                              # and other ops along cut dims and
                                              # reshapes made now with jax
                                              # (XLA:CPU, 8 devices)

XLA's texts come from XLA:CPU, whose pipeline has no ReduceScatterCreator:
an all-reduce whose one use is a partition-id dynamic-slice counts as the
reduce-scatter XLA:GPU makes of it (see `collectives`).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xla_gpu.hlo import parse_module  # noqa: E402
from xla_gpu.hlo.collectives import parse_replica_groups  # noqa: E402
from xla_gpu.hlo.passes.spmd import SpmdFallbackWarning, partition_module  # noqa: E402

DATA = ROOT / "tests" / "python" / "data" / "spmd"
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def collectives(module, as_gpu: bool = False) -> Counter:
    """Kind -> count over every computation (async starts as their kind;
    a combined (tuple) all-reduce counts once per value it reduces). With
    `as_gpu`, an all-reduce whose one use is a partition-id dynamic-slice
    counts as the reduce-scatter XLA:GPU makes of the pair (its
    ReduceScatterCreator runs after the partitioner; XLA:CPU, which made
    the texts here, has no such pass)."""
    out: Counter = Counter()
    for comp in module.computations:
        for inst in comp.instructions:
            kind = inst.opcode.removesuffix("-start")
            if kind in KINDS:
                values = len(inst.operands) if kind == "all-reduce" else 1
                if as_gpu and kind == "all-reduce" and _scattered(inst):
                    kind = "reduce-scatter"
                out[kind] += values
    return out


def _scattered(ar) -> bool:
    """`ar`'s one use keeps a 1/group slice of one dim at an offset made of
    partition-id: a dynamic-slice of it (maybe after a reshape), bare or as
    the first thing a fusion does with it (ReduceScatterCreator's match,
    read on the fused text XLA:CPU prints)."""
    if len(ar.users) != 1 or ar.shape.is_tuple or not ar.attrs.get("replica_groups"):
        return False
    groups = parse_replica_groups(ar.attrs.get("replica_groups", ()))
    size = len(groups[0])
    use = ar.users[0]
    value = ar
    if use.opcode == "fusion":
        if not any(o.opcode == "partition-id" for o in use.operands):
            return False
        body = use.attrs["calls"]
        value = body.parameter(use.operands.index(ar))
        if len(value.users) != 1:
            return False
        use = value.users[0]
    elif not any(o.opcode == "partition-id" or
                 any(p.opcode == "partition-id" for p in o.operands)
                 for o in use.operands[1:]):
        return False
    if use.opcode in ("reshape", "bitcast") and len(use.users) == 1:
        value, use = use, use.users[0]
    if use.opcode != "dynamic-slice" or use.operands[0] is not value:
        return False
    cut = [(a, b) for a, b in zip(value.shape.dims, use.shape.dims) if a != b]
    return len(cut) == 1 and cut[0][0] == cut[0][1] * size


def describe(counts: Counter) -> str:
    return ", ".join(f"{counts[k]} {k}" for k in KINDS if counts[k]) or "none"


def rows():
    """The stored programs: tests/python/data/spmd, then its windowed/
    (halo exchange, reshapes of a cut dim, reshards by collective-permute)
    and kept_cut/ (convolutions over cut output features, a dilated base,
    a reverse and a concatenate of uneven rows)."""
    for folder in (DATA, DATA / "windowed", DATA / "kept_cut"):
        for pre in sorted(folder.glob("*.pre.hlo")):
            name = pre.name.removesuffix(".pre.hlo")
            xla = collectives(parse_module((folder / f"{name}.partitioned.hlo").read_text()),
                              as_gpu=True)
            with warnings.catch_warnings():
                # (an uneven result returned whole says so: not the table's matter)
                warnings.simplefilter("ignore", SpmdFallbackWarning)
                ours = collectives(partition_module(parse_module(pre.read_text()), 8).module)
            yield name, xla, ours


# Rows where xla_gpu's choice differs from XLA's on purpose, with why.
DELIBERATE = {
    "uneven: dot over k, result by rows":
        "pads the partial sums and reduce-scatters them; XLA all-reduces them whole "
        "and slices (its ReduceScatterCreator does not match through the pad)",
}


def table(all_rows) -> None:
    print("| program | XLA's partitioned text | xla_gpu's partitioner | same |")
    print("|---|---|---|---|")
    same_total = 0
    for name, xla, ours in all_rows:
        same = xla == ours
        same_total += same
        mark = "yes" if same else "no, on purpose*" if name in DELIBERATE else "no"
        print(f"| {name} | {describe(xla)} | {describe(ours)} | {mark} |")
    print(f"\n{same_total} of {len(all_rows)} programs use the same collectives.")
    for name, _, _ in all_rows:
        if name in DELIBERATE:
            print(f"* {name}: {DELIBERATE[name]}.")


def jax_rows():
    """Dots, reshards, windows along cut dims and reshapes jitted now on 8
    XLA:CPU devices: XLA's compiled text beside ours for the same lowered
    text."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_force_host_platform_device_count=8").strip()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    line, grid = ((8,), ("x",)), ((2, 4), ("a", "b"))
    cases = [
        ("dot, lhs cuts k", lambda a, b: a @ b, [P(None, "x"), P()], line, None,
         normal(4, 16), normal(16, 8)),
        ("dot, rhs cuts k", lambda a, b: a @ b, [P(), P("x")], line, None,
         normal(4, 16), normal(16, 8)),
        ("dot, m and n cut", lambda a, b: a @ b, [P("x"), P(None, "x")], line, None,
         normal(16, 4), normal(4, 16)),
        ("dot, m and n cut, result by n", lambda a, b: a @ b, [P("x"), P(None, "x")], line,
         P(None, "x"), normal(16, 4), normal(4, 16)),
        ("dot, k cut, result by m", lambda a, b: a @ b, [P(None, "x"), P("x")], line,
         P("x"), normal(16, 16), normal(16, 8)),
        ("dot, k cut, result by n", lambda a, b: a @ b, [P(None, "x"), P("x")], line,
         P(None, "x"), normal(16, 16), normal(16, 8)),
        ("batched dot", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), [P("x"), P("x")],
         line, None, normal(8, 4, 6), normal(8, 6, 3)),
        ("batched dot, rhs by n", lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
         [P("x"), P(None, None, "x")], line, None, normal(8, 4, 6), normal(8, 6, 16)),
        ("2-D mesh dot, k alike", lambda a, b: a @ b, [P("a", "b"), P("b", None)], grid,
         None, normal(8, 16), normal(16, 8)),
        ("2-D mesh dot, k on other axes", lambda a, b: a @ b, [P("a", "b"), P("a", None)],
         grid, None, normal(8, 16), normal(16, 8)),
        ("2-D mesh dot, result by both", lambda a, b: a @ b, [P("a", None), P(None, "b")],
         grid, P("a", "b"), normal(8, 16), normal(16, 8)),
        ("MLP gradient", jax.grad(lambda w, a: jnp.sum(jnp.tanh(a @ w) ** 2)),
         [P(None, "x"), P("x")], line, None, normal(8, 16), normal(16, 8)),
        ("rows to columns", lambda a: a * 2, [P("x")], line, P(None, "x"), normal(16, 8)),
        ("2-D mesh, axes swapped", lambda a: a * 2, [P("a", "b")], grid, P("b", "a"),
         normal(8, 8)),
        ("loop over cut rows", lambda a: jax.lax.fori_loop(
            0, 3, lambda i, c: c * 1.5 + c.sum(0), a), [P("x")], line, None, normal(16, 8)),
        ("embedding lookup", lambda t, i: t[i] * 2, [P(), P("x")], line, None,
         normal(10, 4), (np.arange(16, dtype=np.int32).reshape(8, 2) * 3) % 10),
        ("convolution, batch cut", lambda a, w: jax.lax.conv_general_dilated(
            a, w, (1,), "SAME"), [P("x"), P()], line, None, normal(8, 2, 10), normal(3, 2, 3)),
        # windows along a cut dim (halo exchange)
        ("halo: slice of cut rows", lambda a: a[3:59] * 2, [P("x")], line, P("x"),
         normal(64, 4)),
        ("halo: difference of neighbours", lambda a: a[1:] - a[:-1], [P("x")], line, None,
         normal(64, 4)),
        ("halo: pad of cut rows", lambda a: jnp.pad(a, ((8, 0), (0, 0))), [P("x")], line,
         P("x"), normal(64, 4)),
        ("halo: 3x3 window sum, 2-D mesh", lambda a: jax.lax.reduce_window(
            a, 0.0, jax.lax.add, (3, 3), (1, 1), "SAME"), [P("a", "b")], grid, P("a", "b"),
         normal(16, 16)),
        ("halo: 2x1 max pool, stride 2", lambda a: jax.lax.reduce_window(
            a, -jnp.inf, jax.lax.max, (2, 1), (2, 1), "VALID"), [P("x")], line, P("x"),
         normal(64, 4)),
        ("halo: 1-D convolution, length cut", lambda a, w: jax.lax.conv_general_dilated(
            a, w, (1,), "SAME"), [P(None, None, "x"), P()], line, P(None, None, "x"),
         normal(2, 3, 64), normal(4, 3, 3)),
        ("concatenate along cut rows", lambda a, b: jnp.concatenate([a, b]),
         [P("x"), P("x")], line, P("x"), normal(32, 4), normal(32, 4)),
        # other ops along a cut dim, kept cut
        ("concatenate, cut moved to the columns", lambda a, b: jnp.concatenate([a, b]),
         [P("x"), P("x")], line, None, normal(32, 16), normal(32, 16)),
        ("reverse of cut rows", lambda a: a[::-1] * 2, [P("x")], line, None, normal(64, 4)),
        ("update one row of cut rows", lambda a, v, i: jax.lax.dynamic_update_slice(
            a, v, (i, 0)), [P("x"), P(), P()], line, None, normal(64, 4), normal(1, 4),
         np.int32(13)),
        ("update rows across chunks", lambda a, v, i: jax.lax.dynamic_update_slice(
            a, v, (i, 0)), [P("x"), P(), P()], line, P("x"), normal(64, 4), normal(4, 4),
         np.int32(13)),
        ("dynamic slice of cut rows", lambda a, i: jax.lax.dynamic_slice(a, (i, 0), (8, 4)),
         [P("x"), P()], line, None, normal(64, 4), np.int32(8)),
        ("pad with interior, cut rows", lambda a: jax.lax.pad(
            a, 0.0, ((0, 1, 1), (0, 0, 0))), [P("x")], line, P("x"), normal(64, 4)),
        ("dilated window sum, cut rows", lambda a: jax.lax.reduce_window(
            a, 0.0, jax.lax.add, (3, 1), (1, 1), ((2, 2), (0, 0)), window_dilation=(2, 1)),
         [P("x")], line, P("x"), normal(64, 4)),
        ("convolution, input features cut", lambda a, w: jax.lax.conv_general_dilated(
            a, w, (1,), "SAME"), [P(None, "x"), P()], line, None, normal(2, 16, 10),
         normal(4, 16, 3)),
        ("transposed convolution, length cut", lambda a, w: jax.lax.conv_general_dilated(
            a, w, (1,), ((1, 2),), lhs_dilation=(2,)), [P(None, None, "x"), P()], line,
         P(None, None, "x"), normal(2, 3, 64), normal(4, 3, 3)),
        ("2-D mesh convolution, batch and features cut", lambda a, w:
         jax.lax.conv_general_dilated(a, w, (1,), "SAME"), [P("a", "b"), P()], grid, None,
         normal(4, 16, 10), normal(4, 16, 3)),
        # reshapes splitting / merging a cut dim
        ("reshape: cut dim split", lambda a: a.reshape(8, 8), [P("x")], line, P("x"),
         normal(64)),
        ("reshape: merged into a cut dim", lambda a: a.reshape(64), [P("x")], line, P("x"),
         normal(8, 8)),
        ("reshape: cut on the major factor", lambda a: a.reshape(8, 4, 16), [P(None, "a")],
         grid, P(None, "a"), normal(8, 64)),
        # 2-D mesh reshards by collective-permute
        ("2-D mesh, device order", lambda a: a * 2, [P(("a", "b"))], grid, P(("b", "a")),
         normal(16, 8)),
        ("2-D mesh, cut to the other axis", lambda a: a * 2, [P("a")], grid, P("b"),
         normal(8, 8)),
    ]
    for name, f, specs, (shape, axes), out, *args in cases:
        mesh = Mesh(np.array(jax.devices()).reshape(shape), axes)
        placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, specs)]
        jitted = jax.jit(f) if out is None else \
            jax.jit(f, out_shardings=NamedSharding(mesh, out))
        lowered = jitted.lower(*placed)
        xla = collectives(parse_module(lowered.compile().as_text()), as_gpu=True)
        ours = collectives(partition_module(parse_module(lowered.as_text(dialect="hlo")),
                                            8).module)
        yield name, xla, ours
    # Uneven cuts (jax places only even chunks: whole arguments, cut inside
    # by sharding constraints), on 4 devices: 10 rows are chunks of 3.
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))

    def cut(v, *spec):
        return jax.lax.with_sharding_constraint(v, NamedSharding(mesh, P(*spec)))
    uneven = [
        ("uneven: sum over cut rows", lambda x: jnp.exp(cut(x, "x")).sum(0), normal(10, 8)),
        ("uneven: dot over a cut k", lambda x, w: jnp.exp(cut(x, None, "x")) @
         jnp.exp(cut(w, "x")), normal(6, 10), normal(10, 4)),
        ("uneven: dot over k, result by rows", lambda x, w: cut(
            cut(x, None, "x") @ cut(w, "x"), "x") * 2, normal(6, 16), normal(16, 4)),
        ("uneven: rows to columns", lambda x: cut(-cut(x, "x"), None, "x") * 2,
         normal(10, 7)),
        ("uneven: elementwise, transpose, sum", lambda x, y: jnp.exp(cut(x, "x") * y).T.sum(1),
         normal(10, 6), normal(10, 6)),
    ]
    for name, f, *args in uneven:
        placed = [jax.device_put(a, NamedSharding(mesh, P())) for a in args]
        lowered = jax.jit(f).lower(*placed)
        xla = collectives(parse_module(lowered.compile().as_text()), as_gpu=True)
        ours = collectives(partition_module(parse_module(lowered.as_text(dialect="hlo")),
                                            4).module)
        yield name, xla, ours


def main() -> int:
    table(list(rows()))
    if "--jax" in sys.argv[1:]:
        print()
        table(list(jax_rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
