"""The tiled transpose emitter.

A transpose that moves the minor dimension cannot both read and write
coalesced from one loop. Each block takes one tile of the transpose's input
and runs two loops over it:

    %shmem = xla_gpu.allocate_shared : tensor<32x1x33xf32>    // padded tile
    %w = xla_gpu.loop (%th, %bl)[%i, %j] -> (input idx..., tile idx...)
        in #read iter_args(%t = %shmem) {
      %x = <the hero's operand at the input index>  // prologue: pure_call
      tensor.insert %x into %t[tile idx]             // side outputs here too
    }
    %s = xla_gpu.sync_threads %w
    %out = xla_gpu.loop (%th, %bl)[%i, %j] -> (output idx...)
        in #write iter_args(%o = %output) {
      %y = tensor.extract %s[transposed tile idx]
      %r = xla_gpu.pure_call @epilogue(..., output idx..., %y)  // injected hero
      tensor.insert %r into %o[output idx]
    }

Consecutive threads read consecutive elements of the input's minor
dimension in the first loop and write consecutive elements of the output's
minor dimension in the second; the tile's minor dimension is padded by one
element so that the column accesses hit distinct shared-memory banks.

The tiling is XLA's (see `analysis.transpose`).

Partial tiles at any edge are cut by constraints in the loops' maps. Several
transposes of one normalized shape share the loops (one tile each); roots
that are not transposes ("side outputs") are written by the first loop at
the input element's position (any shape with as many elements). The loops
run over the normalized shapes; the real tensors are indexed through
bitcast maps. Which fusions the emitter can take is decided by the fusion
analysis (`analysis.transpose.transpose_refusal`): the others go to the
loop emitter.

The tile is written in the input's orientation (consecutive threads write
consecutive elements of a tile row) and read transposed through the
padding.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor
from mlir.ir import AffineExpr

from ..analysis import transpose as analysis
from ..analysis.indexing import const, delinearize, dim, indexing_map, sum_exprs, sym
from ..analysis.transpose import NUM_WARPS, THREADS, TILE, plan_transpose
from ..dialects import xla_gpu
from ..ir import IndexingMap
from .base import KernelEmitter, LaunchDims
from .types import element_type

__all__ = ["TransposeEmitter", "TransposeEmitterBase", "TransposeTiling",
           "transpose_emitter"]


def _scaled(expr: AffineExpr, factor: int) -> AffineExpr:
    return expr if factor == 1 else expr * factor


def _group_dims(norm_dims: list[int], dims: list[int]) -> list[list[int]] | None:
    """For each normalized dim, the positions of `dims` (size-1 ones left
    out) whose product it is, when `dims` refines `norm_dims` that way."""
    groups, pos = [], 0
    for size in norm_dims:
        group, product = [], 1
        while product < size and pos < len(dims):
            if dims[pos] != 1:
                group.append(pos)
                product *= dims[pos]
            pos += 1
        if product != size:
            return None
        groups.append(group)
    if any(d != 1 for d in dims[pos:]):
        return None
    return groups


def _splits(norm_dims: list[int], dims: list[int]) -> bool:
    """Whether indexing `dims` splits a normalized dim over several dims."""
    groups = _group_dims(norm_dims, dims)
    return groups is None or any(len(g) > 1 for g in groups)


def _reindex(norm_exprs: list[AffineExpr], norm_dims: list[int],
             dims: list[int]) -> list[AffineExpr]:
    """The index into a tensor of `dims` of the element at the normalized
    index `norm_exprs` (same row-major linear position)."""
    groups = _group_dims(norm_dims, dims)
    if groups is None:  # a reshape across normalized dims: go through linear
        terms, stride = [], 1
        for expr, size in reversed(list(zip(norm_exprs, norm_dims))):
            terms.append(_scaled(expr, stride))
            stride *= size
        return delinearize(sum_exprs(list(reversed(terms))), dims)
    out = [const(0)] * len(dims)
    for expr, group in zip(norm_exprs, groups):
        for p, e in zip(group, delinearize(expr, [dims[p] for p in group])):
            out[p] = e
    return out


class TransposeTiling(analysis.TransposeTiling):
    """The tiling of `analysis.transpose` and the index maps of its two
    loops, over (th_x, bl_x)[i, j]."""

    # -- expressions over (th_x, bl_x)[i, j] ---------------------------------
    # With `split`, over (warp, lane, bl_x)[i, j] instead: th_x = warp * 32 +
    # lane (see TransposeEmitter._indexer).
    @staticmethod
    def _thread_and_block(split: bool) -> tuple[AffineExpr, AffineExpr]:
        if split:
            return dim(0) * TILE + dim(1), dim(2)
        return dim(0), dim(1)

    def _linear(self, with_vector: bool = True, split: bool = False) -> AffineExpr:
        """Position of a thread's element in the tile, row-major (of its
        first vector element without `with_vector`)."""
        v = self.vector
        thread, _ = self._thread_and_block(split)
        step, element = sym(0), sym(1)   # i, j
        terms = [step * (THREADS * v) if self.steps > 1 else const(0),
                 thread * v if v > 1 else thread,
                 element if v > 1 and with_vector else const(0)]
        return sum_exprs(terms)

    def _block_ids(self, split: bool = False) -> list[AffineExpr]:
        _, block = self._thread_and_block(split)
        return delinearize(block, self.block_counts) if self.num_blocks > 1 \
            else [const(0)] * len(self.dims)

    def tile_offsets(self) -> list[AffineExpr]:
        """A thread's offsets in the input tile (also the tile index the
        first loop writes)."""
        return delinearize(self._linear(), self.block_sizes)

    def transposed_tile_offsets(self) -> list[AffineExpr]:
        """The tile index the second loop reads: the element that goes to
        the thread's output position (T1 and T2 swapped)."""
        offsets = self.tile_offsets()
        offsets[self.t1], offsets[self.t2] = offsets[self.t2], offsets[self.t1]
        return offsets

    def input_index(self, split: bool = False
                    ) -> tuple[list[AffineExpr], list[tuple[AffineExpr, int, int]]]:
        """Normalized input index and the constraints of partial tiles."""
        return self._index(self._block_ids(split), self.block_sizes, self.dims, split)

    def output_index(self, split: bool = False
                     ) -> tuple[list[AffineExpr], list[tuple[AffineExpr, int, int]]]:
        blocks = self._block_ids(split)
        return self._index([blocks[p] for p in self.perm], self.out_block_sizes,
                           self.out_dims, split)

    def _index(self, blocks, sizes, dims, split):
        offsets = delinearize(self._linear(True, split), sizes)
        firsts = delinearize(self._linear(False, split), sizes)
        exprs, constraints = [], []
        for k, (b, size, dim_size) in enumerate(zip(blocks, sizes, dims)):
            e = sum_exprs([_scaled(b, size), offsets[k]])
            exprs.append(e)
            if dim_size % size == 0:
                continue
            if k == len(dims) - 1 and self.vector > 1 and not self.minor_kept:
                # The vector's dim is a multiple of the vector: a whole
                # vector is in range or none of it. Saying so without `j`
                # gives the vector's elements one bounds check, which
                # canonicalization merges once the vector loop is unrolled.
                constraints.append((sum_exprs([_scaled(b, size), firsts[k]]), 0,
                                    dim_size - self.vector))
            else:
                constraints.append((e, 0, dim_size - 1))
        return exprs, constraints

    def map(self, results: list[AffineExpr], constraints=(), split: bool = False
            ) -> IndexingMap:
        threads = [("warp", NUM_WARPS), ("lane", TILE)] if split else [("th_x", THREADS)]
        return indexing_map(threads + [("bl_x", self.num_blocks)],
                            [("i", self.steps), ("j", self.vector)], results, constraints)


def transpose_emitter(fusion) -> "TransposeEmitterBase":
    """The padded-tile or the packed transpose emitter, as the plan of the
    fusion's transposes says (XLA's CreateTransposeFusion)."""
    plan = plan_transpose(fusion.roots, fusion.heroes)
    if isinstance(plan.tiling, analysis.PackedTiling):
        from .packed_transpose import PackedTransposeEmitter
        return PackedTransposeEmitter(fusion, plan)
    return TransposeEmitter(fusion, plan)


class TransposeEmitterBase(KernelEmitter):
    """What both transpose emitters share: the outputs' slots and how the
    computation is partitioned (each hero's operand a subgraph root, the
    heroes themselves injected into their epilogues)."""
    name = "transpose"

    def __init__(self, fusion, plan: analysis.TransposePlan | None = None):
        super().__init__(fusion)
        plan = plan or plan_transpose(fusion.roots, fusion.heroes)
        # Output slots: (root, hero) for transposed outputs, (root, None) for
        # side outputs, in output order; one tile per hero.
        self.slots = plan.slots
        self.heroes = plan.heroes
        self._hero_ids = {id(h) for h in self.heroes}
        self._hero_operand_ids = {id(h.operands[0]) for h in self.heroes}

    def root_groups(self):
        # Side outputs of one shape share a function (they are computed at
        # the same index); one function per epilogue.
        by_shape: dict[tuple[int, ...], list] = {}
        for root, hero in self.slots:
            if hero is None:
                by_shape.setdefault(tuple(root.shape.dims), []).append(root)
        groups = list(by_shape.values())
        for root, hero in self.slots:
            if hero is not None and root is not hero:
                groups.append([root])
        return groups

    def is_subgraph_root(self, inst) -> bool:
        return id(inst) in self._hero_operand_ids

    def is_excluded(self, inst) -> bool:
        return id(inst) in self._hero_ids

    def prepare_subgraphs(self) -> None:
        for root, hero in self.slots:
            if hero is not None and root is not hero:
                self.partitioned.subgraph_of(root).injected = [hero]

    def write_transposed(self, slots, iters, values: dict, params, index_of) -> list:
        """Inserts each transposed output of `slots` (slot numbers) into its
        iteration tensor: the hero's value (`values[id(hero)]`) through the
        root's epilogue, at the root's index."""
        written = []
        for k, it in zip(slots, iters):
            root, hero = self.slots[k]
            index = index_of(root.shape.dims)
            value = values[id(hero)]
            if root is not hero:
                value = self.call_subgraph(root, params, index, [value])[0]
            written.append(tensor.insert(value, it, index))
        return written


class TransposeEmitter(TransposeEmitterBase):
    """The padded 32 x 33 (times the vector) tile (see the module text)."""

    def __init__(self, fusion, plan: analysis.TransposePlan | None = None):
        plan = plan or plan_transpose(fusion.roots, fusion.heroes)
        super().__init__(fusion, plan)
        t = plan.tiling
        self.tiling = TransposeTiling(t.dims, t.perm, t.vector)
        self._split_ids: list[ir.Value] | None = None   # warp, lane, block id

    def launch_dims(self) -> LaunchDims:
        # The tiles are static shared memory: no dynamic bytes to launch with.
        return LaunchDims(THREADS, self.tiling.num_blocks)

    # -- emission ------------------------------------------------------------
    def emit_entry(self, params, outputs, thread_id, block_id):
        tiling = self.tiling
        ids = [thread_id, block_id]
        results = list(outputs)
        # The thread's warp and lane, for tensors that split a normalized
        # dimension (see _indexer).
        shapes = [(h.operands[0].shape.dims, tiling.dims) for h in self.heroes] + \
            [(r.shape.dims, tiling.dims if h is None else tiling.out_dims)
             for r, h in self.slots]
        self._split_ids = None
        if any(_splits(list(norm), list(dims)) for dims, norm in shapes):
            tile = arith.constant(ir.IndexType.get(), TILE)
            self._split_ids = [arith.divui(thread_id, tile),
                               arith.remui(thread_id, tile), block_id]

        # Shared tiles, one per transpose.
        tiles = [xla_gpu.AllocateSharedOp(ir.RankedTensorType.get(
            tiling.shmem_dims, element_type(h.shape.element_type))).result
            for h in self.heroes]

        # First loop: read the input coalesced into the tiles; side outputs.
        norm, constraints = tiling.input_index()
        read_map = self.index_map(tiling.map(norm + tiling.tile_offsets(), constraints))
        side = [k for k, (_, h) in enumerate(self.slots) if h is None]
        loop = xla_gpu.build_loop(read_map, ids, tiles + [results[k] for k in side])
        block = loop.region.blocks[0]
        with ir.InsertionPoint(block), self.calls_shared():
            args = list(block.arguments)
            rank = len(tiling.dims)
            n_results = rank + len(tiling.shmem_dims)
            index_of = self._indexer(
                args[2:2 + rank], tiling.dims,
                lambda dims: tiling.map(_reindex(tiling.input_index(True)[0],
                                                 tiling.dims, dims), split=True),
                args[:2])
            tile_index = args[2 + rank:2 + n_results]
            iters = args[2 + n_results:]
            written = []
            for hero, it in zip(self.heroes, iters):
                operand = hero.operands[0]
                value = self.value_at(operand, params, index_of(operand.shape.dims))
                written.append(tensor.insert(value, it, tile_index))
            for k, it in zip(side, iters[len(self.heroes):]):
                root = self.slots[k][0]
                index = index_of(root.shape.dims)
                value = self.value_at(root, params, index)
                written.append(tensor.insert(value, it, index))
            xla_gpu.YieldOp(written)
        loop_results = list(loop.results)
        for k, r in zip(side, loop_results[len(self.heroes):]):
            results[k] = r
        synced = xla_gpu.SyncThreadsOp(loop_results[:len(self.heroes)]).results

        # Second loop: read the tiles transposed, write the outputs coalesced.
        norm, constraints = tiling.output_index()
        write_map = self.index_map(tiling.map(norm, constraints))
        shmem_map = tiling.map(tiling.transposed_tile_offsets())
        mine = [k for k, (_, h) in enumerate(self.slots) if h is not None]
        loop = xla_gpu.build_loop(write_map, ids, [results[k] for k in mine])
        block = loop.region.blocks[0]
        with ir.InsertionPoint(block), self.calls_shared():
            args = list(block.arguments)
            rank = len(tiling.out_dims)
            index_of = self._indexer(
                args[2:2 + rank], tiling.out_dims,
                lambda dims: tiling.map(_reindex(tiling.output_index(True)[0],
                                                 tiling.out_dims, dims), split=True),
                args[:2])
            iters = args[2 + rank:]
            tile_index = self.maps.apply(shmem_map, ids, args[:2])
            values = {id(h): tensor.extract(t, tile_index)
                      for h, t in zip(self.heroes, synced)}
            xla_gpu.YieldOp(self.write_transposed(mine, iters, values, params, index_of))
        for k, r in zip(mine, loop.results):
            results[k] = r
        return results

    def _indexer(self, norm_index, norm_dims, thread_map, symbols):
        """Indexing of the tensors a loop touches, made once per shape. The
        loops run over the normalized shape; a tensor whose dims only add
        size-1 dims to it is indexed through a bitcast map of the loop's
        index. A tensor that splits a normalized dim over several dims (the
        real shape of a merged dim) is indexed from the thread's warp and
        lane instead (`thread_map(dims)`, over (warp, lane, bl_x)[i, j]):
        composed with the loop's `th_x mod 32`, such a split leaves
        `(x floordiv c) * c + x mod c` that the index-map simplifier does not
        fold back into `x` once the tensors are flattened, and what is left
        lowers to signed divisions that the LLVM lowering rejects."""
        cache = {tuple(norm_dims): list(norm_index)}

        def index_of(dims):
            dims = tuple(dims)
            if dims in cache:
                return cache[dims]
            if not _splits(list(norm_dims), list(dims)):
                bitcast = indexing_map(
                    [(f"d{k}", size) for k, size in enumerate(norm_dims)], [],
                    _reindex([dim(k) for k in range(len(norm_dims))],
                             list(norm_dims), list(dims)))
                cache[dims] = self.maps.apply(bitcast, norm_index)
            else:
                cache[dims] = self.maps.apply(thread_map(list(dims)),
                                              self._split_ids, symbols)
            return cache[dims]

        return index_of
