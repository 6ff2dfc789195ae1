"""ShardingAnnotationRemover: the custom calls that only annotate a value
with its sharding, removed before any other pass looks at the module (as
XLA's import of Shardy's round-trip attributes turns them back into
attributes, then its single-device pipeline forgets them).

On one device every annotation is the value itself:

  Sharding, SPMDFullToShardShape, SPMDShardToFullShape   (GSPMD's)
  xla.sdy.FuncResultSharding   the sharding of a result of the function
  xla.sdy.GlobalToLocalShape / xla.sdy.LocalToGlobalShape
                               the edges of a shard_map body (the local
                               shape is the global one on one device)
  xla.sdy.PropagationBarrier   a stop for sharding propagation
  xla.sdy.ShardingGroup        ties its operand's sharding to a group; it
                               has no value (an empty tuple) and no users
  LayoutConstraint             jax's with_sharding_constraint with a layout:
                               a copy into that layout
  annotate_device_placement    the memory a value should live in (jax's
                               compute_on and memory kinds): kept for
                               HostOffloadMarker (hlo.passes.host_offloading,
                               after call inlining: an offload's two moves
                               may sit in two calls), which makes an offload
                               two moves and every other placement the
                               value itself

Any other `xla.sdy.*` target is an annotation too when it looks like one:
its result is its operand (one operand, same shape), or its operands as a
tuple, or it has no value that anything reads. One that changes a shape
(a sharding over several devices) is refused, naming the instruction.
"""

from __future__ import annotations

from ..module import HloInstruction, HloModule
from ..shape import Shape, same_shape
from .host_offloading import is_placement
from .pipeline import HloPass

__all__ = ["ShardingAnnotationRemover", "ANNOTATION_TARGETS", "is_sharding_annotation"]

ANNOTATION_TARGETS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
    "xla.sdy.FuncResultSharding", "xla.sdy.GlobalToLocalShape",
    "xla.sdy.LocalToGlobalShape", "xla.sdy.PropagationBarrier",
    "xla.sdy.ShardingGroup", "LayoutConstraint", "annotate_device_placement",
})
_SHARDY_PREFIX = "xla.sdy."


def is_sharding_annotation(inst: HloInstruction) -> bool:
    """A custom call of a sharding annotation target (known, or Shardy's)."""
    if inst.opcode != "custom-call":
        return False
    target = inst.attrs.get("custom_call_target")
    return isinstance(target, str) and (target in ANNOTATION_TARGETS or
                                        target.startswith(_SHARDY_PREFIX))


def _empty_tuple(shape: Shape) -> bool:
    return shape.is_tuple and not shape.tuple_shapes


class ShardingAnnotationRemover(HloPass):
    name = "sharding-annotation-remover"

    def run(self, module: HloModule) -> bool:
        changed = False
        for comp in module.computations:
            for inst in list(comp.instructions):
                if inst.parent is comp and is_sharding_annotation(inst) and \
                        not is_placement(inst):
                    self._remove(inst)
                    changed = True
        return changed

    @staticmethod
    def _remove(inst: HloInstruction) -> None:
        comp = inst.parent
        target = inst.attrs["custom_call_target"]
        operands = inst.operands
        if len(operands) == 1 and same_shape(operands[0].shape, inst.shape):
            inst.replace_with(operands[0])
            return
        if len(operands) == 1 and same_shape(operands[0].shape, inst.shape, layouts=False):
            # The annotation also asked for another layout: a copy makes it.
            copy = comp.add_instruction(HloInstruction.create(
                "copy", inst.shape, [operands[0]], name=inst.name))
            inst.replace_with(copy)
            return
        if inst.shape.is_tuple and len(operands) > 1 and \
                len(inst.shape.tuple_shapes) == len(operands) and \
                all(same_shape(o.shape, s)
                    for o, s in zip(operands, inst.shape.tuple_shapes)):
            joined = comp.add_instruction(HloInstruction.create(
                "tuple", inst.shape, list(operands), name=inst.name))
            inst.replace_with(joined)
            return
        if _empty_tuple(inst.shape):
            # A group annotation (no value): whatever read it reads an
            # empty tuple of its own.
            if inst.users or comp.root is inst:
                empty = comp.add_instruction(HloInstruction.create(
                    "tuple", inst.shape, [], name=inst.name))
                inst.replace_with(empty)
            else:
                comp.remove_instruction(inst)
            return
        shapes = ", ".join(str(o.shape) for o in operands) or "no operands"
        raise inst.unsupported(
            f"sharding annotation '{target}' turns {shapes} into {inst.shape}: a "
            "sharding over more than one device, which xla_gpu (one device) cannot "
            "compile")
