"""Running compiled kernels: numpy and cuda-python only, never MLIR, so a
kernel compiled on one machine runs on another that has a GPU but no
compiler.

    from xla_gpu import runtime
    kernel = runtime.load("artifacts/gelu")      # a directory Executable.save wrote
    (out,) = kernel.run(x)

An artifact directory holds `kernel.json` (launch dimensions, argument
layout), `kernel.ptx`, `kernel.cubin` when one was built, `fusion.hlo`, and
for the cpu target `kernel.so` (a host shared object run through ctypes).
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError
from .cuda import (CudaError, CudaKernel, CudaUnavailableError, DeviceArray,
                   cuda_available)
from .artifact import parse_spec, read_artifact, validate_spec
from .memory import check_host_memory
from .spec import ArgSpec, KernelSpec

__all__ = ["load", "LoadedKernel", "HostKernel", "EmptyKernel", "KernelSpec", "ArgSpec", "CudaKernel",
           "CudaError", "CudaUnavailableError", "DeviceArray", "cuda_available",
           "ArtifactError"]


class HostKernel:
    """A cpu-target kernel in a shared object: `<name>_host(void **args)`
    runs the whole grid (see xla_gpu.backends.cpu)."""

    def __init__(self, spec: KernelSpec, library: str | Path):
        self.spec = spec
        self._lib = ctypes.CDLL(str(library))
        self._entry = getattr(self._lib, f"{spec.name}_host")
        self._entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        self._entry.restype = None

    @staticmethod
    def from_bytes(spec: KernelSpec, library: bytes) -> "HostKernel":
        """Loads a shared object held in memory (already verified): written
        to a private temporary file, loaded, and unlinked (the mapping
        stays)."""
        fd, path = tempfile.mkstemp(prefix="xla_gpu_", suffix=".so")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(library)
            try:
                return HostKernel(spec, path)
            except (OSError, AttributeError) as e:
                raise ArtifactError(f"{spec.name}: the host kernel does not load: {e}") \
                    from None
        finally:
            os.unlink(path)

    def run(self, *args) -> tuple[np.ndarray, ...]:
        check_output_memory(self.spec)
        buffers, outputs = self.spec.host_buffers(args)
        packed = (ctypes.c_void_p * max(len(buffers), 1))(*[b.ctypes.data for b in buffers])
        self._entry(packed)
        return self.spec.results(outputs)


def check_output_memory(spec: KernelSpec) -> None:
    """Large outputs must fit in host memory: a clear ResourceError instead
    of numpy's allocation failure."""
    nbytes = sum(o.nbytes for o in spec.outputs)
    if nbytes > 1 << 26:
        check_host_memory(nbytes, f"the outputs of kernel '{spec.name}'")


class EmptyKernel:
    """A fusion whose outputs are all empty: nothing is launched; `run`
    checks the arguments and returns empty arrays."""

    def __init__(self, spec: KernelSpec):
        self.spec = spec

    def run(self, *args, stream=None, device_outputs: bool = False) -> tuple:
        self.spec.check_arguments(args, device_ok=self.spec.target == "cuda")
        if device_outputs:
            return tuple(DeviceArray(o.shape, o.storage_dtype) for o in self.spec.outputs)
        return tuple(np.zeros(o.shape, o.numpy_dtype) for o in self.spec.outputs)

    def time(self, *args, **kwargs) -> float:
        self.run(*args)
        return 0.0


class LoadedKernel:
    """What `load` returns: `.run(*arrays)` like Executable.run. The files
    were verified when loaded (see xla_gpu.runtime.artifact)."""

    def __init__(self, directory: Path, spec: KernelSpec, files: dict[str, bytes],
                 digest: str):
        self.directory = directory
        self.spec = spec
        self.digest = digest
        self._files = files
        self._impl: Any = None

    @property
    def launch_dims(self) -> dict:
        return {"threads": self.spec.threads, "blocks": self.spec.blocks,
                "shared_bytes": self.spec.shared_bytes}

    @property
    def ptx(self) -> str | None:
        data = self._files.get("kernel.ptx")
        return None if data is None else data.decode()

    def _kernel(self):
        if self._impl is None:
            if self.spec.blocks == 0:
                self._impl = EmptyKernel(self.spec)
            elif self.spec.target == "cpu":
                library = self._files.get("kernel.so")
                if library is None:
                    raise ArtifactError(f"{self.directory}: no kernel.so for the cpu target")
                self._impl = HostKernel.from_bytes(self.spec, library)
            else:
                cubin, ptx = self._files.get("kernel.cubin"), self.ptx
                if cubin is None and ptx is None:
                    raise ArtifactError(f"{self.directory}: neither kernel.cubin nor kernel.ptx")
                self._impl = CudaKernel(self.spec, cubin=cubin, ptx=ptx)
        return self._impl

    def run(self, *args, **kwargs) -> tuple:
        return self._kernel().run(*args, **kwargs)

    def time(self, *args, **kwargs) -> float:
        return self._kernel().time(*args, **kwargs)


def load(directory: str | Path, *, expected_digest: str | None = None):
    """Loads a directory `save` wrote: a compiled fusion (`kernel.json`;
    returns a LoadedKernel) or a whole program (`program.json`; returns a
    ProgramExecutable). Every file is checked against digests.json, and the
    manifests against the kernels' ABI, before anything runs;
    `expected_digest` (what `save` set as `artifact_digest`) also pins
    digests.json. Loading runs the artifact's code in this process: load
    only artifacts you trust (SECURITY.md)."""
    directory = Path(directory)
    if (directory / "program.json").exists():
        from .program import load_program
        return load_program(directory, expected_digest=expected_digest)
    files, digest = read_artifact(directory, expected_digest)
    spec = parse_spec(files, str(directory))
    hlo_text = files.get("fusion.hlo")
    validate_spec(spec, None if hlo_text is None else hlo_text.decode(errors="replace"),
                  str(directory))
    return LoadedKernel(directory, spec, files, digest)
