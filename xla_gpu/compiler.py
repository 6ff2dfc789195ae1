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
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, hlo
from .errors import CompileError
from .runtime import CudaKernel, HostKernel, KernelSpec, cuda_available
from .runtime.spec import ArgSpec

__all__ = ["compile", "Executable", "CompileError", "cache_dir", "clear_memory_cache"]

TARGETS = ("auto", "cuda", "cpu")


def cache_dir() -> Path:
    """`XLA_GPU_CACHE_DIR`, else `$XDG_CACHE_HOME/xla_gpu`, else ~/.cache/xla_gpu."""
    env = os.environ.get("XLA_GPU_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xla_gpu"


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
    _kernel: Any = field(default=None, repr=False)

    @property
    def target(self) -> str:
        return self.spec.target

    @property
    def launch_dims(self) -> dict:
        return {"threads": self.spec.threads, "blocks": self.spec.blocks,
                "shared_bytes": self.spec.shared_bytes}

    def mlir(self, stage: str = "emitted") -> str:
        """The IR at `stage`: "emitted" (what the emitter produced), a pass
        name of the pipeline (the IR after its first run), or "llvm" (the
        end of the pipeline)."""
        if stage == "emitted":
            return self.emitted_mlir
        from mlir import ir as mlir_ir

        from . import ir, pipeline
        passes = pipeline.passes_for(self.target)
        names = [pipeline.pass_name(p) for p in passes]
        if stage != "llvm":
            if stage not in names:
                raise ValueError(f"no stage '{stage}': emitted, llvm, or one of "
                                 + ", ".join(dict.fromkeys(names)))
            passes = passes[:names.index(stage) + 1]
        module = mlir_ir.Module.parse(self.emitted_mlir, ir.Context())
        pipeline.run(module, passes=passes)
        return str(module)

    def _load(self):
        if self._kernel is None:
            if self.target == "cuda":
                self._kernel = CudaKernel(self.spec, cubin=self.cubin, ptx=self.ptx)
            elif self.host_library is not None:
                # A shared object: no MLIR needed (a cache hit, a saved kernel).
                fd, path = tempfile.mkstemp(prefix="xla_gpu_", suffix=".so")
                with os.fdopen(fd, "wb") as f:
                    f.write(self.host_library)
                try:
                    self._kernel = HostKernel(self.spec, path)
                finally:
                    os.unlink(path)  # the loaded library stays mapped
            else:
                from .backends import cpu
                self._kernel = _HostRunner(self.spec, cpu.from_lowered(
                    self.host_mlir, entry=self.spec.name))
        return self._kernel

    def run(self, *arrays, **kwargs) -> tuple:
        """Runs the kernel on `arrays` (the fusion's parameters). cuda also
        takes device arrays (`__cuda_array_interface__`), `stream=` and
        `device_outputs=True`."""
        if self.target == "cpu" and kwargs:
            raise TypeError(f"the cpu target takes no options, got {sorted(kwargs)}")
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
        """Writes the artifact `xla_gpu.runtime.load` reads."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
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
        for name, data in files.items():
            (directory / name).write_bytes(data)
        digests = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
        (directory / "digests.json").write_text(json.dumps(digests, indent=1))
        return directory

    @staticmethod
    def load(directory: str | Path) -> "Executable":
        """Reads what `save` wrote; raises ValueError when a file is missing
        or does not match its digest (a corrupt cache entry)."""
        directory = Path(directory)
        digests = json.loads((directory / "digests.json").read_text())
        data = {}
        for name, digest in digests.items():
            blob = (directory / name).read_bytes()
            if hashlib.sha256(blob).hexdigest() != digest:
                raise ValueError(f"{directory / name}: digest mismatch")
            data[name] = blob
        spec = KernelSpec.from_json(data["kernel.json"].decode())
        return Executable(
            spec, data["fusion.hlo"].decode(), data["emitted.mlir"].decode(),
            ptx=data["kernel.ptx"].decode() if "kernel.ptx" in data else None,
            cubin=data.get("kernel.cubin"),
            host_mlir=data["kernel.host.mlir"].decode() if "kernel.host.mlir" in data else None,
            host_library=data.get("kernel.so"))


# -- the compile cache ---------------------------------------------------------

_memory: dict[str, Executable] = {}
_memory_lock = threading.Lock()


def clear_memory_cache() -> None:
    with _memory_lock:
        _memory.clear()


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def _disk_get(key: str, target: str) -> Executable | None:
    entry = cache_dir() / key
    if not entry.is_dir():
        return None
    try:
        exe = Executable.load(entry)
        if exe.spec.version != __version__ or exe.spec.target != target:
            raise ValueError("stale entry")
        if target == "cpu" and exe.host_mlir is None:
            raise ValueError("no host kernel")
        return exe
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        shutil.rmtree(entry, ignore_errors=True)  # rebuilt by the caller
        return None


def _disk_put(key: str, exe: Executable) -> None:
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
        exe.save(tmp)
        final = root / key
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    except OSError:
        pass  # a read-only or full cache only costs recompilation


def _remember_text(raw_key: str, key: str) -> None:
    try:
        raw = cache_dir() / "raw"
        raw.mkdir(parents=True, exist_ok=True)
        tmp = raw / f".{raw_key}.{os.getpid()}"
        tmp.write_text(key)
        os.replace(tmp, raw / raw_key)
    except OSError:
        pass


def compile(hlo_text: str | os.PathLike, *, target: str = "auto", arch: str = "sm_90",
            fusion: str | None = None, cache: bool = True,
            dump_dir: str | os.PathLike | None = None,
            dump_regex: str = ".*") -> Executable:
    """Compiles one fusion of `hlo_text` (HLO text, or a path to it).

    target: "cuda" (PTX/cubin for `arch`, launched through cuda-python),
    "cpu" (the same kernel run by grid emulation on the host), or "auto"
    (cuda when a GPU is usable). fusion: which fusion of the ENTRY to
    compile (default: the only one). dump_dir: write the IR after each pass
    matching dump_regex, and the PTX (bypasses the cache)."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    if not (isinstance(arch, str) and arch.startswith("sm_") and arch[3:].isdigit()):
        raise ValueError(f"arch must look like sm_90, got {arch!r}")
    source = "<hlo>"
    text = hlo_text
    if isinstance(hlo_text, os.PathLike) or (
            isinstance(hlo_text, str) and "\n" not in hlo_text and
            hlo_text.endswith(".hlo") and os.path.exists(hlo_text)):
        source = str(hlo_text)
        text = Path(hlo_text).read_text()
    if target == "auto":
        target = "cuda" if cuda_available() else "cpu"
    use_cache = cache and dump_dir is None
    raw_key = _key("raw", text, target, arch, fusion or "", __version__)
    if use_cache:
        with _memory_lock:
            hit = _memory.get(raw_key)
        if hit is not None:
            return hit
    if use_cache:
        # The same text compiled before (any process): skip parsing too.
        try:
            known = (cache_dir() / "raw" / raw_key).read_text().strip()
        except OSError:
            known = ""
        exe = _disk_get(known, target) if known else None
        if exe is not None:
            with _memory_lock:
                _memory[raw_key] = exe
            return exe
    start = time.perf_counter()
    module = hlo.parse_module(text, source=source)
    from .analysis.fusion import select_fusion
    spec_fusion = select_fusion(module, fusion)
    from .hlo.fingerprint import fingerprint
    # Names do not matter: a renamed fusion reuses the kernel (and its name).
    key = _key("fusion", fingerprint(spec_fusion.computation), target, arch, __version__)
    if use_cache:
        exe = _disk_get(key, target)
        if exe is not None:
            _remember_text(raw_key, key)
            with _memory_lock:
                _memory[raw_key] = exe
            return exe
    exe = _build(spec_fusion, text, target, arch, key, dump_dir, dump_regex)
    exe.timings["total"] = time.perf_counter() - start
    if use_cache:
        _disk_put(key, exe)
        _remember_text(raw_key, key)
        with _memory_lock:
            _memory[raw_key] = exe
    return exe


def _build(fusion, text: str, target: str, arch: str, key: str,
           dump_dir, dump_regex: str) -> Executable:
    from mlir import ir as mlir_ir

    from . import codegen, emitters, ir, pipeline

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    context = ir.Context()
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
        fingerprint=key, version=__version__)
    t0 = time.perf_counter()
    exe = Executable(spec, text, emitted, notes=list(kernel.notes), timings=timings)
    try:
        if target == "cuda":
            pipeline.run(kernel.module, target="cuda", dump_dir=dump_dir,
                         dump_regex=dump_regex)
            timings["pipeline"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            exe.ptx = codegen.to_ptx(kernel.module, arch)
            timings["ptx"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            exe.cubin = codegen.to_cubin(exe.ptx, arch)
            timings["cubin"] = time.perf_counter() - t0
            if dump_dir is not None:
                Path(dump_dir, f"{kernel.name}.ptx").write_text(exe.ptx)
        else:
            from .backends import cpu
            host = cpu.compile_module(kernel.module, entry=kernel.name,
                                      threads=spec.threads, blocks=spec.blocks,
                                      dump_dir=dump_dir)
            exe.host_mlir = host.llvm_ir
            exe._kernel = _HostRunner(spec, host)
            try:  # for the disk cache and saved kernels: runs without MLIR
                exe.host_library = cpu.shared_object(
                    mlir_ir.Module.parse(host.llvm_ir, context), kernel.name)
            except cpu.HostCompileError as e:
                exe.notes.append(f"no host shared object: {e}")
            timings["pipeline+jit"] = time.perf_counter() - t0
    except mlir_ir.MLIRError as e:
        raise CompileError(f"fusion '{fusion.name}': the {target} pipeline failed: {e}") from None
    except codegen.CodegenError as e:
        raise CompileError(f"fusion '{fusion.name}': {e}") from None
    return exe


class _HostRunner:
    """Executable.run for the cpu target: numpy in, numpy out, the grid
    split over host threads when it has enough blocks."""

    def __init__(self, spec: KernelSpec, host):
        self.spec, self.host = spec, host

    def run(self, *arrays) -> tuple[np.ndarray, ...]:
        buffers, outputs = self.spec.host_buffers(arrays)
        workers = min(os.cpu_count() or 1, 8) if self.spec.blocks >= 64 else 1
        self.host.run(buffers, workers=workers)
        return self.spec.results(outputs)
