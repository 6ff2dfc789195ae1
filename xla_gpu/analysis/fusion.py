"""Fusion analysis: which computation to emit, its roots, the hero of each
root and the emitter that emits it: the one XLA would choose for the heroes
when that emitter can take the fusion (`analysis.transpose`,
`analysis.reduction` say when the tiled transpose and reduction emitters
cannot), the loop emitter with a note saying why otherwise.

`select_fusion` accepts what `xla_gpu.compile` accepts: a module whose ENTRY
holds fusion instructions (pick one by name), a bare fusion computation as
XLA's emitter tests write it (the last computation), or an ENTRY of plain ops
(pre-optimization HLO as JAX prints it, `call`s inlined) taken as one fusion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..hlo import HloComputation, HloError, HloInstruction, HloModule
from ..hlo.verifier import verify_computation
from ..hlo.fusions import ELEMENTWISE_OPCODES, fusion_computation
from ..errors import ArgumentError
from .concatenate import concatenate_refusal, find_concatenate_hero
from .device import DEFAULT_DEVICE, DeviceDescription
from .epilogue import epilogue_chain_ok, reaches
from .reduction import reduction_refusal
from .transpose import is_tiled_transpose, normalized_transpose, transpose_refusal

__all__ = ["Fusion", "select_fusion", "analyze", "find_hero", "EMITTER_KINDS",
           "normalized_transpose", "is_tiled_transpose", "epilogue_chain_ok",
           "reaches"]

EMITTER_KINDS = ("loop", "transpose", "reduction", "scatter", "concatenate",
                 "in_place_dynamic_update_slice", "input_slices", "sort", "topk",
                 "convolution")

# What the loop emitter does instead of the emitter the heroes call for,
# when that emitter cannot take the fusion (the note on the kernel).
_INSTEAD = {
    "transpose": "the tiled transpose emitter refused it; the loop emitter "
                 "reads the input uncoalesced",
    "reduction": "the reduction emitter refused it; the loop emitter "
                 "reduces sequentially in each thread",
    "concatenate": "the concatenate emitter refused it; the loop emitter "
                   "selects the operand per element",
}


@dataclass
class Fusion:
    name: str                          # the kernel's name
    computation: HloComputation
    roots: list[HloInstruction]        # one per output, in output order
    heroes: list[HloInstruction]
    kind: str                          # the emitter that emits the fusion
    module: HloModule | None = None
    notes: list[str] = field(default_factory=list)
    # Emitter-specific settings of one kernel of an op XLA runs as several
    # kernels (a sort's bitonic stages: `emitters.sort.SortKernelConfig`);
    # None lets the emitter decide.
    config: Any = None
    # The emitter XLA would choose for the heroes: `kind`, or the emitter
    # that could not take the fusion when `kind` is "loop" instead.
    hero_kind: str = ""
    # The GPU whose description the launch configuration follows (unroll
    # factors, reduction vector sizes; see analysis.device).
    device: DeviceDescription = DEFAULT_DEVICE
    # Launch grids in x only, of any size: the cpu target's grid emulation
    # runs 1-D grids (a loop grid over CUDA's 2^31 - 1 blocks in x would
    # otherwise go 2-D, as XLA's do on the GPU).
    one_dimensional_grid: bool = False

    def __post_init__(self) -> None:
        self.hero_kind = self.hero_kind or self.kind

    @property
    def parameters(self) -> list[HloInstruction]:
        return self.computation.parameters

    @property
    def output_shapes(self):
        """One array shape per output (a variadic reduce root gives several)."""
        return [leaf for r in self.roots for leaf in r.shape.leaves()]


def select_fusion(module: HloModule, fusion: str | None = None,
                  device: DeviceDescription | None = None) -> Fusion:
    """The analysis of fusion `fusion` of `module` (default: the only one),
    its launch configuration chosen for `device` (default: the H200)."""
    name, comp = fusion_computation(module, fusion)
    result = analyze(comp, name, module)
    if device is not None:
        if not isinstance(device, DeviceDescription):
            raise ArgumentError(f"device must be an xla_gpu.analysis.device.DeviceDescription, "
                                f"got {type(device).__name__}")
        result.device = device
    return result


def _is_trivial_operand(inst: HloInstruction) -> bool:
    if inst.opcode == "constant":
        return True
    return inst.opcode == "broadcast" and _is_trivial_operand(inst.operands[0]) \
        or (inst.opcode == "broadcast" and inst.operands[0].shape.rank == 0)


def find_hero(root: HloInstruction) -> HloInstruction:
    """Walks up from `root` through ops that only carry one value along
    (elementwise ops whose other operands are constants, bitcasts,
    reshapes) to the op that decides the emitter; `root` if there is none.
    A root that takes one output of a variadic reduce has the reduce as its
    hero."""
    if root.opcode == "get-tuple-element" and root.operands[0].opcode == "reduce":
        return root.operands[0]
    cur = root
    while True:
        if cur.opcode in _HERO_OPCODES:
            return cur
        if cur.opcode in ("bitcast", "reshape", "copy") or cur.opcode in ELEMENTWISE_OPCODES:
            live = list(dict.fromkeys(o for o in cur.operands if not _is_trivial_operand(o)))
            # Ops in between carry one value to one user; the hero itself may
            # have several epilogues (a reduce written as log and as abs).
            if len(live) == 1 and live[0].opcode != "parameter" and \
                    (len(live[0].users) == 1 or live[0].opcode in _HERO_OPCODES):
                cur = live[0]
                continue
        return root


_HERO_OPCODES = ("reduce", "transpose", "concatenate", "scatter")


def _through_bitcasts(inst: HloInstruction) -> HloInstruction:
    """`inst` below its bitcasts between row-major shapes (a reshape of the
    same bytes: kernels hold arrays in row-major order)."""
    while inst.opcode == "bitcast" and inst.shape.is_row_major and \
            inst.operands[0].shape.is_row_major:
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
    called = {id(c): c for inst in comp.instructions for c in inst.called_computations}
    for computation in called.values():   # a reducer shared by many reduces once
        verify_computation(computation)
    root = comp.root
    if root is None:
        raise HloError(f"computation '{comp.name}' has no root")
    if root.opcode == "tuple":
        roots = _flatten_tuple_root(root)
    elif root.shape.is_tuple and (root.opcode in ("reduce", "reduce-window", "sort", "topk", "scatter") or (
            root.opcode == "custom-call" and
            root.attrs.get("custom_call_target") == "TopK")):
        roots = [root]   # several outputs of one op (variadic reduce or scatter, sort, top-k)
    elif root.shape.is_tuple:
        raise root.error("a tuple-shaped root must be a tuple instruction")
    else:
        roots = [root]
    heroes = [find_hero(r) for r in roots]
    if len(roots) == 1 and roots[0].opcode in ("sort", "topk", "convolution"):
        kind = "topk" if roots[0].opcode == "topk" else roots[0].opcode
    elif len(roots) == 1 and roots[0].opcode == "custom-call" and \
            roots[0].attrs.get("custom_call_target") == "TopK":
        kind = "topk"
    elif any(h.opcode == "scatter" for h in heroes):
        kind = "scatter"
    elif _is_input_slices(roots):
        kind = "input_slices"
    elif _is_in_place_dus(roots):
        kind = "in_place_dynamic_update_slice"
    elif any(h.opcode == "reduce" for h in heroes):
        kind = "reduction"
    elif any(is_tiled_transpose(h) for h in heroes):
        kind = "transpose"
    elif _all_found(concats := [find_concatenate_hero(r) for r in roots]):
        kind, heroes = "concatenate", concats
    else:
        kind = "loop"
    refusal = _refusal(kind, roots, heroes)
    if refusal is None:
        return Fusion(name, comp, roots, heroes, kind, module)
    note = f"{kind} fusion emitted by the loop emitter: {_INSTEAD[kind]} ({refusal})"
    return Fusion(name, comp, roots, heroes, "loop", module, [note], hero_kind=kind)


def _flatten_tuple_root(root: HloInstruction) -> list[HloInstruction]:
    """The roots of a tuple-shaped fusion root, in output order: nested
    tuple instructions are flattened (depth first, as XLA numbers the
    outputs); an op with several results (a variadic reduce or scatter) is
    one root that gives several outputs."""
    roots: list[HloInstruction] = []
    stack = [root]
    while stack:
        inst = stack.pop()
        if inst.opcode == "tuple":
            stack.extend(reversed(inst.operands))
            continue
        if inst.shape.is_tuple and inst.opcode not in _MULTI_RESULT_OPCODES:
            raise inst.unsupported(f"a tuple-shaped {inst.opcode} inside the output "
                                   "tuple is not supported")
        roots.append(inst)
    return roots


# Ops whose tuple-shaped result is several arrays of the fusion's outputs.
_MULTI_RESULT_OPCODES = ("reduce", "scatter", "sort")


def _all_found(heroes: list[HloInstruction | None]) -> bool:
    return all(h is not None for h in heroes)


def _refusal(kind: str, roots: list[HloInstruction],
             heroes: list[HloInstruction]) -> str | None:
    """Why the emitter of `kind` cannot take the fusion (None if it can)."""
    if kind == "transpose":
        return transpose_refusal(roots, heroes)
    if kind == "reduction":
        return reduction_refusal(roots, heroes)
    if kind == "concatenate":
        return concatenate_refusal(roots, heroes)
    return None
