"""GEMM fusions: a dot with its operand prologues and elementwise epilogues
in one kernel (`emitters.gemm`), as XLA:GPU's `__triton_gemm` fusions.
MLIR-free: the fusion analysis asks `dot_hero` / `gemm_refusal` when it
chooses the emitter, the HLO passes ask them about the fusions they form,
and the emitter takes its tiling from `plan_gemm`.

Dimensions. A dot `[batch..., lhs free..., rhs free...]` is seen as
B x M x N with K summed: B the product of the batch dims, M of the lhs
free dims, N of the rhs free dims, K of the contracting dims (several of
each are linearized row-major in the order the dot lists them).

Tiling (`GemmTiling`, XLA's `triton_gemm_config`): each block computes a
block_m x block_n tile of one batch's output; its num_warps * 32 threads
each own a tm x tn register tile (rows ty + i * TY, columns tx + j * TX of
the block's tile: consecutive threads own consecutive columns, so that
the output is written coalesced); the contracting dimension runs in steps
of block_k, the block's operand tiles staged in shared memory. split_k is
not the emitter's: a fusion with split_k > 1 is split at the HLO level
(`hlo.passes.gemm_fusion.split_k_rewrite`: the split is a batch dimension
of the dot, the partial sums reduced by a second kernel), as XLA's
MakeDotSplitKBatch does, so that the blocks are tiles * batch * split_k.

Without a config, `default_tiling` is a heuristic table (XLA's default
configs: 32x32x32 with 4 warps, 64x64x32 for large outputs), each tile
dimension shrunk to the next power of two of a smaller dot dimension (the
launch grid is the same, fewer threads idle).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod

from ..errors import HloError
from ..hlo import HloInstruction
from ..hlo.fusions import ELEMENTWISE_OPCODES
from ..hlo.shape import bit_width, is_complex, is_float
from .shared_memory import static_shared_budget

__all__ = ["GemmTiling", "GemmPlan", "DotDims", "dot_dims", "dot_hero", "gemm_refusal",
           "default_tiling", "plan_gemm", "fusion_backend_kind", "triton_gemm_tiling",
           "TRITON_GEMM_KINDS", "accumulator_type", "is_gemm_fusion_kind",
           "HOST_SHARED_MAX_K_STEPS", "HOST_UNROLLED_K_STEPS", "HOST_SHARED_MAX_MACS", "multiply_adds", "MmaPlan",
           "mma_operand_type"]

# XLA:GPU's fusion kinds whose body is one GEMM for its Triton emitter.
TRITON_GEMM_KINDS = ("__triton_gemm", "__triton_nested_gemm_fusion")
# The cpu target emulates a block's threads phase by phase between barriers.
# Small GEMMs (at most HOST_SHARED_MAX_MACS multiply-adds, at most
# HOST_SHARED_MAX_K_STEPS steps of block_k) run the GPU's staged kernel
# (what the cpu target's tests check): its k loop with barriers runs as a
# loop around the phases of a step, or unrolled when it has at most
# HOST_UNROLLED_K_STEPS steps (measured on a 64x48 bf16 GEMM fusion with
# 16x32 tiles: each unrolled step costs ~40 ms of compile and saves a few
# microseconds of run time; at 4 steps the loop compiled in 80 ms against
# 159, ran in 26 us against 23). Larger GEMMs have each thread read its
# operands directly, its accumulators in registers through each step (5x
# faster there).
HOST_SHARED_MAX_K_STEPS = 16
HOST_UNROLLED_K_STEPS = 2
HOST_SHARED_MAX_MACS = 1 << 22
# The host's direct reads give each thread rows of this many adjacent
# columns where the tile allows (a SIMD vector of f32).
HOST_ROW_WIDTH = 8
WARP_SIZE = 32


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def multiply_adds(dot: HloInstruction) -> int:
    """B * M * N * K of `dot`."""
    dims = dot_dims(dot)
    return dims.B * dims.M * dims.N * dims.K


@dataclass(frozen=True)
class GemmTiling:
    """XLA's TritonGemmConfig: the output tile of a block, the contracting
    step, split_k, software-pipelining stages (not used: one stage), and
    warps per block."""
    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_stages: int = 1
    num_warps: int = 4

    def to_json(self) -> dict:
        """As XLA prints it in backend_config (numbers as strings)."""
        return {"block_m": str(self.block_m), "block_n": str(self.block_n),
                "block_k": str(self.block_k), "split_k": str(self.split_k),
                "num_stages": str(self.num_stages), "num_warps": str(self.num_warps)}

    @staticmethod
    def from_json(config: dict, where: str = "triton_gemm_config") -> "GemmTiling":
        """A config as XLA prints it (strings or numbers); HloError naming
        `where` for a missing, non-integer or non-positive field."""
        if not isinstance(config, dict):
            raise HloError(f"{where}: expected a JSON object, got {config!r}")
        values = {}
        for key in ("block_m", "block_n", "block_k", "split_k", "num_stages", "num_warps"):
            raw = config.get(key, {"split_k": 1, "num_stages": 1, "num_warps": 4}.get(key))
            if raw is None:
                raise HloError(f"{where}: '{key}' is missing")
            try:
                value = int(raw)
            except (TypeError, ValueError):
                raise HloError(f"{where}: '{key}' is {raw!r}, not an integer") from None
            if value < 1:
                raise HloError(f"{where}: '{key}' must be positive, got {value}")
            values[key] = value
        return GemmTiling(**values)


def fusion_backend_kind(inst: HloInstruction) -> str:
    """The `kind` of a fusion's backend config, wherever XLA puts it
    (top level as in older dumps, or under fusion_backend_config /
    fusion_config); "" when there is none."""
    backend = inst.backend_config()
    for key in ("fusion_backend_config", "fusion_config"):
        nested = backend.get(key)
        if isinstance(nested, dict) and nested.get("kind"):
            return str(nested["kind"])
    kind = backend.get("kind")
    return str(kind) if isinstance(kind, str) else ""


def is_gemm_fusion_kind(kind: str) -> bool:
    return kind in TRITON_GEMM_KINDS


def _fusion_config(inst: HloInstruction) -> dict:
    backend = inst.backend_config()
    for key in ("fusion_backend_config", "fusion_config"):
        nested = backend.get(key)
        if isinstance(nested, dict) and nested.get("kind"):
            return nested
    return backend


def triton_gemm_tiling(inst: HloInstruction) -> GemmTiling | None:
    """The tiling of a kCustom `__triton_gemm` (or simple
    `__triton_nested_gemm_fusion`) fusion instruction: its
    triton_gemm_config, or the nested form's output tile, warps and the
    contracting step of its lhs operand fusion, or the heuristic table's
    without either; None for other instructions."""
    if inst.opcode != "fusion" or str(inst.attrs.get("kind", "")) != "kCustom":
        return None
    if not is_gemm_fusion_kind(fusion_backend_kind(inst)):
        return None
    config = _fusion_config(inst)
    where = f"fusion '{inst.name}': triton_gemm_config"
    try:
        if isinstance(config.get("triton_gemm_config"), dict):
            return GemmTiling.from_json(config["triton_gemm_config"], where)
        block = config.get("block_level_fusion_config")
        if isinstance(block, dict):
            nested = _nested_tiling(inst, block)
            if nested is not None:
                return nested
    except HloError as e:
        raise inst.error(str(e)) from None
    # A GEMM fusion without a config: the heuristic table's tiling.
    body = inst.attrs.get("calls")
    dots = [i for i in body.instructions if i.opcode == "dot"] if body is not None else []
    if len(dots) != 1:
        return None
    try:
        return default_tiling(dot_dims(dots[0]))
    except HloError:
        return None


def _tile_sizes(block: dict) -> list[int] | None:
    tiles = block.get("output_tiles") or block.get("output_tile_sizes")
    if isinstance(tiles, list) and tiles:
        first = tiles[0]
        sizes = first.get("sizes") if isinstance(first, dict) else first
        if isinstance(sizes, list) and sizes:
            return [int(s) for s in sizes]
    return None


def _nested_tiling(inst: HloInstruction, block: dict) -> GemmTiling | None:
    """The tiling of XLA's nested GEMM fusion: the outer output tile gives
    block_m x block_n; block_k is the lhs operand fusion's tile along its
    contracting dimension (32 when it says nothing)."""
    sizes = _tile_sizes(block)
    if sizes is None or len(sizes) < 2:
        return None
    body = inst.attrs.get("calls")
    block_k = 32
    dots = [i for i in body.instructions if i.opcode == "dot"] if body is not None else []
    if len(dots) == 1:
        lhs = dots[0].operands[0]
        contracting = list(dots[0].attrs.get("lhs_contracting_dims", ()))
        if lhs.opcode == "fusion" and contracting:
            lhs_sizes = _tile_sizes(_fusion_config(lhs).get("block_level_fusion_config") or {})
            if lhs_sizes is not None and contracting[0] < len(lhs_sizes):
                block_k = lhs_sizes[contracting[0]]
    warps = int(block.get("num_warps", 4) or 4)
    stages = int(block.get("num_stages", 1) or 1)
    return GemmTiling(sizes[-2], sizes[-1], block_k, 1, stages, warps)


# -- dot dimensions ---------------------------------------------------------------------


@dataclass(frozen=True)
class DotDims:
    """A dot's dimension numbers and the sizes of its B, M, N and K."""
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_free: tuple[int, ...]
    rhs_free: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    m_sizes: tuple[int, ...]
    n_sizes: tuple[int, ...]
    k_sizes: tuple[int, ...]

    @property
    def B(self) -> int:
        return prod(self.batch_sizes)

    @property
    def M(self) -> int:
        return prod(self.m_sizes)

    @property
    def N(self) -> int:
        return prod(self.n_sizes)

    @property
    def K(self) -> int:
        return prod(self.k_sizes)


def dot_dims(dot: HloInstruction) -> DotDims:
    a = dot.attrs
    lb, rb = tuple(a.get("lhs_batch_dims", ())), tuple(a.get("rhs_batch_dims", ()))
    lc, rc = tuple(a.get("lhs_contracting_dims", ())), tuple(a.get("rhs_contracting_dims", ()))
    lhs, rhs = dot.operands[0].shape, dot.operands[1].shape
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise dot.error("dot batch / contracting dimensions do not pair up")
    lfree = tuple(d for d in range(lhs.rank) if d not in lb and d not in lc)
    rfree = tuple(d for d in range(rhs.rank) if d not in rb and d not in rc)
    return DotDims(lb, rb, lc, rc, lfree, rfree,
                   tuple(lhs.dims[d] for d in lb), tuple(lhs.dims[d] for d in lfree),
                   tuple(rhs.dims[d] for d in rfree), tuple(lhs.dims[d] for d in lc))


def accumulator_type(result_type: str) -> str:
    """f32 for floats narrower than 32 bits (16- and 8-bit inputs), the
    result type otherwise (s32 for s8 x s8 -> s32, f64 for f64)."""
    if is_float(result_type) and bit_width(result_type) < 32:
        return "f32"
    return result_type


# -- which fusions are GEMM fusions ----------------------------------------------------

# Ops the walk from an output goes up through to find the dot.
_WALK = ELEMENTWISE_OPCODES | {"bitcast", "reshape"}


def dot_hero(roots: list[HloInstruction]) -> HloInstruction | None:
    """The dot reached from the outputs through elementwise ops and
    reshapes (an epilogue), None when there is none. Several dots so
    reached are refused later (`gemm_refusal`); the first is returned."""
    comp = roots[0].parent if roots else None
    if comp is not None and not any(i.opcode == "dot" for i in comp.instructions):
        return None   # most bodies (the fusion passes' trials): no walk
    found: HloInstruction | None = None
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if inst.opcode == "dot":
            found = found or inst
            continue
        if inst.opcode in _WALK and not inst.shape.is_tuple:
            stack.extend(inst.operands)
    return found


def _dependents(dot: HloInstruction, roots: list[HloInstruction]) -> set[int]:
    """id() of the instructions from the roots down that read the dot
    (the dot included)."""
    memo: dict[int, bool] = {}
    order: list[HloInstruction] = []
    stack, seen = list(roots), set()
    while stack:   # post order without recursion
        inst = stack[-1]
        if id(inst) in seen:
            stack.pop()
            if id(inst) not in memo:
                memo[id(inst)] = inst is dot or any(memo.get(id(o), False)
                                                    for o in inst.operands)
                order.append(inst)
            continue
        seen.add(id(inst))
        if inst is not dot:
            stack.extend(o for o in inst.operands if id(o) not in seen)
    return {k for k, v in memo.items() if v}


def gemm_refusal(roots: list[HloInstruction], dot: HloInstruction) -> str | None:
    """Why the GEMM emitter cannot take a fusion with these roots whose
    hero is `dot` (None when it can): one dot, every output computed from
    it through elementwise ops and row-major reshapes only (its epilogue),
    types it accumulates (no complex, no pred)."""
    if dot.shape.is_tuple:
        return "the dot's result is a tuple"
    t = dot.shape.element_type
    if is_complex(t) or t == "pred" or bit_width(t) < 8:
        return f"a {t} dot (complex, pred and sub-byte results are not tiled)"
    for op in dot.operands:
        if op.shape.is_tuple or is_complex(op.shape.element_type):
            return f"dot operand '{op.name}' is {op.shape}"
    try:
        dot_dims(dot)
    except HloError as e:
        return str(e)
    reading = _dependents(dot, roots)
    for root in roots:
        if id(root) not in reading:
            return f"output '{root.name}' does not depend on the dot"
    for inst in _instructions(roots):
        if id(inst) not in reading or inst is dot:
            continue
        if inst.opcode == "dot":
            return f"a second dot ('{inst.name}') reads the dot '{dot.name}'"
        if inst.opcode in ("bitcast", "reshape"):
            if not (inst.shape.is_row_major and inst.operands[0].shape.is_row_major):
                return f"'{inst.name}' reshapes the dot's result across layouts"
            continue
        if inst.opcode not in ELEMENTWISE_OPCODES:
            return f"'{inst.name}' ({inst.opcode}) between the dot and the outputs is " \
                   "not elementwise"
    return None


def _instructions(roots: list[HloInstruction]) -> list[HloInstruction]:
    out, seen, stack = [], set(), list(roots)
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        out.append(inst)
        stack.extend(inst.operands)
    return out


# -- tiling ------------------------------------------------------------------------------


def default_tiling(dims: DotDims) -> GemmTiling:
    """The heuristic table (XLA's default configs when nothing was tuned):
    64x64x32 with 4 warps for outputs of at least 512 x 512 elements per
    batch, 32x32x32 with 4 warps below; each tile dimension shrunk to the
    next power of two of a smaller dot dimension."""
    large = dims.M * dims.N >= 512 * 512
    bm, bn, bk = (64, 64, 32) if large else (32, 32, 32)
    return GemmTiling(min(bm, _pow2_at_least(dims.M)), min(bn, _pow2_at_least(dims.N)),
                      min(bk, _pow2_at_least(dims.K)), 1, 1, 4)


def _storage_type(operand_type: str, result_type: str) -> str:
    """What a shared tile holds: the operand's own elements when they are
    plain bytes (s8, bf16, f32...), else the dot's result type (sub-byte
    integers, pred and f8 are converted first)."""
    if operand_type in ("s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64",
                        "f16", "bf16", "f32", "f64"):
        return operand_type
    return result_type


# Tensor-core instruction shapes (m, n, k) of `mma.sync` by the operand type
# the tiles hold: 16-bit floats accumulate in f32, s8 in s32.
MMA_SHAPES = {"f16": (16, 8, 16), "bf16": (16, 8, 16), "s8": (16, 8, 32)}
# All three shapes are sm_80's (Turing has only m16n8k8 for f16).
MMA_MIN_COMPUTE_CAPABILITY = 80


def mma_operand_type(lhs_type: str, rhs_type: str, result_type: str) -> str | None:
    """The type both operand tiles hold for `mma.sync`, None when the dot
    cannot use it with the scalar path's numerics: a 16-bit float T with
    the other operand T or an 8-bit integer (exact in T) and a result of T
    or f32 (every operand value is then exact in the result type, and the
    scalar path's products are the same f32 products), two 8-bit integers
    into a float (through bf16, or f16 for an f16 result), or
    s8 x s8 -> s32."""
    if lhs_type == rhs_type == "s8" and result_type == "s32":
        return "s8"
    halves = {t for t in (lhs_type, rhs_type) if t in ("f16", "bf16")}
    if not halves and result_type in ("f16", "bf16", "f32"):
        # 8-bit integers into a float: exact in either 16-bit float.
        halves = {"f16" if result_type == "f16" else "bf16"}
    if len(halves) != 1:
        return None
    (half,) = halves
    if not all(t in (half, "s8", "u8") for t in (lhs_type, rhs_type)):
        return None
    return half if result_type in (half, "f32") else None


@dataclass(frozen=True)
class MmaPlan:
    """The block's tile product on tensor cores (cuda): `warps_m` x
    `warps_n` warps, each computing `tiles_m` x `tiles_n` instruction
    tiles of m x n (its warp tile) per step of k; the operand tiles are
    free-major ([free, block_k + pad]: k contiguous, so that a fragment
    register's elements are adjacent)."""
    operand_type: str                 # f16, bf16 or s8 (both tiles)
    warps_m: int
    warps_n: int
    tiles_m: int
    tiles_n: int

    @property
    def m(self) -> int:
        return MMA_SHAPES[self.operand_type][0]

    @property
    def n(self) -> int:
        return MMA_SHAPES[self.operand_type][1]

    @property
    def k(self) -> int:
        return MMA_SHAPES[self.operand_type][2]


def _mma_pad(storage: str) -> int:
    """Elements added to each row of a free-major tile: 16 bytes, so that
    a row is 16-byte aligned and its stride in 4-byte words is 4 mod 8
    (block_k of at least 32 bytes): the 8 rows that a fragment load's
    lane groups read start in different banks, their 4 lanes' words next
    to each other: no bank conflicts."""
    return 16 // max(bit_width(storage) // 8, 1)


def _mma_warps(warps: int, bm: int, bn: int, m: int, n: int) -> tuple[int, int] | None:
    """(warps along m, warps along n) dividing the block tile into warp
    tiles of whole instruction tiles, using as many of `warps` as that
    allows (halving them until it does), warp tiles as square as they
    get; None when not even one warp fits."""
    while warps >= 1:
        best = None
        wm = 1
        while wm <= warps:
            wn = warps // wm
            if wm * wn == warps and bm % (wm * m) == 0 and bn % (wn * n) == 0:
                cost = (abs((bm // wm) - (bn // wn)), -wn)
                if best is None or cost < best[0]:
                    best = (cost, wm, wn)
            wm *= 2
        if best is not None:
            return best[1], best[2]
        warps //= 2
    return None


def _pad(storage: str) -> int:
    """Elements added to each row of a tile (k-major) so that threads
    writing along k hit different banks."""
    return max(1, 4 // max(bit_width(storage) // 8, 1))


@dataclass(frozen=True)
class GemmPlan:
    """How the GEMM kernel of one fusion runs."""
    dims: DotDims
    tiling: GemmTiling                # as configured (the grid follows it)
    block_m: int                      # the tile a block computes (shrunk
    block_n: int                      # to the dims: the grid is the same)
    block_k: int                      # after the shared-memory budget
    threads: int
    threads_x: int                    # TX: threads along n
    threads_y: int                    # TY: threads along m
    tile_m: int                       # tm: rows each thread owns
    tile_n: int                       # tn: columns each thread owns
    tiles_m: int
    tiles_n: int
    k_steps: int
    result_type: str
    accumulator: str
    lhs_storage: str
    rhs_storage: str
    lhs_k_fastest: bool               # the lhs tile is loaded along k first
    rhs_k_fastest: bool
    staging: str                      # "shared" or "registers" (host, long k)
    unrolled: bool                    # the k loop unrolled (host, 1 or 2 steps)
    # A thread's columns side by side (the host's registers staging: its
    # loads and FMAs along n vectorize) rather than threads_x apart.
    contiguous_columns: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The tile product on tensor cores (cuda, 16- and 8-bit operands):
    # free-major operand tiles, the accumulators in mma fragments.
    mma: MmaPlan | None = None

    @property
    def blocks(self) -> int:
        return self.tiles_m * self.tiles_n * self.dims.B

    @property
    def lhs_tile(self) -> tuple[int, int]:
        """[block_k, block_m + pad]: k-major, so that the threads of a warp
        read consecutive rows of one k; with mma [block_m, block_k + pad]
        (a fragment register's elements are adjacent along k)."""
        if self.mma is not None:
            return (self.block_m, self.block_k + _mma_pad(self.lhs_storage))
        return (self.block_k, self.block_m + _pad(self.lhs_storage))

    @property
    def rhs_tile(self) -> tuple[int, int]:
        if self.mma is not None:
            return (self.block_n, self.block_k + _mma_pad(self.rhs_storage))
        return (self.block_k, self.block_n + _pad(self.rhs_storage))

    @property
    def shared_bytes(self) -> int:
        if self.staging != "shared":
            return 0
        return _tile_bytes(self.lhs_tile, self.lhs_storage) + \
            _tile_bytes(self.rhs_tile, self.rhs_storage)


def _tile_bytes(tile: tuple[int, int], storage: str) -> int:
    return tile[0] * tile[1] * max(bit_width(storage) // 8, 1)


def _thread_grid(threads: int, bm: int, bn: int, row_width: int = 0) -> tuple[int, int]:
    """(TX, TY) with TX * TY = threads, TX dividing bn and TY dividing bm,
    the register tile as square as it gets (fewest shared reads per step);
    ties go to more threads along n (coalesced stores). With `row_width`,
    each thread's row is that many columns where the tile allows (the
    host: a row of accumulators is a SIMD vector or two)."""
    best = None
    tx = 1
    while tx <= threads:
        ty = threads // tx
        if tx * ty == threads and bn % tx == 0 and bm % ty == 0:
            cost = (abs(bn // tx - row_width), bm // ty + bn // tx, -tx) if row_width \
                else (bm // ty + bn // tx, -tx)
            if best is None or cost < best[0]:
                best = (cost, tx, ty)
        tx *= 2
    if best is None:
        return 1, 1
    return best[1], best[2]


def _minor_dim(shape) -> int | None:
    if shape.rank == 0:
        return None
    return shape.minor_to_major[0] if shape.layout is not None else shape.rank - 1


def plan_gemm(dot: HloInstruction, tiling: GemmTiling | None = None,
              host: bool = False, staging: str | None = None,
              tensor_cores: bool | None = None,
              compute_capability: int = 90) -> GemmPlan:
    """The kernel's configuration for `dot`: `tiling` (the fusion's
    triton_gemm_config) or the heuristic table; `host` when the cpu target
    emulates the grid (see HOST_SHARED_MAX_MACS). `staging`
    forces "shared" or "registers" (tests). `tensor_cores`: None uses mma
    where the types allow it on a GPU (not on the host), True also on the
    host (its warps' mma emulated lane by lane: tests of the fragment
    layouts), False never. `compute_capability` (the device's, 90 for
    sm_90): below 80 the tile product stays on FMAs (the m16n8k16 and bf16
    forms of mma.sync need sm_80)."""
    dims = dot_dims(dot)
    notes: list[str] = []
    tiling = tiling or default_tiling(dims)
    for key in ("block_m", "block_n", "block_k", "num_warps"):
        value = getattr(tiling, key)
        if value & (value - 1):
            raise dot.error(f"triton_gemm_config: '{key}' must be a power of two, got {value}")
    bm = min(tiling.block_m, _pow2_at_least(dims.M))
    bn = min(tiling.block_n, _pow2_at_least(dims.N))
    bk = min(tiling.block_k, _pow2_at_least(dims.K))
    t = dot.shape.element_type
    lhs_t, rhs_t = dot.operands[0].shape.element_type, dot.operands[1].shape.element_type
    lhs_s, rhs_s = _storage_type(lhs_t, t), _storage_type(rhs_t, t)
    budget = static_shared_budget()

    def tile_bytes(k: int) -> int:
        return _tile_bytes((k, bm + _pad(lhs_s)), lhs_s) + _tile_bytes((k, bn + _pad(rhs_s)), rhs_s)

    while bk > 1 and tile_bytes(bk) > budget:
        bk //= 2
    if bk < min(tiling.block_k, _pow2_at_least(dims.K)):
        notes.append(f"block_k {tiling.block_k} -> {bk}: the operand tiles fit the "
                     f"{budget}-byte shared memory of a block")
    if tile_bytes(bk) > budget:
        raise dot.unsupported(f"the {bm}x{bn} output tile's operand tiles need "
                              f"{tile_bytes(bk)} bytes of shared memory, more than the "
                              f"{budget} a block has")
    threads = min(tiling.num_warps * WARP_SIZE, bm * bn)
    k_steps = -(-dims.K // bk)
    if staging is None:
        small = k_steps <= HOST_SHARED_MAX_K_STEPS and \
            dims.B * dims.M * dims.N * dims.K <= HOST_SHARED_MAX_MACS
        staging = "registers" if host and not small else "shared"
    if staging not in ("shared", "registers"):
        raise HloError(f"GEMM staging must be 'shared' or 'registers', got {staging!r}")
    tx, ty = _thread_grid(threads, bm, bn,
                          HOST_ROW_WIDTH if host and staging == "registers" else 0)
    lhs_minor = _minor_dim(dot.operands[0].shape)
    rhs_minor = _minor_dim(dot.operands[1].shape)
    plan = GemmPlan(
        dims, tiling, bm, bn, bk, threads, tx, ty, bm // ty, bn // tx,
        max(-(-dims.M // bm), 1), max(-(-dims.N // bn), 1),
        k_steps, t, accumulator_type(t), lhs_s, rhs_s,
        lhs_minor in dims.lhs_contracting, rhs_minor in dims.rhs_contracting,
        staging, host and staging == "shared" and k_steps <= HOST_UNROLLED_K_STEPS,
        host and staging == "registers",
        tuple(notes))
    if tensor_cores is False or (host and not tensor_cores) or staging != "shared" \
            or dims.K == 0:
        # The host emulates no warp-wide instruction: its FMAs vectorize.
        return plan
    if compute_capability < MMA_MIN_COMPUTE_CAPABILITY:
        return replace(plan, notes=plan.notes + (
            f"no tensor cores: mma.sync's forms need compute capability "
            f"{MMA_MIN_COMPUTE_CAPABILITY} or more, the device has {compute_capability}",))
    return _with_mma(plan, lhs_t, rhs_t, budget) or plan


def _with_mma(plan: GemmPlan, lhs_t: str, rhs_t: str, budget: int) -> GemmPlan | None:
    """`plan` with its tile product on tensor cores (mma.sync), None when
    the types or the tiles do not allow it. The output tile grows to one
    instruction tile where the dims are smaller (the grid is the same: such
    a dim has one tile), block_k to the instruction's k, and shrinks back
    to fit the shared memory."""
    operand = mma_operand_type(lhs_t, rhs_t, plan.result_type)
    if operand is None or plan.accumulator != ("s32" if operand == "s8" else "f32"):
        return None
    tiling, dims = plan.tiling, plan.dims
    m, n, k = MMA_SHAPES[operand]
    bm, bn = max(plan.block_m, m), max(plan.block_n, n)
    if -(-dims.M // bm) != plan.tiles_m or -(-dims.N // bn) != plan.tiles_n:
        return None   # a configured tile under one instruction tile
    bk = max(plan.block_k, k)
    pad = _mma_pad(operand)
    size = max(bit_width(operand) // 8, 1)
    while bk > k and (bm + bn) * (bk + pad) * size > budget:
        bk //= 2
    if (bm + bn) * (bk + pad) * size > budget:
        return None
    warps = _mma_warps(tiling.num_warps, bm, bn, m, n)
    if warps is None:
        return None
    warps_m, warps_n = warps
    mma = MmaPlan(operand, warps_m, warps_n, bm // (warps_m * m), bn // (warps_n * n))
    notes = plan.notes + (f"tensor cores: mma.sync m{m}n{n}k{k} on {operand}, "
                          f"{warps_m}x{warps_n} warps of {mma.tiles_m}x{mma.tiles_n} "
                          f"instruction tiles",)
    # Each lane holds 2 rows x 2 columns of every instruction tile's
    # accumulators: rows g and g + 8 of it, columns 2t and 2t + 1.
    return replace(plan, block_m=bm, block_n=bn, block_k=bk,
                   threads=warps_m * warps_n * WARP_SIZE,
                   threads_x=warps_n * 4, threads_y=warps_m * 8,
                   tile_m=2 * mma.tiles_m, tile_n=2 * mma.tiles_n,
                   k_steps=-(-dims.K // bk), lhs_storage=operand, rhs_storage=operand,
                   notes=notes, mma=mma)
