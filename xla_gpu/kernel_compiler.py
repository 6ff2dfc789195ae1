"""The kernel compiler: every kernel xla_gpu builds comes from here.

    exe = kernel_compiler.compile_kernel(fusion, "cpu")   # an Executable
    exe.run(x)

A fusion (`analysis.fusion.Fusion`: a computation and the emitter the
analysis chose, or an op kernel's fusion with its config) -> its emitter's
MLIR -> the target's pipeline -> PTX/cubin (cuda) or a host shared object
(cpu), through one cache:

  * `kernel_key` is the one recipe for a kernel's cache key: the
    computation's canonical fingerprint (names do not matter), the target,
    the arch, the compiler's identity, the device the launch configuration
    follows (when not the target's default) and an op kernel's config;
  * `memory` is this process' one in-memory cache (`clear_memory_cache`
    empties it), `compile_cache.DiskCache` the one on disk.

Its callers: the single-fusion API (`xla_gpu.compile(..., fusion=NAME)`),
a whole program's fusions (`xla_gpu.program`), and the kernels of sorts,
top-k and convolutions (`xla_gpu.op_kernels`). MLIR is imported only when
something is built: a cache hit costs no MLIR import.

A failure is an error: an emitter that fails on a fusion its analysis gave
it is a bug to fix there (the fusion analysis is the one place that turns a
fusion over to the loop emitter, with a note saying why).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import backends, compile_cache
from ._paths import __version__
from ._trace import complete
from .errors import ArgumentError, ArtifactError, CompileError
from .runtime import (CudaKernel, EmptyKernel, HostKernel, KernelSpec, artifact,
                      check_output_memory)
from .runtime.spec import ArgSpec

__all__ = ["Executable", "compile_kernel", "kernel_key", "cached_kernel", "store",
           "clear_memory_cache", "memory", "thread_context", "check_run_options",
           "kernel_work"]


@dataclass
class Executable:
    """A compiled kernel: a fusion's (what `xla_gpu.compile(...,
    fusion=NAME)` returns), or one kernel of a sort, top-k or convolution.
    `run(*arrays)` returns a tuple of numpy arrays in the fusion's output
    order (device arrays with `device_outputs=True` on cuda)."""
    spec: KernelSpec
    hlo_text: str
    # None: not kept (`compile_kernel(keep_emitted=False)`).
    emitted_mlir: str | None
    ptx: str | None = None
    cubin: bytes | None = None
    host_mlir: str | None = None            # cpu: the grid-emulating LLVM dialect
    # cpu: the host code as an object (what a program links with its other
    # kernels) and as a shared object of its own (a single fusion's
    # compile; made from the object when first needed: `host_code`).
    host_object: bytes | None = None
    host_library: bytes | None = None
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    artifact_digest: str | None = None      # set by save() and load()
    # perf_counter() when compile_kernel built it (None: loaded, cached on
    # disk): a program's compile counts the stage times of what it built.
    built_at: float | None = field(default=None, repr=False)
    lowered: Any = field(default=None, repr=False)  # cuda, before linking (lower_only)
    # cpu, a program's kernel whose host code waits in a batch with others
    # (`backends.cpu.HostPending`): `host_object` comes when it is compiled;
    # not stored in a cache until then (`ProgramKernels.link` stores it).
    host_pending: Any = field(default=None, repr=False)
    _kernel: Any = field(default=None, repr=False)

    @property
    def key(self) -> str:
        """The kernel's cache key (`kernel_key`)."""
        return self.spec.fingerprint

    @property
    def target(self) -> str:
        return self.spec.target

    @property
    def launch_dims(self) -> dict:
        dims = {"threads": self.spec.threads, "blocks": self.spec.blocks,
                "shared_bytes": self.spec.shared_bytes}
        if self.spec.blocks_y > 1:
            dims["blocks_y"] = self.spec.blocks_y
        return dims

    def mlir(self, stage: str = "emitted") -> str:
        """The IR at `stage`: "emitted" (what the emitter produced), a
        stage of the pipeline ("optimization", "loop-transformation",
        "lowering", "cuda-lowering" / "cpu-lowering": the IR at its end), a
        pass name (the IR after its first run), or "llvm" (the end of the
        pipeline)."""
        if self.emitted_mlir is None:
            raise ArgumentError(f"kernel {self.spec.name}: its emitted IR was not kept "
                                "(a kernel of a program compiled without a cache)")
        if stage == "emitted":
            return self.emitted_mlir
        from mlir import ir as mlir_ir

        from . import ir, pipeline
        stages = backends.get(self.target).stages()
        passes = tuple(p for st in stages for p in st.passes)
        names = [pipeline.pass_name(p) for p in passes]
        ends, count = {}, 0
        for st in stages:
            count += len(st.passes)
            ends[st.name] = count
        if stage in ends:
            passes = passes[:ends[stage]]
        elif stage != "llvm":
            if stage not in names:
                raise ArgumentError(f"no stage '{stage}': emitted, llvm, "
                                    f"{', '.join(ends)}, or one of "
                                    + ", ".join(dict.fromkeys(names)))
            passes = passes[:names.index(stage) + 1]
        module = mlir_ir.Module.parse(self.emitted_mlir, ir.Context())
        pipeline.run(module, passes=passes)
        return str(module)

    def host_code(self) -> bytes | None:
        """The kernel's shared object (cpu), linked from its object alone the
        first time one is asked of a kernel a program built (which keeps
        the object only: its program links it with the others)."""
        if self.host_library is None and self.host_object is not None:
            from .backends import cpu
            try:
                self.host_library = cpu.link_objects([self.host_object])
            except cpu.HostCompileError as e:
                raise CompileError(f"kernel {self.spec.name}: {e}") from None
        return self.host_library

    def _load(self):
        if self._kernel is None:
            if self.spec.blocks == 0:
                self._kernel = EmptyKernel(self.spec)
            elif not backends.get(self.target).emulates_grid:
                self._kernel = CudaKernel(self.spec, cubin=self.cubin, ptx=self.ptx)
            elif self.host_code() is not None:
                # A shared object: no MLIR needed (a cache hit, a saved kernel).
                self._kernel = HostKernel.from_bytes(self.spec, self.host_library)
            else:
                from .backends import cpu
                self._kernel = _HostRunner(self.spec, cpu.from_lowered(
                    self.host_mlir, entry=self.spec.name))
        return self._kernel

    def run(self, *arrays, **kwargs) -> tuple:
        """Runs the kernel on `arrays` (the fusion's parameters). cuda also
        takes device arrays (`__cuda_array_interface__`), `stream=` and
        `device_outputs=True`."""
        if kwargs:
            check_run_options(kwargs, self.target)
            if backends.get(self.target).emulates_grid:  # only the defaults get here
                kwargs = {}
        return self._load().run(*arrays, **kwargs)

    def time(self, *arrays, iterations: int = 100, warmup: int = 10) -> float:
        """Seconds per run (cuda: CUDA events around the launches)."""
        kernel = self._load()
        if not backends.get(self.target).emulates_grid:
            return kernel.time(*arrays, iterations=iterations, warmup=warmup)
        for _ in range(warmup):
            kernel.run(*arrays)
        start = time.perf_counter()
        for _ in range(iterations):
            kernel.run(*arrays)
        return (time.perf_counter() - start) / iterations

    def save(self, directory: str | Path) -> Path:
        """Writes the artifact `xla_gpu.runtime.load` reads; sets
        `artifact_digest`, which pins the directory when passed back to
        `runtime.load(dir, expected_digest=...)`."""
        if self.emitted_mlir is None:
            raise ArgumentError(f"kernel {self.spec.name}: its emitted IR was not kept "
                                "(a kernel of a program compiled without a cache): "
                                "nothing to save")
        files = {"kernel.json": self.spec.to_json().encode(),
                 "fusion.hlo": self.hlo_text.encode(),
                 "emitted.mlir": self.emitted_mlir.encode()}
        if self.ptx is not None:
            files["kernel.ptx"] = self.ptx.encode()
        if self.cubin is not None:
            files["kernel.cubin"] = self.cubin
        if self.host_mlir is not None:
            files["kernel.host.mlir"] = self.host_mlir.encode()
        if self.host_object is not None:
            files["kernel.o"] = self.host_object
        if self.host_library is not None:
            files["kernel.so"] = self.host_library
        self.artifact_digest = artifact.write_artifact(directory, files)
        return Path(directory)

    @staticmethod
    def load(directory: str | Path, *, expected_digest: str | None = None,
             trusted: bool = False, check_abi: bool = True) -> "Executable":
        """Reads what `save` wrote, verified as `xla_gpu.runtime.load` does
        (ArtifactError when a file is missing, unsafe or does not match its
        digest, or kernel.json does not match the fusion; unpinned loads
        need `trusted=True`)."""
        where = str(directory)
        data, digest = artifact.read_artifact(directory, expected_digest, trusted=trusted)
        spec = artifact.parse_spec(data, where)
        try:
            hlo_text = data["fusion.hlo"].decode()
            emitted = data["emitted.mlir"].decode()
            ptx = data["kernel.ptx"].decode() if "kernel.ptx" in data else None
            host_mlir = data["kernel.host.mlir"].decode() if "kernel.host.mlir" in data else None
        except KeyError as e:
            raise ArtifactError(f"{where}: {e.args[0]} is missing") from None
        except UnicodeDecodeError as e:
            raise ArtifactError(f"{where}: a text file is not UTF-8 ({e})") from None
        artifact.validate_spec(spec, hlo_text if check_abi else None, where)
        exe = Executable(spec, hlo_text, emitted, ptx=ptx, cubin=data.get("kernel.cubin"),
                         host_mlir=host_mlir, host_object=data.get("kernel.o"),
                         host_library=data.get("kernel.so"))
        exe.artifact_digest = digest
        return exe


def check_run_options(options: dict, target: str) -> None:
    """run()'s keyword options: only cuda's stream= and device_outputs= (on
    cpu only at their defaults); anything else is an ArgumentError worded
    as Python words a TypeError."""
    for name in options:
        if name not in ("stream", "device_outputs"):
            raise ArgumentError(f"run() got an unexpected keyword argument '{name}'")
    if backends.get(target).emulates_grid and (
            options.get("stream") is not None or
            options.get("device_outputs", False) is not False):
        raise ArgumentError("stream= and device_outputs= are options of the cuda target")


# -- the cache -----------------------------------------------------------------------------

# This process' compiled kernels by kernel key (and, for `xla_gpu.compile`,
# by the key of the text it was given): the one in-memory cache.
memory = compile_cache.MemoryCache()


def clear_memory_cache() -> None:
    """Forgets every kernel this process compiled (the disk cache stays)."""
    memory.clear()


def kernel_key(computation, target: str, arch: str, *, device=None, config: Any = None,
               identity: str | None = None) -> str:
    """The cache key of the kernel of fusion computation `computation`:
    everything that decides its code. The computation enters by its
    canonical fingerprint (a renamed fusion is the same kernel); `device`
    (a `runtime.device.DeviceDescription`) only when it is not the
    target's default (its backend's); `config` is an op kernel's settings
    (a sort's bitonic steps, a convolution's epilogue). `identity`: the compiler's
    (`compile_cache.compiler_identity`; "" where nothing is cached)."""
    from .hlo.fingerprint import fingerprint
    if identity is None:
        identity = compile_cache.compiler_identity(target)
    device_part = "" if device is None or device == backends.get(target).default_device \
        else repr(device)
    return compile_cache.make_key("kernel", fingerprint(computation), target, arch, identity,
                                  device_part, "" if config is None else repr(config))


def cached_kernel(key: str, target: str, disk=None):
    """The kernel stored under `key` in memory or (when `disk`, a
    `compile_cache.DiskCache`, is given) on disk; None when neither has it.
    A disk hit is kept in memory."""
    exe = memory.get(key)
    if exe is None and disk is not None:
        exe = disk.get(key, target, Executable.load)
        if exe is not None:
            memory.put(key, exe)
    return exe


def store(key: str, exe, disk=None) -> None:
    """Keeps kernel `exe` under `key` in memory and, when `disk` is given,
    on disk. A kernel still to link (`exe.lowered`) is not kept."""
    # A cuda kernel a program built is kept once linked, with its group's
    # binary (in memory only: `ProgramKernels.link`). A cpu kernel a program
    # built is kept as its object, before linking, in memory and on disk:
    # the LLVM code generation that made it is what a cache saves (tenths
    # of a second for a large kernel), and a hit still links with the
    # program's other kernels into one library at the cost of a few
    # milliseconds; the group's library would tie the entry to kernels
    # that other programs do not have. The key names the compiler, so an
    # object of another compiler is never taken.
    if exe.lowered is not None or exe.host_pending is not None:
        return
    memory.put(key, exe)
    if disk is not None:
        disk.put(key, exe)


def compile_kernel(fusion, target: str, arch: str = "sm_90", *, device=None,
                   cache: bool = True, key: str | None = None, text: str | None = None,
                   dump_dir=None, dump_regex: str = ".*", lower_only: bool = False,
                   disk=None, start: float | None = None,
                   keep_emitted: bool = True, host_batch: Any = None) -> "Executable":
    """The kernel of `fusion` for `target` ("cpu" or "cuda") and `arch`,
    from the cache when it holds it. `device`: the GPU the launch
    configuration follows (default: the target's backend's `device_for(arch)`);
    `key`: `kernel_key`'s for this fusion when the caller has it; `text`:
    the HLO saved with the kernel (default: the fusion computation's);
    `dump_dir`: the IR after each pass matching `dump_regex`, and the PTX
    (bypasses the cache). `lower_only`: the kernel is for a program that
    links its kernels (`program.kernels.ProgramKernels.link`): on cuda one
    not in a cache stops after the pipeline (`exe.lowered`, for
    `backends.cuda.link`; see `store`), on cpu it gets its object only;
    without it a cpu kernel has its own shared object. `disk`: the
    DiskCache to use (default: a new one). A kernel built now gets
    `timings["total"]`, from `start` (a perf_counter time; default: this
    call); one from a cache has none of its own. `keep_emitted=False`:
    a kernel built now keeps no text of its emitted IR (`emitted_mlir` is
    None; it cannot be saved), for a caller that only takes its code and
    caches nothing: printing it costs a sixth of emitting it.
    `host_batch`: with `lower_only`, the program's backend batcher
    (`Backend.host_batcher`): a cpu kernel built now waits in it for its
    object (`exe.host_pending`) and is stored once that exists."""
    if start is None:
        start = time.perf_counter()
    fusion.device = device if device is not None else backends.get(target).device_for(arch)
    use_cache = cache and dump_dir is None
    if key is None:
        key = kernel_key(fusion.computation, target, arch, device=fusion.device,
                         config=fusion.config, identity=None if use_cache else "")
    if use_cache and disk is None:
        disk = compile_cache.DiskCache()
    if use_cache:
        exe = cached_kernel(key, target, disk)
        if exe is not None:
            if not lower_only:
                # A kernel a program built has an object only (cpu): a
                # compile of it alone gives it its own shared object.
                exe.host_code()
            if text is not None and (exe.hlo_text != text or exe.spec.fusion != fusion.name):
                # The same kernel cached under other names (a program's
                # fusion, another module): the caller's text and fusion go
                # with it, so that what it saves describes its own fusion.
                exe = dataclasses.replace(
                    exe, hlo_text=text, spec=dataclasses.replace(exe.spec, fusion=fusion.name),
                    artifact_digest=None)
            return exe
    if text is None:
        from .hlo.fusions import fusion_text
        text = fusion_text(fusion.computation)
    begun = time.perf_counter()
    exe = _build(fusion, text, target, arch, key, dump_dir, dump_regex, lower_only,
                 keep_emitted=keep_emitted or use_cache,
                 host_batch=host_batch if lower_only else None)
    exe.built_at = time.perf_counter()
    complete(f"kernel {fusion.name}", "kernel", begun, exe.built_at,
             emitter=exe.spec.emitter, target=target)
    exe.timings["total"] = exe.built_at - start
    if use_cache:
        store(key, exe, disk)
    return exe


# Instructions whose elements each read many elements of their operands in
# ways not worth modelling here (a convolution's windows, a custom call's
# anything): counted as every output element reading every operand
# element, a bound that keeps any of them of some size out of the cold
# kernels.
_ALL_TO_ALL_OPCODES = frozenset({"convolution", "custom-call", "reduce-window",
                                 "select-and-scatter", "while", "call", "conditional"})


def _sort_steps(inst) -> int:
    """The compare-exchange steps of the bitonic network that sorts `inst`
    (a sort): L (L + 1) / 2 for L = ceil(log2 n), n the length of its
    sorted dimension. Each step touches every element once."""
    dims = inst.operands[0].shape.dims
    dim = int(inst.attrs.get("dimensions", [len(dims) - 1])[0]) if dims else 0
    n = dims[dim] if dims else 1
    stages = max(1, (n - 1).bit_length())
    return stages * (stages + 1) // 2


def kernel_work(fusion) -> int:
    """About how many scalar operations the kernel of `fusion` does: the
    elements every instruction of its computation (and of the fusions
    nested in it) reads or produces, each dot's multiply-adds, each sort's
    elements once per step of its network, and the bound of
    `_ALL_TO_ALL_OPCODES` for the rest. The launch grid says
    nothing of this (a gemm tile's block or a long reduction row loops
    inside its threads). A function of the fusion's computation alone
    (shapes, opcodes, contracting dimensions), whose fingerprint its
    kernel key holds: the backend may choose how to compile by it
    (`backends.cpu.host_pipeline`) and a cached kernel still has the code
    that choice makes."""
    work = 0
    pending = [fusion.computation]
    while pending:
        for inst in pending.pop().instructions:
            out = sum(leaf.num_elements for leaf in inst.shape.leaves())
            work += out
            if inst.opcode == "fusion":
                pending.extend(inst.called_computations)
            elif inst.opcode == "dot":
                lhs = inst.operands[0].shape.dims
                contracted = 1
                for d in inst.attrs.get("lhs_contracting_dims", ()):
                    contracted *= lhs[int(d)]
                work += out * contracted
            elif inst.opcode == "sort":
                work += out * _sort_steps(inst)
            elif inst.opcode in _ALL_TO_ALL_OPCODES:
                work += out * sum(leaf.num_elements for o in inst.operands
                                  for leaf in o.shape.leaves())
    return work


def _build(fusion, text: str, target: str, arch: str, key: str,
           dump_dir, dump_regex: str, lower_only: bool = False, *,
           keep_emitted: bool = True, host_batch: Any = None) -> Executable:
    """The kernel of `fusion`, compiled. On cuda with `lower_only` it stops
    after the pipeline: `exe.lowered` holds the kernel for
    `backends.cuda.link` (a program links its kernels into one binary) and
    `exe.ptx` / `exe.cubin` stay None."""
    from mlir import ir as mlir_ir

    from . import emitters
    from .emitters.partitioner import sanitize

    timings: dict[str, float] = {}
    if fusion.output_shapes and all(s.num_elements == 0 for s in fusion.output_shapes):
        # Nothing to compute: no kernel is launched (as XLA does).
        spec = KernelSpec(
            name=sanitize(fusion.name), target=target, arch=arch, threads=1, blocks=0,
            shared_bytes=0,
            parameters=[ArgSpec(tuple(p.shape.dims), p.shape.element_type)
                        for p in fusion.parameters],
            outputs=[ArgSpec(tuple(s.dims), s.element_type) for s in fusion.output_shapes],
            emitter="none", fusion=fusion.name, fingerprint=key, version=__version__)
        return Executable(spec, text, "", notes=["every output is empty: no kernel"],
                          timings=timings)
    backend = backends.get(target)
    t0 = time.perf_counter()
    context = thread_context()
    if backend.emulates_grid:
        fusion.one_dimensional_grid = True   # the host emulates 1-D grids
    kernel = emitters.emit_fusion(fusion, context)
    try:
        kernel.module.operation.verify()
    except mlir_ir.MLIRError as e:
        raise CompileError(f"fusion '{fusion.name}': the {kernel.emitter} emitter "
                           f"produced invalid IR: {e}") from None
    # Verified just above: the printer need not verify it again (str() does).
    emitted = kernel.module.operation.get_asm(assume_verified=True) \
        if keep_emitted else None
    timings["emit"] = time.perf_counter() - t0
    complete("emit", "kernel-stage", t0, emitter=kernel.emitter)
    spec = KernelSpec(
        name=kernel.name, target=target, arch=arch,
        threads=kernel.launch.threads, blocks=kernel.launch.blocks,
        shared_bytes=kernel.launch.shared_bytes,
        parameters=[ArgSpec(tuple(p.shape.dims), p.shape.element_type)
                    for p in fusion.parameters],
        outputs=[ArgSpec(tuple(s.dims), s.element_type) for s in fusion.output_shapes],
        aliases=dict(kernel.aliases), emitter=kernel.emitter, fusion=fusion.name,
        fingerprint=key, version=__version__, blocks_y=kernel.launch.blocks_y)
    exe = Executable(spec, text, emitted, notes=list(kernel.notes), timings=timings)
    try:
        binary = backend.compile(kernel.module, name=kernel.name, arch=arch,
                                 threads=spec.threads, blocks=spec.blocks, timings=timings,
                                 dump_dir=dump_dir, dump_regex=dump_regex,
                                 lower_only=lower_only, emitter=kernel.emitter,
                                 work=kernel_work(fusion), host_batch=host_batch)
    except mlir_ir.MLIRError as e:
        raise CompileError(f"fusion '{fusion.name}': the {target} pipeline failed: {e}") from None
    except CompileError as e:   # code generation (PTX, the cubin, launch limits)
        raise CompileError(f"fusion '{fusion.name}': {e}") from None
    exe.ptx, exe.cubin, exe.lowered = binary.ptx, binary.cubin, binary.lowered
    exe.host_mlir, exe.host_library = binary.host_mlir, binary.host_library
    exe.host_object = binary.host_object
    exe.notes += binary.notes
    if binary.host_pending is not None:
        exe.host_pending = binary.host_pending
        binary.host_pending.attach(exe)
    if binary.jit is not None:
        # No shared object: the JIT's kernel runs it. (An image is loaded
        # when first run, by `_load`; a program loads its kernels' images
        # itself.)
        exe._kernel = _HostRunner(spec, binary.jit)
    return exe


_contexts = threading.local()


def thread_context():
    """This thread's MLIR context for emission and the pipeline (making one
    costs more than emitting a typical kernel); contexts are not shared
    between threads."""
    context = getattr(_contexts, "context", None)
    if context is None:
        from . import ir
        context = _contexts.context = ir.Context()
    return context


class _HostRunner:
    """Executable.run for the cpu target: numpy in, numpy out, the grid
    split over host threads when it has enough blocks."""

    def __init__(self, spec: KernelSpec, host):
        self.spec, self.host = spec, host

    def run(self, *arrays) -> tuple[np.ndarray, ...]:
        check_output_memory(self.spec)
        pointers, outputs, convert, _held = self.spec.host_call(arrays)
        workers = min(os.cpu_count() or 1, 8) if self.spec.blocks >= 64 else 1
        self.host.launch(pointers, workers=workers)
        return self.spec.results(outputs) if convert else tuple(outputs)
