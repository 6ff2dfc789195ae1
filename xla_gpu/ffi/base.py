"""What every part of xla_gpu.ffi shares: its errors, the stage and error
code names of XLA's FFI, the platforms, and the records of registered
handlers. Imports nothing else of xla_gpu.ffi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import XlaGpuError

__all__ = ["FfiError", "FfiRegistrationError", "ERROR_CODES", "STAGES", "TYPED_FFI",
           "canonical_platform", "CHandler", "LegacyHandler", "PythonHandler"]


class FfiError(XlaGpuError, RuntimeError):
    """An FFI handler returned an error (or its binding refused the call:
    wrong element type, rank or number of buffers or attributes)."""

    def __init__(self, message: str, code: str = "UNKNOWN", target: str = "",
                 stage: str = "execute", handler_message: str = ""):
        super().__init__(message)
        self.code, self.target, self.stage = code, target, stage
        self.handler_message = handler_message


class FfiRegistrationError(XlaGpuError, ValueError):
    """A registration XLA's FFI refuses (the message says why)."""


ERROR_CODES = ("OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
               "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
               "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
               "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")
STAGES = ("instantiate", "prepare", "initialize", "execute")

_PLATFORMS = {"cpu": "cpu", "host": "cpu", "cuda": "cuda", "gpu": "cuda"}


def canonical_platform(platform: str) -> str:
    """"cpu" or "cuda" for the names jax and XLA use ("Host", "CUDA", "gpu")."""
    key = str(platform).lower()
    if key not in _PLATFORMS:
        raise FfiRegistrationError(
            f"unknown platform {platform!r}: xla_gpu runs custom calls on 'cpu' "
            "(also 'Host') and 'cuda' (also 'CUDA', 'gpu')")
    return _PLATFORMS[key]


@dataclass(frozen=True)
class CHandler:
    """A handler bundle in libXlaGpuFfi.so's registry: stage addresses (0:
    none), traits and the FFI API version the handler was built against."""
    name: str
    platform: str
    bundle: tuple[int, int, int, int]
    traits: int
    api_version: tuple[int, int]


@dataclass(frozen=True)
class LegacyHandler:
    """A function of XLA's legacy custom-call ABI (api_version=0): cpu
    `void(void* out, const void** in[, ...status])`, cuda `void(CUstream,
    void** buffers, const char* opaque, size_t len[, status])`."""
    name: str
    platform: str
    address: int


@dataclass(frozen=True)
class PythonHandler:
    """A Python callable registered as a handler."""
    name: str
    platform: str
    fn: Callable[..., Any]


TYPED_FFI = "API_VERSION_TYPED_FFI"
