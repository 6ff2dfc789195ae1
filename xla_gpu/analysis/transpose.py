"""Transpose analysis: which transposes XLA tiles through shared memory, how
a fusion of them is tiled, and whether the tiled transpose emitter can take
the fusion (the fusion analysis sends it to the loop emitter otherwise).

Tiling, as XLA's TransposeFusion does it, on the normalized transpose
(size-1 dimensions dropped, dimensions that stay adjacent merged):

- the minor dimension moves (021, 210, 10, ...): the tile covers the input's
  minor dimension T1 and the input dimension T2 that becomes the output's
  minor one, each `32 * vector` long; every other dimension has tile size 1,
  so blocks iterate over it. 128 threads (4 warps) cover 4 tile rows per
  step of `i` (8 * vector steps); each thread handles `vector` consecutive
  elements (`j`) of a row. `vector` is 2 for 16-bit and 4 for 8-bit types
  (each global access is at least 32 bits wide) when both tiled dimensions
  are multiples of it and the tiles fit in shared memory.
- the minor dimension stays (102): XLA tiles such a transpose when the minor
  dimension is at most 8 bytes wide; it then rides along whole in the tile
  (the `vector` of each thread is that dimension), the tile covers the
  second-minor input dimension and the input dimension that becomes the
  output's second-minor one, 32 each, and the padding goes on the
  second-minor tile dimension.

The tile's dimension read by columns is padded by one element so that the
column accesses hit distinct shared-memory banks.

Narrow types (under 32 bits) whose minor dimension moves are packed as
XLA's PackedTranspose does when the shape allows (`packed_tiling`, checked
before the rules above): with `V = 32 / bits` elements to a shared-memory
bank word, the tile is an unpadded `32V x 32V` square (64x64 for 16-bit,
128x128 for 8-bit types). Its rows are the input's T2 dimension, its
columns the input's minor dimension T1 (and, when T1 is short, the
dimension A next to it, so that `A x T1` fills a row). Each thread writes
V consecutive input elements of a row; each thread reads a `V x V` block
(V vector reads of V elements) and writes its V columns as V consecutive
output elements, so both global sides move 32 bits per thread per access.
The columns are swizzled by V per group of V rows instead of padded, so
that the V x V blocks stay contiguous.

All tiles of a fusion must fit a block's shared memory
(`shared_memory.static_shared_budget()`): when the packed tiles do not,
the padded tile (32 x 33 elements times the vector) is used instead, with
narrower vectors if need be; when even that does not fit, the loop emitter
takes the fusion. The fusion passes do not form fusions whose preferred
tiles exceed the budget (`transpose_shared_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..hlo import HloError, HloInstruction
from ..hlo.shape import bit_width
from .epilogue import is_order_preserving_epilogue
from .shared_memory import STATIC_SHARED_BUDGET, static_shared_budget

__all__ = ["normalized_transpose", "is_tiled_transpose", "TransposeTiling",
           "PackedTiling", "packed_tiling", "TransposePlan", "plan_transpose",
           "transpose_refusal", "transpose_shared_bytes", "TILE", "NUM_WARPS", "THREADS",
           "MAX_SHARED_BYTES"]

TILE = 32                     # tile side (elements, times the vector width): a warp
NUM_WARPS = 4                 # warps per block: rows of the tile per step
THREADS = TILE * NUM_WARPS    # 128 threads per block
# Static shared memory a block may use without opting in to more (the
# tiles are sized by `shared_memory.static_shared_budget()`, read at each
# plan).
MAX_SHARED_BYTES = STATIC_SHARED_BUDGET
# Each thread's global accesses should be at least this wide.
MIN_ACCESS_BITS = 32

# Shared memory: 32 banks of 32-bit words. A packed transpose tile is
# 32 * V square with V elements to a word.
NUM_BANKS = 32
BANK_BITS = 32

# XLA's thresholds for a tiled (shared-memory) transpose: both minor
# dimensions (the operand's and the result's) at least 16, or both at least
# 8 with a product of at least 64 * 128. A transpose that keeps the minor
# dimension ("102") is tiled when that dimension is at most 8 bytes wide, so
# that it rides along whole in the tile.
_MIN_TILED_TRANSPOSE_DIM = 16
_MIN_TILED_TRANSPOSE_DIM_2 = 8
_MIN_TILED_TRANSPOSE_TOTAL = 64 * 128
_MAX_BYTES_IN_MINOR_DIM = 8


def normalized_transpose(inst: HloInstruction) -> tuple[list[int], list[int]]:
    """Operand dims and permutation with size-1 dims dropped and dims that
    stay adjacent merged (XLA's normalized transpose shape): result dim k
    of the normalized transpose is normalized operand dim perm[k]."""
    perm = list(inst.attrs["dimensions"])
    in_dims = inst.operands[0].shape.dims
    kept = [p for p in perm if in_dims[p] != 1]
    groups: list[list[int]] = []
    for p in kept:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    dims = []
    for g in order:
        size = 1
        for p in groups[g]:
            size *= in_dims[p]
        dims.append(size)
    new_perm = [order.index(g) for g in range(len(groups))]
    return dims, new_perm


def xla_bits(element: str) -> int:
    """Bits of an element as XLA's transpose rules count them (pred: 8)."""
    return 8 if element == "pred" else bit_width(element)


def is_tiled_transpose(inst: HloInstruction) -> bool:
    """Whether XLA emits `inst` with the tiled (shared-memory) transpose
    emitter (GetDescriptionForTiledTransposeEmitter): packed first, then
    the padded tile's rules."""
    if inst.opcode != "transpose":
        return False
    dims, perm = normalized_transpose(inst)
    n = len(perm)
    if n < 2:
        return False
    if packed_tiling(dims, perm, xla_bits(inst.shape.element_type)) is not None:
        return True
    out = [dims[p] for p in perm]
    if perm[-1] != n - 1 and bit_width(inst.shape.element_type) < 8 and \
            inst.shape.element_type != "pred":
        # XLA leaves sub-byte transposes that move the minor dimension to
        # the loop emitter (its tiled transpose regresses on them).
        return False
    if perm[-1] == n - 1:
        # 102: the minor dimension stays minor; tiled when it is narrow.
        byte_width = max(bit_width(inst.shape.element_type), 8) // 8
        minor_bytes = byte_width * dims[-1]
        return minor_bytes <= _MAX_BYTES_IN_MINOR_DIM and \
            minor_bytes * min(dims[-2], out[-2]) >= _MIN_TILED_TRANSPOSE_DIM
    minor_in, minor_out = dims[-1], out[-1]
    if minor_in >= _MIN_TILED_TRANSPOSE_DIM and minor_out >= _MIN_TILED_TRANSPOSE_DIM:
        return True
    return minor_in >= _MIN_TILED_TRANSPOSE_DIM_2 and \
        minor_out >= _MIN_TILED_TRANSPOSE_DIM_2 and \
        minor_in * minor_out >= _MIN_TILED_TRANSPOSE_TOTAL


def storage_bits(element: str) -> int:
    return max(bit_width(element), 8)  # pred and sub-byte ints take a byte


class PackedTiling:
    """XLA's packed transpose of one normalized transpose (operand dims
    `dims`, result dim k = operand dim `perm[k]`) for elements of `bits`.

    Canonical shapes: the operand is viewed as `[..., T2, ..., A, T1, B]`
    and the result as `[..., T1, ..., A, T2, B]`, with A (the dimension
    before T1, kept in place) and B (the minor dimension when it stays; here
    always 1: a transpose that keeps its minor dimension is not packed)
    added as size-1 dimensions where the transpose has none. Result dim k of
    the canonical transpose is canonical operand dim `cperm[k]`.

    One block covers a `t2 x (a * t1)` tile of the operand (rows: T2,
    columns: A and T1), every other dimension tiled by 1; 4 warps; the
    shared tile is `side x side` with `side = 32 * vector`."""

    def __init__(self, dims: list[int], perm: list[int], bits: int):
        n = len(dims)
        out = [dims[p] for p in perm]
        cperm = list(perm)
        if cperm[-1] != n - 1:          # the minor dimension moves: B = 1
            cperm.append(n)
            out.append(1)
        r = len(out)
        if cperm[r - 3] != r - 3:       # no dimension stays before T1: A = 1
            out.insert(r - 2, 1)
            cperm = [p + 1 if p > r - 3 else p for p in cperm]
            cperm.insert(r - 2, r - 2)
            r += 1
        cin = [0] * r
        for k, p in enumerate(cperm):
            cin[p] = out[k]
        self.dims, self.perm = list(dims), list(perm)
        self.in_dims, self.out_dims, self.cperm = cin, out, cperm
        self.rank = r
        self.a_id = r - 3                       # same position on both sides
        self.t1_in, self.t1_out = r - 2, cperm.index(r - 2)
        self.t2_in, self.t2_out = cperm[r - 2], r - 2
        self.bits = bits
        self.vector = BANK_BITS // bits
        self.side = NUM_BANKS * self.vector
        self.t1 = min(cin[self.t1_in], self.side)
        self.a = min(cin[self.a_id], self.side // self.t1)
        self.t2 = min(cin[self.t2_in], self.side)
        self.rows, self.cols = self.t2, self.a * self.t1
        self.out_tile = [1] * r
        self.out_tile[self.t1_out] = self.t1
        self.out_tile[self.t2_out] = self.t2
        self.out_tile[self.a_id] = self.a
        self.in_tile = [0] * r
        for k, p in enumerate(cperm):
            self.in_tile[p] = self.out_tile[k]
        self.block_counts = [-(-d // t) for d, t in zip(out, self.out_tile)]
        self.num_blocks = prod(self.block_counts)
        self.shmem_dims = [self.side, self.side]
        # Steps of the loops: the write loop covers the tile's rows 4 at a
        # time (one per warp), the read loop its columns 4 * vector at a time.
        self.write_steps = -(-self.rows // NUM_WARPS)
        self.read_steps = -(-self.cols // (self.vector * NUM_WARPS))

    def supported(self) -> bool:
        """XLA's conditions (GetPackedTransposeTileSizes): a narrow type,
        at least 10 vectors of populated rows and columns, whole vectors."""
        v = self.vector
        if self.bits >= BANK_BITS or self.in_dims[-1] != 1:
            return False
        if self.rows < 10 * v or self.cols < 10 * v:
            return False
        return self.rows % v == 0 and self.cols % v == 0 and \
            self.in_dims[self.t2_in] % self.t2 % v == 0

    def shared_bytes(self, heroes: list[HloInstruction]) -> int:
        return len(heroes) * self.side * self.side * self.bits // 8


def packed_tiling(dims: list[int], perm: list[int], bits: int) -> PackedTiling | None:
    """The packed tiling of a normalized transpose of `bits`-wide elements,
    None when XLA does not pack it."""
    if len(dims) < 2 or bits >= BANK_BITS or perm[-1] == len(dims) - 1:
        return None
    tiling = PackedTiling(dims, perm, bits)
    return tiling if tiling.supported() else None


class TransposeTiling:
    """Tiles and launch of one normalized transpose: operand dims `dims`,
    result dim k = operand dim `perm[k]`, `vector` elements per thread and
    tile row (the minor dimension when it stays minor)."""

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

    def shared_bytes(self, heroes: list[HloInstruction]) -> int:
        """Shared memory of one tile per hero."""
        return sum(prod(self.shmem_dims) * storage_bits(h.shape.element_type) // 8
                   for h in heroes)


@dataclass
class TransposePlan:
    """How the tiled transpose emitter runs a fusion: `slots` has one
    (root, hero) per output in output order, hero None for side outputs
    (written by the first loop at the input element's linear position);
    `heroes` the distinct tiled transposes, one tile each; `tiling` their
    common tiling (a `PackedTiling` for a packed transpose)."""
    slots: list[tuple[HloInstruction, HloInstruction | None]]
    heroes: list[HloInstruction]
    tiling: TransposeTiling | PackedTiling


def _plan(roots: list[HloInstruction], heroes: list[HloInstruction]) -> TransposePlan | str:
    """The plan, or why the tiled transpose emitter cannot take the fusion."""
    slots: list[tuple[HloInstruction, HloInstruction | None]] = []
    tiled: list[HloInstruction] = []
    for root, hero in zip(roots, heroes):
        if root.shape.is_tuple:
            return f"root '{root.name}' is a tuple"
        if is_tiled_transpose(hero):
            if not any(h is hero for h in tiled):
                tiled.append(hero)
            slots.append((root, hero))
        else:
            slots.append((root, None))
    if not tiled:
        return "no tiled transpose among the heroes"
    first = tiled[0]
    dims, perm = normalized_transpose(first)
    for hero in tiled[1:]:
        if normalized_transpose(hero) != (dims, perm):
            return (f"transposes '{first.name}' and '{hero.name}' have different "
                    "normalized shapes")
    for root, hero in slots:
        if hero is None:
            # Written at the input element's linear position: any shape of
            # as many elements (a bitcast of the input shape, as XLA
            # requires) is covered exactly once.
            if prod(root.shape.dims) != prod(dims):
                return (f"side output '{root.name}' {root.shape} does not have the "
                        f"elements of the transpose input {first.operands[0].shape}")
        elif not is_order_preserving_epilogue(root, hero):
            return f"the epilogue of '{root.name}' reorders elements"
    # A hero's value exists only in its tile: nothing but its own epilogue
    # may read it.
    starts = [h.operands[0] for h in tiled] + [r for r, h in slots if h is None]
    below = _first_reached(starts, {id(h) for h in tiled})
    if below is not None:
        return f"transpose '{below.name}' feeds another transpose or a side output"
    tiling = _preferred_tiling(dims, perm, tiled)
    if isinstance(tiling, str):
        return tiling
    budget = static_shared_budget()
    # Packed sub-byte elements have no padded tile to fall back to (XLA
    # never gives them one: see is_tiled_transpose).
    sub_byte = isinstance(tiling, PackedTiling) and any(
        bit_width(h.shape.element_type) < 8 and h.shape.element_type != "pred"
        for h in tiled)
    if tiling.shared_bytes(tiled) > budget and not sub_byte:
        # Smaller tiles: the padded tile (one row of 32 elements per warp
        # instead of the packed 32V x 32V square), narrower vectors.
        tiling = _choose_tiling(dims, perm, tiled, budget)
    if tiling.shared_bytes(tiled) > budget:
        return (f"{len(tiled)} tiles of {'x'.join(map(str, tiling.shmem_dims))} "
                f"need {tiling.shared_bytes(tiled)} bytes of shared memory, more than "
                f"the {budget} a block has")
    return TransposePlan(slots, tiled, tiling)


def _first_reached(starts: list[HloInstruction], targets: set[int]) -> HloInstruction | None:
    stack, seen = list(starts), set()
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if id(inst) in targets:
            return inst
        stack.extend(inst.operands)
    return None


def _preferred_tiling(dims: list[int], perm: list[int], tiled: list[HloInstruction]
                      ) -> TransposeTiling | PackedTiling | str:
    """XLA's tiling of the transposes `tiled` whatever shared memory it
    takes: packed when XLA packs them, else the padded tile with the
    widest vectors the shape allows; or why there is none."""
    if packed_tiling(dims, perm, xla_bits(tiled[0].shape.element_type)) is not None:
        # XLA's packed transpose, its tile sized by the bits each element
        # takes here (sub-byte integers take a byte).
        bits = {storage_bits(h.shape.element_type) for h in tiled}
        if len(bits) > 1:
            return "packed transposes of elements of different widths"
        tiling = packed_tiling(dims, perm, bits.pop())
        if tiling is None:
            return (f"transpose '{tiled[0].name}' is packed by XLA for "
                    f"{tiled[0].shape.element_type} elements but not in the byte each "
                    "takes here")
        return tiling
    return _choose_tiling(dims, perm, tiled)


def _choose_tiling(dims: list[int], perm: list[int], heroes: list[HloInstruction],
                   budget: int | None = None) -> TransposeTiling:
    """The padded tiling, with the widest vector whose tiles fit `budget`
    (None: any)."""
    tiling = TransposeTiling(dims, perm)
    if not tiling.minor_kept:
        # Narrow types: several elements per thread so that each global
        # access is at least 32 bits; both tiled dims must be multiples of
        # the vector (aligned vector accesses) and the tiles must fit.
        bits = min(storage_bits(h.shape.element_type) for h in heroes)
        vector = max(1, MIN_ACCESS_BITS // bits)
        while vector > 1:
            candidate = TransposeTiling(dims, perm, vector)
            if dims[-1] % vector == 0 and dims[perm[-1]] % vector == 0 and \
                    (budget is None or candidate.shared_bytes(heroes) <= budget):
                return candidate
            vector //= 2
    return tiling


def transpose_shared_bytes(roots: list[HloInstruction],
                           heroes: list[HloInstruction]) -> int:
    """The shared memory of the tiled transpose emitter's preferred tiling
    (before smaller tiles are chosen to fit the budget) for a fusion it can
    take: what the fusion passes hold to the budget, as XLA's
    FusionFitsInBudget does."""
    # The emitter choice planned it already (transpose_refusal): only the
    # preferred tiling is worked out again, not the whole plan.
    tiled = list({id(h): h for h in heroes if is_tiled_transpose(h)}.values())
    dims, perm = normalized_transpose(tiled[0])
    tiling = _preferred_tiling(dims, perm, tiled)
    if isinstance(tiling, str):
        raise HloError(f"internal: no tiling for a transpose fusion the analysis "
                       f"accepted ({tiling})")
    return tiling.shared_bytes(tiled)


def transpose_refusal(roots: list[HloInstruction],
                      heroes: list[HloInstruction]) -> str | None:
    """Why the tiled transpose emitter cannot take a fusion with these roots
    and heroes, or None when it can."""
    plan = _plan(roots, heroes)
    return plan if isinstance(plan, str) else None


def plan_transpose(roots: list[HloInstruction],
                   heroes: list[HloInstruction]) -> TransposePlan:
    """The tiled transpose emitter's plan for a fusion the analysis gave it."""
    plan = _plan(roots, heroes)
    if isinstance(plan, str):
        raise HloError(f"internal: the fusion analysis chose the tiled transpose "
                       f"emitter for a fusion it cannot take ({plan})")
    return plan
