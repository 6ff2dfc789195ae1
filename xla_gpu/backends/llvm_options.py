"""LLVM's process-wide code generation switches, shared by the targets.

The host code is generated without LLVM's loop strength reduction
(`cpu.HOST_LOOP_STRENGTH_REDUCTION`). LLVM has that switch only as a
command-line option of the whole library, and the NVPTX code generation of
the cuda target runs in the same library, where the reduction matters (a GPU
loop's address arithmetic). So the first device code generation in a process
turns the reduction back on for good, and the host never turns it off after
that: its code is then generated with the reduction (slower to compile, the
same speed at run time).
"""

from __future__ import annotations

import ctypes
import threading

from .._ctypes_arrays import array_of

__all__ = ["host_codegen_without_lsr", "device_codegen_begins", "lsr_disabled"]

_lock = threading.Lock()
_lsr_disabled = False
_device_seen = False


def _set_options(lib, *options: str) -> bool:
    """Sets LLVM command-line `options` in `lib` (the process's LLVM); False
    when the library does not export the parser. LLVM ends the process on
    an option it does not know: only options every LLVM the bindings ship
    has (code generation's own) go here."""
    try:
        parse = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                 ctypes.c_char_p)(("LLVMParseCommandLineOptions", lib))
    except AttributeError:
        return False
    argv = [b"xla_gpu"] + [o.encode() for o in options]
    parse(len(argv), array_of(ctypes.c_char_p, argv), None)
    return True


def host_codegen_without_lsr(lib) -> None:
    """Turns loop strength reduction off in `lib`, unless device code has
    been generated in this process."""
    global _lsr_disabled
    with _lock:
        if not _device_seen and not _lsr_disabled:
            _lsr_disabled = _set_options(lib, "-disable-lsr")


def device_codegen_begins() -> None:
    """Called before any NVPTX code generation: loop strength reduction back
    on, and kept on."""
    global _device_seen, _lsr_disabled
    if _device_seen:
        return
    with _lock:
        _device_seen = True
        if _lsr_disabled:
            from .. import _pass_runner
            _set_options(_pass_runner.bindings_library(), "-disable-lsr=false")
            _lsr_disabled = False


def lsr_disabled() -> bool:
    """Whether the process's LLVM runs without loop strength reduction now."""
    return _lsr_disabled
