"""The per-target halves of compilation, one backend object per target:
`cuda` (NVVM → PTX → cubin, launched through cuda-python: `backends.cuda`,
its code generation in `backends.cuda.codegen`) and `cpu` (the launch grid
emulated on the host: a shared object that `xla_gpu.runtime` loads without
MLIR, or MLIR's ExecutionEngine: `backends.cpu`).

    from xla_gpu import backends
    backend = backends.get("cpu")           # ArgumentError for an unknown target
    backend.stages(threads=128, blocks=960) # the pipeline stages it runs
    binary = backend.compile(module, name="k", arch="sm_90", threads=128,
                             blocks=960, timings={})   # a KernelBinary
    backend.compiler_identity()             # its part of a kernel's cache key
    backend.default_device                  # what kernels are configured for

What the compiler layers ask of a target, they ask of its backend (where
the kernels run, whether a program's kernels link into one binary, whether
gemms and FFTs are library calls), never of the target's name. Getting a
backend and its identity imports no MLIR: the work of `compile` is in the
submodules, imported when a kernel is built.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._trace import complete
from ..errors import ArgumentError
from ..runtime.device import H200, HOST_EMULATION, DeviceDescription, for_arch
from . import identity

__all__ = ["Backend", "CudaBackend", "CpuBackend", "KernelBinary", "TARGETS", "get"]


@dataclass
class KernelBinary:
    """What a backend makes of one emitted kernel: the image its launcher
    loads (cuda: PTX and a cubin; cpu: the host LLVM dialect, its object
    and a shared object), or with `lower_only` the kernel before linking
    (cuda: `lowered`, a `backends.cuda.LoweredKernel` for
    `backends.cuda.link`, before code generation; cpu: the object alone,
    no shared object)."""
    ptx: str | None = None
    cubin: bytes | None = None
    host_mlir: str | None = None
    host_object: bytes | None = None
    host_library: bytes | None = None
    lowered: Any = None
    # cpu where no shared object could be made (no linker): the kernel
    # compiled by the JIT, which runs in this process only.
    jit: Any = None
    # cpu with `lower_only` and a host batcher: the kernel's object is its
    # batch's, made later (`backends.cpu.HostPending`).
    host_pending: Any = None
    notes: list[str] = field(default_factory=list)


class Backend(ABC):
    """A target: the pipeline stages its kernels go through, how an
    emitted kernel becomes an image, what identifies its compiler, and the
    device its kernels are configured for by default."""
    name: str
    # Kernels run on the host, the launch grid emulated by loops, on numpy
    # arrays in host memory; else on the GPU, on device buffers (streams,
    # device outputs, CUDA-event timing).
    emulates_grid: bool
    # A program's kernels built by one compile go into shared binaries
    # (`backends.cuda.link`) instead of one binary each.
    links_kernels: bool
    # gemms and FFTs are calls of the vendor's libraries (cuBLASLt, cuFFT),
    # whose plans are checked when the program is compiled.
    calls_vendor_libraries: bool
    default_device: DeviceDescription

    def device_for(self, arch: str) -> DeviceDescription:
        """What kernels compiled for `arch` are configured for when the
        caller names no device."""
        return self.default_device

    def stages(self, *, threads: int | None = None,
               blocks: int | None = None) -> tuple:
        """The pipeline stages (`pipeline.Stage`) its kernels go through,
        for a launch of `threads` per block and `blocks` where the stages
        take them (None: from the kernel's `xla.range`s)."""
        stages: list = []
        self.add_stages(stages, threads=threads, blocks=blocks)
        return tuple(stages)

    def add_stages(self, stages: list, *, threads: int | None, blocks: int | None) -> None:
        """Appends its stages to `stages`: by default the pipeline's stages
        of the target of this name (the pipeline sits below the backends,
        which run it, and holds the table)."""
        from .. import pipeline
        stages.extend(pipeline.stages_for(self.name, threads=threads, blocks=blocks))

    @abstractmethod
    def compiler_identity(self) -> str:
        """A digest of what, besides the package and the kernel, decides its
        compiled code (memoized per process; no MLIR, no library call)."""

    @abstractmethod
    def compile(self, module, *, name: str, arch: str, threads: int, blocks: int,
                timings: dict[str, float], dump_dir: str | Path | None = None,
                dump_regex: str = ".*", lower_only: bool = False,
                emitter: str = "", work: int | None = None,
                host_batch: Any = None) -> KernelBinary:
        """The emitted kernel `module` (entry `name`, launched with `threads`
        per block and `blocks`) through the stages and into an image for
        `arch`; `timings` gets seconds per step. `emitter`: the emitter
        that emitted it ("" when not known), where a backend tunes its code
        generation by it; `work`: how much the kernel computes
        (`kernel_compiler.kernel_work`; None when not known), where a
        backend spends less compile time on kernels that do little.
        `host_batch`: with `lower_only`, the program's `host_batcher()`
        (None: none), where the backend compiles kernels together.
        Raises mlir.ir.MLIRError when a pass fails and a CompileError when
        code generation does."""

    def host_batcher(self) -> Any:
        """What a program's compile threads share to compile kernels'
        code together (`compile(host_batch=...)`; `finish_batches` before
        `link_item`), None where the backend does not (the default)."""
        return None

    def finish_batches(self, batcher, map_fn=map) -> None:
        """Compiles what `batcher` still holds (by `map_fn`: side by side)."""

    def bound_batches(self, batcher, members: int) -> None:
        """Puts at most `members` kernels in one unit of `batcher` from now
        on."""

    def drain_batches(self, batcher) -> None:
        """Compiles what `batcher` holds now, one unit at a time, in the
        calling thread (a compile thread that has no kernel left to build);
        what kernels still being built add is left to `finish_batches`."""

    def discard_batches(self, batcher) -> None:
        """Frees what `batcher` still holds, uncompiled (a failed compile)."""

    def link_key(self, item) -> Any:
        """What identifies `link_item` `item`'s code: items of one key are
        linked once (kernels compiled together share one object)."""
        return id(item)

    def link_item(self, exe) -> Any:
        """What `link_groups` and `link` take of compiled kernel `exe` (a
        `kernel_compiler.Executable`, built now or from a cache), None when
        it has nothing to link. Only a backend that `links_kernels` has
        one."""
        return None

    def link_groups(self, kernels: list, workers: int) -> list[list]:
        """`kernels` (`link_item`s) split into groups that `link` makes one
        binary each: about the same amount of code in each of up to
        `workers` groups (fewer where the backend's links cost more than
        they gain side by side), kernels whose symbols clash apart. Only a
        backend that `links_kernels` has it."""
        raise NotImplementedError(f"the {self.name} backend does not link kernels")

    def link(self, group: list, context, *, arch: str) -> KernelBinary:
        """One binary holding every kernel of `group`, made in MLIR context
        `context` (the calling thread's). Only a backend that
        `links_kernels` has it."""
        raise NotImplementedError(f"the {self.name} backend does not link kernels")

    def __repr__(self) -> str:
        return f"<xla_gpu backend {self.name!r}>"


class CudaBackend(Backend):
    """NVVM → PTX (LLVM's NVPTX backend, in process) → a cubin (ptxas or
    nvJitLink), launched by `xla_gpu.runtime.cuda`."""
    name = "cuda"
    emulates_grid = False
    links_kernels = True
    calls_vendor_libraries = True
    default_device = H200

    def device_for(self, arch: str) -> DeviceDescription:
        # An older arch lacks instructions the H200's kernels use (bf16
        # mma.sync needs sm_80) and has less shared memory per block.
        return for_arch(arch)

    def compiler_identity(self) -> str:
        # ptxas, nvJitLink, libdevice and cuda-python's install, by file.
        return identity.cuda_identity()

    def link_item(self, exe) -> Any:
        # Only a kernel built now is still to link: a cached one has its
        # binary (its group's).
        return exe.lowered

    def compile(self, module, *, name: str, arch: str, threads: int, blocks: int,
                timings: dict[str, float], dump_dir: str | Path | None = None,
                dump_regex: str = ".*", lower_only: bool = False,
                emitter: str = "", work: int | None = None,
                host_batch: Any = None) -> KernelBinary:
        from . import cuda
        if lower_only:
            # A program links its kernels into one binary later.
            return KernelBinary(lowered=cuda.lower_module(
                module, name=name, dump_dir=dump_dir, dump_regex=dump_regex, timings=timings))
        binary = cuda.compile_module(module, arch=arch, name=name, dump_dir=dump_dir,
                                     dump_regex=dump_regex, timings=timings)
        return KernelBinary(ptx=binary.ptx, cubin=binary.cubin)

    def link_groups(self, kernels: list, workers: int) -> list[list]:
        from . import cuda
        return cuda.link_groups(kernels, workers)

    def link(self, group: list, context, *, arch: str) -> KernelBinary:
        from . import cuda
        binary = cuda.link(group, context, arch=arch)
        return KernelBinary(ptx=binary.ptx, cubin=binary.cubin)


class CpuBackend(Backend):
    """The launch grid emulated on the host: host LLVM, a shared object that
    `xla_gpu.runtime` loads with ctypes (or the JIT where no linker is).
    A program's kernels are compiled to objects and linked into shared
    libraries (`backends.cpu.link_objects`), a linker run per library
    instead of one per kernel."""
    name = "cpu"
    emulates_grid = True
    links_kernels = True
    calls_vendor_libraries = False
    default_device = HOST_EMULATION

    def compiler_identity(self) -> str:
        # A host kernel is compiled for the machine that built it.
        return identity.host_identity()

    def compile(self, module, *, name: str, arch: str, threads: int, blocks: int,
                timings: dict[str, float], dump_dir: str | Path | None = None,
                dump_regex: str = ".*", lower_only: bool = False,
                emitter: str = "", work: int | None = None,
                host_batch: Any = None) -> KernelBinary:
        # The host code is generated once, as an object that is linked into
        # a shared object that both this process (ctypes) and the cache /
        # saved artifacts load: the kernel's own (a single fusion's
        # compile), or with `lower_only` the program's (`link`); the JIT
        # stands in only where no linker is installed.
        from .. import pipeline
        from . import cpu
        start = time.perf_counter()
        pipeline.run(module, stages=self.stages(threads=threads, blocks=blocks),
                     dump_dir=dump_dir, dump_regex=dump_regex,
                     timings=timings if dump_dir is not None else None)
        timings["pipeline"] = time.perf_counter() - start
        complete("MLIR pipeline", "kernel-stage", start)
        start = time.perf_counter()
        # pipeline.run verified its result: the printer need not verify it
        # again (str() does).
        binary = KernelBinary(host_mlir=module.operation.get_asm(assume_verified=True))
        lines = binary.host_mlir.count("\n")
        llvm = cpu.host_pipeline(emitter, lines, work)
        if llvm.cold:
            binary.notes.append(f"cold kernel ({work} units of work): host code by "
                                f"{llvm.describe()}")
        full = None
        try:
            cpu.require_linker()
            if lower_only and host_batch is not None and lines <= cpu.HOST_BATCH_KERNEL_LINES:
                # Into a batch with other kernels of the program: the object
                # comes when the batch is compiled (`cpu.HostBatcher`).
                binary.host_pending, full = host_batch.add(module, name, llvm, lines, timings)
            else:
                binary.host_object = cpu.host_object(module, name, pipeline=llvm)
                if not lower_only:
                    binary.host_library = cpu.link_objects([binary.host_object])
        except cpu.HostCompileError as e:
            binary.notes.append(f"no host shared object ({e}): the kernel runs in the JIT "
                                "and is not cached on disk")
            binary.host_object = binary.host_pending = None
            binary.jit = cpu.from_lowered(binary.host_mlir, entry=name,
                                          opt_level=llvm.opt_level)
        if binary.host_pending is not None:
            # Its own part (the translation into the batch); its share of the
            # batch's time is added when the batch is compiled.
            binary.host_pending.charge(time.perf_counter() - start)
        else:
            timings["llvm"] = time.perf_counter() - start
        complete("LLVM host code", "kernel-stage", start)
        if full is not None:
            # The batch this kernel filled, compiled by this thread: emission
            # on the other compile threads overlaps its LLVM time.
            host_batch.compile(full)
        return binary

    def host_batcher(self) -> Any:
        from . import cpu
        if not cpu.HostBatcher.available() or cpu._linker() is None:
            return None
        return cpu.HostBatcher()

    def finish_batches(self, batcher, map_fn=map) -> None:
        batcher.finish(map_fn)

    def bound_batches(self, batcher, members: int) -> None:
        batcher.max_members = members

    def drain_batches(self, batcher) -> None:
        while batcher.compile_next():
            pass

    def discard_batches(self, batcher) -> None:
        batcher.discard()

    def link_key(self, item) -> Any:
        # A batch's object, stored (and loaded from the disk cache) for each
        # of its kernels: equal bytes are one object, linked once.
        return item.code

    def link_item(self, exe) -> Any:
        # Built now or cached (memory or disk), a kernel keeps its object:
        # it joins the program's library either way. One whose batch is not
        # compiled yet: its pending object, until `finish_batches`.
        if exe.host_object is None and getattr(exe, "host_pending", None) is not None:
            return exe.host_pending
        if exe.host_object is None:
            return None
        from . import cpu
        return cpu.HostObject.of(exe.spec.name, exe.host_object)

    def link_groups(self, kernels: list, workers: int) -> list[list]:
        from . import cpu
        return cpu.link_groups(kernels, workers)

    def link(self, group: list, context, *, arch: str) -> KernelBinary:
        from . import cpu
        from ..errors import CompileError
        start = time.perf_counter()
        try:
            binary = KernelBinary(host_library=cpu.link_objects([k.code for k in group]))
        except cpu.HostCompileError as e:
            raise CompileError(str(e)) from None
        complete("link host kernels", "kernel-stage", start)
        return binary


_BACKENDS: dict[str, Backend] = {backend.name: backend
                                 for backend in (CudaBackend(), CpuBackend())}
TARGETS = tuple(_BACKENDS)


def get(target: str) -> Backend:
    """The backend of `target` ("cuda" or "cpu"); ArgumentError for any
    other."""
    backend = _BACKENDS.get(target) if isinstance(target, str) else None
    if backend is None:
        raise ArgumentError(f"unknown target {target!r}: one of {', '.join(TARGETS)}")
    return backend
