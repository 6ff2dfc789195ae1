"""Running compiled kernels: numpy and cuda-python only, never MLIR, so a
kernel compiled on one machine runs on another that has a GPU but no
compiler.

    from xla_gpu import runtime
    # a directory Executable.save wrote; the digest it set pins every byte
    kernel = runtime.load("artifacts/gelu", expected_digest=exe.artifact_digest)
    (out,) = kernel.run(x)

An artifact directory holds `kernel.json` (launch dimensions, argument
layout), `kernel.ptx`, `kernel.cubin` when one was built, `fusion.hlo`, and
for the cpu target `kernel.so` (a host shared object run through ctypes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArtifactError
from .cuda import (CudaError, CudaKernel, CudaUnavailableError, DeviceArray,
                   cuda_available)
from .artifact import check_load_arguments, parse_spec, read_artifact, validate_spec
from .host_kernel import HostKernel, check_output_memory  # noqa: F401  (the compiler's)
from .spec import ArgSpec, KernelSpec

__all__ = ["load", "LoadedKernel", "HostKernel", "EmptyKernel", "KernelSpec", "ArgSpec", "CudaKernel",
           "CudaError", "CudaUnavailableError", "DeviceArray", "cuda_available",
           "ArtifactError"]


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


def load(directory: str | Path, *, expected_digest: str | None = None,
         trusted: bool = False):
    """Loads a directory `save` wrote: a compiled fusion (`kernel.json`;
    returns a LoadedKernel) or a whole program (`program.json`; returns a
    ProgramExecutable). Every file is checked against digests.json, and the
    manifests against the kernels' ABI, before anything runs. Loading runs
    the artifact's code in this process, so the load must be pinned —
    `expected_digest`, the `artifact_digest` that save set, fixes every
    byte — or say `trusted=True` for a directory that only you can write
    (SECURITY.md says what each guarantees)."""
    check_load_arguments(directory, expected_digest, trusted)
    directory = Path(directory)
    if (directory / "program.json").exists():
        from .program import load_program
        return load_program(directory, expected_digest=expected_digest, trusted=trusted)
    files, digest = read_artifact(directory, expected_digest, trusted=trusted)
    spec = parse_spec(files, str(directory))
    hlo_text = files.get("fusion.hlo")
    validate_spec(spec, None if hlo_text is None else hlo_text.decode(errors="replace"),
                  str(directory))
    return LoadedKernel(directory, spec, files, digest)
