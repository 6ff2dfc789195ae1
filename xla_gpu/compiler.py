"""`xla_gpu.compile`: HLO text -> emitted MLIR -> pipeline -> PTX/cubin (cuda)
or a host kernel (cpu) -> an Executable, through a compile cache.

    import xla_gpu
    exe = xla_gpu.compile(open("examples/gelu.hlo").read())   # target="auto"
    (y,) = exe.run(x)
    exe.save("artifacts/gelu")      # runs with xla_gpu.runtime.load() elsewhere
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, _malloc_tuning, compile_cache, hlo
from ._input import read_input
from .compile_cache import cache_dir
from .errors import (ArgumentError, ArtifactError, CompileError, ResourceError,
                     XlaGpuError)
from .runtime import (CudaKernel, EmptyKernel, HostKernel, KernelSpec, artifact,
                      check_output_memory, cuda_available)
from .runtime.spec import ArgSpec

__all__ = ["compile", "Executable", "CompileError", "cache_dir", "clear_memory_cache"]

TARGETS = ("auto", "cuda", "cpu")
# The note of a whole program that compile() loaded from the disk cache.
FROM_DISK_CACHE = "loaded from the compile cache"


@dataclass
class Executable:
    """A compiled fusion. `run(*arrays)` returns a tuple of numpy arrays in
    the fusion's output order (device arrays with `device_outputs=True` on
    cuda)."""
    spec: KernelSpec
    hlo_text: str
    emitted_mlir: str
    ptx: str | None = None
    cubin: bytes | None = None
    host_mlir: str | None = None            # cpu: the grid-emulating LLVM dialect
    host_library: bytes | None = None       # cpu: the same as a shared object
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    artifact_digest: str | None = None      # set by save() and load()
    lowered: Any = field(default=None, repr=False)  # cuda, before linking (_build)
    _kernel: Any = field(default=None, repr=False)

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
        if stage == "emitted":
            return self.emitted_mlir
        from mlir import ir as mlir_ir

        from . import ir, pipeline
        stages = pipeline.stages_for(self.target)
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

    def _load(self):
        if self._kernel is None:
            if self.spec.blocks == 0:
                self._kernel = EmptyKernel(self.spec)
            elif self.target == "cuda":
                self._kernel = CudaKernel(self.spec, cubin=self.cubin, ptx=self.ptx)
            elif self.host_library is not None:
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
            if self.target == "cpu":  # only the defaults get here
                kwargs = {}
        return self._load().run(*arrays, **kwargs)

    def time(self, *arrays, iterations: int = 100, warmup: int = 10) -> float:
        """Seconds per run (cuda: CUDA events around the launches)."""
        kernel = self._load()
        if self.target == "cuda":
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
        files = {"kernel.json": self.spec.to_json().encode(),
                 "fusion.hlo": self.hlo_text.encode(),
                 "emitted.mlir": self.emitted_mlir.encode()}
        if self.ptx is not None:
            files["kernel.ptx"] = self.ptx.encode()
        if self.cubin is not None:
            files["kernel.cubin"] = self.cubin
        if self.host_mlir is not None:
            files["kernel.host.mlir"] = self.host_mlir.encode()
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
                         host_mlir=host_mlir, host_library=data.get("kernel.so"))
        exe.artifact_digest = digest
        return exe


def check_run_options(options: dict, target: str) -> None:
    """run()'s keyword options: only cuda's stream= and device_outputs= (on
    cpu only at their defaults); anything else is an ArgumentError worded
    as Python words a TypeError."""
    for name in options:
        if name not in ("stream", "device_outputs"):
            raise ArgumentError(f"run() got an unexpected keyword argument '{name}'")
    if target == "cpu" and (options.get("stream") is not None or
                            options.get("device_outputs", False) is not False):
        raise ArgumentError("stream= and device_outputs= are options of the cuda target")


# -- the compile cache ---------------------------------------------------------

_memory = compile_cache.MemoryCache()


def clear_memory_cache() -> None:
    """Forgets this process' compiled fusions and programs' kernels (the
    disk cache stays)."""
    from . import program_compiler
    _memory.clear()
    program_compiler._kernel_memory.clear()
    # The sort emitters' kernels, where they were loaded (importing them
    # would import MLIR).
    sort = sys.modules.get("xla_gpu.emitters.sort")
    if sort is not None:
        sort._compiled.clear()


def compile(hlo_text: str | os.PathLike, *, target: str = "auto", arch: str = "sm_90",
            fusion: str | None = None, cache: bool = True,
            dump_dir: str | os.PathLike | None = None,
            dump_regex: str = ".*", command_buffers: bool = True,
            optimize: bool | None = None, memory_limit: int | None = None,
            device=None, **unknown) -> Executable:
    """Compiles one fusion of `hlo_text` (HLO text, or a path to it), or,
    when `fusion` is None and the ENTRY is a whole program (more than one
    fusion, or ops outside fusions), the whole ENTRY into a
    `runtime.program.ProgramExecutable` (see `xla_gpu.program_compiler`;
    `command_buffers`, `optimize` and `memory_limit` are its options).

    target: "cuda" (PTX/cubin for `arch`, launched through cuda-python),
    "cpu" (the same kernel run by grid emulation on the host), or "auto"
    (cuda when a GPU is usable). fusion: which fusion of the ENTRY to
    compile (default: the only one). dump_dir: write the IR after each pass
    matching dump_regex, and the PTX (bypasses the cache). device: the GPU
    whose description a fusion's launch configuration follows
    (`xla_gpu.analysis.device.DeviceDescription`; default the H200; XLA's
    own emitter tests describe `RTX_A6000`); single fusions only.

    Raises only xla_gpu's errors: ArgumentError (bad options), HloParseError
    (malformed text), HloError / UnsupportedError (a module it cannot
    compile; names the instruction), CompileError (the pipeline failed),
    ResourceError (limits), ArtifactError; all derive from XlaGpuError."""
    if unknown:
        raise ArgumentError(f"compile() got an unexpected keyword argument "
                            f"'{next(iter(unknown))}'")
    if not isinstance(target, str) or target not in TARGETS:
        raise ArgumentError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    if not (isinstance(arch, str) and re.fullmatch(r"sm_\d+[af]?", arch)):
        raise ArgumentError(f"arch must look like sm_90 (or sm_90a), got {arch!r}")
    if not isinstance(hlo_text, (str, os.PathLike)):
        raise ArgumentError(f"compile() takes HLO text or a path, got "
                            f"{type(hlo_text).__name__}")
    from .analysis.device import DeviceDescription
    if device is not None and not isinstance(device, DeviceDescription):
        raise ArgumentError(f"device must be an xla_gpu.analysis.device.DeviceDescription, "
                            f"got {type(device).__name__}")
    memory_limit = _check_options(fusion, cache, dump_dir, dump_regex, command_buffers,
                                  optimize, memory_limit)
    source = "<hlo>"
    text = hlo_text
    if isinstance(hlo_text, os.PathLike) or (
            isinstance(hlo_text, str) and "\n" not in hlo_text and
            hlo_text.endswith(".hlo") and os.path.exists(hlo_text)):
        # Bounded: a regular file of at most XLA_GPU_MAX_INPUT_BYTES.
        data, source = read_input(hlo_text)
        text = hlo.parser.decode_text(data, source)
    hlo.parser.check_encodable(text, source)   # the cache keys hash its UTF-8
    try:
        return _compile(text, source, target, arch, fusion, cache, dump_dir, dump_regex,
                        dict(command_buffers=command_buffers, optimize=optimize,
                             memory_limit=memory_limit), device)
    except XlaGpuError:
        raise
    except RecursionError:
        raise CompileError(f"{source}: the module nests too deeply for the compiler "
                           "(a chain of operations or regions deeper than it can "
                           "walk)") from None
    except MemoryError:
        raise ResourceError(f"{source}: out of host memory while compiling") from None
    except Exception as e:  # a compiler bug: still one of our errors
        raise CompileError(f"{source}: internal compiler error: {type(e).__name__}: {e}") \
            from e


def _check_options(fusion, cache, dump_dir, dump_regex, command_buffers, optimize,
                   memory_limit) -> int | None:
    """compile()'s options, checked before anything is compiled; returns
    memory_limit as an int."""
    if fusion is not None and not isinstance(fusion, str):
        raise ArgumentError(f"fusion must be a fusion's name (str), got "
                            f"{type(fusion).__name__}")
    for name, value in (("cache", cache), ("command_buffers", command_buffers),
                        ("optimize", optimize)):
        if not isinstance(value, (bool, np.bool_)) and not (name == "optimize" and
                                                            value is None):
            raise ArgumentError(f"{name} must be True or False, got {value!r}")
    if dump_dir is not None and not isinstance(dump_dir, (str, os.PathLike)):
        raise ArgumentError(f"dump_dir must be a directory's path, got "
                            f"{type(dump_dir).__name__}")
    if dump_dir is not None:
        # Made here: one that cannot be is a bad argument, not a failure in
        # the middle of the pipeline.
        try:
            Path(dump_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ArgumentError(f"dump_dir: cannot create '{dump_dir}': "
                                f"{e.strerror}") from None
    if not isinstance(dump_regex, str):
        raise ArgumentError(f"dump_regex must be a regular expression (str), got "
                            f"{type(dump_regex).__name__}")
    try:
        re.compile(dump_regex)
    except re.error as e:
        raise ArgumentError(f"dump_regex: invalid regular expression {dump_regex!r}: "
                            f"{e}") from None
    if memory_limit is None:
        return None
    if isinstance(memory_limit, (bool, np.bool_)) or not isinstance(
            memory_limit, (int, np.integer)) or memory_limit < 0:
        raise ArgumentError(f"memory_limit must be a non-negative number of bytes "
                            f"(int), got {memory_limit!r}")
    return int(memory_limit)


def _compile(text: str, source: str, target: str, arch: str, fusion: str | None,
             cache: bool, dump_dir, dump_regex: str, program_options=None,
             device=None) -> Executable:
    if target == "auto":
        target = "cuda" if cuda_available() else "cpu"
    use_cache = cache and dump_dir is None
    identity = compile_cache.compiler_identity(target) if use_cache else ""
    # A device other than the default is part of the keys (the launch
    # configuration depends on it).
    device_key = () if device is None else (repr(device),)
    options = repr(sorted((program_options or {}).items()))
    raw_key = compile_cache.make_key("raw", text, target, arch, fusion or "", identity,
                                     options, *device_key)
    disk = compile_cache.DiskCache() if use_cache else None
    if use_cache:
        hit = _memory.get(raw_key)
        if hit is not None:
            return hit
        # A whole program compiled before (any process), kept whole on disk:
        # its kernels share binaries that per-kernel entries cannot hold. Not
        # kept in memory: a program holds state (FFI instances, its buffer
        # pool) that must go with the caller's last reference.
        program = disk.get_program(raw_key, target) if fusion is None else None
        if program is not None:
            program.notes.append(FROM_DISK_CACHE)
            return program
        # The same text compiled before (any process): skip parsing too.
        known = disk.lookup_text(raw_key)
        exe = disk.get(known, target) if known else None
        if exe is not None:
            _memory.put(raw_key, exe)
            return exe
    start = time.perf_counter()
    # Compiling frees and allocates the same megabytes again and again: keep
    # them in the heap (see _malloc_tuning).
    _malloc_tuning.tune_for_compilation()
    module = hlo.parse_module(text, source=source)
    from .program_compiler import compile_program, is_whole_program
    if fusion is None and is_whole_program(module):
        if device is not None:
            raise ArgumentError("device= applies to single fusions; whole programs are "
                                "configured for the default device")
        program = compile_program(module, text=text, target=target, arch=arch,
                                  cache=cache, dump_dir=dump_dir, dump_regex=dump_regex,
                                  **(program_options or {}))
        if use_cache:
            disk.put_program(raw_key, program)
        return program
    from .analysis.device import default_device
    from .analysis.fusion import select_fusion
    spec_fusion = select_fusion(module, fusion,
                                device if device is not None else default_device(target))
    from .hlo.fingerprint import fingerprint
    # Names do not matter: a renamed fusion reuses the kernel (and its name).
    key = compile_cache.make_key("fusion", fingerprint(spec_fusion.computation), target,
                                 arch, identity, *device_key)
    if use_cache:
        exe = disk.get(key, target)
        if exe is not None:
            disk.remember_text(raw_key, key)
            _memory.put(raw_key, exe)
            return exe
    exe = _build(spec_fusion, text, target, arch, key, dump_dir, dump_regex)
    exe.timings["total"] = time.perf_counter() - start
    if use_cache:
        disk.put(key, exe)
        disk.remember_text(raw_key, key)
        _memory.put(raw_key, exe)
    return exe


def _build(fusion, text: str, target: str, arch: str, key: str,
           dump_dir, dump_regex: str, lower_only: bool = False) -> Executable:
    """The kernel of `fusion`, compiled. On cuda with `lower_only` it stops
    after the pipeline: `exe.lowered` holds the kernel for
    `backends.cuda.link` (a program links its kernels into one binary) and
    `exe.ptx` / `exe.cubin` stay None."""
    from mlir import ir as mlir_ir

    from . import codegen, emitters

    timings: dict[str, float] = {}
    if fusion.output_shapes and all(s.num_elements == 0 for s in fusion.output_shapes):
        # Nothing to compute: no kernel is launched (as XLA does).
        from .emitters.partitioner import sanitize
        spec = KernelSpec(
            name=sanitize(fusion.name), target=target, arch=arch, threads=1, blocks=0,
            shared_bytes=0,
            parameters=[ArgSpec(tuple(p.shape.dims), p.shape.element_type)
                        for p in fusion.parameters],
            outputs=[ArgSpec(tuple(s.dims), s.element_type) for s in fusion.output_shapes],
            emitter="none", fusion=fusion.name, fingerprint=key, version=__version__)
        return Executable(spec, text, "", notes=["every output is empty: no kernel"],
                          timings=timings)
    t0 = time.perf_counter()
    context = _thread_context()
    if target == "cpu":
        fusion.one_dimensional_grid = True   # the host emulates 1-D grids
    kernel = emitters.emit_fusion(fusion, context)
    try:
        kernel.module.operation.verify()
    except mlir_ir.MLIRError as e:
        raise CompileError(f"fusion '{fusion.name}': the {kernel.emitter} emitter "
                           f"produced invalid IR: {e}") from None
    emitted = str(kernel.module)
    timings["emit"] = time.perf_counter() - t0
    spec = KernelSpec(
        name=kernel.name, target=target, arch=arch,
        threads=kernel.launch.threads, blocks=kernel.launch.blocks,
        shared_bytes=kernel.launch.shared_bytes,
        parameters=[ArgSpec(tuple(p.shape.dims), p.shape.element_type)
                    for p in fusion.parameters],
        outputs=[ArgSpec(tuple(s.dims), s.element_type) for s in fusion.output_shapes],
        aliases=dict(kernel.aliases), emitter=kernel.emitter, fusion=fusion.name,
        fingerprint=key, version=__version__, blocks_y=kernel.launch.blocks_y)
    t0 = time.perf_counter()
    exe = Executable(spec, text, emitted, notes=list(kernel.notes), timings=timings)
    try:
        if target == "cuda" and lower_only:
            from .backends import cuda
            exe.lowered = cuda.lower_module(kernel.module, name=kernel.name,
                                            dump_dir=dump_dir, dump_regex=dump_regex,
                                            timings=timings)
        elif target == "cuda":
            from .backends import cuda
            binary = cuda.compile_module(kernel.module, arch=arch, name=kernel.name,
                                         dump_dir=dump_dir, dump_regex=dump_regex)
            exe.ptx, exe.cubin = binary.ptx, binary.cubin
            timings.update(binary.timings)
        else:
            # The host code is generated once, as a shared object that both
            # this process (ctypes) and the cache / saved artifacts load; the
            # JIT stands in only where no linker is installed.
            from . import pipeline
            from .backends import cpu
            pipeline.run(kernel.module, target="cpu", threads=spec.threads,
                         blocks=spec.blocks, dump_dir=dump_dir, dump_regex=dump_regex,
                         timings=timings if dump_dir is not None else None)
            timings["pipeline"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            exe.host_mlir = str(kernel.module)
            try:
                exe.host_library = cpu.shared_object(kernel.module, kernel.name)
                exe._kernel = HostKernel.from_bytes(spec, exe.host_library)
            except cpu.HostCompileError as e:
                exe.notes.append(f"no host shared object ({e}): the kernel runs in the "
                                 "JIT and is not cached on disk")
                exe._kernel = _HostRunner(spec, cpu.from_lowered(exe.host_mlir,
                                                                 entry=kernel.name))
            timings["jit"] = time.perf_counter() - t0
    except mlir_ir.MLIRError as e:
        raise CompileError(f"fusion '{fusion.name}': the {target} pipeline failed: {e}") from None
    except codegen.CodegenError as e:
        raise CompileError(f"fusion '{fusion.name}': {e}") from None
    return exe


_contexts = threading.local()


def _thread_context():
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
