"""Launch configuration of loop-like emitters, as XLA computes it
(ComputeLoopFusionConfig + CalculateLaunchDimensions) for a device
description (default: the H200): unroll (vector width) 4, 2 or 1 when the
output has at least as many elements as the GPU runs threads at once,
raised so a thread writes whole bytes of sub-byte outputs; 128 threads per
block (4 warps); one element per thread per unroll step."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

from mlir.ir import AffineExpr

from ..analysis.device import DEFAULT_DEVICE, DeviceDescription
from ..analysis.indexing import delinearize, dim, indexing_map, sum_exprs, sym
from ..hlo import HloInstruction
from ..hlo.shape import bit_width
from ..ir import IndexingMap

__all__ = ["LoopConfig", "loop_config", "with_unroll", "thread_to_output_map",
           "linear_thread_expr",
           "thread_variables",
           "MAX_UNROLL", "THREADS_PER_BLOCK", "GPU_THREADS", "MAX_BLOCKS_X"]

MAX_UNROLL = 4
THREADS_PER_BLOCK = 128          # warp size 32 x warp scheduling granularity 4
GPU_THREADS = DEFAULT_DEVICE.max_resident_threads   # H200: SMs x threads per SM


# CUDA's limit on blocks in x; a larger grid goes 2-D (see loop_config).
MAX_BLOCKS_X = (1 << 31) - 1


@dataclass(frozen=True)
class LoopConfig:
    unroll: int
    threads: int
    blocks: int                  # in x
    num_elements: int
    blocks_y: int = 1            # > 1: a 2-D grid, block x + y * blocks

    @property
    def total_blocks(self) -> int:
        return self.blocks * self.blocks_y


def _may_prevent_vectorization(instructions: Sequence[HloInstruction]) -> bool:
    # XLA: concatenates of many operands spill; variadic reduces and sorts
    # do not vectorize.
    for inst in instructions:
        if inst.opcode == "concatenate" and len(inst.operands) > 10:
            return True
        if inst.opcode in ("sort", "dot"):
            return True
        if inst.opcode == "reduce" and inst.shape.is_tuple:
            return True
    return False


def loop_config(shape_dims: Sequence[int], instructions: Sequence[HloInstruction],
                output_types: Sequence[str],
                device: DeviceDescription = DEFAULT_DEVICE,
                split_grid: bool = False) -> LoopConfig:
    """The launch of a loop over `shape_dims`. With `split_grid`, more
    blocks than CUDA allows in x go 2-D as XLA's CalculateLaunchDimensions
    does: y = ceil(blocks / limit) rows of ceil(blocks / y) blocks."""
    n = prod(shape_dims)
    unroll = 1
    if n >= device.max_resident_threads and not _may_prevent_vectorization(instructions):
        unroll = next((u for u in (MAX_UNROLL, 2) if n % u == 0), 1)
    # pred is stored as a byte.
    smallest = min((max(bit_width(t), 8) if t == "pred" else bit_width(t)
                    for t in output_types), default=8)
    unroll = max(unroll, -(-8 // smallest))
    threads_needed = max(-(-n // unroll), 1)
    threads = min(THREADS_PER_BLOCK, threads_needed)
    if device.host_emulation and unroll == 1:
        threads = _host_row_threads(shape_dims, threads)
    blocks = -(-threads_needed // threads)
    if split_grid and blocks > MAX_BLOCKS_X:
        blocks_y = -(-blocks // MAX_BLOCKS_X)
        return LoopConfig(unroll, threads, -(-blocks // blocks_y), n, blocks_y)
    return LoopConfig(unroll, threads, blocks, n)


# Loops over at least this many elements are laid out for the host (below,
# the GPU's 128 threads per block run there too).
HOST_ROW_MIN_ELEMENTS = 1 << 12


def _host_row_threads(shape_dims: Sequence[int], threads: int) -> int:
    """Threads per block on the host (the grid emulation): a block that
    covers whole rows of the minor dimension, when 128 threads would cut
    rows. The emulated thread loop of a block is the SIMD loop; when the
    row index is the same in every iteration, LLVM hoists what depends on
    it alone (a broadcast operand's log, a gathered row value) out of the
    loop, where a block that spans two rows recomputes it per element
    (softmax over rows of 1000: 1.5 ns an element instead of 0.2)."""
    n = prod(shape_dims)
    minor = shape_dims[-1] if shape_dims else 1
    if n < HOST_ROW_MIN_ELEMENTS or len(shape_dims) < 2 or minor % THREADS_PER_BLOCK == 0:
        return threads
    if 32 <= minor <= 1024:
        return minor
    if minor < 32:
        # Short rows: a block of whole rows, the fewest minor dimensions
        # whose elements make at least 32 threads. A block of 128 that cuts
        # them makes an index's power-of-two remainder (`(i / 27) % 32`)
        # wrap inside the thread loop, which the grid emulation then keeps
        # scalar (see xla-emulate-grid): an im2col over 3 channels and a
        # 3x3 window ([n, h, w, 3, 3, 3], blocks of 32 * 27) ran twice as
        # long in blocks of 128.
        block = 1
        for d in reversed(shape_dims):
            block *= d
            if block >= 32:
                break
        if 32 <= block <= 1024 and block < n:
            return block
        return threads
    # A long row: the largest divisor of it that is a block.
    return next((t for t in range(1024, THREADS_PER_BLOCK - 1, -1) if minor % t == 0), threads)


def with_unroll(config: LoopConfig, unroll: int) -> LoopConfig:
    """`config` with another unroll factor (threads and blocks follow, on a
    1-D grid)."""
    threads_needed = max(-(-config.num_elements // unroll), 1)
    threads = min(THREADS_PER_BLOCK, threads_needed)
    return LoopConfig(unroll, threads, -(-threads_needed // threads), config.num_elements)


# The dimensions and symbol of every thread-to-output map:
# (th_x, bl_x)[vector_index].
TH_X, BL_X, BL_Y, VECTOR_INDEX = 0, 1, 2, 0


def linear_thread_expr(threads: int, blocks: int, unroll: int) -> AffineExpr:
    """`bl_x * T * U + th_x * U + vector_index` over (th_x, bl_x)[vector_index],
    leaving out variables that can only be 0."""
    terms = []
    if blocks > 1:
        terms.append(dim(BL_X) * (threads * unroll))
    if threads > 1:
        terms.append(dim(TH_X) * unroll if unroll > 1 else dim(TH_X))
    if unroll > 1:
        terms.append(sym(VECTOR_INDEX))
    return sum_exprs(terms)


def thread_variables(config: LoopConfig) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The dims and symbols of a thread-to-output map (bl_y on a 2-D grid)."""
    dims = [("th_x", config.threads), ("bl_x", config.blocks)]
    if config.blocks_y > 1:
        dims.append(("bl_y", config.blocks_y))
    return dims, [("vector_index", config.unroll)]


def thread_to_output_map(config: LoopConfig, shape_dims: Sequence[int],
                         extra_constraints: Sequence[tuple[AffineExpr, int, int]] = ()
                         ) -> IndexingMap:
    """`(th_x, bl_x)[vector_index] -> (output index)`: consecutive threads
    write consecutive vectors of `unroll` elements (coalesced)."""
    t, u = config.threads, config.unroll
    linear = linear_thread_expr(t, config.blocks, u)
    whole_vectors = linear_thread_expr(t, config.blocks, 1)
    if config.blocks_y > 1:
        # Block (x, y) is block x + y * blocks of the linear order.
        row = dim(BL_Y) * (config.blocks * t)
        linear = linear + row * u
        whole_vectors = whole_vectors + row
    results = delinearize(linear, shape_dims) if shape_dims else []
    constraints = list(extra_constraints)
    if t * config.total_blocks * u > config.num_elements:
        if u > 1 and config.num_elements % u == 0:
            # Whole vectors: the thread's vector is in or out as a whole,
            # a check free of the vector index (testable outside the
            # vector loop).
            constraints.append((whole_vectors, 0, config.num_elements // u - 1))
        else:
            constraints.append((linear, 0, config.num_elements - 1))
    dims, symbols = thread_variables(config)
    return indexing_map(dims, symbols, results, constraints)
