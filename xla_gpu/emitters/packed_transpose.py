"""The packed transpose emitter: XLA's PackedTranspose for narrow types.

For elements narrower than a shared-memory bank word (32 bits), XLA packs
`V = 32 / bits` elements per thread on both global sides and transposes
`V x V` blocks in registers, over one unpadded `32V x 32V` tile per hero
(`analysis.transpose.PackedTiling` says which transposes and how they are
tiled). With 4 warps (128 threads):

    %tile = xla_gpu.allocate_shared : tensor<64x64xbf16>       // V = 2
    // Write: tile row = i * 4 + warp, tile column = lane * V + v. A warp
    // reads V * 32 consecutive elements of the input's minor dimension.
    %w = xla_gpu.loop (%warp, %lane, %bl)[%i, %v] -> (input idx...)
        in #write iter_args(%t = %tile) {
      %x = <the hero's operand at the input index>
      tensor.insert %x into %t[row, swizzled column]
    }
    %s = xla_gpu.sync_threads %w
    // Read: each thread takes the V x V block at tile rows lane * V + vv
    // and columns (i * 4 + warp) * V + vh: V reads of V consecutive
    // elements (vector.transfer_read once vectorized) ...
    %out = xla_gpu.loop (%warp, %lane, %bl)[%i] -> (tile row, column)
        in #outer iter_args(%o = %output) {
      %block = vector<VxV> with block[vh, vv] = tile[row + vv, column + vh]
      // ... and writes column vh of the block as V consecutive elements of
      // the output's minor dimension (the tile's rows).
      %r = xla_gpu.loop (%warp, %lane, %bl, %i)[%vh, %vv] -> (output idx...)
          in #inner iter_args(%o2 = %o) {
        %y = vector.extract %block[%vh, %vv]
        tensor.insert <epilogue(%y)> into %o2[output idx]
      }
    }

Tile columns are swizzled instead of padded: the V-column group g of row
r is stored at group (g + r floordiv V) mod 32, which keeps each block's
V columns contiguous (one vector read per row) while the 32 lanes of a
warp, reading rows lane * V, hit 32 different banks.

Side outputs (roots that are not transposed) are written by the first loop
at the input element's position, as in the padded emitter. Predicates are
kept as bytes in the tile (i8), as XLA stores them.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, tensor, vector

from ..analysis.indexing import const, delinearize, dim, floordiv, indexing_map, sum_exprs, sym
from ..analysis.transpose import NUM_BANKS, NUM_WARPS, THREADS, PackedTiling, TransposePlan
from ..dialects import xla_gpu
from .base import LaunchDims
from .transpose import TransposeEmitterBase, _reindex
from .types import element_type

__all__ = ["PackedTransposeEmitter"]

_DYNAMIC = ir.ShapedType.get_dynamic_size() if hasattr(ir.ShapedType, "get_dynamic_size") \
    else -(2 ** 63)


def _index(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


class PackedTransposeEmitter(TransposeEmitterBase):
    def __init__(self, fusion, plan: TransposePlan):
        super().__init__(fusion, plan)
        if not isinstance(plan.tiling, PackedTiling):
            raise TypeError("the packed transpose emitter needs a PackedTiling")
        self.tiling: PackedTiling = plan.tiling

    def launch_dims(self) -> LaunchDims:
        return LaunchDims(THREADS, self.tiling.num_blocks)

    # -- maps ----------------------------------------------------------------
    # The loops run over (th_x, bl_x)[i]: a thread's warp and lane are
    # expressions of th_x, so that the loops' domain checks fold with the
    # thread id's range. Inside, the elements of a vector are indexed over
    # the thread's tile coordinates (their ranges narrowed by the loop's
    # checks, so that no index needs a check of its own) and the vector's
    # element (a plain loop, vectorized once lowered).
    _WARP = property(lambda self: floordiv(dim(0), NUM_BANKS))
    _LANE = property(lambda self: dim(0) % NUM_BANKS)

    def _grid(self) -> list[tuple[str, int]]:
        return [("th_x", THREADS), ("bl_x", self.tiling.num_blocks)]

    def _side(self, output: bool, block):
        """Block offsets (of the block id `block`), tile sizes, dims and
        the positions of A, T1 and T2 of the canonical input
        (output=False) or output shape."""
        t = self.tiling
        out = delinearize(block, t.block_counts)
        if output:
            return out, t.out_tile, t.out_dims, (t.a_id, t.t1_out, t.t2_out)
        inp = [const(0)] * t.rank
        for k, p in enumerate(t.cperm):
            inp[p] = out[k]
        return inp, t.in_tile, t.in_dims, (t.a_id, t.t1_in, t.t2_in)

    def _canonical(self, output: bool, col, row, block) -> list:
        """The canonical index of tile column `col`, row `row` in block
        `block`: the column runs over A (major) and T1, the row over T2."""
        t = self.tiling
        blocks, tiles, _, (a_pos, t1_pos, t2_pos) = self._side(output, block)
        offsets = [const(0)] * t.rank
        if t.a == 1:
            offsets[t1_pos] = col
        else:
            offsets[a_pos] = floordiv(col, t.t1)
            offsets[t1_pos] = col % t.t1
        offsets[t2_pos] = row
        return [sum_exprs([b * size if size != 1 else b, off])
                for b, size, off in zip(blocks, tiles, offsets)]

    def _constraints(self, output: bool, col_first, row_first, col, row, block):
        """The bounds of the canonical dims that a partial tile crosses, as
        (per-vector, per-element) constraints. A bound is checked once per
        vector (on its first element, `col_first` / `row_first`) when the
        vector is all in or all out: rows of T2 always (XLA's tiles keep
        T2's remainder whole vectors), A and T1 when T1's tile and (for T1)
        its size are whole vectors; otherwise per element."""
        t = self.tiling
        v = t.vector
        _, tiles, dims, (a_pos, t1_pos, t2_pos) = self._side(output, block)
        first = self._canonical(output, col_first, row_first, block)
        full = self._canonical(output, col, row, block)
        per_vector, per_element = [], []
        for k, (size, d) in enumerate(zip(tiles, dims)):
            if d % size == 0:
                continue
            aligned = k == t2_pos or (t.t1 % v == 0 and (k == a_pos or d % v == 0))
            if aligned:
                per_vector.append((first[k], 0, d - 1))
            else:
                per_element.append((full[k], 0, d - 1))
        return per_vector, per_element

    def _slot(self, row_group: ir.Value, column_group: ir.Value) -> ir.Value:
        """The tile slot (V-column group) where column group `column_group`
        of the rows of V-row group `row_group` is stored: the two XORed.
        Per row, a permutation of the 32 slots; down a column, 32
        consecutive V-row groups (the lanes of a warp reading a V x V block
        each) hit 32 different slots, hence banks. XLA rotates instead
        (`(column_group + row_group) mod 32`): the same banks, but a rotation
        wraps within a warp, and the host emulation's thread loops (marked
        free of cross-thread dependences for LLVM's vectorizer) let LLVM
        take the wrapped addresses for consecutive ones."""
        return arith.xori(column_group, row_group)

    # -- emission ------------------------------------------------------------
    def _tile_type(self, hero) -> ir.Type:
        if hero.shape.element_type == "pred":
            return ir.IntegerType.get_signless(8)
        return element_type(hero.shape.element_type)

    def emit_entry(self, params, outputs, thread_id, block_id):
        t = self.tiling
        v = t.vector
        grid_ids = [thread_id, block_id]
        grid = self._grid()
        warp, lane = self._WARP, self._LANE
        results = list(outputs)

        tiles = [xla_gpu.AllocateSharedOp(ir.RankedTensorType.get(
            t.shmem_dims, self._tile_type(h))).result for h in self.heroes]

        # First loop: the heroes' operands into the tiles, side outputs to
        # their outputs. A thread's tile row is i * 4 + warp, its vector's
        # first column lane * V.
        row = sym(0) * NUM_WARPS + warp
        per_vector, _ = self._constraints(False, lane * v, row, lane * v, row, dim(1))
        # The coordinates (row, lane) as results, reduced modulo the
        # populated rows and column groups: a no-op for the threads the
        # checks let through, it keeps every index provably in bounds.
        outer_map = indexing_map(grid, [("i", t.write_steps)],
                                 [row % t.rows, lane % (t.cols // v)],
                                 [(lane * v, 0, t.cols - v), (row, 0, t.rows - 1)]
                                 + per_vector)
        # Over (row, lane, bl_x)[v]:
        coords = [("row", t.rows), ("lane", t.cols // v), ("bl_x", t.num_blocks)]
        col = dim(1) * v + sym(0)
        in_exprs = self._canonical(False, col, dim(0), dim(2))
        _, per_element = self._constraints(False, dim(1) * v, dim(0), col, dim(0), dim(2))
        # The tile index over (row, slot)[v].
        shmem_map = indexing_map([("row", t.rows), ("slot", NUM_BANKS)], [("v", v)],
                                 [dim(0), dim(1) * v + sym(0)])
        row_group_map = indexing_map([("row", t.rows)], [], [floordiv(dim(0), v)])
        side = [k for k, (_, h) in enumerate(self.slots) if h is None]
        outer = xla_gpu.build_loop(self.index_map(outer_map), grid_ids,
                                   tiles + [results[k] for k in side])
        with ir.InsertionPoint(outer.region.blocks[0]):
            args = list(outer.region.blocks[0].arguments)
            coord_ids = [args[1], args[2], block_id]
            slot = self._slot(self.maps.apply(self.index_map(row_group_map), [args[1]])[0],
                              args[2])

            def write(v_id, iters):
                index_of = self._indexer(coords, [("v", v)], in_exprs, t.in_dims,
                                         coord_ids, [v_id])
                shmem_index = self.maps.apply(self.index_map(shmem_map), [coord_ids[0], slot],
                                              [v_id])
                written = []
                for hero, it in zip(self.heroes, iters):
                    operand = hero.operands[0]
                    value = self.value_at(operand, params, index_of(operand.shape.dims))
                    if hero.shape.element_type == "pred":
                        value = arith.extui(self._tile_type(hero), value)
                    written.append(tensor.insert(value, it, shmem_index))
                for k, it in zip(side, iters[len(self.heroes):]):
                    root = self.slots[k][0]
                    index = index_of(root.shape.dims)
                    written.append(tensor.insert(self.value_at(root, params, index), it, index))
                return written

            written = self._vector_loops([v], args[3:], coords, coord_ids, per_element,
                                         lambda ids, iters: write(ids[0], iters))
            xla_gpu.YieldOp(written)
        loop_results = list(outer.results)
        for k, r in zip(side, loop_results[len(self.heroes):]):
            results[k] = r
        synced = list(xla_gpu.SyncThreadsOp(loop_results[:len(self.heroes)]).results)

        # Second loop: V x V blocks of the tiles into registers, their
        # columns to the outputs as V consecutive elements. A thread's
        # block: V-column group i * 4 + warp, V-row group lane.
        group = sym(0) * NUM_WARPS + warp
        per_vector, _ = self._constraints(True, group * v, lane * v, group * v, lane * v,
                                          dim(1))
        outer_map = indexing_map(
            grid, [("i", t.read_steps)], [group % (t.cols // v), lane % (t.rows // v)],
            [(group * v, 0, t.cols - v), (lane * v, 0, t.rows - v)] + per_vector)
        # Over (group, lane, bl_x)[vh, vv]:
        coords = [("group", t.cols // v), ("lane", t.rows // v), ("bl_x", t.num_blocks)]
        col, row = dim(0) * v + sym(0), dim(1) * v + sym(1)
        out_exprs = self._canonical(True, col, row, dim(2))
        _, per_element = self._constraints(True, dim(0) * v, dim(1) * v, col, row, dim(2))
        corner_map = self.index_map(indexing_map(
            [("lane", t.rows // v), ("slot", NUM_BANKS)], [], [dim(0) * v, dim(1) * v]))
        mine = [k for k, (_, h) in enumerate(self.slots) if h is not None]
        outer = xla_gpu.build_loop(self.index_map(outer_map), grid_ids,
                                   [results[k] for k in mine])
        with ir.InsertionPoint(outer.region.blocks[0]):
            args = list(outer.region.blocks[0].arguments)
            coord_ids = [args[1], args[2], block_id]
            row0, col0 = self.maps.apply(corner_map, [args[2], self._slot(args[2], args[1])])
            blocks = {id(h): self._read_block(tile, row0, col0, self._tile_type(h))
                      for h, tile in zip(self.heroes, synced)}

            def read(vector_ids, iters):
                index_of = self._indexer(coords, [("vh", v), ("vv", v)], out_exprs,
                                         t.out_dims, coord_ids, vector_ids)
                values = {}
                for hero in self.heroes:
                    y = vector.ExtractOp(blocks[id(hero)], vector_ids,
                                         [_DYNAMIC, _DYNAMIC]).result
                    if hero.shape.element_type == "pred":
                        y = arith.trunci(element_type("pred"), y)
                    values[id(hero)] = y
                return self.write_transposed(mine, iters, values, params, index_of)

            written = self._vector_loops([v, v], args[3:], coords, coord_ids, per_element,
                                         read)
            xla_gpu.YieldOp(written)
        for k, r in zip(mine, outer.results):
            results[k] = r
        return results

    def _vector_loops(self, sizes, iters, coords, coord_ids, constraints, body):
        """`body(ids, iters)` in a nest of loops over [0, size) per `sizes`
        (the innermost one over consecutive elements), each element checked
        against `constraints` (over `coords` and the loops' variables)."""
        def nest(level, ids, iters):
            if level == len(sizes):
                with self.calls_shared():
                    return self._checked(constraints, coords, len(sizes), coord_ids, ids,
                                         iters, body)
            loop = scf.ForOp(_index(0), _index(sizes[level]), _index(1), list(iters))
            with ir.InsertionPoint(loop.body):
                scf.YieldOp(nest(level + 1, ids + [loop.induction_variable],
                                 list(loop.inner_iter_args)))
            return list(loop.results)

        return nest(0, [], list(iters))

    def _checked(self, constraints, coords, num_symbols, coord_ids, symbol_ids, iters, body):
        if not constraints:
            return body(symbol_ids, iters)
        names = [(f"s{k}", self.tiling.side) for k in range(num_symbols)]
        check = self.index_map(indexing_map(coords, names, [e for e, _, _ in constraints],
                                            simplify=False))
        values = self.maps.apply(check, coord_ids, symbol_ids)
        cond = None
        for value, (_, lo, hi) in zip(values, constraints):
            c = arith.andi(
                arith.cmpi(arith.CmpIPredicate.sge, value, _index(lo)),
                arith.cmpi(arith.CmpIPredicate.sle, value, _index(hi)))
            cond = c if cond is None else arith.andi(cond, c)
        if_op = scf.IfOp(cond, [it.type for it in iters], has_else=True)
        with ir.InsertionPoint(if_op.then_block):
            scf.YieldOp(body(symbol_ids, iters))
        with ir.InsertionPoint(if_op.else_block):
            scf.YieldOp(list(iters))
        return list(if_op.results)

    def _read_block(self, tile: ir.Value, row0: ir.Value, col0: ir.Value,
                    element: ir.Type) -> ir.Value:
        """`block[vh, vv] = tile[row0 + vv, col0 + vh]` as a V x V vector:
        per row, a loop over its V consecutive elements (made one vector
        read by vectorize-loads-stores, then unrolled)."""
        v = self.tiling.vector
        side = self.tiling.side
        block_type = ir.VectorType.get([v, v], element)
        zero = ir.FloatAttr.get(element, 0.0) if not isinstance(element, ir.IntegerType) \
            else ir.IntegerAttr.get(element, 0)
        block = arith.constant(block_type, ir.DenseElementsAttr.get_splat(block_type, zero))
        for r in range(v):
            element_map = self.index_map(indexing_map(
                [("row", side), ("col", side)], [("j", v)], [dim(0) + r, dim(1) + sym(0)]))
            loop = scf.ForOp(_index(0), _index(v), _index(1), [block])
            with ir.InsertionPoint(loop.body):
                j = loop.induction_variable
                index = self.maps.apply(element_map, [row0, col0], [j])
                x = tensor.extract(tile, index)
                updated = vector.InsertOp(x, loop.inner_iter_args[0], [j],
                                          [_DYNAMIC, r]).result
                scf.YieldOp([updated])
            block = loop.results[0]
        return block

    def _indexer(self, grid, symbols, canonical_exprs, canonical_dims, dim_values,
                 symbol_values):
        """The index of a tensor of any shape with the canonical shape's
        elements, made once per shape: the loop's canonical index reshaped
        (row-major) to it, as one map over the loop's variables."""
        cache: dict[tuple[int, ...], list[ir.Value]] = {}

        def index_of(dims):
            dims = tuple(dims)
            if dims not in cache:
                m = indexing_map(grid, symbols,
                                 _reindex(canonical_exprs, list(canonical_dims), list(dims)))
                cache[dims] = self.maps.apply(self.index_map(m), dim_values, symbol_values)
            return cache[dims]

        return index_of

