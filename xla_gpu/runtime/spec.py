"""What a compiled kernel needs to be run: launch dimensions and the
argument layout, saved as `kernel.json` next to the PTX/cubin. numpy only.

Alignment: kernels load and store up to 16 bytes at a time (`ld.global.v4`
on the GPU, vector moves on the host), at offsets that are multiples of the
access width from the start of each buffer, so every buffer's address must
be a multiple of its `ArgSpec.alignment` (16 bytes; a kernel.json without
the field means 16). `host_buffers` copies a misaligned host array into an
aligned one; the cuda runtime does the same for device arrays.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Sequence

import numpy as np

from .._readable_json import readable_json
from ..errors import ArgumentError
from ..hlo.shape import ELEMENT_TYPES

__all__ = ["ArgSpec", "KernelSpec", "HostBufferPool", "DEFAULT_ALIGNMENT", "aligned_empty",
           "aligned_bytes", "aligned_zeros", "aligned_copy", "is_aligned"]

# Bytes: the widest access the emitted kernels make (128-bit vectors).
DEFAULT_ALIGNMENT = 16
# What a kernel.json may ask for (a power of two up to a page).
MAX_ALIGNMENT = 4096
# Buffers of HostBufferPool (XLA:GPU aligns allocations to 64 bytes or more).
POOL_ALIGNMENT = 64
# A kernel's outputs larger than this are not kept for the next run.
KERNEL_POOL_LARGEST = 64 << 20


def aligned_empty(shape, dtype, alignment: int = DEFAULT_ALIGNMENT) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple
    of `alignment` bytes (numpy only promises the element size)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    return aligned_bytes(raw, nbytes, alignment).view(dtype).reshape(shape)


def aligned_bytes(raw: np.ndarray, nbytes: int, alignment: int = DEFAULT_ALIGNMENT) -> np.ndarray:
    """The `nbytes` bytes of `raw` (a uint8 array at least `nbytes +
    alignment` long) that start at a multiple of `alignment`."""
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes]


def aligned_zeros(shape, dtype, alignment: int = DEFAULT_ALIGNMENT) -> np.ndarray:
    out = aligned_empty(shape, dtype, alignment)
    out[...] = 0
    return out


def is_aligned(array: np.ndarray, alignment: int = DEFAULT_ALIGNMENT) -> bool:
    return array.size == 0 or array.ctypes.data % alignment == 0


def aligned_copy(array: np.ndarray, alignment: int = DEFAULT_ALIGNMENT) -> np.ndarray:
    """A C-contiguous copy of `array` at an aligned address."""
    out = aligned_empty(array.shape, array.dtype, alignment)
    out[...] = array
    return out


@dataclass(frozen=True)
class ArgSpec:
    shape: tuple[int, ...]
    dtype: str                     # HLO element type: f32, bf16, pred, ...
    # Bytes the buffer's address must be a multiple of (the kernel's
    # widest vector access to it).
    alignment: int = DEFAULT_ALIGNMENT

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype users pass and get (ml_dtypes int4 for s4, ...)."""
        return ELEMENT_TYPES[self.dtype]

    @property
    def storage_dtype(self) -> np.dtype:
        """The dtype of the kernel's buffer: sub-byte integers one per byte,
        sign- (s2, s4) or zero-extended (u2, u4)."""
        if self.dtype in ("s2", "s4"):
            return np.dtype(np.int8)
        if self.dtype in ("u2", "u4"):
            return np.dtype(np.uint8)
        return self.numpy_dtype

    def to_storage(self, array: np.ndarray) -> np.ndarray:
        storage = self.storage_dtype
        return array if array.dtype == storage else array.astype(storage)

    def from_storage(self, array: np.ndarray) -> np.ndarray:
        logical = self.numpy_dtype
        if array.shape != self.shape and array.size == self.size:
            # An output written in place into a parameter of another shape
            # (a bitcast of a dynamic-update-slice): the same elements.
            array = array.reshape(self.shape)
        return array if array.dtype == logical else array.astype(logical)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.storage_dtype.itemsize

    def describe(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


@dataclass
class KernelSpec:
    name: str
    target: str                    # "cuda" | "cpu"
    arch: str
    threads: int
    blocks: int
    shared_bytes: int
    parameters: list[ArgSpec]
    outputs: list[ArgSpec]
    # Output k written in place into parameter j's buffer (k -> j).
    aliases: dict[int, int] = field(default_factory=dict)
    emitter: str = ""
    fusion: str = ""
    fingerprint: str = ""
    version: str = ""
    # Blocks in y of a 2-D grid (a launch over CUDA's 2^31 - 1 blocks in x).
    blocks_y: int = 1

    @property
    def kernel_args(self) -> list[tuple[str, int]]:
        """The kernel's pointer arguments after merge-pointers: every
        parameter, then the outputs that do not alias a parameter."""
        return [("param", i) for i in range(len(self.parameters))] + \
            [("output", k) for k in range(len(self.outputs)) if k not in self.aliases]

    def to_json(self) -> str:
        data = asdict(self)
        data["aliases"] = {str(k): v for k, v in self.aliases.items()}
        return readable_json(data)

    @staticmethod
    def from_json(text: str) -> "KernelSpec":
        data: dict[str, Any] = json.loads(text)
        data["parameters"] = [_arg_from_json(a) for a in data["parameters"]]
        data["outputs"] = [_arg_from_json(a) for a in data["outputs"]]
        data["aliases"] = {int(k): int(v) for k, v in data.get("aliases", {}).items()}
        return KernelSpec(**data)

    def host_buffers(self, args: Sequence[Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """For a host run: the kernel's buffers in argument order, and the
        output buffers (in-place outputs are a copy of their operand, so the
        caller's array is never written). Every buffer starts at a multiple
        of its alignment: a misaligned argument is copied."""
        in_place = set(self.aliases.values())
        arrays = [aligned_copy(a, p.alignment)
                  if j in in_place or not is_aligned(a, p.alignment) else a
                  for j, (a, p) in enumerate(zip(self.check_arguments(args), self.parameters))]
        # Kernels write every element of their outputs (as on the GPU, where
        # outputs are uninitialized device memory): no zero fill.
        outputs = [arrays[self.aliases[k]] if k in self.aliases
                   else aligned_empty(o.shape, o.storage_dtype, o.alignment)
                   for k, o in enumerate(self.outputs)]
        buffers = [arrays[i] if kind == "param" else outputs[i] for kind, i in self.kernel_args]
        return buffers, outputs

    def results(self, outputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Output buffers as the user's arrays (sub-byte types unpacked)."""
        return tuple(o.from_storage(a) for o, a in zip(self.outputs, outputs))

    @cached_property
    def _host_call_plan(self) -> "_HostCallPlan":
        return _HostCallPlan(self)

    @cached_property
    def output_nbytes(self) -> int:
        """Bytes of all outputs (in their storage dtypes)."""
        return sum(o.nbytes for o in self.outputs)

    def host_call(self, args: Sequence[Any]) -> tuple[list[int], list[np.ndarray], bool, Any]:
        """For a host run: the kernel's argument pointers, the output
        buffers, whether `results` must still convert them, and what must
        be held until the kernel returns (copies the pointers point to). Arguments
        as a caller usually passes them (C-contiguous, aligned numpy arrays
        of the exact shape and storage dtype) take a precomputed path of a
        few microseconds; anything else goes through `host_buffers`, which
        checks, converts, copies, and raises the errors."""
        fast = self._host_call_plan.prepare(args)
        if fast is not None:
            return fast
        buffers, outputs = self.host_buffers(args)
        return [b.ctypes.data for b in buffers], outputs, True, buffers

    def check_arguments(self, args: Sequence[Any], *, device_ok: bool = False,
                        stream: int = 0) -> list[Any]:
        """Validates count, shape and dtype; returns host arrays as
        C-contiguous numpy arrays in the storage dtype. With `device_ok`,
        device arrays (`__cuda_array_interface__`, or DLPack on a CUDA
        device) become `interop.ForeignArray`s; DLPack producers are told
        to order their writes before `stream` (a CUstream handle)."""
        from . import interop
        if len(args) != len(self.parameters):
            raise ArgumentError(f"{self.name} takes {len(self.parameters)} arguments "
                             f"({', '.join(p.describe() for p in self.parameters)}), "
                             f"got {len(args)}")
        out = []
        for i, (arg, spec) in enumerate(zip(args, self.parameters)):
            if device_ok and interop.is_foreign_array(arg):
                value = interop.foreign_array(arg, stream, where=f"argument {i}")
                if not value.on_device:
                    raise ArgumentError(f"argument {i}: a {interop.device_name(value.device_type)} "
                                        "array is neither host nor CUDA device memory")
                if not value.is_c_contiguous:
                    raise ArgumentError(f"argument {i}: device array must be C-contiguous "
                                        f"(strides {list(value.strides or ())} bytes for "
                                        f"shape {list(value.shape)})")
                shape, dtype = value.shape, value.dtype
            elif interop.is_foreign_array(arg):
                raise ArgumentError(f"argument {i}: a CUDA device array cannot be passed to "
                                    "a host run (the cpu target); copy it to the host first")
            else:
                if not isinstance(arg, np.ndarray) and hasattr(arg, "__dlpack__") and \
                        not hasattr(arg, "__array__") and not hasattr(arg, "__array_interface__"):
                    arg = np.from_dlpack(arg)   # a host array known only by DLPack
                value = np.asarray(arg)
                shape, dtype = value.shape, value.dtype
            if tuple(shape) != tuple(spec.shape):
                raise ArgumentError(f"argument {i}: expected shape {list(spec.shape)} "
                                 f"({spec.describe()}), got {list(shape)}")
            expected = spec.numpy_dtype
            if dtype not in (expected, spec.storage_dtype) and not (
                    dtype.itemsize == expected.itemsize and dtype.kind == "V"):
                raise ArgumentError(f"argument {i}: expected dtype {spec.dtype} "
                                 f"({expected}), got {dtype}")
            out.append(value if isinstance(value, interop.ForeignArray)
                       else np.require(spec.to_storage(value), requirements='C'))
        return out


def _address(array: np.ndarray) -> int:
    """The data address of a numpy array; ctypes' buffer view is 5x faster
    than `array.ctypes.data` (read-only and empty arrays take the latter).
    ml_dtypes' arrays (bf16, f8, int4: kind "V") export no buffer: their
    array interface, without a failed attempt first (2.4 vs 5 us)."""
    if array.dtype.kind == "V":
        return array.__array_interface__["data"][0]
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return array.ctypes.data


class _HostCallPlan:
    """`KernelSpec.host_call`'s fast path, worked out once per kernel: what
    each parameter must be to be used as it is, which are copied (operands
    updated in place: the caller's array is never written), the outputs to
    allocate, and the kernel's argument order."""

    def __init__(self, spec: KernelSpec):
        in_place = set(spec.aliases.values())
        self.parameters = [(p.shape, p.storage_dtype, p.alignment, j in in_place)
                           for j, p in enumerate(spec.parameters)]
        # Output k: (aliased parameter or None, shape, storage dtype,
        # alignment); in-place outputs are reshaped to their own shape.
        self.outputs = [(spec.aliases.get(k), o.shape, o.storage_dtype, o.alignment)
                        for k, o in enumerate(spec.outputs)]
        self.order = spec.kernel_args
        # Nothing to convert: `results` would return the buffers unchanged.
        self.converted = any(o.numpy_dtype != o.storage_dtype for o in spec.outputs)
        # Outputs come from a pool: a run whose caller dropped the last
        # run's outputs reuses their memory (no page faults of fresh
        # memory: 20-70 us for a 2 MiB output).
        self.pool = HostBufferPool(keep=2, largest=KERNEL_POOL_LARGEST)
        self.output_bytes = [o.nbytes for o in spec.outputs]

    def prepare(self, args: Sequence[Any]):
        if len(args) != len(self.parameters):
            return None
        for arg, (shape, dtype, _, _) in zip(args, self.parameters):
            if type(arg) is not np.ndarray or arg.shape != shape or arg.dtype != dtype or \
                    not arg.flags.c_contiguous or arg.size == 0:
                return None
        arrays = []
        for j, (arg, (shape, dtype, alignment, copy)) in enumerate(zip(args, self.parameters)):
            if copy:
                # The operand an in-place kernel updates, copied into pool
                # memory (it becomes the output: reused once the caller
                # drops that, with no fresh pages to fault in).
                if alignment > POOL_ALIGNMENT:
                    arg = aligned_copy(arg, alignment)
                else:
                    _, _, buffer = self.pool.take(-1 - j, arg.nbytes, (shape, dtype))
                    np.copyto(buffer, arg)
                    arg = buffer
            arrays.append(arg)
        outputs, output_addresses = [], []
        for k, (alias, shape, dtype, alignment) in enumerate(self.outputs):
            if alias is not None:
                buffer = arrays[alias]
                outputs.append(buffer if buffer.shape == shape else buffer.reshape(shape))
                output_addresses.append(None)
            elif alignment > POOL_ALIGNMENT:
                return None
            else:
                _, address, array = self.pool.take(k, self.output_bytes[k], (shape, dtype))
                outputs.append(array)
                output_addresses.append(address)
        pointers = []
        for kind, i in self.order:
            if kind == "output":
                pointers.append(output_addresses[i])
                continue
            address = _address(arrays[i])
            if address % self.parameters[i][2]:
                # malloc gives 16 bytes; a stricter kernel takes the slow path.
                return None
            pointers.append(address)
        return pointers, outputs, self.converted, None


class HostBufferPool:
    """The cpu target's temp and output buffers of one executable's runs
    (a program's allocations, a kernel's outputs), per key, uninitialized
    as XLA's are (every kernel writes what it later reads). A buffer is
    handed out again once nothing refers to it any more — the caller
    dropped the outputs it held, and no view of them is left (every numpy
    view keeps its base alive, so the reference counts say so) — which
    saves the page faults of fresh memory on every run (a 1 MiB output:
    256 of them)."""

    def __init__(self, keep: int = 4, largest: int | None = None):
        # Buffers kept per key; buffers over `largest` bytes are not kept.
        self.keep, self.largest = keep, largest
        self._free_check_lock = threading.Lock()
        # allocation -> [(entry, the entry's reference counts when free)]
        self._held: dict[int, list[tuple[tuple, tuple[int, ...]]]] = {}

    @staticmethod
    def _new_entry(size: int, typed) -> tuple:
        raw = np.empty(size + POOL_ALIGNMENT, np.uint8)
        view = aligned_bytes(raw, size, POOL_ALIGNMENT)
        result = None
        if typed is not None:
            dims, dtype = typed
            result = np.ndarray(dims, dtype, buffer=view)
        return (raw, view, view.ctypes.data, result)

    @staticmethod
    def _counts(entry: tuple) -> tuple[int, ...]:
        # The same frame references every time it is called (None, an
        # untyped buffer, is referenced from everywhere: not counted).
        refcount = sys.getrefcount
        typed = entry[3]
        return refcount(entry[0]), refcount(entry[1]), 0 if typed is None else refcount(typed)

    def take(self, index: int, size: int, typed=None) -> tuple[np.ndarray, int, Any]:
        """Buffer `index`'s bytes for a run, their address, and when
        `typed` is (dims, dtype) the same memory as that array."""
        with self._free_check_lock:
            held = self._held.setdefault(index, [])
            for entry, free in held:
                if self._counts(entry) == free:
                    return entry[1], entry[2], entry[3]
            entry = self._new_entry(size, typed)
            if len(held) < self.keep and (self.largest is None or size <= self.largest):
                # The counts with only the pool referring to the entry.
                held.append((entry, self._counts(entry)))
            return entry[1], entry[2], entry[3]


def _arg_from_json(data: dict[str, Any]) -> ArgSpec:
    alignment = data.get("alignment", DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or \
            not 1 <= alignment <= MAX_ALIGNMENT or alignment & (alignment - 1):
        raise ValueError(f"alignment {alignment!r} is not a power of two in "
                         f"[1, {MAX_ALIGNMENT}]")
    return ArgSpec(tuple(data["shape"]), data["dtype"], alignment)

