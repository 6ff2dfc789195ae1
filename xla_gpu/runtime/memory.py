"""Checking that a run fits in memory before allocating it. No third-party
imports."""

from __future__ import annotations

import os

from ..errors import ResourceError

__all__ = ["host_memory_bytes", "check_host_memory", "format_bytes"]


def host_memory_bytes() -> int | None:
    """Memory a new allocation can get on this host: MemAvailable (Linux),
    else the physical memory; None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"


def check_host_memory(nbytes: int, what: str) -> None:
    """Raises ResourceError when `nbytes` more bytes do not fit in the host's
    available memory (naming `what` needs them)."""
    available = host_memory_bytes()
    if available is not None and nbytes > available:
        raise ResourceError(f"{what} needs {format_bytes(nbytes)} of host memory; "
                            f"{format_bytes(available)} are available")
