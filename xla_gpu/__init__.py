"""xla_gpu: XLA:GPU's MLIR-based fusion emitters as a Python compiler.

Importing the package is cheap and does not import MLIR: `xla_gpu.hlo` and
`xla_gpu.runtime` must work where no compiler is installed. The MLIR side
lives in `xla_gpu.ir` (contexts, the dialect, indexing maps) and
`xla_gpu.dialects.xla_gpu` (op builders).
"""

from __future__ import annotations

from ._source_first import install as _install_source_first

# (before any module that may have a compiled twin is imported)
_install_source_first()

from ._paths import (__version__, cmake_dir, include_dir, library_path,  # noqa: F401,E402
                     native_dir, plugin_path)
from .errors import (ArgumentError, ArtifactError, CompileError,  # noqa: E402
                     CudaError, CudaUnavailableError, DeadlineExceededError, HloError,
                     HloParseError, ResourceError, UnsupportedError, XlaGpuError)
from . import runtime  # noqa: E402  (numpy + cuda-python only)
from ._lazy import lazy_attributes  # noqa: E402
from ._trace import Trace  # noqa: E402

# `compile` and `Executable` come from the compiler, imported when first
# asked for: `import xla_gpu.runtime` (a deployment that only loads compiled
# programs) never imports it.
__getattr__ = lazy_attributes(__name__, {"compile": ".compiler", "Executable": ".compiler"},
                              globals())



def trace(path=None):
    """Records everything compiled and run in the `with` block into one
    trace (Chrome trace-event JSON, which Perfetto's UI opens), written to
    `path` when the block ends (also when it fails); without a path, the
    `Trace` is yours to `write`:

        with xla_gpu.trace("t.json"):
            exe = xla_gpu.compile(text)
            exe.run(x)
    """
    from . import _trace
    return _trace.trace_file(path) if path is not None else _trace.recording()


__all__ = ["compile", "Executable", "runtime", "trace", "Trace", "native_dir", "library_path",
           "plugin_path", "cmake_dir", "include_dir", "__version__",
           "XlaGpuError", "HloError", "HloParseError", "UnsupportedError",
           "ArgumentError", "ArtifactError", "CompileError", "ResourceError",
           "DeadlineExceededError", "CudaError", "CudaUnavailableError"]
