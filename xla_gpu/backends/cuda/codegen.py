"""LLVM/NVVM dialect -> PTX (NVPTX backend, libdevice linked) -> cubin.

PTX needs no CUDA toolkit: LLVM's NVPTX backend runs in process, through
libXlaGpu's serializer (passes/ptx_serializer.cpp: the steps of MLIR's
`gpu-module-to-binary{format=isa}`, whose PTX it matches byte for byte, less
two fixed costs per kernel: it reads libdevice only for a kernel that
declares an external function, and keeps a TargetMachine per thread), or
MLIR's pass itself where the bindings' C API cannot be reached. libdevice is
the one the MLIR bindings embed where they do, else the `nvidia-nvvm`
wheel's or a CUDA install's; a cubin comes from
`ptxas` (PATH, the `nvidia-cuda-nvcc` wheel, a CUDA install) or else
nvJitLink (`cuda.bindings.nvjitlink` with the `nvidia-nvjitlink` wheel), and
is skipped when neither is there.

Numerics, as XLA:GPU computes: f32 sqrt is the IEEE `sqrt.rn.f32`
(xla-lower-to-llvm lowers math.sqrt to LLVM's sqrt intrinsic, not to
libdevice's __nv_sqrtf, which is `sqrt.approx.f32` unless __CUDA_PREC_SQRT
is reflected as 1, and LLVM 22's NVVMReflect takes that only from a
command-line option); f32 division is IEEE (`div.rn.f32`); subnormals are
kept (`__CUDA_FTZ` = 0, no `.ftz`), except where the hardware or libdevice
flushes them: f32 `atom.add` flushes subnormal inputs and results, and
libdevice's exp/tanh family (fast ex2.approx paths) flushes subnormal
results, as on XLA:GPU.

Drivers: the PTX is `.version 7.8` for sm_90 (the oldest PTX ISA that
knows sm_90, so any driver since CUDA 11.8 can JIT it), except a module
with a 128-bit compare-and-swap (complex<f64> atomics other than an add),
which needs `.version 8.3` (a CUDA 12.3 driver); a cubin from ptxas
13 needs a CUDA 13 driver, and the runtime falls back to the PTX when the
driver refuses the cubin (xla_gpu.runtime.cuda).

Limits: kernels carry `.maxntid` (their block size); `to_cubin` runs ptxas
with `-v` and raises LaunchLimitError (a CompileError) when the registers
per thread times the block size, or the shared memory, exceed the GPU's.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mlir import ir as _ir
from mlir.dialects import gpu
from mlir.passmanager import PassManager

from ... import _pass_runner
from ...errors import CompileError, ResourceError
from ...runtime.device import check_launch, for_arch
from .. import llvm_options

__all__ = ["to_ptx", "ptx_of_text", "ptx_of_operations", "to_cubin", "to_llvm_ir",
           "find_libdevice", "embedded_libdevice_size", "find_ptxas",
           "CodegenError", "LaunchLimitError", "KernelResources", "ptx_block_size",
           "parse_ptxas_info", "kernel_resources", "check_resources"]


class CodegenError(CompileError):
    """PTX or cubin generation failed; the message has the tool's output."""


class LaunchLimitError(CodegenError):
    """The kernel as compiled cannot be launched: too many registers for
    its block size, or too much shared memory."""


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel (`ptxas -v`)."""
    name: str
    registers: int = 0               # per thread
    shared_bytes: int = 0            # static shared memory
    stack_bytes: int = 0             # stack frame per thread
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    block_size: int = 0              # .maxntid x*y*z of the PTX (0: none)


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


@functools.lru_cache(maxsize=None)
def embedded_libdevice_size() -> int:
    """The size of the libdevice MLIR's NVVM target embeds (MLIR built with
    MLIR_NVVM_EMBED_LIBDEVICE links it into every gpu.module it
    serializes); 0 when the bindings carry none."""
    lib = _pass_runner.bindings_library()
    try:
        return int(ctypes.c_uint.in_dll(lib, "_mlir_embedded_libdevice_size").value) \
            if lib is not None else 0
    except ValueError:   # no such symbol
        return 0


def find_ptxas() -> str | None:
    return shutil.which("ptxas") or _find(("bin/ptxas", "*/bin/ptxas"))


def _check_arch(arch: str) -> None:
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise ValueError(f"arch must look like sm_90, got {arch!r}")


def _gpu_object(module: _ir.Module, arch: str, opt_level: int, fmt: str) -> bytes:
    """Runs gpu-module-to-binary on `module`'s ops wrapped in a gpu.module."""
    body = "\n".join(str(op) for op in module.body.operations)
    return _object_of_text(body, module.context, arch, opt_level, fmt)


def ptx_of_text(body: str, context: _ir.Context, arch: str = "sm_90",
                opt_level: int = 3) -> str:
    """PTX for `body`, the text of llvm/nvvm-dialect top-level operations
    (one kernel's or several kernels'), parsed in `context`."""
    return _object_of_text(body, context, arch, opt_level, "isa").decode()


def ptx_of_operations(operations: Sequence[_ir.Operation], context: _ir.Context,
                      arch: str = "sm_90", opt_level: int = 3) -> str:
    """PTX for llvm/nvvm-dialect top-level operations of a module in
    `context`, which move into the gpu.module that is compiled (their
    module keeps whatever else it held)."""
    # Only where MLIR embeds no libdevice does it matter whether one is called.
    calls_libdevice = not embedded_libdevice_size() and any(
        op.name == "llvm.func" and "sym_name" in op.attributes and
        _ir.StringAttr(op.attributes["sym_name"]).value.startswith("__nv_")
        for op in operations)
    wrapped = _wrapped_module("", context, arch, opt_level, calls_libdevice)
    insert = _ir.InsertionPoint(wrapped.body.operations[0].regions[0].blocks[0])
    for op in operations:
        op.detach_from_parent()
        insert.insert(op)
    return _serialize(wrapped, "isa").decode()


def _wrapped_module(body: str, context: _ir.Context, arch: str, opt_level: int,
                    calls_libdevice: bool) -> _ir.Module:
    """`body` (llvm/nvvm operations' text) in one gpu.module for `arch`,
    linked with libdevice from disk when `calls_libdevice` (which the
    callers only say where MLIR embeds none)."""
    _check_arch(arch)
    # libdevice from disk only where MLIR embeds none, and only for a kernel
    # that calls it (loading it costs ~3 ms a kernel; most loop and
    # reduction kernels call none of it).
    libdevice = find_libdevice() if calls_libdevice else None
    link = f', link = ["{libdevice}"]' if libdevice else ""
    target = f'#nvvm.target<O = {opt_level}, chip = "{arch}"{link}>'
    return _ir.Module.parse(
        f"module attributes {{gpu.container_module}} {{\n"
        f"gpu.module @kernels [{target}] {{\n{body}\n}}\n}}", context)


def _object_of_text(body: str, context: _ir.Context, arch: str, opt_level: int,
                    fmt: str) -> bytes:
    """Runs gpu-module-to-binary (`fmt`: isa, offloading) on the llvm/nvvm
    operations of `body` wrapped in one gpu.module."""
    calls_libdevice = not embedded_libdevice_size() and "@__nv_" in body
    return _serialize(_wrapped_module(body, context, arch, opt_level, calls_libdevice), fmt)


def _serialize(wrapped: _ir.Module, fmt: str) -> bytes:
    """gpu-module-to-binary (`fmt`: isa, offloading) on `wrapped`'s
    gpu.module: its one object's bytes. PTX comes from libXlaGpu's
    serializer (the same steps, less fixed cost: see
    passes/ptx_serializer.cpp) where the bindings' C API can be reached."""
    llvm_options.device_codegen_begins()
    if fmt == "isa" and _pass_runner.available():
        return _native_ptx(wrapped.body.operations[0])
    return _serialize_with_mlir(wrapped, fmt)


def _serialize_with_mlir(wrapped: _ir.Module, fmt: str) -> bytes:
    """MLIR's own gpu-module-to-binary on `wrapped`, which becomes a
    gpu.binary."""
    to_binary = f"builtin.module(gpu-module-to-binary{{format={fmt}}})"
    try:
        if _pass_runner.available():
            # Without the GIL: kernels compiled on several threads overlap.
            _pass_runner.run_pipeline(wrapped, to_binary)
        else:
            PassManager.parse(to_binary, wrapped.context).run(wrapped.operation)
    except _ir.MLIRError as e:
        raise CodegenError(f"NVPTX code generation failed: {e}") from e
    binary = wrapped.body.operations[0]
    (obj,) = [gpu.ObjectAttr(a) for a in binary.attributes["objects"]]
    return bytes(obj.object)


def _native_ptx(gpu_module: _ir.Operation, embedded_libdevice: bool = True) -> bytes:
    """PTX of `gpu_module` through xlaGpuSerializeToPtx, without the GIL;
    with the bindings' embedded libdevice where they have one (else, or
    without `embedded_libdevice`, only the files the target links)."""
    from ... import _native
    address, size = _embedded_libdevice() if embedded_libdevice else (None, 0)
    parts: list[bytes] = []
    callback = _native.STRING_CALLBACK(
        lambda ref, _: parts.append(_native.string_ref_bytes(ref)))
    with _pass_runner.error_diagnostics(gpu_module.context) as diagnostics:
        done = _native.lib().xlaGpuSerializeToPtx(_native.to_handle(gpu_module), address,
                                                  size, callback, None)
    if not done:
        error = _pass_runner.mlir_error("PTX serialization failed", diagnostics)
        raise CodegenError(f"NVPTX code generation failed: {error}") from error
    return parts[0]


@functools.lru_cache(maxsize=None)
def _embedded_libdevice() -> tuple[int | None, int]:
    """(address, size) of the libdevice bitcode the MLIR bindings embed,
    (None, 0) without one (the gpu.module's target then names a file)."""
    size = embedded_libdevice_size()
    if not size:
        return None, 0
    data = ctypes.c_ubyte.in_dll(_pass_runner.bindings_library(), "_mlir_embedded_libdevice")
    return ctypes.addressof(data), size


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


def ptx_block_size(ptx: str) -> dict[str, int]:
    """The `.maxntid` block size (x*y*z) of each `.entry` in `ptx`."""
    sizes: dict[str, int] = {}
    for match in re.finditer(r"\.entry\s+([A-Za-z_$][\w$.]*)\s*\(", ptx):
        name = match.group(1)
        # Directives sit between the parameter list and the body's brace.
        close = ptx.find(")", match.end())
        body = ptx.find("{", close)
        directives = ptx[close:body] if close >= 0 and body >= 0 else ""
        found = re.search(r"\.maxntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?",
                          directives)
        if found:
            x, y, z = (int(g) if g else 1 for g in found.groups())
            sizes[name] = x * y * z
    return sizes


def parse_ptxas_info(log: str, ptx: str = "") -> dict[str, KernelResources]:
    """Per-kernel resources from ptxas's `-v` log (also nvJitLink's info
    log), with the block size from `ptx`'s `.maxntid`."""
    blocks = ptx_block_size(ptx) if ptx else {}
    found: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?", line)
        if m:
            current = found.setdefault(m.group(1), {})
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                      r"(\d+) bytes spill loads", line)
        if m:
            current.update(stack_bytes=int(m.group(1)), spill_store_bytes=int(m.group(2)),
                           spill_load_bytes=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["registers"] = int(m.group(1))
            smem = re.search(r"(\d+) bytes smem", line)
            current["shared_bytes"] = int(smem.group(1)) if smem else 0
    return {name: KernelResources(name, block_size=blocks.get(name, 0), **values)
            for name, values in found.items()}


def check_resources(resources: dict[str, KernelResources], arch: str) -> None:
    """LaunchLimitError when a kernel cannot launch with its block size on
    `arch`: registers x threads per block, static shared memory."""
    limits = for_arch(arch)
    for r in resources.values():
        try:
            check_launch(r.name, max(r.block_size, 1), 1, 0,
                         static_shared_bytes=r.shared_bytes,
                         registers_per_thread=r.registers if r.block_size else 0,
                         limits=limits)
        except ResourceError as e:
            raise LaunchLimitError(f"{e} (ptxas -v for {arch})") from None


def _nvjitlink_cubin(ptx: str, arch: str) -> tuple[bytes, str] | None:
    """The cubin through nvJitLink and its info log, or None when its
    library is missing."""
    try:
        from cuda.bindings import nvjitlink
        handle = nvjitlink.create(3, [f"-arch={arch}", "-O3", "-verbose"])
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
        info = bytearray(nvjitlink.get_info_log_size(handle))
        nvjitlink.get_info_log(handle, info)
        return bytes(cubin), info.rstrip(b"\0").decode(errors="replace")
    finally:
        nvjitlink.destroy(handle)


@functools.lru_cache(maxsize=None)
def cubin_compiler() -> tuple[str, str] | None:
    """What turns PTX into a cubin, as ("nvjitlink", version) or ("ptxas",
    path); None when neither is installed. nvJitLink (the nvidia-nvjitlink
    wheel) compiles in process, 7-10 ms less per kernel than starting
    ptxas (measured with bench/run_cpu.py); ptxas is used where nvJitLink's
    library does not load. XLA_GPU_CUBIN_COMPILER=ptxas|nvjitlink chooses
    one (the other is not tried)."""
    choice = os.environ.get("XLA_GPU_CUBIN_COMPILER", "").strip().lower()
    if choice not in ("", "ptxas", "nvjitlink"):
        raise ValueError(f"XLA_GPU_CUBIN_COMPILER must be ptxas or nvjitlink, got {choice!r}")
    if choice in ("", "nvjitlink"):
        try:
            from cuda.bindings import nvjitlink
            return "nvjitlink", ".".join(str(v) for v in nvjitlink.version())
        except Exception:  # no cuda-python, or no libnvJitLink to load
            if choice == "nvjitlink":
                return None
    ptxas = find_ptxas()
    return ("ptxas", ptxas) if ptxas else None


def _ptxas_cubin(ptxas: str, ptx: str, arch: str) -> tuple[bytes, str]:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        result = subprocess.run([ptxas, f"-arch={arch}", "-O3", "-v", str(src), "-o", str(out)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise CodegenError(f"ptxas failed:\n{result.stderr}")
        return out.read_bytes(), result.stdout + result.stderr


def _compile_cubin(ptx: str, arch: str, use_ptxas: bool | None) -> tuple[bytes, str] | None:
    """(cubin, resource log) through `cubin_compiler()` (use_ptxas None),
    ptxas -v (True) or nvJitLink (False); None when that is not
    available."""
    _check_arch(arch)
    if use_ptxas is None:
        chosen = cubin_compiler()
        if chosen is None:
            return None
        use_ptxas = chosen[0] == "ptxas"
    if not use_ptxas:
        return _nvjitlink_cubin(ptx, arch)
    ptxas = find_ptxas()
    return None if ptxas is None else _ptxas_cubin(ptxas, ptx, arch)


def kernel_resources(ptx: str, arch: str = "sm_90",
                     use_ptxas: bool | None = None) -> dict[str, KernelResources] | None:
    """Registers, shared memory, stack and spills of each kernel of `ptx`
    as `cubin_compiler()` (or the one `use_ptxas` names) compiles it; None
    without it."""
    compiled = _compile_cubin(ptx, arch, use_ptxas)
    return None if compiled is None else parse_ptxas_info(compiled[1], ptx)


def to_cubin(ptx: str, arch: str = "sm_90", use_ptxas: bool | None = None) -> bytes | None:
    """The cubin of `ptx` through `cubin_compiler()` (nvJitLink in process
    where it loads, else ptxas), or through ptxas (`use_ptxas=True`) or
    nvJitLink (False); None when that is not available. LaunchLimitError when a
    kernel's registers x `.maxntid` threads or its shared memory exceed
    what `arch` gives a block."""
    compiled = _compile_cubin(ptx, arch, use_ptxas)
    if compiled is None:
        return None
    cubin, log = compiled
    check_resources(parse_ptxas_info(log, ptx), arch)
    return cubin
