"""The computation partitioner: splits a fusion computation into
subgraphs that can each be emitted as one function.

An instruction joins the subgraph of its users when it has one user, or when
all its users are in one subgraph and read it through the same indexing map
(relative to that subgraph's root index). Otherwise it roots a subgraph of
its own, so that no element is computed twice under different indices.
Parameters and constants belong to no subgraph: they are read where used.

Each subgraph becomes `func.func private @name(param tensors..., one index
per root dimension) -> (one result per root element)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..analysis.indexing import ELEMENTWISE_OPCODES, identity_map, output_to_input
from ..hlo import HloComputation, HloInstruction
from ..ir import IndexingMap

__all__ = ["Subgraph", "PartitionedComputation", "partition", "sanitize"]


_NOT_A_SYMBOL_CHARACTER = re.compile(r"[^A-Za-z0-9_]")


def sanitize(name: str) -> str:
    return _NOT_A_SYMBOL_CHARACTER.sub("_", name)


@dataclass(eq=False)
class Subgraph:
    name: str
    roots: list[HloInstruction]
    members: set[int] = field(default_factory=set)   # id() of instructions
    # Values the function receives instead of computing (epilogue heroes).
    injected: list[HloInstruction] = field(default_factory=list)

    # id() of each root -> (its first result, its number of results).
    _results: dict[int, tuple[int, int]] | None = field(default=None, repr=False)

    @property
    def index_rank(self) -> int:
        return self.roots[0].shape.leaves()[0].rank

    def results_of(self, root: HloInstruction) -> tuple[int, int] | None:
        """(first, count) of `root`'s results among the function's results
        (a variadic reduce has several); None if `root` is not a root."""
        if self._results is None:
            self._results, k = {}, 0
            for r in self.roots:
                count = len(r.shape.leaves())
                self._results.setdefault(id(r), (k, count))
                k += count
        return self._results.get(id(root))

    def contains(self, inst: HloInstruction) -> bool:
        return id(inst) in self.members


@dataclass
class PartitionedComputation:
    computation: HloComputation
    subgraphs: list[Subgraph]
    _owner: dict[int, Subgraph]

    def subgraph_of(self, inst: HloInstruction) -> Subgraph | None:
        return self._owner.get(id(inst))


def _is_free(inst: HloInstruction) -> bool:
    # Read in place wherever used: parameters, and constants.
    return inst.opcode in ("parameter", "constant")


def partition(computation: HloComputation,
              root_groups: Iterable[list[HloInstruction]],
              is_subgraph_root: Callable[[HloInstruction], bool] = lambda i: False,
              exclude: Callable[[HloInstruction], bool] = lambda i: False,
              ) -> PartitionedComputation:
    """`root_groups`: instructions that must root subgraphs, grouped into one
    function each (e.g. all roots of a loop fusion). `is_subgraph_root`
    forces more roots (heroes); `exclude` keeps instructions out of every
    subgraph (values the entry function computes itself)."""
    owner: dict[int, Subgraph] = {}
    maps = _MemberMaps()
    subgraphs: list[Subgraph] = []
    base = sanitize(computation.name)

    def new_subgraph(roots: list[HloInstruction]) -> Subgraph:
        name = base if not subgraphs else f"{base}_{sanitize(roots[0].name)}"
        sub = Subgraph(name, roots)
        subgraphs.append(sub)
        for root in roots:
            sub.members.add(id(root))
            owner[id(root)] = sub
            maps.set_root(root)
        return sub

    def join(sub: Subgraph, inst: HloInstruction, user: HloInstruction, operand: int,
             composed: IndexingMap | None = None) -> None:
        sub.members.add(id(inst))
        owner[id(inst)] = sub
        if composed is None:
            maps.defer(inst, user, operand)
        else:
            maps.set(inst, composed)

    for group in root_groups:
        group = [r for r in dict.fromkeys(group) if id(r) not in owner]
        # A root that other instructions of the fusion also read roots a
        # function of its own: in the group's function, a subgraph between
        # it and another root would call the group's function back.
        members = {id(r) for r in group}
        shared = [r for r in group if len(group) > 1 and any(
            u.opcode != "tuple" and id(u) not in members for u in r.users)]
        shared_ids = {id(r) for r in shared}
        group = [r for r in group if id(r) not in shared_ids]
        if group:
            new_subgraph(group)
        for root in shared:
            new_subgraph([root])

    for inst in reversed(computation.post_order()):
        if id(inst) in owner or _is_free(inst) or inst.opcode == "tuple" or exclude(inst):
            continue
        if is_subgraph_root(inst) or not inst.users:
            new_subgraph([inst])
            continue
        uses = [(user, j) for user in dict.fromkeys(inst.users)
                for j, op in enumerate(user.operands) if op is inst]
        owners = {id(owner.get(id(u))) for u, _ in uses}
        if len(uses) == 1 or len({id(u) for u, _ in uses}) == 1:
            user = uses[0][0]
            sub = owner.get(id(user))
            if sub is not None and len(owners) == 1:
                join(sub, inst, *uses[0])
                continue
        elif len(owners) == 1 and None not in [owner.get(id(u)) for u, _ in uses]:
            composed = [_compose(maps.get(u), u, j) for u, j in uses]
            if all(c is not None for c in composed) and _all_equal(composed):
                join(owner[id(uses[0][0])], inst, *uses[0], composed[0])
                continue
        new_subgraph([inst])
    return PartitionedComputation(computation, subgraphs, owner)


class _MemberMaps:
    """For each subgraph member, the map from its subgraph's root index to
    the member's index (None when it depends on runtime values). Only an
    instruction used several times inside one subgraph needs them, so a
    member's map is composed when first asked for: walking up to the
    nearest member whose map is known, then down again (no recursion)."""

    def __init__(self) -> None:
        self._known: dict[int, IndexingMap | None] = {}
        self._pending: dict[int, tuple[HloInstruction, int]] = {}
        # Roots whose map (the identity) nothing asked for yet: most are
        # never asked for, and building one costs more than the lookup.
        self._roots: dict[int, HloInstruction] = {}

    def set_root(self, root: HloInstruction) -> None:
        self._roots[id(root)] = root

    def set(self, inst: HloInstruction, indexing: IndexingMap | None) -> None:
        self._known[id(inst)] = indexing

    def defer(self, inst: HloInstruction, user: HloInstruction, operand: int) -> None:
        """`inst`'s map is its `user`'s composed with the user's indexing of
        operand `operand`."""
        self._pending[id(inst)] = (user, operand)

    def get(self, inst: HloInstruction) -> IndexingMap | None:
        chain, current = [], inst
        while id(current) not in self._known:
            root = self._roots.pop(id(current), None)
            if root is not None:
                self._known[id(root)] = identity_map(root.shape.leaves()[0].dims)
                break
            user, operand = self._pending[id(current)]
            chain.append((current, user, operand))
            current = user
        for member, user, operand in reversed(chain):
            self._known[id(member)] = _compose(self._known[id(user)], user, operand)
            del self._pending[id(member)]
        return self._known[id(inst)]


def _all_equal(maps: list[IndexingMap]) -> bool:
    first = maps[0].to_attr()
    if all(m.to_attr() == first for m in maps[1:]):
        return True
    return len({str(m) for m in maps}) == 1


def _is_identity(user: HloInstruction, operand: int) -> bool:
    """Whether `user` reads operand `operand` at its own output index."""
    if user.opcode not in ELEMENTWISE_OPCODES and user.opcode not in ("copy", "map"):
        return False
    return not user.shape.is_tuple and \
        list(user.operands[operand].shape.dims) == list(user.shape.dims)


def _compose(user_map: IndexingMap | None, user: HloInstruction,
             operand: int) -> IndexingMap | None:
    if user_map is None:
        return None
    if _is_identity(user, operand):
        return user_map
    step = output_to_input(user, operand)
    if step is None:
        return None
    if step.symbols:  # reads several elements per output element
        return None
    return user_map.compose(step).simplified()
