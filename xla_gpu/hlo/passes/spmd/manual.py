"""shard_map regions: the code between GlobalToLocalShape /
SPMDFullToShardShape and LocalToGlobalShape / SPMDShardToFullShape is per
device already. Its inputs are cut to the region's shardings, its
instructions copied as they are, its outputs read back as chunks of the
stated shardings."""

from __future__ import annotations

from ...graph import post_order
from ...module import HloInstruction
from ...shape import Shape
from .propagation import CONSTRAINT_TARGETS, MANUAL_ENTRY_TARGETS
from .sharding import HloSharding, ShardingError, parse_sdy_shardings, sharding_of

__all__ = ["ManualRegions", "annotation_target", "all_replicated"]


def annotation_target(inst: HloInstruction) -> str | None:
    """A custom call's target (None for other instructions)."""
    if inst.opcode != "custom-call":
        return None
    target = inst.attrs.get("custom_call_target")
    return target if isinstance(target, str) else None


def _body_computations(call: HloInstruction) -> list:
    """The computations a shard_map body's call runs, nested ones too."""
    def callees(comp):
        return [c for inner in comp.instructions for c in inner.called_computations]
    return post_order(list(call.called_computations), callees)


def all_replicated(s: HloSharding) -> bool:
    if s.is_tuple:
        return all(all_replicated(e) for e in s.elements)
    return s.is_replicated


class ManualRegions:
    """A base of the partitioner (uses its emitter and values)."""

    def emit_manual(self, inst, s):
        target = annotation_target(inst)
        if target in MANUAL_ENTRY_TARGETS:
            return self.emit_manual_entry(inst)
        if target == "InspectSharding":   # per-device code: the value is manual
            self.note_inspection(inst, HloSharding.manual())
            return self.values[id(inst.operands[0])][0], s
        operands = []
        for o in inst.operands:
            new, os_ = self.values[id(o)]
            if not self.manual.get(id(o)) and not all_replicated(os_):
                new = self.reshard(new, os_, self.replicated_like(o), o.shape)
            operands.append(new)
        copy = inst.clone_with(operands)
        copy.attrs.pop("sharding", None)
        if inst.opcode == "parameter":
            raise inst.unsupported("a parameter inside a manual region")
        if inst.opcode == "call":
            self.note_cutting_constraints(inst)
            self.take_inspections(inst)
        return self.comp.add_instruction(copy, name=inst.name), s

    def note_cutting_constraints(self, call: HloInstruction) -> None:
        """A shard_map body over some mesh axes may constrain its values
        along the others (`with_sharding_constraint` inside it). The body
        stays per-device code here, whole along those axes: correct, but
        not cut as asked, so it is noted."""
        for comp in _body_computations(call):
            for inner in comp.instructions:
                if annotation_target(inner) not in CONSTRAINT_TARGETS:
                    continue
                stated = sharding_of(inner)
                if stated is not None and stated.is_tiled and not inner.shape.is_tuple and \
                        any(c > 1 for c in stated.counts(inner.shape.rank)):
                    self.body_constraints_dropped.append(inner.name)
                    self.notes.append(f"'{inner.name}': sharding {stated} inside the "
                                      f"shard_map body '{comp.name}' is not kept: the body "
                                      "is computed whole along the mesh axes it leaves "
                                      "automatic")

    def note_inspection(self, inst: HloInstruction, sharding: HloSharding) -> None:
        """An InspectSharding call's jaxlib callback (its backend_config)
        and the sharding its value has, for the caller to report."""
        config = inst.attrs.get("backend_config")
        self.inspected.append((config if isinstance(config, str) else "", sharding))

    def take_inspections(self, call: HloInstruction) -> None:
        """jax's inspect_array_sharding in a shard_map body sees a manual
        value: noted (`inspected`) and taken out of the body, as XLA's
        partitioner does, whose InspectSharding calls never reach a run."""
        for comp in _body_computations(call):
            for inner in list(comp.instructions):
                if annotation_target(inner) != "InspectSharding" or len(inner.operands) != 1:
                    continue
                self.note_inspection(inner, HloSharding.manual())
                operand = inner.operands[0]
                if inner is comp.root:
                    comp.set_root(operand)
                inner.replace_all_uses_with(operand)
                comp.remove_instruction(inner)

    def emit_manual_entry(self, inst):
        target = annotation_target(inst)
        if target == "SPMDFullToShardShape":
            operand = inst.operands[0]
            want = self.shardings[id(operand)]
            new = self.value(operand, want)
            if new.shape.dims != inst.shape.dims:
                raise inst.error(f"the local shape {inst.shape} is not the chunk "
                                 f"{new.shape} of sharding {want}")
            return new, HloSharding.manual()
        raw = (inst.attrs.get("frontend_attributes") or {}).get("xla.sdy.in_shardings")
        if not isinstance(raw, str):
            raise ShardingError(f"instruction '{inst.name}': {target} without "
                                "xla.sdy.in_shardings")
        wants = parse_sdy_shardings(raw, self.module.attrs, f"instruction '{inst.name}'")
        if len(wants) != len(inst.operands):
            raise ShardingError(f"instruction '{inst.name}': {len(wants)} in_shardings for "
                                f"{len(inst.operands)} operands")
        locals_ = [self.value(o, w) for o, w in zip(inst.operands, wants)]
        shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else (inst.shape,)
        for new, shape in zip(locals_, shapes):
            if new.shape.dims != shape.dims:
                raise inst.error(f"the local shape {shape} is not the chunk {new.shape} of "
                                 "its in_sharding")
        if inst.shape.is_tuple:
            out = self.add("tuple", Shape(tuple_shapes=tuple(x.shape for x in locals_)), locals_)
            return out, HloSharding.tuple_of([HloSharding.manual()] * len(locals_))
        return locals_[0], HloSharding.manual()

    def emit_manual_exit(self, inst, s: HloSharding):
        """The local values read back as chunks of the stated shardings."""
        operands = [self.values[id(o)][0] for o in inst.operands]
        if annotation_target(inst) == "SPMDShardToFullShape":
            full = sharding_of(inst, self.n)
            full = full if full is not None else HloSharding.replicated()
            if full.kind == "tiled" and not full.is_even_for(inst.shape.dims):
                raise inst.unsupported(f"sharding {full} does not divide {inst.shape} evenly")
            return operands[0], full
        outs = list(s.elements) if s.is_tuple else [s]
        shapes = inst.shape.tuple_shapes if inst.shape.is_tuple else (inst.shape,)
        for o, sub, element in zip(operands, shapes, outs):
            if o.shape.dims != element.local_dims(sub.dims):
                raise inst.error(f"local value {o.shape} is not a chunk of {sub} under {element}")
        if inst.shape.is_tuple:
            out = self.add("tuple", Shape(tuple_shapes=tuple(o.shape for o in operands)),
                           operands)
            return out, HloSharding.tuple_of(outs)
        return operands[0], outs[0]


