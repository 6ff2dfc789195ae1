"""The HLO graph: modules, computations and instructions, as the parser
builds them, and the mutation API the HLO passes use. numpy only.

Invariants the mutation API keeps (and `xla_gpu.hlo.passes.verify_module`
checks):

* `inst.users` lists each instruction that reads `inst` once, however many
  of its operands `inst` is;
* `comp.instructions` is a valid order (every operand and control
  predecessor before its user). Mutations that may break the order mark the
  computation, and the next read of `instructions` restores it with a
  stable topological sort (the existing order is kept wherever it is valid);
* instruction names are unique in their computation, and unique in the
  module when they come from `HloModule.unique_name` (as XLA's NameUniquer);
* control predecessors live in `attrs["control-predecessors"]` as a tuple of
  names (as the parser keeps them); renames and removals keep them valid.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..errors import HloError, HloParseError, Location, UnsupportedError
from .graph import post_order
from .shape import Shape

__all__ = ["HloError", "HloParseError", "HloInstruction", "HloComputation",
           "HloModule", "Location", "CONTROL_PREDECESSORS", "callees",
           "callees_first"]

CONTROL_PREDECESSORS = "control-predecessors"

_NAME = attrgetter("name")


@dataclass(eq=False)
class HloInstruction:
    """One instruction. `attrs` holds the attributes after the operand list,
    typed where the meaning is known (see the parser), raw text otherwise:

      dimensions, dynamic_slice_sizes, slice_sizes, offset_dims, ...: tuple[int]
      slice: list[(start, limit, stride)];  padding: list[(lo, hi, interior)]
      to_apply, calls, ...: the HloComputation;  direction, kind: str
      index (get-tuple-element), iota_dimension, index_vector_dim: int
    """
    name: str
    opcode: str
    shape: Shape
    operands: list["HloInstruction"] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    literal: np.ndarray | None = None          # constant
    parameter_number: int | None = None        # parameter
    location: Location | None = None
    users: list["HloInstruction"] = field(default_factory=list)
    parent: "HloComputation | None" = field(default=None, repr=False)

    def operand(self, i: int) -> "HloInstruction":
        return self.operands[i]

    @property
    def called_computations(self) -> list["HloComputation"]:
        out: list[HloComputation] = []
        add_called_computations(self, out)
        return out

    def backend_config(self) -> dict[str, Any]:
        """The backend_config attribute as a JSON object: {} when there is
        none (or it is not an object); HloError naming the instruction when
        its text is not JSON."""
        raw = self.attrs.get("backend_config")
        if isinstance(raw, dict):
            return raw
        if not isinstance(raw, str) or not raw.strip():
            return {}
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise self.error(f"backend_config is not JSON ({e})") from None
        return value if isinstance(value, dict) else {}

    def error(self, message: str) -> HloError:
        where = f"line {self.location.line}: " if self.location else ""
        return HloError(f"{where}instruction '{self.name}' ({self.opcode}): {message}")

    def unsupported(self, message: str) -> UnsupportedError:
        """The error for a valid construct xla_gpu does not implement yet."""
        where = f"line {self.location.line}: " if self.location else ""
        return UnsupportedError(f"{where}instruction '{self.name}' ({self.opcode}): {message}")

    def __str__(self) -> str:
        ops = ", ".join(f"%{o.name}" for o in self.operands)
        return f"%{self.name} = {self.shape} {self.opcode}({ops})"

    __repr__ = __str__

    # ------------------------------------------------------------ creation

    @classmethod
    def create(cls, opcode: str, shape: Shape,
               operands: Iterable["HloInstruction"] = (), name: str | None = None,
               **attrs: Any) -> "HloInstruction":
        """A new instruction, not yet in a computation (add it with
        `HloComputation.add_instruction`, which links the users and makes
        the name unique). Attribute names with '-' are passed through
        `attrs` after creation."""
        return cls(name or opcode, opcode, shape, list(operands), dict(attrs))

    @classmethod
    def create_constant(cls, value: np.ndarray, shape: Shape,
                        name: str | None = None) -> "HloInstruction":
        literal = np.asarray(value, dtype=shape.dtype).reshape(shape.dims)
        return cls(name or "constant", "constant", shape, [], {}, literal)

    @classmethod
    def create_parameter(cls, number: int, shape: Shape,
                         name: str | None = None) -> "HloInstruction":
        return cls(name or f"param_{number}", "parameter", shape, [], {}, None,
                   number)

    def clone_with(self, operands: Iterable["HloInstruction"] | None = None,
                   shape: Shape | None = None, name: str | None = None,
                   opcode: str | None = None) -> "HloInstruction":
        """A detached copy (same attributes, literal, parameter number and
        location) with other operands, shape, name or opcode."""
        literal = self.literal
        return HloInstruction(
            name or self.name, opcode or self.opcode, shape or self.shape,
            list(self.operands if operands is None else operands),
            dict(self.attrs), literal, self.parameter_number, self.location)

    # ----------------------------------------------------------- mutation

    def replace_operand_with(self, index: int, new: "HloInstruction") -> None:
        """Makes operand `index` read `new`, keeping `users` consistent."""
        old = self.operands[index]
        if old is new:
            return
        self.operands[index] = new
        if old not in self.operands:   # identity: instructions have no __eq__
            _remove_identity(old.users, self)
        self._now_reads(new)

    def replace_uses_of(self, old: "HloInstruction", new: "HloInstruction") -> None:
        """Every operand of `self` that is `old` becomes `new`."""
        if old is new:
            return
        changed = False
        for k, o in enumerate(self.operands):
            if o is old:
                self.operands[k] = new
                changed = True
        if not changed:
            return
        _remove_identity(old.users, self)
        self._now_reads(new)

    def _now_reads(self, new: "HloInstruction") -> None:
        """`self` has `new` among its operands: listed once among new's
        users, and its computation's order checked again."""
        if self not in new.users:   # identity: instructions have no __eq__
            new.users.append(self)
        if self.parent is not None:
            self.parent._mark_unordered()

    def replace_all_uses_with(self, new: "HloInstruction",
                              users: Iterable["HloInstruction"] | None = None) -> None:
        """Every user of `self` (or only `users`) reads `new` instead; when
        `self` is its computation's root (and `users` is None), `new`
        becomes the root. Control dependencies are not moved (see
        `replace_with`)."""
        if new is self:
            return
        targets = list(self.users) if users is None else list(users)
        for user in targets:
            user.replace_uses_of(self, new)
        if users is None and self.parent is not None and self.parent.root is self:
            self.parent.set_root(new)

    def replace_with(self, new: "HloInstruction") -> None:
        """Replaces `self` by `new` (already in the same computation): uses,
        root, control dependencies; then removes `self`."""
        comp = self.parent
        if comp is None:
            raise HloError(f"instruction '{self.name}' is not in a computation")
        for pred in self.control_predecessors():
            if pred is not new:
                new.add_control_predecessor(pred)
        for succ in self.control_successors():
            if succ is not new:
                succ.add_control_predecessor(new)
        self.replace_all_uses_with(new)
        comp.remove_instruction(self)

    def drop_all_operands(self) -> None:
        for o in self.operands:
            _remove_identity(o.users, self)
        self.operands = []

    # --------------------------------------------------- control dependencies

    def control_predecessors(self) -> list["HloInstruction"]:
        names = self.attrs.get(CONTROL_PREDECESSORS) or ()
        if not names:
            return []
        if self.parent is None:
            raise self.error("control predecessors of a detached instruction")
        by_name = self.parent.name_map()
        return [by_name[n] for n in names if n in by_name]

    def control_successors(self) -> list["HloInstruction"]:
        if self.parent is None or not self.parent.has_control_edges():
            return []
        return [i for i in self.parent._instructions
                if self.name in (i.attrs.get(CONTROL_PREDECESSORS) or ())]

    def add_control_predecessor(self, pred: "HloInstruction") -> None:
        names = tuple(self.attrs.get(CONTROL_PREDECESSORS) or ())
        if pred.name not in names:
            self.attrs[CONTROL_PREDECESSORS] = names + (pred.name,)
            if self.parent is not None:
                self.parent._mark_unordered()
                self.parent._control_edges = True

    def remove_control_predecessor(self, pred: "HloInstruction | str") -> None:
        name = pred if isinstance(pred, str) else pred.name
        names = tuple(n for n in self.attrs.get(CONTROL_PREDECESSORS) or ()
                      if n != name)
        if names:
            self.attrs[CONTROL_PREDECESSORS] = names
        else:
            self.attrs.pop(CONTROL_PREDECESSORS, None)

    def has_control_dependencies(self) -> bool:
        return bool(self.attrs.get(CONTROL_PREDECESSORS)) or \
            bool(self.control_successors())


# Attribute value types that hold no computation (most attributes:
# metadata, dimensions, names, an index), passed over by their exact type.
_PLAIN_ATTRIBUTE_TYPES = frozenset({str, int, tuple, dict, bool, float, type(None)})


def add_called_computations(inst: HloInstruction, out: list) -> None:
    """Appends the computations `inst` calls (its attributes holding a
    computation or a list of them) to `out`: `called_computations`
    without a list per instruction, for walks over whole modules."""
    for value in inst.attrs.values():
        if value.__class__ in _PLAIN_ATTRIBUTE_TYPES:
            continue
        if isinstance(value, HloComputation):
            out.append(value)
        elif isinstance(value, list) and value and \
                all(isinstance(v, HloComputation) for v in value):
            out.extend(value)


def _remove_identity(items: list, target) -> None:
    """Removes the first `target` (by identity) from a list of
    instructions, if there. `list.remove`: instructions compare by identity
    (no `__eq__`), and the scan runs in C (an operand read by hundreds of
    users is scanned for each of them that goes)."""
    try:
        items.remove(target)
    except ValueError:
        pass


def _split_number(name: str) -> tuple[str, int] | None:
    """`add.7` -> ("add", 7); None without a numeric suffix."""
    root, dot, digits = name.rpartition(".")
    if dot and root and digits.isdigit() and digits.isascii():
        return root, int(digits)
    return None


# `_split_number` per name, for `NameUniquer` (bounded: cleared when full).
_SPLITS: dict[str, tuple[str, int] | None] = {}
_MAX_SPLITS = 1 << 18


class NameUniquer:
    """XLA's NameUniquer: `add` stays `add` while free, then `add.1`,
    `add.2`...; a name with a numeric suffix (`add.7`) keeps it when free and
    takes the next free number of its root otherwise."""

    def __init__(self, used: Iterable[str] = ()):
        # `reserve` of each name, with the set made at once: a module's table
        # is built from all its instruction names after every pass that
        # links the module.
        self.used: set[str] = set(used)
        next_id: dict[str, int] = {}
        self.next_id = next_id
        get = next_id.get
        # `_split_number` of each name, remembered: the passes build the
        # table again from the same tens of thousands of names.
        splits = _SPLITS
        if len(splits) > _MAX_SPLITS:
            splits.clear()
        for name in self.used:
            split = splits.get(name, False)
            if split is False:
                split = splits[name] = _split_number(name)
            if split is not None:
                root, k = split
                if k >= get(root, 0):
                    next_id[root] = k + 1

    def reserve(self, name: str) -> None:
        self.used.add(name)
        m = _split_number(name)
        if m:
            root, k = m
            if k >= self.next_id.get(root, 0):
                self.next_id[root] = k + 1

    def release(self, name: str) -> None:
        self.used.discard(name)

    def get(self, base: str) -> str:
        base = base or "instruction"
        used = self.used
        next_id = self.next_id
        # `reserve` and `_split_number` inlined: a name per instruction the
        # fusion passes build (most of them clones, whose names are taken).
        root, dot, digits = base.rpartition(".")
        if base not in used:
            used.add(base)
            if dot and root and digits.isdigit() and digits.isascii():
                k = int(digits)
                if k >= next_id.get(root, 0):
                    next_id[root] = k + 1
            return base
        if not (dot and root and digits.isdigit() and digits.isascii()):
            root = base
        k = next_id.get(root, 1)
        if k < 1:
            k = 1
        name = f"{root}.{k}"
        while name in used:
            k += 1
            name = f"{root}.{k}"
        used.add(name)
        next_id[root] = k + 1
        return name


class HloComputation:
    """A computation: its instructions (a valid order, see the module
    docstring), root, whether it is the ENTRY, and (once linked) its
    module."""

    def __init__(self, name: str, instructions: list[HloInstruction] | None = None,
                 root: HloInstruction | None = None, is_entry: bool = False,
                 location: Location | None = None,
                 module: "HloModule | None" = None):
        self.name = name
        self._instructions: list[HloInstruction] = \
            instructions if instructions is not None else []
        self.root = root
        self.is_entry = is_entry
        self.location = location
        self.module = module
        self._unordered = False
        self._control_edges: bool | None = None   # unknown until asked

    # How many leading instructions `_restore_order` may keep as they are
    # without looking (see `_keep_order_before`); any other change resets it.
    _valid_prefix = 0

    def __repr__(self) -> str:
        return f"HloComputation({self.name!r}, {len(self._instructions)} instructions)"

    def release(self) -> None:
        """Unlinks a computation no longer used: its instructions point at
        each other (operands, users) and at it, so once dropped it would
        wait for the cyclic garbage collector; unlinked, reference counting
        frees it. What was read of it stays readable as detached
        instructions."""
        for inst in self._instructions:
            inst.operands = []
            inst.users = []
            inst.parent = None
        self._instructions = []
        self.root = None
        self.module = None

    def link_instructions(self) -> "HloComputation":
        """Makes this computation the parent of its instructions and
        rebuilds their `users` from the operands (each user listed once, in
        instruction order): for a computation made of detached instructions
        (`HloComputation(name, instructions, root).link_instructions()`).
        Returns self."""
        for inst in self._instructions:
            inst.parent = self
            inst.users = []
        for inst in self._instructions:
            for op in dict.fromkeys(inst.operands):
                op.users.append(inst)
        return self

    # ------------------------------------------------------------- reading

    @property
    def instructions(self) -> list[HloInstruction]:
        if self._unordered:
            self._restore_order()
        return self._instructions

    @instructions.setter
    def instructions(self, value: list[HloInstruction]) -> None:
        self._instructions = value
        self._unordered = True
        self._valid_prefix = 0
        self._control_edges = None

    @property
    def parameters(self) -> list[HloInstruction]:
        params = [i for i in self._instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda p: p.parameter_number)

    def parameter(self, number: int) -> HloInstruction:
        for inst in self._instructions:
            if inst.opcode == "parameter" and inst.parameter_number == number:
                return inst
        raise KeyError(number)

    def post_order(self) -> list[HloInstruction]:
        """Operands before users, reachable from the root first, then the
        rest in textual order."""
        starts = self.instructions if self.root is None else [self.root, *self.instructions]
        return post_order(starts, attrgetter("operands"))

    def find(self, name: str) -> HloInstruction:
        for inst in self._instructions:
            if inst.name == name:
                return inst
        raise KeyError(name)

    def name_map(self) -> dict[str, HloInstruction]:
        return {i.name: i for i in self._instructions}

    def __iter__(self) -> Iterator[HloInstruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self._instructions)

    def __contains__(self, inst: object) -> bool:
        return isinstance(inst, HloInstruction) and inst.parent is self

    def has_control_edges(self) -> bool:
        """Whether any instruction here has control predecessors (cached;
        set again by the mutation API when one is added)."""
        if self._control_edges is None:
            self._control_edges = any(CONTROL_PREDECESSORS in i.attrs
                                      for i in self._instructions)
        return self._control_edges

    # -------------------------------------------------------------- order

    def _mark_unordered(self) -> None:
        self._unordered = True
        self._valid_prefix = 0

    def _keep_order_before(self, count: int) -> None:
        """Tells the next `_restore_order` (of a computation marked
        unordered) that the first `count` instructions of the current list
        are in order and read nothing after them: a rewrite that changed
        only what comes later says so, and the sort starts there (its result
        is the same: such instructions are placed as they come). Any other
        change before the sort (a mark, a removal) drops this."""
        if self._unordered:
            self._valid_prefix = count

    def _restore_order(self) -> None:
        """Stable topological sort: each instruction after its operands and
        control predecessors, the current order kept where it is valid."""
        insts = self._instructions
        self._unordered = False
        start, self._valid_prefix = self._valid_prefix, 0
        if start >= len(insts):
            # All of it was declared in order (`_keep_order_before`): the
            # sort would copy the list as it is.
            return
        control = self.has_control_edges()
        # The passes mark a computation after every rewrite, but most of it
        # is still in order (a fusion pass moves a handful of instructions
        # per rewrite). The result is `post_order(insts, self._order_deps(),
        # refuse_cycle)`, without its per-instruction stack work where it
        # is not needed: an instruction whose dependencies are all placed
        # is placed as it comes; from any other, the same depth-first walk
        # runs over what is not placed yet (the walk skips what is done).
        # Without control edges the dependencies are the operands (one
        # outside the computation is never placed: the walk drops it).
        # `placed` holds the instructions themselves: they hash and compare
        # by identity (no `__eq__`), so the set needs no id per lookup.
        placed: set[HloInstruction] = set(insts[:start])
        order: list[HloInstruction] = insts[:start]
        deps = self._order_deps() if control else None

        def unplaced_deps(inst: HloInstruction) -> list[HloInstruction]:
            return [d for d in deps(inst) if d not in placed]

        def refuse_cycle(inst: HloInstruction) -> None:
            raise inst.error("cycle in the instruction graph")

        ready, place, keep = placed.issuperset, placed.add, order.append
        for inst in insts[start:] if start else insts:
            if inst in placed:
                continue
            if ready(deps(inst) if control else inst.operands):
                place(inst)
                keep(inst)
                continue
            if deps is None:
                deps = self._order_deps()
            walked = post_order([inst], unplaced_deps, refuse_cycle)
            placed.update(walked)
            order.extend(walked)
        self._instructions = order

    def _order_deps(self) -> Callable[[HloInstruction], list[HloInstruction]]:
        """What an instruction waits for in `_restore_order`: its operands
        and control predecessors in this computation."""
        insts = self._instructions
        members = set(insts)   # by identity: instructions have no `__eq__`
        if self.has_control_edges():
            by_name = {i.name: i for i in insts}

            def deps(inst: HloInstruction) -> list[HloInstruction]:
                preds = [by_name[n] for n in inst.attrs.get(CONTROL_PREDECESSORS) or ()
                         if n in by_name]
                return [d for d in (*inst.operands, *preds) if d in members]
        else:
            def deps(inst: HloInstruction) -> list[HloInstruction]:
                return [d for d in inst.operands if d in members]
        return deps

    # ----------------------------------------------------------- mutation

    def unique_name(self, base: str) -> str:
        if self.module is not None:
            return self.module.unique_name(base)
        taken = {i.name for i in self._instructions}
        if base not in taken:
            return base
        m = _split_number(base)
        root = m[0] if m else base
        k = 1
        while f"{root}.{k}" in taken:
            k += 1
        return f"{root}.{k}"

    def add_instruction(self, inst: HloInstruction, name: str | None = None,
                        keep_name: bool = False) -> HloInstruction:
        """Adds a detached instruction (its operands already here): links
        it as a user of its operands and gives it a unique name (its own
        name or `name` as the base; `keep_name` when the caller guarantees
        it is free). Returns it."""
        if inst.parent is not None:
            raise inst.error(f"already in computation '{inst.parent.name}'")
        operands = inst.operands
        for op in operands:
            if op.parent is not self:
                raise inst.error(f"operand '{op.name}' is not in computation "
                                 f"'{self.name}'")
        module = self.module
        if not keep_name:
            base = name or inst.name
            if module is not None:
                # `module.unique_name`, without its two calls.
                names = module._names
                if names is None:
                    names = module._instruction_names()
                inst.name = names.get(base)
            else:
                inst.name = self.unique_name(base)
        elif module is not None:
            module.reserve_name(inst.name)
        inst.parent = self
        inst.users = []
        # inst is new: no operand lists it yet.
        if len(operands) == 1:
            operands[0].users.append(inst)
        elif operands:
            linked: set[int] = set()
            for op in operands:
                if id(op) not in linked:
                    linked.add(id(op))
                    op.users.append(inst)
        self._instructions.append(inst)
        if inst.attrs.get(CONTROL_PREDECESSORS):
            self._unordered = True
            self._valid_prefix = 0
            self._control_edges = True
        return inst

    def add(self, opcode: str, shape: Shape,
            operands: Iterable[HloInstruction] = (), name: str | None = None,
            **attrs: Any) -> HloInstruction:
        """Creates and adds an instruction in one step."""
        return self.add_instruction(
            HloInstruction.create(opcode, shape, operands, name, **attrs))

    def set_root(self, inst: HloInstruction) -> None:
        if inst.parent is not self:
            raise inst.error(f"cannot be the root of '{self.name}': it is not "
                             "in that computation")
        self.root = inst

    def remove_instruction(self, inst: HloInstruction) -> None:
        """Removes an instruction without users that is not the root. Its
        control successors inherit its control predecessors."""
        self.remove_instructions([inst])

    def remove_instructions(self, doomed: Iterable[HloInstruction]) -> None:
        doomed = list(doomed)
        if not doomed:
            return
        self._valid_prefix = 0
        if len(doomed) == 1 and not self.has_control_edges():
            self._remove_one(doomed[0])
            return
        ids = {id(i) for i in doomed}
        for inst in doomed:
            if inst.parent is not self:
                raise inst.error(f"is not in computation '{self.name}'")
            if inst is self.root:
                raise inst.error("cannot remove the root")
            live_users = [u for u in inst.users if id(u) not in ids]
            if live_users:
                raise inst.error(f"cannot remove it: used by "
                                 f"'{live_users[0].name}'")
        # Control dependencies: successors inherit the predecessors.
        names = {i.name for i in doomed}
        if self.has_control_edges():
            by_name = self.name_map()
            for inst in self._instructions:
                preds = inst.attrs.get(CONTROL_PREDECESSORS)
                if not preds or id(inst) in ids or not any(n in names for n in preds):
                    continue
                new: list[str] = []
                pending = list(preds)
                seen: set[str] = set()
                while pending:
                    n = pending.pop(0)
                    if n in seen:
                        continue
                    seen.add(n)
                    if n in names:
                        pending.extend(by_name[n].attrs.get(CONTROL_PREDECESSORS) or ())
                    elif n in by_name:
                        new.append(n)
                if new:
                    inst.attrs[CONTROL_PREDECESSORS] = tuple(new)
                else:
                    inst.attrs.pop(CONTROL_PREDECESSORS, None)
        for inst in doomed:
            for op in inst.operands:
                if id(op) not in ids:
                    _remove_identity(op.users, inst)
        if len(doomed) <= 4:
            for inst in doomed:
                self._delete(inst)
        else:
            self._instructions = [i for i in self._instructions if id(i) not in ids]
        for inst in doomed:
            inst.parent = None
            if self.module is not None:
                self.module.release_name(inst.name)

    def _remove_one(self, inst: HloInstruction) -> None:
        """`remove_instructions([inst])` in a computation without control
        edges (the fusion passes remove thousands, one at a time)."""
        if inst.parent is not self:
            raise inst.error(f"is not in computation '{self.name}'")
        if inst is self.root:
            raise inst.error("cannot remove the root")
        for u in inst.users:
            if u is not inst:
                raise inst.error(f"cannot remove it: used by '{u.name}'")
        for op in inst.operands:
            if op is not inst:
                _remove_identity(op.users, inst)
        self._delete(inst)
        inst.parent = None
        if self.module is not None:
            self.module.release_name(inst.name)

    # Where `_delete` looks first: each instruction's index in the list
    # (`_hint_list`, its id) when `_hints` was built, that list's length
    # then, and the indices (sorted) of the hinted instructions deleted
    # from it since.
    _hints: dict[int, int] | None = None
    _hint_list: int | None = None
    _hint_length = 0
    _hint_deleted: list[int] = ()  # type: ignore[assignment]  (a list once built)
    _hint_scans = 0   # removals from `_hint_list` by a scan, before the hints

    def _delete(self, inst: HloInstruction) -> None:
        """Deletes `inst` from `_instructions` (as `list.remove`, by
        identity). A fusion pass removes thousands of instructions from a
        computation of thousands, one at a time: a scan of the list each
        would make that quadratic. When the list has only lost instructions
        and gained some at its end since the hints were built (what the
        mutation API does between two sorts), an instruction with a hint is
        that many places before it as hinted instructions before it went,
        and one without is after every hinted one; each position is checked
        before the deletion, and any other change of the list (seen then)
        makes the hints start over."""
        insts = self._instructions
        if self._hint_list != id(insts):
            # A list seen for the first time (the passes replace a fusion
            # body's list with each producer they fuse in, a sort replaces
            # it): the hints, as long to build as a dozen scans, pay only
            # for a list that loses many.
            self._hints, self._hint_list, self._hint_scans = None, id(insts), 0
        hints, deleted = self._hints, self._hint_deleted
        if hints is None and (len(insts) <= 64 or self._hint_scans < 16):
            self._hint_scans += 1
            insts.remove(inst)
            return
        if hints is None or len(deleted) > 512 or \
                len(insts) - (self._hint_length - len(deleted)) > 512:
            # (also when 512 instructions came after the hinted ones: each
            # of those is found by a scan of them all)
            hints = self._hints = dict(zip(map(id, insts), range(len(insts))))
            deleted = self._hint_deleted = []
            self._hint_length = len(insts)
        h = hints.get(id(inst))
        if h is not None:
            k = bisect_left(deleted, h)
            position = h - k
            if position < len(insts) and insts[position] is inst:
                del insts[position]
                deleted.insert(k, h)
                return
        else:
            start = self._hint_length - len(deleted)
            try:
                position = insts.index(inst, start if start > 0 else 0)
            except ValueError:
                position = -1
            if position >= 0:
                del insts[position]   # after every hinted one: they stay
                return
        self._hints, self._hint_scans = None, 0
        insts.remove(inst)

    def remove_dead(self, keep: Callable[[HloInstruction], bool] | None = None) -> int:
        """Removes every instruction that the root does not need and that
        `keep(inst)` does not protect (parameters are always kept), in
        instruction order. Returns how many were removed."""
        if self._all_used():
            return 0
        insts = self._instructions
        stack = [self.root] if self.root is not None else []
        if keep is None:
            stack += [i for i in insts if i.opcode == "parameter"]
        else:
            stack += [i for i in insts if i.opcode == "parameter" or keep(i)]
        # Liveness only: a set and a stack over the operands (the passes
        # call this after every computation they change; the walk's order
        # is never used).
        live: set[int] = set()
        add = live.add
        pop = stack.pop
        extend = stack.extend
        while stack:
            inst = pop()
            key = id(inst)
            if key not in live:
                add(key)
                extend(inst.operands)
        dead = [i for i in insts if id(i) not in live]
        self.remove_instructions(dead)
        return len(dead)

    def _all_used(self) -> bool:
        """Whether every instruction but the root has a user here: then
        each one's chain of users ends at the root (the graph is acyclic),
        so nothing is dead, and the walk from the root can be skipped (DCE
        runs over every fusion body, nearly all of them without dead code)."""
        root = self.root
        if root is None:
            return False
        for inst in self._instructions:
            users = inst.users
            if not users:
                if inst is not root:
                    return False
                continue
            for user in users:
                if user.parent is not self:
                    return False
        return True

    def rename(self, inst: HloInstruction, new_name: str) -> None:
        """Renames `inst`, updating the control predecessors that name it."""
        old = inst.name
        if old == new_name:
            return
        if self.has_control_edges():
            for other in self._instructions:
                preds = other.attrs.get(CONTROL_PREDECESSORS)
                if preds and old in preds:
                    other.attrs[CONTROL_PREDECESSORS] = tuple(
                        new_name if n == old else n for n in preds)
        if self.module is not None:
            self.module.release_name(old)
            self.module.reserve_name(new_name)
        inst.name = new_name

    def clone(self, name: str | None = None, module: "HloModule | None" = None,
              computation_map: dict | None = None,
              rename: bool = True) -> "HloComputation":
        """A copy of this computation (called computations shared unless
        `computation_map` maps them). With `module`, the copy's name and
        instruction names are made unique in it (the copy is not added)."""
        module = module if module is not None else self.module
        computation_map = computation_map or {}
        if module is not None:
            new_name = module.unique_computation_name(name or self.name + ".clone")
        else:
            new_name = name or self.name + ".clone"
        new = HloComputation(new_name, [], None, False, self.location)
        mapping: dict[int, HloInstruction] = {}
        renamed: dict[str, str] = {}
        plain = _PLAIN_ATTRIBUTE_TYPES
        for inst in self.instructions:
            copy = inst.clone_with([mapping[id(o)] for o in inst.operands])
            for key, value in list(copy.attrs.items()):
                if value.__class__ in plain:
                    continue   # (no computation: most attributes)
                if isinstance(value, HloComputation) and id(value) in computation_map:
                    copy.attrs[key] = computation_map[id(value)]
                elif isinstance(value, list) and value and \
                        all(isinstance(v, HloComputation) for v in value):
                    copy.attrs[key] = [computation_map.get(id(v), v) for v in value]
            if rename and module is not None:
                copy.name = module.unique_name(inst.name)
            renamed[inst.name] = copy.name
            mapping[id(inst)] = copy
            copy.parent = new
            new._instructions.append(copy)
            # The copy is new: it is among an operand's users only when an
            # earlier operand was that one (no scan of the users, which a
            # value read by thousands would make quadratic).
            operands = copy.operands
            if len(operands) == 1:
                operands[0].users.append(copy)
            elif operands:
                linked: set[int] = set()
                for op in operands:
                    if id(op) not in linked:
                        linked.add(id(op))
                        op.users.append(copy)
        for copy in new._instructions:
            preds = copy.attrs.get(CONTROL_PREDECESSORS)
            if preds:
                copy.attrs[CONTROL_PREDECESSORS] = tuple(renamed.get(n, n) for n in preds)
        new.root = mapping[id(self.root)] if self.root is not None else None
        return new


class HloModule:
    """A module: computations (callees before callers when printed), the
    header's attributes (raw text) and the metadata sections."""

    def __init__(self, name: str, computations: list[HloComputation] | None = None,
                 attrs: dict[str, Any] | None = None, source: str = "<hlo>",
                 sections: dict[str, list[str]] | None = None):
        self.name = name
        self.computations: list[HloComputation] = \
            computations if computations is not None else []
        self.attrs: dict[str, Any] = attrs if attrs is not None else {}
        self.source = source
        # `FileNames`, `FunctionNames`, `FileLocations`, `StackFrames`: the raw
        # entries (`1 "x.py"`, `2 {file_name_id=1 ...}`) of each printed section.
        self.sections: dict[str, list[str]] = sections if sections is not None else {}
        self._names: NameUniquer | None = None
        self._computation_names: NameUniquer | None = None

    def __repr__(self) -> str:
        return f"HloModule({self.name!r}, {len(self.computations)} computations)"

    def release(self, keep: "HloModule | None" = None) -> None:
        """`HloComputation.release` for every computation but those `keep`
        has too, the module left empty: for a module no longer used (a
        compile's input once the program has its own module, which may
        share computations with it), which reference counting then frees."""
        kept = {id(c) for c in keep.computations} if keep is not None else set()
        for comp in self.computations:
            if id(comp) not in kept:
                comp.release()
        self.computations = []
        self._names = None

    @property
    def entry(self) -> HloComputation:
        for comp in self.computations:
            if comp.is_entry:
                return comp
        # XLA's emitter tests write a bare fusion computation: the last one.
        return self.computations[-1]

    @property
    def replica_count(self) -> int:
        """The header's `replica_count=` (XLA's default, 1, without one)."""
        return self._header_count("replica_count")

    @property
    def num_partitions(self) -> int:
        """The header's `num_partitions=` (XLA's default, 1, without one)."""
        return self._header_count("num_partitions")

    def _header_count(self, key: str) -> int:
        raw = self.attrs.get(key)
        if raw is None:
            return 1
        try:
            value = int(str(raw).strip())
        except ValueError:
            value = 0
        if value < 1:
            raise HloError(f"module '{self.name}': {key}={raw} is not a positive integer")
        return value

    def computation(self, name: str) -> HloComputation:
        for comp in self.computations:
            if comp.name == name:
                return comp
        raise KeyError(name)

    # --------------------------------------------------------------- names

    def link(self) -> "HloModule":
        """Points every computation at this module (the parser appends them
        without it) and resets the name tables."""
        for comp in self.computations:
            comp.module = self
        self._names = None
        self._computation_names = None
        return self

    def _instruction_names(self) -> NameUniquer:
        if self._names is None:
            self.link()
            names: set[str] = set()
            take = names.update
            for c in self.computations:
                take(map(_NAME, c._instructions))
            self._names = NameUniquer(names)
        return self._names

    def unique_name(self, base: str) -> str:
        """An instruction name not used anywhere in the module (reserved)."""
        return self._instruction_names().get(base)

    def reserve_name(self, name: str) -> None:
        self._instruction_names().reserve(name)

    def release_name(self, name: str) -> None:
        if self._names is not None:
            self._names.release(name)

    def unique_computation_name(self, base: str) -> str:
        if self._computation_names is None:
            self._computation_names = NameUniquer(c.name for c in self.computations)
        return self._computation_names.get(base)

    # -------------------------------------------------------- computations

    def add_computation(self, comp: HloComputation,
                        before: HloComputation | None = None,
                        unique: bool = True,
                        names_taken: bool = False) -> HloComputation:
        """Adds `comp` (before `before`, else before the ENTRY, else at the
        end), making its name unique and reserving its instruction names.
        `names_taken`: the caller made every instruction name of `comp`
        with this module's `unique_name` since the name table was last
        built (`comp.module` was this module while they were added), which
        reserved them already: not done again."""
        if unique:
            comp.name = self.unique_computation_name(comp.name)
        elif self._computation_names is not None:
            self._computation_names.reserve(comp.name)
        comp.module = self
        if not names_taken:
            names = self._instruction_names()
            for inst in comp._instructions:
                names.reserve(inst.name)
        anchor = before
        if anchor is None:
            anchor = next((c for c in self.computations if c.is_entry), None)
        # One search of the list, not two (the fusion passes add a
        # computation per fusion they build, to modules of thousands).
        # The anchor is most often the last computation (the ENTRY, printed
        # last, where the passes fuse): found without a scan of the list (a
        # computation is listed once).
        computations = self.computations
        if anchor is None:
            position = None
        elif computations and computations[-1] is anchor:
            position = len(computations) - 1
        else:
            try:
                position = computations.index(anchor)
            except ValueError:
                position = None
        if position is not None:
            self.computations.insert(position, comp)
        else:
            self.computations.append(comp)
        return comp

    def remove_computation(self, comp: HloComputation) -> None:
        callers = [i for c in self.computations if c is not comp
                   for i in c._instructions if comp in i.called_computations]
        if callers:
            raise callers[0].error(f"still calls computation '{comp.name}'")
        self.computations = [c for c in self.computations if c is not comp]
        if self._computation_names is not None:
            self._computation_names.release(comp.name)
        if self._names is not None:
            for inst in comp._instructions:
                self._names.release(inst.name)
        comp.module = None

    def reachable_computations(self) -> list[HloComputation]:
        """Computations reachable from the ENTRY, callees first."""
        return post_order([self.entry], callees)

    def remove_unreachable_computations(self) -> int:
        """Drops computations no longer called from the ENTRY (released:
        `HloComputation.release`)."""
        if not any(c.is_entry for c in self.computations):
            return 0
        keep = {id(c) for c in self.reachable_computations()}
        dropped = [c for c in self.computations if id(c) not in keep]
        if dropped:
            self.computations = [c for c in self.computations if id(c) in keep]
            for comp in dropped:
                comp.release()
            self._names = None
            self._computation_names = None
        return len(dropped)

    def clone(self, name: str | None = None) -> "HloModule":
        """A deep copy: same names, new objects."""
        new = HloModule(name or self.name, [], dict(self.attrs), self.source,
                        {k: list(v) for k, v in self.sections.items()})
        mapping: dict[int, HloComputation] = {}
        # Callees first so every reference can be mapped.
        order = callees_first(self.computations)
        for comp in order:
            copy = comp.clone(comp.name, None, mapping, rename=False)
            copy.name = comp.name
            copy.is_entry = comp.is_entry
            mapping[id(comp)] = copy
        new.computations = [mapping[id(c)] for c in self.computations]
        return new.link()


def callees(comp: HloComputation) -> list[HloComputation]:
    """The computations `comp`'s instructions call, in instruction order
    (repeats included)."""
    out: list[HloComputation] = []
    for inst in comp.instructions:
        add_called_computations(inst, out)
    return out


def callees_first(computations: list[HloComputation]) -> list[HloComputation]:
    """`computations`, each after the ones among them it calls, otherwise
    in the given order (the order XLA prints a module's computations in)."""
    members = {id(c) for c in computations}
    return post_order(computations,
                      lambda comp: [c for c in callees(comp) if id(c) in members])
