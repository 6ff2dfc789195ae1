"""Fusion analysis: which computation to emit, its roots, the hero of each
root and the emitter that emits it: the one XLA would choose for the heroes
when that emitter can take the fusion (`analysis.transpose`,
`analysis.reduction` say when the tiled transpose and reduction emitters
cannot), the loop emitter with a note saying why otherwise. That decision
(`choose_emitter`) is the only one: the HLO fusion passes ask it whether an
emitter takes a fusion they consider, and whether an output is written in
place follows `xla_gpu.hlo.in_place`, the rule buffer sharing follows.

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
from ..hlo.in_place import in_place_update
from ..errors import ArgumentError
from .concatenate import concatenate_refusal, find_concatenate_hero
from .device import DEFAULT_DEVICE, DeviceDescription
from .epilogue import epilogue_chain_ok, reaches
from .gemm import dot_hero, gemm_refusal
from .reduction import reduction_refusal
from .transpose import is_tiled_transpose, normalized_transpose, transpose_refusal

__all__ = ["Fusion", "select_fusion", "analyze", "find_hero", "EMITTER_KINDS",
           "EmitterChoice", "choose_emitter", "fusion_roots", "gives_several_outputs",
           "scatter_refusal", "normalized_transpose", "is_tiled_transpose",
           "epilogue_chain_ok", "reaches", "is_trivial_operand"]

EMITTER_KINDS = ("loop", "transpose", "reduction", "scatter", "concatenate",
                 "in_place_dynamic_update_slice", "input_slices", "sort", "topk",
                 "convolution", "gemm")

# What the loop emitter does instead of the emitter the heroes call for,
# when that emitter cannot take the fusion (the note on the kernel).
_INSTEAD = {
    "transpose": "the tiled transpose emitter refused it; the loop emitter "
                 "reads the input uncoalesced",
    "reduction": "the reduction emitter refused it; the loop emitter "
                 "reduces sequentially in each thread",
    "concatenate": "the concatenate emitter refused it; the loop emitter "
                   "selects the operand per element",
    "gemm": "the GEMM emitter refused it; the loop emitter computes each "
            "output element's dot product on its own",
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


# The ops `find_hero` stops at, and those it walks through besides
# elementwise ones (a trial-free view of its walk reads both).
HERO_OPCODES = ("reduce", "transpose", "concatenate", "scatter")
CARRYING_OPCODES = ("bitcast", "reshape", "copy")


def is_trivial_operand(inst: HloInstruction) -> bool:
    """What `find_hero` passes over as an operand: a constant, or a
    broadcast of one or of a scalar."""
    if inst.opcode == "constant":
        return True
    return inst.opcode == "broadcast" and is_trivial_operand(inst.operands[0]) \
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
        if cur.opcode in HERO_OPCODES:
            return cur
        if cur.opcode in CARRYING_OPCODES or cur.opcode in ELEMENTWISE_OPCODES:
            live = list(dict.fromkeys(o for o in cur.operands if not is_trivial_operand(o)))
            # Ops in between carry one value to one user; the hero itself may
            # have several epilogues (a reduce written as log and as abs).
            if len(live) == 1 and live[0].opcode != "parameter" and \
                    (len(live[0].users) == 1 or live[0].opcode in HERO_OPCODES):
                cur = live[0]
                continue
        return root


def _is_in_place_dus(roots: list[HloInstruction]) -> bool:
    """Every root writes a dynamic-update-slice in place over a fusion
    parameter (`hlo.in_place`: the rule buffer sharing follows too, so the
    operand's buffer is the output's whenever the schedule allows), all
    with updates of one shape (one thread per update element)."""
    updates = [in_place_update(r) for r in roots]
    if any(u is None or u.opcode != "dynamic-update-slice" for u in updates):
        return False
    return len({tuple(u.operands[1].shape.dims) for u in updates}) == 1


def scatter_refusal(roots: list[HloInstruction]) -> str | None:
    """Why the scatter emitter cannot take a fusion whose heroes include a
    scatter (None when it can): it writes the scatter's operands in place,
    so the scatter must be the only root, each operand a fusion parameter
    nothing else reads. No other emitter computes a scatter."""
    if len(roots) != 1 or roots[0].opcode != "scatter":
        return "the scatter is not the fusion's only root (an epilogue or other outputs)"
    scatter = roots[0]
    for k, operand in enumerate(scatter.operands[:(len(scatter.operands) - 1) // 2]):
        if operand.opcode != "parameter" or len(operand.users) != 1:
            return f"scatter operand {k} is not a fusion parameter only the scatter reads"
    return None


def _is_input_slices(roots: list[HloInstruction]) -> bool:
    if not all(r.opcode == "slice" for r in roots):
        return False
    if any(s != 1 for r in roots for _, _, s in r.attrs["slice"]):
        return False
    return len({tuple(r.operands[0].shape.dims) for r in roots}) == 1 and len(roots) > 1


def analyze(comp: HloComputation, name: str, module: HloModule | None = None,
            gemm_tiling=None) -> Fusion:
    """The fusion analysis of `comp`. A dot with its epilogue gets the GEMM
    emitter only in a GEMM fusion (XLA's kCustom `__triton_gemm`): its
    tiling is `gemm_tiling` (an `analysis.gemm.GemmTiling`) or the one of
    the fusion instruction of `module` that calls `comp`; other fusions
    with a dot (XLA's loop fusions, bare computations) keep the loop
    emitter, which computes each element's dot product, as XLA's does."""
    verify_computation(comp)
    called = {id(c): c for inst in comp.instructions for c in inst.called_computations}
    for computation in called.values():   # a reducer shared by many reduces once
        verify_computation(computation)
    choice = choose_emitter(fusion_roots(comp))
    roots, heroes, kind = choice.roots, choice.heroes, choice.kind
    if kind == "gemm":
        tiling = gemm_tiling if gemm_tiling is not None else _gemm_tiling_in(module, comp)
        if tiling is None:
            note = "a dot outside a GEMM fusion (not kCustom __triton_gemm): the loop " \
                   "emitter computes each output element's dot product"
            return Fusion(name, comp, roots, heroes, "loop", module, [note], hero_kind="gemm")
        return Fusion(name, comp, roots, heroes, kind, module, config=tiling)
    if kind == choice.hero_kind:
        # A scatter the scatter emitter refuses has no other emitter: the
        # emitter reports it.
        return Fusion(name, comp, roots, heroes, kind, module)
    note = f"{choice.hero_kind} fusion emitted by the loop emitter: " \
           f"{_INSTEAD[choice.hero_kind]} ({choice.refusal})"
    return Fusion(name, comp, roots, heroes, kind, module, [note], hero_kind=choice.hero_kind)


def _gemm_tiling_in(module: HloModule | None, comp: HloComputation):
    """The tiling of the kCustom GEMM fusion of `module` that calls `comp`
    (None when no GEMM fusion calls it): what a GEMM fusion compiled on its
    own (`xla_gpu.compile(..., fusion=NAME)`) keeps."""
    from .gemm import triton_gemm_tiling
    if module is None:
        return None
    for computation in module.computations:
        for inst in computation.instructions:
            if inst.opcode == "fusion" and inst.attrs.get("calls") is comp:
                return triton_gemm_tiling(inst)
    return None


def fusion_roots(comp: HloComputation) -> list[HloInstruction]:
    """The roots of fusion computation `comp`, one per output in output
    order (nested root tuples flattened), an op with several results (a
    variadic reduce or scatter, a sort, a top-k) one root."""
    root = comp.root
    if root is None:
        raise HloError(f"computation '{comp.name}' has no root")
    if root.opcode == "tuple":
        return _flatten_tuple_root(root)
    if root.shape.is_tuple and not gives_several_outputs(root):
        raise root.error("a tuple-shaped root must be a tuple instruction")
    return [root]


def gives_several_outputs(root: HloInstruction) -> bool:
    """Whether `root`, a fusion's root, is one op whose tuple-shaped result
    is several of the fusion's outputs."""
    return root.opcode in ("reduce", "reduce-window", "sort", "topk", "scatter") or (
        root.opcode == "custom-call" and root.attrs.get("custom_call_target") == "TopK")


@dataclass
class EmitterChoice:
    """The emitter decision for a fusion's roots, made in one place for the
    fusion analysis (`analyze`) and the HLO fusion passes (which ask it
    whether the emitter XLA would choose takes a fusion they consider)."""
    roots: list[HloInstruction]
    heroes: list[HloInstruction]
    # The emitter XLA would choose for the heroes.
    hero_kind: str
    # Why that emitter cannot take the fusion; None when it can.
    refusal: str | None = None

    @property
    def kind(self) -> str:
        """The emitter that emits the fusion: `hero_kind`, or the loop
        emitter when the tiled transpose, reduction or concatenate emitter
        refused it (a refused scatter has no other emitter)."""
        return "loop" if self.refusal is not None and self.hero_kind in _INSTEAD \
            else self.hero_kind


def choose_emitter(roots: list[HloInstruction]) -> EmitterChoice:
    """The emitter of a fusion with these roots (`fusion_roots`), and why
    the one its heroes call for cannot take it, if it cannot. MLIR-free and
    without verifying the computation: the fusion passes ask it about trial
    bodies."""
    heroes = [find_hero(r) for r in roots]
    if len(roots) == 1 and roots[0].opcode in ("sort", "topk", "convolution"):
        kind = "topk" if roots[0].opcode == "topk" else roots[0].opcode
    elif len(roots) == 1 and roots[0].opcode == "custom-call" and \
            roots[0].attrs.get("custom_call_target") == "TopK":
        kind = "topk"
    elif any(h.opcode == "scatter" for h in heroes):
        kind = "scatter"
    elif not any(h.opcode in HERO_OPCODES for h in heroes) and \
            (dot := dot_hero(roots)) is not None:
        # A dot with its epilogue (elementwise ops, reshapes) up to the
        # outputs: the tiled GEMM emitter (XLA's Triton GEMM fusions).
        kind, heroes = "gemm", [dot] * len(roots)
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
    return EmitterChoice(roots, heroes, kind, _refusal(kind, roots, heroes))


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
    if kind == "scatter":
        return scatter_refusal(roots)
    if kind == "gemm":
        return gemm_refusal(roots, heroes[0])
    return None
