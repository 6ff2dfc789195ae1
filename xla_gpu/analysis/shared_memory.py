"""Shared-memory budgets: how much shared memory the emitters' tiles take
and the configurations that keep a block within what it may use.

Every tile an emitter allocates (`xla_gpu.allocate_shared`) lowers to a
static `.shared` array of the kernel (addrspace 3 globals); none is dynamic
shared memory, so no kernel is launched with dynamic bytes nor opts in to
more than the default (cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)
applies to dynamic shared memory only). A block's static shared memory is
at most 48 KiB on every CUDA GPU; ptxas refuses a kernel above it ("uses
too much shared data"). That is the budget here, for the cuda and the cpu
target alike (the cpu target runs the GPU's configurations).

As XLA does, the budget is kept at two levels:

* the emitters choose their tiles within it: a column reduction with many
  reduced values takes narrower vectors, then fewer warps per column; a
  small column reduction fewer vectors and threads; a row reduction fewer
  threads per row; a transpose narrower vectors or the padded tile instead
  of the packed one; a sort smaller tiles (`analysis.sort`). What cannot fit
  even at the smallest tiles is given to the loop emitter by the fusion
  analysis (the emitter's refusal says why);
* the fusion passes do not form a fusion whose emitter would need more than
  the budget at its preferred configuration (XLA's FusionFitsInBudget
  shared-memory check): multi-output fusion keeps such reductions in
  separate kernels (`analysis.reduction.reduction_shared_bytes`).

The budget is read through `static_shared_budget()`: the device
description's `shared_memory_per_block` (`xla_gpu.runtime.device`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hlo import HloInstruction
from ..hlo.shape import bit_width
from ..runtime.device import DEFAULT_DEVICE

__all__ = ["STATIC_SHARED_BUDGET", "static_shared_budget", "storage_bytes",
           "WARP_SIZE", "ColumnTiles", "column_tile_width", "column_tiles",
           "SmallColumnTiles", "small_column_tiles", "RowTiles", "row_tiles",
           "reduction_partial_bytes", "column_vector_size", "input_bits", "output_bits",
           "MAX_THREADS_PER_ROW",
           "MIN_ROW_ELEMENTS_PER_THREAD", "THREADS_PER_BLOCK_TARGET"]

# The static shared memory of one block on every CUDA GPU (sm_50 to sm_90):
# what a kernel gets without opting in to dynamic shared memory, as the one
# device description states it. Our tiles are all static, so this is their
# budget (cuda and the cpu target alike).
STATIC_SHARED_BUDGET = DEFAULT_DEVICE.shared_memory_per_block

WARP_SIZE = 32
# Row reductions: at most this many threads per row, each reducing at least
# this many elements; rows of short reductions side by side up to the
# target block size (XLA's RowReductionFusion).
MAX_THREADS_PER_ROW = 1024
MIN_ROW_ELEMENTS_PER_THREAD = 16
THREADS_PER_BLOCK_TARGET = 256
# Small column reductions start from XLA's 128 threads.
_SMALL_COLUMN_THREADS = 128


def static_shared_budget() -> int:
    """Bytes of shared memory one block's tiles may take (read at each
    call, so that tests can lower it)."""
    return STATIC_SHARED_BUDGET


def storage_bytes(element_type: str) -> int:
    """Bytes an element takes in a tile (pred and sub-byte integers: one)."""
    return max(bit_width(element_type), 8) // 8


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


# ------------------------------------------------------------ reductions


def reduction_partial_bytes(heroes: list[HloInstruction]) -> list[int]:
    """Bytes of each value a reduction exchanges between threads: one per
    result of each distinct reduce hero (a variadic reduce has several),
    as wide as the result."""
    sizes = []
    for hero in dict.fromkeys(h for h in heroes if h.opcode == "reduce"):
        sizes.extend(storage_bytes(leaf.element_type) for leaf in hero.shape.leaves())
    return sizes


def column_tile_width(warps: int, lanes: int) -> int:
    """The row length of a column reduction's tile: a partial per warp and
    lane, padded by one element when a multiple of the banks (so that the
    transposed reads hit distinct banks)."""
    width = warps * lanes
    return width + 1 if width % WARP_SIZE == 0 else width


@dataclass(frozen=True)
class ColumnTiles:
    """A column reduction's exchange: `lanes` adjacent columns per thread
    (vector loads along the row), `warps` warps per column tile of 32 *
    lanes columns; each partial goes through a 32 x `column_tile_width`
    tile."""
    lanes: int
    warps: int = WARP_SIZE

    def bytes(self, partials: list[int]) -> int:
        width = column_tile_width(self.warps, self.lanes)
        return sum(WARP_SIZE * width * b for b in partials)


def column_tiles(partials: list[int], lanes: int, budget: int | None = None
                 ) -> ColumnTiles | None:
    """The widest exchange that fits `budget` (default: the static budget):
    the preferred `lanes` with 32 warps, then half the lanes down to one,
    then half the warps down to one (each warp then reduces more rows
    itself). None when even one warp and one lane do not fit."""
    budget = static_shared_budget() if budget is None else budget
    while True:
        tiles = ColumnTiles(lanes, WARP_SIZE)
        if tiles.bytes(partials) <= budget or lanes == 1:
            break
        lanes //= 2
    warps = WARP_SIZE
    while tiles.bytes(partials) > budget:
        if warps == 1:
            return None
        warps //= 2
        tiles = ColumnTiles(1, warps)
    return tiles


@dataclass(frozen=True)
class SmallColumnTiles:
    """A small column reduction (kept minor size K1 dividing a warp):
    `threads` threads load `lanes` consecutive elements each; the partials
    meet in a `rows` x (K1 + `padding`) tile each."""
    lanes: int
    threads: int
    rows: int
    padding: int

    def bytes(self, partials: list[int], k1: int) -> int:
        return sum(self.rows * (k1 + self.padding) * b for b in partials)


def _small_column(k1: int, lanes: int, threads: int) -> SmallColumnTiles:
    rows = lanes * threads // k1
    padding = 0 if (threads == WARP_SIZE and lanes == 1) else -(-k1 // (threads * lanes))
    return SmallColumnTiles(lanes, threads, rows, padding)


def small_column_tiles(partials: list[int], k1: int, lanes: int,
                       budget: int | None = None) -> SmallColumnTiles | None:
    """XLA's SmallColumnReductionFusion configuration (128 threads, at most
    32 rows in the tile: fewer lanes, then fewer threads), then, while the
    tiles exceed `budget`, half the lanes, then half the threads (at least a
    warp, at least one row). None when nothing fits."""
    budget = static_shared_budget() if budget is None else budget
    threads = _SMALL_COLUMN_THREADS
    rows = lanes * threads // k1
    while rows > WARP_SIZE and lanes > 1:
        lanes //= 2
        rows //= 2
    if rows > WARP_SIZE:
        threads //= rows // WARP_SIZE
    tiles = _small_column(k1, lanes, threads)
    while tiles.bytes(partials, k1) > budget:
        if tiles.lanes > 1:
            tiles = _small_column(k1, tiles.lanes // 2, tiles.threads)
        elif tiles.threads > WARP_SIZE and tiles.threads // 2 >= k1:
            tiles = _small_column(k1, 1, tiles.threads // 2)
        else:
            return None
    return tiles


@dataclass(frozen=True)
class RowTiles:
    """A row reduction's threads: `threads_per_row` per row (a power of two,
    at least a warp), `rows_per_block` rows side by side; rows of several
    warps exchange a partial per warp through a rows x warps tile."""
    threads_per_row: int
    rows_per_block: int

    @property
    def warps(self) -> int:
        return self.threads_per_row // WARP_SIZE

    def bytes(self, partials: list[int]) -> int:
        if self.warps <= 1:
            return 0
        return sum(self.rows_per_block * self.warps * b for b in partials)


def _rows_per_block(k: int, threads_per_row: int) -> int:
    if threads_per_row * 2 > THREADS_PER_BLOCK_TARGET:
        return 1
    return k if k * threads_per_row <= THREADS_PER_BLOCK_TARGET \
        else THREADS_PER_BLOCK_TARGET // threads_per_row


def row_tiles(partials: list[int], k: int, r: int,
              per_thread: int = MIN_ROW_ELEMENTS_PER_THREAD,
              budget: int | None = None) -> RowTiles:
    """XLA's row reduction threads (each thread reduces at least
    `per_thread` elements of its row of `r`; `k` rows), with fewer threads
    per row while the warps' partials exceed `budget` (one warp per row
    needs no tile: this always ends)."""
    budget = static_shared_budget() if budget is None else budget
    t = min(MAX_THREADS_PER_ROW, _pow2_at_least(max(WARP_SIZE, -(-r // per_thread))))
    tiles = RowTiles(t, _rows_per_block(k, t))
    while tiles.bytes(partials) > budget:
        t //= 2
        tiles = RowTiles(t, _rows_per_block(k, t))
    return tiles


def input_bits(parameter_types: list[str]) -> int | None:
    """The narrowest element of a fusion's (array) parameters, pred as 8
    bits; None without parameters."""
    bits = [bit_width(t) if t != "pred" else 8 for t in parameter_types]
    return min(bits) if bits else None


def output_bits(output_types: list[str]) -> int:
    return min(max(bit_width(t), 8) for t in output_types)


def column_vector_size(minor: int, threads: int, narrowest_input: int | None,
                       narrowest_output: int, complex_operands: bool) -> int:
    """XLA's GetVectorSizeForMlir for column reductions: elements per thread
    loaded side by side along the kept minor dimension `minor` (also the
    row reduction's vector)."""
    if minor % 2 or threads * 2 > minor or complex_operands:
        return 1
    bits = narrowest_output if narrowest_input is None else narrowest_input
    if bits >= 64:
        return 1
    if bits >= 32:
        return 2
    if threads * 4 > minor:
        return 2
    return 4 if minor % 4 == 0 else 2
