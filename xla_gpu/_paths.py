"""The package's version, where its files are (the native part: lib/,
bin/, include/, lib/cmake/; the cache directory) and the environment's
switches of what a compile makes (part of the compile cache's key). The
bottom layer:
every module that needs one of these imports it from here (the package
root re-exports them), so that nothing below the API imports the root.
Imports nothing of xla_gpu.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["__version__", "native_dir", "library_path", "plugin_path", "cmake_dir",
           "include_dir", "cache_dir"]

__version__ = "0.1.0"


def _find_native_dir() -> Path:
    # A wheel install has _native/ next to this file; an editable install
    # keeps it in site-packages while the sources stay in the work tree, and
    # lists both in the package's __path__ (the package is imported before
    # any of its modules, so it is in sys.modules here).
    # A source checkout on sys.path (tests run from the repo root) shadows
    # the installed package but has no _native/: look in site-packages too.
    package_path = sys.modules[__package__].__path__
    entries = [*package_path, *(str(Path(p) / "xla_gpu") for p in sys.path if p)]
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


def cache_dir() -> Path:
    """`XLA_GPU_CACHE_DIR`, else `$XDG_CACHE_HOME/xla_gpu`, else ~/.cache/xla_gpu."""
    env = os.environ.get("XLA_GPU_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xla_gpu"


def autotune_enabled() -> bool:
    """True when XLA_GPU_AUTOTUNE=1: GEMM fusions get the tile config that
    ran fastest (`program.autotune`); unset or 0: the heuristic table."""
    return os.environ.get("XLA_GPU_AUTOTUNE", "0").strip().lower() not in \
        ("", "0", "false", "no", "off")


def gemm_fusion_enabled() -> bool:
    """False when XLA_GPU_GEMM_FUSION=0: dots with prologues or epilogues
    stay gemm thunks instead of GEMM fusions."""
    return os.environ.get("XLA_GPU_GEMM_FUSION", "1").strip().lower() not in \
        ("0", "false", "no")
