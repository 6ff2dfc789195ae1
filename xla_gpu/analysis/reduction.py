"""Reduction analysis: the reduce input seen as [K0, R, K1] (reduced
dimensions contiguous once size-1 dimensions are dropped) or, for row
reductions, [R0, K, R] (reduced dimensions on both sides of the kept ones:
XLA's major-reduced / kept / minor-reduced row form), and whether the
reduction emitter can take a fusion (the fusion analysis sends it to the
loop emitter otherwise, which reduces sequentially in each thread).

The reduction emitter takes a fusion whose reduce heroes reduce inputs that
normalize to one [K0, R, K1] or [R0, K, R] form (their shapes may differ:
f32[64,128] and its bitcast f32[8,8,128], both reduced to [128]), with
scalar init values, whose roots are those reduces (or elementwise
epilogues of them) or side outputs with as many elements as the reduce
input (written at the same row-major position). A reduce that something
else reads (another reduce's input, a side output, another reduce's
epilogue) is computed a second time, elementally, where it is read, as
XLA's emitter does (`heroes_read_elsewhere`). The values the threads
exchange must fit a block's shared memory at the emitter's smallest tiles
(`analysis.shared_memory`); the fusion passes hold fusions to the budget at
the preferred tiles (`reduction_shared_bytes`).
"""

from __future__ import annotations

from math import prod

from ..hlo import HloError, HloInstruction
from ..hlo.graph import post_order
from .epilogue import has_epilogue, is_elementwise_epilogue
from .shared_memory import (WARP_SIZE, ColumnTiles, column_tiles, column_vector_size,
                            input_bits, output_bits, reduction_partial_bytes, row_tiles,
                            small_column_tiles, static_shared_budget)

__all__ = ["ReductionLayout", "reduction_layout", "reduction_refusal",
           "reduce_heroes", "checked_layout", "checked_layouts",
           "heroes_read_elsewhere", "reduction_groups", "reduction_shared_bytes",
           "reduction_shared_need",
           "shared_memory_refusal"]


class ReductionLayout:
    """The reduce input as [K0, R, K1] (K = K0 * K1 kept elements): `R`
    elements reduced per output element; a row reduction (K1 == 1) reduces
    the minor dimensions, a column reduction keeps K1 elements below them.
    A row reduction may also reduce dimensions above the kept ones: `R0`
    of them per output element ([R0, K, R]; R0 is 1 otherwise). The
    reduced linear index runs over `reduced` (ascending) row-major: its
    major part counts R0, its minor part R."""

    def __init__(self, dims: list[int], reduced: list[int]):
        self.dims = list(dims)
        self.reduced = sorted(reduced)
        self.kept = [i for i in range(len(dims)) if i not in self.reduced]
        big_kept = [i for i in self.kept if dims[i] > 1]
        first_kept = big_kept[0] if big_kept else len(dims)
        big = [i for i in range(len(dims)) if dims[i] > 1]
        big_reduced = [i for i in big if i in self.reduced]
        # Reduced dimensions above the first kept one, when others lie
        # below the kept ones (the [R0, K, R] row form).
        major = [i for i in self.reduced if i < first_kept]
        two_sided = bool(big_kept) and any(i < first_kept for i in big_reduced) and \
            any(i > first_kept for i in big_reduced)
        self.R0 = prod(dims[i] for i in major) if two_sided else 1
        minor_reduced = [i for i in self.reduced if not two_sided or i > first_kept]
        big_minor_reduced = [i for i in big_reduced if i in minor_reduced]
        last = big_minor_reduced[-1] if big_minor_reduced else len(dims) - 1
        self.R = prod(dims[i] for i in minor_reduced)
        self.K = prod(dims[i] for i in self.kept)
        self.K1 = prod(dims[i] for i in self.kept if i > last)
        self.K0 = self.K // self.K1
        self.is_row = self.K1 == 1

    def form(self) -> tuple[int, int, int, int]:
        """What the emitters tile: (R0, K0, R, K1)."""
        return self.R0, self.K0, self.R, self.K1


def _layout_refusal(dims: list[int], reduced: list[int]) -> str | None:
    big = [i for i in range(len(dims)) if dims[i] > 1]
    big_reduced = [i for i in big if i in reduced]
    if not big_reduced:
        return "the reduction reduces only size-1 dimensions"
    first, last = big.index(big_reduced[0]), big.index(big_reduced[-1])
    if big[first:last + 1] == big_reduced:
        return None
    # Reduced dimensions on both sides of the kept ones: a row reduction
    # when the kept dimensions are contiguous and the minor ones reduced.
    big_kept = [i for i in big if i not in reduced]
    k_first, k_last = big.index(big_kept[0]), big.index(big_kept[-1])
    if big[k_first:k_last + 1] == big_kept and big[0] in reduced and big[-1] in reduced:
        return None
    return "the reduced dimensions are neither contiguous nor around one kept block"


def reduce_heroes(heroes: list[HloInstruction]) -> list[HloInstruction]:
    """The distinct reduce heroes, in output order."""
    return list(dict.fromkeys(h for h in heroes if h.opcode == "reduce"))


def reduction_layout(reduce: HloInstruction) -> ReductionLayout:
    return ReductionLayout(list(reduce.operands[0].shape.dims),
                           list(reduce.attrs["dimensions"]))


def reduction_refusal(roots: list[HloInstruction],
                      heroes: list[HloInstruction]) -> str | None:
    """Why the reduction emitter cannot take a fusion with these roots and
    heroes, or None when it can."""
    reduces = reduce_heroes(heroes)
    if not reduces:
        return "no reduce among the heroes"
    first = reduces[0]
    dims = list(first.operands[0].shape.dims)
    refusal = _layout_refusal(dims, sorted(first.attrs["dimensions"]))
    if refusal is not None:
        return refusal
    form = reduction_layout(first).form()
    for h in reduces[1:]:
        if _layout_refusal(list(h.operands[0].shape.dims), sorted(h.attrs["dimensions"])) \
                is not None or reduction_layout(h).form() != form:
            return "reduce heroes of different shapes"
    size = prod(dims)
    for root, hero in zip(roots, heroes):
        if hero.opcode == "reduce":
            if not has_epilogue(root, hero):
                continue
            if not is_elementwise_epilogue(root, hero):
                return f"the epilogue of '{hero.name}' is not elementwise"
            if hero.shape.is_tuple:
                return "an epilogue of a variadic reduce"
        elif root.shape.is_tuple or prod(root.shape.dims) != size:
            return f"output '{root.name}' is neither a reduction nor as large as the reduce input"
    for h in reduces:
        if any(o.shape.rank for o in h.operands[len(h.operands) // 2:]):
            return "init values must be scalars"
    return shared_memory_refusal(reduction_layout(first), heroes)


def shared_memory_refusal(layout: ReductionLayout,
                          heroes: list[HloInstruction]) -> str | None:
    """Why the reduction emitter's exchange of partials cannot fit a
    block's shared memory even at its smallest tiles (one lane, one warp
    per column), or None. Row reductions always fit (one warp per row
    needs no tile)."""
    if layout.is_row:
        return None
    partials = reduction_partial_bytes(heroes)
    budget = static_shared_budget()
    if WARP_SIZE % layout.K1 == 0:
        fits = small_column_tiles(partials, layout.K1, 1, budget) is not None
    else:
        fits = column_tiles(partials, 1, budget) is not None
    if fits:
        return None
    return (f"{len(partials)} reduced values ({sum(partials)} bytes per element) do not "
            f"fit {budget} bytes of shared memory even at the smallest tiles")


def reduction_shared_bytes(roots: list[HloInstruction], heroes: list[HloInstruction],
                           parameter_types: list[str]) -> int:
    """The shared memory the reduction emitter's tiles take at its
    preferred configuration (before any shrinking to fit the budget), for a
    fusion the analysis gives it, with parameters of `parameter_types` (the
    vector width follows the narrowest): what the fusion passes hold to the
    budget, as XLA's FusionFitsInBudget does. Configured for the GPU (the
    cpu target's large column reductions need none). The caller has the
    emitter choice's verdict already: the layout is not checked again."""
    return reduction_shared_need(roots, heroes, parameter_types)[0]


def reduction_shared_need(roots: list[HloInstruction], heroes: list[HloInstruction],
                          parameter_types: list[str]) -> tuple[int, bool]:
    """`reduction_shared_bytes`, and whether the answer read
    `parameter_types` (a column reduction's vector width follows the
    narrowest parameter; a row reduction's tiles do not): the fusion passes
    reuse the verdict for a body whose parameters differ when it did not."""
    layout = reduction_layout(reduce_heroes(heroes)[0])
    partials = reduction_partial_bytes(heroes)
    if layout.is_row:
        # The preferred threads, whatever they take (no budget).
        return row_tiles(partials, layout.K, layout.R, budget=1 << 62).bytes(partials), False
    reduces = reduce_heroes(heroes)
    complex_operands = any(o.shape.element_type in ("c64", "c128")
                           for h in reduces for o in h.operands)
    outputs = [leaf.element_type for r in roots for leaf in r.shape.leaves()]
    narrow_in, narrow_out = input_bits(parameter_types), output_bits(outputs)
    if WARP_SIZE % layout.K1 == 0:
        lanes = column_vector_size(layout.R * layout.K1, WARP_SIZE, narrow_in, narrow_out,
                                   complex_operands)
        tiles = small_column_tiles(partials, layout.K1, lanes, budget=1 << 62)
        return tiles.bytes(partials, layout.K1), True
    lanes = column_vector_size(layout.K1, WARP_SIZE, narrow_in, narrow_out, complex_operands)
    return ColumnTiles(lanes).bytes(partials), True


def heroes_read_elsewhere(roots: list[HloInstruction],
                          heroes: list[HloInstruction]) -> set[int]:
    """id() of the reduce heroes that something other than their own
    epilogue reads: another reduce's input, a side output, or another
    reduce's epilogue. The reduced value exists only after the reduction,
    so those readers compute it again, elementally (a sequential loop in
    each thread that reads it), as XLA's reduction emitter does."""
    reduces = reduce_heroes(heroes)
    hero_ids = {id(h) for h in reduces}
    found: set[int] = set()
    # Everything below the reduces' operands and the side outputs.
    starts = [o for h in reduces for o in h.operands] + \
        [r for r, h in zip(roots, heroes) if h.opcode != "reduce"]
    _collect(starts, hero_ids, found, stop=None)
    # Epilogues: what they read besides their own hero.
    for root, hero in zip(roots, heroes):
        if hero.opcode == "reduce" and has_epilogue(root, hero):
            _collect([root], hero_ids, found, stop=hero)
    return found


def _collect(starts: list[HloInstruction], hero_ids: set[int], found: set[int],
             stop: HloInstruction | None) -> None:
    """Adds to `found` the heroes reachable from `starts` (not walking
    through `stop`, nor below a hero: an elemental copy reads the hero's
    operands itself, and those are walked from the reduces' operands)."""
    stack, seen = list(starts), set() if stop is None else {id(stop)}
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if id(inst) in hero_ids:
            found.add(id(inst))
            continue
        stack.extend(inst.operands)


def checked_layout(roots: list[HloInstruction], heroes: list[HloInstruction]) -> ReductionLayout:
    """The layout of a fusion the analysis gave the reduction emitter (its
    first reduce hero's; the others have the same form)."""
    return checked_layouts(roots, heroes)[0]


def checked_layouts(roots: list[HloInstruction],
                    heroes: list[HloInstruction]) -> list[ReductionLayout]:
    """The layout of each reduce hero (`reduce_heroes` order) of a fusion
    the analysis gave the reduction emitter."""
    refusal = reduction_refusal(roots, heroes)
    if refusal is not None:
        raise HloError(f"internal: the fusion analysis chose the reduction emitter "
                       f"for a fusion it cannot take ({refusal})")
    return [reduction_layout(h) for h in reduce_heroes(heroes)]


def _broadcasted_constant_or_scalar(inst: HloInstruction) -> bool:
    if inst.opcode == "constant" or (not inst.shape.is_tuple and inst.shape.rank == 0):
        return True
    if inst.opcode == "broadcast":
        operand = inst.operands[0]
        return operand.opcode == "constant" or (not operand.shape.is_tuple and
                                                operand.shape.rank == 0)
    return False


def reduction_groups(roots: list[HloInstruction],
                     heroes: list[HloInstruction]) -> list[int]:
    """XLA's GroupDisjointReductions: the group of each root. Roots that
    share an instruction (a parameter read by both, a common producer) are
    in one group; all roots without a reduce hero are in one group (their
    writes may alias inputs others read); a constant or scalar (or a
    broadcast of one) joins at most one reduce root to others, since
    computing it again is cheap. Groups are numbered in root order."""
    n = len(roots)
    if n <= 1:
        return [0] * n
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def merge(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    is_reduction = [h.opcode == "reduce" for h in heroes]
    others = [i for i in range(n) if not is_reduction[i]]
    for i in others[1:]:
        merge(others[0], i)
    # The roots each instruction reaches (itself included), consumers
    # first: a post-order from the roots, walked backwards.
    order = post_order(roots, lambda inst: inst.operands)
    reach: dict[int, set[int]] = {id(i): set() for i in order}
    for k, root in enumerate(roots):
        reach[id(root)].add(k)
    for inst in reversed(order):
        for operand in inst.operands:
            reach[id(operand)] |= reach[id(inst)]
    for inst in order:
        reached, added_to_reduce = [], False
        for k in range(n):
            if k not in reach[id(inst)]:
                continue
            if is_reduction[k] and _broadcasted_constant_or_scalar(inst):
                if added_to_reduce:
                    continue
            reached.append(k)
            added_to_reduce |= is_reduction[k]
        for k in reached[1:]:
            merge(reached[0], k)
    numbering: dict[int, int] = {}
    return [numbering.setdefault(find(k), len(numbering)) for k in range(n)]
