"""Which computation of a module is the fusion to compile, with `call`s
inlined. numpy only: the GPU check script selects the same computation on a
machine without the compiler."""

from __future__ import annotations

from .module import HloComputation, HloError, HloInstruction, HloModule
from .opcodes import ELEMENTWISE_OPCODES
from .printer import computation_to_text

__all__ = ["ELEMENTWISE_OPCODES", "fusion_computation", "fusion_text", "inline_calls"]


def fusion_text(comp: HloComputation) -> str:
    """A fusion computation as the text of a module holding it alone: what
    a compiled kernel stores, and `fusion_computation` reads back."""
    return "HloModule fusion\n\n" + computation_to_text(comp)


def fusion_computation(module: HloModule, fusion: str | None = None) -> tuple[str, HloComputation]:
    """The fusion to compile and its kernel name: `fusion` names a fusion
    instruction of the ENTRY (or its computation); the default is the only
    one. A module without ENTRY is a bare fusion computation (the last
    one); an ENTRY of plain ops is taken whole, `call`s inlined."""
    entries = [c for c in module.computations if c.is_entry]
    if not entries:
        comp = module.computations[-1]
        if fusion not in (None, comp.name):
            raise HloError(f"no fusion named '{fusion}': the module has no ENTRY, "
                           f"its fusion computation is '{comp.name}'")
        return comp.name, comp
    entry = entries[0]
    fusions = [i for i in entry.instructions if i.opcode == "fusion"]
    if not fusions:
        if fusion not in (None, entry.name):
            raise HloError(f"no fusion named '{fusion}': ENTRY '{entry.name}' "
                           "holds no fusion instructions")
        return entry.name, inline_calls(entry)
    if fusion is None:
        if len(fusions) > 1:
            names = ", ".join(f.name for f in fusions)
            raise HloError(f"ENTRY '{entry.name}' holds {len(fusions)} fusions "
                           f"({names}): choose one with fusion=NAME")
        chosen = fusions[0]
    else:
        matching = [f for f in fusions if fusion in (f.name, f.attrs["calls"].name)]
        if not matching:
            names = ", ".join(f.name for f in fusions)
            raise HloError(f"no fusion named '{fusion}' in ENTRY '{entry.name}' "
                           f"(it has: {names})")
        chosen = matching[0]
    calls = chosen.attrs.get("calls")
    if not isinstance(calls, HloComputation):
        raise chosen.error("fusion without calls=COMPUTATION")
    return chosen.name, inline_calls(calls)


def inline_calls(comp: HloComputation) -> HloComputation:
    """`comp` with every `call` replaced by the called computation's body and
    get-tuple-element(tuple(...)) forwarded; `comp` itself when it has none."""
    if not any(i.opcode == "call" or (i.opcode == "get-tuple-element" and
                                      i.operands[0].opcode == "tuple")
               for i in comp.instructions):
        return comp
    mapping: dict[int, HloInstruction] = {}
    out: list[HloInstruction] = []
    counter = [0]

    def clone(inst: HloInstruction, operands, prefix="") -> HloInstruction:
        new = HloInstruction(prefix + inst.name, inst.opcode, inst.shape, list(operands),
                             dict(inst.attrs), inst.literal, inst.parameter_number,
                             inst.location)
        out.append(new)
        return new

    def copy_into(source: HloComputation, args, prefix) -> HloInstruction:
        local: dict[int, HloInstruction] = {}
        for inst in source.post_order():
            if inst.opcode == "parameter" and args is not None:
                local[id(inst)] = args[inst.parameter_number]
                continue
            ops = [local[id(o)] for o in inst.operands]
            if inst.opcode == "call":
                counter[0] += 1
                local[id(inst)] = copy_into(inst.attrs["to_apply"], ops,
                                            f"{prefix}{inst.name}.{counter[0]}.")
            elif inst.opcode == "get-tuple-element" and ops[0].opcode == "tuple":
                local[id(inst)] = ops[0].operands[inst.attrs["index"]]
            else:
                local[id(inst)] = clone(inst, ops, prefix)
        return local[id(source.root)]

    root = copy_into(comp, None, "")
    mapping[id(comp.root)] = root
    return HloComputation(comp.name, out, root, comp.is_entry, comp.location).link_instructions()


