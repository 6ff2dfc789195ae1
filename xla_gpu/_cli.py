"""Console-script entry points that hand over to the native tools."""

from __future__ import annotations

import os
import sys

from . import native_dir


def _exec(tool: str) -> None:
    path = native_dir() / "bin" / tool
    if not path.exists():
        sys.stderr.write(
            f"{tool}: the native tool is missing at {path}; reinstall xla_gpu "
            "(pip install .) so that its native part is built\n")
        raise SystemExit(2)
    os.execv(str(path), [tool, *sys.argv[1:]])


def opt() -> None:
    """xla-gpu-opt: mlir-opt with the xla_gpu dialect and passes."""
    _exec("xla-gpu-opt")
