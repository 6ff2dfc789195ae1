"""Loading and launching kernels through `cuda.bindings.driver`.

Every driver call is checked; a failure raises CudaError naming the call
and the CUDA error. Without a driver or a GPU, CudaUnavailableError.

Contexts: xla_gpu uses the primary context of device 0 (the one the CUDA
runtime, jax and PyTorch share). Every entry point (load, launch, run,
copies, to_host, and freeing memory from a finalizer on any thread) makes
it current for the call with cuCtxPushCurrent/cuCtxPopCurrent, so the
calling thread's own context is left as it was and a second thread needs
no setup.

Streams: `stream=` takes None (the legacy default stream), a CUstream, its
integer handle, or an object with `__cuda_stream__` (cuda.core). Device
arguments are ordered after their producer: a v3
`__cuda_array_interface__` `stream` gets an event that our stream waits on,
and a DLPack producer is handed our stream in `__dlpack__(stream=...)`.
`run` returns once the results are complete (host arrays, or DeviceArrays
whose `__cuda_array_interface__` has no pending stream).

Alignment: kernels read and write 16 bytes at a time at offsets relative
to each buffer's start (see spec.py). A device argument whose address is
not a multiple of its ArgSpec.alignment is copied into a fresh allocation
(cuMemAlloc returns 256-byte aligned memory) before the launch: reading it
in place would raise CUDA_ERROR_MISALIGNED_ADDRESS, a sticky error that
ruins the context for the rest of the process.

Loading: the cubin first; when the driver refuses it (a cubin from a newer
ptxas than the driver, CUDA_ERROR_UNSUPPORTED_PTX_VERSION, or for another
GPU, CUDA_ERROR_NO_BINARY_FOR_GPU) the PTX is JIT-compiled instead, with a
RuntimeWarning. The module is unloaded when its CudaKernel is garbage
collected. Launch limits (threads, grid, shared memory, registers) are
checked before a launch with ResourceError, the load-time ones against the
loaded function's attributes.

Why cuda.bindings and not cuda.core: cuda.core (1.2) covers what this
needs (ObjectCode.from_cubin/from_ptx, Kernel.attributes, LaunchConfig,
Stream.wait, events, graphs, StridedMemoryView for DLPack/CAI), but
cuda.bindings is the one dependency every install has (cuda-python pulls
cuda.core only from 13.x), imports in ~0.33 s against ~0.71 s for
cuda.core (measured here, median of 5 cold imports), and the driver calls
keep what this module must control in plain sight: which context is
pushed per call, when a module is unloaded, which CUDA error a failed load
gave (the PTX fallback). Streams from cuda.core work here through
`__cuda_stream__`.

Numerics on the GPU (what tolerances must allow): f32 `atom.add` flushes
subnormal inputs and results to zero, and libdevice's exp/tanh family
flushes subnormal results, as on XLA:GPU; sqrt is the IEEE `sqrt.rn.f32`
(see xla_gpu.backends.cuda.codegen).
"""

from __future__ import annotations

import ctypes
import threading
import warnings
import weakref
from typing import Any, Sequence

import numpy as np

from .._ctypes_arrays import array_of
from ..errors import ArgumentError, CudaError, CudaUnavailableError, ResourceError
from .interop import LEGACY_DEFAULT_STREAM, ForeignArray
from .device import (DeviceDescription, check_launch, for_arch,  # noqa: F401  (re-exported)
                     registers_per_block)
from .spec import KernelSpec

__all__ = ["CudaError", "CudaUnavailableError", "cuda_available", "DeviceArray",
           "CudaKernel", "CudaModule", "device_count", "current_context", "stream_handle",
           "check_launch", "registers_per_block", "limits_for_arch", "device_description"]

_lock = threading.Lock()
_context = None
_device = None
_device_attributes: dict[str, int] = {}


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - cuda-python is a dependency
        raise CudaUnavailableError(f"cuda-python is not installed: {e}") from e
    return driver


def _check(call: str, result) -> Any:
    cu = _driver()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else name
        text = text.decode() if isinstance(text, bytes) else text
        raise CudaError(f"{call} failed: {name} ({text})")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


def _primary_context():
    """The primary context of device 0, retained once per process."""
    global _context, _device
    if _context is not None:
        return _context
    cu = _driver()
    with _lock:
        if _context is None:
            try:
                _check("cuInit", cu.cuInit(0))
            except CudaError as e:
                raise CudaUnavailableError(f"no usable GPU: {e}") from e
            except Exception as e:  # the driver library is missing
                raise CudaUnavailableError(f"no CUDA driver: {e}") from e
            count = _check("cuDeviceGetCount", cu.cuDeviceGetCount())
            if count == 0:
                raise CudaUnavailableError("no CUDA device")
            device = _check("cuDeviceGet", cu.cuDeviceGet(0))
            _context = _check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(device))
            _device = device
    return _context


def _ensure_context():
    """The primary context of device 0, made current on this thread (for
    callers that go on with driver calls of their own)."""
    context = _primary_context()
    _check("cuCtxSetCurrent", _driver().cuCtxSetCurrent(context))
    return context


class current_context:
    """`with current_context():` the primary context is current inside;
    the thread's previous context is current again after. Nests, and
    costs one cuCtxGetCurrent when the context is current already."""

    __slots__ = ("_pushed",)

    def __enter__(self):
        context = _primary_context()
        cu = _driver()
        current = _check("cuCtxGetCurrent", cu.cuCtxGetCurrent())
        self._pushed = int(current) != int(context)
        if self._pushed:
            _check("cuCtxPushCurrent", cu.cuCtxPushCurrent(context))
        return context

    def __exit__(self, *exc) -> None:
        if self._pushed:
            _check("cuCtxPopCurrent", _driver().cuCtxPopCurrent())


def cuda_available() -> bool:
    try:
        _primary_context()
        return True
    except CudaError:
        return False


def device_count() -> int:
    try:
        _primary_context()
    except CudaError:
        return 0
    return _check("cuDeviceGetCount", _driver().cuDeviceGetCount())


def _device_attribute(name: str) -> int:
    """A CUdevice_attribute of device 0 (`name` without the prefix)."""
    if name not in _device_attributes:
        _primary_context()
        cu = _driver()
        attribute = getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        _device_attributes[name] = int(_check(f"cuDeviceGetAttribute({name})",
                                              cu.cuDeviceGetAttribute(attribute, _device)))
    return _device_attributes[name]


def stream_handle(stream: Any) -> int:
    """The CUstream handle of `stream` as an int (0: the legacy default
    stream)."""
    if stream is None:
        return 0
    if isinstance(stream, (bool, float)):
        raise ArgumentError(f"stream must be a CUstream or its handle, got {stream!r}")
    if isinstance(stream, int):
        if stream < 0:
            raise ArgumentError(f"stream handle must not be negative, got {stream}")
        return stream
    if hasattr(stream, "__cuda_stream__"):   # cuda.core: (version, handle)
        return int(stream.__cuda_stream__()[1])
    try:
        return int(stream)                    # CUstream, cudaStream_t
    except (TypeError, ValueError):
        raise ArgumentError(f"stream must be a CUstream, its integer handle or have "
                            f"__cuda_stream__, got {type(stream).__name__}") from None


def _same_stream(a: int, b: int) -> bool:
    # Handle 0 and CU_STREAM_LEGACY (1) are both the legacy default stream.
    def norm(s):
        return LEGACY_DEFAULT_STREAM if s == 0 else s
    return norm(a) == norm(b)


def _order_after(producer: int | None, consumer: int) -> None:
    """Work enqueued on `consumer` from now on runs after everything
    enqueued on `producer` so far (an event, as the CAI v3 spec asks)."""
    if producer is None or _same_stream(producer, consumer):
        return
    cu = _driver()
    event = _check("cuEventCreate", cu.cuEventCreate(
        cu.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    try:
        _check(f"cuEventRecord(producer stream {producer:#x})", cu.cuEventRecord(event, producer))
        _check("cuStreamWaitEvent", cu.cuStreamWaitEvent(consumer, event, 0))
    finally:
        cu.cuEventDestroy(event)   # released once the wait is done


# -- launch limits ----------------------------------------------------------------
# The limits are the device description's (`xla_gpu.runtime.device`, which
# codegen checks a kernel against after ptxas); `check_launch` and
# `registers_per_block` are re-exported here, where launches happen.

# The description of an arch ("sm_89"), under the name codegen knew it by.
limits_for_arch = for_arch


def device_description() -> DeviceDescription:
    """The description of device 0 as its driver reports it (its SMs,
    threads, grid, shared memory and register limits)."""
    major = _device_attribute("COMPUTE_CAPABILITY_MAJOR")
    minor = _device_attribute("COMPUTE_CAPABILITY_MINOR")
    return DeviceDescription(
        f"CUDA device 0 (sm_{major}{minor})",
        core_count=_device_attribute("MULTIPROCESSOR_COUNT"),
        threads_per_core_limit=_device_attribute("MAX_THREADS_PER_MULTIPROCESSOR"),
        threads_per_block_limit=_device_attribute("MAX_THREADS_PER_BLOCK"),
        threads_per_warp=_device_attribute("WARP_SIZE"),
        block_dim_limit_x=_device_attribute("MAX_GRID_DIM_X"),
        block_dim_limit_yz=min(_device_attribute("MAX_GRID_DIM_Y"),
                               _device_attribute("MAX_GRID_DIM_Z")),
        shared_memory_per_block=_device_attribute("MAX_SHARED_MEMORY_PER_BLOCK"),
        shared_memory_per_block_optin=_device_attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        registers_per_block_limit=_device_attribute("MAX_REGISTERS_PER_BLOCK"),
        registers_per_core_limit=_device_attribute("MAX_REGISTERS_PER_MULTIPROCESSOR"),
        compute_capability=10 * major + minor)


# -- memory -----------------------------------------------------------------------


def _free(pointer: int) -> None:
    """cuMemFree in the primary context, from any thread; a finalizer's
    helper (errors at interpreter shutdown are dropped)."""
    try:
        with current_context():
            _driver().cuMemFree(pointer)
    except Exception:
        pass


def _free_host(pointer: int) -> None:
    """cuMemFreeHost in the primary context (a finalizer's helper, as _free)."""
    try:
        with current_context():
            _driver().cuMemFreeHost(pointer)
    except Exception:
        pass


class PinnedHostBuffer:
    """Page-locked host memory the GPU reaches (cuMemHostAlloc, mapped and
    portable): where a program keeps the values it offloads. With unified
    addressing (every 64-bit CUDA platform) its device address is its host
    address, so copies to and from device memory are plain memcpys on the
    stream. Frees itself."""

    # cuMemHostAlloc's flags: CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP.
    _FLAGS = 0x01 | 0x02

    def __init__(self, nbytes: int):
        self.nbytes = max(int(nbytes), 1)
        with current_context():
            host = int(_check("cuMemHostAlloc", _driver().cuMemHostAlloc(self.nbytes,
                                                                         self._FLAGS)))
            self._finalizer = weakref.finalize(self, _free_host, host)
            self.ptr = int(_check("cuMemHostGetDevicePointer",
                                  _driver().cuMemHostGetDevicePointer(host, 0)))


def _array_bytes(shape, dtype: np.dtype) -> int:
    if any(d < 0 for d in shape):
        raise ArgumentError(f"negative extent in shape {list(shape)}")
    size = 1
    for d in shape:          # Python ints: no silent overflow
        size *= d
    return size * dtype.itemsize


def _allocate(nbytes: int, what: str) -> int:
    """cuMemAlloc of `nbytes` (at least 1), refused with ResourceError when
    a large request exceeds the free memory."""
    with current_context():
        free, _ = _check("cuMemGetInfo", _driver().cuMemGetInfo()) \
            if nbytes > (1 << 30) else (None, None)
        if free is not None and nbytes > free:
            raise ResourceError(f"{what} of {nbytes} bytes; the GPU has {free} bytes free")
        return int(_check("cuMemAlloc", _driver().cuMemAlloc(max(nbytes, 1))))


class _DeviceBlock:
    """One allocation that several DeviceArrays share (see
    DeviceArray.group); freed when the last of them goes."""

    def __init__(self, nbytes: int):
        self.ptr = _allocate(nbytes, "device arrays")
        self._finalizer = weakref.finalize(self, _free, self.ptr)


# Arrays up to this size share one allocation in DeviceArray.group: for
# them the allocation and the (synchronizing) free cost more than the work,
# and what a kept one holds of its dead siblings' memory stays small.
GROUPED_ARRAY_BYTES = 1 << 20
_ALLOCATION_ALIGNMENT = 256   # what cuMemAlloc gives


def group_layout(sizes: Sequence[int]) -> tuple[dict[int, int], int]:
    """Where DeviceArray.group puts arrays of these byte sizes: {index:
    offset} for those that share the allocation (up to
    GROUPED_ARRAY_BYTES each, 256-byte aligned; none when fewer than two
    qualify) and the allocation's size."""
    small = [k for k, n in enumerate(sizes) if n <= GROUPED_ARRAY_BYTES]
    if len(small) < 2:
        return {}, 0
    offsets, total = {}, 0
    for k in small:
        offsets[k] = total
        total += -(-sizes[k] // _ALLOCATION_ALIGNMENT) * _ALLOCATION_ALIGNMENT
    return offsets, max(total, 1)


class DeviceArray:
    """Device memory holding one array; frees itself (from any thread).
    Exposes `__cuda_array_interface__` so other libraries can read it."""

    _block: _DeviceBlock | None = None
    _finalizer = None

    def __init__(self, shape, dtype, nbytes: int | None = None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        size = _array_bytes(self.shape, self.dtype)
        self.nbytes = size if nbytes is None else int(nbytes)
        self.ptr = _allocate(self.nbytes, f"a device array ({self.dtype}{list(self.shape)})")
        self._finalizer = weakref.finalize(self, _free, self.ptr)

    @staticmethod
    def group(specs: Sequence[tuple[Sequence[int], Any]]) -> list["DeviceArray"]:
        """Device arrays of these (shape, dtype)s, the small ones (up to
        GROUPED_ARRAY_BYTES) in one allocation at aligned offsets: a run's
        many small outputs cost one cuMemAlloc and one cuMemFree instead of
        one each. Their memory is freed when the last of them is."""
        specs = [(tuple(int(d) for d in shape), np.dtype(dtype)) for shape, dtype in specs]
        sizes = [_array_bytes(shape, dtype) for shape, dtype in specs]
        offsets, total = group_layout(sizes)
        out: list[DeviceArray | None] = [None] * len(specs)
        if offsets:
            block = _DeviceBlock(total)
            for k, offset in offsets.items():
                view = DeviceArray.__new__(DeviceArray)
                view.shape, view.dtype = specs[k]
                view.nbytes = sizes[k]
                view.ptr = block.ptr + offset
                view._block = block
                out[k] = view
        for k, (shape, dtype) in enumerate(specs):
            if out[k] is None:
                out[k] = DeviceArray(shape, dtype)
        return out

    @staticmethod
    def from_host(array: np.ndarray, stream=None) -> "DeviceArray":
        array = np.require(array, requirements='C')  # keeps 0-d arrays 0-d
        out = DeviceArray(array.shape, array.dtype)
        out.copy_from_host(array, stream)
        return out

    def copy_from_host(self, array: np.ndarray, stream=None) -> None:
        array = np.require(array, requirements='C')
        if array.nbytes != self.nbytes:
            raise ArgumentError(f"copy of {array.nbytes} bytes into a device array of "
                                f"{self.nbytes}")
        if self.nbytes:
            with current_context():
                _check("cuMemcpyHtoDAsync", _driver().cuMemcpyHtoDAsync(
                    self.ptr, array.ctypes.data, self.nbytes, stream_handle(stream)))

    def copy_from_device(self, ptr: int, stream=None) -> None:
        """Copies `self.nbytes` bytes from device address `ptr`."""
        if self.nbytes:
            with current_context():
                _check("cuMemcpyDtoDAsync", _driver().cuMemcpyDtoDAsync(
                    self.ptr, ptr, self.nbytes, stream_handle(stream)))

    def to_host(self, stream=None) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            handle = stream_handle(stream)
            with current_context():
                cu = _driver()
                _check("cuMemcpyDtoHAsync", cu.cuMemcpyDtoHAsync(
                    out.ctypes.data, self.ptr, self.nbytes, handle))
                _check("cuStreamSynchronize", cu.cuStreamSynchronize(handle))
        return out

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": None}

    def free(self) -> None:
        """Frees the memory now (also done when the array is collected); an
        array of a group gives up its share (the group's memory goes with
        the last)."""
        self.ptr = 0
        if self._finalizer is not None:
            self._finalizer()
        self._block = None


# -- kernels ----------------------------------------------------------------------


def _unload(module) -> None:
    """cuModuleUnload in the primary context (a finalizer's helper)."""
    try:
        with current_context():
            _driver().cuModuleUnload(module)
    except Exception:
        pass


def _load_binary(cubin: bytes | None, ptx: str | None, what: str):
    """(CUmodule, "cubin" | "ptx"): the cubin, or the PTX through the
    driver's JIT where there is no cubin or it does not load. Call with the
    context current."""
    cu = _driver()
    cubin_error = None
    if cubin is not None:
        try:
            return _check("cuModuleLoadData(cubin)", cu.cuModuleLoadData(cubin)), "cubin"
        except CudaError as e:
            if ptx is None:
                raise
            cubin_error = e
            warnings.warn(f"{what}: the cubin does not load ({e}); JIT-compiling its PTX "
                          "instead (the driver is older than the ptxas that built the "
                          "cubin, or the GPU is not the architecture it was built for)",
                          RuntimeWarning, stacklevel=5)
    try:
        module = _check("cuModuleLoadData(PTX, JIT)", cu.cuModuleLoadData(ptx.encode() + b"\0"))
    except CudaError as e:
        if cubin_error is None:
            raise
        raise CudaError(f"{what} loads neither as cubin ({cubin_error}) nor as PTX "
                        f"({e})") from None
    return module, "ptx"


class CudaModule:
    """A cubin (or PTX) that several kernels share (a program's kernels are
    linked into one): loaded once, when the first of them is, and unloaded
    when the last kernel holding it is gone. Thread-safe."""

    def __init__(self, *, cubin: bytes | None = None, ptx: str | None = None,
                 what: str = "a module"):
        if cubin is None and ptx is None:
            raise ValueError("a module needs a cubin or PTX")
        self._cubin, self._ptx, self.what = cubin, ptx, what
        self._loaded = None
        self._lock = threading.Lock()

    def load(self):
        """(CUmodule, "cubin" | "ptx"); call with the context current."""
        with self._lock:
            if self._loaded is None:
                module, how = _load_binary(self._cubin, self._ptx, self.what)
                weakref.finalize(self, _unload, module)
                self._loaded = (module, how)
            return self._loaded


class CudaKernel:
    """A loaded kernel: `run` takes host or device arrays and launches with
    the spec's launch dimensions. Thread-safe: the module is loaded once,
    and each call makes the context current for itself. `module`: a
    CudaModule holding this kernel with others (instead of its own
    `cubin` / `ptx`)."""

    def __init__(self, spec: KernelSpec, *, cubin: bytes | None = None, ptx: str | None = None,
                 module: CudaModule | None = None):
        if cubin is None and ptx is None and module is None:
            raise ValueError("a kernel needs a cubin or PTX")
        self.spec = spec
        self._cubin, self._ptx = cubin, ptx
        self._shared = module
        self._function = None
        self._module = None
        self._unloader: weakref.finalize | None = None
        self._load_lock = threading.Lock()
        self._launch_checked = False
        self.loaded_from: str | None = None     # "cubin" or "ptx" once loaded
        self.attributes: dict[str, int] = {}    # the function's, once loaded
        # Packed kernelParams by argument pointers: a program launches each
        # kernel with the same buffers run after run.
        self._packed: dict[tuple[int, ...], tuple[Any, Any, int]] = {}

    # loading

    def _load_module(self):
        return _load_binary(self._cubin, self._ptx, f"kernel '{self.spec.name}'")

    def _function_attribute(self, function, name: str) -> int:
        cu = _driver()
        attribute = getattr(cu.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(_check(f"cuFuncGetAttribute({name})",
                          cu.cuFuncGetAttribute(attribute, function)))

    def _load(self):
        if self._function is not None:
            return self._function
        with self._load_lock:
            if self._function is not None:
                return self._function
            with current_context():
                cu = _driver()
                if self._shared is not None:
                    # The shared module unloads itself after its last kernel.
                    module, how = self._shared.load()
                    unloader = None
                else:
                    module, how = self._load_module()
                    unloader = weakref.finalize(self, _unload, module)
                try:
                    function = _check(f"cuModuleGetFunction({self.spec.name})",
                                      cu.cuModuleGetFunction(module, self.spec.name.encode()))
                    self._configure(function)
                except BaseException:
                    if unloader is not None:
                        unloader()
                    raise
                self._module, self._unloader, self.loaded_from = module, unloader, how
                self._function = function
        return self._function

    def _configure(self, function) -> None:
        """Checks the launch against the loaded function and the device,
        and opts in to dynamic shared memory above 48 KiB."""
        s = self.spec
        attributes = {name: self._function_attribute(function, name) for name in (
            "MAX_THREADS_PER_BLOCK", "NUM_REGS", "SHARED_SIZE_BYTES", "LOCAL_SIZE_BYTES")}
        self.attributes = attributes
        limits = device_description()
        check_launch(s.name, s.threads, (s.blocks, getattr(s, "blocks_y", 1)), s.shared_bytes,
                     static_shared_bytes=attributes["SHARED_SIZE_BYTES"],
                     registers_per_thread=attributes["NUM_REGS"],
                     max_threads=attributes["MAX_THREADS_PER_BLOCK"], limits=limits)
        if s.shared_bytes > limits.shared_memory_per_block:
            cu = _driver()
            _check("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", cu.cuFuncSetAttribute(
                function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                s.shared_bytes))

    def unload(self) -> None:
        """Unloads the module now (also done when the kernel is collected);
        a later launch loads it again. A shared module (CudaModule) stays
        loaded for its other kernels: this kernel only lets go of it."""
        with self._load_lock:
            if self._unloader is not None:
                self._unloader()
            self._function = self._module = self._unloader = None

    # launching

    def launch(self, pointers: Sequence[int], stream=None) -> None:
        s = self.spec
        if not self._launch_checked:
            check_launch(s.name, s.threads, (s.blocks, getattr(s, "blocks_y", 1)),
                         s.shared_bytes)
            self._launch_checked = True
        handle = stream_handle(stream)
        key = tuple(pointers)
        packed = self._packed.get(key)
        if packed is None:
            values = array_of(ctypes.c_void_p, key)
            params = array_of(ctypes.c_void_p,
                              [ctypes.addressof(values) + i * ctypes.sizeof(ctypes.c_void_p)
                               for i in range(len(key))])
            if len(self._packed) >= 64:   # buffers that change every launch
                self._packed.clear()
            packed = self._packed[key] = (values, params, ctypes.addressof(params))
        with current_context():
            function = self._load()
            cu = _driver()
            result = cu.cuLaunchKernel(function, s.blocks, getattr(s, "blocks_y", 1), 1,
                                       s.threads, 1, 1, s.shared_bytes, handle, packed[2], 0)
            err = result[0] if isinstance(result, tuple) else result
            if err != cu.CUresult.CUDA_SUCCESS:   # the message is built only on failure
                _check(f"cuLaunchKernel({s.name}, grid={s.blocks}, block={s.threads})", result)

    def prepare(self, args: Sequence[Any], stream=None):
        """Device buffers for one launch: (pointers, outputs, keep-alive).
        Host arrays are copied to the device; device arrays are used in
        place, after their producer's stream, unless misaligned or written
        in place (then copied, so the caller's array is never written)."""
        handle = stream_handle(stream)
        checked = self.spec.check_arguments(args, device_ok=True, stream=handle)
        return self._prepare_checked(checked, handle)

    def _prepare_checked(self, args: list[Any], handle: int):
        spec = self.spec
        with current_context():
            keep: list[Any] = []
            params: list[int] = []
            in_place = set(spec.aliases.values())
            copies: dict[int, DeviceArray] = {}
            for j, (arg, p) in enumerate(zip(args, spec.parameters)):
                if isinstance(arg, ForeignArray):
                    keep.append(arg)   # the producer's memory stays until we are done
                    _order_after(arg.stream, handle)
                    off = arg.misalignment(p.alignment)
                    if j in in_place or off:
                        try:
                            copy = DeviceArray(p.shape, p.storage_dtype)
                            copy.copy_from_device(arg.pointer, handle)
                        except CudaError as e:
                            why = (f"is {off} bytes past a {p.alignment}-byte boundary"
                                   if off else "is written in place")
                            raise type(e)(f"argument {j} ({p.describe()}) {why}, and copying "
                                          f"it to an aligned buffer failed: {e}") from None
                        copies[j] = copy
                        keep.append(copy)
                        params.append(copy.ptr)
                    else:
                        params.append(arg.pointer)
                else:
                    buf = DeviceArray.from_host(arg, handle)
                    copies[j] = buf
                    keep.append(buf)
                    params.append(buf.ptr)
            fresh = iter(DeviceArray.group([(o.shape, o.storage_dtype)
                                            for k, o in enumerate(spec.outputs)
                                            if k not in spec.aliases]))
            outputs: list[DeviceArray] = [
                copies[spec.aliases[k]] if k in spec.aliases else next(fresh)
                for k in range(len(spec.outputs))]
        pointers = [params[i] if kind == "param" else outputs[i].ptr
                    for kind, i in spec.kernel_args]
        return pointers, outputs, keep

    @staticmethod
    def _release(keep: list[Any], handle: int, failed: bool) -> None:
        """Hands foreign arrays back once the stream no longer reads them."""
        if failed and any(isinstance(k, ForeignArray) for k in keep):
            try:
                _driver().cuStreamSynchronize(handle)
            except Exception:
                pass
        for k in keep:
            if isinstance(k, ForeignArray):
                k.release()

    def run(self, *args, stream=None, device_outputs: bool = False):
        handle = stream_handle(stream)
        checked = self.spec.check_arguments(args, device_ok=True, stream=handle)
        with current_context():
            pointers, outputs, keep = self._prepare_checked(checked, handle)
            failed = True
            try:
                self.launch(pointers, handle)
                if device_outputs:
                    _check("cuStreamSynchronize", _driver().cuStreamSynchronize(handle))
                    result = tuple(outputs)
                else:
                    result = tuple(spec.from_storage(o.to_host(handle))
                                   for spec, o in zip(self.spec.outputs, outputs))
                failed = False
                return result
            finally:
                self._release(keep, handle, failed)

    def time(self, *args, iterations: int = 100, warmup: int = 10, stream=None) -> float:
        """Seconds per launch, from CUDA events recorded on `stream` around
        `iterations` launches."""
        handle = stream_handle(stream)
        checked = self.spec.check_arguments(args, device_ok=True, stream=handle)
        with current_context():
            cu = _driver()
            pointers, outputs, keep = self._prepare_checked(checked, handle)
            start = stop = None
            failed = True
            try:
                for _ in range(warmup):
                    self.launch(pointers, handle)
                start = _check("cuEventCreate", cu.cuEventCreate(0))
                stop = _check("cuEventCreate", cu.cuEventCreate(0))
                _check("cuEventRecord", cu.cuEventRecord(start, handle))
                for _ in range(iterations):
                    self.launch(pointers, handle)
                _check("cuEventRecord", cu.cuEventRecord(stop, handle))
                _check("cuEventSynchronize", cu.cuEventSynchronize(stop))
                ms = _check("cuEventElapsedTime", cu.cuEventElapsedTime(start, stop))
                failed = False
            finally:
                for event in (start, stop):
                    if event is not None:
                        cu.cuEventDestroy(event)
                self._release(keep, handle, failed)
            del outputs
        return ms / 1e3 / max(iterations, 1)
