"""Thunk emission: a prepared, scheduled, buffer-assigned module's
instructions in schedule order -> kernel / copy / memset / gemm / fft /
while / conditional / custom_call / sort / topk / convolution thunks over
buffer slices. Kernels come from `ProgramKernels` (fusions) and
`xla_gpu.op_kernels` (sorts, top-k, convolutions); this is the one place
that lays them over the program's buffers.
"""

from __future__ import annotations

import json

import numpy as np

from .. import backends, op_kernels
from ..hlo.passes.convolution_lowering import CONVOLUTION_OP_TYPE
from ..errors import CompileError, HloError
from ..hlo import HloComputation, HloInstruction, HloModule
from ..hlo.cublas import cublas_gemm
from ..hlo.in_place import in_place_outputs
from ..runtime.buffers import TOKEN_TYPE, BufferSlice, token_ref
from ..runtime.fft import FftConfig, cufft_layout_error
from ..runtime.gemm import EPILOGUES, CublasPlanError, GemmConfig, cublas_plan
from ..runtime.spec import ArgSpec
from ..runtime.thunks import (ArrayRef, ConditionalThunk, ConvolutionThunk, CopyThunk,
                              CustomCallThunk, FftThunk, GemmThunk, KernelThunk,
                              MemsetThunk, SortThunk, Thunk, TopKThunk, WhileThunk)
from .kernels import ProgramKernels, all_outputs_empty, broadcast_constant
from .shapes import leaves, subshape

__all__ = ["ThunkEmitter"]

# jax's sharding annotations: identities on one device.
_SHARDING_TARGETS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape")
_CUBLAS_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8")


class ThunkEmitter:
    """The thunks of a prepared module's computations (`emit(comp)`), over
    the slices `assignment` gave its values, in `schedule`'s order."""

    def __init__(self, module: HloModule, schedule, assignment, kernels: ProgramKernels,
                 target: str):
        self.module, self.schedule, self.assignment = module, schedule, assignment
        self.kernels, self.target = kernels, target
        self.backend = backends.get(target)

    # slices -----------------------------------------------------------------
    def has_slice(self, inst: HloInstruction, index: tuple[int, ...] = ()) -> bool:
        return self.assignment.has_slice(inst, index)

    def slice(self, inst: HloInstruction, index: tuple[int, ...] = ()) -> BufferSlice:
        if not self.assignment.has_slice(inst, index):
            raise CompileError(f"instruction '{inst.name}'{list(index) if index else ''}: "
                               "buffer assignment gave it no slice")
        return self.assignment.slice(inst, index)

    def ref(self, inst: HloInstruction, index: tuple[int, ...] = ()) -> ArrayRef:
        shape = subshape(inst.shape, index)
        if shape.is_tuple:
            raise inst.error(f"expected an array at shape index {list(index)}, got {shape}")
        if shape.element_type == TOKEN_TYPE:
            # No bytes and no slice: the entry's token parameters and
            # results are passed over (runtime.program).
            return token_ref()
        layout = tuple(shape.layout) if shape.layout is not None else None
        return ArrayRef(self.slice(inst, index), shape.element_type, tuple(shape.dims), layout)

    def copies(self, name: str, source: HloInstruction, source_index: tuple[int, ...],
               dest: HloInstruction, dest_index: tuple[int, ...]) -> list[Thunk]:
        """Copy thunks moving every leaf of `source`[source_index] into
        `dest`[dest_index] where buffer assignment did not alias them."""
        out: list[Thunk] = []
        shape = subshape(source.shape, source_index)
        for rel, leaf in leaves(shape):
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
        instructions a convolution was lowered to (hlo.passes.
        convolution_lowering) form one convolution thunk."""
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
            if conv is None and not produced:
                continue   # a parameter scheduled between two: no thunk to split them
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
            if inst.shape.element_type == TOKEN_TYPE:
                return []   # a token has no bytes to copy
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
            return [self.emit_topk(inst, inst.operands[0])]
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
        if all_outputs_empty(inst):
            # Nothing to compute: no kernel, no launch (as XLA); the empty
            # results need no bytes written.
            return []
        memset = self._memset(inst, comp)
        if memset is not None:
            return [memset]
        if _scatters_nothing(comp):
            # A scatter of no updates is its operands (the algebraic
            # simplifier's rewrite, for modules that did not run it): each
            # result is its operand, copied where they do not share a buffer.
            pairs = in_place_outputs(inst)
            if len(pairs) == (len(comp.root.operands) - 1) // 2:
                out: list[Thunk] = []
                for k, index in pairs:
                    out += self.copies(inst.name, inst.operands[k], (), inst, index)
                return out
        for operand in inst.operands:
            if operand.shape.is_tuple:
                raise inst.unsupported("a fusion operand is a tuple "
                                       f"('{operand.name}')")
        kernel_id, image = self.kernels.compile(inst, comp)
        spec = image.spec
        outputs = [index for index, _ in leaves(inst.shape)]
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
        thunks.append(KernelThunk(inst.name, kernel_id, args, written, spec.threads,
                                  spec.blocks, spec.shared_bytes))
        return thunks

    def _memset(self, inst: HloInstruction, comp: HloComputation) -> MemsetThunk | None:
        """A fusion that broadcasts a constant of 1, 2 or 4 bytes: XLA's
        memset thunk instead of a kernel."""
        root = comp.root
        value = broadcast_constant(comp)
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
        if self.backend.calls_vendor_libraries:
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
        if self.backend.calls_vendor_libraries:
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
            return [self.emit_topk(inst, inst.operands[0])]
        if target.startswith("__"):
            raise inst.unsupported(f"XLA-internal custom call target "
                                   f"'{target}' has no thunk")
        operands = [self.ref(o, index) for o in inst.operands
                    for index, _ in leaves(o.shape)]
        results = [self.ref(inst, index) for index, _ in leaves(inst.shape)]
        raw = inst.attrs.get("backend_config", "")
        arity = [len(leaves(o.shape)) if o.shape.is_tuple else 0 for o in inst.operands]
        return [CustomCallThunk(inst.name, target, operands, results,
                                raw if isinstance(raw, str) else json.dumps(raw),
                                str(inst.attrs.get("api_version", "")), arity)]

    # sort, topk, convolution --------------------------------------------------------------
    def emit_sort(self, inst: HloInstruction) -> Thunk:
        """The sort emitter's kernels (bitonic stages; see emitters.sort),
        from the operands' slices into the results'."""
        compiled = op_kernels.compile_sort(inst, target=self.target, arch=self.kernels.arch,
                                           cache=self.kernels.cache,
                                           lower_only=self.kernels.link_kernels)
        operands = [self.slice(o) for o in inst.operands]
        results = [self.slice(inst, index) for index, _ in leaves(inst.shape)]
        return SortThunk(inst.name, self._sort_kernels(inst.name, compiled, operands, results),
                         compiled.describe())

    def emit_topk(self, inst: HloInstruction, operand: HloInstruction) -> Thunk:
        """One kernel sorting each row in shared memory and writing the
        first k (values, indices); longer rows were decomposed into sort +
        slice before buffer assignment (hlo.passes.topk_decomposer)."""
        compiled = op_kernels.compile_topk(inst, target=self.target, arch=self.kernels.arch,
                                           cache=self.kernels.cache,
                                           lower_only=self.kernels.link_kernels)
        results = [self.slice(inst, index) for index, _ in leaves(inst.shape)]
        return TopKThunk(inst.name, self._sort_kernels(inst.name, compiled,
                                                       [self.slice(operand)], results),
                         compiled.describe())

    def _sort_kernels(self, name: str, compiled, operands: list[BufferSlice],
                      results: list[BufferSlice]) -> list[Thunk]:
        """Kernel (and copy) thunks running a sort's kernels
        (`op_kernels.CompiledSort`) from `operands` into `results` (the
        sorted arrays' and the results' slices, in order)."""
        out: list[Thunk] = []
        if compiled.copy_first:
            # Copying operand k into result k must not overwrite another
            # operand still to be copied: results share an operand's buffer
            # only at its own index (as XLA's dataflow analysis allows).
            for k, dst in enumerate(results):
                for j, src in enumerate(operands):
                    if j != k and src == dst:
                        raise CompileError(f"sort '{name}': result {k} shares the buffer "
                                           f"of operand {j}; only operand {k} may share it")
            for src, dst, shape in zip(operands, results, compiled.result_shapes):
                if src != dst:
                    size = shape.num_elements * ArgSpec((), shape.element_type) \
                        .storage_dtype.itemsize
                    out.append(CopyThunk(name, src, dst, size))
        for kernel in compiled.kernels:
            spec = kernel.executable.spec
            kernel_id = self.kernels.register(kernel.executable)
            if kernel.reads_operands:
                args = list(operands) + list(results)
                written = list(range(len(operands), len(args)))
            else:
                args = list(results)
                written = list(range(len(args)))
            out.append(KernelThunk(name, kernel_id, args, written, spec.threads,
                                   spec.blocks, spec.shared_bytes))
        return out

    def emit_convolution(self, inst: HloInstruction) -> Thunk:
        """An HLO convolution too small for im2col + gemm (see
        hlo.passes.convolution_lowering), or XLA:GPU's cuDNN convolution
        custom calls (forward, backward input / filter, bias + activation):
        the direct-convolution kernel (emitters.convolution) writing the
        value; the scratch element of a custom call's result tuple is left
        alone."""
        from ..hlo.convolution import CUDNN_CONV_TARGETS
        target = str(inst.attrs.get("custom_call_target", ""))
        if inst.opcode == "custom-call" and target not in CUDNN_CONV_TARGETS:
            raise inst.unsupported(f"cuDNN call '{target}' is not supported "
                                   f"(supported: {', '.join(CUDNN_CONV_TARGETS)})")
        compiled = op_kernels.compile_convolution(inst, target=self.target,
                                                  arch=self.kernels.arch,
                                                  cache=self.kernels.cache,
                                                  lower_only=self.kernels.link_kernels)
        thunks: list[Thunk] = []
        if compiled.executable is not None:
            spec = compiled.executable.spec
            args = [self.slice(o) for o in inst.operands]
            args.append(self.slice(inst, (0,) if inst.shape.is_tuple else ()))
            thunks.append(KernelThunk(inst.name, self.kernels.register(compiled.executable),
                                      args, [len(args) - 1], spec.threads, spec.blocks,
                                      spec.shared_bytes))
        return ConvolutionThunk(inst.name, thunks, compiled.describe())


def _scatters_nothing(comp: HloComputation) -> bool:
    """Whether fusion body `comp` is a scatter with zero-element updates."""
    root = comp.root
    if root is None or root.opcode != "scatter":
        return False
    updates = root.operands[(len(root.operands) + 1) // 2:]
    return bool(updates) and all(u.shape.num_elements == 0 for u in updates)


def _convolution_of(inst: HloInstruction) -> str | None:
    """The convolution an instruction was lowered from (its metadata)."""
    metadata = inst.attrs.get("metadata")
    if isinstance(metadata, dict) and metadata.get("op_type") == CONVOLUTION_OP_TYPE:
        return str(metadata.get("op_name", inst.name))
    return None


def _where(inst: HloInstruction) -> str:
    line = f"line {inst.location.line}: " if inst.location else ""
    return f"{line}instruction '{inst.name}' ({inst.opcode}): "


