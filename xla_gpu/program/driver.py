"""The driver: prepare -> schedule -> buffer assignment -> kernels and
thunks -> command buffers -> a ProgramExecutable."""

from __future__ import annotations

import os
import time
from pathlib import Path

from .. import backends
from .._paths import __version__
from .._progress import stage
from .._trace import complete, span
from ..hlo import HloModule
from ..hlo.printer import module_to_text
from ..runtime import command_buffer
from ..runtime.program import KernelImage, MemoryAnalysis, ProgramExecutable
from .constants import constants
from .kernels import ProgramKernels, kernel_fusions, op_kernel_instructions
from .prepare import prepare_module
from .shapes import leaves
from .thunk_emitter import ThunkEmitter

__all__ = ["compile_program"]


def _memory_analysis(assignment, kernels: dict[str, KernelImage]) -> MemoryAnalysis:
    memory = assignment.memory_analysis()
    # Kernels linked into one binary share it: count it once.
    code = {k.shared_binary() or id(k): k.code_size for k in kernels.values()}
    memory.generated_code_size_in_bytes = sum(code.values())
    return memory


def compile_program(module: HloModule, *, text: str = "", target: str = "cpu",
                    arch: str = "sm_90", cache: bool = True, optimize: bool | None = None,
                    command_buffers: bool = True, memory_limit: int | None = None,
                    dump_dir: str | os.PathLike | None = None, dump_regex: str = ".*",
                    fallback_unfused: bool = False, num_replicas: int | None = None,
                    num_partitions: int | None = None,
                    autotune=None) -> ProgramExecutable:
    """Compiles the ENTRY computation of `module` into a ProgramExecutable
    for `target` ("cpu" or "cuda"; resolve "auto" before). See the
    package docstring; `fallback_unfused`: `prepare_module`'s.
    num_replicas x num_partitions: the devices the program runs on (one
    SPMD program for all of them; default the module header's).
    `autotune(module) -> notes`: `prepare_module`'s (the API passes
    `program.autotune.autotuner`'s when XLA_GPU_AUTOTUNE is on)."""
    # The cyclic collector stays off for the whole compile, not only the
    # HLO passes: emitting the kernels' MLIR and the thunks allocates
    # enough for a hundred young collections on a training step, each
    # walking the module's instructions (operand and user lists point at
    # each other), and almost nothing they leave is cyclic garbage.
    from ..hlo.passes.optimize import cyclic_gc_paused
    with cyclic_gc_paused():
        return _compile_program(module, text=text, target=target, arch=arch, cache=cache,
                                optimize=optimize, command_buffers=command_buffers,
                                memory_limit=memory_limit, dump_dir=dump_dir,
                                dump_regex=dump_regex, fallback_unfused=fallback_unfused,
                                num_replicas=num_replicas, num_partitions=num_partitions,
                                autotune=autotune)


def _compile_program(module: HloModule, *, text: str, target: str, arch: str, cache: bool,
                     optimize: bool | None, command_buffers: bool, memory_limit: int | None,
                     dump_dir: str | os.PathLike | None, dump_regex: str,
                     fallback_unfused: bool, num_replicas: int | None,
                     num_partitions: int | None, autotune) -> ProgramExecutable:
    """`compile_program`, the collector paused."""
    if num_replicas is None:
        num_replicas = module.replica_count
    if num_partitions is None:
        num_partitions = module.num_partitions
    from ..service import assign_buffers, schedule_module
    timings: dict[str, float] = {}
    if dump_dir is not None:
        Path(dump_dir).mkdir(parents=True, exist_ok=True)
        with span("dumps before optimizations", "dump"):
            Path(dump_dir, "before_optimizations.txt").write_text(
                text or module_to_text(module))
            _dump_graph(module, dump_dir, "before_optimizations")
    stage("HLO passes")
    t0 = time.perf_counter()
    prepared, notes = prepare_module(module, optimize=optimize, dump_dir=dump_dir,
                                     emulates_grid=backends.get(target).emulates_grid,
                                     dump_regex=dump_regex,
                                     fallback_unfused=fallback_unfused,
                                     autotune=autotune)
    timings["prepare"] = time.perf_counter() - t0
    complete("prepare (HLO passes)", "compile", t0)
    entry = prepared.entry
    # The kernels start compiling on the pool now: the fusions are final,
    # and the schedule, the buffer assignment and the module's text (this
    # thread) only read the module. (A memory limit may rematerialize,
    # which adds instructions: then they start after the schedule.)
    kernels = ProgramKernels(target, arch, cache, prepared)
    try:
        if memory_limit is None:
            kernels.prefetch_op_kernels(op_kernel_instructions(entry))
            kernels.prefetch(kernel_fusions(entry))
        stage("scheduling")
        t0 = time.perf_counter()
        schedule = schedule_module(prepared, memory_limit=memory_limit) \
            if memory_limit is not None else schedule_module(prepared)
        timings["schedule"] = time.perf_counter() - t0
        complete("schedule", "compile", t0)
        if memory_limit is not None:
            kernels.prefetch_op_kernels(op_kernel_instructions(entry))
            kernels.prefetch(kernel_fusions(entry))
        stage("buffer assignment")
        t0 = time.perf_counter()
        # The schedule's dataflow analysis is the module's still (nothing
        # changed it since; a memory limit may have rematerialized).
        assignment = assign_buffers(prepared, schedule,
                                    dataflow=schedule.dataflow if memory_limit is None else None)
        timings["buffer_assignment"] = time.perf_counter() - t0
        complete("buffer assignment", "compile", t0)
        stage("kernels and thunks")
        t0 = time.perf_counter()
        emitter = ThunkEmitter(prepared, schedule, assignment, kernels, target,
                               num_replicas=num_replicas, num_partitions=num_partitions)
        thunks = emitter.emit(entry)
        kernels.link()
    finally:
        kernels.close()
    # (the wait for the kernels past the buffer assignment, with the thunks)
    timings["thunks+kernels"] = time.perf_counter() - t0
    complete("thunks and kernels", "compile", t0, kernels=len(kernels.images),
             compiled=kernels.compiled, cached=kernels.cached)
    # Summed over the kernels built (side by side: more than the wall time).
    timings.update(kernels.stages)
    if command_buffers:
        t0 = time.perf_counter()
        thunks = command_buffer.convert(thunks)
        complete("command buffers", "compile", t0)
    parameters = [[emitter.ref(p, index) for index, _ in leaves(p.shape)]
                  for p in entry.parameters]
    outputs = [emitter.ref(entry.root, index) for index, _ in leaves(entry.root.shape)]
    program_constants = constants(prepared, assignment)
    allocations = list(assignment.allocations)
    ba_text = assignment.to_text()
    exe = ProgramExecutable(
        name=module.name, target=target, arch=arch, allocations=allocations,
        parameters=parameters, parameter_shapes=[str(p.shape) for p in entry.parameters],
        outputs=outputs, thunks=thunks, kernels=dict(kernels.images), constants=program_constants,
        _hlo_module=prepared, original_text=text, buffer_assignment=ba_text,
        memory=_memory_analysis(assignment, kernels.images), notes=notes, timings=timings,
        version=__version__, command_buffers=command_buffers,
        num_replicas=num_replicas, num_partitions=num_partitions,
        kernel_counts={"kernels": len(kernels.images), "compiled": kernels.compiled,
                       "cached": kernels.cached})
    exe.notes.append(f"{len(kernels.images)} kernels ({kernels.compiled} compiled, "
                     f"{kernels.cached} from the cache)")
    if dump_dir is not None:
        with span("dumps after optimizations", "dump"):
            _dump_after(exe, prepared, assignment, dump_dir)
    return exe


def _dump_after(exe: ProgramExecutable, prepared: HloModule, assignment, dump_dir) -> None:
    """The optimized module (text and graph), the buffer assignment (text
    and picture) and the thunk sequence."""
    from ..service.memory_picture import write_memory_dumps
    # The graph first: printing the text releases the module.
    _dump_graph(prepared, dump_dir, "after_optimizations")
    Path(dump_dir, "after_optimizations.txt").write_text(exe.hlo_text)
    Path(dump_dir, "buffer-assignment.txt").write_text(exe.buffer_assignment)
    Path(dump_dir, "thunk-sequence.txt").write_text(exe.thunk_sequence_text())
    write_memory_dumps(assignment, dump_dir, exe.memory)


def _dump_graph(module: HloModule, dump_dir: str | os.PathLike, stem: str) -> None:
    """`stem`.dot and `stem`.html: the module as a graph, its fusions
    coloured by the emitter the fusion analysis chooses."""
    from ..analysis.emitter_kind import fusion_emitter
    from ..hlo.graph_html import write_graph_dumps
    write_graph_dumps(module, dump_dir, stem, fusion_kind=fusion_emitter)


