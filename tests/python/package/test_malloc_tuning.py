"""xla_gpu._malloc_tuning: a compiling process keeps freed heap (glibc's
malloc) instead of giving it back and faulting it in again for the next
kernel; a user's own malloc settings, or XLA_GPU_MALLOC_TUNING=0, leave it
alone. Each case runs in a fresh process: the settings are process-wide."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or
    not hasattr(ctypes.CDLL(None), "gnu_get_libc_version") or
    not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="glibc 2.33+ only (mallinfo2)")

# Allocates and frees 24 MiB through libc's malloc and reports where it came
# from: glibc's default serves it by mmap (hblkhd) and unmaps it on free
# (its adaptive threshold would move only after a larger block were freed);
# tuned, it comes from the heap (arena), which keeps it after the free.
_PROBE = r"""
import ctypes, json, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.mallinfo2.restype = MallInfo2
state = None
if sys.argv[1] == "compile":
    import xla_gpu
    text = '''HloModule m
ENTRY e {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}'''
    xla_gpu.compile(text, target="cpu", cache=False)
    from xla_gpu import _malloc_tuning
    state = _malloc_tuning._state
size = 24 << 20
before = libc.mallinfo2()
block = libc.malloc(size)
during = libc.mallinfo2()
libc.free(block)
after = libc.mallinfo2()
print(json.dumps(dict(state=state, mmapped=during.hblkhd - before.hblkhd,
                      heap_kept=after.arena)))
"""


def _probe(mode: str, **env) -> dict:
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"
                   and k != "XLA_GPU_MALLOC_TUNING"}
    environment.update(env)
    result = subprocess.run([sys.executable, "-c", _PROBE, mode], env=environment,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_compiling_keeps_freed_heap():
    size = 24 << 20
    untuned = _probe("plain")
    assert untuned["mmapped"] >= size          # glibc's default: an mmap
    tuned = _probe("compile")
    assert tuned["state"] == "tuned"
    assert tuned["mmapped"] == 0               # from the heap ...
    assert tuned["heap_kept"] >= size          # ... which keeps it after free


def test_off_switch_and_user_settings_leave_malloc_alone():
    disabled = _probe("compile", XLA_GPU_MALLOC_TUNING="0")
    assert disabled["state"] == "disabled" and disabled["mmapped"] >= 24 << 20
    user = _probe("compile", MALLOC_TRIM_THRESHOLD_="131072")
    assert user["state"] == "user settings" and user["mmapped"] >= 24 << 20
