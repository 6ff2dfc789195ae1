"""Concatenate analysis: XLA's concatenate emitter takes a fusion whose
roots all come from concatenate heroes of one kind (same shape, axis and
operand sizes along it, at most four operands) through epilogues that keep
every element's linear position (elementwise ops, also with operands of
their own, and row-major bitcasts / reshapes). Each operand is then read
once, coalesced, and every root is written at its own position of the
element."""

from __future__ import annotations

from ..hlo import HloInstruction
from ..hlo.fusions import ELEMENTWISE_OPCODES
from .epilogue import epilogue_chain_ok, reaches_any

__all__ = ["MAX_CONCATENATE_OPERANDS", "find_concatenate_hero", "concatenate_refusal"]

# XLA: the emitter produces a loop per operand; more hurt occupancy.
MAX_CONCATENATE_OPERANDS = 4

# Ops an epilogue may pass through: the element keeps its linear position.
_RESHAPING = ("bitcast", "reshape", "copy")


def _passes_position(inst: HloInstruction) -> bool:
    if inst.shape.is_tuple:
        return False
    if inst.opcode in ELEMENTWISE_OPCODES:
        # Not a bitcast-convert between widths: it splits or joins elements.
        return len(inst.operands) <= 3 and all(
            o.shape.rank == 0 or o.shape.dims == inst.shape.dims for o in inst.operands)
    return inst.opcode in _RESHAPING and inst.shape.is_row_major and \
        inst.operands[0].shape.is_row_major


def find_concatenate_hero(root: HloInstruction) -> HloInstruction | None:
    """The concatenate `root` is computed from through position-keeping ops
    (elementwise ops of up to three operands, bitcasts, reshapes), looking
    through every operand breadth first as XLA does; None if there is none."""
    queue, seen = [root], set()
    while queue:
        inst = queue.pop(0)
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if inst.opcode == "concatenate":
            return inst
        if _passes_position(inst):
            queue.extend(inst.operands)
    return None


def concatenate_refusal(roots: list[HloInstruction],
                        heroes: list[HloInstruction]) -> str | None:
    """Why the concatenate emitter cannot take these roots with these
    concatenate heroes (None when it can)."""
    distinct = list(dict.fromkeys(heroes))
    first = distinct[0]
    axis = first.attrs["dimensions"][0]
    sizes = [o.shape.dims[axis] for o in first.operands]
    if len(first.operands) > MAX_CONCATENATE_OPERANDS:
        return (f"'{first.name}' has {len(first.operands)} operands (more than "
                f"{MAX_CONCATENATE_OPERANDS})")
    for hero in distinct[1:]:
        if hero.shape.dims != first.shape.dims or hero.attrs["dimensions"][0] != axis or \
                [o.shape.dims[axis] for o in hero.operands] != sizes:
            return f"concatenates '{first.name}' and '{hero.name}' are split differently"
    hero_ids = {id(h) for h in distinct}
    for root, hero in zip(roots, heroes):
        if root is hero:
            continue
        if not epilogue_chain_ok(root, hero, _passes_position):
            return f"the epilogue of '{hero.name}' moves elements"
        # The epilogue's other operands must not read a concatenation.
        chain, cur = set(), root
        while cur is not hero:
            chain.add(id(cur))
            nxt = [o for o in cur.operands if reaches_any([o], {id(hero)})]
            others = [o for o in cur.operands if o is not nxt[0]]
            if reaches_any(others, hero_ids):
                return f"the epilogue of '{hero.name}' reads a concatenation elsewhere"
            cur = nxt[0]
    return None
