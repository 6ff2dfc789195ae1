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

Multi-row reduction (`MultiRowReductionEmitter`): rows shorter than a warp
share warps, `t` lanes per row; the shuffle stops at distance t/2 and no
shared memory is needed.

Column reduction (`ColumnReductionEmitter`): 32x32 threads per block cover
32 columns; thread (x, y) accumulates rows y, y+32, ...; the partials go
through a padded 32x33 shared tile, are read back transposed, and a warp
shuffle finishes each column.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, tensor
from mlir.ir import AffineExpr

from ..analysis.indexing import const, delinearize, dim, floordiv, indexing_map, sym
from ..analysis.reduction import ReductionLayout, checked_layout, reduce_heroes
from ..dialects import xla_gpu
from ..hlo import HloInstruction
from ..hlo.shape import bit_width
from .base import WARP_SIZE, KernelEmitter, LaunchDims

__all__ = ["ReductionEmitter", "RowReductionEmitter", "MultiRowReductionEmitter",
           "ColumnReductionEmitter", "reduction_emitter"]

MAX_THREADS_PER_ROW = 1024
MIN_THREADS_PER_BLOCK = 128
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


def reduction_emitter(fusion) -> "ReductionEmitter":
    """The variant XLA would run: column when kept dimensions lie below the
    reduced ones, multi-row when a row needs fewer threads than a warp, row
    otherwise."""
    layout = checked_layout(fusion.roots, fusion.heroes)
    if not layout.is_row:
        return ColumnReductionEmitter(fusion, layout)
    if _RowConfig(layout, reduce_heroes(fusion.heroes)).threads_per_row < WARP_SIZE:
        return MultiRowReductionEmitter(fusion, layout)
    return RowReductionEmitter(fusion, layout)


class ReductionEmitter(KernelEmitter):
    """What the variants share: the partitioning (the reduces' inputs root
    subgraphs, the reduces are computed in the entry function, epilogues
    receive the reduced values), the accumulation loop over the map of
    `_loop_exprs`, and the predicated write of the results. Subclasses set
    `threads`, `blocks` and `steps` and combine the partials (`_finish`)."""

    name = "reduction"

    def __init__(self, fusion, layout: ReductionLayout | None = None):
        super().__init__(fusion)
        self.layout = layout or checked_layout(fusion.roots, fusion.heroes)
        self.heroes = reduce_heroes(fusion.heroes)
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
        self.threads = self.blocks = self.steps = 0
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
        return LaunchDims(self.threads, self.blocks)

    # -- partitioning ------------------------------------------------------
    def root_groups(self):
        groups = [[r] for r, h in zip(self.fusion.roots, self.fusion.heroes)
                  if h.opcode == "reduce" and r is not h]
        return groups + [[r] for r in self.side_outputs]

    def is_subgraph_root(self, inst) -> bool:
        return id(inst) in self._input_ids

    def is_excluded(self, inst) -> bool:
        return id(inst) in self._hero_index

    def prepare_subgraphs(self) -> None:
        for root, hero in zip(self.fusion.roots, self.fusion.heroes):
            if hero.opcode == "reduce" and root is not hero:
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
        return self.call_computation(hero.attrs["to_apply"], [*accs, *values])

    def _shuffle(self, hero, values, distance: int):
        if distance < 1:
            return list(values)
        f = self.scalar_function(hero.attrs["to_apply"])
        return xla_gpu.build_shuffle_reduce(f.sym_name.value, list(values), distance)

    def _inits(self, params):
        emitter = self.function_emitter(params, lambda i: False)
        return [[emitter.emit1(o, []) for o in h.operands[len(h.operands) // 2:]]
                for h in self.heroes]

    def _input_values(self, hero, params, index):
        n = len(hero.operands) // 2
        return [self.value_at(operand, params, index) for operand in hero.operands[:n]]

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
        k, r, symbols, constraints = self._loop_exprs()
        lay = self.layout
        attr = self._map(_input_index(lay, k, r), symbols, constraints)
        inits = self._inits(params)
        flat_inits = [v for group in inits for v in group]
        side_slots = [self._output_slot(s) for s in self.side_outputs]
        side_outputs = [outputs[slot] for slot in side_slots]
        loop = xla_gpu.build_loop(attr, [thread_id, block_id], [*flat_inits, *side_outputs])
        block = loop.region.blocks[0]
        rank = len(lay.dims)
        with ir.InsertionPoint(block), self.calls_shared():
            args = list(block.arguments)
            index = args[len(symbols):len(symbols) + rank]
            iters = args[len(symbols) + rank:]
            new_accs, pos = [], 0
            for hero, group in zip(self.heroes, inits):
                accs = iters[pos:pos + len(group)]
                pos += len(group)
                new_accs += self._combine(hero, accs, self._input_values(hero, params, index))
            written = []
            for s, out in zip(self.side_outputs, iters[len(flat_inits):]):
                value = self.call_subgraph(s, params, index)[0]
                written.append(tensor.insert(value, out, index))
            xla_gpu.YieldOp([*new_accs, *written])
        results = list(loop.results)
        partials, side_results = results[:len(flat_inits)], results[len(flat_inits):]
        outputs = list(outputs)
        for slot, value in zip(side_slots, side_results):
            outputs[slot] = value
        return self._finish(params, outputs, partials, inits, thread_id, block_id)

    def _write(self, params, outputs, values_per_hero, k_value, cond):
        """Writes each root (epilogue applied) at kept index `k_value` if `cond`."""
        outputs = list(outputs)
        if_op = scf.IfOp(cond, [o.type for o in outputs], has_else=True)
        with ir.InsertionPoint(if_op.then_block):
            out_index = []
            if self.layout.kept:
                attr = self.index_map(indexing_map(
                    [("k", self.layout.K)], [], _output_index(self.layout, dim(0))))
                out_index = xla_gpu.build_apply_indexing(attr, [k_value])
            new = list(outputs)
            for root, hero in zip(self.fusion.roots, self.fusion.heroes):
                if hero.opcode != "reduce":
                    continue
                values = values_per_hero[self._hero_index[id(hero)]]
                if root is not hero:
                    values = self.call_subgraph(root, params, out_index, values)
                slot = self._output_slot(root)
                for i, value in enumerate(values):
                    new[slot + i] = tensor.insert(value, new[slot + i], out_index)
            scf.YieldOp(new)
        with ir.InsertionPoint(if_op.else_block):
            scf.YieldOp(outputs)
        return list(if_op.results)

    def _predicated_insert(self, cond, value, dest, indices):
        return xla_gpu.PredicatedInsertOp(value, dest, list(indices), cond).result

    def _predicated_extract(self, cond, source, indices, default):
        return xla_gpu.PredicatedExtractOp(source, list(indices), cond, default).result


class _RowConfig:
    """Threads of a row reduction: `threads_per_row` (a power of two, at most
    1024) each load `vector` consecutive elements per step (2 for 32-bit, 4
    for narrower types, when the row is a multiple of it); blocks of at
    least 128 threads take `rows_per_block` rows."""

    def __init__(self, layout: ReductionLayout, heroes: list[HloInstruction]):
        types = [o.shape.element_type for h in heroes for o in h.operands[:len(h.operands) // 2]]
        widest = max(bit_width(t) for t in types)
        v = 1
        if widest <= 32:
            v = 2 if widest == 32 else 4
            while v > 1 and layout.R % v:
                v //= 2
        per_row = -(-layout.R // v)
        t = min(MAX_THREADS_PER_ROW, _pow2_at_least(per_row))
        self.vector, self.threads_per_row = v, t
        self.rows_per_block = max(1, MIN_THREADS_PER_BLOCK // t)
        self.threads = t * self.rows_per_block
        self.blocks = -(-layout.K // self.rows_per_block)
        self.steps = -(-layout.R // (t * v))


class RowReductionEmitter(ReductionEmitter):
    """Rows of at least a warp: each thread accumulates a strided slice of
    its row, a warp shuffle combines a warp's partials, and rows of several
    warps combine the warps' partials through shared memory and a second
    shuffle."""

    def _configure(self) -> None:
        config = _RowConfig(self.layout, self.heroes)
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
        step, element = sym(0), sym(1)    # s, j
        row = self._row()
        col = (step * t + self._lane()) * v + element if v > 1 else step * t + self._lane()
        symbols = [("s", self.steps), ("j", v)]
        constraints = [(col, 0, lay.R - 1)]
        if self.blocks * self.rows_per_block > lay.K:
            constraints.append((row, 0, lay.K - 1))
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
    """Rows shorter than a warp: `threads_per_row` lanes per row, several
    rows per warp; one shuffle up to distance threads_per_row / 2 combines a
    row's partials, no shared memory."""

    def _finish(self, params, outputs, partials, inits, thread_id, block_id):
        per_hero = [self._shuffle(h, vals, self.threads_per_row // 2)
                    for h, vals in zip(self.heroes, self._split(partials, inits))]
        return self._write_rows(params, outputs, per_hero, thread_id, block_id)


class ColumnReductionEmitter(ReductionEmitter):
    """Kept dimensions below the reduced ones: blocks of 32x32 threads cover
    32 columns of one K0 index; thread (x, y) accumulates rows y, y + 32,
    ... of column x; the partials are transposed through a padded 32x33
    shared tile and a warp shuffle finishes each column."""

    def _configure(self) -> None:
        lay = self.layout
        self.threads = COLUMN_TILE * COLUMN_TILE
        self.column_tiles = -(-lay.K1 // COLUMN_TILE)
        self.blocks = lay.K0 * self.column_tiles
        self.steps = -(-lay.R // COLUMN_TILE)

    # Expressions over (th_x, bl_x): the block's K0 index and column tile.
    def _k0(self) -> AffineExpr:
        return floordiv(dim(1), self.column_tiles) if self.column_tiles > 1 else dim(1)

    def _tile(self) -> AffineExpr:
        return dim(1) % self.column_tiles if self.column_tiles > 1 else const(0)

    def _loop_exprs(self):
        lay = self.layout
        k1 = self._tile() * COLUMN_TILE + dim(0) % COLUMN_TILE
        # Summed left to right: k0 * K1 + tile * 32 + x.
        k = self._k0() * lay.K1 + self._tile() * COLUMN_TILE + dim(0) % COLUMN_TILE
        r = sym(0) * COLUMN_TILE + floordiv(dim(0), COLUMN_TILE)
        symbols = [("s", self.steps)]
        constraints = [(r, 0, lay.R - 1), (k1, 0, lay.K1 - 1)]
        return k, r, symbols, constraints

    def _finish(self, params, outputs, partials, inits, thread_id, block_id):
        lay = self.layout
        index = ir.IndexType.get()
        x, y = self._ids(thread_id, block_id, [dim(0) % COLUMN_TILE,
                                               floordiv(dim(0), COLUMN_TILE)])
        stored = []
        for v in partials:
            shm = xla_gpu.AllocateSharedOp(
                ir.RankedTensorType.get([COLUMN_TILE, COLUMN_TILE + 1], v.type)).result
            stored.append(tensor.insert(v, shm, [y, x]))
        synced = list(xla_gpu.SyncThreadsOp(stored).results)
        transposed = [tensor.extract(t, [x, y]) for t in synced]
        per_hero = [self._shuffle(h, vals, WARP_SIZE // 2)
                    for h, vals in zip(self.heroes, self._split(transposed, inits))]
        column = self._tile() * COLUMN_TILE + floordiv(dim(0), COLUMN_TILE)
        k = self._k0() * lay.K1 + self._tile() * COLUMN_TILE + floordiv(dim(0), COLUMN_TILE)
        k_v, column_v = self._ids(thread_id, block_id, [k, column])
        cond = arith.andi(
            arith.cmpi(arith.CmpIPredicate.eq, x, arith.constant(index, 0)),
            arith.cmpi(arith.CmpIPredicate.ult, column_v, arith.constant(index, lay.K1)))
        return self._write(params, outputs, per_hero, k_v, cond)
