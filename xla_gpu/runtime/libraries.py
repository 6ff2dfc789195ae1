"""Where the CUDA libraries the runtime calls through ctypes (cuBLASLt,
cuFFT, cuBLAS) are looked for, in order: the pip wheels jax[cuda] installs
(`nvidia/<wheel>/lib` for CUDA 12, `nvidia/cu13/lib` for CUDA 13), the
toolkit named by $CUDA_HOME / $CUDA_PATH, /usr/local/cuda, then the bare
names for the system loader."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["candidate_libraries"]


def candidate_libraries(names: Sequence[str], wheel: str) -> list[Path]:
    """The existing files among `names` under each root in search order,
    then the bare names."""
    roots: list[Path] = []
    for entry in sys.path:
        if entry:
            roots.append(Path(entry) / "nvidia" / wheel / "lib")
            roots.append(Path(entry) / "nvidia" / "cu13" / "lib")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots += [Path(os.environ[var]) / "lib64", Path(os.environ[var]) / "lib"]
    roots += [Path("/usr/local/cuda/lib64"), Path("/usr/local/cuda/lib")]
    found = [root / name for root in roots for name in names if (root / name).exists()]
    return found + [Path(name) for name in names]
