"""The tiled transpose emitter (seed 000, "transpose emitter").

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

Tiling, as XLA's TransposeFusion does it, on the normalized transpose
(size-1 dimensions dropped, dimensions that stay adjacent merged; see
`analysis.fusion.normalized_transpose`):

- the minor dimension moves (021, 210, 10, ...): the tile covers the input's
  minor dimension T1 and the input dimension T2 that becomes the output's
  minor one, each `32 * vector` long; every other dimension has tile size 1,
  so blocks iterate over it. 128 threads (4 warps) cover 4 tile rows per
  step of `i` (8 * vector steps); each thread handles `vector` consecutive
  elements (`j`) of a row. `vector` is 2 for 16-bit and 4 for 8-bit types
  (each global access is at least 32 bits wide) when both tiled dimensions
  are multiples of it; the tile stays element-addressed.
- the minor dimension stays (102): XLA tiles such a transpose when the minor
  dimension is at most 8 bytes wide; it then rides along whole in the tile
  (the `vector` of each thread is that dimension), the tile covers the
  second-minor input dimension and the input dimension that becomes the
  output's second-minor one, 32 each, and the padding goes on the
  second-minor tile dimension.

Partial tiles at any edge are cut by constraints in the loops' maps. Several
transposes of one normalized shape share the loops (one tile each); roots
that are not transposes ("side outputs") are written by the first loop at
the input element's position (any shape with as many elements). The loops
run over the normalized shapes; the real tensors are indexed through
bitcast maps. What the emitter cannot tile it refuses with
`TransposeRefused`, and the loop emitter takes the fusion.

The tile is written in the input's orientation (consecutive threads write
consecutive elements of a tile row) and read transposed through the
padding, as in seed 000's listing.
"""

from __future__ import annotations

from math import prod

from mlir import ir
from mlir.dialects import arith, tensor

from ..analysis.fusion import epilogue_chain_ok, is_tiled_transpose, normalized_transpose
from ..analysis.indexing import ELEMENTWISE_OPCODES, delinearize, map_text
from ..dialects import xla_gpu
from ..hlo import HloInstruction
from ..hlo.shape import bit_width
from ..ir import IndexingMap
from .base import WARP_SIZE, KernelEmitter, LaunchDims
from .types import element_type

__all__ = ["TransposeEmitter", "TransposeRefused", "TransposeTiling"]

TILE = WARP_SIZE              # tile side (elements, times the vector width)
NUM_WARPS = 4                 # warps per block: rows of the tile per step
THREADS = TILE * NUM_WARPS    # 128 threads per block
# Static shared memory a block may use without opting in to more.
MAX_SHARED_BYTES = 48 * 1024
# Each thread's global accesses should be at least this wide.
MIN_ACCESS_BITS = 32

# Ops an epilogue (hero -> root) may consist of: they keep the row-major
# linear order, so the root's index follows from the hero's.
_ORDER_PRESERVING = ELEMENTWISE_OPCODES | {"bitcast", "reshape", "copy"}


class TransposeRefused(Exception):
    """The fusion cannot be emitted by the tiled transpose emitter (the
    message says why); the loop emitter computes it instead."""


def _storage_bits(element: str) -> int:
    return max(bit_width(element), 8)  # pred and sub-byte ints take a byte


def _join(terms: list[str]) -> str:
    terms = [t for t in terms if t != "0"]
    return " + ".join(terms) or "0"


def _scaled(expr: str, factor: int) -> str:
    if expr == "0" or factor == 0:
        return "0"
    return expr if factor == 1 else f"({expr}) * {factor}"


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


def _reindex(norm_exprs: list[str], norm_dims: list[int], dims: list[int]) -> list[str]:
    """The index into a tensor of `dims` of the element at the normalized
    index `norm_exprs` (same row-major linear position)."""
    groups = _group_dims(norm_dims, dims)
    if groups is None:  # a reshape across normalized dims: go through linear
        terms, stride = [], 1
        for expr, size in reversed(list(zip(norm_exprs, norm_dims))):
            terms.append(_scaled(expr, stride))
            stride *= size
        return delinearize(_join(list(reversed(terms))), dims)
    out = ["0"] * len(dims)
    for expr, group in zip(norm_exprs, groups):
        for p, e in zip(group, delinearize(expr, [dims[p] for p in group])):
            out[p] = e
    return out


class TransposeTiling:
    """Tiles, launch and index maps of one normalized transpose: operand
    dims `dims`, result dim k = operand dim `perm[k]`."""

    def __init__(self, dims: list[int], perm: list[int], vector: int = 1):
        self.dims, self.perm = list(dims), list(perm)
        n = len(dims)
        self.out_dims = [dims[p] for p in perm]
        self.minor_kept = perm[-1] == n - 1
        if self.minor_kept:
            # 102: the minor dimension is the vector; T1 is the second-minor.
            self.vector = dims[-1]
            self.t1, self.t2 = n - 2, perm[n - 2]
            side = TILE
        else:
            self.vector = vector
            self.t1, self.t2 = n - 1, perm[-1]
            side = TILE * vector
        self.side = side
        self.block_sizes = [1] * n
        self.block_sizes[self.t1] = self.block_sizes[self.t2] = side
        if self.minor_kept:
            self.block_sizes[-1] = self.vector
        self.out_block_sizes = [self.block_sizes[p] for p in perm]
        self.block_counts = [-(-d // b) for d, b in zip(dims, self.block_sizes)]
        self.num_blocks = prod(self.block_counts)
        # The padded tile: one more element on the dimension read by columns.
        self.shmem_dims = list(self.block_sizes)
        self.shmem_dims[self.t1 if self.minor_kept else n - 1] += 1
        self.steps = prod(self.block_sizes) // (THREADS * self.vector)

    # -- expressions over (th_x, bl_x)[i, j] ---------------------------------
    # With `split`, over (warp, lane, bl_x)[i, j] instead: th_x = warp * 32 +
    # lane (see TransposeEmitter._indexer).
    def _linear(self, with_vector: bool = True, split: bool = False) -> str:
        """Position of a thread's element in the tile, row-major (of its
        first vector element without `with_vector`)."""
        v = self.vector
        thread = f"(warp * {TILE} + lane)" if split else "th_x"
        terms = [f"i * {THREADS * v}" if self.steps > 1 else "0",
                 f"{thread} * {v}" if v > 1 else thread,
                 "j" if v > 1 and with_vector else "0"]
        return _join(terms)

    def _block_ids(self) -> list[str]:
        return delinearize("bl_x", self.block_counts) if self.num_blocks > 1 \
            else ["0"] * len(self.dims)

    def tile_offsets(self) -> list[str]:
        """A thread's offsets in the input tile (also the tile index the
        first loop writes)."""
        return delinearize(self._linear(), self.block_sizes)

    def transposed_tile_offsets(self) -> list[str]:
        """The tile index the second loop reads: the element that goes to
        the thread's output position (T1 and T2 swapped)."""
        offsets = self.tile_offsets()
        offsets[self.t1], offsets[self.t2] = offsets[self.t2], offsets[self.t1]
        return offsets

    def input_index(self, split: bool = False) -> tuple[list[str], list[tuple[str, int, int]]]:
        """Normalized input index and the constraints of partial tiles."""
        return self._index(self._block_ids(), self.block_sizes, self.dims, split)

    def output_index(self, split: bool = False) -> tuple[list[str], list[tuple[str, int, int]]]:
        blocks = self._block_ids()
        return self._index([blocks[p] for p in self.perm], self.out_block_sizes,
                           self.out_dims, split)

    def _index(self, blocks, sizes, dims, split):
        offsets = delinearize(self._linear(True, split), sizes)
        firsts = delinearize(self._linear(False, split), sizes)
        exprs, constraints = [], []
        for k, (b, size, dim) in enumerate(zip(blocks, sizes, dims)):
            e = _join([_scaled(b, size), offsets[k]])
            exprs.append(e)
            if dim % size == 0:
                continue
            if k == len(dims) - 1 and self.vector > 1 and not self.minor_kept:
                # The vector's dim is a multiple of the vector: a whole
                # vector is in range or none of it. Saying so without `j`
                # gives the vector's elements one bounds check, which
                # canonicalization merges once the vector loop is unrolled.
                constraints.append((_join([_scaled(b, size), firsts[k]]), 0,
                                    dim - self.vector))
            else:
                constraints.append((e, 0, dim - 1))
        return exprs, constraints

    def map(self, results: list[str], constraints=(), split: bool = False) -> str:
        threads = [("warp", NUM_WARPS), ("lane", TILE)] if split else [("th_x", THREADS)]
        text = map_text(threads + [("bl_x", self.num_blocks)],
                        [("i", self.steps), ("j", self.vector)], results, constraints)
        return str(IndexingMap.parse(text).simplified())


class TransposeEmitter(KernelEmitter):
    name = "transpose"

    def __init__(self, fusion):
        super().__init__(fusion)
        roots, heroes = fusion.roots, fusion.heroes
        # Output slots: (root, hero) for transposed outputs, (root, None) for
        # side outputs, in output order.
        self.slots: list[tuple[HloInstruction, HloInstruction | None]] = []
        self.heroes: list[HloInstruction] = []    # one tile each
        for root, hero in zip(roots, heroes):
            if root.shape.is_tuple:
                raise TransposeRefused(f"root '{root.name}' is a tuple")
            if is_tiled_transpose(hero):
                if not any(h is hero for h in self.heroes):
                    self.heroes.append(hero)
                self.slots.append((root, hero))
            else:
                self.slots.append((root, None))
        if not self.heroes:
            raise TransposeRefused("no tiled transpose among the heroes")
        first = self.heroes[0]
        dims, perm = normalized_transpose(first)
        for hero in self.heroes[1:]:
            if normalized_transpose(hero) != (dims, perm):
                raise TransposeRefused(
                    f"transposes '{first.name}' and '{hero.name}' have different "
                    "normalized shapes")
        for root, hero in self.slots:
            if hero is None:
                # Written by the first loop at the input element's linear
                # position: any shape of as many elements (a bitcast of the
                # input shape, as XLA requires) is covered exactly once.
                if prod(root.shape.dims) != prod(dims):
                    raise TransposeRefused(
                        f"side output '{root.name}' {root.shape} does not have the "
                        f"elements of the transpose input {first.operands[0].shape}")
            elif not _is_order_preserving(root, hero):
                raise TransposeRefused(f"the epilogue of '{root.name}' reorders elements")
        self._check_no_hero_below_another()
        self.tiling = self._choose_tiling(dims, perm)
        self._split_ids: list[ir.Value] | None = None   # warp, lane, block id

    # -- decisions ---------------------------------------------------------
    def _check_no_hero_below_another(self) -> None:
        # A hero's value exists only in its tile: nothing but its own
        # epilogue may read it.
        starts = [h.operands[0] for h in self.heroes] + \
                 [r for r, h in self.slots if h is None]
        heroes = {id(h) for h in self.heroes}
        stack, seen = list(starts), set()
        while stack:
            inst = stack.pop()
            if id(inst) in seen:
                continue
            seen.add(id(inst))
            if id(inst) in heroes:
                raise TransposeRefused(f"transpose '{inst.name}' feeds another "
                                       "transpose or a side output")
            stack.extend(inst.operands)

    def _shared_bytes(self, tiling: TransposeTiling) -> int:
        return sum(prod(tiling.shmem_dims) * _storage_bits(h.shape.element_type) // 8
                   for h in self.heroes)

    def _choose_tiling(self, dims, perm) -> TransposeTiling:
        tiling = TransposeTiling(dims, perm)
        if not tiling.minor_kept:
            # Narrow types: several elements per thread so that each global
            # access is at least 32 bits; both tiled dims must be multiples
            # of the vector (aligned vector accesses) and the tiles must fit.
            bits = min(_storage_bits(h.shape.element_type) for h in self.heroes)
            vector = max(1, MIN_ACCESS_BITS // bits)
            while vector > 1:
                candidate = TransposeTiling(dims, perm, vector)
                if dims[-1] % vector == 0 and dims[perm[-1]] % vector == 0 and \
                        self._shared_bytes(candidate) <= MAX_SHARED_BYTES:
                    tiling = candidate
                    break
                vector //= 2
        if self._shared_bytes(tiling) > MAX_SHARED_BYTES:
            raise TransposeRefused(
                f"{len(self.heroes)} tiles of {'x'.join(map(str, tiling.shmem_dims))} "
                f"need {self._shared_bytes(tiling)} bytes of shared memory, more than "
                f"the {MAX_SHARED_BYTES} a block has")
        return tiling

    # -- KernelEmitter -----------------------------------------------------
    def launch_dims(self) -> LaunchDims:
        # The tiles are static shared memory: no dynamic bytes to launch with.
        return LaunchDims(THREADS, self.tiling.num_blocks)

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
        return any(inst is h.operands[0] for h in self.heroes)

    def is_excluded(self, inst) -> bool:
        return any(inst is h for h in self.heroes)

    def prepare_subgraphs(self) -> None:
        for root, hero in self.slots:
            if hero is not None and root is not hero:
                self.partitioned.subgraph_of(root).injected = [hero]

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
            written = []
            for k, it in zip(mine, iters):
                root, hero = self.slots[k]
                index = index_of(root.shape.dims)
                value = values[id(hero)]
                if root is not hero:
                    value = self.call_subgraph(root, params, index, [value])[0]
                written.append(tensor.insert(value, it, index))
            xla_gpu.YieldOp(written)
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
        names = [f"d{k}" for k in range(len(norm_dims))]

        def index_of(dims):
            dims = tuple(dims)
            if dims in cache:
                return cache[dims]
            if not _splits(list(norm_dims), list(dims)):
                text = map_text(list(zip(names, norm_dims)), [],
                                _reindex(names, list(norm_dims), list(dims)))
                cache[dims] = self.maps.apply(
                    str(IndexingMap.parse(text).simplified()), norm_index)
            else:
                cache[dims] = self.maps.apply(thread_map(list(dims)),
                                              self._split_ids, symbols)
            return cache[dims]

        return index_of


def _is_order_preserving(root: HloInstruction, hero: HloInstruction) -> bool:
    """Whether the ops from `hero` up to `root` keep every element's linear
    position (elementwise ops, bitcasts, reshapes, copies), each reading the
    hero's chain through one instruction."""
    return epilogue_chain_ok(root, hero, lambda i: i.opcode in _ORDER_PRESERVING and
                             not i.shape.is_tuple and
                             prod(i.shape.dims) == prod(hero.shape.dims))
