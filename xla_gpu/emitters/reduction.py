"""The reduction emitter: XLA's structure for reductions whose reduced
dimensions are contiguous (after dropping size-1 dimensions).

The reduce input is seen as [K, R] (row: the reduced dimensions are the
minor ones) or [K0, R, K1] (column: kept dimensions below them).

Row reduction, `t` threads per row (a power of two), `v` elements per
thread and step (vector loads):

    %acc = xla_gpu.loop (%th, %bl)[%s, %j] -> (input index) in #row
             iter_args(%a = init)        // each thread: a strided slice of its row
    %w = xla_gpu.shuffle_reduce(%acc) to min(16, t/2) combiner=@reducer
    // t > 32: one partial per warp through shared memory
    %sh = xla_gpu.predicated_insert %w into %shmem[row, warp] if lane == 0
    %sy = xla_gpu.sync_threads %sh
    %p = xla_gpu.predicated_extract %sy[row, lane] if lane < warps else init
    %r = xla_gpu.shuffle_reduce(%p) to warps/2 combiner=@reducer
    %out = xla_gpu.predicated_insert @epilogue(%r) into %output[...] if first thread of row

Rows shorter than a warp share warps (multi-row: `t` lanes per row, the
shuffle stops at distance t/2). Column reduction: 32x32 threads per block
cover 32 columns; thread (x, y) accumulates rows y, y+32, ...; the partials
go through a padded 32x33 shared tile, are read back transposed, and a warp
shuffle finishes each column. Side outputs (roots shaped like the reduce
input) are written by the first loop; elementwise epilogues of the reduce
run on the reduced value through a function that receives it.

Reductions whose dimensions are not contiguous, heroes of different shapes,
and other epilogues are refused (`ReductionRefused`): the loop emitter
computes them (one thread per output element).
"""

from __future__ import annotations

from math import prod

from mlir import ir
from mlir.dialects import arith, scf, tensor

from ..analysis.indexing import delinearize, map_text
from ..dialects import xla_gpu
from ..hlo import HloError, HloInstruction
from ..hlo.shape import bit_width
from ..ir import IndexingMap
from .base import WARP_SIZE, KernelEmitter, LaunchDims
from .concatenate import is_elementwise_epilogue

__all__ = ["ReductionEmitter", "ReductionRefused", "ReductionLayout"]

MAX_THREADS_PER_ROW = 1024
MIN_THREADS_PER_BLOCK = 128
COLUMN_TILE = WARP_SIZE


class ReductionRefused(HloError):
    """The fusion is a reduction this emitter does not handle."""


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


class ReductionLayout:
    """The reduce input as [K0, R, K1] (K = K0 * K1 kept elements)."""

    def __init__(self, reduce: HloInstruction):
        dims = list(reduce.operands[0].shape.dims)
        reduced = set(reduce.attrs["dimensions"])
        self.dims = dims
        self.reduced = sorted(reduced)
        self.kept = [i for i in range(len(dims)) if i not in reduced]
        big = [i for i in range(len(dims)) if dims[i] > 1]
        big_reduced = [i for i in big if i in reduced]
        if not big_reduced:
            raise ReductionRefused("the reduction reduces only size-1 dimensions")
        first, last = big.index(big_reduced[0]), big.index(big_reduced[-1])
        if big[first:last + 1] != big_reduced:
            raise ReductionRefused("the reduced dimensions are not contiguous")
        self.R = prod(dims[i] for i in self.reduced)
        self.K = prod(dims[i] for i in self.kept)
        self.K1 = prod(dims[i] for i in self.kept if i > big_reduced[-1])
        self.K0 = self.K // self.K1
        self.is_row = self.K1 == 1

    def input_index(self, k: str, r: str) -> list[str]:
        """Input index expressions from the kept linear index `k` and the
        reduced linear index `r`."""
        kept = delinearize(k, [self.dims[i] for i in self.kept]) if self.kept else []
        red = delinearize(r, [self.dims[i] for i in self.reduced])
        out, ki, ri = [], iter(kept), iter(red)
        for i in range(len(self.dims)):
            out.append(next(ri) if i in self.reduced else next(ki))
        return out

    def output_index(self, k: str) -> list[str]:
        return delinearize(k, [self.dims[i] for i in self.kept]) if self.kept else []


class ReductionEmitter(KernelEmitter):
    name = "reduction"

    def __init__(self, fusion):
        super().__init__(fusion)
        heroes = [h for h in fusion.heroes if h.opcode == "reduce"]
        self.heroes = list(dict.fromkeys(heroes))
        first = self.heroes[0]
        self.layout = ReductionLayout(first)
        for h in self.heroes[1:]:
            if list(h.operands[0].shape.dims) != self.layout.dims or \
                    sorted(h.attrs["dimensions"]) != self.layout.reduced:
                raise ReductionRefused("reduce heroes of different shapes")
        self.side_outputs = []
        for root, hero in zip(fusion.roots, fusion.heroes):
            if hero.opcode == "reduce":
                if root is not hero and not is_elementwise_epilogue(root, hero):
                    raise ReductionRefused(f"the epilogue of '{hero.name}' is not elementwise")
                if root is not hero and hero.shape.is_tuple:
                    raise ReductionRefused("an epilogue of a variadic reduce")
            elif list(root.shape.dims) == self.layout.dims:
                self.side_outputs.append(root)
            else:
                raise ReductionRefused(f"output '{root.name}' is neither a reduction nor "
                                       "shaped like the reduce input")
        for h in self.heroes:
            if any(o.shape.rank for o in h.operands[len(h.operands) // 2:]):
                raise ReductionRefused("init values must be scalars")
        self._configure()

    # -- launch ------------------------------------------------------------
    def _configure(self) -> None:
        lay = self.layout
        types = [o.shape.element_type for h in self.heroes for o in h.operands[:len(h.operands) // 2]]
        widest = max(bit_width(t) for t in types)
        if lay.is_row:
            v = 1
            if widest <= 32:
                v = 2 if widest == 32 else 4
                while v > 1 and lay.R % v:
                    v //= 2
            per_row = -(-lay.R // v)
            t = min(MAX_THREADS_PER_ROW, _pow2_at_least(per_row))
            rows_per_block = max(1, MIN_THREADS_PER_BLOCK // t)
            self.vector, self.threads_per_row = v, t
            self.rows_per_block = rows_per_block
            self.threads = t * rows_per_block
            self.blocks = -(-lay.K // rows_per_block)
            self.steps = -(-lay.R // (t * v))
        else:
            self.threads = COLUMN_TILE * COLUMN_TILE
            self.column_tiles = -(-lay.K1 // COLUMN_TILE)
            self.blocks = lay.K0 * self.column_tiles
            self.steps = -(-lay.R // COLUMN_TILE)

    def launch_dims(self) -> LaunchDims:
        return LaunchDims(self.threads, self.blocks)

    # -- partitioning ------------------------------------------------------
    def root_groups(self):
        groups = [[r] for r, h in zip(self.fusion.roots, self.fusion.heroes)
                  if h.opcode == "reduce" and r is not h]
        return groups + [[r] for r in self.side_outputs]

    def is_subgraph_root(self, inst) -> bool:
        return any(inst is o for h in self.heroes for o in h.operands[:len(h.operands) // 2])

    def is_excluded(self, inst) -> bool:
        return any(inst is h for h in self.heroes)

    def prepare_subgraphs(self) -> None:
        for root, hero in zip(self.fusion.roots, self.fusion.heroes):
            if hero.opcode == "reduce" and root is not hero:
                self.partitioned.subgraph_of(root).injected = [hero]

    # -- helpers -------------------------------------------------------------
    def _map(self, results, symbols, constraints) -> ir.Attribute:
        text = map_text([("th_x", self.threads), ("bl_x", self.blocks)], symbols,
                        results, constraints)
        return self.index_map(str(IndexingMap.parse(text).simplified()))

    def _ids(self, thread_id, block_id, exprs: list[str]) -> list[ir.Value]:
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

    # -- the kernel ----------------------------------------------------------
    def emit_entry(self, params, outputs, thread_id, block_id):
        if self.layout.is_row:
            k, r, symbols, constraints = self._row_loop_exprs()
        else:
            k, r, symbols, constraints = self._column_loop_exprs()
        lay = self.layout
        index_exprs = lay.input_index(k, r)
        attr = self._map(index_exprs, symbols, constraints)
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
        if lay.is_row:
            return self._finish_rows(params, outputs, partials, inits, thread_id, block_id)
        return self._finish_columns(params, outputs, partials, inits, thread_id, block_id)

    def _output_slot(self, root) -> int:
        slot = 0
        for r in self.fusion.roots:
            if r is root:
                return slot
            slot += len(r.shape.leaves())
        raise ValueError(root.name)

    def _row_loop_exprs(self):
        t, v, rpb = self.threads_per_row, self.vector, self.rows_per_block
        lay = self.layout
        row = f"bl_x * {rpb} + th_x floordiv {t}" if rpb > 1 else "bl_x"
        lane = f"th_x mod {t}" if rpb > 1 else "th_x"
        col = f"(s * {t} + {lane}) * {v} + j" if v > 1 else f"s * {t} + {lane}"
        symbols = [("s", self.steps), ("j", v)]
        constraints = [(col, 0, lay.R - 1)]
        if self.blocks * rpb > lay.K:
            constraints.append((row, 0, lay.K - 1))
        return row, col, symbols, constraints

    def _column_loop_exprs(self):
        lay, tiles = self.layout, self.column_tiles
        k0 = f"bl_x floordiv {tiles}" if tiles > 1 else "bl_x"
        tile = f"bl_x mod {tiles}" if tiles > 1 else "0"
        k1 = f"({tile}) * {COLUMN_TILE} + th_x mod {COLUMN_TILE}"
        k = f"({k0}) * {lay.K1} + {k1}"
        r = f"s * {COLUMN_TILE} + th_x floordiv {COLUMN_TILE}"
        symbols = [("s", self.steps)]
        constraints = [(r, 0, lay.R - 1), (k1, 0, lay.K1 - 1)]
        return k, r, symbols, constraints

    def _write(self, params, outputs, values_per_hero, k_value, cond):
        """Writes each root (epilogue applied) at kept index `k_value` if `cond`."""
        outputs = list(outputs)
        if_op = scf.IfOp(cond, [o.type for o in outputs], has_else=True)
        with ir.InsertionPoint(if_op.then_block):
            out_index = []
            if self.layout.kept:
                attr = self.index_map(str(IndexingMap.parse(map_text(
                    [("k", self.layout.K)], [], self.layout.output_index("k"))).simplified()))
                out_index = xla_gpu.build_apply_indexing(attr, [k_value])
            new = list(outputs)
            for root, hero in zip(self.fusion.roots, self.fusion.heroes):
                if hero.opcode != "reduce":
                    continue
                values = values_per_hero[self.heroes.index(hero)]
                if root is not hero:
                    values = self.call_subgraph(root, params, out_index, values)
                slot = self._output_slot(root)
                for i, value in enumerate(values):
                    new[slot + i] = tensor.insert(value, new[slot + i], out_index)
            scf.YieldOp(new)
        with ir.InsertionPoint(if_op.else_block):
            scf.YieldOp(outputs)
        return list(if_op.results)

    def _split(self, flat, inits):
        out, pos = [], 0
        for group in inits:
            out.append(flat[pos:pos + len(group)])
            pos += len(group)
        return out

    def _finish_rows(self, params, outputs, partials, inits, thread_id, block_id):
        t, rpb = self.threads_per_row, self.rows_per_block
        per_hero = self._split(partials, inits)
        per_hero = [self._shuffle(h, vals, min(WARP_SIZE, t) // 2)
                    for h, vals in zip(self.heroes, per_hero)]
        warps = t // WARP_SIZE
        lane_e = f"th_x mod {t}" if rpb > 1 else "th_x"
        row_e = f"bl_x * {rpb} + th_x floordiv {t}" if rpb > 1 else "bl_x"
        if warps > 1:
            row_in_block, warp, lane = self._ids(thread_id, block_id, [
                f"th_x floordiv {t}" if rpb > 1 else "0",
                f"(th_x mod {t}) floordiv {WARP_SIZE}", f"th_x mod {WARP_SIZE}"])
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
        lane_v, row_v = self._ids(thread_id, block_id, [lane_e, row_e])
        index = ir.IndexType.get()
        cond = arith.cmpi(arith.CmpIPredicate.eq, lane_v, arith.constant(index, 0))
        if self.blocks * rpb > self.layout.K:
            in_range = arith.cmpi(arith.CmpIPredicate.ult, row_v,
                                  arith.constant(index, self.layout.K))
            cond = arith.andi(cond, in_range)
        return self._write(params, outputs, per_hero, row_v, cond)

    def _finish_columns(self, params, outputs, partials, inits, thread_id, block_id):
        lay, tiles = self.layout, self.column_tiles
        index = ir.IndexType.get()
        x, y = self._ids(thread_id, block_id, [f"th_x mod {COLUMN_TILE}",
                                               f"th_x floordiv {COLUMN_TILE}"])
        stored = []
        for v in partials:
            shm = xla_gpu.AllocateSharedOp(
                ir.RankedTensorType.get([COLUMN_TILE, COLUMN_TILE + 1], v.type)).result
            stored.append(tensor.insert(v, shm, [y, x]))
        synced = list(xla_gpu.SyncThreadsOp(stored).results)
        transposed = [tensor.extract(t, [x, y]) for t in synced]
        per_hero = [self._shuffle(h, vals, WARP_SIZE // 2)
                    for h, vals in zip(self.heroes, self._split(transposed, inits))]
        k0 = f"bl_x floordiv {tiles}" if tiles > 1 else "bl_x"
        tile = f"bl_x mod {tiles}" if tiles > 1 else "0"
        column = f"({tile}) * {COLUMN_TILE} + th_x floordiv {COLUMN_TILE}"
        (k_v, column_v) = self._ids(thread_id, block_id, [f"({k0}) * {lay.K1} + {column}", column])
        cond = arith.andi(
            arith.cmpi(arith.CmpIPredicate.eq, x, arith.constant(index, 0)),
            arith.cmpi(arith.CmpIPredicate.ult, column_v, arith.constant(index, lay.K1)))
        return self._write(params, outputs, per_hero, k_v, cond)

    def _predicated_insert(self, cond, value, dest, indices):
        return xla_gpu.PredicatedInsertOp(value, dest, list(indices), cond).result

    def _predicated_extract(self, cond, source, indices, default):
        return xla_gpu.PredicatedExtractOp(source, list(indices), cond, default).result
