"""Loading and launching kernels through `cuda.bindings.driver`.

Every driver call is checked; a failure raises CudaError naming the call
and the CUDA error. Without a driver or a GPU, CudaUnavailableError."""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Sequence

import numpy as np

from ..errors import CudaError, CudaUnavailableError
from .spec import KernelSpec

__all__ = ["CudaError", "CudaUnavailableError", "cuda_available", "DeviceArray",
           "CudaKernel", "device_count"]


_lock = threading.Lock()
_context = None


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


def _ensure_context():
    """The primary context of device 0, made current on this thread."""
    global _context
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
        _check("cuCtxSetCurrent", cu.cuCtxSetCurrent(_context))
    return _context


def cuda_available() -> bool:
    try:
        _ensure_context()
        return True
    except CudaError:
        return False


def device_count() -> int:
    try:
        _ensure_context()
    except CudaError:
        return 0
    return _check("cuDeviceGetCount", _driver().cuDeviceGetCount())


class DeviceArray:
    """Device memory holding one array; frees itself. Exposes
    `__cuda_array_interface__` so other libraries can read it."""

    def __init__(self, shape, dtype, nbytes: int | None = None):
        _ensure_context()
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize \
            if nbytes is None else nbytes
        self.ptr = int(_check("cuMemAlloc", _driver().cuMemAlloc(max(self.nbytes, 1))))

    @staticmethod
    def from_host(array: np.ndarray, stream=None) -> "DeviceArray":
        array = np.require(array, requirements='C')  # keeps 0-d arrays 0-d
        out = DeviceArray(array.shape, array.dtype)
        out.copy_from_host(array, stream)
        return out

    def copy_from_host(self, array: np.ndarray, stream=None) -> None:
        cu = _driver()
        if self.nbytes:
            _check("cuMemcpyHtoDAsync", cu.cuMemcpyHtoDAsync(
                self.ptr, array.ctypes.data, self.nbytes, stream or 0))

    def copy_from_device(self, ptr: int, stream=None) -> None:
        if self.nbytes:
            _check("cuMemcpyDtoDAsync", _driver().cuMemcpyDtoDAsync(
                self.ptr, ptr, self.nbytes, stream or 0))

    def to_host(self, stream=None) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        cu = _driver()
        if self.nbytes:
            _check("cuMemcpyDtoHAsync", cu.cuMemcpyDtoHAsync(
                out.ctypes.data, self.ptr, self.nbytes, stream or 0))
            _check("cuStreamSynchronize", cu.cuStreamSynchronize(stream or 0))
        return out

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None}

    def __del__(self):
        ptr, self.ptr = getattr(self, "ptr", 0), 0
        if ptr:
            try:
                _driver().cuMemFree(ptr)
            except Exception:
                pass


class CudaKernel:
    """A loaded kernel: `run` takes host or device arrays and launches with
    the spec's launch dimensions."""

    def __init__(self, spec: KernelSpec, *, cubin: bytes | None = None, ptx: str | None = None):
        if cubin is None and ptx is None:
            raise ValueError("a kernel needs a cubin or PTX")
        self.spec = spec
        self._cubin, self._ptx = cubin, ptx
        self._function = None
        self._module = None

    def _load(self):
        if self._function is not None:
            return self._function
        _ensure_context()
        cu = _driver()
        image = self._cubin if self._cubin is not None else self._ptx.encode() + b"\0"
        how = "cuModuleLoadData(cubin)" if self._cubin is not None else "cuModuleLoadData(PTX, JIT)"
        self._module = _check(how, cu.cuModuleLoadData(image))
        self._function = _check(f"cuModuleGetFunction({self.spec.name})",
                                cu.cuModuleGetFunction(self._module, self.spec.name.encode()))
        return self._function

    def launch(self, pointers: Sequence[int], stream=None) -> None:
        cu = _driver()
        function = self._load()
        values = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
        params = (ctypes.c_void_p * max(len(pointers), 1))(
            *[ctypes.addressof(values) + i * ctypes.sizeof(ctypes.c_void_p)
              for i in range(len(pointers))])
        s = self.spec
        _check(f"cuLaunchKernel({s.name}, grid={s.blocks}, block={s.threads})",
               cu.cuLaunchKernel(function, s.blocks, 1, 1, s.threads, 1, 1,
                                 s.shared_bytes, stream or 0, ctypes.addressof(params), 0))

    def prepare(self, args: Sequence[Any], stream=None):
        """Device buffers for one launch: (pointers, outputs, keep-alive)."""
        spec = self.spec
        args = spec.check_arguments(args, device_ok=True)
        keep, params = [], []
        aliased = {j: k for k, j in spec.aliases.items()}
        for j, arg in enumerate(args):
            if hasattr(arg, "__cuda_array_interface__") and not isinstance(arg, np.ndarray):
                ptr = arg.__cuda_array_interface__["data"][0]
                if j in aliased:  # never write into the caller's array
                    copy = DeviceArray(spec.parameters[j].shape, spec.parameters[j].storage_dtype)
                    copy.copy_from_device(ptr, stream)
                    keep.append(copy)
                    ptr = copy.ptr
                params.append(ptr)
            else:
                buf = DeviceArray.from_host(arg, stream)
                keep.append(buf)
                params.append(buf.ptr)
        outputs: list[DeviceArray] = []
        for k, o in enumerate(spec.outputs):
            if k in spec.aliases:
                j = spec.aliases[k]
                holder = next(b for b in keep if b.ptr == params[j])
                outputs.append(holder)
            else:
                outputs.append(DeviceArray(o.shape, o.storage_dtype))
        pointers = [params[i] if kind == "param" else outputs[i].ptr
                    for kind, i in spec.kernel_args]
        return pointers, outputs, keep

    def run(self, *args, stream=None, device_outputs: bool = False):
        pointers, outputs, keep = self.prepare(args, stream)
        self.launch(pointers, stream)
        if device_outputs:
            _check("cuStreamSynchronize", _driver().cuStreamSynchronize(stream or 0))
            return tuple(outputs)
        return tuple(spec.from_storage(o.to_host(stream))
                     for spec, o in zip(self.spec.outputs, outputs))

    def time(self, *args, iterations: int = 100, warmup: int = 10) -> float:
        """Seconds per launch, from CUDA events around `iterations` launches."""
        cu = _driver()
        pointers, outputs, keep = self.prepare(args)
        for _ in range(warmup):
            self.launch(pointers)
        start = _check("cuEventCreate", cu.cuEventCreate(0))
        stop = _check("cuEventCreate", cu.cuEventCreate(0))
        _check("cuEventRecord", cu.cuEventRecord(start, 0))
        for _ in range(iterations):
            self.launch(pointers)
        _check("cuEventRecord", cu.cuEventRecord(stop, 0))
        _check("cuEventSynchronize", cu.cuEventSynchronize(stop))
        ms = _check("cuEventElapsedTime", cu.cuEventElapsedTime(start, stop))
        cu.cuEventDestroy(start)
        cu.cuEventDestroy(stop)
        del outputs, keep
        return ms / 1e3 / iterations
