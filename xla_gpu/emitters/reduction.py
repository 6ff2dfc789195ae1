"""The reduction emitters: XLA's Row, MultiRow and Column reductions, for
fusions whose reduce heroes reduce contiguous dimensions (after dropping
size-1 dimensions). The fusion analysis decides which fusions they take
(`analysis.reduction.reduction_refusal`); the others go to the loop
emitter, which reduces sequentially in each thread.

The reduce input is seen as [K, R] (row: the reduced dimensions are the
minor ones) or [K0, R, K1] (column: kept dimensions below them). Every
variant runs one `xla_gpu.loop` in which each thread accumulates its share
of a row or column (and writes the side outputs, roots shaped like the
reduce input), then combines the threads' partials and writes the reduced
values through the elementwise epilogues of the reduces (functions that
receive the reduced value).

Row reduction (`RowReductionEmitter`), `t` threads per row (a power of two,
at least a warp), `v` elements per thread and step (vector loads):

    %acc = xla_gpu.loop (%th, %bl)[%s, %j] -> (input index) in #row
             iter_args(%a = init)        // each thread: a strided slice of its row
    %w = xla_gpu.shuffle_reduce(%acc) to 16 combiner=@reducer
    // t > 32: one partial per warp through shared memory
    %sh = xla_gpu.predicated_insert %w into %shmem[row, warp] if lane == 0
    %sy = xla_gpu.sync_threads %sh
    %p = xla_gpu.predicated_extract %sy[row, lane] if lane < warps else init
    %r = xla_gpu.shuffle_reduce(%p) to warps/2 combiner=@reducer
    %out = xla_gpu.predicated_insert @epilogue(%r) into %output[...] if first thread of row

Multi-row reduction (`MultiRowReductionEmitter`, XLA's rule): power-of-two
rows that fit a warp's vector loads share warps, `t` lanes per row; the
shuffle stops at distance t/2 and no shared memory is needed.

Column reduction (`ColumnReductionEmitter`): 32x32 threads per block cover
32 * lanes columns; thread (x, y) accumulates rows y, y+32, ... of `lanes`
adjacent columns (one accumulator each: vector loads along the row); the
partials go through a 32 x (32 * lanes) shared tile (padded by one), are
read back transposed, and a warp shuffle finishes each column. With many
reduced values, fewer lanes and then fewer warps keep the tiles within the
shared-memory budget (`analysis.shared_memory`), as every variant does.

Small column reduction (`SmallColumnReductionEmitter`): when the kept minor
size divides a warp, one block walks a K0 index's [R, K1] slab linearly;
the partials meet in a `shared_rows` x K1 tile and a shuffle over
`shared_rows` lanes finishes each column.

Host variants (the cpu target's grid emulation, `_for_host`): a thread per
kept column (`ThreadPerColumnReductionEmitter`: SIMD across columns, a
concatenate along them read per operand, one operand per block) and a
thread per short row (`ThreadPerRowReductionEmitter`), with no shared tile
and no shuffle, from HOST_SMALL_MIN_ELEMENTS input elements on.

Every variant writes its results with `xla_gpu.predicated_insert`.
"""

from __future__ import annotations

from math import gcd

from mlir import ir
from mlir.dialects import arith, func, scf, tensor, vector
from mlir.dialects import complex as complex_ops
from mlir.ir import AffineExpr

from ..analysis.indexing import (const, delinearize, dim, floordiv, indexing_map,
                                linearize, sym)
from ..analysis.epilogue import has_epilogue, selects_output
from ..analysis.reduction import (ReductionLayout, checked_layout, checked_layouts,
                                  heroes_read_elsewhere, reduce_heroes, reduction_groups)
from ..analysis.shared_memory import (MAX_THREADS_PER_ROW,  # noqa: F401 (re-exported)
                                      MIN_ROW_ELEMENTS_PER_THREAD, THREADS_PER_BLOCK_TARGET,
                                      column_tile_width, column_tiles, column_vector_size,
                                      input_bits, output_bits, reduction_partial_bytes,
                                      row_tiles, small_column_tiles)
from ..dialects import xla_gpu
from ..hlo import HloInstruction
from .base import WARP_SIZE, KernelEmitter, LaunchDims

__all__ = ["ReductionEmitter", "RowReductionEmitter", "MultiRowReductionEmitter",
           "ColumnReductionEmitter", "SmallColumnReductionEmitter",
           "ThreadPerColumnReductionEmitter", "ThreadPerRowReductionEmitter", "reduction_emitter"]

# vector.extract / vector.insert at a position given by a value.
_DYNAMIC = ir.ShapedType.get_dynamic_size()
COLUMN_TILE = WARP_SIZE



def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def _input_index(layout: ReductionLayout, k: AffineExpr, r: AffineExpr) -> list[AffineExpr]:
    """The reduce input's index from the kept linear index `k` and the
    reduced linear index `r`."""
    kept = iter(_output_index(layout, k))
    reduced = iter(delinearize(r, [layout.dims[i] for i in layout.reduced]))
    return [next(reduced) if i in layout.reduced else next(kept)
            for i in range(len(layout.dims))]


def _output_index(layout: ReductionLayout, k: AffineExpr) -> list[AffineExpr]:
    return delinearize(k, [layout.dims[i] for i in layout.kept]) if layout.kept else []


def _linear_parts(layout: ReductionLayout, index: list[AffineExpr]) -> tuple[AffineExpr,
                                                                              AffineExpr]:
    """(kept linear index, reduced linear index) of the reduce input index
    `index` (the inverse of `_input_index`)."""
    kept = linearize([index[i] for i in layout.kept], [layout.dims[i] for i in layout.kept])
    reduced = linearize([index[i] for i in layout.reduced],
                        [layout.dims[i] for i in layout.reduced])
    return kept, reduced


def reduction_emitter(fusion) -> "ReductionEmitter":
    """The variant XLA would run (CreateReductionFusion): for kept dimensions
    below the reduced ones, the small-column emitter when the kept minor
    size divides a warp, the column emitter otherwise; for rows, multi-row
    when a power-of-two row fits a warp's vector loads, row otherwise; on
    the host, a thread per column or per short row (`_for_host`)."""
    layout = checked_layout(fusion.roots, fusion.heroes)
    if not layout.is_row:
        if _thread_per_column(fusion, layout):
            return ThreadPerColumnReductionEmitter(fusion, layout)
        if WARP_SIZE % layout.K1 == 0:
            return SmallColumnReductionEmitter(fusion, layout)
        return ColumnReductionEmitter(fusion, layout)
    if _thread_per_row(fusion, layout):
        return ThreadPerRowReductionEmitter(fusion, layout)
    if layout.R0 == 1 and _multi_row_vector(fusion, layout) is not None:
        return MultiRowReductionEmitter(fusion, layout)
    return RowReductionEmitter(fusion, layout)


_THREADS_PER_BLOCK_TARGET = THREADS_PER_BLOCK_TARGET
# Reductions of at least this many input elements are configured for the
# host when the cpu target emulates the grid: column reductions take a
# thread per column, rows of at most HOST_SHORT_ROW elements a thread per
# row: an attention softmax's maxima over 1024 rows of 32 ran 2-4x faster
# so than in the multi-row layout's emulated shuffles, an LSTM step's
# 16x512 column sums 2x faster than through the emulated shared tile.
# Below, the GPU configurations run there too: they are what the cpu
# target's emitter tests check on small shapes.
HOST_SMALL_MIN_ELEMENTS = 1 << 11
HOST_SHORT_ROW = 128
# Column reductions take a thread per column when the kept rows are at
# least a SIMD register of f32 wide.
HOST_COLUMN_MIN_K1 = 8
# Longer row reductions on the host: each thread reduces at least this
# many elements of its row, one per load; from this many elements in all
# (the same emitter as on the GPU, with other thread counts and no vectors).
HOST_ROW_ELEMENTS_PER_THREAD = 128
HOST_ROW_MIN_ELEMENTS = 1 << 12


def _for_host(fusion, layout: ReductionLayout, min_elements: int) -> bool:
    """Whether to configure a reduction for the host's SIMD lanes rather
    than for a GPU. The grid emulation runs a block's threads as SIMD
    lanes: what is cheap on a GPU (a shared tile read transposed, warp
    shuffles, many threads each reducing a few vectors) is emulated with
    loops over all threads, which for the GPU configurations cost 2-3x the
    reduction itself."""
    device = getattr(fusion, "device", None)
    return bool(device is not None and device.host_emulation and
                layout.K * layout.R >= min_elements)


def _thread_per_column(fusion, layout: ReductionLayout) -> bool:
    """A column reduction on the host: a thread per kept element reads
    each row with contiguous vector loads and needs no exchange (on a GPU
    the 32x32 shared tile makes the loads coalesced and the threads many)."""
    return _for_host(fusion, layout, HOST_SMALL_MIN_ELEMENTS) and \
        layout.K1 >= HOST_COLUMN_MIN_K1


def _thread_per_row(fusion, layout: ReductionLayout) -> bool:
    """Short rows on the host: a thread per row walks it in order, the
    thread loop runs over many rows (SIMD lanes: one row each), and no
    shuffle is emulated (the multi-row layout spends more on its emulated
    shuffles and masked lanes than on the loads)."""
    return _for_host(fusion, layout, HOST_SMALL_MIN_ELEMENTS) and layout.R0 == 1 and \
        layout.R <= HOST_SHORT_ROW and \
        layout.K >= ThreadPerColumnReductionEmitter.MIN_EXACT_THREADS


def _input_bits(fusion) -> int | None:
    """The narrowest element type among the fusion's parameters (None
    without parameters)."""
    return input_bits([p.shape.element_type for p in fusion.parameters
                       if not p.shape.is_tuple])


def _output_bits(fusion) -> int:
    return output_bits([s.element_type for s in fusion.output_shapes])


def _multi_row_threads(layout: ReductionLayout, vector: int) -> tuple[int, int]:
    """(rows per block, threads per row) of a multi-row reduction."""
    per_row = layout.R // vector
    if layout.K * per_row <= _THREADS_PER_BLOCK_TARGET:
        # At least a whole warp: the shuffles need every lane (rows past
        # the last are masked off).
        return max(layout.K, WARP_SIZE // per_row), per_row
    return max(1, _THREADS_PER_BLOCK_TARGET // per_row), per_row


def _multi_row_vector(fusion, layout: ReductionLayout) -> int | None:
    """XLA's MultiRowReductionFusion::TryCreate: the vector size of a
    multi-row reduction, or None when rows need the row emitter (a row
    length that is not a power of two, or longer than a warp's vectors)."""
    R = layout.R
    if R & (R - 1):
        return None
    inputs, outputs = _input_bits(fusion), _output_bits(fusion)
    smallest = min(inputs, outputs) if inputs is not None else outputs
    largest = max(inputs, outputs) if inputs is not None else outputs
    v = min(R, 64 // smallest)
    if largest >= 32:
        v = min(128 // largest, v)
    v = max(v, 1)
    if R > WARP_SIZE * v:
        return None

    def blocks(vec: int) -> int:
        rows, _ = _multi_row_threads(layout, vec)
        return -(-layout.K // rows)

    # Each SM of the device should get a block.
    while v > 1 and blocks(v) < fusion.device.core_count:
        v //= 2
    if R > WARP_SIZE * v:
        return None
    return v


def _column_vector(fusion, minor: int, threads: int) -> int:
    """XLA's GetVectorSizeForMlir for column reductions: elements per thread
    loaded side by side along the kept minor dimension `minor`."""
    complex_operands = any(o.shape.element_type in ("c64", "c128")
                           for h in reduce_heroes(fusion.heroes) for o in h.operands)
    return column_vector_size(minor, threads, _input_bits(fusion), _output_bits(fusion),
                              complex_operands)


class ReductionEmitter(KernelEmitter):
    """What the variants share: the partitioning (the reduces' inputs root
    subgraphs, the reduces are computed in the entry function, epilogues
    receive the reduced values), the accumulation loop over the map of
    `_loop_exprs`, and the predicated write of the results. Subclasses set
    `threads`, `blocks` and `steps` and combine the partials (`_finish`)."""

    name = "reduction"

    def __init__(self, fusion, layout: ReductionLayout | None = None):
        super().__init__(fusion)
        # One layout per hero: their shapes may differ, their form is one.
        self.layouts = checked_layouts(fusion.roots, fusion.heroes)
        self.layout = layout or self.layouts[0]
        self.heroes = reduce_heroes(fusion.heroes)
        # Heroes that other instructions read get an elemental copy there.
        self._read_elsewhere = heroes_read_elsewhere(fusion.roots, fusion.heroes)
        self.side_outputs = [root for root, hero in zip(fusion.roots, fusion.heroes)
                             if hero.opcode != "reduce"]
        self._hero_index = {id(h): k for k, h in enumerate(self.heroes)}
        self._input_ids = {id(o) for h in self.heroes for o in h.operands[:len(h.operands) // 2]}
        # Each root's first output (a variadic reduce has several).
        self._slots: dict[int, int] = {}
        slot = 0
        for root in fusion.roots:
            self._slots.setdefault(id(root), slot)
            slot += len(root.shape.leaves())
        # Disjoint reductions in groups (XLA's GroupDisjointReductions): the
        # blocks of group g are blocks g * blocks ... (g + 1) * blocks - 1
        # (a 1-D grid: XLA puts groups on block id z); a scf.index_switch on
        # the group runs its heroes' and side outputs' accumulation, and each
        # root is written by its group's blocks.
        root_group = reduction_groups(fusion.roots, fusion.heroes)
        self.num_groups = max(root_group, default=0) + 1
        self._group_of_root = {id(r): g for r, g in zip(fusion.roots, root_group)}
        self._group_of_hero = {}
        for root, hero, g in zip(fusion.roots, fusion.heroes, root_group):
            self._group_of_hero.setdefault(id(hero), g)
        self._group = None                  # the group id value, when grouped
        self.threads = self.blocks = self.steps = 0
        # Separate accumulators per thread, side by side along the kept
        # minor dimension (the column variants' vector loads): the loop's
        # last symbol picks one; 1 when all of a thread's elements combine.
        self.lanes = 1
        self._configure()

    # -- to override ----------------------------------------------------------
    def _configure(self) -> None:
        raise NotImplementedError

    def _loop_exprs(self) -> tuple[AffineExpr, AffineExpr, list[tuple[str, int]],
                                   list[tuple[AffineExpr, int, int]]]:
        """(kept linear index, reduced linear index, symbols, constraints) of
        the accumulation loop over (th_x, bl_x)[symbols]."""
        raise NotImplementedError

    def _finish(self, params, outputs, partials, inits, thread_id, block_id):
        """Combines the threads' partials and writes the results."""
        raise NotImplementedError

    # -- launch ------------------------------------------------------------
    def launch_dims(self) -> LaunchDims:
        return LaunchDims(self.threads, self.blocks * self.num_groups)

    # -- partitioning ------------------------------------------------------
    def root_groups(self):
        groups = [[r] for r, h in zip(self.fusion.roots, self.fusion.heroes)
                  if h.opcode == "reduce" and has_epilogue(r, h)]
        return groups + [[r] for r in self.side_outputs]

    def is_subgraph_root(self, inst) -> bool:
        return id(inst) in self._input_ids

    def is_excluded(self, inst) -> bool:
        # A hero is computed by the kernel's loop, not elementally (unless
        # something reads it elsewhere); so is an output taken from it.
        if inst.opcode == "get-tuple-element":
            inst = inst.operands[0]
        return id(inst) in self._hero_index and id(inst) not in self._read_elsewhere

    def prepare_subgraphs(self) -> None:
        for root, hero in zip(self.fusion.roots, self.fusion.heroes):
            if hero.opcode == "reduce" and has_epilogue(root, hero):
                self.partitioned.subgraph_of(root).injected = [hero]

    # -- helpers -------------------------------------------------------------
    def _map(self, results, symbols, constraints) -> ir.Attribute:
        """A map over (th_x, bl_x)[symbols] as an attribute."""
        return self.index_map(indexing_map(
            [("th_x", self.threads), ("bl_x", self.blocks)], symbols, results,
            constraints))

    def _ids(self, thread_id, block_id, exprs: list[AffineExpr]) -> list[ir.Value]:
        """The values of `exprs` over (th_x, bl_x) for this thread."""
        attr = self._map(exprs, [], [])
        return xla_gpu.build_apply_indexing(attr, [thread_id, block_id])

    def _combine(self, hero, accs, values):
        self._mark_no_signed_zeros(hero.attrs["to_apply"])
        return self.call_computation(hero.attrs["to_apply"], [*accs, *values])

    def _mark_no_signed_zeros(self, comp) -> None:
        """As XLA: the reducer's float additions ignore the sign of zero
        (`fastmath<nsz>`), so the first add of the zero init folds away."""
        marked = self.__dict__.setdefault("_nsz_marked", set())
        if id(comp) in marked:
            return
        marked.add(id(comp))
        f = self.scalar_function(comp)
        nsz = ir.Attribute.parse("#arith.fastmath<nsz>")
        for block in f.regions[0].blocks:
            for op in block.operations:
                if op.operation.name == "arith.addf":
                    op.attributes["fastmath"] = nsz

    def _shuffle(self, hero, values, distance: int):
        if distance < 1:
            return list(values)
        values = list(values)
        f = self.scalar_function(hero.attrs["to_apply"])
        if not any(isinstance(v.type, ir.ComplexType) for v in values):
            return xla_gpu.build_shuffle_reduce(f.sym_name.value, values, distance)
        # Lanes exchange integers and floats: complex values cross as their
        # real and imaginary parts, and a combiner over the parts rebuilds
        # them around the reducer.
        parts = []
        for v in values:
            parts.extend([complex_ops.re(v), complex_ops.im(v)]
                         if isinstance(v.type, ir.ComplexType) else [v])
        combiner = self._parts_combiner(f, [v.type for v in values])
        shuffled = iter(xla_gpu.build_shuffle_reduce(combiner, parts, distance))
        return [complex_ops.create_(v.type, next(shuffled), next(shuffled))
                if isinstance(v.type, ir.ComplexType) else next(shuffled) for v in values]

    def _parts_combiner(self, reducer: func.FuncOp, types: list[ir.Type]) -> str:
        """A combiner over the parts of `types` (complex values as (re, im))
        that calls `reducer` on the rebuilt values; its symbol name."""
        made = self.__dict__.setdefault("_parts_combiners", {})
        key = reducer.sym_name.value
        if key in made:
            return made[key]

        def split(t):
            return [ir.ComplexType(t).element_type] * 2 if isinstance(t, ir.ComplexType) else [t]

        flat = [p for t in types for p in split(t)]
        with ir.InsertionPoint(self.module.body):
            f = func.FuncOp(self._unique(key + "_parts"), (flat + flat, flat),
                            visibility="private")
        block = f.add_entry_block()
        with ir.InsertionPoint(block):
            args = iter(block.arguments)
            rebuilt = []
            for _ in range(2):
                for t in types:
                    rebuilt.append(complex_ops.create_(t, next(args), next(args))
                                   if isinstance(t, ir.ComplexType) else next(args))
            results = func.CallOp(list(reducer.type.results),
                                  ir.FlatSymbolRefAttr.get(key), rebuilt).results
            out = []
            for r in results:
                out.extend([complex_ops.re(r), complex_ops.im(r)]
                           if isinstance(r.type, ir.ComplexType) else [r])
            func.ReturnOp(out)
        made[key] = f.sym_name.value
        return made[key]

    def _inits(self, params):
        emitter = self.function_emitter(params, lambda i: False)
        return [[emitter.emit1(o, []) for o in h.operands[len(h.operands) // 2:]]
                for h in self.heroes]

    def _input_values(self, hero, params, index):
        n = len(hero.operands) // 2
        return [self.value_at(operand, params, index) for operand in hero.operands[:n]]

    def _index_in(self, dims: list[int], layout: ReductionLayout | None, index):
        """The loop's reduce input index (the first hero's) as an index into
        an array of shape `dims`: the same (kept, reduced) position of
        another hero's input (`layout`), or the same row-major position of a
        side output (layout None). `index` itself when the shapes agree."""
        first = self.layout
        if list(dims) == first.dims:
            return list(index)
        source = [dim(i) for i in range(len(first.dims))]
        if layout is not None:
            k, r = _linear_parts(first, source)
            results = _input_index(layout, k, r)
        else:
            results = delinearize(linearize(source, first.dims), dims) if dims else []
        attr = self.index_map(indexing_map(
            [(f"d{i}", n) for i, n in enumerate(first.dims)], [], results))
        return xla_gpu.build_apply_indexing(attr, list(index))

    def _split(self, flat, inits):
        """`flat` values grouped per hero, as `inits` is."""
        out, pos = [], 0
        for group in inits:
            out.append(flat[pos:pos + len(group)])
            pos += len(group)
        return out

    def _output_slot(self, root) -> int:
        return self._slots[id(root)]

    # -- the kernel ----------------------------------------------------------
    def emit_entry(self, params, outputs, thread_id, block_id):
        if self.num_groups > 1:
            # The group and the block within it (the maps see that block).
            attr = self.index_map(indexing_map(
                [("bl_x", self.blocks * self.num_groups)], [],
                [floordiv(dim(0), self.blocks), dim(0) % self.blocks]))
            self._group, block_id = xla_gpu.build_apply_indexing(attr, [block_id])
        inits = self._inits(params)
        flat_inits = [v for group in inits for v in group]
        lanes = self.lanes
        acc_inits = flat_inits if lanes == 1 else [
            vector.broadcast(ir.VectorType.get([lanes], v.type), v) for v in flat_inits]
        side_slots = [self._output_slot(s) for s in self.side_outputs]
        side_outputs = [outputs[slot] for slot in side_slots]
        if self.num_groups == 1:
            results = self._accumulate_all(params, thread_id, block_id, inits, acc_inits,
                                           side_outputs)
        else:
            types = [v.type for v in [*acc_inits, *side_outputs]]
            switch = scf.IndexSwitchOp(types, self._group, list(range(1, self.num_groups)))
            # The default region takes group 0, case g group g.
            for g, region in enumerate(switch.regions):
                with ir.InsertionPoint(region.blocks[0]):
                    scf.YieldOp(self._accumulate(params, thread_id, block_id, inits,
                                                 acc_inits, side_outputs, group=g))
            results = list(switch.results)
        partials, side_results = results[:len(flat_inits)], results[len(flat_inits):]
        outputs = list(outputs)
        for slot, value in zip(side_slots, side_results):
            outputs[slot] = value
        return self._finish(params, outputs, partials, inits, thread_id, block_id)

    def _accumulate_all(self, params, thread_id, block_id, inits, acc_inits, side_outputs):
        """The accumulation of every hero and side output (one group)."""
        return self._accumulate(params, thread_id, block_id, inits, acc_inits, side_outputs,
                                group=None)

    def _side_value(self, side, params, index):
        """A side output's value at `index` (the reduce input's shape)."""
        return self.call_subgraph(side, params, index)[0]

    def _accumulate(self, params, thread_id, block_id, inits, acc_inits, side_outputs,
                    group):
        """The accumulation loop of the heroes and side outputs of `group`
        (all when None): the partials of every hero (the others' stay their
        inits) and every side output (the others unchanged)."""
        k, r, symbols, constraints = self._loop_exprs()
        lay = self.layout
        attr = self._map(_input_index(lay, k, r), symbols, constraints)
        lanes = self.lanes
        heroes = [(n, hero, layout, grp) for n, (hero, layout, grp) in
                  enumerate(zip(self.heroes, self.layouts, inits))
                  if group is None or self._group_of_hero[id(hero)] == group]
        sides = [(n, s) for n, s in enumerate(self.side_outputs)
                 if group is None or self._group_of_root[id(s)] == group]
        starts, pos = [], 0
        for grp in inits:
            starts.append(pos)
            pos += len(grp)
        loop_inits = [a for n, _, _, grp in heroes
                      for a in acc_inits[starts[n]:starts[n] + len(grp)]]
        loop_inits += [side_outputs[n] for n, _ in sides]
        loop = xla_gpu.build_loop(attr, [thread_id, block_id], loop_inits)
        block = loop.region.blocks[0]
        rank = len(lay.dims)
        with ir.InsertionPoint(block), self.calls_shared():
            args = list(block.arguments)
            index = args[len(symbols):len(symbols) + rank]
            iters = args[len(symbols) + rank:]
            lane = args[len(symbols) - 1] if lanes > 1 else None
            new_accs, pos = [], 0
            for _, hero, layout, group_inits in heroes:
                accs = iters[pos:pos + len(group_inits)]
                pos += len(group_inits)
                at = self._index_in(layout.dims, layout, index)
                if lane is None:
                    new_accs += self._combine(hero, accs, self._input_values(hero, params, at))
                    continue
                # This lane's accumulators, combined and put back.
                scalars = [vector.extract(a, [lane], [_DYNAMIC]) for a in accs]
                combined = self._combine(hero, scalars, self._input_values(hero, params, at))
                new_accs += [vector.insert(c, a, [lane], [_DYNAMIC])
                             for c, a in zip(combined, accs)]
            written = []
            for (_, s), out in zip(sides, iters[pos:]):
                at = self._index_in(list(s.shape.dims), None, index)
                written.append(tensor.insert(self._side_value(s, params, at), out, at))
            xla_gpu.YieldOp([*new_accs, *written])
        produced = iter(loop.results)
        partials = list(acc_inits)
        for n, _, _, grp in heroes:
            for i in range(len(grp)):
                partials[starts[n] + i] = next(produced)
        sides_out = list(side_outputs)
        for n, _ in sides:
            sides_out[n] = next(produced)
        return [*partials, *sides_out]

    def _write(self, params, outputs, values_per_hero, k_value, cond):
        """Writes each root (epilogue applied) at kept index `k_value` where
        `cond` holds, with `xla_gpu.predicated_insert` as XLA does. The
        epilogues run in every thread, at an index clamped into the output
        (they may read parameters there)."""
        new = list(outputs)
        k_safe = None
        if self.layout.kept:
            index = ir.IndexType.get()
            k_safe = arith.minui(k_value, arith.constant(index, self.layout.K - 1))
        out_indices: dict[tuple[int, ...], list] = {}
        for root, hero in zip(self.fusion.roots, self.fusion.heroes):
            if hero.opcode != "reduce" or id(hero) not in self._hero_index:
                continue
            number = self._hero_index[id(hero)]
            layout = self.layouts[number]
            kept_dims = tuple(layout.dims[i] for i in layout.kept)
            if kept_dims not in out_indices:   # one per output shape
                out_indices[kept_dims] = [] if not layout.kept else \
                    xla_gpu.build_apply_indexing(self.index_map(indexing_map(
                        [("k", self.layout.K)], [], _output_index(layout, dim(0)))), [k_safe])
            out_index = out_indices[kept_dims]
            values = values_per_hero[number]
            if selects_output(root, hero):
                values = [values[root.attrs["index"]]]
            elif root is not hero:
                values = self.call_subgraph(root, params, out_index, values)
            slot = self._output_slot(root)
            root_cond = cond
            if self._group is not None:
                # Only the blocks of the root's group hold its values.
                index = ir.IndexType.get()
                mine = arith.cmpi(arith.CmpIPredicate.eq, self._group,
                                  arith.constant(index, self._group_of_root[id(root)]))
                root_cond = arith.andi(cond, mine)
            for i, value in enumerate(values):
                new[slot + i] = self._predicated_insert(root_cond, value, new[slot + i],
                                                        out_index)
        return new

    def _predicated_insert(self, cond, value, dest, indices):
        return xla_gpu.PredicatedInsertOp(value, dest, list(indices), cond).result

    def _predicated_extract(self, cond, source, indices, default):
        return xla_gpu.PredicatedExtractOp(source, list(indices), cond, default).result


class _RowConfig:
    """Threads of a row reduction, as XLA's RowReductionFusion picks them:
    `threads_per_row` (a power of two from a warp up to 1024) so that each
    thread reduces at least 16 elements of its row, `vector` consecutive
    elements per load (XLA's vector size: 2 for 32-bit, up to 4 for
    narrower types when every thread still has work), and rows of short
    reductions side by side up to 256 threads per block. Rows of several
    warps exchange the warps' partials through shared memory: with very
    many reduced values, fewer threads per row keep that within the
    budget (`analysis.shared_memory.row_tiles`)."""

    def __init__(self, layout: ReductionLayout, fusion):
        # On the host: fewer threads with longer slices, one element per
        # load, so that consecutive threads (SIMD lanes) read consecutive
        # elements and the emulated shuffles are few next to the loads.
        host = _for_host(fusion, layout, HOST_ROW_MIN_ELEMENTS)
        per_thread = HOST_ROW_ELEMENTS_PER_THREAD if host else MIN_ROW_ELEMENTS_PER_THREAD
        tiles = row_tiles(reduction_partial_bytes(fusion.heroes), layout.K, layout.R,
                          per_thread)
        t = tiles.threads_per_row
        v = 1 if host else _column_vector(fusion, layout.R, t)
        self.vector, self.threads_per_row = v, t
        self.rows_per_block = rows = tiles.rows_per_block
        self.threads = t * rows
        self.blocks = -(-layout.K // rows)
        self.steps = -(-layout.R // (t * v))


class RowReductionEmitter(ReductionEmitter):
    """Rows of at least a warp: each thread accumulates a strided slice of
    its row, a warp shuffle combines a warp's partials, and rows of several
    warps combine the warps' partials through shared memory and a second
    shuffle."""

    def _configure(self) -> None:
        config = _RowConfig(self.layout, self.fusion)
        self.vector, self.threads_per_row = config.vector, config.threads_per_row
        self.rows_per_block = config.rows_per_block
        self.threads, self.blocks, self.steps = config.threads, config.blocks, config.steps

    # Expressions over (th_x, bl_x): the thread's row and its lane in the row.
    def _row(self) -> AffineExpr:
        t, rpb = self.threads_per_row, self.rows_per_block
        return dim(1) * rpb + floordiv(dim(0), t) if rpb > 1 else dim(1)

    def _lane(self) -> AffineExpr:
        t = self.threads_per_row
        return dim(0) % t if self.rows_per_block > 1 else dim(0)

    def _loop_exprs(self):
        t, v = self.threads_per_row, self.vector
        lay = self.layout
        first = 1 if lay.R0 > 1 else 0    # after the major loop's symbol
        step, element = sym(first), sym(first + 1)    # s, j
        row = self._row()
        col = (step * t + self._lane()) * v + element if v > 1 else step * t + self._lane()
        symbols = [("s", self.steps), ("j", v)]
        constraints = [(col, 0, lay.R - 1)]
        if self.blocks * self.rows_per_block > lay.K:
            constraints.append((row, 0, lay.K - 1))
        if lay.R0 > 1:
            # [R0, K, R]: each thread also walks the major reduced elements
            # (the outermost loop), as XLA's row reduction does.
            symbols.insert(0, ("m", lay.R0))
            return row, sym(0) * lay.R + col, symbols, constraints
        return row, col, symbols, constraints

    def _finish(self, params, outputs, partials, inits, thread_id, block_id):
        t, rpb = self.threads_per_row, self.rows_per_block
        per_hero = [self._shuffle(h, vals, min(WARP_SIZE, t) // 2)
                    for h, vals in zip(self.heroes, self._split(partials, inits))]
        warps = t // WARP_SIZE
        if warps > 1:
            row_in_block, warp, lane = self._ids(thread_id, block_id, [
                floordiv(dim(0), t) if rpb > 1 else const(0),
                floordiv(dim(0) % t, WARP_SIZE), dim(0) % WARP_SIZE])
            index = ir.IndexType.get()
            is_lane0 = arith.cmpi(arith.CmpIPredicate.eq, lane, arith.constant(index, 0))
            tiles = []
            for vals in per_hero:
                for v in vals:
                    shm = xla_gpu.AllocateSharedOp(
                        ir.RankedTensorType.get([rpb, warps], v.type)).result
                    tiles.append(self._predicated_insert(is_lane0, v, shm, [row_in_block, warp]))
            synced = list(xla_gpu.SyncThreadsOp(tiles).results)
            active = arith.cmpi(arith.CmpIPredicate.ult, lane, arith.constant(index, warps))
            flat_inits = [v for group in inits for v in group]
            read = [self._predicated_extract(active, tile, [row_in_block, lane], init)
                    for tile, init in zip(synced, flat_inits)]
            per_hero = [self._shuffle(h, vals, warps // 2)
                        for h, vals in zip(self.heroes, self._split(read, inits))]
        return self._write_rows(params, outputs, per_hero, thread_id, block_id)

    def _write_rows(self, params, outputs, per_hero, thread_id, block_id):
        """The row's first thread writes the row's results."""
        lane_v, row_v = self._ids(thread_id, block_id, [self._lane(), self._row()])
        index = ir.IndexType.get()
        cond = arith.cmpi(arith.CmpIPredicate.eq, lane_v, arith.constant(index, 0))
        if self.blocks * self.rows_per_block > self.layout.K:
            in_range = arith.cmpi(arith.CmpIPredicate.ult, row_v,
                                  arith.constant(index, self.layout.K))
            cond = arith.andi(cond, in_range)
        return self._write(params, outputs, per_hero, row_v, cond)


class MultiRowReductionEmitter(RowReductionEmitter):
    """Rows that fit a warp's vector loads (XLA's MultiRowReductionFusion):
    each of `threads_per_row` lanes loads `vector` consecutive elements of
    its row, several rows per warp; one shuffle up to distance
    threads_per_row / 2 combines a row's partials, no shared memory."""

    def _configure(self) -> None:
        lay = self.layout
        v = _multi_row_vector(self.fusion, lay)
        if v is None:
            raise self.heroes[0].error("internal: not a multi-row reduction")
        rows, per_row = _multi_row_threads(lay, v)
        self.vector, self.threads_per_row, self.rows_per_block = v, per_row, rows
        self.threads = rows * per_row
        self.blocks = -(-lay.K // rows)
        self.steps = 1

    def _finish(self, params, outputs, partials, inits, thread_id, block_id):
        per_hero = [self._shuffle(h, vals, self.threads_per_row // 2)
                    for h, vals in zip(self.heroes, self._split(partials, inits))]
        return self._write_rows(params, outputs, per_hero, thread_id, block_id)


class ColumnReductionEmitter(ReductionEmitter):
    """Kept dimensions below the reduced ones (XLA's ColumnReductionFusion):
    blocks of 32 x `warps` threads cover 32 * `lanes` columns of one K0
    index; thread (y, x) (warp y, lane x) accumulates rows y, y + warps, ...
    of columns (tile * 32 + x) * lanes + l, one accumulator per column
    (vector loads along the row). The partials go through a 32 x (warps *
    lanes) shared tile per reduced value (padded by one element when its
    rows are a multiple of 32) and are read back transposed: each warp
    takes 32 / warps columns, `warps` consecutive lanes holding one
    column's partials, and a shuffle over those lanes finishes it.

    XLA's configuration is 32 warps and its vector size; when the tiles of
    all reduced values would exceed the shared-memory budget, the lanes are
    halved, then the warps (`analysis.shared_memory.column_tiles`)."""

    def _configure(self) -> None:
        lay = self.layout
        preferred = _column_vector(self.fusion, lay.K1, COLUMN_TILE)
        tiles = column_tiles(reduction_partial_bytes(self.fusion.heroes), preferred)
        if tiles is None:
            raise self.heroes[0].error("internal: the reduction's partials do not fit "
                                       "shared memory (the analysis should have refused it)")
        self.lanes, self.warps = tiles.lanes, tiles.warps
        self.threads = COLUMN_TILE * self.warps
        self.column_tiles = -(-lay.K1 // (COLUMN_TILE * self.lanes))
        self.blocks = lay.K0 * self.column_tiles
        self.steps = -(-lay.R // self.warps)

    # Expressions over (th_x, bl_x): the block's K0 index and column tile.
    def _k0(self) -> AffineExpr:
        return floordiv(dim(1), self.column_tiles) if self.column_tiles > 1 else dim(1)

    def _tile(self) -> AffineExpr:
        return dim(1) % self.column_tiles if self.column_tiles > 1 else const(0)

    def _loop_exprs(self):
        lay, v = self.layout, self.lanes
        column = (self._tile() * COLUMN_TILE + dim(0) % COLUMN_TILE) * v
        if v > 1:
            column = column + sym(1)
        k = self._k0() * lay.K1 + column
        r = sym(0) * self.warps + floordiv(dim(0), COLUMN_TILE)
        symbols = [("s", self.steps)] + ([("l", v)] if v > 1 else [])
        constraints = [(r, 0, lay.R - 1), (column, 0, lay.K1 - 1)]
        return k, r, symbols, constraints

    def _finish(self, params, outputs, partials, inits, thread_id, block_id):
        lay, v, warps = self.layout, self.lanes, self.warps
        index = ir.IndexType.get()
        width = column_tile_width(warps, v)
        # Written by thread (y, x): row x (its column in the tile), at
        # y * lanes + lane.
        x, y = self._ids(thread_id, block_id, [dim(0) % COLUMN_TILE,
                                               floordiv(dim(0), COLUMN_TILE)])
        tiles = []
        for p in partials:
            scalar = p.type if v == 1 else ir.VectorType(p.type).element_type
            tile = xla_gpu.AllocateSharedOp(
                ir.RankedTensorType.get([COLUMN_TILE, width], scalar)).result
            for lane in range(v):
                value = p if v == 1 else vector.extract(p, [], [lane])
                position = self._ids(thread_id, block_id,
                                     [floordiv(dim(0), COLUMN_TILE) * v + lane])[0]
                tile = tensor.insert(value, tile, [x, position])
            tiles.append(tile)
        synced = list(xla_gpu.SyncThreadsOp(tiles).results)
        flat_inits = [i for group in inits for i in group]
        # Read back: thread (y, x) takes the partial of warp `source` for
        # tile column `mine` (one column per `warps` consecutive lanes).
        per_warp = COLUMN_TILE // warps
        mine = floordiv(dim(0), COLUMN_TILE) * per_warp + floordiv(dim(0) % COLUMN_TILE, warps) \
            if warps < COLUMN_TILE else floordiv(dim(0), COLUMN_TILE)
        source = dim(0) % warps if warps > 1 else const(0)
        mine_v, source_v = self._ids(thread_id, block_id, [mine, source])
        is_first = arith.cmpi(arith.CmpIPredicate.eq, source_v, arith.constant(index, 0))
        for lane in range(v):
            column = (self._tile() * COLUMN_TILE + mine) * v + lane
            k = self._k0() * lay.K1 + column
            read_at, k_v, column_v = self._ids(thread_id, block_id, [
                source * v + lane, k, column])
            in_range = arith.cmpi(arith.CmpIPredicate.ult, column_v,
                                  arith.constant(index, lay.K1))
            read = [self._predicated_extract(in_range, t, [mine_v, read_at], init)
                    for t, init in zip(synced, flat_inits)]
            per_hero = [self._shuffle(h, vals, warps // 2)
                        for h, vals in zip(self.heroes, self._split(read, inits))]
            outputs = self._write(params, outputs, per_hero, k_v,
                                  arith.andi(is_first, in_range))
        return outputs


class SmallColumnReductionEmitter(ReductionEmitter):
    """Column reductions whose kept minor size K1 divides a warp (XLA's
    SmallColumnReductionFusion): one block per K0 index walks the [R, K1]
    slab linearly, each thread `lanes` consecutive elements per step (one
    accumulator each: always the same columns); the partials go through a
    `shared_rows` x K1 shared tile, are read back a column per group of
    `shared_rows` lanes and a shuffle over those lanes finishes each column.
    XLA's configuration (128 threads, at most 32 rows), with fewer lanes,
    then fewer threads while the tiles of all reduced values would exceed
    the shared-memory budget (`analysis.shared_memory.small_column_tiles`)."""

    def _configure(self) -> None:
        lay = self.layout
        preferred = _column_vector(self.fusion, lay.R * lay.K1, COLUMN_TILE)
        tiles = small_column_tiles(reduction_partial_bytes(self.fusion.heroes), lay.K1,
                                   preferred)
        if tiles is None:
            raise self.heroes[0].error("internal: the reduction's partials do not fit "
                                       "shared memory (the analysis should have refused it)")
        v, threads = tiles.lanes, tiles.threads
        self.lanes, self.threads, self.shared_rows = v, threads, tiles.rows
        self.padding = tiles.padding
        self.blocks = lay.K0
        self.steps = -(-(lay.R * lay.K1) // (v * threads))

    def _linear(self) -> AffineExpr:
        v = self.lanes
        linear = dim(0) * v if v > 1 else dim(0)
        if v > 1:
            linear = linear + sym(1)
        return linear + sym(0) * (v * self.threads)

    def _loop_exprs(self):
        lay, v = self.layout, self.lanes
        linear = self._linear()
        k = dim(1) * lay.K1 + linear % lay.K1
        r = floordiv(linear, lay.K1)
        symbols = [("s", self.steps)] + ([("l", v)] if v > 1 else [])
        return k, r, symbols, [(linear, 0, lay.R * lay.K1 - 1)]

    def _finish(self, params, outputs, partials, inits, thread_id, block_id):
        lay, v, rows, threads = self.layout, self.lanes, self.shared_rows, self.threads
        index = ir.IndexType.get()
        padding = self.padding
        tiles = []
        for p in partials:
            scalar = p.type if v == 1 else ir.VectorType(p.type).element_type
            tile = xla_gpu.AllocateSharedOp(
                ir.RankedTensorType.get([rows, lay.K1 + padding], scalar)).result
            for lane in range(v):
                value = p if v == 1 else vector.extract(p, [], [lane])
                linear = dim(0) * v + lane
                row, column = self._ids(thread_id, block_id, [
                    floordiv(linear, lay.K1), linear % lay.K1])
                tile = tensor.insert(value, tile, [row, column])
            tiles.append(tile)
        synced = list(xla_gpu.SyncThreadsOp(tiles).results)
        flat_inits = [i for group in inits for i in group]
        for lane in range(v):
            linear = dim(0) + lane * threads
            row, column, k = self._ids(thread_id, block_id, [
                linear % rows, floordiv(linear, rows),
                dim(1) * lay.K1 + floordiv(linear, rows)])
            in_range = arith.cmpi(arith.CmpIPredicate.ult, column,
                                  arith.constant(index, lay.K1))
            read = [self._predicated_extract(in_range, t, [row, column], init)
                    for t, init in zip(synced, flat_inits)]
            per_hero = [self._shuffle(h, vals, rows // 2)
                        for h, vals in zip(self.heroes, self._split(read, inits))]
            first = arith.cmpi(arith.CmpIPredicate.eq, row, arith.constant(index, 0))
            outputs = self._write(params, outputs, per_hero, k, arith.andi(first, in_range))
        return outputs


class ThreadPerColumnReductionEmitter(ReductionEmitter):
    """Column reductions on the host (`DeviceDescription.host_emulation`):
    thread k accumulates kept element k over all R reduced rows in order;
    no shared tile, no shuffle. Consecutive threads read consecutive
    elements of each row, so the emulated thread loop is a SIMD loop over
    contiguous vectors, with the row loop around it."""

    THREADS = 128

    # Blocks of at least this many threads when one that divides K is
    # taken (below, the power of two at least K with idle threads).
    MIN_EXACT_THREADS = 32

    def _configure(self) -> None:
        lay = self.layout
        # A block size that divides K, so that every thread has a column:
        # with idle threads the emulated thread loop carries their guard
        # around each accumulation, and LLVM leaves it scalar (a GroupNorm
        # backward's sum over 96 channels in one block of 128 ran 4x
        # longer than in one of 96).
        self.threads = self._exact_threads(lay.K) or min(self.THREADS, _pow2_at_least(lay.K))
        self._concat, self._piece = self._piecewise_concatenate(), None
        self.blocks = -(-lay.K // self.threads)
        self.steps = lay.R

    def _exact_threads(self, n: int) -> int | None:
        """The largest block size from MIN_EXACT_THREADS to THREADS that
        divides `n` (None when none does)."""
        return next((t for t in range(min(self.THREADS, n), self.MIN_EXACT_THREADS - 1, -1)
                     if n % t == 0), None)

    def _piecewise_concatenate(self):
        """The concatenate along the kept minor dimension that is the one
        hero's one input, when blocks can each take a single operand of it
        (then `threads` divides every operand's width; None otherwise).

        Computed per element, a concatenate is a chain of comparisons on
        the column in the thread loop, around conditional loads: LLVM
        leaves that loop scalar (an LSTM backward step's gate gradients,
        a 16x512 concatenate summed over the batch, ran 10x longer than
        the same operands as a loop fusion). A block's threads see one
        operand: the block picks it (`scf.index_switch`) and its threads
        read that operand directly, a straight-line vectorizable loop."""
        lay = self.layout
        if len(self.heroes) != 1 or len(self.heroes[0].operands) != 2 or \
                self.num_groups != 1 or not lay.kept:
            return None
        concat = self.heroes[0].operands[0]
        last = len(lay.dims) - 1
        if concat.opcode != "concatenate" or concat.attrs["dimensions"][0] != last or \
                last not in lay.kept or list(concat.shape.dims) != lay.dims or \
                not 1 < len(concat.operands) <= 8:
            return None
        if any(s is not concat for s in self.side_outputs):
            return None
        threads = self._exact_threads(gcd(*(o.shape.dims[last] for o in concat.operands)))
        if threads is None:
            return None
        self.threads = threads
        return concat

    def is_subgraph_root(self, inst) -> bool:
        # The concatenate's operands get functions of their own: a block
        # calls its operand's.
        return super().is_subgraph_root(inst) or (
            self._concat is not None and any(inst is o for o in self._concat.operands))

    def _accumulate_all(self, params, thread_id, block_id, inits, acc_inits, side_outputs):
        concat = self._concat
        if concat is None:
            return super()._accumulate_all(params, thread_id, block_id, inits, acc_inits,
                                           side_outputs)
        # The operand of this block's columns: the number of operands that
        # start at or before its first column (within the minor dimension).
        width = self.layout.dims[-1]
        starts, offset = [], 0
        for o in concat.operands:
            starts.append(offset)
            offset += o.shape.dims[-1]
        blocks_per_row = width // self.threads
        index = ir.IndexType.get()
        (local,) = self._ids(thread_id, block_id, [dim(1) % blocks_per_row])
        piece = arith.constant(index, 0)
        one, zero = arith.constant(index, 1), arith.constant(index, 0)
        for start in starts[1:]:
            at_or_past = arith.cmpi(arith.CmpIPredicate.uge, local,
                                    arith.constant(index, start // self.threads))
            piece = arith.addi(piece, arith.select(at_or_past, one, zero))
        types = [v.type for v in [*acc_inits, *side_outputs]]
        switch = scf.IndexSwitchOp(types, piece, list(range(1, len(starts))))
        for n, region in enumerate(switch.regions):
            self._piece = (concat.operands[n], starts[n])
            with ir.InsertionPoint(region.blocks[0]):
                scf.YieldOp(self._accumulate(params, thread_id, block_id, inits, acc_inits,
                                             side_outputs, group=None))
        self._piece = None
        return list(switch.results)

    def _piece_value(self, params, index):
        operand, start = self._piece
        moved = list(index)
        if start:
            moved[-1] = arith.subi(moved[-1], arith.constant(ir.IndexType.get(), start))
        return self.value_at(operand, params, moved)

    def _input_values(self, hero, params, index):
        if self._piece is None:
            return super()._input_values(hero, params, index)
        return [self._piece_value(params, index)]

    def _side_value(self, side, params, index):
        if self._piece is None:
            return super()._side_value(side, params, index)
        return self._piece_value(params, index)

    def _kept(self) -> AffineExpr:
        return dim(1) * self.threads + dim(0)

    def _loop_exprs(self):
        k = self._kept()
        return k, sym(0), [("s", self.steps)], [(k, 0, self.layout.K - 1)]

    def _finish(self, params, outputs, partials, inits, thread_id, block_id):
        index = ir.IndexType.get()
        (k,) = self._ids(thread_id, block_id, [self._kept()])
        in_range = arith.cmpi(arith.CmpIPredicate.ult, k, arith.constant(index, self.layout.K))
        return self._write(params, outputs, self._split(partials, inits), k, in_range)


class ThreadPerRowReductionEmitter(ThreadPerColumnReductionEmitter):
    """Short row reductions on the host: thread k accumulates row k over
    its R elements in order (the blocks as the thread-per-column variant
    picks them, over the K rows); no shuffle, no shared tile."""
