"""xla_gpu: XLA:GPU's MLIR-based fusion emitters as a Python compiler.

Importing the package is cheap and does not import MLIR: `xla_gpu.hlo` and
`xla_gpu.runtime` must work where no compiler is installed. The MLIR side
lives in `xla_gpu.ir` (contexts, the dialect, indexing maps) and
`xla_gpu.dialects.xla_gpu` (op builders).
"""

from __future__ import annotations

from ._paths import (__version__, cmake_dir, include_dir, library_path,  # noqa: F401
                     native_dir, plugin_path)
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
