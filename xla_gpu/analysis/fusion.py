"""Fusion analysis: which computation to emit, its roots, the hero of each
root and the emitter XLA would choose for it.

`select_fusion` accepts what `xla_gpu.compile` accepts: a module whose ENTRY
holds fusion instructions (pick one by name), a bare fusion computation as
XLA's emitter tests write it (the last computation), or an ENTRY of plain ops
(pre-optimization HLO as JAX prints it, `call`s inlined) taken as one fusion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..hlo import HloComputation, HloError, HloInstruction, HloModule
from ..hlo.shape import bit_width
from ..hlo.verifier import verify_computation
from ..hlo.fusions import ELEMENTWISE_OPCODES, fusion_computation

__all__ = ["Fusion", "select_fusion", "analyze", "find_hero", "EMITTER_KINDS",
           "normalized_transpose", "is_tiled_transpose"]

EMITTER_KINDS = ("loop", "transpose", "reduction", "scatter", "concatenate",
                 "in_place_dynamic_update_slice", "input_slices", "sort", "topk",
                 "convolution")

# XLA's limit above which a concatenate is left to the loop emitter.
_MAX_CONCAT_OPERANDS = 64
# XLA's thresholds for a tiled (shared-memory) transpose: both minor
# dimensions (the operand's and the result's) at least 16, or both at least
# 8 with a product of at least 64 * 128. A transpose that keeps the minor
# dimension ("102") is tiled when that dimension is at most 8 bytes wide, so
# that it rides along whole in the tile.
_MIN_TILED_TRANSPOSE_DIM = 16
_MIN_TILED_TRANSPOSE_DIM_2 = 8
_MIN_TILED_TRANSPOSE_TOTAL = 64 * 128
_MAX_BYTES_IN_MINOR_DIM = 8


@dataclass
class Fusion:
    name: str                          # the kernel's name
    computation: HloComputation
    roots: list[HloInstruction]        # one per output, in output order
    heroes: list[HloInstruction]
    kind: str                          # the emitter XLA would choose
    module: HloModule | None = None
    notes: list[str] = field(default_factory=list)
    # Emitter-specific settings of one kernel of an op XLA runs as several
    # kernels (a sort's bitonic stages: `emitters.sort.SortKernelConfig`);
    # None lets the emitter decide.
    config: Any = None

    @property
    def parameters(self) -> list[HloInstruction]:
        return self.computation.parameters

    @property
    def output_shapes(self):
        """One array shape per output (a variadic reduce root gives several)."""
        return [leaf for r in self.roots for leaf in r.shape.leaves()]


def select_fusion(module: HloModule, fusion: str | None = None) -> Fusion:
    name, comp = fusion_computation(module, fusion)
    return analyze(comp, name, module)


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
            live = list(dict.fromkeys(o for o in cur.operands if not _is_trivial_operand(o)))
            if len(live) == 1 and len(live[0].users) == 1 and live[0].opcode != "parameter":
                cur = live[0]
                continue
        return root


def normalized_transpose(inst: HloInstruction) -> tuple[list[int], list[int]]:
    """Operand dims and permutation with size-1 dims dropped and dims that
    stay adjacent merged (XLA's normalized transpose shape): result dim k
    of the normalized transpose is normalized operand dim perm[k]."""
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


def is_tiled_transpose(inst: HloInstruction) -> bool:
    """Whether XLA emits `inst` with the tiled (shared-memory) transpose
    emitter (GetDescriptionForTiledTransposeEmitter)."""
    if inst.opcode != "transpose":
        return False
    dims, perm = normalized_transpose(inst)
    n = len(perm)
    if n < 2:
        return False
    out = [dims[p] for p in perm]
    if perm[-1] == n - 1:
        # 102: the minor dimension stays minor; tiled when it is narrow.
        byte_width = max(bit_width(inst.shape.element_type), 8) // 8
        minor_bytes = byte_width * dims[-1]
        return minor_bytes <= _MAX_BYTES_IN_MINOR_DIM and \
            minor_bytes * min(dims[-2], out[-2]) >= _MIN_TILED_TRANSPOSE_DIM
    minor_in, minor_out = dims[-1], out[-1]
    if minor_in >= _MIN_TILED_TRANSPOSE_DIM and minor_out >= _MIN_TILED_TRANSPOSE_DIM:
        return True
    return minor_in >= _MIN_TILED_TRANSPOSE_DIM_2 and \
        minor_out >= _MIN_TILED_TRANSPOSE_DIM_2 and \
        minor_in * minor_out >= _MIN_TILED_TRANSPOSE_TOTAL


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
            raise root.unsupported("nested tuple outputs are not supported")
    elif root.shape.is_tuple and (root.opcode in ("reduce", "sort", "topk") or (
            root.opcode == "custom-call" and
            root.attrs.get("custom_call_target") == "TopK")):
        roots = [root]   # several outputs of one op (variadic reduce, sort, top-k)
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
    elif len(roots) == 1 and heroes[0].opcode == "concatenate" and \
            len(heroes[0].operands) <= _MAX_CONCAT_OPERANDS:
        kind = "concatenate"
    else:
        kind = "loop"
    return Fusion(name, comp, roots, heroes, kind, module)


def reaches(inst: HloInstruction, target: HloInstruction) -> bool:
    """Whether `target` is `inst` or one of its transitive operands."""
    stack, seen = [inst], set()
    while stack:
        i = stack.pop()
        if i is target:
            return True
        if id(i) in seen:
            continue
        seen.add(id(i))
        stack.extend(i.operands)
    return False


def epilogue_chain_ok(root: HloInstruction, hero: HloInstruction, accept) -> bool:
    """Whether every instruction from `hero` up to `root` passes
    `accept(inst)` and reads the hero's chain through one instruction
    (several operands may be that instruction: x * x)."""
    cur = root
    while cur is not hero:
        if not accept(cur):
            return False
        chain = list(dict.fromkeys(o for o in cur.operands if reaches(o, hero)))
        if len(chain) != 1:
            return False
        cur = chain[0]
    return True
