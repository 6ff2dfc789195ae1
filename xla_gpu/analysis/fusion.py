"""Fusion analysis: which computation to emit, its roots, the hero of each
root and the emitter XLA would choose for it.

`select_fusion` accepts what `xla_gpu.compile` accepts: a module whose ENTRY
holds fusion instructions (pick one by name), a bare fusion computation as
XLA's emitter tests write it (the last computation), or an ENTRY of plain ops
(pre-optimization HLO as JAX prints it, `call`s inlined) taken as one fusion.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo import HloComputation, HloError, HloInstruction, HloModule
from ..hlo.verifier import verify_computation
from .indexing import ELEMENTWISE_OPCODES

__all__ = ["Fusion", "select_fusion", "analyze", "find_hero", "EMITTER_KINDS"]

EMITTER_KINDS = ("loop", "transpose", "reduction", "scatter", "concatenate",
                 "in_place_dynamic_update_slice", "input_slices")

# XLA's limit above which a concatenate is left to the loop emitter.
_MAX_CONCAT_OPERANDS = 64
_MIN_TILED_TRANSPOSE_DIM = 16


@dataclass
class Fusion:
    name: str                          # the kernel's name
    computation: HloComputation
    roots: list[HloInstruction]        # one per output, in output order
    heroes: list[HloInstruction]
    kind: str                          # the emitter XLA would choose
    module: HloModule | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def parameters(self) -> list[HloInstruction]:
        return self.computation.parameters

    @property
    def output_shapes(self):
        """One array shape per output (a variadic reduce root gives several)."""
        return [leaf for r in self.roots for leaf in r.shape.leaves()]


def select_fusion(module: HloModule, fusion: str | None = None) -> Fusion:
    entries = [c for c in module.computations if c.is_entry]
    if not entries:
        comp = module.computations[-1]
        if fusion not in (None, comp.name):
            raise HloError(f"no fusion named '{fusion}': the module has no ENTRY, "
                           f"its fusion computation is '{comp.name}'")
        return analyze(comp, comp.name, module)
    entry = entries[0]
    fusions = [i for i in entry.instructions if i.opcode == "fusion"]
    if not fusions:
        if fusion not in (None, entry.name):
            raise HloError(f"no fusion named '{fusion}': ENTRY '{entry.name}' "
                           "holds no fusion instructions")
        return analyze(inline_calls(entry), entry.name, module)
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
    return analyze(inline_calls(calls), chosen.name, module)


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
    new = HloComputation(comp.name, out, root, comp.is_entry, comp.location)
    for inst in out:
        inst.parent = new
        inst.users = []
    for inst in out:
        for op in inst.operands:
            if inst not in op.users:
                op.users.append(inst)
    return new


def _is_trivial_operand(inst: HloInstruction) -> bool:
    if inst.opcode == "constant":
        return True
    return inst.opcode == "broadcast" and _is_trivial_operand(inst.operands[0]) \
        or (inst.opcode == "broadcast" and inst.operands[0].shape.rank == 0)


def find_hero(root: HloInstruction) -> HloInstruction:
    """Walks up from `root` through ops that only carry one value along
    (elementwise ops whose other operands are constants, bitcasts,
    reshapes) to the op that decides the emitter; `root` if there is none."""
    cur = root
    while True:
        if cur.opcode in ("reduce", "transpose", "concatenate", "scatter"):
            return cur
        if cur.opcode in ("bitcast", "reshape", "copy") or cur.opcode in ELEMENTWISE_OPCODES:
            live = [o for o in cur.operands if not _is_trivial_operand(o)]
            if len(live) == 1 and len(live[0].users) == 1 and live[0].opcode != "parameter":
                cur = live[0]
                continue
        return root


def _normalized_transpose(inst: HloInstruction) -> tuple[list[int], list[int]]:
    """Operand dims and permutation with size-1 dims dropped and dims that
    stay adjacent merged."""
    perm = list(inst.attrs["dimensions"])
    in_dims = inst.operands[0].shape.dims
    kept = [p for p in perm if in_dims[p] != 1]
    groups: list[list[int]] = []
    for p in kept:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    dims = []
    for g in order:
        size = 1
        for p in groups[g]:
            size *= in_dims[p]
        dims.append(size)
    new_perm = [order.index(g) for g in range(len(groups))]
    return dims, new_perm


def _is_tiled_transpose(inst: HloInstruction) -> bool:
    if inst.opcode != "transpose":
        return False
    dims, perm = _normalized_transpose(inst)
    if len(perm) < 2 or perm[-1] == len(perm) - 1:
        return False  # the minor dimension stays minor: a loop reads coalesced
    minor_in = dims[-1]
    minor_out = dims[perm[-1]]
    return minor_in >= _MIN_TILED_TRANSPOSE_DIM and minor_out >= _MIN_TILED_TRANSPOSE_DIM


def _through_bitcasts(inst: HloInstruction) -> HloInstruction:
    while inst.opcode in ("bitcast",):
        inst = inst.operands[0]
    return inst


def _is_in_place_dus(roots: list[HloInstruction]) -> bool:
    for root in roots:
        dus = _through_bitcasts(root)
        if dus.opcode != "dynamic-update-slice":
            return False
        buffer = _through_bitcasts(dus.operands[0])
        if buffer.opcode != "parameter":
            return False
        # The buffer may be written in place only when nothing else reads it.
        chain = dus.operands[0]
        while True:
            if len(chain.users) != 1:
                return False
            if chain is buffer:
                break
            chain = chain.operands[0]
    updates = {tuple(_through_bitcasts(r).operands[1].shape.dims) for r in roots}
    return len(updates) == 1


def _is_input_slices(roots: list[HloInstruction]) -> bool:
    if not all(r.opcode == "slice" for r in roots):
        return False
    if any(s != 1 for r in roots for _, _, s in r.attrs["slice"]):
        return False
    return len({tuple(r.operands[0].shape.dims) for r in roots}) == 1 and len(roots) > 1


def analyze(comp: HloComputation, name: str, module: HloModule | None = None) -> Fusion:
    verify_computation(comp)
    for inst in comp.instructions:
        for called in inst.called_computations:
            verify_computation(called)
    root = comp.root
    if root is None:
        raise HloError(f"computation '{comp.name}' has no root")
    if root.opcode == "tuple":
        roots = list(root.operands)
        if any(r.shape.is_tuple for r in roots):
            raise root.error("nested tuple outputs are not supported")
    elif root.shape.is_tuple and root.opcode == "reduce":
        roots = [root]
    elif root.shape.is_tuple:
        raise root.error("a tuple-shaped root must be a tuple instruction")
    else:
        roots = [root]
    heroes = [find_hero(r) for r in roots]
    if any(h.opcode == "scatter" for h in heroes):
        kind = "scatter"
    elif _is_input_slices(roots):
        kind = "input_slices"
    elif _is_in_place_dus(roots):
        kind = "in_place_dynamic_update_slice"
    elif any(h.opcode == "reduce" for h in heroes):
        kind = "reduction"
    elif any(_is_tiled_transpose(h) for h in heroes):
        kind = "transpose"
    elif len(roots) == 1 and heroes[0].opcode == "concatenate" and \
            len(heroes[0].operands) <= _MAX_CONCAT_OPERANDS:
        kind = "concatenate"
    else:
        kind = "loop"
    return Fusion(name, comp, roots, heroes, kind, module)
