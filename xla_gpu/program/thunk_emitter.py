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
from ..hlo import collectives as C
from ..runtime.buffers import TOKEN_TYPE, BufferSlice, token_ref
from ..runtime.collective_thunks import (AllGatherThunk, AllReduceThunk, AllToAllThunk,
                                         CollectiveBroadcastThunk, CollectivePermuteThunk,
                                         CollectiveThunk, DeviceIdThunk, RaggedAllToAllThunk,
                                         ReduceScatterThunk)
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
# The collectives' thunks, by the opcode of the collective (an async start
# makes the thunk of the collective it starts).
_COLLECTIVE_THUNKS: dict[str, type[CollectiveThunk]] = {
    "all-reduce": AllReduceThunk, "all-gather": AllGatherThunk,
    "reduce-scatter": ReduceScatterThunk, "all-to-all": AllToAllThunk,
    "collective-permute": CollectivePermuteThunk,
    "collective-broadcast": CollectiveBroadcastThunk,
    "ragged-all-to-all": RaggedAllToAllThunk,
}
# A reducer whose root is one of these on its two parameters is an
# all-reduce's ReductionKind.
_REDUCTIONS = {"add": "sum", "multiply": "product", "maximum": "max", "minimum": "min",
               "and": "and", "or": "or"}
# The done of an async pair, and the shape index of its start's value it is.
_DONE_OF = {"all-reduce-done": (), "all-gather-done": (1,), "collective-permute-done": (1,),
            "async-done": (1,), "async-update": ()}


class ThunkEmitter:
    """The thunks of a prepared module's computations (`emit(comp)`), over
    the slices `assignment` gave its values, in `schedule`'s order."""

    def __init__(self, module: HloModule, schedule, assignment, kernels: ProgramKernels,
                 target: str, num_replicas: int = 1, num_partitions: int = 1):
        self.module, self.schedule, self.assignment = module, schedule, assignment
        self.kernels, self.target = kernels, target
        self.backend = backends.get(target)
        # The devices the program runs on (its collectives' groups are
        # checked against them).
        self.num_replicas, self.num_partitions = num_replicas, num_partitions

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
        if op in ("partition-id", "replica-id"):
            ref = self.ref(inst)
            if self.num_replicas * self.num_partitions == 1:   # always 0
                return [MemsetThunk(inst.name, ref.slice, 0, 4, 1)]
            self._check_target(inst)
            return [DeviceIdThunk(inst.name, op.split("-")[0], ref)]
        if op in C.COLLECTIVE_OPCODES:
            base = C.ASYNC_COLLECTIVE_STARTS.get(op, op)
            # all-gather-start and collective-permute-start are (operands,
            # results, context...); all-reduce-start is its results.
            index = (1,) if op in ("all-gather-start", "collective-permute-start") else ()
            return [self.emit_collective(inst, inst, base, list(inst.operands), index)]
        if op == "async-start":
            return [self.emit_async_start(inst)]
        if op in _DONE_OF:
            # The work was done at the start: its result (buffer assignment
            # gives both one buffer; a copy where it did not).
            return self.copies(inst.name, inst.operands[0], _DONE_OF[op], inst, ())
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

    # collectives -------------------------------------------------------------------
    def emit_collective(self, inst: HloInstruction, collective: HloInstruction, opcode: str,
                        operands: list[HloInstruction],
                        result_index: tuple[int, ...]) -> CollectiveThunk:
        """The thunk of `collective` (an `opcode` collective: `inst` itself,
        or the collective an async start `inst` wraps) reading `operands`'
        leaves and writing `inst`'s leaves under `result_index`."""
        a = collective.attrs
        if opcode == "collective-permute" and "slice_sizes" in a:
            raise inst.unsupported("the in-place collective-permute (input, output and "
                                   "start indices) is not supported")
        for operand in operands:
            if operand.shape.is_tuple:
                raise inst.unsupported(f"operand '{operand.name}' is a tuple; collectives "
                                       "take arrays")
        refs = [self.ref(o) for o in operands]
        results = [self.ref(inst, result_index + index)
                   for index, _ in leaves(subshape(inst.shape, result_index))]
        mode = C.group_mode(collective)
        groups = C.instruction_groups(collective)
        R, P = self.num_replicas, self.num_partitions
        kwargs: dict = {}
        try:
            if opcode == "collective-permute":
                pairs = C.parse_source_target_pairs(a.get("source_target_pairs", "{}"))
                count = P if mode is C.GroupMode.CROSS_PARTITION else R
                for pair in pairs:
                    if max(pair) >= count:
                        kind = "partition" if count == P else "replica"
                        raise HloError(f"the pair {{{pair[0]},{pair[1]}}} names {kind} "
                                       f"{max(pair)}, but there are {count}")
                kwargs["pairs"] = [tuple(p) for p in pairs]
            else:
                # Every id names a device, and every device is in a group.
                covered = {d for g in C.device_groups(groups, mode, R, P) for d in g}
                if len(covered) != R * P:
                    left = sorted(set(range(R * P)) - covered)
                    raise HloError(f"devices {left[:8]}{'...' if len(left) > 8 else ''} "
                                   f"are in none of the replica groups ({mode.value})")
        except HloError as e:
            raise inst.error(f"{e} (the program runs on {R} replica(s) x {P} "
                             "partition(s))") from None
        if opcode in ("all-reduce", "reduce-scatter"):
            kwargs["reduction"] = _reduction_kind(inst, collective)
        if opcode in ("all-gather", "reduce-scatter") or \
                (opcode == "all-to-all" and "dimensions" in a):
            dim = C.collective_dimension(collective, opcode)
            if dim is None:
                raise inst.error(f"{opcode} needs dimensions={{d}}")
            kwargs["dimension"] = dim
            if opcode == "all-to-all" and len(refs) != 1:
                raise inst.unsupported("an all-to-all with dimensions={d} and several "
                                       "operands")
        elif opcode == "all-to-all" and len(refs) != len(results):
            raise inst.error(f"the tuple all-to-all has {len(refs)} operands and "
                             f"{len(results)} results")
        if opcode == "ragged-all-to-all":
            if len(refs) != len(C.RAGGED_OPERANDS) or len(results) != 1:
                raise inst.error(f"ragged-all-to-all takes {len(C.RAGGED_OPERANDS)} operands "
                                 f"to 1 result, has "
                                 f"{len(refs)} to {len(results)}")
        elif len(results) != len(refs) and opcode != "all-to-all":
            raise inst.error(f"{len(refs)} operands but {len(results)} results")
        thunk = _COLLECTIVE_THUNKS[opcode](
            inst.name, operands=refs, results=results, replica_groups=[list(g) for g in groups],
            mode=mode.value, channel_id=C.channel_id(collective), hlo_opcode=inst.opcode,
            **kwargs)
        self._check_target(inst, thunk)
        return thunk

    def _check_target(self, inst: HloInstruction, thunk: CollectiveThunk | None = None) -> None:
        """The cuda target runs collectives with NCCL: one NCCL cannot run
        over its buffers as laid out is refused here (device ids need
        nothing)."""
        if self.backend.calls_vendor_libraries and thunk is not None:
            reason = thunk.nccl_refusal()
            if reason:
                raise inst.unsupported(f"on the {self.target} target (NCCL): {reason}; the "
                                       "cpu target runs it on emulated devices")

    def emit_async_start(self, inst: HloInstruction) -> CollectiveThunk:
        """An async-start wrapping a collective: the collective's thunk
        over the start's operands, writing the start's result (shape index
        1 of its (operands, result, context) value)."""
        comp = inst.attrs.get("calls")
        if isinstance(comp, list) and len(comp) == 1:
            comp = comp[0]
        if not isinstance(comp, HloComputation) or comp.root is None:
            raise inst.error("async-start needs calls=<computation>")
        root = comp.root
        if root.opcode not in _COLLECTIVE_THUNKS or \
                any(o.opcode != "parameter" for o in root.operands) or \
                len(comp.instructions) != len(comp.parameters) + 1:
            raise inst.unsupported(f"an async-start of computation '{comp.name}': only a "
                                   "collective of the computation's parameters runs "
                                   "asynchronously here")
        shape = inst.shape
        if not shape.is_tuple or len(shape.tuple_shapes) < 2:
            raise inst.error(f"async-start's shape {shape} is not (operands, result, "
                             "context...)")
        operands = []
        for o in root.operands:
            if o.parameter_number >= len(inst.operands):
                raise inst.error(f"computation '{comp.name}' reads parameter "
                                 f"{o.parameter_number} of {len(inst.operands)} operands")
            operands.append(inst.operands[o.parameter_number])
        return self.emit_collective(inst, root, root.opcode, operands, (1,))

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
        compiled = op_kernels.compile_sort(inst, build=self.kernels.op_build(inst))
        operands = [self.slice(o) for o in inst.operands]
        results = [self.slice(inst, index) for index, _ in leaves(inst.shape)]
        return SortThunk(inst.name, self._sort_kernels(inst.name, compiled, operands, results),
                         compiled.describe())

    def emit_topk(self, inst: HloInstruction, operand: HloInstruction) -> Thunk:
        """One kernel sorting each row in shared memory and writing the
        first k (values, indices); longer rows were decomposed into sort +
        slice before buffer assignment (hlo.passes.topk_decomposer)."""
        compiled = op_kernels.compile_topk(inst, build=self.kernels.op_build(inst))
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
        compiled = op_kernels.compile_convolution(inst, build=self.kernels.op_build(inst))
        thunks: list[Thunk] = []
        if compiled.executable is not None:
            spec = compiled.executable.spec
            args = [self.slice(o) for o in inst.operands]
            args.append(self.slice(inst, (0,) if inst.shape.is_tuple else ()))
            thunks.append(KernelThunk(inst.name, self.kernels.register(compiled.executable),
                                      args, [len(args) - 1], spec.threads, spec.blocks,
                                      spec.shared_bytes))
        return ConvolutionThunk(inst.name, thunks, compiled.describe())


def _reduction_kind(inst: HloInstruction, collective: HloInstruction) -> str:
    """The ReductionKind of an all-reduce's or reduce-scatter's reducer
    (`to_apply`): add, multiply, maximum, minimum, and or or of its two
    scalar parameters; anything else is refused, naming the instruction."""
    comp = collective.attrs.get("to_apply")
    if not isinstance(comp, HloComputation) or comp.root is None:
        raise inst.error(f"'{collective.opcode}' needs to_apply=<computation>")
    from ..hlo.interpreter.reductions import simple_binary
    root = comp.root
    etype = None if root.shape.is_tuple else root.shape.element_type
    op = simple_binary(comp, etype) if etype is not None else None
    if op in _REDUCTIONS:
        return _REDUCTIONS[op]
    raise inst.unsupported(f"the reducer '{comp.name}' (root {root.opcode}) is not one "
                           "of add, multiply, maximum, minimum, and, or of its two "
                           "parameters")


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


