"""The HLO graph: modules, computations and instructions, as the parser
builds them. numpy only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from ..errors import HloError, HloParseError, Location
from .shape import Shape

__all__ = ["HloError", "HloParseError", "HloInstruction", "HloComputation",
           "HloModule", "Location"]


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
        out = []
        for value in self.attrs.values():
            if isinstance(value, HloComputation):
                out.append(value)
            elif isinstance(value, list) and value and \
                    all(isinstance(v, HloComputation) for v in value):
                out.extend(value)
        return out

    def error(self, message: str) -> HloError:
        where = f"line {self.location.line}: " if self.location else ""
        return HloError(f"{where}instruction '{self.name}' ({self.opcode}): {message}")

    def __str__(self) -> str:
        ops = ", ".join(f"%{o.name}" for o in self.operands)
        return f"%{self.name} = {self.shape} {self.opcode}({ops})"

    __repr__ = __str__


@dataclass(eq=False)
class HloComputation:
    name: str
    instructions: list[HloInstruction] = field(default_factory=list)
    root: HloInstruction | None = None
    is_entry: bool = False
    location: Location | None = None

    @property
    def parameters(self) -> list[HloInstruction]:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda p: p.parameter_number)

    def post_order(self) -> list[HloInstruction]:
        """Operands before users, reachable from the root first, then the
        rest in textual order."""
        seen: set[int] = set()
        order: list[HloInstruction] = []

        def visit(inst: HloInstruction) -> None:
            stack = [(inst, False)]
            while stack:
                node, expanded = stack.pop()
                if expanded:
                    order.append(node)
                    continue
                if id(node) in seen:
                    continue
                seen.add(id(node))
                stack.append((node, True))
                for op in reversed(node.operands):
                    if id(op) not in seen:
                        stack.append((op, False))

        if self.root is not None:
            visit(self.root)
        for inst in self.instructions:
            visit(inst)
        return order

    def find(self, name: str) -> HloInstruction:
        for inst in self.instructions:
            if inst.name == name:
                return inst
        raise KeyError(name)

    def __iter__(self) -> Iterator[HloInstruction]:
        return iter(self.instructions)


@dataclass(eq=False)
class HloModule:
    name: str
    computations: list[HloComputation] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    source: str = "<hlo>"
    # `FileNames`, `FunctionNames`, `FileLocations`, `StackFrames`: the raw
    # entries (`1 "x.py"`, `2 {file_name_id=1 ...}`) of each printed section.
    sections: dict[str, list[str]] = field(default_factory=dict)

    @property
    def entry(self) -> HloComputation:
        for comp in self.computations:
            if comp.is_entry:
                return comp
        # XLA's emitter tests write a bare fusion computation: the last one.
        return self.computations[-1]

    def computation(self, name: str) -> HloComputation:
        for comp in self.computations:
            if comp.name == name:
                return comp
        raise KeyError(name)
