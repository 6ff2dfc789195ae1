"""The elemental emitter: the value of an HLO instruction at an index, as
arith/math/tensor/scf ops (XLA's "elemental emission").

Elementwise ops map to arith/math with XLA's semantics where they differ
from the MLIR ops' (integer division by zero, shifts past the bit width,
float-to-int saturation, NaN-propagating min/max). Pure index transformations
(broadcast, transpose, reshape, slice, reverse, ...) apply their
output-to-input indexing map with `xla_gpu.apply_indexing`. Parameters are
read with `tensor.extract`; instructions of other subgraphs are reached with
`xla_gpu.pure_call`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, math, scf, tensor
from mlir.dialects import complex as complex_ops

from ..analysis.indexing import output_to_input
from ..hlo import HloComputation, HloInstruction
from ..hlo.opcodes import BINARY_ELEMENTWISE, TERNARY_ELEMENTWISE, UNARY_ELEMENTWISE
from ..hlo.shape import (Shape, bit_width, is_float, is_signed_int,
                         is_unsigned_int)
from ..ir import IndexingMap
from . import float8
from .float8 import is_minifloat
from .types import (check_supported, complex_part, dense_attr, element_type, is_complex,
                    scalar_attr)

__all__ = ["FunctionEmitter", "IndexMaps"]

Values = list[ir.Value]


class IndexMaps:
    """The `#xla_gpu.indexing_map` attributes of one kernel. Maps built as
    AffineExprs (`analysis.indexing.indexing_map`, `xla_gpu.ir.IndexingMap`)
    pass through as the attribute they already are; text (tests, debugging)
    is parsed once per distinct text."""

    def __init__(self) -> None:
        self._parsed: dict[str, ir.Attribute] = {}
        # Per map attribute (uniqued, so a dict key): its number of results,
        # and whether its affine map is the identity. The emitters apply a
        # few dozen distinct maps thousands of times; reading either through
        # the C API each time cost a tenth of emission.
        self._num_results: dict[ir.Attribute, int] = {}
        self._identity: dict[tuple[ir.Attribute, int], bool] = {}

    def attr(self, indexing_map: "IndexingMap | ir.Attribute | str") -> ir.Attribute:
        if isinstance(indexing_map, IndexingMap):
            return indexing_map.to_attr()
        if isinstance(indexing_map, ir.Attribute):
            return indexing_map
        if indexing_map not in self._parsed:
            self._parsed[indexing_map] = IndexingMap.parse(indexing_map).to_attr()
        return self._parsed[indexing_map]

    def apply(self, indexing_map: "IndexingMap | ir.Attribute | str",
              dims: Sequence[ir.Value], symbols: Sequence[ir.Value] = ()) -> Values:
        """`xla_gpu.apply_indexing`: one index value per result of the map."""
        attr = self.attr(indexing_map)
        count = self._num_results.get(attr)
        if count is None:
            count = self._num_results[attr] = \
                len(IndexingMap.from_attr(attr).affine_map.results)
        # Operation.create: the generated builder's checks cost as much again
        # as making the op, for the most frequent op of a kernel.
        op = ir.Operation.create("xla_gpu.apply_indexing", [ir.IndexType.get()] * count,
                                 [*dims, *symbols], {"indexing_map_attr": attr})
        return list(op.results)

    def is_identity(self, indexing_map: IndexingMap, rank: int) -> bool:
        """Whether the map's affine map is the identity of `rank` dimensions
        (its domain aside)."""
        key = (indexing_map.to_attr(), rank)
        known = self._identity.get(key)
        if known is None:
            known = self._identity[key] = \
                indexing_map.affine_map == ir.AffineMap.get_identity(rank)
        return known


def _index_const(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def _const(type_name: str, value) -> ir.Value:
    if is_complex(type_name):
        return complex_ops.constant(element_type(type_name), scalar_attr(type_name, value))
    return arith.constant(element_type(type_name), scalar_attr(type_name, value))


class FunctionEmitter:
    """Emits instructions into the function whose body is current.

    `tensors[n]` is the tensor of fusion parameter n (subgraph functions);
    `scalars[n]` the value of parameter n (scalar computations: reducers).
    `is_local(inst)` says whether `inst` is emitted here; otherwise
    `call_other(inst, indices)` gives its value (a pure_call)."""

    def __init__(self, maps: IndexMaps, *,
                 tensors: Sequence[ir.Value] = (),
                 scalars: Sequence[ir.Value] | None = None,
                 is_local: Callable[[HloInstruction], bool] = lambda i: True,
                 call_other: Callable[[HloInstruction, Values], Values] | None = None,
                 call_computation: Callable[[HloComputation, Values], Values] | None = None,
                 injected: dict[int, Callable[[Values], Values]] | None = None):
        self.maps = maps
        self.tensors = list(tensors)
        self.scalars = None if scalars is None else list(scalars)
        self.is_local = is_local
        self.call_other = call_other
        self.call_computation = call_computation
        self.injected = injected or {}
        self._scopes: list[dict] = [{}]
        self._constants: dict[int, ir.Value] = {}

    # -- caching -----------------------------------------------------------
    def _lookup(self, key):
        for scope in reversed(self._scopes):
            if key in scope:
                return scope[key]
        return None

    def _in_region(self, block: ir.Block, body: Callable[[], Values]) -> Values:
        with ir.InsertionPoint(block):
            self._scopes.append({})
            try:
                return body()
            finally:
                self._scopes.pop()

    # -- entry point -------------------------------------------------------
    def emit(self, inst: HloInstruction, indices: Sequence[ir.Value]) -> Values:
        """The value(s) of `inst` at `indices` (one index per output dim);
        several values for tuple-shaped instructions (variadic reduce)."""
        indices = list(indices)
        key = (id(inst), tuple(indices))
        cached = self._lookup(key)
        if cached is not None:
            return cached
        self._emit_elementwise_operands_first(inst, indices)
        return self._emit_uncached(inst, indices, key)

    def _emit_uncached(self, inst: HloInstruction, indices: Values, key) -> Values:
        """`emit` of an instruction not in the cache whose same-index
        elementwise operands are emitted already."""
        if id(inst) in self.injected:
            values = self.injected[id(inst)](indices)
        elif inst.opcode == "parameter":
            values = self._parameter(inst, indices)
        elif inst.opcode == "constant":
            values = [self._constant(inst, indices)]
        elif not self.is_local(inst):
            values = self.call_other(inst, indices)
        else:
            check_supported(inst.shape, inst)
            handler = _HANDLERS.get(inst.opcode)
            if handler is None:
                if inst.opcode in _UNARY or inst.opcode in _BINARY:
                    handler = FunctionEmitter._elementwise
                else:
                    raise inst.unsupported("not supported by the elemental emitter")
            values = handler(self, inst, indices)
        self._scopes[-1][key] = values
        return values

    def _is_same_index_elementwise(self, inst: HloInstruction) -> bool:
        return (inst.opcode in _UNARY or inst.opcode in _BINARY) and \
            id(inst) not in self.injected and inst.opcode not in ("parameter", "constant") \
            and self.is_local(inst)

    def _emit_elementwise_operands_first(self, inst: HloInstruction,
                                         indices: Values) -> None:
        """Emits the chain of elementwise operands read at the same indices
        bottom-up, with an explicit stack: a fusion of thousands of chained
        elementwise ops is emitted without deep recursion (each op then
        finds its operands in the cache)."""
        if not self._is_same_index_elementwise(inst):
            return
        rank_key = tuple(indices)
        order: list[HloInstruction] = []
        visited: set[int] = set()
        stack: list[tuple[HloInstruction, bool]] = [(inst, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in visited:
                continue
            visited.add(id(node))
            stack.append((node, True))
            # Reversed: the first operand is popped (emitted) first, as the
            # recursive emission orders them.
            for operand in reversed(node.operands):
                if operand.shape.dims == node.shape.dims and operand.shape.rank and \
                        id(operand) not in visited and \
                        self._is_same_index_elementwise(operand) and \
                        self._lookup((id(operand), rank_key)) is None:
                    stack.append((operand, False))
        # The last one is `inst` itself. Each node's walked operands precede
        # it, so it needs no walk of its own; one may have been emitted
        # meanwhile (reached through an operand that is not elementwise).
        for node in order[:-1]:
            key = (id(node), rank_key)
            if self._lookup(key) is None:
                self._emit_uncached(node, indices, key)

    def emit1(self, inst: HloInstruction, indices: Sequence[ir.Value]) -> ir.Value:
        values = self.emit(inst, indices)
        if len(values) != 1:
            raise inst.error("a tuple value is used where an array is expected")
        return values[0]

    # -- leaves --------------------------------------------------------------
    def _parameter(self, inst: HloInstruction, indices: Values) -> Values:
        n = inst.parameter_number
        if self.scalars is not None:
            return [self.scalars[n]]
        return [tensor.extract(self.tensors[n], indices)]

    def _constant(self, inst: HloInstruction, indices: Values) -> ir.Value:
        shape = inst.shape
        check_supported(shape, inst)
        literal = inst.literal
        if shape.rank == 0 or (literal is not None and literal.size and
                               (literal == literal.reshape(-1)[0]).all()):
            value = literal.reshape(-1)[0] if literal is not None and literal.size else 0
            return _const(shape.element_type, value)
        if id(inst) not in self._constants:
            # Array constants: one dense tensor per function (hoisted to the
            # function's entry so every region can read it).
            func_block = self._function_entry_block()
            with ir.InsertionPoint.at_block_begin(func_block):
                self._constants[id(inst)] = arith.constant(
                    ir.RankedTensorType.get(list(shape.dims), element_type(shape.element_type)),
                    dense_attr(shape, literal))
        return tensor.extract(self._constants[id(inst)], indices)

    def _function_entry_block(self) -> ir.Block:
        # `.operation.name` is the op's name ("func.func"); a FuncOp view's
        # own `.name` is its symbol.
        op = ir.InsertionPoint.current.block.owner
        while op is not None and op.operation.name != "func.func":
            op = op.parent
        if op is None:
            raise RuntimeError("internal: an array constant is emitted outside a function")
        return op.regions[0].blocks[0]

    # -- elementwise -------------------------------------------------------
    def _elementwise(self, inst: HloInstruction, indices: Values) -> Values:
        operand_types = [o.shape.element_type for o in inst.operands]
        args = [self.emit1(o, indices if o.shape.rank else []) for o in inst.operands]
        return [emit_elementwise(inst, operand_types, args)]

    def _bitcast_convert(self, inst: HloInstruction, indices: Values) -> Values:
        """bitcast-convert; between element widths the narrow side has one
        more (minor) dimension: a wide element's pieces, the first piece
        its lowest bits (the bytes' order on a little-endian machine, which
        XLA's GPUs and CPUs are)."""
        operand = inst.operands[0]
        in_t, t = operand.shape.element_type, inst.shape.element_type
        wide_in, wide_out = bit_width(in_t), bit_width(t)
        if wide_in == wide_out:
            return self._elementwise(inst, indices)
        if "pred" in (in_t, t) or in_t.startswith("c") or t.startswith("c"):
            raise inst.unsupported(f"bitcast-convert from {in_t} to {t} is not supported")
        # The bits are moved in an integer of the wide side's width (a byte
        # at least: sub-byte values live in an i8, f8 / f4 as their codes).
        wide = ir.IntegerType.get_signless(max(8, wide_in, wide_out))

        def as_bits(value: ir.Value, width: int) -> ir.Value:
            """A value's bit pattern, zero-extended to `wide`."""
            held = element_type(in_t)
            integer = held if isinstance(held, ir.IntegerType) else \
                ir.IntegerType.get_signless(width)
            bits = value if value.type == integer else arith.bitcast(integer, value)
            if width < 8:         # only the low bits of the byte are the value's
                bits = arith.andi(bits, arith.constant(integer, (1 << width) - 1))
            return bits if integer == wide else arith.extui(wide, bits)

        def from_bits(bits: ir.Value) -> ir.Value:
            """The low `wide_out` bits of `bits` as a value of type t."""
            target = element_type(t)
            held = target if isinstance(target, ir.IntegerType) else \
                ir.IntegerType.get_signless(wide_out)
            if held != wide:
                bits = arith.trunci(held, bits)
            if wide_out < 8:      # sign- or zero-extended in its byte
                return wrap_sub_byte(bits, t)
            return bits if held == target else arith.bitcast(target, bits)

        if wide_in > wide_out:   # one wide element -> its piece indices[-1]
            bits = as_bits(self.emit1(operand, list(indices[:-1])), wide_in)
            piece = arith.index_cast(wide, indices[-1])
            shift = arith.muli(piece, arith.constant(wide, wide_out))
            return [from_bits(arith.shrui(bits, shift))]
        joined = None            # the pieces of one wide element, joined
        for k in range(wide_out // wide_in):
            part = as_bits(self.emit1(operand, [*indices, _index_const(k)]), wide_in)
            if k:
                part = arith.shli(part, arith.constant(wide, k * wide_in))
            joined = part if joined is None else arith.ori(joined, part)
        return [from_bits(joined)]

    def _map(self, inst, indices):
        args = [self.emit1(o, indices) for o in inst.operands]
        return self.call_computation(inst.attrs["to_apply"], args)

    def _call(self, inst, indices):
        # A call of scalars (in a reducer or comparator) is a map of them; a
        # call of arrays is inlined by the HLO passes before any fusion.
        if inst.shape.is_tuple or inst.shape.rank or any(o.shape.rank for o in inst.operands):
            raise inst.unsupported("a call of arrays inside a fusion is not supported "
                                   "(the call inliner runs first)")
        return self.call_computation(inst.attrs["to_apply"],
                                     [self.emit1(o, []) for o in inst.operands])

    # -- index transformations --------------------------------------------
    def _through_map(self, inst: HloInstruction, indices: Values) -> Values:
        indexing = output_to_input(inst, 0)
        operand = inst.operands[0]
        if not operand.shape.rank:
            operand_indices = []
        elif self.maps.is_identity(indexing, len(indices)):
            operand_indices = list(indices)
        else:
            operand_indices = self.maps.apply(indexing, indices)
        return self.emit(operand, operand_indices)

    def _bitcast(self, inst: HloInstruction, indices: Values) -> Values:
        """A bitcast moves elements (its indexing map) and, when the element
        types differ, reinterprets their bits (same width)."""
        values = self._through_map(inst, indices)
        src, dst = inst.operands[0].shape.element_type, inst.shape.element_type
        if src == dst:
            return values
        if element_type(src) == element_type(dst):
            # Same storage (f8 / 8-bit ints, f4 / 4-bit ints in a byte): the
            # bits stay; a sub-byte result is brought back to its width.
            return [wrap_sub_byte(values[0], dst)]
        if bit_width(src) != bit_width(dst):
            raise inst.unsupported(f"bitcast from {src} to {dst} changes the element width")
        return [arith.bitcast(element_type(dst), values[0])]

    def _iota(self, inst, indices):
        t = inst.shape.element_type
        i64 = ir.IntegerType.get_signless(64)
        value = arith.index_cast(i64, indices[inst.attrs["iota_dimension"]])
        return [convert(value, "s64", t)]

    def _concatenate(self, inst, indices):
        """The operand whose slice holds the index along the axis, found by
        comparisons in nested scf.if: a chain (XLA's form) for up to
        CONCAT_CHAIN_MAX operands, a balanced binary search for more. A
        chain nests as deep as there are operands, and MLIR's greedy
        rewriter re-queues every ancestor of an op it touches: 300 operands
        took 5.6 s of canonicalization as a chain, ~9 levels as a tree."""
        axis = inst.attrs["dimensions"][0]
        types = [element_type(inst.shape.element_type)]
        pieces, offset = [], 0
        for op in inst.operands:
            pieces.append((op, offset))
            offset += op.shape.dims[axis]

        def shifted(k: int) -> list:
            # The indices into piece k's operand.
            start = pieces[k][1]
            moved = list(indices)
            if start:
                moved[axis] = arith.subi(indices[axis], _index_const(start))
            return moved

        def split(before: int, first: Callable[[], Values],
                  rest: Callable[[], Values]) -> Values:
            # Pieces before `before` (whose start is `pieces[before][1]`)
            # in `first`, the others in `rest`.
            cond = arith.cmpi(arith.CmpIPredicate.ult, indices[axis],
                              _index_const(pieces[before][1]))
            if_op = scf.IfOp(cond, types, has_else=True)
            then = self._in_region(if_op.then_block, first)
            with ir.InsertionPoint(if_op.then_block):
                scf.YieldOp(then)
            other = self._in_region(if_op.else_block, rest)
            with ir.InsertionPoint(if_op.else_block):
                scf.YieldOp(other)
            return list(if_op.results)

        def search(lo: int, hi: int) -> Values:
            # pieces[lo:hi], 1 <= hi - lo.
            if hi - lo == 1:
                return self.emit(pieces[lo][0], shifted(lo))
            if len(pieces) <= CONCAT_CHAIN_MAX:
                moved = shifted(lo)   # before the scf.if, as XLA emits it
                return split(lo + 1, lambda: self.emit(pieces[lo][0], moved),
                             lambda: search(lo + 1, hi))
            mid = (lo + hi) // 2
            return split(mid, lambda: search(lo, mid), lambda: search(mid, hi))

        return search(0, len(pieces))

    def _pad(self, inst, indices):
        operand, pad_value = inst.operands
        conds, operand_indices = [], []
        for i, (lo, _, interior) in enumerate(inst.attrs["padding"]):
            step, size = interior + 1, operand.shape.dims[i]
            d = indices[i]
            if lo == 0 and step == 1 and size == inst.shape.dims[i]:
                operand_indices.append(d)
                continue
            shifted = arith.subi(d, _index_const(lo)) if lo else d
            conds.append(arith.cmpi(arith.CmpIPredicate.sge, shifted, _index_const(0)))
            conds.append(arith.cmpi(arith.CmpIPredicate.sle, shifted,
                                    _index_const((size - 1) * step)))
            if step > 1:
                rem = arith.remsi(shifted, _index_const(step))
                conds.append(arith.cmpi(arith.CmpIPredicate.eq, rem, _index_const(0)))
                shifted = arith.divsi(shifted, _index_const(step))
            operand_indices.append(shifted)
        if not conds:
            return self.emit(operand, operand_indices)
        cond = conds[0]
        for c in conds[1:]:
            cond = arith.andi(cond, c)
        return self._if_else(cond, [element_type(inst.shape.element_type)],
                             lambda: self.emit(operand, operand_indices),
                             lambda: self.emit(pad_value, []))

    def _if_else(self, cond, types, then_fn, else_fn) -> Values:
        if_op = scf.IfOp(cond, types, has_else=True)
        for block, fn in ((if_op.then_block, then_fn), (if_op.else_block, else_fn)):
            values = self._in_region(block, fn)
            with ir.InsertionPoint(block):
                scf.YieldOp(values)
        return list(if_op.results)

    def start_index(self, inst: HloInstruction, limit: int) -> ir.Value:
        """A scalar start index operand, as index, clamped to [0, limit]."""
        value = self.emit1(inst, [])
        t = inst.shape.element_type
        index = ir.IndexType.get()
        value = (arith.index_castui(index, value) if is_unsigned_int(t)
                 else arith.index_cast(index, value))
        value = arith.maxsi(value, _index_const(0))
        return arith.minsi(value, _index_const(max(limit, 0)))

    def _dynamic_slice(self, inst, indices):
        operand = inst.operands[0]
        sizes = inst.shape.dims
        starts = [self.start_index(s, operand.shape.dims[i] - sizes[i])
                  for i, s in enumerate(inst.operands[1:])]
        return self.emit(operand, [arith.addi(d, s) for d, s in zip(indices, starts)])

    def _dynamic_update_slice(self, inst, indices):
        operand, update = inst.operands[:2]
        starts = [self.start_index(s, operand.shape.dims[i] - update.shape.dims[i])
                  for i, s in enumerate(inst.operands[2:])]
        cond, inner = None, []
        for d, s, size in zip(indices, starts, update.shape.dims):
            local = arith.subi(d, s)
            inner.append(local)
            c = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, local, _index_const(0)),
                           arith.cmpi(arith.CmpIPredicate.slt, local, _index_const(size)))
            cond = c if cond is None else arith.andi(cond, c)
        if cond is None:  # rank 0
            return self.emit(update, [])
        return self._if_else(cond, [element_type(inst.shape.element_type)],
                             lambda: self.emit(update, inner),
                             lambda: self.emit(operand, indices))

    def _gather(self, inst, indices):
        operand, starts = inst.operands
        a = inst.attrs
        if a.get("operand_batching_dims"):
            raise inst.unsupported("gather with batching dimensions is not supported yet")
        offset_dims = list(a.get("offset_dims", ()))
        collapsed = set(a.get("collapsed_slice_dims", ()))
        start_map = list(a.get("start_index_map", ()))
        slice_sizes = list(a["slice_sizes"])
        ivd = a.get("index_vector_dim", starts.shape.rank)
        batch = [d for i, d in enumerate(indices) if i not in offset_dims]
        offsets = [d for i, d in enumerate(indices) if i in offset_dims]
        result = [None] * operand.shape.rank
        offset_iter = iter(offsets)
        for dim in range(operand.shape.rank):
            result[dim] = _index_const(0) if dim in collapsed else next(offset_iter)
        for k, dim in enumerate(start_map):
            position = list(batch)
            if ivd < starts.shape.rank:
                position.insert(ivd, _index_const(k))
            value = self.emit1(starts, position)
            t = starts.shape.element_type
            index = ir.IndexType.get()
            value = (arith.index_castui(index, value) if is_unsigned_int(t)
                     else arith.index_cast(index, value))
            value = arith.maxsi(value, _index_const(0))
            value = arith.minsi(value, _index_const(operand.shape.dims[dim] - slice_sizes[dim]))
            result[dim] = arith.addi(result[dim], value)
        return self.emit(operand, result)

    def _reduce(self, inst, indices):
        n = len(inst.operands) // 2
        inputs, inits = inst.operands[:n], inst.operands[n:]
        reduced = list(inst.attrs["dimensions"])
        in_dims = inputs[0].shape.dims
        accs = [self.emit1(init, []) for init in inits]
        comp = inst.attrs["to_apply"]

        def nest(level: int, ivs: Values, accs: Values) -> Values:
            if level == len(reduced):
                kept = iter(indices)
                pos = [ivs[reduced.index(i)] if i in reduced else next(kept)
                       for i in range(len(in_dims))]
                xs = [self.emit1(x, pos) for x in inputs]
                return self.call_computation(comp, [*accs, *xs])
            loop = scf.ForOp(_index_const(0), _index_const(in_dims[reduced[level]]),
                             _index_const(1), accs)
            body = self._in_region(loop.body, lambda: nest(
                level + 1, [*ivs, loop.induction_variable], list(loop.inner_iter_args)))
            with ir.InsertionPoint(loop.body):
                scf.YieldOp(body)
            return list(loop.results)

        return nest(0, [], accs)

    def _dot(self, inst, indices):
        """A dot read one output element at a time, as XLA's elemental
        emitter does for small dots inside fusions: a loop nest over the
        contracting dimensions accumulating lhs * rhs. The operands are
        converted to the result type (as HLO's dot semantics and the
        reference interpreter do), floats narrower than f32 accumulate in
        f32 and are rounded once at the end."""
        a = inst.attrs
        lhs, rhs = inst.operands
        lb, rb = list(a.get("lhs_batch_dims", ())), list(a.get("rhs_batch_dims", ()))
        lc, rc = list(a.get("lhs_contracting_dims", ())), list(a.get("rhs_contracting_dims", ()))
        if len(lb) != len(rb) or len(lc) != len(rc):
            raise inst.error("dot batch / contracting dimensions do not pair up")
        t = inst.shape.element_type
        if t in ("c64", "c128"):
            raise inst.unsupported("complex dots are not supported by the elemental emitter")
        acc_t = "f32" if is_float(t) and bit_width(t) < 32 else t
        lfree = [d for d in range(lhs.shape.rank) if d not in lb and d not in lc]
        rfree = [d for d in range(rhs.shape.rank) if d not in rb and d not in rc]
        if len(lb) + len(lfree) + len(rfree) != len(indices):
            raise inst.error("the dot's result rank does not match its dimension numbers")
        batch = indices[:len(lb)]
        lhs_free = indices[len(lb):len(lb) + len(lfree)]
        rhs_free = indices[len(lb) + len(lfree):]
        sizes = [lhs.shape.dims[d] for d in lc]

        def operand_value(op, placed: list[tuple[list[int], Values]]) -> ir.Value:
            pos: list = [None] * op.shape.rank
            for dims, values in placed:
                for d, v in zip(dims, values):
                    pos[d] = v
            value = self.emit1(op, pos)
            return convert(convert(value, op.shape.element_type, t), t, acc_t)

        def step(ivs: Values, acc: ir.Value) -> ir.Value:
            x = operand_value(lhs, [(lb, batch), (lc, ivs), (lfree, lhs_free)])
            y = operand_value(rhs, [(rb, batch), (rc, ivs), (rfree, rhs_free)])
            if acc_t == "pred":
                return arith.ori(acc, arith.andi(x, y))
            if is_float(acc_t):
                return arith.addf(acc, arith.mulf(x, y))
            return arith.addi(acc, arith.muli(x, y))

        def nest(level: int, ivs: Values, acc: ir.Value) -> ir.Value:
            if level == len(sizes):
                return step(ivs, acc)
            loop = scf.ForOp(_index_const(0), _index_const(sizes[level]), _index_const(1), [acc])
            body = self._in_region(loop.body, lambda: [nest(
                level + 1, [*ivs, loop.induction_variable], loop.inner_iter_args[0])])
            with ir.InsertionPoint(loop.body):
                scf.YieldOp(body)
            return loop.results[0]

        result = nest(0, [], _const(acc_t, 0))
        if acc_t != t:
            return [convert(result, acc_t, t)]
        return [wrap_sub_byte(result, t)]

    def _reduce_window(self, inst, indices):
        n = len(inst.operands) // 2
        inputs, inits = inst.operands[:n], inst.operands[n:]
        in_dims = inputs[0].shape.dims
        rank = len(in_dims)
        window = inst.attrs.get("window") or {}  # none on a rank-0 operand
        size = window.get("size", (1,) * rank)
        stride = window.get("stride", (1,) * rank)
        pad = window.get("pad", ((0, 0),) * rank)
        base = window.get("lhs_dilate", (1,) * rank)
        dilation = window.get("rhs_dilate", (1,) * rank)
        comp = inst.attrs["to_apply"]
        looped = [i for i in range(rank) if size[i] > 1]
        accs = [self.emit1(init, []) for init in inits]
        index = ir.IndexType.get()

        def position(i, w):
            # The window element's position in the (padded, dilated) input.
            pos = indices[i]
            if stride[i] != 1:
                pos = arith.muli(pos, _index_const(stride[i]))
            if w is not None:
                step = w if dilation[i] == 1 else arith.muli(w, _index_const(dilation[i]))
                pos = arith.addi(pos, step)
            if pad[i][0]:
                pos = arith.subi(pos, _index_const(pad[i][0]))
            return pos

        def body(ivs: Values, accs: Values) -> Values:
            cond, pos = None, []
            for i in range(rank):
                p = position(i, ivs[looped.index(i)] if i in looped else None)
                checks = []
                if base[i] > 1:
                    rem = arith.remsi(p, _index_const(base[i]))
                    checks.append(arith.cmpi(arith.CmpIPredicate.eq, rem, _index_const(0)))
                    p = arith.divsi(p, _index_const(base[i]))
                if pad[i] != (0, 0) or base[i] > 1 or size[i] > 1:
                    checks.append(arith.cmpi(arith.CmpIPredicate.sge, p, _index_const(0)))
                    checks.append(arith.cmpi(arith.CmpIPredicate.slt, p,
                                             _index_const(in_dims[i])))
                for c in checks:
                    cond = c if cond is None else arith.andi(cond, c)
                pos.append(p)

            def step() -> Values:
                xs = [self.emit1(x, pos) for x in inputs]
                return self.call_computation(comp, [*accs, *xs])

            if cond is None:
                return step()
            return self._if_else(cond, [a.type for a in accs], step, lambda: list(accs))

        def nest(level: int, ivs: Values, accs: Values) -> Values:
            if level == len(looped):
                return body(ivs, accs)
            loop = scf.ForOp(_index_const(0), _index_const(size[looped[level]]),
                             _index_const(1), accs)
            inner = self._in_region(loop.body, lambda: nest(
                level + 1, [*ivs, loop.induction_variable], list(loop.inner_iter_args)))
            with ir.InsertionPoint(loop.body):
                scf.YieldOp(inner)
            return list(loop.results)

        del index
        return nest(0, [], accs)

    def _get_tuple_element(self, inst, indices):
        return [self.emit(inst.operands[0], indices)[inst.attrs["index"]]]

    def _copy(self, inst, indices):
        return self.emit(inst.operands[0], indices)


# Concatenates of up to this many operands pick theirs by a chain of
# comparisons (XLA's form), larger ones by a binary search.
CONCAT_CHAIN_MAX = 8

_HANDLERS: dict[str, Callable] = {
    "broadcast": FunctionEmitter._through_map,
    "transpose": FunctionEmitter._through_map,
    "reshape": FunctionEmitter._through_map,
    "bitcast": FunctionEmitter._bitcast,
    "slice": FunctionEmitter._through_map,
    "reverse": FunctionEmitter._through_map,
    "copy": FunctionEmitter._copy,
    "iota": FunctionEmitter._iota,
    "concatenate": FunctionEmitter._concatenate,
    "pad": FunctionEmitter._pad,
    "dynamic-slice": FunctionEmitter._dynamic_slice,
    "dynamic-update-slice": FunctionEmitter._dynamic_update_slice,
    "gather": FunctionEmitter._gather,
    "reduce": FunctionEmitter._reduce,
    "reduce-window": FunctionEmitter._reduce_window,
    "dot": FunctionEmitter._dot,
    "get-tuple-element": FunctionEmitter._get_tuple_element,
    "map": FunctionEmitter._map,
    "call": FunctionEmitter._call,
    "bitcast-convert": FunctionEmitter._bitcast_convert,
}

# -- elementwise ops -----------------------------------------------------------

_UNARY = UNARY_ELEMENTWISE
_BINARY = BINARY_ELEMENTWISE | TERNARY_ELEMENTWISE

_FLOAT_MATH = {
    "exponential": math.exp, "exponential-minus-one": math.expm1, "log": math.log,
    "log-plus-one": math.log1p, "sqrt": math.sqrt, "rsqrt": math.rsqrt,
    "cbrt": math.cbrt, "tanh": math.tanh, "sine": math.sin, "cosine": math.cos,
    "tan": math.tan, "erf": math.erf, "ceil": math.ceil, "floor": math.floor,
    "acos": math.acos, "acosh": math.acosh, "asin": math.asin, "asinh": math.asinh,
    "atanh": math.atanh, "cosh": math.cosh, "sinh": math.sinh,
    "round-nearest-afz": math.round, "round-nearest-even": math.roundeven,
}

_FCMP = {"EQ": "oeq", "NE": "une", "LT": "olt", "LE": "ole", "GT": "ogt", "GE": "oge"}
_ICMP_SIGNED = {"EQ": "eq", "NE": "ne", "LT": "slt", "LE": "sle", "GT": "sgt", "GE": "sge"}
_ICMP_UNSIGNED = {"EQ": "eq", "NE": "ne", "LT": "ult", "LE": "ule", "GT": "ugt", "GE": "uge"}


def _is_f8(t: str) -> bool:
    """f8 and f4 types (held as codes in an i8, computed in f32)."""
    return is_minifloat(t)


def emit_elementwise(inst: HloInstruction, operand_types: Sequence[str],
                     args: Values) -> ir.Value:
    """One elementwise op on scalars, with XLA's semantics."""
    op = inst.opcode
    t = inst.shape.element_type
    in_t = operand_types[0] if operand_types else t
    if is_complex(in_t) or is_complex(t) or op in ("real", "imag"):
        return _complex_op(inst, operand_types, args)
    if op == "convert":
        return convert(args[0], in_t, t)
    if op == "bitcast-convert":
        if bit_width(in_t) != bit_width(t):
            raise inst.unsupported("bitcast-convert between different bit widths is not supported")
        if element_type(in_t) == element_type(t):  # f8 <-> 8-bit ints: same i8
            return wrap_sub_byte(args[0], t)
        return arith.bitcast(element_type(t), args[0])
    if op == "compare":
        return _compare(inst, in_t, args)
    if op == "select":
        return arith.select(*args)
    if op == "clamp":
        lo, x, hi = args
        return _min_max("minimum", t, _min_max("maximum", t, x, lo), hi)
    if _is_f8(in_t) and op == "is-finite":
        return math.isfinite(convert(args[0], in_t, "f32"))
    if _is_f8(in_t) and op == "reduce-precision":
        # In f16, which holds every f8 / f4 value exactly: XLA:GPU's float
        # normalization computes f8 reduce-precision there (an IEEE-like
        # format, where these types' own bits need not be).
        inner = HloInstruction(inst.name, op, Shape("f16", inst.shape.dims), inst.operands,
                               inst.attrs, location=inst.location)
        wide = convert(args[0], in_t, "f16")
        return convert(_float_op(inner, "f16", [wide]), "f16", t)
    if _is_f8(in_t):
        # Arithmetic on f8 is done in f32 and rounded once, as XLA does.
        wide = [convert(a, ot, "f32") for a, ot in zip(args, operand_types)]
        inner = HloInstruction(inst.name, op, Shape("f32", inst.shape.dims), inst.operands,
                               inst.attrs, location=inst.location)
        return convert(emit_elementwise(inner, ["f32"] * len(args), wide), "f32", t)
    if is_float(t) or (op == "is-finite" and is_float(in_t)):
        return _float_op(inst, t, args)
    return _int_op(inst, t, args)


# HLO ops on complex values and the `complex` dialect ops they are (XLA's
# elemental emitter emits the same ops; `convert-complex-to-standard`
# lowers them to arith/math on the parts).
_COMPLEX_UNARY = {
    "exponential": complex_ops.exp, "exponential-minus-one": complex_ops.expm1,
    "log": complex_ops.log, "log-plus-one": complex_ops.log1p,
    "sqrt": complex_ops.sqrt, "rsqrt": complex_ops.rsqrt, "tanh": complex_ops.tanh,
    "sine": complex_ops.sin, "cosine": complex_ops.cos, "tan": complex_ops.tan,
    "negate": complex_ops.neg, "sign": complex_ops.sign,
}
_COMPLEX_BINARY = {
    "add": complex_ops.add, "subtract": complex_ops.sub, "multiply": complex_ops.mul,
    "divide": complex_ops.div, "atan2": complex_ops.atan2,
}


def _complex_op(inst: HloInstruction, operand_types: Sequence[str],
                args: Values) -> ir.Value:
    """An elementwise op whose operands or result are c64 / c128."""
    op = inst.opcode
    t = inst.shape.element_type
    in_t = operand_types[0] if operand_types else t
    if op == "complex":
        return complex_ops.create_(element_type(t), *args)
    if op in ("real", "imag"):
        if is_complex(in_t):
            part = complex_ops.re(args[0]) if op == "real" else complex_ops.im(args[0])
            return convert(part, complex_part(in_t), t)
        # Of a real value: the value itself, and zero.
        return convert(args[0], in_t, t) if op == "real" else _const(t, 0)
    if op == "convert":
        return convert(args[0], in_t, t)
    if op == "select":
        return arith.select(*args)
    if op == "compare":
        direction = inst.attrs.get("direction")
        if direction == "EQ":
            return complex_ops.eq(*args)
        if direction == "NE":
            return complex_ops.neq(*args)
        raise inst.error(f"complex values are not ordered: compare direction {direction!r}")
    if op == "abs":
        return complex_ops.abs(args[0])
    if op in _COMPLEX_UNARY:
        return _COMPLEX_UNARY[op](args[0])
    if op in _COMPLEX_BINARY:
        return _COMPLEX_BINARY[op](*args)
    if op == "power":
        return _complex_power(t, *args)
    raise inst.unsupported(f"{op} is not supported for {t}")


def _complex_power(t: str, base: ir.Value, exponent: ir.Value) -> ir.Value:
    """x ** y = exp(y log x), with the cases that formula gets wrong: any
    x ** 0 and 1 ** y are 1, and 0 ** y is 0 for a real y > 0."""
    part = complex_part(t)
    power = complex_ops.pow(base, exponent)
    zero, one = _const(t, 0), _const(t, 1)
    part_zero = _const(part, 0.0)
    exponent_zero = complex_ops.eq(exponent, zero)
    base_one = complex_ops.eq(base, one)
    base_zero = complex_ops.eq(base, zero)
    real_positive = arith.andi(
        arith.cmpf(arith.CmpFPredicate.OGT, complex_ops.re(exponent), part_zero),
        arith.cmpf(arith.CmpFPredicate.OEQ, complex_ops.im(exponent), part_zero))
    result = arith.select(arith.andi(base_zero, real_positive), zero, power)
    return arith.select(arith.ori(exponent_zero, base_one), one, result)


def _float_op(inst: HloInstruction, t: str, args: Values) -> ir.Value:
    op = inst.opcode
    ft = element_type(t)
    if op in _FLOAT_MATH:
        return _FLOAT_MATH[op](args[0])
    if op == "add":
        return arith.addf(*args)
    if op == "subtract":
        return arith.subf(*args)
    if op == "multiply":
        return arith.mulf(*args)
    if op == "divide":
        return arith.divf(*args)
    if op == "remainder":
        return arith.remf(*args)
    if op in ("maximum", "minimum"):
        return _min_max(op, t, *args)
    if op == "power":
        return math.powf(*args)
    if op == "atan2":
        return math.atan2(*args)
    if op == "abs":
        return math.absf(args[0])
    if op == "negate":
        return arith.negf(args[0])
    if op == "logistic":
        one = arith.constant(ft, ir.FloatAttr.get(ft, 1.0))
        return arith.divf(one, arith.addf(one, math.exp(arith.negf(args[0]))))
    if op == "sign":
        x = args[0]
        zero = arith.constant(ft, ir.FloatAttr.get(ft, 0.0))
        one = arith.constant(ft, ir.FloatAttr.get(ft, 1.0))
        nonzero = arith.cmpf(arith.CmpFPredicate.ONE, x, zero)
        return arith.select(nonzero, math.copysign(one, x), x)
    if op == "is-finite":
        return math.isfinite(args[0])
    if op == "reduce-precision":
        exponent_bits = inst.attrs.get("exponent_bits")
        mantissa_bits = inst.attrs.get("mantissa_bits")
        if not isinstance(exponent_bits, int) or not isinstance(mantissa_bits, int) or \
                exponent_bits < 1 or mantissa_bits < 0:
            raise inst.error("reduce-precision needs exponent_bits >= 1 and "
                             f"mantissa_bits >= 0, got exponent_bits={exponent_bits!r}, "
                             f"mantissa_bits={mantissa_bits!r}")
        return reduce_precision(args[0], t, exponent_bits, mantissa_bits)
    raise inst.unsupported(f"{op} is not supported for {t}")


# Explicit mantissa bits of the floats held in their own LLVM type.
_MANTISSA_BITS = {"f16": 10, "bf16": 7, "f32": 23, "f64": 52}


def reduce_precision(value: ir.Value, t: str, exponent_bits: int,
                     mantissa_bits: int) -> ir.Value:
    """XLA's reduce-precision of a f16 / bf16 / f32 / f64 value, on its
    bits: the mantissa rounded to `mantissa_bits` bits (to nearest, ties
    to even; a carry moves into the exponent, up to infinity), then values
    whose exponent is past the range of `exponent_bits` bits become
    infinity (above) or zero (below, denormals of that format included),
    keeping the sign. NaN stays the input NaN (also with no mantissa bit
    left: XLA's emitters select the input for NaNs)."""
    width = bit_width(t)
    src_mantissa = _MANTISSA_BITS[t]
    src_exponent = width - 1 - src_mantissa
    it = ir.IntegerType.get_signless(width)

    def c(v: int) -> ir.Value:
        v &= (1 << width) - 1
        return arith.constant(it, v - (1 << width) if v >> (width - 1) else v)

    bits = arith.bitcast(it, value)
    sign_mask = 1 << (width - 1)
    exponent_mask = ((1 << src_exponent) - 1) << src_mantissa
    is_nan = arith.cmpi(arith.CmpIPredicate.ugt, arith.andi(bits, c(~sign_mask)),
                        c(exponent_mask))
    if mantissa_bits < src_mantissa:
        shift = src_mantissa - mantissa_bits
        last_kept = 1 << shift
        # Adding 0111..1 plus the last kept bit rounds to nearest even.
        last_bit = arith.andi(arith.shrui(bits, c(shift)), c(1))
        biased = arith.addi(bits, arith.addi(last_bit, c((last_kept >> 1) - 1)))
        bits = arith.andi(biased, c(~(last_kept - 1)))
    if exponent_bits < src_exponent:
        bias = (1 << (src_exponent - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = arith.andi(bits, c(exponent_mask))
        overflow = arith.cmpi(arith.CmpIPredicate.ugt, exponent,
                              c((bias + reduced_bias) << src_mantissa))
        underflow = arith.cmpi(arith.CmpIPredicate.ule, exponent,
                               c((bias - reduced_bias) << src_mantissa))
        signed_zero = arith.andi(bits, c(sign_mask))
        signed_inf = arith.ori(signed_zero, c(exponent_mask))
        bits = arith.select(overflow, signed_inf, bits)
        bits = arith.select(underflow, signed_zero, bits)
    return arith.select(is_nan, value, arith.bitcast(value.type, bits))


def _f64_to_f32_round_to_odd(value: ir.Value) -> ir.Value:
    """f64 -> f32 rounded to odd: the f32 nearest (ties to even) when the
    value is one exactly, else of the two f32s around it the one with an
    odd last bit. Rounding that to nearest even into a format at least
    two bits narrower than f32 (f16, bf16, f8) gives the f64 value rounded once,
    where going through the plain f32 would round twice (1 + 2^-8 + 2^-30
    would become the tie 1 + 2^-8, and bf16 1.0 instead of 1.0078125)."""
    f32, f64, i32 = ir.F32Type.get(), ir.F64Type.get(), ir.IntegerType.get_signless(32)
    nearest = arith.truncf(f32, value)
    back = arith.extf(f64, nearest)
    inexact = arith.cmpf(arith.CmpFPredicate.ONE, back, value)  # NaN, inf: exact
    bits = arith.bitcast(i32, nearest)
    one = arith.constant(i32, 1)
    even = arith.cmpi(arith.CmpIPredicate.eq, arith.andi(bits, one), arith.constant(i32, 0))
    # The neighbour on the value's side: one step down in magnitude when
    # the nearest f32 is farther from zero than the value, else up
    # (0 -> the smallest denormal, overflow to inf -> the largest finite).
    farther = arith.cmpf(arith.CmpFPredicate.OGT, math.absf(back), math.absf(value))
    neighbour = arith.select(farther, arith.subi(bits, one), arith.addi(bits, one))
    odd = arith.select(arith.andi(inexact, even), neighbour, bits)
    return arith.bitcast(f32, odd)


def _is_sub_byte(t: str) -> bool:
    return t != "pred" and bit_width(t) < 8


def wrap_sub_byte(value: ir.Value, t: str) -> ir.Value:
    """An i8 holding a sub-byte integer, brought back to its width
    (sign-extended for s2/s4, zero-extended for u2/u4)."""
    if not _is_sub_byte(t):
        return value
    i8 = ir.IntegerType.get_signless(8)
    width = bit_width(t)
    if is_signed_int(t):
        shift = arith.constant(i8, 8 - width)
        return arith.shrsi(arith.shli(value, shift), shift)
    return arith.andi(value, arith.constant(i8, (1 << width) - 1))


def _int_op(inst: HloInstruction, t: str, args: Values) -> ir.Value:
    if not _is_sub_byte(t):
        return _int_op_full_width(inst, t, args)
    # Sub-byte integers: compute in i8 on the extended values; ops that see
    # the bit pattern look at the low bits only; the result wraps to width.
    op = inst.opcode
    i8 = ir.IntegerType.get_signless(8)
    mask = arith.constant(i8, (1 << bit_width(t)) - 1)
    if op in ("popcnt", "count-leading-zeros"):
        low = arith.andi(args[0], mask)
        if op == "popcnt":
            return math.ctpop(low)
        return arith.subi(math.ctlz(low), arith.constant(i8, 8 - bit_width(t)))
    if op == "shift-right-logical":
        args = [arith.andi(args[0], mask), args[1]]
    if op == "mulhi":
        # On the operands brought to their width (an i8 may hold other high
        # bits) the product fits in i8 (|s4 * s4| <= 64, u4 * u4 <= 225 as
        # a bit pattern), so its high half is a shift.
        product = arith.muli(*(wrap_sub_byte(a, t) for a in args))
        width = arith.constant(i8, bit_width(t))
        high = arith.shrsi(product, width) if is_signed_int(t) else \
            arith.shrui(product, width)
        return wrap_sub_byte(high, t)
    if op == "shift-right-arithmetic" and not is_signed_int(t):
        # The top bit of the pattern is the sign: extend it first.
        shift = arith.constant(i8, 8 - bit_width(t))
        args = [arith.shrsi(arith.shli(args[0], shift), shift), args[1]]
    return wrap_sub_byte(_int_op_full_width(inst, t, args), t)


def _int_op_full_width(inst: HloInstruction, t: str, args: Values) -> ir.Value:
    op = inst.opcode
    it = element_type(t)
    signed = is_signed_int(t)
    pred = t == "pred"
    width = bit_width(t)

    def c(v):
        return _const(t, v)

    if op in ("add", "or") and pred:
        return arith.ori(*args)
    if op in ("multiply", "and") and pred:
        return arith.andi(*args)
    if op == "add":
        return arith.addi(*args)
    if op == "subtract":
        return arith.subi(*args) if not pred else arith.xori(*args)
    if op == "multiply":
        return arith.muli(*args)
    if op == "mulhi" and not pred:
        # The extended multiply's high result: LLVM widens it to a 2N-bit
        # multiply (i128 for 64-bit operands), as XLA emits it.
        extended = arith.MulSIExtendedOp(*args) if signed else arith.MulUIExtendedOp(*args)
        return extended.high
    if op == "and":
        return arith.andi(*args)
    if op == "or":
        return arith.ori(*args)
    if op == "xor":
        return arith.xori(*args)
    if op == "not":
        return arith.xori(args[0], c(-1 if not pred else True))
    if op in ("divide", "remainder"):
        lhs, rhs = args
        is_zero = arith.cmpi(arith.CmpIPredicate.eq, rhs, c(0))
        bad = is_zero
        if signed:
            overflow = arith.andi(
                arith.cmpi(arith.CmpIPredicate.eq, lhs, c(-(1 << (width - 1)))),
                arith.cmpi(arith.CmpIPredicate.eq, rhs, c(-1)))
            bad = arith.ori(is_zero, overflow)
        safe = arith.select(bad, c(1), rhs)
        if op == "divide":
            q = arith.divsi(lhs, safe) if signed else arith.divui(lhs, safe)
            # x / 0 = -1 (all bits set); INT_MIN / -1 = INT_MIN (x / 1).
            return arith.select(is_zero, c(-1), q)
        r = arith.remsi(lhs, safe) if signed else arith.remui(lhs, safe)
        # x % 0 = x; INT_MIN % -1 = 0 (x % 1).
        return arith.select(is_zero, lhs, r)
    if op in ("maximum", "minimum"):
        return _min_max(op, t, *args)
    if op in ("shift-left", "shift-right-logical", "shift-right-arithmetic"):
        lhs, rhs = args
        too_far = arith.cmpi(arith.CmpIPredicate.uge, rhs, c(width))
        if op == "shift-left":
            return arith.select(too_far, c(0), arith.shli(lhs, rhs))
        if op == "shift-right-logical":
            return arith.select(too_far, c(0), arith.shrui(lhs, rhs))
        return arith.shrsi(lhs, arith.select(too_far, c(width - 1), rhs))
    if op == "abs":
        return math.absi(args[0]) if signed else args[0]
    if op == "negate":
        return arith.subi(c(0), args[0])
    if op == "sign":
        x = args[0]
        if not signed:
            return arith.extui(it, arith.cmpi(arith.CmpIPredicate.ne, x, c(0))) if not pred else x
        pos = arith.cmpi(arith.CmpIPredicate.sgt, x, c(0))
        neg = arith.cmpi(arith.CmpIPredicate.slt, x, c(0))
        return arith.select(pos, c(1), arith.select(neg, c(-1), c(0)))
    if op == "popcnt":
        return math.ctpop(args[0])
    if op == "count-leading-zeros":
        return math.ctlz(args[0])
    if op == "power":
        return _int_power(t, *args)
    raise inst.unsupported(f"{op} is not supported for {t}")


def _int_power(t: str, base: ir.Value, exponent: ir.Value) -> ir.Value:
    """XLA's integer power: square-and-multiply over the exponent's bits;
    negative exponents give 0 except for bases 1 and -1."""
    width = bit_width(t)

    def c(v):
        return _const(t, v)

    loop = scf.ForOp(_index_const(0), _index_const(width), _index_const(1),
                     [c(1), base, exponent])
    with ir.InsertionPoint(loop.body):
        acc, b, e = loop.inner_iter_args
        bit = arith.andi(e, c(1))
        odd = arith.cmpi(arith.CmpIPredicate.ne, bit, c(0))
        acc2 = arith.select(odd, arith.muli(acc, b), acc)
        scf.YieldOp([acc2, arith.muli(b, b), arith.shrui(e, c(1))])
    result = loop.results[0]
    if not is_signed_int(t):
        return result
    negative = arith.cmpi(arith.CmpIPredicate.slt, exponent, c(0))
    is_one = arith.cmpi(arith.CmpIPredicate.eq, base, c(1))
    is_minus_one = arith.cmpi(arith.CmpIPredicate.eq, base, c(-1))
    odd = arith.cmpi(arith.CmpIPredicate.ne, arith.andi(exponent, c(1)), c(0))
    minus_one_power = arith.select(odd, c(-1), c(1))
    negative_result = arith.select(is_one, c(1),
                                   arith.select(is_minus_one, minus_one_power, c(0)))
    return arith.select(negative, negative_result, result)


def _min_max(op: str, t: str, a: ir.Value, b: ir.Value) -> ir.Value:
    if is_float(t):
        if _is_f8(t):
            wa, wb = convert(a, t, "f32"), convert(b, t, "f32")
            return convert(_min_max(op, "f32", wa, wb), "f32", t)
        return arith.maximumf(a, b) if op == "maximum" else arith.minimumf(a, b)
    if t == "pred":
        return arith.ori(a, b) if op == "maximum" else arith.andi(a, b)
    if is_signed_int(t):
        return arith.maxsi(a, b) if op == "maximum" else arith.minsi(a, b)
    return arith.maxui(a, b) if op == "maximum" else arith.minui(a, b)


def _compare(inst: HloInstruction, t: str, args: Values) -> ir.Value:
    direction = inst.attrs.get("direction")
    if direction not in _FCMP:
        raise inst.error(f"compare needs direction=EQ|NE|LT|LE|GT|GE, got {direction!r}")
    a, b = args
    if is_float(t):
        if str(inst.attrs.get("type", "")).upper() == "TOTALORDER":
            if bit_width(t) < 8:   # f4: its f32 value orders alike (exact)
                a, b, t = convert(a, t, "f32"), convert(b, t, "f32"), "f32"
            width = bit_width(t)
            it = ir.IntegerType.get_signless(width)
            keys = []
            for x in (a, b):
                bits = arith.bitcast(it, x)
                sign = arith.shrsi(bits, arith.constant(it, width - 1))
                mask = arith.shrui(sign, arith.constant(it, 1))
                keys.append(arith.xori(bits, mask))
            return arith.cmpi(getattr(arith.CmpIPredicate, _ICMP_SIGNED[direction]), *keys)
        if _is_f8(t):
            a, b = convert(a, t, "f32"), convert(b, t, "f32")
        return arith.cmpf(getattr(arith.CmpFPredicate, _FCMP[direction].upper()), a, b)
    table = _ICMP_SIGNED if is_signed_int(t) else _ICMP_UNSIGNED
    return arith.cmpi(getattr(arith.CmpIPredicate, table[direction]), a, b)


def _convert_complex(value: ir.Value, src: str, dst: str) -> ir.Value:
    if not is_complex(src):
        # Real -> complex (an iota or a convert of c64 / c128 too).
        part = complex_part(dst)
        return complex_ops.create_(element_type(dst), convert(value, src, part),
                                   _const(part, 0.0))
    re = complex_ops.re(value)
    if not is_complex(dst):
        return convert(re, complex_part(src), dst)
    a, b = complex_part(src), complex_part(dst)
    return complex_ops.create_(element_type(dst), convert(re, a, b),
                               convert(complex_ops.im(value), a, b))


def convert(value: ir.Value, src: str, dst: str) -> ir.Value:
    """HLO convert: float->int saturates (NaN -> 0), ->pred is `!= 0`;
    real -> complex has a zero imaginary part, complex -> real keeps the
    real part (XLA's)."""
    if src == dst:
        return value
    if is_complex(src) or is_complex(dst):
        return _convert_complex(value, src, dst)
    if src == "f64" and is_float(dst) and bit_width(dst) < 32:
        # Once rounded (see _f64_to_f32_round_to_odd), and without the
        # host's f64 -> bf16 / f16 library calls, which the JIT may lack
        # (`__truncdfbf2`, and `__truncdfhf2` before libgcc 12).
        return convert(_f64_to_f32_round_to_odd(value), "f32", dst)
    if is_minifloat(src):  # exact through f32
        return convert(float8.decode(value, src), "f32", dst)
    if is_minifloat(dst):
        return float8.encode(convert(value, src, "f32"), dst)
    dt = element_type(dst)
    if dst == "pred":
        if is_float(src):
            zero = arith.constant(element_type(src), ir.FloatAttr.get(element_type(src), 0.0))
            return arith.cmpf(arith.CmpFPredicate.UNE, value, zero)
        return arith.cmpi(arith.CmpIPredicate.ne, value, _const(src, 0))
    if src == "pred":
        if is_float(dst):
            return arith.uitofp(dt, value)
        return arith.extui(dt, value)
    if is_float(src) and is_float(dst):
        if bit_width(src) < bit_width(dst) or (bit_width(src) == bit_width(dst) and dst == "f32"):
            return arith.extf(dt, value)
        if bit_width(src) == bit_width(dst):  # f16 <-> bf16: through f32
            return arith.truncf(dt, arith.extf(ir.F32Type.get(), value))
        return arith.truncf(dt, value)
    if not is_float(src) and not is_float(dst):
        # Widths of the values as held (sub-byte integers in an i8).
        ws = ir.IntegerType(element_type(src)).width
        wd = ir.IntegerType(dt).width
        if ws > wd:
            value = arith.trunci(dt, value)
        elif ws < wd:
            value = arith.extsi(dt, value) if is_signed_int(src) else arith.extui(dt, value)
        return wrap_sub_byte(value, dst)
    if not is_float(src):  # int -> float
        return arith.sitofp(dt, value) if is_signed_int(src) else arith.uitofp(dt, value)
    # float -> int: saturating, NaN -> 0 (XLA).
    if bit_width(src) < 32:
        value, src = arith.extf(ir.F32Type.get(), value), "f32"
    ft = element_type(src)
    width = bit_width(dst)
    lo, hi = ((-(1 << (width - 1)), (1 << (width - 1)) - 1) if is_signed_int(dst)
              else (0, (1 << width) - 1))
    raw = arith.fptosi(dt, value) if is_signed_int(dst) else arith.fptoui(dt, value)
    too_big = arith.cmpf(arith.CmpFPredicate.OGE, value, arith.constant(ft, ir.FloatAttr.get(ft, float(hi))))
    too_small = arith.cmpf(arith.CmpFPredicate.OLE, value, arith.constant(ft, ir.FloatAttr.get(ft, float(lo))))
    is_nan = arith.cmpf(arith.CmpFPredicate.UNO, value, value)
    result = arith.select(too_big, _const(dst, hi), raw)
    result = arith.select(too_small, _const(dst, lo), result)
    return arith.select(is_nan, _const(dst, 0), result)
