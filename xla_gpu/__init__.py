"""xla_gpu: XLA:GPU's MLIR-based fusion emitters as a Python compiler.

Importing the package is cheap and does not import MLIR: `xla_gpu.hlo` and
`xla_gpu.runtime` must work where no compiler is installed. The MLIR side
lives in `xla_gpu.ir` (contexts, the dialect, indexing maps) and
`xla_gpu.dialects.xla_gpu` (op builders).
"""

from __future__ import annotations

import sys
from pathlib import Path

__version__ = "0.1.0"


def _find_native_dir() -> Path:
    # A wheel install has _native/ next to this file; an editable install
    # keeps it in site-packages while the sources stay in the work tree, and
    # lists both in __path__.
    # A source checkout on sys.path (tests run from the repo root) shadows
    # the installed package but has no _native/: look in site-packages too.
    entries = [*__path__, *(str(Path(p) / "xla_gpu") for p in sys.path if p)]
    for entry in entries:
        candidate = Path(entry) / "_native"
        if (candidate / "lib").is_dir():
            return candidate
    return Path(__file__).resolve().parent / "_native"


_NATIVE_DIR = _find_native_dir()


def native_dir() -> Path:
    """The installed native part: lib/, bin/, include/, lib/cmake/."""
    return _NATIVE_DIR


def library_path() -> str:
    """libXlaGpu.so: the dialect, passes and C API (over the bindings' MLIR)."""
    return str(_NATIVE_DIR / "lib" / "libXlaGpu.so")


def plugin_path() -> str:
    """The mlir-opt plugin: `mlir-opt --load-dialect-plugin=P --load-pass-plugin=P`."""
    return str(_NATIVE_DIR / "lib" / "XlaGpuPlugin.so")


def cmake_dir() -> str:
    """The directory of XlaGpuConfig.cmake, for `find_package(XlaGpu)`."""
    return str(_NATIVE_DIR / "lib" / "cmake" / "XlaGpu")


def include_dir() -> str:
    """The include directory of the dialect's, its C API's and its passes'
    headers (with the generated .inc): `#include "xla_gpu/XlaGpuDialect.h"`."""
    return str(_NATIVE_DIR / "include")


from .errors import (ArgumentError, ArtifactError, CompileError,  # noqa: E402
                     CudaError, CudaUnavailableError, DeadlineExceededError, HloError,
                     HloParseError, ResourceError, UnsupportedError, XlaGpuError)
from . import runtime  # noqa: E402  (numpy + cuda-python only)
from ._lazy import lazy_attributes  # noqa: E402

# `compile` and `Executable` come from the compiler, imported when first
# asked for: `import xla_gpu.runtime` (a deployment that only loads compiled
# programs) never imports it.
__getattr__ = lazy_attributes(__name__, {"compile": ".compiler", "Executable": ".compiler"},
                              globals())

__all__ = ["compile", "Executable", "runtime", "native_dir", "library_path",
           "plugin_path", "cmake_dir", "include_dir", "__version__",
           "XlaGpuError", "HloError", "HloParseError", "UnsupportedError",
           "ArgumentError", "ArtifactError", "CompileError", "ResourceError",
           "DeadlineExceededError", "CudaError", "CudaUnavailableError"]
