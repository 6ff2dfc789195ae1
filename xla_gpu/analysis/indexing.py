"""HLO indexing analysis: for an instruction and one of its operands, the
map from an output index to the operand elements it reads, as an
`IndexingMap` (C++ library through `xla_gpu.ir`).

Maps are built from AffineExprs (the MLIR bindings' arithmetic: `+`, `*`,
`%`, `floordiv`) over dimensions d0..dn (the output index) and symbols
s0..sm (elements read per output element, e.g. reduced dimensions), turned
into an `#xla_gpu.indexing_map` attribute through the C API and simplified
there: no text is printed or parsed. Ops whose operand index depends on
runtime values (dynamic-slice, gather, dynamic-update-slice) return None:
the elemental emitter computes those indices itself.

The helpers below (`indexing_map`, `linearize`, `delinearize`, `dim`,
`sym`, `const`, `floordiv`, `sum_exprs`) are what the emitters build their thread
and loop maps with. Every builder needs an MLIR context (`with context:`).
`map_text` and the text forms of `delinearize` / `linear_expr` are kept for
tests and debugging.
"""

from __future__ import annotations

import threading
from math import prod
from typing import Sequence

from mlir import ir as _ir

from ..hlo import HloInstruction
from ..hlo.fusions import ELEMENTWISE_OPCODES
from ..hlo.shape import Shape
from ..ir import Constraint, IndexingMap, Variable

__all__ = ["output_to_input", "identity_map", "indexing_map", "linearize",
           "delinearize", "dim", "sym", "const", "floordiv", "sum_exprs", "map_text",
           "linear_expr", "ELEMENTWISE_OPCODES"]

Expr = _ir.AffineExpr
# A dimension or symbol of a map being built: its name and size (its range
# is [0, size - 1]).
Var = tuple[str, int]


# -- AffineExpr building -------------------------------------------------------

def dim(position: int) -> Expr:
    return _ir.AffineDimExpr.get(position)


def sym(position: int) -> Expr:
    return _ir.AffineSymbolExpr.get(position)


def const(value: int) -> Expr:
    return _ir.AffineConstantExpr.get(value)


def floordiv(expr: Expr, divisor: int) -> Expr:
    return _ir.AffineExpr.get_floor_div(expr, divisor)


def _is_zero(expr: Expr) -> bool:
    # The bindings type an expression by how it was built (d0 + 0 is an
    # "AffineAddExpr"); maybe_downcast gives its kind after simplification.
    expr = expr.maybe_downcast()
    return isinstance(expr, _ir.AffineConstantExpr) and expr.value == 0


def linearize(exprs: Sequence[Expr], shape: Sequence[int]) -> Expr:
    """The row-major linear index of the multi-index `exprs` over `shape`
    (size-1 dimensions left out)."""
    terms, stride = [], 1
    for expr, size in reversed(list(zip(exprs, shape))):
        if size != 1:
            terms.append(expr if stride == 1 else expr * stride)
        stride *= size
    return sum_exprs(list(reversed(terms)))


def sum_exprs(terms: Sequence[Expr]) -> Expr:
    """`t0 + t1 + ...` left to right (as the text `t0 + t1 + ...` parses),
    zeros left out; 0 when there is nothing to add."""
    out = None
    for term in terms:
        if _is_zero(term):
            continue
        out = term if out is None else out + term
    return const(0) if out is None else out


def delinearize(linear, shape: Sequence[int]) -> list:
    """Row-major multi-index of the linear index `linear` in `shape`:
    `linear floordiv stride mod size` per dimension (0 for size-1 ones).
    `linear` is an AffineExpr; a str gives text (tests, debugging)."""
    if isinstance(linear, str):
        return _delinearize_text(linear, shape)
    # A zero-sized dimension counts as size 1 here: the shape has no
    # elements, so the caller's bounds constraint already excludes every
    # index and only the strides must stay defined.
    out, stride = [], prod(max(size, 1) for size in shape)
    for i, size in enumerate(shape):
        stride //= max(size, 1)
        if size <= 1:
            out.append(const(0))
            continue
        expr = linear if stride == 1 else floordiv(linear, stride)
        out.append(expr if i == 0 else expr % size)
    return out


def indexing_map(dims: Sequence[Var], symbols: Sequence[Var], results: Sequence[Expr],
                 constraints: Sequence[tuple[Expr, int, int]] = (),
                 simplify: bool = True) -> IndexingMap:
    """`(dims)[symbols] -> (results), domain: ...` with each dim and symbol
    `(name, size)` in [0, size - 1] and each constraint `(expr, lo, hi)`; a
    constraint on one variable narrows that variable's range instead.
    Simplified (range-aware, in C++) unless `simplify` is False."""
    ranges = [[0, max(size, 1) - 1] for _, size in (*dims, *symbols)]
    rest = []
    for expr, lo, hi in constraints:
        position = _variable_position(expr, len(dims))
        if position is None:
            rest.append(Constraint(expr, lo, hi))
        else:
            r = ranges[position]
            r[0], r[1] = max(r[0], lo), min(r[1], hi)
    variables = [Variable(name, lo, hi)
                 for (name, _), (lo, hi) in zip((*dims, *symbols), ranges)]
    m = IndexingMap.from_exprs(variables[:len(dims)], variables[len(dims):],
                               results, rest)
    return m.simplified() if simplify else m


def _variable_position(expr: Expr, num_dims: int) -> int | None:
    expr = expr.maybe_downcast()
    if isinstance(expr, _ir.AffineDimExpr):
        return expr.position
    if isinstance(expr, _ir.AffineSymbolExpr):
        return num_dims + expr.position
    return None


def identity_map(shape: Sequence[int]) -> IndexingMap:
    d = [dim(i) for i in range(len(shape))]
    return indexing_map([(f"d{i}", s) for i, s in enumerate(shape)], [], d, simplify=False)


# -- text, for tests and debugging --------------------------------------------

def map_text(dims: Sequence[Var], symbols: Sequence[Var], results: Sequence[str],
             constraints: Sequence[tuple[str, int, int]] = ()) -> str:
    """`(dims)[symbols] -> (results), domain: ...` as text (what
    `indexing_map` builds, for tests and debugging)."""
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
    """The row-major linear index of `names` over `shape`, as text."""
    terms, stride = [], 1
    for name, size in reversed(list(zip(names, shape))):
        if size != 1:
            terms.append(name if stride == 1 else f"{name} * {stride}")
        stride *= size
    return " + ".join(reversed(terms)) or "0"


def _delinearize_text(linear: str, shape: Sequence[int]) -> list[str]:
    # A zero-sized dimension counts as size 1 here: the shape has no
    # elements, so the caller's bounds constraint already excludes every
    # index and only the strides must stay defined.
    out, stride = [], prod(max(size, 1) for size in shape)
    for i, size in enumerate(shape):
        stride //= max(size, 1)
        if size <= 1:
            out.append("0")
            continue
        expr = f"({linear})" if stride == 1 else f"({linear}) floordiv {stride}"
        out.append(expr if i == 0 else f"{expr} mod {size}")
    return out


# -- HLO indexing --------------------------------------------------------------

def _major_to_minor(shape: Shape) -> list[int]:
    if shape.layout is None:
        return list(range(shape.rank))
    return list(reversed(shape.layout))


# Maps that depend only on the shapes (and layouts) of output and operand
# and on the `dimensions` attribute, by that signature: the emitters ask for
# the same broadcasts and bitcasts over and over (gpt: ~1500 asks, ~70
# distinct maps, a fifth of emission building and simplifying them again).
# The attributes are immutable and uniqued in their context, so a cached one
# is the map a new build returns; each thread has its own context
# (kernel_compiler.thread_context) and so its own cache.
_SHAPE_ONLY_OPCODES = frozenset({"broadcast", "bitcast", "transpose", "reshape"})
_MEMO_LIMIT = 4096


class _Memo(threading.local):
    def __init__(self):
        self.context: _ir.Context | None = None
        self.maps: dict = {}


_memo = _Memo()


def _shape_key(shape: Shape):
    return tuple(shape.dims), None if shape.layout is None else tuple(shape.layout)


def output_to_input(inst: HloInstruction, operand: int,
                    output_shape: Shape | None = None) -> IndexingMap | None:
    """The map from `inst`'s output index to operand `operand`'s index, or
    None when the operand index depends on runtime values. Needs a current
    MLIR context."""
    shape = output_shape or inst.shape
    if inst.opcode not in _SHAPE_ONLY_OPCODES or shape.is_tuple \
            or inst.operands[operand].shape.is_tuple:
        return _output_to_input(inst, operand, shape)
    dimensions = inst.attrs.get("dimensions")
    key = (inst.opcode, _shape_key(shape), _shape_key(inst.operands[operand].shape),
           None if dimensions is None else tuple(dimensions))
    context = _ir.Context.current
    if _memo.context is not context or len(_memo.maps) >= _MEMO_LIMIT:
        _memo.context, _memo.maps = context, {}
    attr = _memo.maps.get(key)
    if attr is None:
        built = _output_to_input(inst, operand, shape)
        if built is None:
            return None
        attr = _memo.maps[key] = built.to_attr()
    # A view of its own: a caller may change the parts of what it gets.
    return IndexingMap._view(attr)


def _output_to_input(inst: HloInstruction, operand: int,
                     shape: Shape) -> IndexingMap | None:
    if shape.is_tuple:  # variadic reduce: all outputs share their dims
        shape = shape.leaves()[0]
    out = list(shape.dims)
    d = [dim(i) for i in range(len(out))]
    dims = [(f"d{i}", size) for i, size in enumerate(out)]
    op_shape = inst.operands[operand].shape
    op = inst.opcode
    if op_shape.is_tuple:
        return None
    in_dims = list(op_shape.dims)

    def build(results, symbols=(), constraints=()):
        return indexing_map(dims, symbols, results, constraints)

    if op == "bitcast-convert" and len(in_dims) != len(out):
        # Between element widths: the narrower side has one more (minor)
        # dimension, the pieces of one wide element.
        if len(in_dims) < len(out):
            return build(d[:-1])
        return build([*d, sym(0)], [("s0", in_dims[-1])])
    if op in ELEMENTWISE_OPCODES or op in ("copy", "map"):
        return build(d if in_dims else [])
    if op == "broadcast":
        return build([d[k] for k in inst.attrs["dimensions"]])
    if op == "transpose":
        perm = list(inst.attrs["dimensions"])
        inverse = [perm.index(j) for j in range(len(perm))]
        return build([d[inverse[j]] for j in range(len(perm))])
    if op == "bitcast" and not (shape.is_row_major and op_shape.is_row_major):
        # A bitcast keeps the bytes: through the physical (layout) order.
        out_order = _major_to_minor(shape)
        in_order = _major_to_minor(op_shape)
        linear = linearize([d[i] for i in out_order], [out[i] for i in out_order])
        physical = delinearize(linear, [in_dims[i] for i in in_order])
        results: list = [None] * len(in_dims)
        for position, dimension in enumerate(in_order):
            results[dimension] = physical[position]
        return build(results)
    if op in ("reshape", "bitcast"):
        return build(delinearize(linearize(d, out), in_dims))
    if op == "slice":
        return build([d[i] * stride + start if stride != 1 else d[i] + start
                      for i, (start, _, stride) in enumerate(inst.attrs["slice"])])
    if op == "reverse":
        rev = set(inst.attrs["dimensions"])
        return build([const(in_dims[i] - 1) - d[i] if i in rev else d[i]
                      for i in range(len(d))])
    if op == "pad":
        if operand == 1:
            return build([])
        results, constraints = [], []
        for i, (lo, _, interior) in enumerate(inst.attrs["padding"]):
            shifted = d[i] - lo if lo >= 0 else d[i] + (-lo)
            step = interior + 1
            if step == 1:
                results.append(shifted)
            else:
                results.append(floordiv(shifted, step))
                constraints.append((shifted % step, 0, 0))
            constraints.append((shifted, 0, (in_dims[i] - 1) * step))
        return build(results, (), constraints)
    if op == "concatenate":
        axis = inst.attrs["dimensions"][0]
        offset = sum(o.shape.dims[axis] for o in inst.operands[:operand])
        results = list(d)
        results[axis] = d[axis] - offset
        return build(results, (), [(d[axis], offset, offset + in_dims[axis] - 1)])
    if op == "reduce":
        num_inputs = len(inst.operands) // 2
        if operand >= num_inputs:
            return build([])
        reduced = list(inst.attrs["dimensions"])
        symbols, results, kept = [], [], iter(d)
        for i, size in enumerate(in_dims):
            if i in reduced:
                results.append(sym(len(symbols)))
                symbols.append((f"s{len(symbols)}", size))
            else:
                results.append(next(kept))
        return build(results, symbols)
    return None
