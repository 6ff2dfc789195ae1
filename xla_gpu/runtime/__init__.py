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
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError
from .cuda import (CudaError, CudaKernel, CudaUnavailableError, DeviceArray,
                   cuda_available)
from .spec import ArgSpec, KernelSpec

__all__ = ["load", "LoadedKernel", "HostKernel", "KernelSpec", "ArgSpec", "CudaKernel",
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

    def run(self, *args) -> tuple[np.ndarray, ...]:
        buffers, outputs = self.spec.host_buffers(args)
        packed = (ctypes.c_void_p * max(len(buffers), 1))(*[b.ctypes.data for b in buffers])
        self._entry(packed)
        return self.spec.results(outputs)


class LoadedKernel:
    """What `load` returns: `.run(*arrays)` like Executable.run."""

    def __init__(self, directory: Path, spec: KernelSpec):
        self.directory = directory
        self.spec = spec
        self._impl: Any = None

    @property
    def launch_dims(self) -> dict:
        return {"threads": self.spec.threads, "blocks": self.spec.blocks,
                "shared_bytes": self.spec.shared_bytes}

    @property
    def ptx(self) -> str | None:
        path = self.directory / "kernel.ptx"
        return path.read_text() if path.exists() else None

    def _kernel(self):
        if self._impl is None:
            if self.spec.target == "cpu":
                so = self.directory / "kernel.so"
                if not so.exists():
                    raise ArtifactError(f"{self.directory}: no kernel.so for the cpu target")
                self._impl = HostKernel(self.spec, so)
            else:
                cubin = self.directory / "kernel.cubin"
                ptx = self.directory / "kernel.ptx"
                if not cubin.exists() and not ptx.exists():
                    raise ArtifactError(f"{self.directory}: neither kernel.cubin nor kernel.ptx")
                self._impl = CudaKernel(self.spec,
                                        cubin=cubin.read_bytes() if cubin.exists() else None,
                                        ptx=ptx.read_text() if ptx.exists() else None)
        return self._impl

    def run(self, *args, **kwargs) -> tuple:
        return self._kernel().run(*args, **kwargs)

    def time(self, *args, **kwargs) -> float:
        return self._kernel().time(*args, **kwargs)


def load(directory: str | Path) -> LoadedKernel:
    directory = Path(directory)
    manifest = directory / "kernel.json"
    try:
        spec = KernelSpec.from_json(manifest.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{directory}: no kernel.json (not a saved kernel)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise ArtifactError(f"{manifest}: unreadable ({e})") from None
    return LoadedKernel(directory, spec)
