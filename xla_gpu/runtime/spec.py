"""What a compiled kernel needs to be run: launch dimensions and the
argument layout, saved as `kernel.json` next to the PTX/cubin. numpy only."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import ArgumentError
from ..hlo.shape import ELEMENT_TYPES

__all__ = ["ArgSpec", "KernelSpec"]


@dataclass(frozen=True)
class ArgSpec:
    shape: tuple[int, ...]
    dtype: str                     # HLO element type: f32, bf16, pred, ...

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
        return array if array.dtype == logical else array.astype(logical)

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

    @property
    def kernel_args(self) -> list[tuple[str, int]]:
        """The kernel's pointer arguments after merge-pointers: every
        parameter, then the outputs that do not alias a parameter."""
        return [("param", i) for i in range(len(self.parameters))] + \
            [("output", k) for k in range(len(self.outputs)) if k not in self.aliases]

    def to_json(self) -> str:
        data = asdict(self)
        data["aliases"] = {str(k): v for k, v in self.aliases.items()}
        return json.dumps(data, indent=1)

    @staticmethod
    def from_json(text: str) -> "KernelSpec":
        data: dict[str, Any] = json.loads(text)
        data["parameters"] = [ArgSpec(tuple(a["shape"]), a["dtype"]) for a in data["parameters"]]
        data["outputs"] = [ArgSpec(tuple(a["shape"]), a["dtype"]) for a in data["outputs"]]
        data["aliases"] = {int(k): int(v) for k, v in data.get("aliases", {}).items()}
        return KernelSpec(**data)

    def host_buffers(self, args: Sequence[Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """For a host run: the kernel's buffers in argument order, and the
        output buffers (in-place outputs are a copy of their operand, so the
        caller's array is never written)."""
        arrays = [a.copy() if j in self.aliases.values() else a
                  for j, a in enumerate(self.check_arguments(args))]
        outputs = [arrays[self.aliases[k]] if k in self.aliases
                   else np.zeros(o.shape, o.storage_dtype) for k, o in enumerate(self.outputs)]
        buffers = [arrays[i] if kind == "param" else outputs[i] for kind, i in self.kernel_args]
        return buffers, outputs

    def results(self, outputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Output buffers as the user's arrays (sub-byte types unpacked)."""
        return tuple(o.from_storage(a) for o, a in zip(self.outputs, outputs))

    def check_arguments(self, args: Sequence[Any], *, device_ok: bool = False) -> list[Any]:
        """Validates count, shape and dtype; returns host arrays as
        C-contiguous numpy arrays (device arrays are passed through)."""
        if len(args) != len(self.parameters):
            raise ArgumentError(f"{self.name} takes {len(self.parameters)} arguments "
                             f"({', '.join(p.describe() for p in self.parameters)}), "
                             f"got {len(args)}")
        out = []
        for i, (arg, spec) in enumerate(zip(args, self.parameters)):
            if device_ok and hasattr(arg, "__cuda_array_interface__"):
                iface = arg.__cuda_array_interface__
                shape, dtype = tuple(iface["shape"]), np.dtype(iface["typestr"])
                if iface.get("strides") not in (None, ()) and \
                        iface["strides"] != _contiguous_strides(shape, dtype.itemsize):
                    raise ArgumentError(f"argument {i}: device array must be contiguous")
                value = arg
            else:
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
            out.append(value if value is arg and not isinstance(arg, np.ndarray)
                       else np.require(spec.to_storage(value), requirements='C'))
        return out


def _contiguous_strides(shape, itemsize) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))
