"""LLVM/NVVM dialect -> PTX (NVPTX backend, libdevice linked) -> cubin.

PTX needs no CUDA toolkit: MLIR's `gpu-module-to-binary` runs LLVM's NVPTX
backend in process. libdevice comes from the `nvidia-nvvm` wheel or a CUDA
install; a cubin comes from `ptxas` (PATH, the `nvidia-cuda-nvcc` wheel, a
CUDA install) or else nvJitLink (`cuda.bindings.nvjitlink` with the
`nvidia-nvjitlink` wheel), and is skipped when neither is there.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from mlir import ir as _ir
from mlir.dialects import gpu
from mlir.passmanager import PassManager

__all__ = ["to_ptx", "to_cubin", "to_llvm_ir", "find_libdevice", "find_ptxas",
           "CodegenError"]


class CodegenError(RuntimeError):
    """PTX or cubin generation failed; the message has the tool's output."""


def _nvidia_dirs() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    dirs = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(Path(os.environ[env]))
    dirs += [Path(p) for p in sorted(glob.glob("/usr/local/cuda*"), reverse=True)]
    return dirs


def _find(patterns: tuple[str, ...]) -> str | None:
    """The newest file matching one of `patterns` under the CUDA locations."""
    for base in _nvidia_dirs():
        for pattern in patterns:
            found = sorted(base.glob(pattern))
            if found:
                return str(found[-1])
    return None


def find_libdevice() -> str | None:
    return _find(("nvvm/libdevice/libdevice*.bc", "*/nvvm/libdevice/libdevice*.bc"))


def find_ptxas() -> str | None:
    return shutil.which("ptxas") or _find(("bin/ptxas", "*/bin/ptxas"))


def _check_arch(arch: str) -> None:
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise ValueError(f"arch must look like sm_90, got {arch!r}")


def _gpu_object(module: _ir.Module, arch: str, opt_level: int, fmt: str) -> bytes:
    """Runs gpu-module-to-binary on `module`'s ops wrapped in a gpu.module."""
    _check_arch(arch)
    libdevice = find_libdevice()
    link = f', link = ["{libdevice}"]' if libdevice else ""
    target = f'#nvvm.target<O = {opt_level}, chip = "{arch}"{link}>'
    body = "\n".join(str(op) for op in module.body.operations)
    wrapped = _ir.Module.parse(
        f"module attributes {{gpu.container_module}} {{\n"
        f"gpu.module @kernels [{target}] {{\n{body}\n}}\n}}", module.context)
    try:
        PassManager.parse(f"builtin.module(gpu-module-to-binary{{format={fmt}}})",
                          module.context).run(wrapped.operation)
    except _ir.MLIRError as e:
        raise CodegenError(f"NVPTX code generation failed: {e}") from e
    binary = wrapped.body.operations[0]
    (obj,) = [gpu.ObjectAttr(a) for a in binary.attributes["objects"]]
    return bytes(obj.object)


def to_ptx(module: _ir.Module, arch: str = "sm_90", opt_level: int = 3) -> str:
    """PTX for the llvm/nvvm-dialect `module` (after the pipeline), libdevice
    linked. The module is left as it was."""
    return _gpu_object(module, arch, opt_level, "isa").decode()


def to_llvm_ir(module: _ir.Module, arch: str = "sm_90") -> str:
    """The LLVM IR (text) that the NVPTX backend receives, libdevice linked."""
    bitcode = _gpu_object(module, arch, 3, "offloading")
    llvm_dis = Path(importlib.util.find_spec("llvm").submodule_search_locations[0]) / "bin" / "llvm-dis"
    result = subprocess.run([str(llvm_dis), "-o", "-", "-"], input=bitcode,
                            capture_output=True)
    if result.returncode != 0:
        raise CodegenError(f"llvm-dis failed: {result.stderr.decode()}")
    return result.stdout.decode()


def _nvjitlink_cubin(ptx: str, arch: str) -> bytes | None:
    """The cubin through nvJitLink, or None when its library is missing."""
    try:
        from cuda.bindings import nvjitlink
        handle = nvjitlink.create(2, [f"-arch={arch}", "-O3"])
    except Exception:  # no cuda-python, or no libnvJitLink to load
        return None
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data),
                               "kernel.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            raise CodegenError(f"nvJitLink failed: {e}\n{log.decode(errors='replace')}") from e
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def to_cubin(ptx: str, arch: str = "sm_90", use_ptxas: bool = True) -> bytes | None:
    """The cubin of `ptx` through ptxas (if found and `use_ptxas`), else
    nvJitLink; None when neither is available."""
    _check_arch(arch)
    ptxas = find_ptxas() if use_ptxas else None
    if ptxas is None:
        return _nvjitlink_cubin(ptx, arch)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        result = subprocess.run([ptxas, f"-arch={arch}", "-O3", str(src), "-o", str(out)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise CodegenError(f"ptxas failed:\n{result.stderr}")
        return out.read_bytes()
