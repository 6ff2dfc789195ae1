"""The kernels of ops XLA runs outside fusions, compiled through the kernel
compiler: a sort (the sort emitter's sequence of bitonic kernels), a top-k
(one kernel) and a convolution (the direct-convolution kernel).

    compiled = op_kernels.compile_sort(sort_instruction, target="cpu")
    compiled.run(*operands)            # numpy in, numpy out: a test harness
    compiled.kernels                   # what the thunk emitter launches

The plan of a sort's kernels is `analysis.sort`'s; each kernel's fusion is
compiled by `kernel_compiler.compile_kernel` (one cache, one key recipe: a
kernel's config is part of its key), or by the caller's `build` (a program
builds them on its compile threads, from `op_kernel_fusions`). Laying the
kernels over a program's buffers is the thunk emitter's
(`xla_gpu.program.thunk_emitter`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import kernel_compiler
from .analysis.sort import (INDEX_TYPE, SortKernelConfig, check_comparator, check_sort,
                            comparator_of, is_stable, physical_last_dim, plan_sort,
                            sort_geometry, sort_kernel_fusion, topk_k, topk_kernel_fusion,
                            topk_operand_comparator)
from .errors import HloError, UnsupportedError
from .hlo import HloInstruction, Shape

__all__ = ["compile_sort", "compile_topk", "compile_convolution", "op_kernel_fusions",
           "CompiledSort", "SortKernel", "CompiledConvolution", "Build"]

# What compiles one kernel fusion of an op: `fusion -> Executable`.
Build = Callable[[Any], Any]


def _default_build(target: str, arch: str, cache: bool, lower_only: bool) -> Build:
    def build(fusion):
        return kernel_compiler.compile_kernel(fusion, target, arch, cache=cache,
                                              lower_only=lower_only)
    return build


@dataclass
class SortKernel:
    """A compiled kernel of a sort and what it reads: the sort's operands
    (then it writes the results) or the results in place."""
    config: SortKernelConfig
    executable: Any        # kernel_compiler.Executable

    @property
    def reads_operands(self) -> bool:
        return self.config.reads_operands

    @property
    def key(self) -> str:
        return self.executable.key


@dataclass
class CompiledSort:
    """A sort (or top-k) as a sequence of kernels, run in order: each reads
    the operands and writes the results, or updates the results in place;
    `copy_first`: the operands are copied into the results before the
    first kernel (it works in place)."""
    name: str
    kernels: list[SortKernel]
    operand_shapes: list[Shape]
    result_shapes: list[Shape]
    copy_first: bool
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if not self.kernels:
            return "nothing to sort: results are copies of the operands"
        return f"{len(self.kernels)} kernel(s): " + \
            "; ".join(k.config.describe() for k in self.kernels)

    def run(self, *operands: np.ndarray) -> tuple[np.ndarray, ...]:
        """Runs the kernels on host arrays (the kernels' target: cpu runs
        them on the host, cuda on the GPU through the runtime) in
        logical order; returns the results."""
        arrays = [np.ascontiguousarray(o) for o in operands]
        shapes = self.result_shapes
        if len(arrays) != len(self.operand_shapes):
            raise HloError(f"{self.name}: takes {len(self.operand_shapes)} operands, "
                           f"got {len(arrays)}")
        for k, (a, s) in enumerate(zip(arrays, self.operand_shapes)):
            if tuple(a.shape) != tuple(s.dims):
                raise HloError(f"{self.name}: operand {k} has shape {list(a.shape)}, "
                               f"expected {s}")
        if not self.kernels:
            if self.copy_first:
                return tuple(np.array(a) for a in arrays)
            return tuple(np.zeros(s.dims, s.dtype) for s in shapes)
        current = [np.ascontiguousarray(s.physical_from_logical(a))
                   for a, s in zip(arrays, self.operand_shapes)]
        for kernel in self.kernels:
            current = list(kernel.executable.run(*current))
        return tuple(s.logical_from_physical(a) for a, s in zip(current, shapes))


def _sort_plan(inst: HloInstruction):
    """The checked sort's kernel plan (`analysis.sort.plan_sort`)."""
    from .emitters.types import check_supported
    if inst.opcode != "sort":
        raise inst.error("compile_sort takes a sort instruction")
    check_sort(inst)
    for operand in inst.operands:
        check_supported(operand.shape, inst)
    types = [o.shape.element_type for o in inst.operands]
    check_comparator(inst, comparator_of(inst), types)
    dims, dim, _ = sort_geometry(sort_kernel_fusion(inst, None).roots[0])
    try:
        return plan_sort(dims, dim, types, stable=is_stable(inst))
    except UnsupportedError as e:
        raise inst.unsupported(str(e)) from None


def _sort_fusions(inst: HloInstruction, plan) -> dict[SortKernelConfig, Any]:
    """The fusion of each distinct kernel of the plan, in plan order: a long
    sort repeats kernels (the same tiled steps after every merge across
    tiles, the same global step in several stages), each compiled once and
    launched where the plan has it."""
    fusions: dict[SortKernelConfig, Any] = {}
    for k, config in enumerate(plan.kernels):
        if config not in fusions:
            fusions[config] = sort_kernel_fusion(
                inst, config, name=f"{inst.name}_{k}" if len(plan.kernels) > 1 else inst.name)
    return fusions


def compile_sort(inst: HloInstruction, *, target: str = "cpu", arch: str = "sm_90",
                 cache: bool = True, lower_only: bool = False,
                 build: Build | None = None) -> CompiledSort:
    """The kernels of an HLO `sort` instruction for `target` ("cpu" or
    "cuda"). A stable sort that needs several kernels must have had its
    tie-break index made an operand (hlo.passes.stable_sort_expander).
    `lower_only`: as `kernel_compiler.compile_kernel`'s. `build`: compiles
    each kernel's fusion instead (then `target`, `arch`, `cache` and
    `lower_only` are its own)."""
    plan = _sort_plan(inst)
    build = build or _default_build(target, arch, cache, lower_only)
    built = {config: build(fusion) for config, fusion in _sort_fusions(inst, plan).items()}
    kernels = [SortKernel(config, built[config]) for config in plan.kernels]
    copy_first = not kernels or not kernels[0].reads_operands
    return CompiledSort(inst.name, kernels, [o.shape for o in inst.operands],
                        list(inst.shape.leaves()), copy_first,
                        [plan.describe()] if kernels else [])


def compile_topk(inst: HloInstruction, *, target: str = "cpu", arch: str = "sm_90",
                 cache: bool = True, lower_only: bool = False,
                 build: Build | None = None) -> CompiledSort:
    """The one kernel of a top-k (a `topk` op or a TopK custom call): reads
    the operand, writes (values, indices). A row that fits a tile is sorted
    there; a longer one, with k at most `analysis.sort.TOPK_SELECT_MAX_K`,
    has each thread select its best k of a part of the row first; other
    top-ks are decomposed into a sort (hlo.passes.topk_decomposer).
    `lower_only`, `build`: as `compile_sort`'s."""
    k, x, leaves, config = _topk_plan(inst)
    if config is None:
        return CompiledSort(inst.name, [], [x], list(leaves), False,
                            ["empty result: nothing to launch"])
    build = build or _default_build(target, arch, cache, lower_only)
    exe = build(topk_kernel_fusion(inst, config))
    return CompiledSort(inst.name, [SortKernel(config, exe)], [x], list(leaves), False,
                        [f"top-{k}: " + config.describe()])


def _topk_plan(inst: HloInstruction):
    """(k, operand shape, result shapes, the kernel's config or None when
    there is nothing to launch) of a checked top-k."""
    from .emitters.types import check_supported
    k = topk_k(inst)
    x = inst.operands[0].shape
    leaves = inst.shape.leaves()
    check_supported(x, inst)
    layouts = {tuple(s.layout) for s in (x, *leaves) if s.layout is not None and s.rank > 1
               and not s.is_row_major}
    if layouts and len({s.major_to_minor for s in (x, *leaves)}) > 1:
        raise inst.unsupported("top-k needs its operand and results in one layout, got "
                               + ", ".join(map(str, (x, *leaves))))
    check_comparator(inst, topk_operand_comparator(inst), [x.element_type, INDEX_TYPE])
    if k == 0 or x.num_elements == 0:
        return k, x, leaves, None
    try:
        plan = plan_sort(x.physical_shape().dims, physical_last_dim(x), [x.element_type],
                         top_k=k)
    except UnsupportedError as e:
        raise inst.unsupported(f"{e}: decompose it into a sort first "
                               "(hlo.passes.topk_decomposer)") from None
    (config,) = plan.kernels
    return k, x, leaves, config


@dataclass
class CompiledConvolution:
    """A convolution kernel (`executable` None: an empty result, nothing to
    launch). `run(*operands)` (numpy, logical order) returns the result."""
    name: str
    executable: Any
    config: Any            # emitters.convolution.ConvolutionKernelConfig
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return "" if self.executable is None else self.executable.key

    def describe(self) -> str:
        if self.executable is None:
            return "empty result: no kernel"
        s = self.executable.spec
        return f"direct {self.config.kind} convolution, {s.blocks}x{s.threads} threads"

    def run(self, *operands: np.ndarray) -> np.ndarray:
        shapes = self.config.operand_shapes
        if len(operands) != len(shapes):
            raise HloError(f"{self.name}: takes {len(shapes)} operands, got {len(operands)}")
        physical = []
        for k, (a, s) in enumerate(zip(operands, shapes)):
            a = np.asarray(a)
            if tuple(a.shape) != tuple(s.dims):
                raise HloError(f"{self.name}: operand {k} has shape {list(a.shape)}, "
                               f"expected {s}")
            physical.append(np.ascontiguousarray(s.physical_from_logical(a)))
        if self.executable is None:
            return np.zeros(self.config.result_shape.dims,
                            self.config.result_shape.dtype)
        (out,) = self.executable.run(*physical)
        return self.config.result_shape.logical_from_physical(out)


def compile_convolution(inst: HloInstruction, *, target: str = "cpu", arch: str = "sm_90",
                        cache: bool = True, lower_only: bool = False,
                        build: Build | None = None) -> CompiledConvolution:
    """The direct-convolution kernel of an HLO convolution or a cuDNN
    convolution custom call, for `target` ("cpu" or "cuda"). `lower_only`,
    `build`: as `compile_sort`'s."""
    from .emitters.convolution import convolution_kernel_fusion
    fusion = convolution_kernel_fusion(inst)
    if fusion.config.result_shape.num_elements == 0:
        return CompiledConvolution(inst.name, None, fusion.config)
    build = build or _default_build(target, arch, cache, lower_only)
    return CompiledConvolution(inst.name, build(fusion), fusion.config)


def op_kernel_fusions(inst: HloInstruction) -> list:
    """The fusions `compile_sort`, `compile_topk` or `compile_convolution`
    (by `inst`'s opcode) hands its `build`, in the order it does; none for
    another op. Raises what those raise for an op they refuse."""
    if inst.opcode == "sort":
        return list(_sort_fusions(inst, _sort_plan(inst)).values())
    if inst.opcode == "topk":
        config = _topk_plan(inst)[3]
        return [] if config is None else [topk_kernel_fusion(inst, config)]
    if inst.opcode == "convolution":
        from .emitters.convolution import convolution_kernel_fusion
        fusion = convolution_kernel_fusion(inst)
        return [] if fusion.config.result_shape.num_elements == 0 else [fusion]
    return []
