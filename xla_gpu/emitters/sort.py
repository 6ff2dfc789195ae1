"""The sort emitter: XLA:GPU's bitonic sort over the comparator computation,
in the xla_gpu dialect.

A sort of n elements along one dimension runs the bitonic network of
ceil(log2 n) stages in its "flip" form, which sorts with any comparator
(no ascending/descending halves): stage s first compares element i with
i ^ (2^(s+1) - 1) (the block of 2^(s+1) reversed against itself), then with
i ^ 2^m for m = s-1 .. 0. Each xor mask is one step in which every pair
(i, j = i ^ mask), i < j, is compared by the comparator and swapped when
the element at j goes first. Positions past n behave as elements that sort
last: a pair whose j is out of range is skipped (XLA masks them the same
way), so sizes need no padding.

Steps whose pairs lie inside an aligned tile of `tile` elements (a mask
below the tile size) run in shared memory: one kernel loads a tile per
block (every thread two elements, one per half of the tile), runs those
steps with a `xla_gpu.sync_threads` after each, and writes the tile back:

    %tile = xla_gpu.allocate_shared : tensor<2048xf32>       // one per operand
    %t0 = xla_gpu.loop (%th, %bl)[%e] -> (index..., %local) in #load
              iter_args(%t = %tile) { tensor.insert <operand> into %t[%local] }
    %t1 = xla_gpu.sync_threads %t0
    %t2 = xla_gpu.loop (%th, %bl) -> (%i, %j) in #pairs_mask_1 iter_args(%t = %t1) {
      %a = tensor.extract %t[%i]  %b = tensor.extract %t[%j]
      %swap = <the comparator, inlined>(%b, %a)
      insert select(%swap, %b, %a) at %i, select(%swap, %a, %b) at %j
    }
    %t3 = xla_gpu.sync_threads %t2  ... (one loop + barrier per mask)
    %out = xla_gpu.loop ... { tensor.insert (extract %tN[%local]) into %out[index...] }

A mask at least the tile size compares elements of different tiles: it is
one kernel of its own over global memory (one thread per pair). A sort is
thus a sequence of kernels (XLA's EmitSort): tiled kernels for the runs of
small masks, global kernels in between. The first kernel reads the sort's
operands and writes its results when it is a tiled one (it loads every
element before writing any); every other kernel works in place on the
results (its outputs alias its parameters), after a copy of the operands
into the results when the first kernel is a global one.

A top-k whose rows are long (longer than the tile, or long against k; k at
most 16) is one kernel too, one block a row, as XLA:GPU's TopK kernel (the
plan: `analysis.sort.plan_sort`): each thread keeps its best
k (a power of two, `SortKernelConfig.select`) of a strided part of the
row in registers, inserting each element into its sorted slots, and the
tile's steps sort the candidates of all threads (`_emit_selected`).

Several operands are sorted together (the comparator sees a pair of
scalars of each). The tile is 2048 elements (1024 threads) at most, halved
until the tiles of all operands fit in 48 KiB of shared memory.

Stability (`is_stable=true`): as XLA's StableSortExpander, equal elements
(neither goes first under the comparator) are ordered by their original
index. When the whole sort is one tiled kernel the index lives in an extra
shared-memory tile (no buffer); a sort of several kernels needs it carried
in global memory between them, so the StableSortExpander pass
(`hlo.passes.stable_sort_expander`) adds an s32 iota operand to such sorts
before buffer assignment, with the comparator extended by the tie-break,
exactly as XLA does.

The plan (which steps run in which kernel, the tile) is
`analysis.sort.plan_sort`'s; this module emits one kernel of it. Compiling
a sort's kernels is `op_kernels.compile_sort`'s, running them the thunk
emitter's.

Non-row-major layouts: the kernel works on the physical array (the sort
dimension is moved to its physical position); operands and results must
share one layout.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, scf, tensor

from ..analysis.fusion import Fusion
from ..analysis.indexing import delinearize, map_text
from ..analysis.sort import (INDEX_TYPE, SortKernelConfig, check_comparator, comparator_of,
                             is_stable, is_topk, plan_sort, sort_geometry, topk_comparator)
from ..dialects import xla_gpu
from ..errors import HloError, UnsupportedError
from ..hlo import HloComputation, HloInstruction
from ..ir import IndexingMap
from .base import KernelEmitter, LaunchDims
from .elemental import FunctionEmitter
from .partitioner import sanitize
from .types import element_type

__all__ = ["SortEmitter", "scalar_computation"]

# A tiled kernel with at most this many steps unrolls them, each with its
# pair's index arithmetic folded to constants; more run as a loop over a
# table of their masks (one comparator in the code, not one per step).
MAX_UNROLLED_STEPS = 3


# -- the comparator ------------------------------------------------------------------


def scalar_computation(comp: HloComputation) -> HloComputation:
    """`comp` with the scalar bitcasts that change the element type (XLA
    writes `s32[] bitcast(f32[] x)` in comparators) spelled as
    bitcast-convert, which the elemental emitter lowers to a bit cast."""
    if not any(i.opcode == "bitcast" and i.shape.element_type !=
               i.operands[0].shape.element_type for i in comp.instructions):
        return comp
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.instructions:
        opcode = inst.opcode
        if opcode == "bitcast" and inst.shape.element_type != \
                inst.operands[0].shape.element_type:
            opcode = "bitcast-convert"
        copy = inst.clone_with([mapping[id(o)] for o in inst.operands], opcode=opcode)
        mapping[id(inst)] = copy
        body.append(copy)
    new = HloComputation(comp.name, body, mapping[id(comp.root)], False, comp.location)
    return new.link_instructions()


# -- the emitter --------------------------------------------------------------------


def _join(terms: Sequence[str]) -> str:
    terms = [t for t in terms if t and t != "0"]
    return " + ".join(terms) or "0"


class SortEmitter(KernelEmitter):
    """One kernel of a sort (fusion.config: its SortKernelConfig). The
    fusion computation is the sort (or top-k) over parameters: the sorted
    arrays in physical order."""

    name = "sort"

    def __init__(self, fusion: Fusion):
        super().__init__(fusion)
        if len(fusion.roots) != 1:
            raise HloError(f"fusion '{fusion.name}': the sort emitter needs the sort as "
                           "the only root")
        self.root = root = fusion.roots[0]
        self.operands = list(root.operands)
        for op in self.operands:
            if op.opcode != "parameter":
                raise root.error("the sort emitter sorts fusion parameters only "
                                 f"('{op.name}' is a {op.opcode})")
        types = [op.shape.element_type for op in self.operands]
        self._value_types = types
        config = fusion.config
        topk = is_topk(root)
        if config is None:
            dims, dim, k = sort_geometry(root)
            plan = plan_sort(dims, dim, types, stable=is_stable(root),
                             top_k=k if topk else None)
            if len(plan.kernels) != 1:
                raise UnsupportedError(
                    f"fusion '{fusion.name}': the sort runs as {len(plan.kernels)} "
                    "kernels; compile the module as a program (without fusion=) to "
                    "run them all")
            config = plan.kernels[0]
        self.config: SortKernelConfig = config
        if root.opcode == "topk":   # greatest (or least) first, total order
            largest = root.attrs.get("largest", True)
            comparator = topk_comparator(types[0], largest is True or
                                         str(largest).lower() == "true")
        else:
            comparator = comparator_of(root)
        self.comparator = scalar_computation(comparator)
        # The arrays the comparator sees: the sorted ones (and top-k's
        # indices, which its comparator takes too).
        self._arity = len(types) + (1 if topk else 0)
        check_comparator(root, self.comparator,
                         types + ([INDEX_TYPE] if topk else []))
        if topk:
            if config.top_k is None or not config.tiled:
                raise root.error("internal: a top-k kernel needs a tiled top_k config")
        elif not config.reads_operands:
            self.aliases = {k: k for k in range(len(self.operands))}
        for op in self.operands:
            if tuple(op.shape.dims) != tuple(config.dims):
                raise root.error(f"operand '{op.name}' is {op.shape}, the kernel sorts "
                                 f"arrays of dims {list(config.dims)}")

    # -- KernelEmitter -------------------------------------------------------
    def launch_dims(self) -> LaunchDims:
        launch = self.config.launch()
        return LaunchDims(launch.threads, launch.blocks)

    def root_groups(self):
        return []

    def is_excluded(self, inst) -> bool:
        return inst is self.root

    @property
    def kernel_name(self) -> str:
        return sanitize(self.fusion.name)

    # -- maps -------------------------------------------------------------------
    def _full_index(self, row: str, position: str, dims: Sequence[int]) -> list[str]:
        """The index of element `position` along the sort dim of row `row`."""
        c = self.config
        others = [d for k, d in enumerate(dims) if k != c.dim]
        rest = iter(delinearize(row, others) if others else [])
        return [position if k == c.dim else next(rest) for k in range(len(dims))]

    def _map(self, dims, symbols, results, constraints=()) -> ir.Attribute:
        text = map_text(dims, symbols, results, constraints)
        return self.index_map(str(IndexingMap.parse(text).simplified()))

    @staticmethod
    def _pair(t: str, mask: int) -> tuple[str, str]:
        """The pair (i, j = i ^ mask), i < j, handled by thread/pair `t`."""
        h = mask.bit_length() - 1
        low = 1 << h
        block = f"({t}) floordiv {low}" if low > 1 else f"({t})"
        rest = f"({t}) mod {low}" if low > 1 else "0"
        base = f"({block}) * {2 * low}"
        i = _join([base, rest])
        if mask == low:
            j = _join([base, rest, str(low)])
        else:   # a flip: the block of 2 * low reversed against itself
            j = f"{base} + {2 * low - 1} - {rest}" if rest != "0" else \
                f"{base} + {2 * low - 1}"
        return i, j

    # -- emission ---------------------------------------------------------------
    def emit_entry(self, params, outputs, thread_id, block_id):
        c = self.config
        ids = [thread_id, block_id]
        if c.select:
            return self._emit_selected(params, outputs, ids)
        if c.tiled:
            return self._emit_tiled(params, outputs, ids)
        return self._emit_global(outputs, ids)

    def _comparator_at(self, args: Sequence[ir.Value]) -> ir.Value:
        """The comparator's body emitted in place on `args` (inlined, as
        XLA's sort emitter calls the nested computation into the loop)."""
        root = self.comparator.root
        emitter = FunctionEmitter(self.maps, scalars=list(args),
                                  call_computation=self.call_computation)
        if root.opcode == "tuple":
            raise root.error("a comparator returns pred[], not a tuple")
        return emitter.emit1(root, [])

    def _less(self, first: Sequence[ir.Value], second: Sequence[ir.Value],
              first_index: ir.Value | None, second_index: ir.Value | None) -> ir.Value:
        """Whether `first` goes before `second` (the comparator called with
        (first_0, second_0, first_1, second_1, ...)); with the tie-break,
        elements neither of which goes first are ordered by index."""
        args = [v for pair in zip(first, second) for v in pair]
        less = self._comparator_at(args)
        if not self.config.tie_break:
            return less
        back = [v for pair in zip(second, first) for v in pair]
        greater = self._comparator_at(back)
        same = arith.cmpi(arith.CmpIPredicate.eq, less, greater)
        by_index = arith.cmpi(arith.CmpIPredicate.slt, first_index, second_index)
        return arith.select(same, by_index, less)

    def _compare_swap(self, a: list[ir.Value], b: list[ir.Value], a_index, b_index,
                      valid: ir.Value | None = None
                      ) -> tuple[list[ir.Value], list[ir.Value]]:
        """(new values at i, new values at j) for the pair (i, j): swapped
        when the element at j goes first (and `valid`). Index values ride
        along."""
        arity = self._arity
        swap = self._less(self._decoded(b[:arity]), self._decoded(a[:arity]),
                          b_index, a_index)
        if valid is not None:
            swap = arith.select(valid, swap, arith.constant(ir.IntegerType.get_signless(1), 0))
        new_i = [arith.select(swap, y, x) for x, y in zip(a, b)]
        new_j = [arith.select(swap, x, y) for x, y in zip(a, b)]
        return new_i, new_j

    # 16-bit floats move through shared memory and selects as their bits:
    # the host backend would round-trip them through f32 (a libcall the JIT
    # does not have), and the GPU moves bits either way.
    def _stored_type(self, k: int) -> ir.Type:
        t = self._value_types[k] if k < len(self._value_types) else INDEX_TYPE
        if t in ("bf16", "f16"):
            return ir.IntegerType.get_signless(16)
        return element_type(t)

    def _encode(self, k: int, value: ir.Value) -> ir.Value:
        stored = self._stored_type(k)
        return value if value.type == stored else arith.bitcast(stored, value)

    def _decode(self, k: int, value: ir.Value) -> ir.Value:
        t = self._value_types[k] if k < len(self._value_types) else INDEX_TYPE
        real = element_type(t)
        return value if value.type == real else arith.bitcast(real, value)

    def _decoded(self, values: Sequence[ir.Value]) -> list[ir.Value]:
        return [self._decode(k, v) for k, v in enumerate(values)]

    def _emit_tiled(self, params, outputs, ids):
        c = self.config
        tile, half = c.tile, c.tile // 2
        launch = c.launch()
        dims_ranges = [("th_x", launch.threads), ("bl_x", launch.blocks)]
        if c.num_tiles > 1:
            row, tile_id = f"bl_x floordiv {c.num_tiles}", f"bl_x mod {c.num_tiles}"
        else:
            row, tile_id = "bl_x", "0"
        tile_start = f"({tile_id}) * {tile}" if tile_id != "0" else "0"
        local = f"e * {half} + th_x"
        position = _join([tile_start, local])
        partial = c.n % tile != 0
        in_range = [(position, 0, c.n - 1)] if partial else []
        i32 = ir.IntegerType.get_signless(32)

        source = list(params) if c.reads_operands else list(outputs)
        types = [self._stored_type(k) for k in range(len(self.operands))]
        tiles = [xla_gpu.AllocateSharedOp(ir.RankedTensorType.get([tile], t)).result
                 for t in types]
        if c.index_tile:
            tiles.append(xla_gpu.AllocateSharedOp(
                ir.RankedTensorType.get([tile], i32)).result)
        n_values = len(types)

        # Load: every thread two elements (one per half of the tile).
        load_map = self._map(dims_ranges, [("e", 2)],
                             self._full_index(row, position, c.dims) + [local], in_range)
        loop = xla_gpu.build_loop(load_map, ids, tiles)
        block = loop.region.blocks[0]
        rank = len(c.dims)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            element = args[1:1 + rank]
            slot = args[1 + rank]
            iters = args[2 + rank:]
            written = [tensor.insert(self._encode(k, tensor.extract(src, element)), it,
                                     [slot])
                       for k, (src, it) in enumerate(zip(source, iters[:n_values]))]
            if c.index_tile:
                pos = element[c.dim]
                written.append(tensor.insert(arith.index_cast(i32, pos), iters[-1], [slot]))
            xla_gpu.YieldOp(written)
        current = list(xla_gpu.SyncThreadsOp(list(loop.results)).results)

        # The steps: one pair per thread each, a barrier after each.
        # In a partial tile, a pair whose j is past the end is not swapped
        # (a select rather than a loop constraint: one branch-free body per
        # step; the comparator's result on the unloaded slot is discarded).
        limit = None
        if partial:   # elements of this block's tile: n - tile start
            limit = self.maps.apply(str(IndexingMap.parse(map_text(
                [("bl_x", launch.blocks)], [], [f"{c.n} - {tile_start}"])).simplified()),
                [ids[1]])[0]
        if len(c.masks) > MAX_UNROLLED_STEPS:
            current = self._step_loop(current, ids, dims_ranges, limit)
        else:
            for mask in c.masks:
                current = self._step(current, ids, self._map(
                    dims_ranges, [], list(self._pair("th_x", mask))), limit)

        # Store: every thread writes back the elements it loaded.
        if c.top_k is not None:
            return self._store_top_k(current, outputs, ids, dims_ranges, row, half, 2)
        loop = xla_gpu.build_loop(load_map, ids, list(outputs))
        block = loop.region.blocks[0]
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            element = args[1:1 + rank]
            slot = args[1 + rank]
            iters = args[2 + rank:]
            values = [self._decode(k, tensor.extract(t, [slot]))
                      for k, t in enumerate(current[:n_values])]
            written = [tensor.insert(v, it, element) for v, it in zip(values, iters)]
            xla_gpu.YieldOp(written)
        return list(loop.results)

    def _store_top_k(self, current, outputs, ids, dims_ranges, row: str, threads: int,
                     per_thread: int):
        """The first k elements of the sorted tiles `current` (values, then
        their indices) into the outputs' row `row`: element e * threads +
        th_x for e < per_thread."""
        c = self.config
        out_dims = list(c.dims)
        out_dims[c.dim] = c.top_k
        position = f"e * {threads} + th_x" if per_thread > 1 else "th_x"
        store_map = self._map(dims_ranges, [("e", per_thread)],
                              self._full_index(row, position, out_dims) + [position],
                              [(position, 0, c.top_k - 1)])
        loop = xla_gpu.build_loop(store_map, ids, list(outputs))
        block = loop.region.blocks[0]
        rank = len(c.dims)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            element, slot, iters = args[1:1 + rank], args[1 + rank], args[2 + rank:]
            values = [self._decode(0, tensor.extract(current[0], [slot])),
                      tensor.extract(current[-1], [slot])]
            xla_gpu.YieldOp([tensor.insert(v, it, element) for v, it in zip(values, iters)])
        return list(loop.results)

    def _step(self, current, ids, pair_map, limit, step=None):
        """One step of the network on the tiles `current`: every thread
        compares and swaps its pair, then waits at a barrier. `pair_map`
        gives the pair (i, j) of a thread; or, with `step` (index values
        (mask, h, 2^h - 1) of a step chosen at run time, h the mask's
        highest bit), gives the thread t, and the pair is computed: i is t
        with a 0 bit inserted at bit h, j = i ^ mask (which is (i, i + 2^h)
        for a power of two, and the block of 2^(h+1) reversed against
        itself for a flip)."""
        c = self.config
        n_values = len(self.operands)
        loop = xla_gpu.build_loop(pair_map, ids, current)
        block = loop.region.blocks[0]
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            if step is None:
                li, lj = args[0], args[1]
                iters = args[2:]
            else:
                # (the map's symbols, a thread's pairs, come first)
                mask, high_bit, below = step
                symbols = len(args) - 1 - len(current)
                thread, iters = args[symbols], args[symbols + 1:]
                one = arith.constant(ir.IndexType.get(), 1)
                above = arith.shli(arith.shrui(thread, high_bit), one)
                li = arith.ori(arith.shli(above, high_bit), arith.andi(thread, below))
                lj = arith.xori(li, mask)
            a = [tensor.extract(t, [li]) for t in iters]
            b = [tensor.extract(t, [lj]) for t in iters]
            ai = a[n_values] if c.index_tile else None
            bi = b[n_values] if c.index_tile else None
            valid = None
            if limit is not None:
                valid = arith.cmpi(arith.CmpIPredicate.ult, lj, limit)
            new_i, new_j = self._compare_swap(a, b, ai, bi, valid)
            written = [tensor.insert(y, tensor.insert(x, t, [li]), [lj])
                       for x, y, t in zip(new_i, new_j, iters)]
            xla_gpu.YieldOp(written)
        return list(xla_gpu.SyncThreadsOp(list(loop.results)).results)

    def _step_loop(self, current, ids, dims_ranges, limit, pairs_per_thread: int = 1):
        """The steps as a loop over a table of their masks: one copy of the
        comparator instead of one per step (a tile of 1024 elements has 55
        steps), a barrier at the end of each iteration. Thread t handles
        pairs t, t + threads, ... (`pairs_per_thread` of them)."""
        masks = self.config.masks
        i32 = ir.IntegerType.get_signless(32)
        index = ir.IndexType.get()

        def table(values):
            t = ir.RankedTensorType.get([len(values)], i32)
            return arith.constant(t, ir.DenseElementsAttr.get(
                np.asarray(values, dtype=np.int32), type=t))

        mask_table = table(masks)
        high_bit_table = table([m.bit_length() - 1 for m in masks])
        if pairs_per_thread > 1:
            threads = dims_ranges[0][1]
            thread_map = self._map(dims_ranges, [("p", pairs_per_thread)],
                                   [f"th_x + p * {threads}"])
        else:
            thread_map = self._map(dims_ranges, [], ["th_x"])
        loop = scf.ForOp(arith.constant(index, 0), arith.constant(index, len(masks)),
                         arith.constant(index, 1), list(current))
        with ir.InsertionPoint(loop.body):
            step = loop.induction_variable
            mask = arith.index_cast(index, tensor.extract(mask_table, [step]))
            high_bit = arith.index_cast(index, tensor.extract(high_bit_table, [step]))
            one = arith.constant(index, 1)
            below = arith.subi(arith.shli(one, high_bit), one)
            scf.YieldOp(self._step(list(loop.inner_iter_args), ids, thread_map, limit,
                                   (mask, high_bit, below)))
        return list(loop.results)

    def _emit_selected(self, params, outputs, ids):
        """A top-k over long rows, one block a row (XLA:GPU's TopK kernel's
        plan): thread t keeps the best `select` (value, index)
        pairs of elements t, t + T, t + 2T, ... (T threads) in slots that
        start empty (index -1), inserting each element into the sorted
        slots (a compare-and-swap chain), writes them to the tile at
        t * select, and the tile's bitonic steps sort the T * select
        candidates; the first k are the row's top k. Every thread has at
        least `select` elements (n >= T * select), so no slot stays empty."""
        c = self.config
        slots, tile, n = c.select, c.tile, c.n
        launch = c.launch()
        threads = launch.threads
        dims_ranges = [("th_x", threads), ("bl_x", launch.blocks)]
        index = ir.IndexType.get()
        i32 = ir.IntegerType.get_signless(32)
        thread = ids[0]

        # The row's other coordinates, from the block.
        others = [d for k, d in enumerate(c.dims) if k != c.dim]
        row = self.maps.apply(str(IndexingMap.parse(map_text(
            [("bl_x", launch.blocks)], [], delinearize("bl_x", others) if others else
            ["0"])).simplified()), [ids[1]]) if others else []

        def element(position):
            """(value, s32 index) of the row's element at `position`."""
            rest = iter(row)
            at = [position if k == c.dim else next(rest) for k in range(len(c.dims))]
            return [tensor.extract(params[0], at), arith.index_cast(i32, position)]

        empty = arith.constant(i32, -1)

        def insert(best, candidate, valid):
            """`candidate` into the sorted slots `best` (best first; empty
            ones, of index -1, last): a compare-and-swap down the chain;
            the last one drops out."""
            out = []
            for slot in best:
                swap = arith.ori(arith.cmpi(arith.CmpIPredicate.eq, slot[1], empty),
                                 self._less(candidate, slot, candidate[1], slot[1]))
                real = arith.cmpi(arith.CmpIPredicate.ne, candidate[1], empty)
                swap = arith.andi(swap, arith.andi(real, valid))
                out.append([arith.select(swap, x, y) for x, y in zip(candidate, slot)])
                candidate = [arith.select(swap, y, x) for x, y in zip(candidate, slot)]
            return out

        def position_of(i):
            return arith.addi(arith.muli(i, arith.constant(index, threads)), thread)

        # Empty slots at first (any value: the thread's first element's).
        first = element(thread)[0]
        steps = -(-n // threads)
        loop = scf.ForOp(arith.constant(index, 0), arith.constant(index, steps),
                         arith.constant(index, 1), [first, empty] * slots)
        with ir.InsertionPoint(loop.body):
            carried = list(loop.inner_iter_args)
            position = position_of(loop.induction_variable)
            valid = arith.cmpi(arith.CmpIPredicate.ult, position, arith.constant(index, n))
            safe = arith.select(valid, position, arith.constant(index, 0))
            kept = insert([carried[2 * j:2 * j + 2] for j in range(slots)],
                          element(safe), valid)
            scf.YieldOp([v for slot in kept for v in slot])
        final = list(loop.results)

        # The candidates into the tile: thread t's slots at t * select.
        tiles = [xla_gpu.AllocateSharedOp(ir.RankedTensorType.get([tile], t)).result
                 for t in (self._stored_type(0), i32)]
        base = arith.muli(thread, arith.constant(index, slots))
        for j in range(slots):
            at = [arith.addi(base, arith.constant(index, j))] if j else [base]
            tiles = [tensor.insert(self._encode(0, final[2 * j]), tiles[0], at),
                     tensor.insert(final[2 * j + 1], tiles[1], at)]
        current = list(xla_gpu.SyncThreadsOp(tiles).results)
        current = self._step_loop(current, ids, dims_ranges, None,
                                  pairs_per_thread=tile // 2 // threads)

        # The first k of the tile: values and indices of the row.
        return self._store_top_k(current, outputs, ids, dims_ranges, "bl_x", threads,
                                 -(-c.top_k // threads))

    def _emit_global(self, outputs, ids):
        c = self.config
        (mask,) = c.masks
        launch = c.launch()
        half = c.padded // 2
        pairs = c.rows * half
        linear = _join([f"bl_x * {launch.threads}" if launch.blocks > 1 else "0", "th_x"])
        row = f"({linear}) floordiv {half}" if c.rows > 1 else "0"
        t = f"({linear}) mod {half}" if c.rows > 1 else linear
        i, j = self._pair(t, mask)
        constraints = []
        if launch.threads * launch.blocks > pairs:
            constraints.append((linear, 0, pairs - 1))
        if c.n < c.padded:
            constraints.append((j, 0, c.n - 1))
        pair_map = self._map([("th_x", launch.threads), ("bl_x", launch.blocks)], [],
                             self._full_index(row, i, c.dims) + [j], constraints)
        loop = xla_gpu.build_loop(pair_map, ids, list(outputs))
        block = loop.region.blocks[0]
        rank = len(c.dims)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            at_i = args[:rank]
            at_j = list(at_i)
            at_j[c.dim] = args[rank]
            iters = args[rank + 1:]
            a = [self._encode(k, tensor.extract(it, at_i)) for k, it in enumerate(iters)]
            b = [self._encode(k, tensor.extract(it, at_j)) for k, it in enumerate(iters)]
            new_i, new_j = self._compare_swap(a, b, None, None)
            written = [tensor.insert(self._decode(k, y),
                                     tensor.insert(self._decode(k, x), it, at_i), at_j)
                       for k, (x, y, it) in enumerate(zip(new_i, new_j, iters))]
            xla_gpu.YieldOp(written)
        return list(loop.results)
