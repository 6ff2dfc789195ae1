"""A canonical fingerprint of a computation: the same for texts that differ
only in instruction names, metadata, layouts spelled by default, comments or
formatting. Keys the compile cache. numpy only."""

from __future__ import annotations

import hashlib

import numpy as np

from .module import HloComputation, HloInstruction
from .shape import per_shape

__all__ = ["fingerprint"]

# Attributes that do not change the computed values.
_IGNORED = {"metadata", "backend_config", "sharding", "frontend_attributes",
            "control-predecessors", "origin", "statistics", "schedule",
            "operand_precision", "result_accuracy"}


def _shape(inst: HloInstruction) -> str:
    return _shape_text(inst.shape)


@per_shape
def _shape_text(shape) -> str:
    return str(shape.with_dims(shape.dims) if not shape.is_tuple
               and shape.is_row_major else shape)


def _value(value, names: dict[int, str], seen: dict[int, str]) -> str:
    if isinstance(value, HloComputation):
        return _digest(value, seen)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v, names, seen) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_value(v, names, seen)}"
                              for k, v in sorted(value.items())) + "}"
    return repr(value)


def _digest(comp: HloComputation, seen: dict[int, str]) -> str:
    if id(comp) in seen:
        return seen[id(comp)]
    names: dict[int, str] = {}
    h = hashlib.sha256()
    for n, inst in enumerate(comp.post_order()):
        names[id(inst)] = f"v{n}"
        parts = [names[id(inst)], inst.opcode, _shape(inst),
                 ",".join(names[id(o)] for o in inst.operands)]
        if inst.parameter_number is not None:
            parts.append(f"param={inst.parameter_number}")
        if inst.literal is not None:
            literal = np.ascontiguousarray(inst.literal)
            parts.append(hashlib.sha256(literal.tobytes()).hexdigest())
        for key in sorted(inst.attrs):
            if key not in _IGNORED:
                parts.append(f"{key}={_value(inst.attrs[key], names, seen)}")
        if inst is comp.root:
            parts.append("ROOT")
        h.update(("|".join(parts) + "\n").encode())
    seen[id(comp)] = h.hexdigest()
    return seen[id(comp)]


def fingerprint(comp: HloComputation) -> str:
    """Hex SHA-256 of the canonical form of `comp` and what it calls."""
    return _digest(comp, {})
