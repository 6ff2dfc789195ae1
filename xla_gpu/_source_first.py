"""XLA_GPU_PURE_PYTHON=1: the package's modules from their Python sources
even where an install put a compiled twin next to one (the hottest modules
of the HLO passes, compiled by Cython at build time: see
cmake/CompiledPython.cmake), for a debugger or a line profiler, or to
compare the two. Imports nothing of xla_gpu.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

__all__ = ["PURE_PYTHON", "install"]

PURE_PYTHON = os.environ.get("XLA_GPU_PURE_PYTHON", "") not in ("", "0")


class _SourceFirst:
    """A meta path finder for the package's submodules that answers with
    the `.py` source where there is one in the parent package's folders
    (in their order); anything else goes on to the usual finders."""

    def find_spec(self, fullname, path=None, target=None):
        if path is None or not fullname.startswith("xla_gpu."):
            return None
        name = fullname.rpartition(".")[2]
        for folder in path:
            source = os.path.join(folder, name + ".py")
            if os.path.isfile(source):
                loader = importlib.machinery.SourceFileLoader(fullname, source)
                return importlib.util.spec_from_file_location(fullname, source, loader=loader)
        return None


def install() -> None:
    """Puts the finder first when XLA_GPU_PURE_PYTHON asks for it (once)."""
    if PURE_PYTHON and not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())
