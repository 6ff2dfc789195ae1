"""ControlDepConverter: jax.experimental.control_deps states an order
between two values with a side-effecting custom call `control_dep(src,
dst)` that has no result. XLA turns each into a control edge (dst's
producer runs after src's) and drops the call; so does this pass, before
any other looks at the module. An edge that would close a cycle (dst
already needed by src) is refused, naming the call."""

from __future__ import annotations

from ..graph import needs, reachable
from ..module import HloComputation, HloInstruction
from .pipeline import ComputationPass

__all__ = ["ControlDepConverter", "CONTROL_DEP_TARGET", "has_control_dep_calls"]

CONTROL_DEP_TARGET = "control_dep"


def _is_control_dep(inst: HloInstruction) -> bool:
    return inst.opcode == "custom-call" and \
        inst.attrs.get("custom_call_target") == CONTROL_DEP_TARGET


def has_control_dep_calls(module) -> bool:
    return any(_is_control_dep(i) for c in module.computations for i in c.instructions)


def _reaches(start: HloInstruction, goal: HloInstruction) -> bool:
    """Whether `goal` is `start` or among what `start` needs, transitively."""
    return any(inst is goal for inst in reachable([start], needs))


class ControlDepConverter(ComputationPass):
    name = "control-dep-converter"

    def run_on(self, comp: HloComputation) -> bool:
        calls = [i for i in comp.instructions if _is_control_dep(i)]
        for call in calls:
            if len(call.operands) != 2 or call.users:
                raise call.error("control_dep takes two operands (src, dst) and has no "
                                 "value that anything reads")
            src, dst = call.operands
            if _reaches(src, dst):
                raise call.error(f"control_dep from '%{src.name}' to '%{dst.name}' closes a "
                                 f"cycle: '%{src.name}' already needs '%{dst.name}'")
            if comp.root is call:
                raise call.error("control_dep cannot be the root of a computation")
            if dst.opcode not in ("parameter", "constant"):
                dst.add_control_predecessor(src)
            # (what the call was ordered after, its successors now are)
            comp.remove_instruction(call)
        return bool(calls)
