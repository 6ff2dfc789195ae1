"""Preparing a module for the thunk emitter: the HLO pass pipeline (on a
module of plain ops), the rewrites the op kernels need, then every
sequential computation rewritten so that each instruction is a thunk op
(calls inlined, XLA:GPU's __triton_gemm fusions kept as one GEMM-emitter
kernel, other GEMM fusions opened into a gemm thunk and kernels,
layout-only reshapes made bitcasts,
each other op wrapped in a fusion of its own), copy insertion and the
loop-state ordering. The rewrites that are HLO passes live in
`xla_gpu.hlo.passes` (TopkDecomposer, StableSortExpander,
ConvolutionLowering, CopyInsertion, LoopStateOrdering).

A failing HLO pass is an error naming the pass (a pass bug must not turn
into a slow program). `fallback_unfused=True` (compile's option, or
XLA_GPU_UNFUSED_FALLBACK=1) compiles such a module with each op as its own
fusion instead, with a note saying why.
"""

from __future__ import annotations

import os

from ..errors import CompileError, HloError, UnsupportedError, XlaGpuError
from ..hlo import HloComputation, HloInstruction, HloModule, Shape
from ..hlo.fusions import inline_calls
from ..hlo.graph import post_order
from ..hlo.module import callees
from ..hlo.passes.util import free_name
from ..hlo.shape import default_layout

__all__ = ["prepare_module", "is_whole_program", "rewrite_for_op_kernels", "THUNK_OPCODES",
           "gemm_fusion", "reachable_computations", "is_row_major"]

# Instructions that are thunks (or no work at all) themselves; every other
# op of a sequential computation runs inside a fusion (a kernel).
THUNK_OPCODES = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "fusion", "dot",
    "custom-call", "while", "conditional", "sort", "topk", "convolution", "copy",
    "fft", "after-all", "add-dependency", "opt-barrier", "optimization-barrier",
    "partition-id", "replica-id",
    # Collectives are thunks of their own (never fused, never folded), their
    # async pairs too (the work at the start, the done its result).
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
    "collective-broadcast", "all-reduce-start", "all-reduce-done", "all-gather-start",
    "all-gather-done", "collective-permute-start", "collective-permute-done",
    "async-start", "async-update", "async-done", "ragged-all-to-all",
})
# The cpu target, a module the HLO pass pipeline fuses: dots of at most
# this many multiply-adds become GEMM kernels (grid-emulated), larger ones
# a gemm thunk (BLAS, as runtime.host_blas runs it) with kernels for what
# was fused around them. The
# emulated kernel runs a 256x128x128 product (4M) in ~1.5 ms where BLAS
# takes ~0.15; on bench/models.py's training steps, a 2^16-2^19 bound ran
# the scanned transformer 3x and the LSTM 1.5x faster than 2^22
# (analysis.gemm.HOST_SHARED_MAX_MACS, which still bounds the GEMM fusions
# XLA itself formed, whose tiling it chose). Within that range the run
# times are the same (the five models, median of 21 runs, 2^16 against
# 2^19: -4% to +1%), but each GEMM kernel costs 0.1-0.25 CPU-s of LLVM
# (its unrolled tiles): 2^16 compiled the conv net 22% and DP-SGD 20%
# faster (three and one fewer GEMM kernels), the others alike.
HOST_GEMM_KERNEL_MAX_MACS = 1 << 16
_GEMM_FUSION_KINDS = ("__ynn_fusion", "__triton_gemm", "__triton_nested_gemm_fusion",
                      "__onednn_fusion", "__cublas_fusion", "__cublas")


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
    if root is None or root.opcode != "fusion" or gemm_fusion(root) is not None:
        return True
    if any(i.opcode not in ("parameter", "fusion") for i in entry.instructions):
        return True
    if sum(1 for i in entry.instructions if i.opcode == "fusion") != 1:
        return True
    if any(p.shape.is_tuple for p in params):
        return True
    return [id(o) for o in root.operands] != [id(p) for p in params]


def gemm_fusion(inst: HloInstruction) -> HloInstruction | None:
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


def is_row_major(shape: Shape) -> bool:
    return shape.is_tuple or shape.is_row_major


class _ModuleBuilder:
    """Rewrites the sequential computations of a module (ENTRY, loop bodies
    and conditions, branches) so that every instruction is a thunk op:
    calls inlined, GEMM fusions opened, reshapes that keep the bytes made
    bitcasts, and every other op wrapped in its own fusion."""

    def __init__(self, module: HloModule, max_macs: int | None = None):
        self.module = module
        # GEMM fusions larger than this are opened (see prepare_module).
        self.max_macs = max_macs
        self.names: set[str] = {inst.name for comp in module.computations
                                 for inst in comp.instructions}
        self.comp_names: set[str] = {c.name for c in module.computations}
        self.rewritten: dict[int, HloComputation] = {}
        self.new_computations: list[HloComputation] = []
        self.wrapped = 0

    def unique(self, base: str) -> str:
        """An instruction name free in the module (taken from then on)."""
        name = free_name(self.names, base)
        self.names.add(name)
        return name

    def unique_comp(self, base: str) -> str:
        """A computation name free in the module (taken from then on)."""
        name = free_name(self.comp_names, base)
        self.comp_names.add(name)
        return name

    def build(self) -> HloModule:
        entry = self.module.entry
        new_entry = self.rewrite(entry)
        computations = reachable_computations(new_entry)
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
            return self._emit(out, clone)
        if op == "fusion":
            dot = gemm_fusion(inst)
            if dot is not None and not _is_gemm_kernel(inst, self.max_macs):
                return self._open_fusion(inst, ops, out)
            return self._emit(out, inst.clone_with(ops))
        if op == "reshape" and is_row_major(inst.shape) and \
                is_row_major(inst.operands[0].shape):
            return self._emit(out, inst.clone_with(ops, opcode="bitcast"))
        if op == "bitcast-convert" and _same_bytes(inst.shape, inst.operands[0].shape):
            return self._emit(out, inst.clone_with(ops, opcode="bitcast"))
        if op == "copy" and inst.shape.minor_to_major != inst.operands[0].shape.minor_to_major:
            return self._wrap(inst, ops, out)
        if op == "fft":
            return self._fft(inst, ops, out)
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
        from ..hlo.passes.custom_call_layouts import required_operand_shapes
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
        if operand is not None and not is_row_major(operand.shape):
            shape = operand.shape
            relayout = HloInstruction(
                self.unique(f"{inst.name}.operand_relayout"), "copy",
                Shape(shape.element_type, tuple(shape.dims), default_layout(len(shape.dims))),
                [operand], {}, None, None, inst.location)
            operand = self._wrap(relayout, [operand], out)
            ops = [operand, *ops[1:]]
        if is_row_major(inst.shape):
            return self._emit(out, inst.clone_with(ops))
        shape = inst.shape
        row_major = Shape(shape.element_type, tuple(shape.dims),
                          default_layout(len(shape.dims)))
        fft = self._emit(out, inst.clone_with(ops, shape=row_major))
        relayout = HloInstruction(self.unique(f"{inst.name}.result_relayout"), "copy", shape,
                                  [fft], {}, None, None, inst.location)
        return self._wrap(relayout, [fft], out)

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


def _is_gemm_kernel(inst: HloInstruction, max_macs: int | None = None) -> bool:
    """Whether a GEMM fusion compiles as one kernel of the GEMM emitter:
    XLA:GPU's __triton_gemm (and nested) fusions the emitter takes. The
    others (XLA:CPU's __ynn_fusion, cuBLAS fusions, bodies the emitter
    refuses: the analysis' note says why) are opened into a gemm thunk and
    kernels for the rest."""
    from ..analysis.fusion import choose_emitter, fusion_roots
    from ..analysis.gemm import fusion_backend_kind, is_gemm_fusion_kind, multiply_adds
    if not is_gemm_fusion_kind(fusion_backend_kind(inst)):
        return False
    try:
        choice = choose_emitter(fusion_roots(inst.attrs["calls"]))
    except XlaGpuError:
        return False
    if choice.kind != "gemm":
        return False
    return max_macs is None or multiply_adds(choice.heroes[0]) <= max_macs   # the dot


def _is_handler_call(inst: HloInstruction) -> bool:
    from ..hlo.passes.custom_call_layouts import is_handler_call
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


def reachable_computations(entry: HloComputation) -> list[HloComputation]:
    """Computations reachable from `entry`, callees before callers; the
    last callee of the last instruction is walked first (the order the
    thunk emitter and kernel names have always followed)."""
    return post_order([entry], lambda comp: callees(comp)[::-1])


def prepare_module(module: HloModule, *, optimize: bool | None = None,
                   dump_dir: str | os.PathLike | None = None, dump_regex: str = ".*",
                   fallback_unfused: bool = False,
                   emulates_grid: bool = False,
                   autotune=None) -> tuple[HloModule, list[str]]:
    """The module as the thunk emitter takes it, and notes on how it got
    there. `optimize`: None (default) runs the HLO pass pipeline on modules
    without fusions; True always; False never (each op its own fusion).
    A pass that fails raises (HloError / UnsupportedError as the pass
    raised it, anything else as a CompileError), naming the pass; with
    `fallback_unfused` the module is compiled without the pipeline instead,
    each op its own fusion (`xla_gpu.compile` reads its default from
    XLA_GPU_UNFUSED_FALLBACK). `emulates_grid` (the cpu target): only small
    GEMMs become GEMM kernels (HOST_GEMM_KERNEL_MAX_MACS multiply-adds
    where the pipeline fuses, HOST_SHARED_MAX_MACS for XLA's own GEMM
    fusions; the emulated kernel is slower than BLAS past that), larger
    ones a gemm thunk with kernels for the rest.
    `autotune(module) -> notes`: tunes the GEMM fusions the pipeline
    formed (`program.autotune`), before their split-k rewrite."""
    from ..hlo.passes import loop_state_ordering
    from ..hlo.passes.copy_insertion import CopyInsertion
    notes: list[str] = []
    given = module
    entry = module.entry
    has_fusions = any(i.opcode == "fusion" for c in reachable_computations(entry)
                      for i in c.instructions)
    run_passes = (not has_fusions) if optimize is None else optimize
    from ..analysis.gemm import HOST_SHARED_MAX_MACS
    max_macs = HOST_GEMM_KERNEL_MAX_MACS if emulates_grid else None
    optimized = False
    if run_passes:
        from ..hlo.passes import optimize as optimize_hlo
        try:
            # cuBLASLt epilogues on cuda; on the cpu target the elementwise
            # kernel after the BLAS product beats numpy doing it in the thunk.
            module = optimize_hlo(module, dump_dir=dump_dir, dump_regex=dump_regex,
                                  gemm_fusion_max_multiply_adds=max_macs,
                                  gemm_epilogues=not emulates_grid)
            notes.append("optimized by xla_gpu.hlo.passes")
            optimized = True
        except Exception as e:   # noqa: BLE001 - re-raised, or the opt-out
            if not fallback_unfused:
                raise _pass_failure(e) from e
            notes.append(f"{_pass_failure(e)}: each op is its own fusion "
                         "(fallback_unfused)")
    if optimized and autotune is not None:
        notes.extend(autotune(module))
    if not optimized:
        # Without the pipeline, still no sharding annotation reaches the
        # thunks (one device: each is its operand), and loops read their
        # state in the layout their body declares.
        module = _without_sharding_annotations(module)
        module = _without_control_dep_calls(module)
        module = _with_control_flow_layouts(module)
    # Top-k too long for one kernel -> sort + slice; stable sorts of several
    # kernels get their tie-break index as an operand (a buffer); large
    # convolutions become im2col + gemm.
    module, op_notes = rewrite_for_op_kernels(module, emulates_grid)
    notes.extend(op_notes)
    # XLA's __triton_gemm fusions: nested operand fusions inlined, split_k
    # partial sums given their reduction kernel.
    from ..hlo.passes.gemm_fusion import prepare_gemm_fusions
    module, gemm_notes = prepare_gemm_fusions(module)
    notes.extend(gemm_notes)
    # The GEMM kernels' bound: the pipeline's where it fused, else (XLA's
    # own GEMM fusions on the cpu target) the emulated kernel's.
    builder = _ModuleBuilder(module, HOST_SHARED_MAX_MACS if emulates_grid and not optimized
                             else max_macs)
    prepared = builder.build()
    if module is not given:
        # The optimized copy the builder read (the caller has the module it
        # gave): what `prepared` does not share of it is done with.
        module.release(keep=prepared)
    if builder.wrapped:
        notes.append(f"{builder.wrapped} op(s) outside fusions wrapped in their own fusion")
    # Copies where an in-place update or a loop would overwrite a value still
    # needed (a no-op on modules XLA or the pass pipeline already copied).
    if CopyInsertion().run(prepared):
        notes.append("copy insertion added copies")
    ordered = loop_state_ordering.order_loop_state_updates(prepared)
    if ordered:
        notes.append(f"{ordered} control edge(s): loop state read before it is overwritten")
    return prepared, notes


def _without_sharding_annotations(module: HloModule) -> HloModule:
    """`module`, or a copy without its sharding-annotation custom calls (its
    host offloads, the partitioner's or jax's, as copies to host memory and
    back)."""
    from ..hlo.passes.host_offloading import HostOffloader, HostOffloadMarker, has_host_moves
    from ..hlo.passes.sharding_annotations import (ShardingAnnotationRemover,
                                                   is_sharding_annotation)
    if not any(is_sharding_annotation(i) for c in module.computations
               for i in c.instructions) and not has_host_moves(module):
        return module
    module = module.clone()
    ShardingAnnotationRemover().run(module)
    HostOffloadMarker().run(module)
    HostOffloader().run(module)
    return module


def _without_control_dep_calls(module: HloModule) -> HloModule:
    """`module`, or a copy with jax's control_dep calls as control edges."""
    from ..hlo.passes.control_dep_converter import ControlDepConverter, has_control_dep_calls
    if not has_control_dep_calls(module):
        return module
    module = module.clone()
    ControlDepConverter().run(module)
    return module


def _with_control_flow_layouts(module: HloModule) -> HloModule:
    """`module`, or a copy with copies where a while, conditional or call
    and its computation disagree on a layout (ControlFlowLayouts)."""
    from ..hlo.passes.control_flow_layouts import ControlFlowLayouts
    if not any(i.opcode in ("while", "conditional", "call")
               for c in module.computations for i in c.instructions):
        return module   # nothing to reconcile: no copy of the module
    copy = module.clone()
    return copy if ControlFlowLayouts().run(copy) else module


def _pass_failure(error: Exception) -> XlaGpuError:
    """The error a failed HLO pass pipeline raises: the pass named; a
    limitation or a module error the pass reported keeps its type (it names
    the instruction), anything else is a compiler bug (CompileError)."""
    from ..hlo.passes.pipeline import failed_pass
    name = failed_pass(error)
    where = f"HLO pass '{name}'" if name else "the HLO pass pipeline"
    if type(error) in (HloError, UnsupportedError):
        return type(error)(f"{where}: {error}")
    if isinstance(error, RecursionError):
        return CompileError(f"{where}: the module nests too deeply for it")
    return CompileError(f"{where} failed: {type(error).__name__}: {error}")


# The opcodes `rewrite_for_op_kernels` may rewrite.
_OP_KERNEL_REWRITTEN = frozenset({"topk", "custom-call", "sort", "convolution"})


def rewrite_for_op_kernels(module: HloModule, emulates_grid: bool = False
                           ) -> tuple[HloModule, list[str]]:
    """The HLO rewrites the sort, top-k and convolution kernels need before
    buffer assignment: top-k ops too long for one kernel decomposed into
    sort + slices (TopkDecomposer), stable sorts of several kernels given
    their tie-break index as an operand (StableSortExpander), large
    convolutions lowered to im2col + gemm (ConvolutionLowering; on the cpu
    target, `emulates_grid`, nearly all of them). Returns the
    module (a rewritten copy when anything changed; `module` itself is never
    modified) and notes."""
    from ..analysis.sort import fits_one_kernel, is_topk, needs_index_operand
    from ..hlo.passes.convolution_lowering import ConvolutionLowering, lowers_to_gemm
    from ..hlo.passes.stable_sort_expander import expand_stable_sorts
    from ..hlo.passes.topk_decomposer import decompose_topk

    def wanted(m: HloModule) -> bool:
        for comp in m.computations:
            for inst in comp.instructions:
                # Only these opcodes can answer yes below (a top-k is a topk
                # or a custom call): the rest are passed over unasked.
                if inst.opcode not in _OP_KERNEL_REWRITTEN:
                    continue
                if is_topk(inst):
                    try:
                        if not fits_one_kernel(inst):
                            return True
                    except HloError:
                        continue   # reported by the thunk emitter, naming it
                elif needs_index_operand(inst):
                    return True
                elif inst.opcode == "convolution" and lowers_to_gemm(inst, emulates_grid):
                    return True
        return False

    if not wanted(module):
        return module, []
    module = module.clone()
    notes = []
    topk = decompose_topk(module)
    if topk:
        notes.append(f"{topk} top-k op(s) too long for one kernel decomposed into "
                     "sort + slice")
    stable = expand_stable_sorts(module)
    if stable:
        notes.append(f"{stable} stable sort(s) of several kernels given an iota "
                     "tie-break operand")
    ConvolutionLowering(emulates_grid).run(module)
    return module, notes
