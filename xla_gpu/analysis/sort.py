"""How a sort or a top-k runs as kernels (XLA's EmitSort plan), MLIR-free:
the bitonic network's steps grouped into kernels, the shared-memory tile,
and the kernel fusions the sort emitter (`emitters.sort`) compiles.

The HLO passes that prepare sorts before buffer assignment
(`hlo.passes.stable_sort_expander`, `hlo.passes.topk_decomposer`) ask the
same plan whether a sort needs its tie-break index in a buffer, or a top-k
row fits one kernel; the emitter emits what it says.

A sort of n elements runs ceil(log2 n) bitonic stages in their "flip" form
(see `emitters.sort`): one xor mask per step. Steps whose mask is below the
tile size run in shared memory, several per kernel; a larger mask is one
kernel over global memory. The tile is 2048 elements (1024 threads) at
most, halved until the tiles of all sorted arrays fit in 48 KiB.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from ..errors import UnsupportedError
from ..hlo import HloComputation, HloInstruction, Shape
from ..hlo.shape import bit_width, is_float
from ..hlo.topk import value_index_comparator
from .fusion import Fusion
from .shared_memory import STATIC_SHARED_BUDGET, static_shared_budget

__all__ = ["SortKernelConfig", "SortLaunch", "SortPlan", "plan_sort", "bitonic_masks",
           "choose_tile", "sort_kernel_fusion", "topk_kernel_fusion", "needs_index_operand",
           "fits_one_kernel", "topk_k", "topk_comparator", "topk_operand_comparator",
           "comparator_of", "check_comparator", "check_sort", "is_topk", "is_stable",
           "sort_geometry", "MAX_TILE", "MAX_SHARED_BYTES", "INDEX_TYPE", "TOPK_SELECT_MAX_K"]

# XLA: at most 2 * 1024 elements per tile (one thread per pair).
MAX_TILE = 2048
# A top-k over long rows (longer than a tile, or long against k), with k at
# most this, is one kernel that selects candidates per thread
# (`SortKernelConfig.select`), as XLA:GPU's TopK kernel does for k <= 16;
# over rows longer than a tile a larger k is a sort
# (hlo.passes.topk_decomposer).
TOPK_SELECT_MAX_K = 16
# Static shared memory a block may use without opting in to more (the
# budget every emitter's tiles keep to: `shared_memory`).
MAX_SHARED_BYTES = STATIC_SHARED_BUDGET
# Threads per block of the global (one pair per thread) kernels.
GLOBAL_THREADS = 128
# The stable tie-break index and top-k's indices.
INDEX_TYPE = "s32"


def _storage_bytes(element: str) -> int:
    return max(bit_width(element), 8) // 8


# -- planning --------------------------------------------------------------------


@dataclass(frozen=True)
class SortLaunch:
    """The launch of one sort kernel: threads per block, blocks (x only)."""
    threads: int
    blocks: int


@dataclass(frozen=True)
class SortKernelConfig:
    """One kernel of a sort.

    dims: the physical dims of the sorted arrays; dim: the sort dimension
    among them. masks: the bitonic steps it runs (xor masks, in order).
    tiled: the steps run in shared memory on tiles of `tile` elements (else
    one global step, one thread per pair). reads_operands: the kernel reads
    the sort's operands and writes its results (else it updates the
    results in place). index_tile: an s32 index of each element rides along
    in shared memory (the stable tie-break, top-k's indices). tie_break:
    elements neither of which goes first are ordered by that index.
    top_k: only the first k elements along `dim` are written, as (values,
    indices) (top-k's kernel). select: a top-k over long rows (longer than
    the tile, or long against k): each of tile // select threads keeps the
    best `select` elements of its strided part of the row, and the tile
    sorts those (one block a row)."""
    dims: tuple[int, ...]
    dim: int
    masks: tuple[int, ...]
    tiled: bool
    tile: int
    reads_operands: bool
    index_tile: bool = False
    tie_break: bool = False
    top_k: int | None = None
    select: int = 0

    @property
    def n(self) -> int:
        return self.dims[self.dim]

    @property
    def rows(self) -> int:
        return math.prod(d for k, d in enumerate(self.dims) if k != self.dim)

    @property
    def num_tiles(self) -> int:
        return 1 if self.select else -(-self.n // self.tile)

    @property
    def padded(self) -> int:
        return 1 << _stages(self.n)

    def launch(self) -> "SortLaunch":
        if self.select:
            return SortLaunch(self.tile // self.select, self.rows)
        if self.tiled:
            return SortLaunch(self.tile // 2, self.rows * self.num_tiles)
        pairs = self.rows * (self.padded // 2)
        threads = min(GLOBAL_THREADS, pairs)
        return SortLaunch(threads, -(-pairs // threads))

    def describe(self) -> str:
        if len(self.masks) > 6:
            masks = f"{len(self.masks)} steps: {hex(self.masks[0])}, {hex(self.masks[1])}, " \
                f"... {hex(self.masks[-1])}"
        else:
            masks = ",".join(hex(m) for m in self.masks)
        where = f"tiles of {self.tile} in shared memory" if self.tiled else "global"
        if self.select:
            where += f", the best {self.select} of each thread's part of a row of {self.n}"
        return f"masks [{masks}] ({where}{', reads the operands' if self.reads_operands else ''})"


def _stages(n: int) -> int:
    return max(n - 1, 0).bit_length()


def bitonic_masks(n: int) -> list[int]:
    """The xor masks of the bitonic network over n elements, in order."""
    masks = []
    for stage in range(_stages(n)):
        for m in range(stage, -1, -1):
            masks.append((1 << (stage + 1)) - 1 if m == stage else 1 << m)
    return masks


def choose_tile(n: int, bytes_per_element: int) -> int:
    """The tile: the padded size up to MAX_TILE elements, halved until the
    tiles of every sorted array fit in shared memory (0: no tiling)."""
    tile = min(MAX_TILE, max(2, 1 << _stages(n)))
    budget = min(MAX_SHARED_BYTES, static_shared_budget())
    while tile >= 2 and tile * bytes_per_element > budget:
        tile //= 2
    return tile if tile >= 2 else 0


def _topk_candidates(n: int, k: int, tile: int) -> int:
    """How many candidates a top-k of rows of n selects per row (the tile
    that sorts them; 0: sort the row in one tile instead), with k at most
    TOPK_SELECT_MAX_K: a 32nd of the row, at least 128 (and 2 slots a
    thread), at most the tile. On the cpu target fewer candidates ran
    faster, the candidates' sort costing more than the selection (a row of
    65536, k = 8: 173 us with 128, 248 us with 2048); a GPU wants threads
    enough to scan a long row in parallel. A row that fits the tile selects
    only where every thread scans 4 elements per slot or more and the
    selection and the candidates' sort do under half the work of sorting
    the row (n * select insertion steps against the bitonic network's
    pairs: a row of 1000, k = 8: 10K against 28K)."""
    if not tile or k > TOPK_SELECT_MAX_K:
        return 0
    padded = 1 << _stages(n)
    whole = 1 << (n.bit_length() - 1)      # the largest power of 2 <= n
    candidates = min(tile, max(128, whole // 32))
    if candidates < 2 * _topk_slots(k):
        return 0
    if tile < padded:
        return candidates       # (< n: every thread has `select` elements)
    if 4 * candidates > n:
        return 0

    def network(size: int) -> int:
        return len(bitonic_masks(size)) * size // 2

    return candidates if 2 * (n * _topk_slots(k) + network(candidates)) < network(padded) \
        else 0


def _topk_slots(k: int) -> int:
    """The slots a selecting thread keeps: k as a power of two, at least 2
    (a pair per thread in the candidates' tile)."""
    return max(2, 1 << _stages(k))


@dataclass
class SortPlan:
    kernels: list[SortKernelConfig]
    tile: int

    def describe(self) -> str:
        return "; ".join(k.describe() for k in self.kernels)


def plan_sort(dims: Sequence[int], dim: int, element_types: Sequence[str],
              stable: bool = False, top_k: int | None = None) -> SortPlan:
    """The kernels that sort arrays of physical `dims` along `dim`. With
    `stable`, the tie-break index rides along in shared memory; that needs
    the sort to be one tiled kernel (`needs_index_operand` says when it is
    not). `top_k`: one tiled kernel writing the first k (values, indices),
    which needs a row to fit one tile."""
    dims = tuple(int(d) for d in dims)
    n = dims[dim]
    index_tile = stable or top_k is not None
    per_element = sum(_storage_bytes(t) for t in element_types) + \
        (4 if index_tile else 0)
    tile = choose_tile(n, per_element)
    masks = bitonic_masks(n)
    base = dict(dims=dims, dim=dim, tile=tile, index_tile=index_tile,
                tie_break=index_tile, top_k=top_k)
    if top_k is not None:
        candidates = _topk_candidates(n, top_k, tile)
        if candidates:
            # Each thread selects its best of a strided part (at least as
            # many elements as slots, as n >= candidates), the tile sorts
            # the candidates.
            return SortPlan([SortKernelConfig(masks=tuple(bitonic_masks(candidates)),
                                              tiled=True, reads_operands=True,
                                              select=_topk_slots(top_k),
                                              **{**base, "tile": candidates})], candidates)
        if tile == 0 or tile < (1 << _stages(n)):
            raise UnsupportedError(f"top-k over {n} elements does not fit one tile "
                                   f"(at most {tile or 1} elements here)")
        return SortPlan([SortKernelConfig(masks=tuple(masks), tiled=True,
                                          reads_operands=True, **base)], tile)
    if n <= 1 or math.prod(dims) == 0:
        return SortPlan([], tile)
    kernels: list[SortKernelConfig] = []
    group: list[int] = []

    def flush():
        if group:
            kernels.append(SortKernelConfig(masks=tuple(group), tiled=True,
                                            reads_operands=not kernels, **base))
            group.clear()

    for mask in masks:
        if tile and mask < tile:
            group.append(mask)
        else:
            flush()
            kernels.append(SortKernelConfig(masks=(mask,), tiled=False,
                                            reads_operands=False, **base))
    flush()
    if index_tile and len(kernels) > 1:
        raise UnsupportedError(
            f"a stable sort of {n} elements runs as {len(kernels)} kernels: the "
            "tie-break index must be an operand (run the StableSortExpander pass, "
            "hlo.passes.stable_sort_expander.expand_stable_sorts, on the module first)")
    return SortPlan(kernels, tile)


# -- the comparator ------------------------------------------------------------------


def comparator_of(inst: HloInstruction) -> HloComputation:
    comp = inst.attrs.get("to_apply") or inst.attrs.get("comparator")
    if not isinstance(comp, HloComputation):
        called = inst.attrs.get("called_computations")
        if isinstance(called, list) and len(called) == 1 and \
                isinstance(called[0], HloComputation):
            comp = called[0]
    if not isinstance(comp, HloComputation):
        raise inst.error("needs a comparator computation (to_apply=...)")
    return comp


def check_comparator(inst: HloInstruction, comp: HloComputation, types: Sequence[str]) -> None:
    params = comp.parameters
    if len(params) != 2 * len(types):
        raise inst.error(f"the comparator '{comp.name}' takes {len(params)} parameters; "
                         f"{len(types)} sorted arrays need {2 * len(types)}")
    for k, t in enumerate(types):
        for p in (params[2 * k], params[2 * k + 1]):
            if p.shape.is_tuple or p.shape.rank or p.shape.element_type != t:
                raise inst.error(f"comparator parameter {p.parameter_number} is "
                                 f"{p.shape}, expected {t}[]")
    root = comp.root
    if root is None or root.shape.is_tuple or root.shape.rank or \
            root.shape.element_type != "pred":
        raise inst.error(f"the comparator '{comp.name}' must return pred[]")


# -- sorts and their kernel fusions ------------------------------------------------


def is_topk(inst: HloInstruction) -> bool:
    return inst.opcode == "topk" or (inst.opcode == "custom-call" and
                                      inst.attrs.get("custom_call_target") == "TopK")


def is_stable(inst: HloInstruction) -> bool:
    value = inst.attrs.get("is_stable", False)
    return value is True or str(value).lower() == "true"


def sort_geometry(inst: HloInstruction) -> tuple[tuple[int, ...], int, int | None]:
    """(physical dims, physical sort dim, k) of a sort or top-k whose
    operands are in physical order already (a kernel computation)."""
    shape = inst.operands[0].shape
    if is_topk(inst):
        out = inst.shape.leaves()[0]
        return tuple(shape.dims), shape.rank - 1, out.dims[-1] if out.dims else 0
    dims = inst.attrs.get("dimensions")
    if not isinstance(dims, (tuple, list)) or len(dims) != 1:
        raise inst.error("sort needs dimensions={d}")
    return tuple(shape.dims), int(dims[0]), None


def check_sort(inst: HloInstruction) -> None:
    """Raises a clear HloError for a malformed sort (element types the
    emitters cannot handle are `emitters.types.check_supported`'s)."""
    if not inst.operands:
        raise inst.error("sort needs at least one operand")
    shape = inst.operands[0].shape
    for op in inst.operands:
        if op.shape.is_tuple:
            raise inst.error(f"operand '{op.name}' is a tuple")
        if tuple(op.shape.dims) != tuple(shape.dims):
            raise inst.error(f"operands differ in shape: {shape} and {op.shape}")
    dims = inst.attrs.get("dimensions")
    if not isinstance(dims, (tuple, list)) or len(dims) != 1 or \
            not 0 <= int(dims[0]) < max(shape.rank, 1):
        raise inst.error(f"sort needs dimensions={{d}} with 0 <= d < {shape.rank}")
    leaves = inst.shape.leaves()
    if len(leaves) != len(inst.operands) or any(
            tuple(l.dims) != tuple(o.shape.dims) or l.element_type != o.shape.element_type
            for l, o in zip(leaves, inst.operands)):
        raise inst.error(f"the result {inst.shape} does not match the operands")


def _common_layout(inst: HloInstruction, shapes: Sequence[Shape]) -> list[int]:
    orders = {s.major_to_minor for s in shapes if s.rank}
    if len(orders) > 1:
        raise inst.unsupported("the sort emitter needs operands and results of one "
                               "layout, got " + ", ".join(str(s) for s in shapes))
    return list(next(iter(orders))) if orders else []


def sort_kernel_fusion(inst: HloInstruction, config: SortKernelConfig | None,
                       name: str | None = None) -> Fusion:
    """The fusion one kernel of `inst` compiles from: parameters (the
    sorted arrays, physical order) and the sort (or top-k) as its root."""
    operands = inst.operands
    params = [HloInstruction(f"p{k}", "parameter", o.shape.physical_shape(), [], {}, None,
                             k, o.location) for k, o in enumerate(operands)]
    leaves = [l.physical_shape() for l in inst.shape.leaves()]
    shape = Shape(tuple_shapes=tuple(leaves)) if inst.shape.is_tuple else leaves[0]
    attrs = dict(inst.attrs)
    attrs.pop("control-predecessors", None)
    attrs.pop("metadata", None)
    if not is_topk(inst):
        order = _common_layout(inst, [o.shape for o in operands] + inst.shape.leaves())
        if order:
            attrs["dimensions"] = (order.index(int(inst.attrs["dimensions"][0])),)
    root = HloInstruction(inst.name, inst.opcode, shape, params, attrs, None, None,
                          inst.location)
    comp = HloComputation(f"{_symbol(name or inst.name)}_computation", params + [root],
                          root, False, inst.location)
    for p in params:
        p.parent, p.users = comp, [root]
    root.parent = comp
    kind = "topk" if is_topk(inst) else "sort"
    return Fusion(_symbol(name or inst.name), comp, [root], [root], kind, None,
                  config=config)


# -- what the HLO passes ask ------------------------------------------------------


def needs_index_operand(inst: HloInstruction) -> bool:
    """Whether a stable sort runs as several kernels (its tie-break index
    must then live in a buffer: an iota operand)."""
    if inst.opcode != "sort" or not is_stable(inst) or not inst.operands:
        return False
    shape = inst.operands[0].shape
    dims = inst.attrs.get("dimensions")
    if shape.is_tuple or not isinstance(dims, (tuple, list)) or len(dims) != 1 or \
            not 0 <= int(dims[0]) < shape.rank:
        return False
    n = shape.dims[int(dims[0])]
    if n <= 1 or shape.num_elements == 0:
        return False
    types = [o.shape.element_type for o in inst.operands]
    per_element = sum(_storage_bytes(t) for t in types if not t.startswith("(")) + 4
    tile = choose_tile(n, per_element)
    return not tile or (1 << _stages(n)) > tile


# -- top-k ------------------------------------------------------------------------


def topk_k(inst: HloInstruction) -> int:
    """k of a `topk` op or a TopK custom call (the result's last dim)."""
    leaves = inst.shape.leaves()
    if len(leaves) != 2:
        raise inst.error(f"top-k returns (values, indices), not {inst.shape}")
    if inst.opcode == "topk":
        raw = inst.attrs.get("k")
        try:
            k = int(raw)
        except (TypeError, ValueError):
            raise inst.error(f"topk needs k=<int>, got {raw!r}") from None
    else:
        k = leaves[0].dims[-1] if leaves[0].dims else -1
    if len(inst.operands) != 1:
        raise inst.error(f"top-k takes one operand, got {len(inst.operands)}")
    x = inst.operands[0].shape
    if x.is_tuple or x.rank == 0:
        raise inst.error(f"top-k needs an array of rank >= 1, got {x}")
    if not 0 <= k <= x.dims[-1]:
        raise inst.error(f"k={k} is outside [0, {x.dims[-1]}] (the last dimension of "
                         f"{x})")
    values, indices = leaves
    expected = tuple(x.dims[:-1]) + (k,)
    if tuple(values.dims) != expected or tuple(indices.dims) != expected or \
            values.element_type != x.element_type:
        raise inst.error(f"the result {inst.shape} is not ({x.element_type}"
                         f"{list(expected)}, indices{list(expected)})")
    if indices.element_type != INDEX_TYPE:
        raise inst.unsupported(
            f"top-k indices of type {indices.element_type} (only {INDEX_TYPE})")
    return k


def largest_first(inst: HloInstruction) -> bool:
    value = inst.attrs.get("largest", True)
    return value is True or str(value).lower() == "true"


def topk_comparator(element: str, largest: bool, name: str = "topk_compare") -> HloComputation:
    """The comparator of a `topk` op over (value, index) pairs: greater
    (largest) or less in IEEE total order for floats; indices ignored (the
    kernels break ties by index)."""
    scalar = Shape(element, ())
    index = Shape(INDEX_TYPE, ())
    params = [HloInstruction(n, "parameter", s, [], {}, None, k)
              for k, (n, s) in enumerate((("lhs", scalar), ("rhs", scalar),
                                          ("lhs_index", index), ("rhs_index", index)))]
    attrs = {"direction": "GT" if largest else "LT"}
    if is_float(element):
        attrs["type"] = "TOTALORDER"
    root = HloInstruction("compare", "compare", Shape("pred", ()), params[:2], attrs)
    comp = HloComputation(name, params + [root], root)
    for inst in comp.instructions:
        inst.parent = comp
    params[0].users = [root]
    params[1].users = [root]
    return comp


def topk_operand_comparator(inst: HloInstruction) -> HloComputation:
    """The comparator a top-k's kernel (or its decomposition's sort) orders
    (value, index) pairs by."""
    if inst.opcode == "topk":
        return topk_comparator(inst.operands[0].shape.element_type, largest_first(inst))
    # XLA:CPU's comparator may be over the values alone (2 parameters).
    return value_index_comparator(comparator_of(inst), INDEX_TYPE)


def physical_last_dim(shape: Shape) -> int:
    """Where the logical last dimension lies in the physical order."""
    return shape.major_to_minor.index(shape.rank - 1)


def fits_one_kernel(inst: HloInstruction) -> bool:
    """Whether a row fits one sort tile (the one-kernel top-k)."""
    x = inst.operands[0].shape
    try:
        plan_sort(x.physical_shape().dims, physical_last_dim(x), [x.element_type],
                  top_k=max(topk_k(inst), 1))
    except UnsupportedError:
        return False
    return True


def topk_kernel_fusion(inst: HloInstruction, config: SortKernelConfig) -> Fusion:
    """The fusion of a top-k's one kernel: a TopK custom call over the
    physical operand, with the (value, index) comparator."""
    x = inst.operands[0].shape
    param = HloInstruction("p0", "parameter", x.physical_shape(), [], {}, None, 0,
                           inst.location)
    results = Shape(tuple_shapes=tuple(s.physical_shape() for s in inst.shape.leaves()))
    root = HloInstruction(inst.name, "custom-call", results, [param],
                          {"custom_call_target": "TopK",
                           "called_computations": [topk_operand_comparator(inst)]},
                          None, None, inst.location)
    name = _symbol(inst.name)
    comp = HloComputation(f"{name}_computation", [param, root], root, False, inst.location)
    param.parent, param.users, root.parent = comp, [root], comp
    return Fusion(name, comp, [root], [root], "topk", None, config=config)


def _symbol(name: str) -> str:
    """`name` as a kernel symbol (the emitters' spelling)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name)
