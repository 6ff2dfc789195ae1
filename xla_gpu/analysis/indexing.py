"""HLO indexing analysis: for an instruction and one of its operands, the
map from an output index to the operand elements it reads, as an
`IndexingMap` (C++ library through `xla_gpu.ir`).

Maps are built as text over named dimensions d0..dn (the output index) and
symbols s0..sm (elements read per output element, e.g. reduced dimensions),
then parsed and simplified. Ops whose operand index depends on runtime
values (dynamic-slice, gather, dynamic-update-slice) return None: the
elemental emitter computes those indices itself.
"""

from __future__ import annotations

from math import prod
from typing import Sequence

from ..hlo import HloInstruction
from ..hlo.fusions import ELEMENTWISE_OPCODES
from ..hlo.shape import Shape
from ..ir import IndexingMap

__all__ = ["output_to_input", "identity_map", "map_text", "delinearize",
           "linear_expr", "ELEMENTWISE_OPCODES"]



def _dims(rank: int, prefix: str = "d") -> list[str]:
    return [f"{prefix}{i}" for i in range(rank)]


def map_text(dims: Sequence[tuple[str, int]], symbols: Sequence[tuple[str, int]],
             results: Sequence[str],
             constraints: Sequence[tuple[str, int, int]] = ()) -> str:
    """`(dims)[symbols] -> (results), domain: ...`; each dim/symbol is
    (name, size) with range [0, size - 1]."""
    head = f"({', '.join(n for n, _ in dims)})"
    if symbols:
        head += f"[{', '.join(n for n, _ in symbols)}]"
    ranges = {n: [0, max(s, 1) - 1] for n, s in (*dims, *symbols)}
    rest = []
    for e, lo, hi in constraints:
        bare = e.strip().strip("()").strip()
        if bare in ranges:  # a constraint on one variable narrows its range
            ranges[bare] = [max(ranges[bare][0], lo), min(ranges[bare][1], hi)]
        else:
            rest.append(f"{e} in [{lo}, {hi}]")
    domain = [f"{n} in [{lo}, {hi}]" for n, (lo, hi) in ranges.items()] + rest
    text = f"{head} -> ({', '.join(results)})"
    return text + (", domain: " + ", ".join(domain) if domain else "")


def linear_expr(names: Sequence[str], shape: Sequence[int]) -> str:
    """The row-major linear index of `names` over `shape`."""
    terms, stride = [], 1
    for name, size in reversed(list(zip(names, shape))):
        if size != 1:
            terms.append(name if stride == 1 else f"{name} * {stride}")
        stride *= size
    return " + ".join(reversed(terms)) or "0"


def delinearize(linear: str, shape: Sequence[int]) -> list[str]:
    """Row-major multi-index of the linear index `linear` in `shape`."""
    out, stride = [], prod(shape)
    for i, size in enumerate(shape):
        stride //= size
        if size == 1:
            out.append("0")
            continue
        expr = f"({linear})" if stride == 1 else f"({linear}) floordiv {stride}"
        out.append(expr if i == 0 else f"{expr} mod {size}")
    return out


def _major_to_minor(shape: Shape) -> list[int]:
    if shape.layout is None:
        return list(range(shape.rank))
    return list(reversed(shape.layout))


def identity_map(shape: Sequence[int]) -> IndexingMap:
    names = _dims(len(shape))
    return IndexingMap.parse(map_text(list(zip(names, shape)), [], names))


def _parse(text: str) -> IndexingMap:
    return IndexingMap.parse(text).simplified()


def output_to_input(inst: HloInstruction, operand: int,
                    output_shape: Shape | None = None) -> IndexingMap | None:
    """The map from `inst`'s output index to operand `operand`'s index, or
    None when the operand index depends on runtime values."""
    shape = output_shape or inst.shape
    if shape.is_tuple:  # variadic reduce: all outputs share their dims
        shape = shape.leaves()[0]
    out = list(shape.dims)
    d = _dims(len(out))
    dims = list(zip(d, out))
    op_shape = inst.operands[operand].shape
    op = inst.opcode
    if op_shape.is_tuple:
        return None
    in_dims = list(op_shape.dims)
    if op in ELEMENTWISE_OPCODES or op in ("copy", "map"):
        if len(in_dims) == 0:
            return _parse(map_text(dims, [], []))
        return _parse(map_text(dims, [], d))
    if op == "broadcast":
        return _parse(map_text(dims, [], [d[k] for k in inst.attrs["dimensions"]]))
    if op == "transpose":
        perm = list(inst.attrs["dimensions"])
        inverse = [perm.index(j) for j in range(len(perm))]
        return _parse(map_text(dims, [], [d[inverse[j]] for j in range(len(perm))]))
    if op == "bitcast" and not (shape.is_row_major and op_shape.is_row_major):
        # A bitcast keeps the bytes: through the physical (layout) order.
        out_order = _major_to_minor(shape)
        in_order = _major_to_minor(op_shape)
        linear = linear_expr([d[i] for i in out_order], [out[i] for i in out_order])
        physical = delinearize(linear, [in_dims[i] for i in in_order])
        results = [""] * len(in_dims)
        for position, dim in enumerate(in_order):
            results[dim] = physical[position]
        return _parse(map_text(dims, [], results))
    if op in ("reshape", "bitcast"):
        return _parse(map_text(dims, [], delinearize(linear_expr(d, out), in_dims)))
    if op == "slice":
        results = [f"{d[i]} * {stride} + {start}" if stride != 1 else f"{d[i]} + {start}"
                   for i, (start, _, stride) in enumerate(inst.attrs["slice"])]
        return _parse(map_text(dims, [], results))
    if op == "reverse":
        rev = set(inst.attrs["dimensions"])
        return _parse(map_text(dims, [], [
            f"{in_dims[i] - 1} - {d[i]}" if i in rev else d[i] for i in range(len(d))]))
    if op == "pad":
        if operand == 1:
            return _parse(map_text(dims, [], []))
        results, constraints = [], []
        for i, (lo, _, interior) in enumerate(inst.attrs["padding"]):
            shifted = f"{d[i]} - {lo}" if lo >= 0 else f"{d[i]} + {-lo}"
            step = interior + 1
            if step == 1:
                results.append(shifted)
            else:
                results.append(f"({shifted}) floordiv {step}")
                constraints.append((f"({shifted}) mod {step}", 0, 0))
            constraints.append((shifted, 0, (in_dims[i] - 1) * step))
        return _parse(map_text(dims, [], results, constraints))
    if op == "concatenate":
        axis = inst.attrs["dimensions"][0]
        offset = sum(o.shape.dims[axis] for o in inst.operands[:operand])
        results = list(d)
        results[axis] = f"{d[axis]} - {offset}"
        return _parse(map_text(dims, [], results,
                               [(d[axis], offset, offset + in_dims[axis] - 1)]))
    if op == "reduce":
        num_inputs = len(inst.operands) // 2
        if operand >= num_inputs:
            return _parse(map_text(dims, [], []))
        reduced = list(inst.attrs["dimensions"])
        symbols, results, kept = [], [], iter(d)
        for i, size in enumerate(in_dims):
            if i in reduced:
                results.append(f"s{len(symbols)}")
                symbols.append((f"s{len(symbols)}", size))
            else:
                results.append(next(kept))
        return _parse(map_text(dims, symbols, results))
    if op == "iota":
        return None
    return None
