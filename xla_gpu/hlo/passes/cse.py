"""HloCSE: instructions computing the same value (same opcode, shape,
operands, attributes and literal) are merged into the first one. Side
effects, parameters and instructions with control dependencies are left
alone; called computations compare by identity (plus structural equality
for fusion bodies, so that duplicated fusions merge, as XLA's CSE does after
multi-output fusion)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..module import CONTROL_PREDECESSORS, HloComputation, HloInstruction, HloModule
from ..printer import computation_to_text, shape_to_text
from .pipeline import HloPass
from .util import has_side_effect, program_computations

__all__ = ["HloCSE"]


def _freeze(value: Any, bodies: "_BodyKeys") -> Any:
    if isinstance(value, HloComputation):
        key = bodies.get(id(value))
        return ("computation", key if key is not None else id(value))
    if isinstance(value, dict):
        return tuple((k, _freeze(v, bodies)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, bodies) for v in value)
    return value


# Attribute values `_freeze` returns as they are, by their exact type.
_PLAIN = frozenset({str, int, float, bool, type(None)})

# Never merged: parameters, and instructions whose results differ per
# execution or that carry control flow.
_NEVER_MERGED = frozenset({"parameter", "while", "conditional", "custom-call", "rng", "infeed"})


class _BodyKeys:
    """Fusion bodies compare by their printed text, without names
    (`_body_key`): the text of a body, by the body's id, made when a key
    first asks for it. Most runs never ask (two fusions must read the same
    operands first), so most bodies are never printed."""

    def __init__(self, callees: dict[int, HloComputation]):
        self.callees = callees
        self.keys: dict[int, str] = {}
        # The texts of the computations the bodies call (reducers), printed
        # once per run: thousands of reduces share a handful.
        self.called: dict[int, str] = {}

    def get(self, key: int) -> str | None:
        text = self.keys.get(key)
        if text is None:
            comp = self.callees.get(key)
            if comp is None:
                return None
            text = self.keys[key] = _body_key(comp, self.called)
        return text

    def lazy_is_safe(self, program: list[HloComputation],
                     comps: list[HloComputation]) -> bool:
        """Whether every text made late is the one the module had when the
        run began. The run rewrites `comps` in order: the program
        computations (callees first), then the bodies of their fusions. A
        text is asked for by the key of an instruction of the computation
        being rewritten, for a body it calls, or by a body's text, for the
        computations its instructions call. So a late text is stale only
        when a program computation is itself a fusion body, or an
        instruction of a body calls one of `comps`: then every body is
        printed before the run changes anything."""
        if any(id(c) in self.callees for c in program):
            return False
        rewritten = {id(c) for c in comps}
        for comp in self.callees.values():
            for inst in comp._instructions:
                for value in inst.attrs.values():
                    if _refers_to(value, rewritten):
                        return False
        return True


def _refers_to(value: Any, ids: set[int]) -> bool:
    """Whether `value` (an attribute) is, or holds, a computation of `ids`."""
    if isinstance(value, (str, int, float)) or value is None:
        return False
    if isinstance(value, HloComputation):
        return id(value) in ids
    if isinstance(value, dict):
        return any(_refers_to(v, ids) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_refers_to(v, ids) for v in value)
    return False


class HloCSE(HloPass):
    name = "cse"

    def run(self, module: HloModule) -> bool:
        changed = False
        callees: dict[int, HloComputation] = {}
        for comp in module.computations:
            for inst in comp.instructions:
                if inst.opcode == "fusion":
                    callee = inst.attrs.get("calls")
                    if isinstance(callee, HloComputation):
                        callees.setdefault(id(callee), callee)
        program = program_computations(module)
        # Fusion bodies too: duplicated producers may meet in one body.
        comps = list(dict.fromkeys(program + [
            b for c in program for i in c.instructions if i.opcode == "fusion"
            for b in [i.attrs.get("calls")] if isinstance(b, HloComputation)]))
        bodies = _BodyKeys(callees)
        if not bodies.lazy_is_safe(program, comps):
            for key in callees:
                bodies.get(key)
        for comp in comps:
            changed |= self._run_on(comp, bodies)
        return changed

    def _run_on(self, comp: HloComputation, bodies: "_BodyKeys") -> bool:
        # Two instructions can only merge when they have the same opcode and
        # read the same operands: the full key (shape text, attributes,
        # literal) is made only once a second instruction of such a pair
        # comes, for both of them. `firsts` maps (opcode, operand ids) to the
        # one instruction seen with them, or, from the second on, to a dict
        # full key -> the first instruction with that key (what a single
        # dict of full keys would hold; a full key never changes once its
        # instruction is visited: its operands come before it, and only the
        # instruction visited is ever replaced).
        firsts: dict[tuple, Any] = {}
        changed = False
        for inst in comp.instructions:
            if inst.parent is not comp:
                continue
            opcode = inst.opcode
            if opcode in _NEVER_MERGED or has_side_effect(inst) or \
                    inst.attrs.get(CONTROL_PREDECESSORS):
                continue
            operands = inst.operands
            pair = (opcode, tuple([id(o) for o in operands]) if operands else ())
            entry = firsts.get(pair)
            if entry is None:
                firsts[pair] = inst
                continue
            if entry.__class__ is not dict:
                first_key = self._key(entry, bodies)
                entry = firsts[pair] = {} if first_key is None else {first_key: entry}
            key = self._key(inst, bodies)
            if key is None:
                continue
            first = entry.get(key)
            if first is None:
                entry[key] = inst
                continue
            inst.replace_all_uses_with(first)
            changed = True
        if changed:
            comp.remove_dead(has_side_effect)
        return changed

    @staticmethod
    def _key(inst: HloInstruction, bodies: "_BodyKeys") -> tuple | None:
        literal = None
        if inst.opcode == "constant":
            if inst.literal is None or inst.shape.is_tuple:
                return None
            arr = np.asarray(inst.literal)
            if arr.size > 4096:
                return None
            literal = arr.tobytes()
        # `_freeze` of the attributes without metadata; plain values are
        # their own frozen form.
        attrs = tuple([(k, v if v.__class__ in _PLAIN else _freeze(v, bodies))
                       for k, v in inst.attrs.items() if k != "metadata"])
        return (inst.opcode, shape_to_text(inst.shape),
                tuple([id(o) for o in inst.operands]), attrs, literal)


def _body_key(comp: HloComputation, called: dict[int, str] | None = None) -> str:
    """The computation's text with instruction names replaced by their
    position, so that equal bodies compare equal. `called`: texts of called
    computations already printed (by id; the module does not change while
    the keys are made)."""
    texts = called if called is not None else {}

    def text_of(c: HloComputation) -> str:
        t = texts.get(id(c))
        if t is None:
            t = texts[id(c)] = computation_to_text(c, metadata=False)
        return t

    insts = comp.instructions
    root = comp.root
    index = {id(i): str(k) for k, i in enumerate(insts)}
    lines = []
    for k, inst in enumerate(insts):
        ops = ",".join([index[id(o)] for o in inst.operands])
        attrs = sorted([(a, repr(v)) for a, v in inst.attrs.items()
                        if a != "metadata" and not hasattr(v, "instructions")])
        extra = ""
        opcode = inst.opcode
        if opcode == "constant" and inst.literal is not None and not inst.shape.is_tuple:
            extra = np.asarray(inst.literal).tobytes().hex()
        elif opcode == "parameter":
            extra = str(inst.parameter_number)
        called = inst.called_computations
        callees = ",".join([text_of(c) for c in called]) if called else ""
        lines.append(f"{k}:{shape_to_text(inst.shape)}:{opcode}({ops}):"
                     f"{attrs}:{extra}:{callees}:{inst is root}")
    return "\n".join(lines)
