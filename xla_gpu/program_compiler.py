"""Whole programs: an HLO module's ENTRY computation compiled into one
executable (kernels + thunk sequence + buffer assignment + optimized HLO).

    fused module ──schedule──► order per computation
                 ──buffer assignment──► slices of allocations
                 ──thunk emission──► kernel / copy / memset / gemm / fft /
                                     while / conditional / custom_call / sort /
                                     topk / convolution thunks
                 ──command buffers──► runs of device thunks, one graph each

What is compiled:
  * a module XLA already fused (after_optimizations dumps of XLA:GPU or
    XLA:CPU: kLoop / kInput fusions, "wrapped_*" ones) runs as fused;
    kCustom fusions whose root is a dot (XLA:CPU's `__ynn_fusion`, XLA:GPU's
    `__triton_gemm`) become a gemm with their other work as kernels;
    `__cublas$gemm` / `__cublas$lt$matmul` custom calls become gemm thunks
    with their epilogues, `TopK` a topk thunk; `fft` instructions become fft
    thunks (cuFFT on cuda), their operand and result relayouted to the
    default layout by copies where the HLO gives another;
  * a module of plain ops (as JAX prints it before optimizations) goes
    through `xla_gpu.hlo.passes.optimize` (XLA's fusion pipeline); when that
    fails, or with `optimize=False`, each op that is not a thunk of its own
    becomes its own small fusion (XLA's "wrapped_<op>").

Every fusion compiles through the single-fusion compiler and its cache
(`xla_gpu.compile(..., fusion=NAME)` builds the same kernel), keyed by the
fusion's canonical fingerprint: a program recompiled, or another program
with the same fusion, reuses the kernel.

Buffers hold arrays in the physical order their layout gives (as XLA); a
kernel whose parameters or outputs have non-row-major layouts is compiled
from a copy of its computation that reads and writes row-major physical
buffers through bitcasts, so that the emitters keep seeing logical arrays.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .errors import CompileError, HloError
from .hlo import HloComputation, HloInstruction, HloModule, Shape
from .hlo.cublas import cublas_gemm
from .hlo.fusions import fusion_text, inline_calls
from .hlo.graph import post_order, reachable
from .hlo.module import CONTROL_PREDECESSORS, callees
from .hlo.shape import default_layout
from .runtime import command_buffer
from .runtime.buffers import BufferSlice
from .runtime.fft import FftConfig, cufft_layout_error
from .runtime.gemm import EPILOGUES, CublasPlanError, GemmConfig, cublas_plan
from .runtime.program import KernelImage, MemoryAnalysis, ProgramExecutable
from .runtime.thunks import (ArrayRef, ConditionalThunk, ConvolutionThunk, CopyThunk,
                             CustomCallThunk, FftThunk, GemmThunk, KernelThunk,
                             MemsetThunk, SortThunk, Thunk, TopKThunk, WhileThunk)

__all__ = ["compile_program", "is_whole_program", "prepare_module", "THUNK_OPCODES"]

# Instructions that are thunks (or no work at all) themselves; every other
# op of a sequential computation runs inside a fusion (a kernel).
THUNK_OPCODES = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "fusion", "dot",
    "custom-call", "while", "conditional", "sort", "topk", "convolution", "copy",
    "fft", "after-all", "add-dependency", "opt-barrier", "optimization-barrier",
    "partition-id", "replica-id",
})
# Forward a value without a thunk (aliases of their operand's buffer).
_FORWARDING = frozenset({"tuple", "get-tuple-element", "bitcast", "opt-barrier",
                         "optimization-barrier", "add-dependency"})
_GEMM_FUSION_KINDS = ("__ynn_fusion", "__triton_gemm", "__triton_nested_gemm_fusion",
                      "__onednn_fusion", "__cublas_fusion")
_LAYOUT_ONLY = frozenset({"bitcast", "transpose", "reshape", "copy"})
# jax's sharding annotations: identities on one device.
_SHARDING_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")
_CUBLAS_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")


def is_whole_program(module: HloModule) -> bool:
    """Whether `xla_gpu.compile` without fusion=NAME compiles `module` as a
    whole program. A module without ENTRY is a bare fusion computation, and
    an ENTRY that is only its parameters passed, in order, to one fusion at
    the root is that fusion (one kernel, as before); anything else is a
    program."""
    entries = [c for c in module.computations if c.is_entry]
    if not entries:
        return False
    entry = entries[0]
    root = entry.root
    params = entry.parameters
    if root is None or root.opcode != "fusion" or _gemm_fusion(root) is not None:
        return True
    if any(i.opcode not in ("parameter", "fusion") for i in entry.instructions):
        return True
    if sum(1 for i in entry.instructions if i.opcode == "fusion") != 1:
        return True
    if any(p.shape.is_tuple for p in params):
        return True
    return [id(o) for o in root.operands] != [id(p) for p in params]


# -- module preparation ------------------------------------------------------------


def _gemm_fusion(inst: HloInstruction) -> HloInstruction | None:
    """The dot of a kCustom fusion that is a GEMM (XLA:CPU's __ynn_fusion,
    XLA:GPU's __triton_gemm...), None otherwise."""
    if inst.opcode != "fusion" or str(inst.attrs.get("kind", "")) != "kCustom":
        return None
    comp = inst.attrs.get("calls")
    if not isinstance(comp, HloComputation):
        return None
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    backend = inst.backend_config()
    # XLA:CPU prints fusion_config, XLA:GPU fusion_backend_config.
    config = backend.get("fusion_config") or backend.get("fusion_backend_config") or {}
    kind = config.get("kind", "") if isinstance(config, dict) else ""
    if len(dots) == 1 and (kind in _GEMM_FUSION_KINDS or kind == "" or "gemm" in kind):
        return dots[0]
    return None


def _is_row_major(shape: Shape) -> bool:
    return shape.is_tuple or shape.is_row_major


class _ModuleBuilder:
    """Rewrites the sequential computations of a module (ENTRY, loop bodies
    and conditions, branches) so that every instruction is a thunk op:
    calls inlined, GEMM fusions opened, reshapes that keep the bytes made
    bitcasts, and every other op wrapped in its own fusion."""

    def __init__(self, module: HloModule):
        self.module = module
        self.names: set[str] = set()
        self.comp_names: set[str] = {c.name for c in module.computations}
        for comp in module.computations:
            for inst in comp.instructions:
                self.names.add(inst.name)
        self.rewritten: dict[int, HloComputation] = {}
        self.new_computations: list[HloComputation] = []
        self.wrapped = 0

    def unique(self, base: str) -> str:
        """An instruction name free in the module (taken from then on)."""
        name = _free_name(self.names, base)
        self.names.add(name)
        return name

    def unique_comp(self, base: str) -> str:
        """A computation name free in the module (taken from then on)."""
        name = _free_name(self.comp_names, base)
        self.comp_names.add(name)
        return name

    def build(self) -> HloModule:
        entry = self.module.entry
        new_entry = self.rewrite(entry)
        computations = _reachable_computations(new_entry)
        out = HloModule(self.module.name, computations, dict(self.module.attrs),
                        self.module.source, dict(getattr(self.module, "sections", {})))
        for comp in computations:
            if hasattr(comp, "module"):
                comp.module = out
        return out

    def rewrite(self, comp: HloComputation) -> HloComputation:
        """`comp` with thunk ops only; sequential computations nested in
        while/conditional are rewritten too. A computation called from
        several places gets a copy per caller (XLA's FlattenCallGraph):
        each loop body and branch has buffers of its own."""
        name = comp.name
        if id(comp) in self.rewritten:
            name = self.unique_comp(f"{comp.name}.clone")
        source = inline_calls(comp) if any(
            i.opcode == "call" for i in comp.instructions) else comp
        mapping: dict[int, HloInstruction] = {}
        out: list[HloInstruction] = []
        # Iterative: (instruction, operands already mapped?)
        for inst in source.post_order():
            ops = [mapping[id(o)] for o in inst.operands]
            mapping[id(inst)] = self._rewrite_instruction(inst, ops, out)
        root = mapping[id(source.root)]
        if name != comp.name:   # a copy: instruction names unique in the module
            renamed = {}
            for inst in out:
                renamed[inst.name] = inst.name = self.unique(inst.name)
            for inst in out:
                preds = inst.attrs.get("control-predecessors")
                if preds:
                    inst.attrs["control-predecessors"] = tuple(renamed.get(p, p)
                                                               for p in preds)
        new = HloComputation(name, out, root, comp.is_entry, comp.location)
        new.link_instructions()
        self.rewritten.setdefault(id(comp), new)
        return new

    def _emit(self, out: list, inst: HloInstruction) -> HloInstruction:
        out.append(inst)
        return inst

    def _rewrite_instruction(self, inst: HloInstruction, ops: list[HloInstruction],
                             out: list[HloInstruction]) -> HloInstruction:
        op = inst.opcode
        if op in ("while", "conditional"):
            clone = inst.clone_with(ops)
            for key, value in list(clone.attrs.items()):
                if isinstance(value, HloComputation):
                    clone.attrs[key] = self.rewrite(value)
                elif isinstance(value, list) and value and \
                        all(isinstance(v, HloComputation) for v in value):
                    clone.attrs[key] = [self.rewrite(v) for v in value]
            if op == "conditional":
                for key in ("true_computation", "false_computation", "branch_computations"):
                    value = clone.attrs.get(key)
                    for branch in value if isinstance(value, list) else [value]:
                        if isinstance(branch, HloComputation):
                            self._own_result_buffers(branch)
            return self._emit(out, clone)
        if op == "fusion":
            dot = _gemm_fusion(inst)
            if dot is not None:
                return self._open_fusion(inst, ops, out)
            return self._emit(out, inst.clone_with(ops))
        if op == "reshape" and _is_row_major(inst.shape) and \
                _is_row_major(inst.operands[0].shape):
            return self._emit(out, inst.clone_with(ops, opcode="bitcast"))
        if op == "bitcast-convert" and _same_bytes(inst.shape, inst.operands[0].shape):
            return self._emit(out, inst.clone_with(ops, opcode="bitcast"))
        if op == "copy" and inst.shape.minor_to_major != inst.operands[0].shape.minor_to_major:
            return self._wrap(inst, ops, out)
        if op == "fft":
            return self._fft(inst, ops, out)
        if op == "convolution" and _lower_to_gemm(inst):
            from .convolution_lowering import lower_convolution
            created, result, computations = lower_convolution(
                inst, ops[0], ops[1], self.unique, self.unique_comp)
            out.extend(created)
            self.new_computations.extend(computations)
            return result
        if op == "custom-call" and _is_handler_call(inst):
            return self._handler_call(inst, ops, out)
        if op in THUNK_OPCODES:
            return self._emit(out, inst.clone_with(ops))
        return self._wrap(inst, ops, out)

    def _handler_call(self, inst: HloInstruction, ops: list[HloInstruction],
                      out: list[HloInstruction]) -> HloInstruction:
        """A custom call whose handler reads raw buffers: each operand in
        the layout the call requires (hlo.passes.custom_call_layouts; the
        pass pipeline relayouted them already, XLA's own dumps have them so,
        other modules get a copy kernel here). Its results stay in the
        layouts of its shape: the handler writes them so."""
        from .hlo.passes.custom_call_layouts import required_operand_shapes
        wanted = required_operand_shapes(inst)
        relaid = []
        for k, (operand, shape) in enumerate(zip(ops, wanted)):
            if not shape.is_tuple and not operand.shape.is_tuple and \
                    operand.shape.minor_to_major != shape.minor_to_major:
                relayout = HloInstruction(
                    self.unique(f"{inst.name}.operand{k}_relayout"), "copy", shape,
                    [operand], {}, None, None, inst.location)
                operand = self._wrap(relayout, [operand], out)
            relaid.append(operand)
        return self._emit(out, inst.clone_with(relaid))

    def _fft(self, inst: HloInstruction, ops: list[HloInstruction],
             out: list[HloInstruction]) -> HloInstruction:
        """An fft with a row-major operand and result (cuFFT reads packed
        row-major batches; XLA's layout assignment gives fft the default
        layout): another layout is relayouted by a copy kernel before (the
        operand) or after (the result) the fft."""
        operand = ops[0] if ops else None
        if operand is not None and not _is_row_major(operand.shape):
            shape = operand.shape
            relayout = HloInstruction(
                self.unique(f"{inst.name}.operand_relayout"), "copy",
                Shape(shape.element_type, tuple(shape.dims), default_layout(len(shape.dims))),
                [operand], {}, None, None, inst.location)
            operand = self._wrap(relayout, [operand], out)
            ops = [operand, *ops[1:]]
        if _is_row_major(inst.shape):
            return self._emit(out, inst.clone_with(ops))
        shape = inst.shape
        row_major = Shape(shape.element_type, tuple(shape.dims),
                          default_layout(len(shape.dims)))
        fft = self._emit(out, inst.clone_with(ops, shape=row_major))
        relayout = HloInstruction(self.unique(f"{inst.name}.result_relayout"), "copy", shape,
                                  [fft], {}, None, None, inst.location)
        return self._wrap(relayout, [fft], out)

    def _own_result_buffers(self, branch: HloComputation) -> None:
        """A conditional branch that returns its parameter (or a constant)
        returns a copy: every branch writes the conditional's own buffers
        (XLA's copy insertion does the same for branch results)."""
        root = branch.root
        elements = list(root.operands) if root.opcode == "tuple" else [root]
        copied = []
        changed = False
        for element in elements:
            source = element
            while source.opcode in ("bitcast", "get-tuple-element"):
                source = source.operands[0]
            if source.opcode in ("parameter", "constant") and not element.shape.is_tuple:
                copy = HloInstruction(self.unique(f"{element.name}.copy"), "copy",
                                      element.shape, [element], {}, None, None,
                                      element.location)
                branch.instructions.append(copy)
                copied.append(copy)
                changed = True
            else:
                copied.append(element)
        if not changed:
            return
        if root.opcode == "tuple":
            new_root = HloInstruction(self.unique(root.name + ".copied"), "tuple", root.shape,
                                      copied, {}, None, None, root.location)
            branch.instructions.append(new_root)
        else:
            new_root = copied[0]
        branch.root = new_root
        branch.link_instructions()

    def _open_fusion(self, inst: HloInstruction, ops: list[HloInstruction],
                     out: list[HloInstruction]) -> HloInstruction:
        """A GEMM fusion's body in the caller: the dot becomes a gemm thunk,
        the rest kernels (bitcasts stay free)."""
        comp: HloComputation = inst.attrs["calls"]
        local: dict[int, HloInstruction] = {}
        for inner in comp.post_order():
            if inner.opcode == "parameter":
                local[id(inner)] = ops[inner.parameter_number]
                continue
            inner_ops = [local[id(o)] for o in inner.operands]
            renamed = inner.clone_with(inner_ops, name=self.unique(f"{inst.name}.{inner.name}"))
            local[id(inner)] = self._rewrite_instruction(renamed, inner_ops, out)
        result = local[id(comp.root)]
        return result

    def _wrap(self, inst: HloInstruction, ops: list[HloInstruction],
              out: list[HloInstruction]) -> HloInstruction:
        """`inst` as a fusion of its own (XLA's wrapped_<op>): scalar
        constants go inside, other operands become parameters."""
        params: list[HloInstruction] = []
        fusion_operands: list[HloInstruction] = []
        inner_ops: list[HloInstruction] = []
        seen: dict[int, HloInstruction] = {}
        body: list[HloInstruction] = []
        for operand in ops:
            if id(operand) in seen:
                inner_ops.append(seen[id(operand)])
                continue
            if operand.opcode == "constant" and not operand.shape.is_tuple and \
                    operand.shape.rank == 0:
                inner = operand.clone_with([], name=operand.name)
            else:
                inner = HloInstruction(f"param_{len(params)}", "parameter", operand.shape,
                                       [], {}, None, len(params), operand.location)
                params.append(inner)
                fusion_operands.append(operand)
            body.append(inner)
            seen[id(operand)] = inner
            inner_ops.append(inner)
        opname = inst.opcode.replace("-", "_")
        root = inst.clone_with(inner_ops)
        root.attrs.pop("control-predecessors", None)
        body.append(root)
        comp_name = self.unique_comp(f"wrapped_{opname}_computation")
        fused = HloComputation(comp_name, body, root, False, inst.location)
        fused.link_instructions()
        self.new_computations.append(fused)
        attrs = {"kind": "kLoop", "calls": fused}
        if "control-predecessors" in inst.attrs:
            attrs["control-predecessors"] = inst.attrs["control-predecessors"]
        if "metadata" in inst.attrs:
            attrs["metadata"] = inst.attrs["metadata"]
        self.wrapped += 1
        fusion = HloInstruction(inst.name, "fusion", inst.shape, fusion_operands, attrs,
                                None, None, inst.location)
        return self._emit(out, fusion)


def _is_handler_call(inst: HloInstruction) -> bool:
    from .hlo.passes.custom_call_layouts import is_handler_call
    return is_handler_call(inst)


def _same_bytes(a: Shape, b: Shape) -> bool:
    """Whether two row-major arrays of byte-sized elements hold the same
    bytes in the same order (a bitcast-convert that is a plain bitcast)."""
    if a.is_tuple or b.is_tuple or not (a.is_row_major and b.is_row_major):
        return False
    if a.element_type in ("pred", "s2", "s4", "u2", "u4") or \
            b.element_type in ("pred", "s2", "s4", "u2", "u4"):
        return False
    return a.num_elements * a.dtype.itemsize == b.num_elements * b.dtype.itemsize


def _reachable_computations(entry: HloComputation) -> list[HloComputation]:
    """Computations reachable from `entry`, callees before callers; the
    last callee of the last instruction is walked first (the order the
    thunk emitter and kernel names have always followed)."""
    return post_order([entry], lambda comp: callees(comp)[::-1])


def _kernel_fusions(entry: HloComputation) -> list[tuple[HloInstruction, HloComputation]]:
    """The fusions of the program that may become kernels, in the order
    the thunks are emitted (fusions inside fusion bodies and those that
    are a broadcast constant, a memset, left out)."""
    comps = _reachable_computations(entry)
    bodies = {id(inst.attrs["calls"]) for comp in comps for inst in comp.instructions
              if inst.opcode == "fusion" and isinstance(inst.attrs.get("calls"), HloComputation)}
    found = []
    for comp in reversed(comps):
        if id(comp) in bodies:
            continue
        for inst in comp.instructions:
            body = inst.attrs.get("calls") if inst.opcode == "fusion" else None
            if isinstance(body, HloComputation) and _broadcast_constant(body) is None \
                    and not _all_outputs_empty(inst):
                found.append((inst, body))
    return found


def _all_outputs_empty(inst: HloInstruction) -> bool:
    """Whether every array `inst` produces has no elements (a fusion that
    becomes no kernel)."""
    leaves = _leaves(inst.shape)
    return bool(leaves) and all(shape.num_elements == 0 for _, shape in leaves)


def _broadcast_constant(body: HloComputation) -> HloInstruction | None:
    """The constant a fusion body only broadcasts (through bitcasts and
    reshapes), None when it computes more: the candidates for a memset."""
    value = body.root
    if value is None or value.shape.is_tuple:
        return None
    while value.opcode in ("broadcast", "bitcast", "reshape") and value.operands:
        value = value.operands[0]
    return value if value.opcode == "constant" else None


def prepare_module(module: HloModule, *, optimize: bool | None = None,
                   dump_dir: str | os.PathLike | None = None,
                   dump_regex: str = ".*") -> tuple[HloModule, list[str]]:
    """The module as the thunk emitter takes it, and notes on how it got
    there. `optimize`: None (default) runs the HLO pass pipeline on modules
    without fusions; True always; False never (each op its own fusion)."""
    notes: list[str] = []
    entry = module.entry
    has_fusions = any(i.opcode == "fusion" for c in _reachable_computations(entry)
                      for i in c.instructions)
    run_passes = (not has_fusions) if optimize is None else optimize
    if run_passes:
        from .hlo.passes import optimize as optimize_hlo
        try:
            module = optimize_hlo(module, dump_dir=dump_dir, dump_regex=dump_regex)
            notes.append("optimized by xla_gpu.hlo.passes")
        except (HloError, NotImplementedError, RecursionError, ValueError, KeyError,
                TypeError, AttributeError, IndexError, AssertionError) as e:
            notes.append(f"HLO passes failed ({type(e).__name__}: {e}): each op is its "
                         "own fusion")
    # Top-k too long for one kernel -> sort + slice; stable sorts of several
    # kernels get their tie-break index as an operand (a buffer).
    from .emitters.topk import rewrite_for_sort_kernels
    module, sort_notes = rewrite_for_sort_kernels(module)
    notes.extend(sort_notes)
    builder = _ModuleBuilder(module)
    prepared = builder.build()
    if builder.wrapped:
        notes.append(f"{builder.wrapped} op(s) outside fusions wrapped in their own fusion")
    # Copies where an in-place update or a loop would overwrite a value still
    # needed (a no-op on modules XLA or the pass pipeline already copied).
    try:
        from .hlo.passes.copy_insertion import CopyInsertion
    except ImportError:
        CopyInsertion = None
    if CopyInsertion is not None and CopyInsertion().run(prepared):
        notes.append("copy insertion added copies")
    ordered = _order_loop_state_updates(prepared)
    if ordered:
        notes.append(f"{ordered} control edge(s): loop state read before it is overwritten")
    return prepared, notes


def _ancestors(inst: HloInstruction, by_name: dict[str, HloInstruction]) -> set[int]:
    """ids of every instruction `inst` depends on (operands and control
    predecessors, transitively), itself included."""
    def deps(node: HloInstruction) -> list[HloInstruction]:
        preds = [by_name[n] for n in node.attrs.get(CONTROL_PREDECESSORS) or () if n in by_name]
        return [*node.operands, *preds]

    return {id(node) for node in reachable([inst], deps)}


def _order_loop_state_updates(module: HloModule) -> int:
    """In every while body, the instruction writing loop state element k
    runs after the other readers of element k's previous value (XLA adds
    these control edges when it removes the copies copy insertion would
    need): then the new value can take the old one's buffer. Where that
    cannot be (the writer reads the old value at other elements, or a
    reader of the old value needs the new one), the new value is copied into
    the state after the last reader, as XLA's copy insertion does. Returns
    the number of control edges added."""
    from .service.alias_analysis import elementwise_share_pairs, in_place_pairs
    added = 0
    for comp in _reachable_computations(module.entry):
        for loop in comp.instructions:
            if loop.opcode != "while":
                continue
            body: HloComputation = loop.attrs["body"]
            if not body.parameters or body.root is None or body.root.opcode != "tuple":
                continue
            param = body.parameters[0]
            by_name = {i.name: i for i in body.instructions}
            for k, value in enumerate(list(body.root.operands)):
                old = [g for g in param.users
                       if g.opcode == "get-tuple-element" and g.attrs.get("index") == k]
                if not old or value in old or value.shape.is_tuple:
                    continue
                writer = value
                while writer.opcode in ("get-tuple-element", "bitcast") and \
                        writer not in old and writer is not param:
                    writer = writer.operands[0]
                if writer in old or writer is param or writer.opcode in ("parameter",
                                                                          "constant"):
                    continue
                readers: list[HloInstruction] = []
                old_values = list(old)
                stack = list(old)
                while stack:
                    current = stack.pop()
                    for user in current.users:
                        if user.opcode == "bitcast":
                            stack.append(user)
                            old_values.append(user)
                        elif user is not body.root and user not in readers:
                            readers.append(user)
                shareable = {i for i, _, _ in in_place_pairs(writer)} | \
                    {i for i, _, _ in elementwise_share_pairs(writer)}
                self_read = writer in readers and not all(
                    i in shareable for i, o in enumerate(writer.operands)
                    if any(o is v for v in old_values))
                others = [r for r in readers if r is not writer]
                if self_read or any(id(writer) in _ancestors(r, by_name) for r in others):
                    copy = HloInstruction(_free_name(by_name, f"{value.name}.state_copy"),
                                          "copy", value.shape, [value], {}, None, None,
                                          value.location)
                    body.instructions.append(copy)
                    by_name[copy.name] = copy
                    body.root.operands[k] = copy
                    copy.parent = body
                    copy.users = [body.root]
                    value.users = [u for u in value.users if u is not body.root] + [copy]
                    writer, others = copy, readers
                for reader in others:
                    if id(writer) in _ancestors(reader, by_name):
                        continue
                    names = tuple(writer.attrs.get("control-predecessors") or ())
                    if reader.name in names:
                        continue
                    writer.attrs["control-predecessors"] = names + (reader.name,)
                    if hasattr(body, "_control_edges"):
                        body._control_edges = True
                    added += 1
    return added


def _free_name(taken, base: str) -> str:
    """`base`, or the first of `base.1`, `base.2`, ... not in `taken`."""
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}.{n}"
    return name


# -- kernels -------------------------------------------------------------------------


def _symbol(name: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return text if text and not text[0].isdigit() else f"k_{text}"


def kernel_computation(comp: HloComputation) -> HloComputation:
    """`comp` reading and writing row-major physical buffers: a parameter
    or output leaf with another layout goes through a bitcast (the
    emitters index bitcasts through the physical order). `comp` itself
    when every parameter and output is row-major already."""
    comp = inline_calls(comp)
    params = comp.parameters
    root = comp.root
    outputs = list(root.operands) if root.opcode == "tuple" else [root]
    if all(_is_row_major(p.shape) for p in params) and \
            all(_is_row_major(o.shape) for o in outputs):
        return comp
    mapping: dict[int, HloInstruction] = {}
    body: list[HloInstruction] = []
    for inst in comp.post_order():
        if inst.opcode == "parameter" and not _is_row_major(inst.shape):
            physical = HloInstruction(inst.name + ".physical", "parameter",
                                      inst.shape.physical_shape(), [], {}, None,
                                      inst.parameter_number, inst.location)
            body.append(physical)
            logical = HloInstruction(inst.name, "bitcast", inst.shape, [physical], {},
                                     None, None, inst.location)
            body.append(logical)
            mapping[id(inst)] = logical
            continue
        new = inst.clone_with([mapping[id(o)] for o in inst.operands])
        body.append(new)
        mapping[id(inst)] = new

    def physical_output(value: HloInstruction) -> HloInstruction:
        if _is_row_major(value.shape):
            return value
        out = HloInstruction(value.name + ".physical", "bitcast", value.shape.physical_shape(),
                             [value], {}, None, None, value.location)
        body.append(out)
        return out

    new_root = mapping[id(root)]
    if root.opcode == "tuple":
        leaves = [physical_output(o) for o in new_root.operands]
        if any(a is not b for a, b in zip(leaves, new_root.operands)):
            shape = Shape(tuple_shapes=tuple(leaf.shape for leaf in leaves))
            new_root = HloInstruction(root.name + ".physical", "tuple", shape, leaves, {},
                                      None, None, root.location)
            body.append(new_root)
    else:
        new_root = physical_output(new_root)
    new = HloComputation(comp.name, body, new_root, False, comp.location)
    new.link_instructions()
    return new


class _KernelCompiler:
    """Compiles fusion computations to kernels through the compile cache
    (the same keys as `xla_gpu.compile(..., fusion=NAME)`)."""

    def __init__(self, target: str, arch: str, cache: bool, module: HloModule):
        from . import compile_cache
        self.target, self.arch, self.cache, self.module = target, arch, cache, module
        self.identity = compile_cache.compiler_identity(target) if cache else ""
        self.disk = compile_cache.DiskCache() if cache else None
        self.images: dict[str, KernelImage] = {}
        self.by_fingerprint: dict[str, str] = {}
        self.compiled = 0
        self.cached = 0
        self.fallbacks: list[str] = []
        # cuda: kernels built this compile go into one binary (`link`);
        # until then their images have no code.
        self.link_kernels = target == "cuda" and LINK_KERNELS
        self._unlinked: list[tuple[KernelImage, Any, str]] = []
        # Per fusion instruction: (kernel computation, fingerprint, key).
        self._kernels_of: dict[int, tuple[HloComputation, str, str]] = {}
        # Fingerprint -> a Future of `_build` or a cached kernel (prefetch).
        self._pending: dict[str, Any] = {}
        self._pool = None

    def _kernel_of(self, inst: HloInstruction, comp: HloComputation):
        """(the kernel's computation, its fingerprint, its cache key),
        worked out once per fusion instruction."""
        from . import compile_cache
        from .hlo.fingerprint import fingerprint
        known = self._kernels_of.get(id(inst))
        if known is None:
            kernel_comp = kernel_computation(comp)
            fp = fingerprint(kernel_comp)
            key = compile_cache.make_key("fusion", fp, self.target, self.arch, self.identity)
            known = self._kernels_of[id(inst)] = (kernel_comp, fp, key)
        return known

    def _cached(self, key: str):
        exe = _kernel_memory.get(key) if self.cache else None
        if exe is None and self.disk is not None:
            exe = self.disk.get(key, self.target)
        return exe

    def _build(self, inst: HloInstruction, kernel_comp: HloComputation, key: str):
        """(the compiled kernel, a note when the loop emitter stood in for
        a dedicated emitter that failed). Runs on the prefetch threads:
        touches nothing of this object but its read-only settings."""
        from . import compiler
        from .analysis.device import default_device
        from .analysis.fusion import analyze
        fusion = analyze(kernel_comp, _symbol(inst.name), self.module)
        fusion.device = default_device(self.target)
        text = fusion_text(kernel_comp)
        try:
            return compiler._build(fusion, text, self.target, self.arch, key, None, ".*",
                                   self.link_kernels), None
        except (HloError, CompileError) as e:
            if fusion.kind not in _LOOP_CAN_STAND_IN:
                raise
            # The dedicated emitter refused or failed: the loop emitter
            # computes the same values (slower), as XLA falls back.
            fusion = analyze(kernel_comp, _symbol(inst.name), self.module)
            fusion.device = default_device(self.target)
            failed = fusion.kind
            fusion.kind = "loop"
            try:
                exe = compiler._build(fusion, text, self.target, self.arch, key, None, ".*",
                                      self.link_kernels)
            except (HloError, CompileError):
                raise e from None
            exe.notes.append(f"the {failed} emitter failed ({e}); emitted by the loop "
                             "emitter")
            return exe, (f"{inst.name}: {failed} emitter failed, loop emitter used "
                         f"({str(e)[:200]})")

    def prefetch(self, fusions: list[tuple[HloInstruction, HloComputation]]) -> None:
        """Starts compiling the kernels of `fusions` that no cache holds on
        a pool of host threads (emission holds the GIL, but MLIR's passes,
        LLVM's NVPTX backend and nvJitLink or ptxas mostly do not), one per
        distinct kernel; `compile` then takes each result in the order the
        thunks need them, and raises a failure where the serial compile
        would have."""
        workers = min(os.cpu_count() or 1, PREFETCH_THREADS)
        if workers < 2:
            return
        for inst, comp in fusions:
            kernel_comp, fp, key = self._kernel_of(inst, comp)
            if fp in self.by_fingerprint or fp in self._pending:
                continue
            exe = self._cached(key)
            if exe is not None:
                self._pending[fp] = exe
                continue
            if self._pool is None:
                self._pool = _compile_pool(workers)
            self._pending[fp] = self._pool.submit(self._build, inst, kernel_comp, key)

    def close(self) -> None:
        """Cancels what was prefetched and not used (a compile that failed
        part way) and lets the threads go."""
        from concurrent.futures import Future, wait
        running = [item for item in self._pending.values()
                   if isinstance(item, Future) and not item.cancel()]
        # The pool outlives this compile; what still runs for it finishes
        # before the compile returns (its errors are not wanted).
        wait(running)
        self._pool = None
        self._pending.clear()

    def compile(self, inst: HloInstruction, comp: HloComputation) -> KernelImage:
        from concurrent.futures import Future
        kernel_comp, fp, key = self._kernel_of(inst, comp)
        known = self.by_fingerprint.get(fp)
        if known is not None:
            return self.images[known]
        found = self._pending.pop(fp, None)
        if found is None:
            found = self._cached(key)
        fallback = None
        if isinstance(found, Future):                 # compiled by prefetch
            exe, fallback = found.result()
        elif found is not None:                       # from a cache
            exe = found
        else:
            exe, fallback = self._build(inst, kernel_comp, key)
        if found is None or isinstance(found, Future):
            self.compiled += 1
            if fallback is not None:
                self.fallbacks.append(fallback)
            if self.disk is not None and exe.lowered is None:
                self.disk.put(key, exe)
        else:
            self.cached += 1
        if exe.lowered is None and self.cache:
            _kernel_memory[key] = exe
        self.by_fingerprint[fp] = key
        return self._add_image(key, exe)

    def _add_image(self, key: str, exe) -> KernelImage:
        """The program's image of kernel `exe` under `key`; one still to
        link (`exe.lowered`) gets its code from `link`."""
        image = KernelImage(exe.spec, ptx=exe.ptx, cubin=exe.cubin,
                            host_library=exe.host_library)
        if self.target == "cpu" and exe.host_library is None:
            image.jit = getattr(exe._load(), "host", None)
        if exe.lowered is not None:
            self._unlinked.append((image, exe, key))
        self.images[key] = image
        return image

    def link(self) -> None:
        """Links the kernels built by this compile into PTX modules and
        cubins that their images share: one per compile thread, compiled
        side by side, each holding about the same amount of code (more
        only where kernel names clash). The linked kernels stay in this
        process' memory cache; they are not written to the disk cache,
        where each entry would carry a whole group's binary."""
        if not self._unlinked:
            return
        from .backends import cuda
        # Two kernels may share a name (then they go to different groups).
        owner = {id(exe.lowered): (image, exe, key) for image, exe, key in self._unlinked}
        workers = min(os.cpu_count() or 1, PREFETCH_THREADS)
        groups = cuda.link_groups([exe.lowered for _, exe, _ in self._unlinked], workers)
        link = functools.partial(_link_group, arch=self.arch)
        binaries = _compile_pool(workers).map(link, groups) if len(groups) > 1 else \
            map(link, groups)
        for group, binary in zip(groups, binaries):
            for kernel in group:
                image, exe, key = owner[id(kernel)]
                image.ptx = exe.ptx = binary.ptx
                image.cubin = exe.cubin = binary.cubin
                exe.lowered = None
                if self.cache:
                    _kernel_memory[key] = exe
        self._unlinked.clear()

    def register(self, key: str, exe) -> str:
        """Adds a kernel compiled elsewhere (the sort, top-k and convolution
        emitters' kernels, `emitters.sort.compile_kernel`) under its cache
        key; returns its kernel id. One still to link (`exe.lowered`) is
        linked with the program's others."""
        if key not in self.images:
            self._add_image(key, exe)
            self.compiled += 1
        return key


def _link_group(group, arch: str):
    """One PTX module and cubin for `group` (LoweredKernels), in this
    thread's MLIR context; a failure names the group's kernels."""
    from . import compiler
    from .backends import cuda
    try:
        return cuda.link(group, compiler._thread_context(), arch=arch)
    except CompileError as e:
        names = ", ".join(kernel.name for kernel in group)
        raise type(e)(f"linking kernels {names}: {e}") from None


_kernel_memory: dict[str, Any] = {}
# Host threads that compile a program's kernels side by side.
PREFETCH_THREADS = 8
# cuda: a program's kernels share one PTX module and cubin (False: one
# binary per kernel, as a single fusion's compile makes).
LINK_KERNELS = True
_pool_lock = threading.Lock()
_pool: Any = None


def _compile_pool(workers: int):
    """The process' kernel-compile threads, made on first use and kept:
    each thread keeps its MLIR context and parsed pass managers between
    compiles (making them again costs ~10-25 ms a thread, as much as
    compiling a small kernel), and no compile pays for starting threads."""
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="xla_gpu_compile")
        return _pool


def _forget_pool_after_fork() -> None:
    # A forked child has none of the parent's threads: it makes its own pool.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)
# Emitter kinds whose fusions the loop emitter computes too (elementwise per
# output element): used when the dedicated emitter fails on a fusion.
_LOOP_CAN_STAND_IN = frozenset({"transpose", "reduction", "concatenate", "input_slices",
                                "in_place_dynamic_update_slice"})


# -- thunk emission --------------------------------------------------------------------


def _leaves(shape: Shape, prefix: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], Shape]]:
    """(shape index, array shape) of every leaf, depth first."""
    out = []
    stack = [(prefix, shape)]
    while stack:
        index, s = stack.pop()
        if s.is_tuple:
            stack.extend(reversed([(index + (i,), t) for i, t in enumerate(s.tuple_shapes)]))
        else:
            out.append((index, s))
    return out


def _subshape(shape: Shape, index: tuple[int, ...]) -> Shape:
    for i in index:
        shape = shape.tuple_shapes[i]
    return shape


class _ThunkEmitter:
    def __init__(self, module: HloModule, schedule, assignment, kernels: _KernelCompiler,
                 target: str):
        self.module, self.schedule, self.assignment = module, schedule, assignment
        self.kernels, self.target = kernels, target

    # slices -----------------------------------------------------------------
    def has_slice(self, inst: HloInstruction, index: tuple[int, ...] = ()) -> bool:
        return self.assignment.has_slice(inst, index)

    def slice(self, inst: HloInstruction, index: tuple[int, ...] = ()) -> BufferSlice:
        if not self.assignment.has_slice(inst, index):
            raise CompileError(f"instruction '{inst.name}'{list(index) if index else ''}: "
                               "buffer assignment gave it no slice")
        return self.assignment.slice(inst, index)

    def ref(self, inst: HloInstruction, index: tuple[int, ...] = ()) -> ArrayRef:
        shape = _subshape(inst.shape, index)
        if shape.is_tuple:
            raise inst.error(f"expected an array at shape index {list(index)}, got {shape}")
        layout = tuple(shape.layout) if shape.layout is not None else None
        return ArrayRef(self.slice(inst, index), shape.element_type, tuple(shape.dims), layout)

    def copies(self, name: str, source: HloInstruction, source_index: tuple[int, ...],
               dest: HloInstruction, dest_index: tuple[int, ...]) -> list[Thunk]:
        """Copy thunks moving every leaf of `source`[source_index] into
        `dest`[dest_index] where buffer assignment did not alias them."""
        out: list[Thunk] = []
        shape = _subshape(source.shape, source_index)
        for rel, leaf in _leaves(shape):
            si, di = source_index + rel, dest_index + rel
            if not (self.has_slice(source, si) and self.has_slice(dest, di)):
                continue
            src, dst = self.slice(source, si), self.slice(dest, di)
            if src != dst:
                size = min(src.size, dst.size)
                out.append(CopyThunk(name, src, dst, size))
        return out

    # sequences ------------------------------------------------------------------
    def emit(self, comp: HloComputation) -> list[Thunk]:
        """The thunks of `comp` in schedule order; the thunks of the
        instructions a convolution was lowered to form one convolution
        thunk."""
        thunks: list[Thunk] = []
        group_name: str | None = None
        group: list[Thunk] = []

        def flush():
            if group:
                thunks.append(ConvolutionThunk(group_name, list(group),
                                               note="im2col kernel + gemm"))
                group.clear()

        for inst in self.schedule.sequence(comp):
            produced = self.emit_instruction(inst)
            conv = _convolution_of(inst)
            if conv is not None and conv == group_name:
                group.extend(produced)
                continue
            flush()
            group_name = conv
            if conv is not None:
                group.extend(produced)
            else:
                thunks.extend(produced)
        flush()
        return thunks

    def emit_instruction(self, inst: HloInstruction) -> list[Thunk]:
        op = inst.opcode
        if op in ("parameter", "constant", "after-all"):
            return []
        if op == "tuple":
            out: list[Thunk] = []
            for i, operand in enumerate(inst.operands):
                out += self.copies(inst.name, operand, (), inst, (i,))
            return out
        if op == "get-tuple-element":
            return self.copies(inst.name, inst.operands[0], (inst.attrs["index"],), inst, ())
        if op in ("bitcast", "opt-barrier", "optimization-barrier", "add-dependency"):
            return self.copies(inst.name, inst.operands[0], (), inst, ())
        if op == "copy":
            return [CopyThunk(inst.name, self.slice(inst.operands[0]), self.slice(inst),
                              self.ref(inst).nbytes)] if \
                self.slice(inst.operands[0]) != self.slice(inst) else []
        if op in ("partition-id", "replica-id"):   # one device: always 0
            ref = self.ref(inst)
            return [MemsetThunk(inst.name, ref.slice, 0, 4, 1)]
        if op == "fusion":
            return self.emit_fusion(inst)
        if op == "dot":
            return [self.emit_dot(inst)]
        if op == "while":
            return self.emit_while(inst)
        if op == "conditional":
            return self.emit_conditional(inst)
        if op == "custom-call":
            return self.emit_custom_call(inst)
        if op == "sort":
            return [self.emit_sort(inst)]
        if op == "topk":
            return [self.emit_topk(inst, inst.operands[0], int(inst.attrs.get("k", 0)),
                                   bool(inst.attrs.get("largest", True)), None)]
        if op == "convolution":
            return [self.emit_convolution(inst)]
        if op == "fft":
            return [self.emit_fft(inst)]
        raise inst.unsupported(f"no thunk for opcode '{op}'")

    # kernels -----------------------------------------------------------------------
    def emit_fusion(self, inst: HloInstruction) -> list[Thunk]:
        comp = inst.attrs.get("calls")
        if not isinstance(comp, HloComputation):
            raise inst.error("fusion without calls=COMPUTATION")
        if _all_outputs_empty(inst):
            # Nothing to compute: no kernel, no launch (as XLA); the empty
            # results need no bytes written.
            return []
        memset = self._memset(inst, comp)
        if memset is not None:
            return [memset]
        for operand in inst.operands:
            if operand.shape.is_tuple:
                raise inst.unsupported("a fusion operand is a tuple "
                                       f"('{operand.name}')")
        image = self.kernels.compile(inst, comp)
        spec = image.spec
        outputs = [index for index, _ in _leaves(inst.shape)]
        if len(outputs) != len(spec.outputs):
            raise CompileError(_where(inst) + f"kernel has {len(spec.outputs)} outputs, the "
                               f"fusion {len(outputs)}")
        thunks: list[Thunk] = []
        param_slices = [self.slice(o) for o in inst.operands]
        for k, j in spec.aliases.items():   # written in place into parameter j
            out_slice = self.slice(inst, outputs[k])
            if param_slices[j] != out_slice:
                thunks.append(CopyThunk(inst.name, param_slices[j], out_slice,
                                        min(param_slices[j].size, out_slice.size)))
                param_slices[j] = out_slice
        args: list[BufferSlice] = []
        written: list[int] = []
        aliased_params = set(spec.aliases.values())
        for kind, i in spec.kernel_args:
            if kind == "param":
                if i in aliased_params:
                    written.append(len(args))
                args.append(param_slices[i])
            else:
                written.append(len(args))
                args.append(self.slice(inst, outputs[i]))
        kernel_id = next(k for k, v in self.kernels.images.items() if v is image)
        thunks.append(KernelThunk(inst.name, kernel_id, args, written, spec.threads,
                                  spec.blocks, spec.shared_bytes))
        return thunks

    def _memset(self, inst: HloInstruction, comp: HloComputation) -> MemsetThunk | None:
        """A fusion that broadcasts a constant of 1, 2 or 4 bytes: XLA's
        memset thunk instead of a kernel."""
        root = comp.root
        value = _broadcast_constant(comp)
        if value is None or value.literal is None:
            return None
        literal = np.asarray(value.literal)
        if literal.size != 1 or value.shape.element_type != root.shape.element_type:
            return None
        ref = self.ref(inst)
        width = ref.storage_dtype.itemsize
        if width not in (1, 2, 4) or ref.element_type in ("s2", "s4", "u2", "u4"):
            return None
        bits = np.asarray(literal.reshape(()), ref.storage_dtype).reshape(1).view(
            {1: np.uint8, 2: np.uint16, 4: np.uint32}[width])[0]
        return MemsetThunk(inst.name, ref.slice, int(bits), width, ref.num_elements)

    # gemm -------------------------------------------------------------------------------
    def emit_dot(self, inst: HloInstruction) -> Thunk:
        a = inst.attrs
        lhs, rhs = inst.operands
        precision = str(a.get("operand_precision", "")).lower()
        config = GemmConfig(
            self.ref(lhs), self.ref(rhs), self.ref(inst),
            tuple(a.get("lhs_batch_dims", ())), tuple(a.get("rhs_batch_dims", ())),
            tuple(a.get("lhs_contracting_dims", ())), tuple(a.get("rhs_contracting_dims", ())),
            precision="HIGHEST" if "highest" in precision else "DEFAULT")
        return self._gemm(inst, config)

    def _gemm(self, inst: HloInstruction, config: GemmConfig) -> Thunk:
        if self.target == "cuda":
            try:
                cublas_plan(config)
            except CublasPlanError as e:
                raise inst.unsupported(f"the gemm cannot run on cuBLASLt: {e}")
        return GemmThunk(inst.name, config)

    def emit_cublas(self, inst: HloInstruction) -> list[Thunk]:
        spec = cublas_gemm(inst)
        if spec.epilogue not in EPILOGUES:
            raise inst.unsupported(f"cuBLAS epilogue {spec.epilogue} is not supported "
                                   f"(supported: {', '.join(EPILOGUES)})")
        operands = list(inst.operands)
        lhs, rhs = operands[0], operands[1]
        rest = operands[2:]
        c = bias = None
        if spec.beta != 0:
            if not rest:
                raise inst.error("beta != 0 but no C operand")
            c = rest.pop(0)
        if spec.epilogue_kind.bias:
            if not rest:
                raise inst.error(f"epilogue {spec.epilogue} but no bias operand")
            bias = rest.pop(0)
        out_index = (0,) if inst.shape.is_tuple else ()
        workspace = None
        if inst.shape.is_tuple and len(inst.shape.tuple_shapes) > 1:
            last = (len(inst.shape.tuple_shapes) - 1,)
            if self.has_slice(inst, last):
                workspace = self.slice(inst, last)
        gemm = GemmConfig(
            self.ref(lhs), self.ref(rhs), self.ref(inst, out_index),
            spec.lhs_batch, spec.rhs_batch, spec.lhs_contracting, spec.rhs_contracting,
            alpha=spec.alpha, beta=spec.beta, c=None if c is None else self.ref(c),
            bias=None if bias is None else self.ref(bias), epilogue=spec.epilogue,
            precision="HIGHEST" if spec.highest_precision else "DEFAULT",
            workspace=workspace)
        return [self._gemm(inst, gemm)]

    # fft -----------------------------------------------------------------------------------
    def emit_fft(self, inst: HloInstruction) -> Thunk:
        """An fft thunk: numpy.fft on the cpu target, cuFFT on cuda."""
        if len(inst.operands) != 1:
            raise inst.error(f"fft takes one operand, got {len(inst.operands)}")
        if inst.shape.is_tuple or inst.operands[0].shape.is_tuple:
            raise inst.error("fft operates on arrays, not tuples")
        lengths = inst.attrs.get("fft_length", ())
        if isinstance(lengths, int):
            lengths = (lengths,)
        try:
            config = FftConfig(str(inst.attrs.get("fft_type", "")),
                               tuple(int(n) for n in lengths),
                               self.ref(inst.operands[0]), self.ref(inst))
        except (HloError, TypeError, ValueError) as e:
            raise inst.error(str(e)) from None
        if self.target == "cuda":
            problem = cufft_layout_error(config)
            if problem is not None:
                raise inst.unsupported(problem)
        return FftThunk(inst.name, config)

    # control flow -----------------------------------------------------------------------
    def emit_while(self, inst: HloInstruction) -> list[Thunk]:
        cond: HloComputation = inst.attrs["condition"]
        body: HloComputation = inst.attrs["body"]
        init = inst.operands[0]
        thunks = self.copies(inst.name, init, (), inst, ())
        cond_param, body_param = cond.parameters[0], body.parameters[0]
        cond_thunks = self.copies(inst.name, inst, (), cond_param, ()) + self.emit(cond)
        body_thunks = self.copies(inst.name, inst, (), body_param, ()) + self.emit(body) + \
            self.copies(inst.name, body.root, (), inst, ())
        trip = inst.backend_config().get("known_trip_count", {})
        trip_count = None
        if isinstance(trip, dict) and "n" in trip:
            try:
                trip_count = int(trip["n"])
            except (TypeError, ValueError):
                trip_count = None
        thunks.append(WhileThunk(inst.name, cond_thunks, self.ref(cond.root), body_thunks,
                                 trip_count))
        return thunks

    def emit_conditional(self, inst: HloInstruction) -> list[Thunk]:
        branches = inst.attrs.get("branch_computations")
        if not branches:
            branches = [inst.attrs.get("true_computation"), inst.attrs.get("false_computation")]
        if not all(isinstance(b, HloComputation) for b in branches):
            raise inst.error("conditional without its branch computations")
        sequences = []
        for b, branch in enumerate(branches):
            operand = inst.operands[1 + b]
            seq = self.copies(inst.name, operand, (), branch.parameters[0], ()) \
                if branch.parameters else []
            seq += self.emit(branch)
            seq += self.copies(inst.name, branch.root, (), inst, ())
            sequences.append(seq)
        return [ConditionalThunk(inst.name, self.ref(inst.operands[0]), sequences)]

    # custom calls -----------------------------------------------------------------------
    def emit_custom_call(self, inst: HloInstruction) -> list[Thunk]:
        target = str(inst.attrs.get("custom_call_target", ""))
        if target in _CUBLAS_TARGETS:
            return self.emit_cublas(inst)
        if target.startswith("__cudnn$conv"):
            return [self.emit_convolution(inst)]
        if target in _SHARDING_TARGETS:   # one device: the value itself
            return self.copies(inst.name, inst.operands[0], (), inst, ())
        if target == "TopK":
            comparator = inst.attrs.get("to_apply") or inst.attrs.get("comparator")
            k = _subshape(inst.shape, (0,)).dims[-1] if inst.shape.is_tuple else \
                inst.shape.dims[-1]
            return [self.emit_topk(inst, inst.operands[0], k, True, comparator)]
        if target.startswith("__"):
            raise inst.unsupported(f"XLA-internal custom call target "
                                   f"'{target}' has no thunk")
        operands = [self.ref(o, index) for o in inst.operands
                    for index, _ in _leaves(o.shape)]
        results = [self.ref(inst, index) for index, _ in _leaves(inst.shape)]
        raw = inst.attrs.get("backend_config", "")
        arity = [len(_leaves(o.shape)) if o.shape.is_tuple else 0 for o in inst.operands]
        return [CustomCallThunk(inst.name, target, operands, results,
                                raw if isinstance(raw, str) else json.dumps(raw),
                                str(inst.attrs.get("api_version", "")), arity)]

    # sort, topk, convolution --------------------------------------------------------------
    def emit_sort(self, inst: HloInstruction) -> Thunk:
        """The sort emitter's kernels (bitonic stages; see emitters.sort),
        from the operands' slices into the results'."""
        from .emitters.sort import compile_sort
        compiled = compile_sort(inst, target=self.target, arch=self.kernels.arch,
                                cache=self.kernels.cache, lower_only=self.kernels.link_kernels)
        operands = [self.slice(o) for o in inst.operands]
        results = [self.slice(inst, index) for index, _ in _leaves(inst.shape)]
        return SortThunk(inst.name, compiled.thunks(inst.name, operands, results,
                                                     self.kernels.register),
                         compiled.describe())

    def emit_topk(self, inst: HloInstruction, operand: HloInstruction, k: int,
                  largest: bool, comparator) -> Thunk:
        """One kernel sorting each row in shared memory and writing the
        first k (values, indices); longer rows were decomposed into sort +
        slice before buffer assignment (emitters.topk)."""
        from .emitters.topk import compile_topk
        compiled = compile_topk(inst, target=self.target, arch=self.kernels.arch,
                                cache=self.kernels.cache, lower_only=self.kernels.link_kernels)
        results = [self.slice(inst, index) for index, _ in _leaves(inst.shape)]
        return TopKThunk(inst.name, compiled.thunks(inst.name, [self.slice(operand)],
                                                     results, self.kernels.register),
                         compiled.describe())

    def emit_convolution(self, inst: HloInstruction) -> Thunk:
        """An HLO convolution too small for im2col + gemm (see
        _lower_to_gemm), or XLA:GPU's cuDNN convolution custom calls
        (forward, backward input / filter, bias + activation): the
        direct-convolution kernel (emitters.convolution) writing the value;
        the scratch element of a custom call's result tuple is left alone."""
        from .emitters.convolution import CUDNN_CONV_TARGETS, compile_convolution
        target = str(inst.attrs.get("custom_call_target", ""))
        if inst.opcode == "custom-call" and target not in CUDNN_CONV_TARGETS:
            raise inst.unsupported(f"cuDNN call '{target}' is not supported "
                                   f"(supported: {', '.join(CUDNN_CONV_TARGETS)})")
        compiled = compile_convolution(inst, target=self.target, arch=self.kernels.arch,
                                       cache=self.kernels.cache,
                                       lower_only=self.kernels.link_kernels)
        value = (0,) if inst.shape.is_tuple else ()
        operands = [self.slice(o) for o in inst.operands]
        return ConvolutionThunk(inst.name, compiled.thunks(
            inst.name, operands, self.slice(inst, value), self.kernels.register),
            compiled.describe())


# Multiply-adds below which a convolution runs as one direct kernel (no
# temporaries, as XLA's cuDNN call) rather than im2col + gemm (a patch matrix
# of input elements x window in temporary memory, but the gemm's speed).
_DIRECT_CONVOLUTION_MACS = 1 << 24


def _lower_to_gemm(inst: HloInstruction) -> bool:
    """Whether an HLO convolution becomes im2col + gemm: large ones, where
    the gemm's throughput pays for the patch matrix."""
    from .hlo.convolution import conv_geometry
    lhs, rhs = inst.operands
    geom = conv_geometry(inst, lhs.shape.dims, rhs.shape.dims, inst.shape.dims)
    window = 1
    for size in geom.size:
        window *= size
    macs = inst.shape.num_elements * window * geom.group_features
    return macs >= _DIRECT_CONVOLUTION_MACS


def _convolution_of(inst: HloInstruction) -> str | None:
    """The convolution an instruction was lowered from (its metadata)."""
    from .convolution_lowering import CONVOLUTION_OP_TYPE
    metadata = inst.attrs.get("metadata")
    if isinstance(metadata, dict) and metadata.get("op_type") == CONVOLUTION_OP_TYPE:
        return str(metadata.get("op_name", inst.name))
    return None


def _where(inst: HloInstruction) -> str:
    line = f"line {inst.location.line}: " if inst.location else ""
    return f"{line}instruction '{inst.name}' ({inst.opcode}): "


# -- the driver ----------------------------------------------------------------------------


def _memory_analysis(assignment, kernels: dict[str, KernelImage]) -> MemoryAnalysis:
    memory = assignment.memory_analysis()
    # Kernels linked into one binary share it: count it once.
    code = {k.shared_binary() or id(k): k.code_size for k in kernels.values()}
    memory.generated_code_size_in_bytes = sum(code.values())
    return memory


def _module_text(module: HloModule, fallback: str) -> str:
    try:
        from .hlo.printer import module_to_text
    except ImportError:
        return fallback
    return module_to_text(module)


def compile_program(module: HloModule, *, text: str = "", target: str = "cpu",
                    arch: str = "sm_90", cache: bool = True, optimize: bool | None = None,
                    command_buffers: bool = True, memory_limit: int | None = None,
                    dump_dir: str | os.PathLike | None = None,
                    dump_regex: str = ".*") -> ProgramExecutable:
    """Compiles the ENTRY computation of `module` into a ProgramExecutable
    for `target` ("cpu" or "cuda"; resolve "auto" before). See the module
    docstring."""
    from .service import assign_buffers, schedule_module
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if dump_dir is not None:
        Path(dump_dir).mkdir(parents=True, exist_ok=True)
        Path(dump_dir, "before_optimizations.txt").write_text(
            text or _module_text(module, ""))
    prepared, notes = prepare_module(module, optimize=optimize, dump_dir=dump_dir,
                                     dump_regex=dump_regex)
    timings["prepare"] = time.perf_counter() - t0
    hlo_text = _module_text(prepared, text)
    t0 = time.perf_counter()
    schedule = schedule_module(prepared, memory_limit=memory_limit) \
        if memory_limit is not None else schedule_module(prepared)
    timings["schedule"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    assignment = assign_buffers(prepared, schedule)
    timings["buffer_assignment"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    kernels = _KernelCompiler(target, arch, cache, prepared)
    emitter = _ThunkEmitter(prepared, schedule, assignment, kernels, target)
    entry = prepared.entry
    try:
        kernels.prefetch(_kernel_fusions(entry))
        thunks = emitter.emit(entry)
        kernels.link()
    finally:
        kernels.close()
    timings["thunks+kernels"] = time.perf_counter() - t0
    if command_buffers:
        thunks = command_buffer.convert(thunks)
    parameters = [[emitter.ref(p, index) for index, _ in _leaves(p.shape)]
                  for p in entry.parameters]
    outputs = [emitter.ref(entry.root, index) for index, _ in _leaves(entry.root.shape)]
    constants = _constants(prepared, assignment)
    allocations = list(assignment.allocations)
    ba_text = assignment.to_text()
    exe = ProgramExecutable(
        name=module.name, target=target, arch=arch, allocations=allocations,
        parameters=parameters, parameter_shapes=[str(p.shape) for p in entry.parameters],
        outputs=outputs, thunks=thunks, kernels=dict(kernels.images), constants=constants,
        hlo_text=hlo_text, original_text=text, buffer_assignment=ba_text,
        memory=_memory_analysis(assignment, kernels.images), notes=notes, timings=timings,
        version=__version__, command_buffers=command_buffers)
    exe.notes.append(f"{len(kernels.images)} kernels ({kernels.compiled} compiled, "
                     f"{kernels.cached} from the cache)")
    exe.notes.extend(kernels.fallbacks)
    if dump_dir is not None:
        Path(dump_dir, "after_optimizations.txt").write_text(hlo_text)
        Path(dump_dir, "buffer-assignment.txt").write_text(ba_text)
        Path(dump_dir, "thunk-sequence.txt").write_text(exe.thunk_sequence_text())
    return exe


def _constants(module: HloModule, assignment) -> dict[int, np.ndarray]:
    """The bytes of every constant allocation, in physical order."""
    by_name: dict[str, HloInstruction] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "constant":
                by_name.setdefault(inst.name, inst)
    out: dict[int, np.ndarray] = {}
    for alloc in assignment.allocations:
        if alloc.kind != "constant":
            continue
        inst = by_name.get(alloc.constant or "")
        if inst is None or inst.literal is None:
            raise CompileError(f"constant allocation {alloc.index}: no constant named "
                               f"{alloc.constant!r}")
        buffer = np.zeros(alloc.size, np.uint8)
        for index, leaf in _leaves(inst.shape):
            value = np.asarray(inst.literal if not index else
                               _literal_leaf(inst.literal, index))
            layout = tuple(leaf.layout) if leaf.layout is not None else None
            ref = ArrayRef(BufferSlice(alloc.index, 0, alloc.size), leaf.element_type,
                           tuple(leaf.dims), layout)
            storage = value.astype(ref.storage_dtype) if value.dtype != ref.storage_dtype \
                else value
            data = np.ascontiguousarray(ref.physical_from_logical(
                storage.reshape(leaf.dims))).reshape(-1).view(np.uint8)
            offset = 0
            if assignment.has_slice(inst, index):
                offset = assignment.slice(inst, index).offset
            buffer[offset:offset + data.size] = data
        out[alloc.index] = buffer
    return out


def _literal_leaf(literal, index):
    for i in index:
        literal = literal[i]
    return literal
