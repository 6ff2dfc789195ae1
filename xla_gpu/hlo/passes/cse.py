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


def _freeze(value: Any, bodies: dict[int, str]) -> Any:
    if isinstance(value, HloComputation):
        key = bodies.get(id(value))
        return ("computation", key if key is not None else id(value))
    if isinstance(value, dict):
        return tuple((k, _freeze(v, bodies)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, bodies) for v in value)
    return value


class HloCSE(HloPass):
    name = "cse"

    def run(self, module: HloModule) -> bool:
        changed = False
        # Fusion bodies compare by their printed text, without names.
        bodies: dict[int, str] = {}
        # The texts of the computations the bodies call (reducers), printed
        # once per run: thousands of reduces share a handful.
        called: dict[int, str] = {}
        for comp in module.computations:
            for inst in comp.instructions:
                if inst.opcode == "fusion":
                    callee = inst.attrs.get("calls")
                    if isinstance(callee, HloComputation) and id(callee) not in bodies:
                        bodies[id(callee)] = _body_key(callee, called)
        comps = program_computations(module)
        # Fusion bodies too: duplicated producers may meet in one body.
        comps += [b for c in comps for i in c.instructions if i.opcode == "fusion"
                  for b in [i.attrs.get("calls")] if isinstance(b, HloComputation)]
        for comp in dict.fromkeys(comps):
            changed |= self._run_on(comp, bodies)
        return changed

    def _run_on(self, comp: HloComputation, bodies: dict[int, str]) -> bool:
        seen: dict[tuple, HloInstruction] = {}
        changed = False
        for inst in comp.instructions:
            if inst.parent is not comp:
                continue
            if inst.opcode == "parameter" or has_side_effect(inst) or \
                    inst.attrs.get(CONTROL_PREDECESSORS) or inst.opcode in (
                        "while", "conditional", "custom-call", "rng", "infeed"):
                continue
            key = self._key(inst, bodies)
            if key is None:
                continue
            first = seen.get(key)
            if first is None:
                seen[key] = inst
                continue
            inst.replace_all_uses_with(first)
            changed = True
        if changed:
            comp.remove_dead(keep=has_side_effect)
        return changed

    @staticmethod
    def _key(inst: HloInstruction, bodies: dict[int, str]) -> tuple | None:
        attrs = {k: v for k, v in inst.attrs.items() if k not in ("metadata",)}
        literal = None
        if inst.opcode == "constant":
            if inst.literal is None or inst.shape.is_tuple:
                return None
            arr = np.asarray(inst.literal)
            if arr.size > 4096:
                return None
            literal = arr.tobytes()
        return (inst.opcode, shape_to_text(inst.shape),
                tuple(id(o) for o in inst.operands), _freeze(attrs, bodies), literal)


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

    index = {i.name: k for k, i in enumerate(comp.instructions)}
    lines = []
    for k, inst in enumerate(comp.instructions):
        ops = ",".join(str(index[o.name]) for o in inst.operands)
        attrs = {a: v for a, v in inst.attrs.items() if a != "metadata"}
        extra = ""
        if inst.opcode == "constant" and inst.literal is not None and not inst.shape.is_tuple:
            extra = np.asarray(inst.literal).tobytes().hex()
        if inst.opcode == "parameter":
            extra = str(inst.parameter_number)
        callees = ",".join(text_of(c) for c in inst.called_computations)
        lines.append(f"{k}:{shape_to_text(inst.shape)}:{inst.opcode}({ops}):"
                     f"{sorted((a, repr(v)) for a, v in attrs.items() if not hasattr(v, 'instructions'))}"
                     f":{extra}:{callees}:{inst is comp.root}")
    return "\n".join(lines)
