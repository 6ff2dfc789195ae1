"""The scatter emitter: one thread per update element. The output buffer is
the operand's (the entry arguments share `xla.slice_index`, as for the
in-place dynamic-update-slice), so only updated elements are written.

    %out = xla_gpu.loop (%th, %bl)[%v] -> (update index) in #updates
             iter_args(%o = %output) {
      %start = <scatter index vector, as indices>       // from the indices operand
      %ok = start fits the whole window in the operand  // else the update is skipped
      %u = xla_gpu.pure_call @updates(..., update index)
      scf.if %ok {
        // unique_indices: read, combine, write
        // otherwise:      xla_gpu.atomic_rmw %o[operand index] { combiner(%current, %u) }
      }
    }

Combiners that map to hardware atomics (add, min, max, or, and, exchange...)
become `llvm.atomicrmw` in lower-tensors; others a compare-and-swap loop.

An f32 scatter-add of whole rows (the window's minor dimension is the
operand's, not indexed, and a multiple of 4 or 2 long) gives each thread 4
(or 2) consecutive update elements, read as one vector, as XLA:GPU does; on
sm_90 one atomic_rmw on the vector adds them (one `red.global.add.v4.f32`
instead of four scalar reductions; the cpu target does one atomic per
lane), on older GPUs one atomic_rmw per lane.

A variadic scatter (N operands, one indices array, N updates; the combiner
takes the N current values then the N updates and returns an N-tuple) is
emitted as XLA does for unique indices: one thread per update element reads
the N current values, calls the combiner and inserts the N results. With
possibly repeated indices no atomic can update N elements together, so one
thread walks every update in row-major order (the order the reference
semantics combine them in): correct, and slow for large updates.

Sorted indices (`indices_are_sorted`, not unique, more index vectors than
the GPU runs warps at once), as XLA:GPU's distributed-indices scatter: each
warp walks its own run of consecutive index vectors, its lanes holding the
slice's elements (a few consecutive ones each, strided by the warp), and
adds the updates of equal indices in registers; only when the index changes
(and after the last one) does it write the sum, with atomics (a run may
continue in the next warp). A run of k equal indices then costs one atomic
per element instead of k:

    %out = scf.for %p = 0 to per_warp iter_args(%prev, %in_bounds, %acc..., %o) {
      %start = <index vector at warp * per_warp + %p>
      %o2 = scf.if (%p != 0 && %start != %prev && %in_bounds) { flush %acc at %prev }
      %acc2 = %start != %prev ? <updates> : combiner(%acc, <updates>)
    }
    flush %acc at the last index

Refused (the fusion cannot be emitted yet): batching dimensions, scatters
whose operands are not fusion parameters, epilogues.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd, prod
from typing import Sequence

from mlir import ir
from mlir.dialects import arith, scf, tensor, vector

from ..analysis.fusion import scatter_refusal
from ..analysis.indexing import delinearize, dim, indexing_map, sym
from ..dialects import xla_gpu
from ..hlo import HloError
from ..hlo.interpreter.reductions import simple_binary
from ..hlo.shape import bit_width, is_complex, is_unsigned_int
from .base import KernelEmitter, LaunchDims
from .elemental import emit_elementwise
from .loop_config import loop_config, thread_to_output_map, with_unroll
from .types import element_type, scalar_attr

__all__ = ["ScatterEmitter", "SortedScatterPlan", "sorted_scatter_plan", "window_extents"]

# The sorted-indices scatter's blocks: 4 warps (XLA's kNumWarpsPerBlock).
_WARPS_PER_BLOCK = 4
_WARP = 32
# Register slots (update elements) a lane may accumulate; a larger slice
# takes one thread per update element.
_MAX_ACCUMULATED = 64


@dataclass(frozen=True)
class SortedScatterPlan:
    """The sorted-indices scatter's layout: `slices` index vectors, each
    warp walking `per_warp` consecutive ones; a slice of `window` elements,
    each lane holding `vector` consecutive ones per step, `steps` steps a
    warp's width apart."""
    slices: int
    per_warp: int
    window: int
    vector: int
    steps: int

    @property
    def blocks(self) -> int:
        return -(-self.slices // (self.per_warp * _WARPS_PER_BLOCK))


def window_extents(scatter, operand_rank: int, window: Sequence[int]) -> list[int]:
    """The update window's extent along each operand dimension (`window`:
    the update's window dimensions' sizes; 1 for an inserted dimension)."""
    inserted = set(scatter.attrs.get("inserted_window_dims", ()))
    sizes = iter(window)
    return [1 if dim in inserted else next(sizes) for dim in range(operand_rank)]


def sorted_scatter_plan(scatter, operand, indices, updates_dims, device):
    """The plan of a scatter the sorted-indices emitter takes (XLA's rule:
    sorted, not unique, more index vectors than the GPU's resident warps,
    at least two per warp), or None. Only the normalized form: one index
    vector per leading update dimension, the window the other dims."""
    a = scatter.attrs
    rank = len(updates_dims)
    t = operand.shape.element_type
    if device.host_emulation:
        # The grid emulation runs a thread per update element as one SIMD
        # loop; the warps' walks are branchy scalar loops there (a sorted
        # segment sum of 200000 rows of 64 took 14.5 ms instead of 9.1).
        return None
    if not a.get("indices_are_sorted") or a.get("unique_indices") or rank == 0 or \
            is_complex(t) or list(a.get("update_window_dims", ())) != list(range(1, rank)):
        return None
    ivd = a.get("index_vector_dim", indices.shape.rank)
    if ivd != 1 or indices.shape.rank not in (1, 2):
        return None
    bits = bit_width(t)
    if bits < 8 or 128 % bits:
        return None
    slices = updates_dims[0]
    warps = _WARPS_PER_BLOCK * device.core_count
    if slices <= warps:
        return None
    sizes = window_extents(scatter, operand.shape.rank, updates_dims[1:])
    # How many distinct valid index vectors there are: more warps than that
    # would only split runs of equal indices.
    possible = prod(max(operand.shape.dims[d] - sizes[d] + 1, 0)
                    for d in a.get("scatter_dims_to_operand_dims", ()))
    per_warp = -(-slices // max(warps, possible))
    if per_warp < 2:
        return None
    elements = prod(updates_dims[1:])
    lanes = gcd(elements, 128 // bits)
    while lanes > 1 and _WARP * lanes > elements:
        lanes //= 2
    steps = -(-elements // (_WARP * lanes))
    if steps * lanes > _MAX_ACCUMULATED:
        return None
    return SortedScatterPlan(slices, per_warp, elements, lanes, steps)


class ScatterEmitter(KernelEmitter):
    name = "scatter"

    def __init__(self, fusion):
        super().__init__(fusion)
        refusal = scatter_refusal(fusion.roots)   # the analysis' rule
        if refusal is not None:
            raise HloError(f"fusion '{fusion.name}': the scatter emitter cannot take it: "
                           f"{refusal}")
        self.scatter = s = fusion.roots[0]
        if len(s.operands) < 3 or len(s.operands) % 2 == 0:
            raise s.error(f"a scatter takes N operands, the indices and N updates; "
                          f"it has {len(s.operands)} operands")
        # N operands, the indices, N updates.
        self.count = n = (len(s.operands) - 1) // 2
        self.operands = list(s.operands[:n])
        self.indices = s.operands[n]
        self.updates = list(s.operands[n + 1:])
        a = s.attrs
        if a.get("input_batching_dims") or a.get("scatter_indices_batching_dims"):
            raise s.unsupported("scatter with batching dimensions is not supported yet")
        for k, operand in enumerate(self.operands):
            self.aliases[k] = operand.parameter_number
        self.updates_dims = list(self.updates[0].shape.dims)
        self.config = loop_config(self.updates_dims, fusion.computation.instructions,
                                  [o.shape.element_type for o in self.operands],
                                  fusion.device)
        self.unique = bool(a.get("unique_indices", False))
        # Several outputs with repeated indices: one thread does every update.
        self.serial = n > 1 and not self.unique
        self.sorted = None if n > 1 else sorted_scatter_plan(
            s, self.operands[0], self.indices, self.updates_dims, fusion.device)
        self.lanes = 1 if self.sorted else self._vector_lanes()
        self.vector_atomics = fusion.device.compute_capability >= 90
        if self.lanes > 1:
            # A thread per `lanes` consecutive update elements of a row.
            units = self.updates_dims[:-1] + [self.updates_dims[-1] // self.lanes]
            self.config = with_unroll(loop_config(
                units, fusion.computation.instructions,
                [o.shape.element_type for o in self.operands], fusion.device), 1)

    def _vector_lanes(self) -> int:
        """4 or 2 when each thread can add that many consecutive f32 update
        elements into the operand, read as one vector and added by one
        vector atomic (sm_90's red.global.add.v4.f32 wants them 16- or
        8-byte aligned; older GPUs do one atomic per lane), else 1."""
        return next((k for k in (4, 2) if self._adds_rows_of(k)), 1)

    def _adds_rows_of(self, k: int) -> bool:
        """Whether the scatter adds f32 rows whose elements, `k` at a time
        from a multiple of `k`, are consecutive and `k`-aligned in the
        operand: what a vector atomic of `k` lanes needs."""
        s, operand = self.scatter, self.operands[0]
        a = s.attrs
        rank = len(self.updates_dims)
        minor = operand.shape.rank - 1
        if (self.count != 1 or self.unique or
                operand.shape.element_type != "f32" or rank == 0 or minor < 0 or
                simple_binary(a["to_apply"], "f32") != "add"):
            return False
        # The update's minor dimension must be the window's minor one, laid
        # on the operand's minor dimension, which no index moves (so the
        # row starts at offset 0 of the operand's row).
        if (rank - 1 not in a.get("update_window_dims", ()) or
                minor in a.get("inserted_window_dims", ()) or
                minor in a.get("scatter_dims_to_operand_dims", ())):
            return False
        return self.updates_dims[-1] % k == 0 and operand.shape.dims[minor] % k == 0

    def launch_dims(self) -> LaunchDims:
        if self.serial:
            return LaunchDims(1, 1)
        if self.sorted:
            return LaunchDims(_WARP * _WARPS_PER_BLOCK, self.sorted.blocks)
        return super().launch_dims()

    def root_groups(self):
        return []

    def is_subgraph_root(self, inst) -> bool:
        return any(inst is o for o in self.scatter.operands[self.count:])

    def is_excluded(self, inst) -> bool:
        return inst is self.scatter

    def _loop_map(self):
        if self.lanes > 1:
            units = self.updates_dims[:-1] + [self.updates_dims[-1] // self.lanes]
            return thread_to_output_map(self.config, units)
        if not self.serial:
            return thread_to_output_map(self.config, self.updates_dims)
        # One thread: every update index is a loop symbol.
        symbols = [(f"u{k}", d) for k, d in enumerate(self.updates_dims)]
        return indexing_map([("th_x", 1), ("bl_x", 1)], symbols,
                            [sym(k) for k in range(len(symbols))])

    def emit_entry(self, params, outputs, thread_id, block_id):
        if self.sorted:
            return self._emit_sorted(params, outputs, thread_id, block_id)
        s = self.scatter
        n = self.count
        operand, indices = self.operands[0], self.indices
        a = s.attrs
        window_dims = list(a.get("update_window_dims", ()))
        inserted = set(a.get("inserted_window_dims", ()))
        to_operand = list(a.get("scatter_dims_to_operand_dims", ()))
        ivd = a.get("index_vector_dim", indices.shape.rank)
        index = ir.IndexType.get()
        attr = self.index_map(self._loop_map())
        loop = xla_gpu.build_loop(attr, [thread_id, block_id], list(outputs[:n]))
        block = loop.region.blocks[0]
        rank = len(self.updates_dims)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            u_index = args[-n - rank:-n]
            outs = args[-n:]
            if self.lanes > 1:   # the loop runs over units of `lanes` elements
                u_index[-1] = arith.muli(u_index[-1], arith.constant(index, self.lanes))
            emitter = self.function_emitter(params, lambda i: False)
            batch = [d for i, d in enumerate(u_index) if i not in window_dims]
            window = [d for i, d in enumerate(u_index) if i in window_dims]
            window_sizes = [self.updates_dims[i] for i in window_dims]
            # Window offsets and sizes per operand dimension.
            offsets, sizes, w = [], [], iter(zip(window, window_sizes))
            for dim in range(operand.shape.rank):
                if dim in inserted:
                    offsets.append(None)
                    sizes.append(1)
                else:
                    off, size = next(w)
                    offsets.append(off)
                    sizes.append(size)
            starts: list = [None] * operand.shape.rank
            for k, dim in enumerate(to_operand):
                position = list(batch)
                if ivd < indices.shape.rank:
                    position.insert(ivd, arith.constant(index, k))
                starts[dim] = self._start(emitter.emit1(indices, position))
            ok = self._fits({dim: st for dim, st in enumerate(starts) if st is not None},
                            sizes)
            target = [off if st is None else st if off is None else arith.addi(st, off)
                      for st, off in zip(starts, offsets)]
            if self.lanes > 1:
                values = [self._lane_values(emitter, params, u_index)]
            else:
                values = [emitter.emit1(u, u_index) for u in self.updates]
            combiner = s.attrs["to_apply"]

            def update() -> list[ir.Value]:
                if self.lanes > 1:
                    return [self._vector_add(outs[0], target, values[0])]
                if self.unique or self.serial:
                    current = [tensor.extract(o, target) for o in outs]
                    new = self.call_computation(combiner, current + values)
                    return [tensor.insert(v, o, target) for v, o in zip(new, outs)]
                return [self._atomic(outs[0], target, combiner, values[0])]

            if ok is None:
                result = update()
            else:
                if_op = scf.IfOp(ok, [o.type for o in outs], has_else=True)
                with ir.InsertionPoint(if_op.then_block):
                    scf.YieldOp(update())
                with ir.InsertionPoint(if_op.else_block):
                    scf.YieldOp(outs)
                result = list(if_op.results)
            xla_gpu.YieldOp(result)
        return list(loop.results)

    def _start(self, value: ir.Value) -> ir.Value:
        """An element of an index vector as an index (unsigned ones
        zero-extended)."""
        cast = arith.index_castui if is_unsigned_int(self.indices.shape.element_type) \
            else arith.index_cast
        return cast(ir.IndexType.get(), value)

    def _fits(self, starts: dict, sizes: Sequence[int]) -> ir.Value | None:
        """Whether the window at `starts` (operand dimension -> start)
        lies inside the operand (else the update is skipped); None when no
        dimension is indexed."""
        index = ir.IndexType.get()
        dims = self.operands[0].shape.dims
        ok = None
        for dim, start in starts.items():
            inside = arith.andi(
                arith.cmpi(arith.CmpIPredicate.sge, start, arith.constant(index, 0)),
                arith.cmpi(arith.CmpIPredicate.sle, start,
                           arith.constant(index, dims[dim] - sizes[dim])))
            ok = inside if ok is None else arith.andi(ok, inside)
        return ok

    def _lane_values(self, emitter, params, u_index) -> ir.Value:
        """The thread's `lanes` consecutive update elements from `u_index`
        on, as one vector: one vector load where the updates are a fusion
        parameter (a row's lanes are aligned as the vector atomic's are)."""
        updates = self.updates[0]
        f32 = ir.F32Type.get()
        lanes_type = ir.VectorType.get([self.lanes], f32)
        if updates.opcode == "parameter":
            rank = len(u_index)
            return vector.transfer_read(
                lanes_type, params[updates.parameter_number], u_index,
                ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(rank, 1)),
                arith.constant(f32, 0.0), [True])
        index = ir.IndexType.get()
        lanes = [emitter.emit1(updates, u_index)]
        for k in range(1, self.lanes):
            at = u_index[:-1] + [arith.addi(u_index[-1], arith.constant(index, k))]
            lanes.append(emitter.emit1(updates, at))
        return vector.from_elements(lanes_type, lanes)

    def _vector_add(self, out, target, value) -> ir.Value:
        combiner = self.scatter.attrs["to_apply"]
        if not self.vector_atomics:   # one atomic per lane
            index = ir.IndexType.get()
            for k in range(self.lanes):
                at = target[:-1] + [arith.addi(target[-1], arith.constant(index, k))]
                out = self._atomic(out, at, combiner, vector.extract(value, [], [k]))
            return out
        return self._atomic(out, target, combiner, value, self.lanes)

    def _atomic(self, out, target, combiner, value, lanes: int = 1) -> ir.Value:
        """combiner(out[target], value), atomically; with `lanes` > 1 on
        that many consecutive elements (`value` a vector)."""
        op = xla_gpu.build_atomic_rmw(out, target, lanes=lanes)
        with ir.InsertionPoint(op.regions[0].blocks[0]):
            current = op.regions[0].blocks[0].arguments[0]
            xla_gpu.YieldOp([self._combine(combiner, current, value)])
        return op.result

    def _combine(self, combiner, current: ir.Value, value: ir.Value) -> ir.Value:
        """combiner(current, value): a combiner that is one op of its two
        parameters emitted as that op, so that an atomic's region maps to
        one hardware atomic however many times the kernel combines (a call
        is inlined only where it is the callee's one call); else a call."""
        t = self.operands[0].shape.element_type
        kind = simple_binary(combiner, t)
        if kind == "assign":
            return value
        if kind is not None:
            first = combiner.parameters[0]
            args = [current if o is first else value for o in combiner.root.operands]
            return emit_elementwise(combiner.root, [t, t], args)
        return self.call_computation(combiner, [current, value])[0]

    # -- sorted indices -----------------------------------------------------

    def _emit_sorted(self, params, outputs, thread_id, block_id):
        plan = self.sorted
        s, operand, indices = self.scatter, self.operands[0], self.indices
        a = s.attrs
        to_operand = list(a.get("scatter_dims_to_operand_dims", ()))
        inserted = set(a.get("inserted_window_dims", ()))
        sizes = window_extents(s, operand.shape.rank, self.updates_dims[1:])
        combiner = a["to_apply"]
        index = ir.IndexType.get()
        i1 = ir.IntegerType.get_signless(1)
        t = operand.shape.element_type
        value_type = element_type(t)

        def c(v):
            return arith.constant(index, v)

        emitter = self.function_emitter(params, lambda i: False)
        lane = arith.remui(thread_id, c(_WARP))
        warp = arith.addi(arith.muli(block_id, c(_WARPS_PER_BLOCK)),
                          arith.divui(thread_id, c(_WARP)))
        first = arith.muli(warp, c(plan.per_warp))
        # The lane's slots: window element lane * vector + v + step * 32 * vector,
        # its coordinates, and whether it is inside the window (None: always).
        window_dims = self.updates_dims[1:]
        # A window element's linear index -> its coordinates.
        coordinates = self.index_map(indexing_map(
            [("linear", plan.window)], [], delinearize(dim(0), window_dims)))
        slots = []
        for step in range(plan.steps):
            for v in range(plan.vector):
                base = v + step * _WARP * plan.vector
                linear = arith.addi(arith.muli(lane, c(plan.vector)), c(base))
                inside = None
                if base + (_WARP - 1) * plan.vector >= plan.window:
                    inside = arith.cmpi(arith.CmpIPredicate.ult, linear, c(plan.window))
                    linear = arith.minui(linear, c(plan.window - 1))  # a safe read
                slots.append((xla_gpu.build_apply_indexing(coordinates, [linear]), inside))

        def starts_at(position):
            return [self._start(emitter.emit1(
                        indices, [position] if indices.shape.rank == 1 else [position, c(k)]))
                    for k in range(len(to_operand))]

        def targets(starts):
            """Each slot's operand index for the index vector `starts`."""
            by_dim = dict(zip(to_operand, starts))
            result = []
            for coords, _ in slots:
                window = iter(coords)
                target = []
                for dim in range(operand.shape.rank):
                    start = by_dim.get(dim)
                    if dim in inserted:
                        target.append(start if start is not None else c(0))
                    else:
                        coord = next(window)
                        target.append(coord if start is None else arith.addi(start, coord))
                result.append(target)
            return result

        # sm_90: a step's `vector` slots are consecutive elements of a row,
        # added by one vector atomic (as XLA vectorizes the atomics of the
        # lane's vector loop).
        lanes = plan.vector if self.vector_atomics and plan.vector > 1 and \
            self._adds_rows_of(plan.vector) else 1

        def flush(starts, acc, out):
            places = targets(starts)
            for first in range(0, len(slots), lanes):
                inside, target = slots[first][1], places[first]
                value = acc[first] if lanes == 1 else vector.from_elements(
                    ir.VectorType.get([lanes], value_type), acc[first:first + lanes])

                def write(o, target=target, value=value):
                    return self._atomic(o, target, combiner, value, lanes)
                if inside is None:
                    out = write(out)
                else:
                    (out,) = if_then(inside, lambda o: [write(o[0])], [out])
            return out

        def if_then(cond, then, state):
            """scf.if `cond` -> then(state) else state (a list of values)."""
            if_op = scf.IfOp(cond, [v.type for v in state], has_else=True)
            with ir.InsertionPoint(if_op.then_block):
                scf.YieldOp(then(state))
            with ir.InsertionPoint(if_op.else_block):
                scf.YieldOp(state)
            return list(if_op.results)

        count = len(to_operand)
        zero = arith.constant(value_type, scalar_attr(t, 0))
        init = [c(-1)] * count + [arith.constant(i1, 0)] + [zero] * len(slots) + \
            [outputs[0]]
        loop = scf.ForOp(c(0), c(plan.per_warp), c(1), init)
        with ir.InsertionPoint(loop.body):
            p = loop.induction_variable
            state = list(loop.inner_iter_args)
            position = arith.addi(first, p)
            active = arith.cmpi(arith.CmpIPredicate.ult, position, c(plan.slices))

            def step(state):
                prev, in_bounds = state[:count], state[count]
                acc, out = state[count + 1:-1], state[-1]
                starts = starts_at(position)
                changed = None
                for new, old in zip(starts, prev):
                    ne = arith.cmpi(arith.CmpIPredicate.ne, new, old)
                    changed = ne if changed is None else arith.ori(changed, ne)
                if changed is None:   # no index vector: every update one element
                    changed = arith.constant(i1, 1)
                later = arith.cmpi(arith.CmpIPredicate.ne, p, c(0))
                write = arith.andi(arith.andi(later, changed), in_bounds)
                (out,) = if_then(write, lambda o: [flush(prev, acc, o[0])], [out])
                fits = self._fits(dict(zip(to_operand, starts)), sizes)
                in_bounds = arith.constant(i1, 1) if fits is None else \
                    arith.select(changed, fits, in_bounds)

                def accumulate(acc):
                    new = []
                    for (coords, _), held in zip(slots, acc):
                        value = emitter.emit1(self.updates[0], [position] + coords)
                        summed = self._combine(combiner, held, value)
                        new.append(arith.select(changed, value, summed))
                    return new

                acc = if_then(in_bounds, accumulate, list(acc)) if acc else []
                return list(starts) + [in_bounds] + acc + [out]

            scf.YieldOp(if_then(active, step, state))
        final = list(loop.results)
        prev, in_bounds = final[:count], final[count]
        acc, out = final[count + 1:-1], final[-1]
        (out,) = if_then(in_bounds, lambda o: [flush(prev, acc, o[0])], [out])
        return [out]
