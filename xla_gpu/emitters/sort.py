"""The sort emitter: XLA:GPU's bitonic sort over the comparator computation,
in the xla_gpu dialect.

A sort of n elements along one dimension runs the bitonic network of
ceil(log2 n) stages in its "flip" form, which sorts with any comparator
(no ascending/descending halves): stage s first compares element i with
i ^ (2^(s+1) - 1) (the block of 2^(s+1) reversed against itself), then with
i ^ 2^m for m = s-1 .. 0. Each xor mask is one step in which every pair
(i, j = i ^ mask), i < j, is compared by the comparator and swapped when
the element at j goes first. Positions past n behave as elements that sort
last: a pair whose j is out of range is skipped (XLA masks them the same
way), so sizes need no padding.

Steps whose pairs lie inside an aligned tile of `tile` elements (a mask
below the tile size) run in shared memory: one kernel loads a tile per
block (every thread two elements, one per half of the tile), runs those
steps with a `xla_gpu.sync_threads` after each, and writes the tile back:

    %tile = xla_gpu.allocate_shared : tensor<2048xf32>       // one per operand
    %t0 = xla_gpu.loop (%th, %bl)[%e] -> (index..., %local) in #load
              iter_args(%t = %tile) { tensor.insert <operand> into %t[%local] }
    %t1 = xla_gpu.sync_threads %t0
    %t2 = xla_gpu.loop (%th, %bl) -> (%i, %j) in #pairs_mask_1 iter_args(%t = %t1) {
      %a = tensor.extract %t[%i]  %b = tensor.extract %t[%j]
      %swap = <the comparator, inlined>(%b, %a)
      insert select(%swap, %b, %a) at %i, select(%swap, %a, %b) at %j
    }
    %t3 = xla_gpu.sync_threads %t2  ... (one loop + barrier per mask)
    %out = xla_gpu.loop ... { tensor.insert (extract %tN[%local]) into %out[index...] }

A mask at least the tile size compares elements of different tiles: it is
one kernel of its own over global memory (one thread per pair). A sort is
thus a sequence of kernels (XLA's EmitSort): tiled kernels for the runs of
small masks, global kernels in between. The first kernel reads the sort's
operands and writes its results when it is a tiled one (it loads every
element before writing any); every other kernel works in place on the
results (its outputs alias its parameters), after a copy of the operands
into the results when the first kernel is a global one.

Several operands are sorted together (the comparator sees a pair of
scalars of each). The tile is 2048 elements (1024 threads) at most, halved
until the tiles of all operands fit in 48 KiB of shared memory.

Stability (`is_stable=true`): as XLA's StableSortExpander, equal elements
(neither goes first under the comparator) are ordered by their original
index. When the whole sort is one tiled kernel the index lives in an extra
shared-memory tile (no buffer); a sort of several kernels needs it carried
in global memory between them, so `expand_stable_sorts` adds an s32 iota
operand to such sorts at the HLO level (before buffer assignment) with the
comparator extended by the tie-break, exactly as XLA does.

Non-row-major layouts: the kernel works on the physical array (the sort
dimension is moved to its physical position); operands and results must
share one layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, tensor

from ..analysis.fusion import Fusion
from ..analysis.indexing import delinearize, map_text
from ..dialects import xla_gpu
from ..errors import HloError, UnsupportedError
from ..hlo import HloComputation, HloInstruction, HloModule, Shape
from ..hlo.fusions import fusion_text
from ..hlo.shape import bit_width
from ..ir import IndexingMap
from .base import KernelEmitter, LaunchDims
from .elemental import FunctionEmitter
from .partitioner import sanitize
from .types import check_supported, element_type

__all__ = ["SortEmitter", "SortKernelConfig", "SortPlan", "plan_sort", "compile_sort",
           "CompiledSort", "SortKernel", "expand_stable_sorts", "sort_kernel_fusion",
           "MAX_TILE", "MAX_SHARED_BYTES"]

# XLA: at most 2 * 1024 elements per tile (one thread per pair).
MAX_TILE = 2048
# Static shared memory a block may use without opting in to more.
MAX_SHARED_BYTES = 48 * 1024
# Threads per block of the global (one pair per thread) kernels.
GLOBAL_THREADS = 128
# The stable tie-break index and top-k's indices.
INDEX_TYPE = "s32"


def _storage_bytes(element: str) -> int:
    return max(bit_width(element), 8) // 8


# -- planning --------------------------------------------------------------------


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
    indices) (top-k's kernel)."""
    dims: tuple[int, ...]
    dim: int
    masks: tuple[int, ...]
    tiled: bool
    tile: int
    reads_operands: bool
    index_tile: bool = False
    tie_break: bool = False
    top_k: int | None = None

    @property
    def n(self) -> int:
        return self.dims[self.dim]

    @property
    def rows(self) -> int:
        return math.prod(d for k, d in enumerate(self.dims) if k != self.dim)

    @property
    def num_tiles(self) -> int:
        return -(-self.n // self.tile)

    @property
    def padded(self) -> int:
        return 1 << _stages(self.n)

    def launch(self) -> LaunchDims:
        if self.tiled:
            return LaunchDims(self.tile // 2, self.rows * self.num_tiles)
        pairs = self.rows * (self.padded // 2)
        threads = min(GLOBAL_THREADS, pairs)
        return LaunchDims(threads, -(-pairs // threads))

    def describe(self) -> str:
        if len(self.masks) > 6:
            masks = f"{len(self.masks)} steps: {hex(self.masks[0])}, {hex(self.masks[1])}, " \
                f"... {hex(self.masks[-1])}"
        else:
            masks = ",".join(hex(m) for m in self.masks)
        where = f"tiles of {self.tile} in shared memory" if self.tiled else "global"
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
    while tile >= 2 and tile * bytes_per_element > MAX_SHARED_BYTES:
        tile //= 2
    return tile if tile >= 2 else 0


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
            "tie-break index must be an operand (run expand_stable_sorts on the "
            "module first)")
    return SortPlan(kernels, tile)


# -- the comparator ------------------------------------------------------------------


def scalar_computation(comp: HloComputation) -> HloComputation:
    """`comp` with the scalar bitcasts that change the element type (XLA
    writes `s32[] bitcast(f32[] x)` in comparators) spelled as
    bitcast-convert, which the elemental emitter lowers to a bit cast."""
    if not any(i.opcode == "bitcast" and i.shape.element_type !=
               i.operands[0].shape.element_type for i in comp.instructions):
        return comp
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.instructions:
        opcode = inst.opcode
        if opcode == "bitcast" and inst.shape.element_type != \
                inst.operands[0].shape.element_type:
            opcode = "bitcast-convert"
        copy = inst.clone_with([mapping[id(o)] for o in inst.operands], opcode=opcode)
        mapping[id(inst)] = copy
        body.append(copy)
    new = HloComputation(comp.name, body, mapping[id(comp.root)], False, comp.location)
    return new.link_instructions()


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


# -- the emitter --------------------------------------------------------------------


def _join(terms: Sequence[str]) -> str:
    terms = [t for t in terms if t and t != "0"]
    return " + ".join(terms) or "0"


class SortEmitter(KernelEmitter):
    """One kernel of a sort (fusion.config: its SortKernelConfig). The
    fusion computation is the sort (or top-k) over parameters: the sorted
    arrays in physical order."""

    name = "sort"

    def __init__(self, fusion: Fusion):
        super().__init__(fusion)
        if len(fusion.roots) != 1:
            raise HloError(f"fusion '{fusion.name}': the sort emitter needs the sort as "
                           "the only root")
        self.root = root = fusion.roots[0]
        self.operands = list(root.operands)
        for op in self.operands:
            if op.opcode != "parameter":
                raise root.error("the sort emitter sorts fusion parameters only "
                                 f"('{op.name}' is a {op.opcode})")
        types = [op.shape.element_type for op in self.operands]
        self._value_types = types
        config = fusion.config
        is_topk = _is_topk(root)
        if config is None:
            dims, dim, k = _sort_geometry(root)
            plan = plan_sort(dims, dim, types, stable=_is_stable(root),
                             top_k=k if is_topk else None)
            if len(plan.kernels) != 1:
                raise UnsupportedError(
                    f"fusion '{fusion.name}': the sort runs as {len(plan.kernels)} "
                    "kernels; compile the module as a program (without fusion=) to "
                    "run them all")
            config = plan.kernels[0]
        self.config: SortKernelConfig = config
        if root.opcode == "topk":   # greatest (or least) first, total order
            from .topk import topk_comparator
            largest = root.attrs.get("largest", True)
            comparator = topk_comparator(types[0], largest is True or
                                         str(largest).lower() == "true")
        else:
            comparator = comparator_of(root)
        self.comparator = scalar_computation(comparator)
        # The arrays the comparator sees: the sorted ones (and top-k's
        # indices, which its comparator takes too).
        self._arity = len(types) + (1 if is_topk else 0)
        check_comparator(root, self.comparator,
                         types + ([INDEX_TYPE] if is_topk else []))
        if is_topk:
            if config.top_k is None or not config.tiled:
                raise root.error("internal: a top-k kernel needs a tiled top_k config")
        elif not config.reads_operands:
            self.aliases = {k: k for k in range(len(self.operands))}
        for op in self.operands:
            if tuple(op.shape.dims) != tuple(config.dims):
                raise root.error(f"operand '{op.name}' is {op.shape}, the kernel sorts "
                                 f"arrays of dims {list(config.dims)}")

    # -- KernelEmitter -------------------------------------------------------
    def launch_dims(self) -> LaunchDims:
        return self.config.launch()

    def root_groups(self):
        return []

    def is_excluded(self, inst) -> bool:
        return inst is self.root

    @property
    def kernel_name(self) -> str:
        return sanitize(self.fusion.name)

    # -- maps -------------------------------------------------------------------
    def _full_index(self, row: str, position: str, dims: Sequence[int]) -> list[str]:
        """The index of element `position` along the sort dim of row `row`."""
        c = self.config
        others = [d for k, d in enumerate(dims) if k != c.dim]
        rest = iter(delinearize(row, others) if others else [])
        return [position if k == c.dim else next(rest) for k in range(len(dims))]

    def _map(self, dims, symbols, results, constraints=()) -> ir.Attribute:
        text = map_text(dims, symbols, results, constraints)
        return self.index_map(str(IndexingMap.parse(text).simplified()))

    @staticmethod
    def _pair(t: str, mask: int) -> tuple[str, str]:
        """The pair (i, j = i ^ mask), i < j, handled by thread/pair `t`."""
        h = mask.bit_length() - 1
        low = 1 << h
        block = f"({t}) floordiv {low}" if low > 1 else f"({t})"
        rest = f"({t}) mod {low}" if low > 1 else "0"
        base = f"({block}) * {2 * low}"
        i = _join([base, rest])
        if mask == low:
            j = _join([base, rest, str(low)])
        else:   # a flip: the block of 2 * low reversed against itself
            j = f"{base} + {2 * low - 1} - {rest}" if rest != "0" else \
                f"{base} + {2 * low - 1}"
        return i, j

    # -- emission ---------------------------------------------------------------
    def emit_entry(self, params, outputs, thread_id, block_id):
        c = self.config
        ids = [thread_id, block_id]
        if c.tiled:
            return self._emit_tiled(params, outputs, ids)
        return self._emit_global(outputs, ids)

    def _comparator_at(self, args: Sequence[ir.Value]) -> ir.Value:
        """The comparator's body emitted in place on `args` (inlined, as
        XLA's sort emitter calls the nested computation into the loop)."""
        root = self.comparator.root
        emitter = FunctionEmitter(self.maps, scalars=list(args),
                                  call_computation=self.call_computation)
        if root.opcode == "tuple":
            raise root.error("a comparator returns pred[], not a tuple")
        return emitter.emit1(root, [])

    def _less(self, first: Sequence[ir.Value], second: Sequence[ir.Value],
              first_index: ir.Value | None, second_index: ir.Value | None) -> ir.Value:
        """Whether `first` goes before `second` (the comparator called with
        (first_0, second_0, first_1, second_1, ...)); with the tie-break,
        elements neither of which goes first are ordered by index."""
        args = [v for pair in zip(first, second) for v in pair]
        less = self._comparator_at(args)
        if not self.config.tie_break:
            return less
        back = [v for pair in zip(second, first) for v in pair]
        greater = self._comparator_at(back)
        same = arith.cmpi(arith.CmpIPredicate.eq, less, greater)
        by_index = arith.cmpi(arith.CmpIPredicate.slt, first_index, second_index)
        return arith.select(same, by_index, less)

    def _compare_swap(self, a: list[ir.Value], b: list[ir.Value], a_index, b_index,
                      valid: ir.Value | None = None
                      ) -> tuple[list[ir.Value], list[ir.Value]]:
        """(new values at i, new values at j) for the pair (i, j): swapped
        when the element at j goes first (and `valid`). Index values ride
        along."""
        arity = self._arity
        swap = self._less(self._decoded(b[:arity]), self._decoded(a[:arity]),
                          b_index, a_index)
        if valid is not None:
            swap = arith.select(valid, swap, arith.constant(ir.IntegerType.get_signless(1), 0))
        new_i = [arith.select(swap, y, x) for x, y in zip(a, b)]
        new_j = [arith.select(swap, x, y) for x, y in zip(a, b)]
        return new_i, new_j

    # 16-bit floats move through shared memory and selects as their bits:
    # the host backend would round-trip them through f32 (a libcall the JIT
    # does not have), and the GPU moves bits either way.
    def _stored_type(self, k: int) -> ir.Type:
        t = self._value_types[k] if k < len(self._value_types) else INDEX_TYPE
        if t in ("bf16", "f16"):
            return ir.IntegerType.get_signless(16)
        return element_type(t)

    def _encode(self, k: int, value: ir.Value) -> ir.Value:
        stored = self._stored_type(k)
        return value if value.type == stored else arith.bitcast(stored, value)

    def _decode(self, k: int, value: ir.Value) -> ir.Value:
        t = self._value_types[k] if k < len(self._value_types) else INDEX_TYPE
        real = element_type(t)
        return value if value.type == real else arith.bitcast(real, value)

    def _decoded(self, values: Sequence[ir.Value]) -> list[ir.Value]:
        return [self._decode(k, v) for k, v in enumerate(values)]

    def _emit_tiled(self, params, outputs, ids):
        c = self.config
        tile, half = c.tile, c.tile // 2
        launch = c.launch()
        dims_ranges = [("th_x", launch.threads), ("bl_x", launch.blocks)]
        if c.num_tiles > 1:
            row, tile_id = f"bl_x floordiv {c.num_tiles}", f"bl_x mod {c.num_tiles}"
        else:
            row, tile_id = "bl_x", "0"
        tile_start = f"({tile_id}) * {tile}" if tile_id != "0" else "0"
        local = f"e * {half} + th_x"
        position = _join([tile_start, local])
        partial = c.n % tile != 0
        in_range = [(position, 0, c.n - 1)] if partial else []
        index = ir.IndexType.get()
        i32 = ir.IntegerType.get_signless(32)

        source = list(params) if c.reads_operands else list(outputs)
        types = [self._stored_type(k) for k in range(len(self.operands))]
        tiles = [xla_gpu.AllocateSharedOp(ir.RankedTensorType.get([tile], t)).result
                 for t in types]
        if c.index_tile:
            tiles.append(xla_gpu.AllocateSharedOp(
                ir.RankedTensorType.get([tile], i32)).result)
        n_values = len(types)

        # Load: every thread two elements (one per half of the tile).
        load_map = self._map(dims_ranges, [("e", 2)],
                             self._full_index(row, position, c.dims) + [local], in_range)
        loop = xla_gpu.build_loop(load_map, ids, tiles)
        block = loop.region.blocks[0]
        rank = len(c.dims)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            element = args[1:1 + rank]
            slot = args[1 + rank]
            iters = args[2 + rank:]
            written = [tensor.insert(self._encode(k, tensor.extract(src, element)), it,
                                     [slot])
                       for k, (src, it) in enumerate(zip(source, iters[:n_values]))]
            if c.index_tile:
                pos = element[c.dim]
                written.append(tensor.insert(arith.index_cast(i32, pos), iters[-1], [slot]))
            xla_gpu.YieldOp(written)
        current = list(xla_gpu.SyncThreadsOp(list(loop.results)).results)

        # The steps: one pair per thread each, a barrier after each.
        # In a partial tile, a pair whose j is past the end is not swapped
        # (a select rather than a loop constraint: one branch-free body per
        # step; the comparator's result on the unloaded slot is discarded).
        limit = None
        if partial:   # elements of this block's tile: n - tile start
            limit = self.maps.apply(str(IndexingMap.parse(map_text(
                [("bl_x", launch.blocks)], [], [f"{c.n} - {tile_start}"])).simplified()),
                [ids[1]])[0]
        for mask in c.masks:
            i, j = self._pair("th_x", mask)
            pair_map = self._map(dims_ranges, [], [i, j])
            loop = xla_gpu.build_loop(pair_map, ids, current)
            block = loop.region.blocks[0]
            with ir.InsertionPoint(block):
                args = list(block.arguments)
                li, lj = args[0], args[1]
                iters = args[2:]
                a = [tensor.extract(t, [li]) for t in iters]
                b = [tensor.extract(t, [lj]) for t in iters]
                ai = a[n_values] if c.index_tile else None
                bi = b[n_values] if c.index_tile else None
                valid = None
                if partial:
                    valid = arith.cmpi(arith.CmpIPredicate.ult, lj, limit)
                new_i, new_j = self._compare_swap(a, b, ai, bi, valid)
                written = [tensor.insert(y, tensor.insert(x, t, [li]), [lj])
                           for x, y, t in zip(new_i, new_j, iters)]
                xla_gpu.YieldOp(written)
            current = list(xla_gpu.SyncThreadsOp(list(loop.results)).results)

        # Store: every thread writes back the elements it loaded.
        if c.top_k is not None:
            out_dims = list(c.dims)
            out_dims[c.dim] = c.top_k
            store_map = self._map(dims_ranges, [("e", 2)],
                                  self._full_index(row, position, out_dims) + [local],
                                  [(position, 0, c.top_k - 1)])
        else:
            store_map = load_map
        loop = xla_gpu.build_loop(store_map, ids, list(outputs))
        block = loop.region.blocks[0]
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            element = args[1:1 + rank]
            slot = args[1 + rank]
            iters = args[2 + rank:]
            if c.top_k is not None:
                values = [self._decode(0, tensor.extract(current[0], [slot])),
                          tensor.extract(current[n_values], [slot])]
            else:
                values = [self._decode(k, tensor.extract(t, [slot]))
                          for k, t in enumerate(current[:n_values])]
            written = [tensor.insert(v, it, element) for v, it in zip(values, iters)]
            xla_gpu.YieldOp(written)
        del index
        return list(loop.results)

    def _emit_global(self, outputs, ids):
        c = self.config
        (mask,) = c.masks
        launch = c.launch()
        half = c.padded // 2
        pairs = c.rows * half
        linear = _join([f"bl_x * {launch.threads}" if launch.blocks > 1 else "0", "th_x"])
        row = f"({linear}) floordiv {half}" if c.rows > 1 else "0"
        t = f"({linear}) mod {half}" if c.rows > 1 else linear
        i, j = self._pair(t, mask)
        constraints = []
        if launch.threads * launch.blocks > pairs:
            constraints.append((linear, 0, pairs - 1))
        if c.n < c.padded:
            constraints.append((j, 0, c.n - 1))
        pair_map = self._map([("th_x", launch.threads), ("bl_x", launch.blocks)], [],
                             self._full_index(row, i, c.dims) + [j], constraints)
        loop = xla_gpu.build_loop(pair_map, ids, list(outputs))
        block = loop.region.blocks[0]
        rank = len(c.dims)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            at_i = args[:rank]
            at_j = list(at_i)
            at_j[c.dim] = args[rank]
            iters = args[rank + 1:]
            a = [self._encode(k, tensor.extract(it, at_i)) for k, it in enumerate(iters)]
            b = [self._encode(k, tensor.extract(it, at_j)) for k, it in enumerate(iters)]
            new_i, new_j = self._compare_swap(a, b, None, None)
            written = [tensor.insert(self._decode(k, y),
                                     tensor.insert(self._decode(k, x), it, at_i), at_j)
                       for k, (x, y, it) in enumerate(zip(new_i, new_j, iters))]
            xla_gpu.YieldOp(written)
        return list(loop.results)


# -- the sort as kernels ---------------------------------------------------------------


def _is_topk(inst: HloInstruction) -> bool:
    return inst.opcode == "topk" or (inst.opcode == "custom-call" and
                                      inst.attrs.get("custom_call_target") == "TopK")


def _is_stable(inst: HloInstruction) -> bool:
    value = inst.attrs.get("is_stable", False)
    return value is True or str(value).lower() == "true"


def _sort_geometry(inst: HloInstruction) -> tuple[tuple[int, ...], int, int | None]:
    """(physical dims, physical sort dim, k) of a sort or top-k whose
    operands are in physical order already (a kernel computation)."""
    shape = inst.operands[0].shape
    if _is_topk(inst):
        out = inst.shape.leaves()[0]
        return tuple(shape.dims), shape.rank - 1, out.dims[-1] if out.dims else 0
    dims = inst.attrs.get("dimensions")
    if not isinstance(dims, (tuple, list)) or len(dims) != 1:
        raise inst.error("sort needs dimensions={d}")
    return tuple(shape.dims), int(dims[0]), None


def check_sort(inst: HloInstruction) -> None:
    """Raises a clear HloError for a malformed sort."""
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
    for op in inst.operands:
        check_supported(op.shape, inst)


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
    if not _is_topk(inst):
        order = _common_layout(inst, [o.shape for o in operands] + inst.shape.leaves())
        if order:
            attrs["dimensions"] = (order.index(int(inst.attrs["dimensions"][0])),)
    root = HloInstruction(inst.name, inst.opcode, shape, params, attrs, None, None,
                          inst.location)
    comp = HloComputation(f"{sanitize(name or inst.name)}_computation", params + [root],
                          root, False, inst.location)
    for p in params:
        p.parent, p.users = comp, [root]
    root.parent = comp
    kind = "topk" if _is_topk(inst) else "sort"
    return Fusion(sanitize(name or inst.name), comp, [root], [root], kind, None,
                  config=config)


@dataclass
class SortKernel:
    """A compiled kernel of a sort and what it reads: the sort's operands
    (then it writes the results) or the results in place."""
    config: SortKernelConfig
    executable: Any        # compiler.Executable
    key: str

    @property
    def reads_operands(self) -> bool:
        return self.config.reads_operands


@dataclass
class CompiledSort:
    """A sort (or top-k) as a sequence of kernels. `run(*operands)` runs
    them (a test harness: numpy in, numpy out); `thunks(...)` lays them out
    over buffer slices for a program."""
    name: str
    kernels: list[SortKernel]
    operand_shapes: list[Shape]
    result_shapes: list[Shape]
    copy_first: bool       # the operands are copied into the results first
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if not self.kernels:
            return "nothing to sort: results are copies of the operands"
        return f"{len(self.kernels)} kernel(s): " + \
            "; ".join(k.config.describe() for k in self.kernels)

    def run(self, *operands: np.ndarray) -> tuple[np.ndarray, ...]:
        """Runs the kernels on host arrays (the kernels' target: cpu runs
        them on the host, cuda on the GPU through the runtime) in
        logical order; returns the results."""
        arrays = [np.ascontiguousarray(o) for o in operands]
        shapes = self.result_shapes
        if len(arrays) != len(self.operand_shapes):
            raise HloError(f"{self.name}: takes {len(self.operand_shapes)} operands, "
                           f"got {len(arrays)}")
        for k, (a, s) in enumerate(zip(arrays, self.operand_shapes)):
            if tuple(a.shape) != tuple(s.dims):
                raise HloError(f"{self.name}: operand {k} has shape {list(a.shape)}, "
                               f"expected {s}")
        if not self.kernels:
            if self.copy_first:
                return tuple(np.array(a) for a in arrays)
            return tuple(np.zeros(s.dims, s.dtype) for s in shapes)
        current = [np.ascontiguousarray(s.physical_from_logical(a))
                   for a, s in zip(arrays, self.operand_shapes)]
        for kernel in self.kernels:
            current = list(kernel.executable.run(*current))
        return tuple(s.logical_from_physical(a) for a, s in zip(current, shapes))

    def thunks(self, name: str, operands: Sequence[Any], results: Sequence[Any],
               register: Callable[[str, Any], str]) -> list:
        """Kernel (and copy) thunks running the sort from `operands` into
        `results` (BufferSlices, the sorted arrays' and the results', in
        order); `register(key, executable)` adds a kernel to the program and
        returns its id."""
        from ..runtime.thunks import CopyThunk, KernelThunk
        out: list = []
        if self.copy_first:
            # Copying operand k into result k must not overwrite another
            # operand still to be copied: results share an operand's buffer
            # only at its own index (as XLA's dataflow analysis allows).
            for k, dst in enumerate(results):
                for j, src in enumerate(operands):
                    if j != k and src == dst:
                        raise HloError(f"sort '{name}': result {k} shares the buffer of "
                                       f"operand {j}; only operand {k} may share it")
            for src, dst, shape in zip(operands, results, self.result_shapes):
                if src != dst:
                    size = shape.num_elements * np.dtype(
                        _storage_dtype(shape.element_type)).itemsize
                    out.append(CopyThunk(name, src, dst, size))
        for kernel in self.kernels:
            spec = kernel.executable.spec
            kernel_id = register(kernel.key, kernel.executable)
            if kernel.reads_operands:
                args = list(operands) + list(results)
                written = list(range(len(operands), len(args)))
            else:
                args = list(results)
                written = list(range(len(args)))
            out.append(KernelThunk(name, kernel_id, args, written, spec.threads,
                                   spec.blocks, spec.shared_bytes))
        return out


def _storage_dtype(element: str):
    from ..runtime.spec import ArgSpec
    return ArgSpec((), element).storage_dtype


_compiled: dict[str, Any] = {}


def compile_kernel(fusion: Fusion, target: str, arch: str = "sm_90",
                   cache: bool = True, salt: str = "",
                   lower_only: bool = False) -> tuple[Any, str]:
    """Compiles one kernel fusion through the single-fusion compiler (the
    same pipeline, PTX/cubin or host code) and the compile cache; `salt`
    distinguishes kernels of one computation (the config). Returns
    (Executable, cache key). `lower_only` (cuda, a program's kernel): a
    kernel not in the cache stops before PTX (`Executable.lowered`), for the
    program to link with its other kernels, and is not cached."""
    from .. import compile_cache, compiler
    from ..hlo.fingerprint import fingerprint
    identity = compile_cache.compiler_identity(target) if cache else ""
    key = compile_cache.make_key("kernel", fusion.kind, fingerprint(fusion.computation),
                                 salt, target, arch, identity)
    exe = _compiled.get(key) if cache else None
    disk = compile_cache.DiskCache() if cache else None
    if exe is None and disk is not None:
        exe = disk.get(key, target)
    if exe is None:
        exe = compiler._build(fusion, fusion_text(fusion.computation), target, arch, key,
                              None, ".*", lower_only)
        if exe.lowered is not None:
            return exe, key
        if disk is not None:
            disk.put(key, exe)
    if cache:
        _compiled[key] = exe
    return exe, key


def compile_sort(inst: HloInstruction, *, target: str = "cpu", arch: str = "sm_90",
                 cache: bool = True, lower_only: bool = False) -> CompiledSort:
    """The kernels of an HLO `sort` instruction for `target` ("cpu" or
    "cuda"). A stable sort that needs several kernels must have had its
    tie-break index made an operand (`expand_stable_sorts`). `lower_only`:
    as `compile_kernel`'s."""
    if inst.opcode != "sort":
        raise inst.error("compile_sort takes a sort instruction")
    check_sort(inst)
    comparator = comparator_of(inst)
    types = [o.shape.element_type for o in inst.operands]
    check_comparator(inst, comparator, types)
    fusion0 = sort_kernel_fusion(inst, None)
    sort = fusion0.roots[0]
    dims, dim, _ = _sort_geometry(sort)
    try:
        plan = plan_sort(dims, dim, types, stable=_is_stable(inst))
    except UnsupportedError as e:
        raise inst.unsupported(str(e)) from None
    kernels = []
    for k, config in enumerate(plan.kernels):
        fusion = sort_kernel_fusion(inst, config, name=f"{inst.name}_{k}" if
                                    len(plan.kernels) > 1 else inst.name)
        exe, key = compile_kernel(fusion, target, arch, cache, salt=repr(config),
                                  lower_only=lower_only)
        kernels.append(SortKernel(config, exe, key))
    copy_first = not kernels or not kernels[0].reads_operands
    return CompiledSort(inst.name, kernels, [o.shape for o in inst.operands],
                        list(inst.shape.leaves()), copy_first,
                        [plan.describe()] if kernels else [])


# -- HLO rewrites before buffer assignment ---------------------------------------------


def needs_index_operand(inst: HloInstruction) -> bool:
    """Whether a stable sort runs as several kernels (its tie-break index
    must then live in a buffer: an iota operand)."""
    if inst.opcode != "sort" or not _is_stable(inst) or not inst.operands:
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


def _existing_index_operand(inst: HloInstruction) -> int | None:
    """An operand that is an s32 iota along the sort dimension (XLA reuses
    it as the tie-break)."""
    dim = int(inst.attrs["dimensions"][0])
    for k, op in enumerate(inst.operands):
        iota = op
        if op.opcode == "fusion" and not op.operands:   # XLA's "wrapped_iota"
            called = op.attrs.get("calls")
            iota = called.root if isinstance(called, HloComputation) else op
        if iota.opcode == "iota" and op.shape.element_type == INDEX_TYPE and \
                iota.attrs.get("iota_dimension") == dim and \
                tuple(iota.shape.dims) == tuple(op.shape.dims):
            return k
    return None


def stable_comparator(comp: HloComputation, index_operand: int, name: str) -> HloComputation:
    """XLA's StableSortExpander comparator: comp(a, b) unless comp(a, b)
    equals comp(b, a) (equivalent elements), then index_a < index_b."""
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.instructions:
        copy = inst.clone_with([mapping[id(o)] for o in inst.operands])
        copy.attrs.pop("control-predecessors", None)
        mapping[id(inst)] = copy
        body.append(copy)
    params = {p.parameter_number: mapping[id(p)] for p in comp.parameters}
    forward_root = mapping[id(comp.root)]
    swapped: dict[int, HloInstruction] = {}
    for p in comp.parameters:
        swapped[id(p)] = params[p.parameter_number ^ 1]
    for inst in comp.instructions:
        if inst.opcode == "parameter":
            continue
        if not inst.operands:
            swapped[id(inst)] = mapping[id(inst)]
            continue
        copy = inst.clone_with([swapped[id(o)] for o in inst.operands],
                               name=f"{inst.name}.reversed")
        copy.attrs.pop("control-predecessors", None)
        swapped[id(inst)] = copy
        body.append(copy)
    backward_root = swapped[id(comp.root)]
    pred = Shape("pred", ())
    same = HloInstruction("same_order", "compare", pred, [forward_root, backward_root],
                          {"direction": "EQ"})
    lhs, rhs = params[2 * index_operand], params[2 * index_operand + 1]
    tie = HloInstruction("index_order", "compare", pred, [lhs, rhs], {"direction": "LT"})
    root = HloInstruction("stable_order", "select", pred, [same, tie, forward_root], {})
    body += [same, tie, root]
    return HloComputation(name, body, root, False, comp.location).link_instructions()


def expand_stable_sorts(module: HloModule) -> int:
    """XLA's StableSortExpander for the sorts that need it here (stable
    sorts of several kernels): an s32 iota along the sort dimension becomes
    an extra operand (or an existing one is used) and the comparator breaks
    ties with it; the sort is then no longer marked stable (its order is
    total). Mutates `module`; returns the number of sorts rewritten."""
    count = 0
    for comp in list(module.computations):
        for inst in list(comp.instructions):
            if not needs_index_operand(inst):
                continue
            comparator = comparator_of(inst)
            index = _existing_index_operand(inst)
            if index is None:
                dim = int(inst.attrs["dimensions"][0])
                first = inst.operands[0].shape
                iota_shape = Shape(INDEX_TYPE, tuple(first.dims), first.layout)
                iota = comp.add(
                    "iota", iota_shape, [], name=f"{inst.name}.index", iota_dimension=dim)
                operands = list(inst.operands) + [iota]
                leaves = [o.shape for o in inst.operands] + [iota_shape]
                new_shape = Shape(tuple_shapes=tuple(leaves))
                index = len(operands) - 1
                extended = _with_index_parameters(comparator, len(inst.operands),
                                                  f"{comparator.name}.indexed")
            else:
                operands = list(inst.operands)
                new_shape = inst.shape if inst.shape.is_tuple else \
                    Shape(tuple_shapes=(inst.shape,))
                extended = comparator
            stable = stable_comparator(extended, index, f"{comparator.name}.stable")
            module.add_computation(stable, before=comp)
            attrs = dict(inst.attrs)
            attrs["to_apply"] = stable
            attrs["is_stable"] = False
            attrs.pop("control-predecessors", None)
            new_sort = comp.add_instruction(
                HloInstruction(inst.name + ".stable", "sort", new_shape, operands, attrs,
                               None, None, inst.location))
            if inst.shape.is_tuple:
                parts = [comp.add("get-tuple-element", s, [new_sort],
                                  name=f"{inst.name}.{k}", index=k)
                         for k, s in enumerate(inst.shape.tuple_shapes)]
                replacement = comp.add("tuple", inst.shape, parts, name=inst.name + ".result")
            else:
                replacement = comp.add("get-tuple-element", inst.shape, [new_sort],
                                       name=inst.name + ".result", index=0)
            inst.replace_with(replacement)
            count += 1
    return count


def _with_index_parameters(comp: HloComputation, operands: int, name: str) -> HloComputation:
    """`comp` taking two more (unused) s32 parameters: the index pair of an
    added iota operand."""
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.instructions:
        copy = inst.clone_with([mapping[id(o)] for o in inst.operands])
        mapping[id(inst)] = copy
        body.append(copy)
    scalar = Shape(INDEX_TYPE, ())
    for side in range(2):
        body.append(HloInstruction(f"index.{'lhs' if side == 0 else 'rhs'}", "parameter",
                                   scalar, [], {}, None, 2 * operands + side))
    new = HloComputation(name, body, mapping[id(comp.root)], False, comp.location)
    return new.link_instructions()
