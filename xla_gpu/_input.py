"""Reading input text (HLO, MLIR) from files and stdin, with bounds.

Input is data from anywhere, so a path must name a regular file, checked
with fstat on the descriptor that is then read (opened without blocking: a
FIFO, a device such as /dev/zero or a directory is refused at once, not
read), no larger than `max_input_bytes()` (XLA_GPU_MAX_INPUT_BYTES, default
1 GiB). stdin is read up to the same limit. Reads go in chunks, so Ctrl-C
interrupts them. Every failure is an ArgumentError naming the input;
text that is not UTF-8 is refused with its line, column and byte offset.

Only the standard library and xla_gpu.errors: the HLO parser uses it too.
"""

from __future__ import annotations

import codecs
import os
import stat
from typing import Callable

from .errors import ArgumentError, HloParseError

__all__ = ["DEFAULT_MAX_INPUT_BYTES", "max_input_bytes", "read_input", "decode_utf8",
           "decode_hlo_text", "check_hlo_text", "STDIN"]

DEFAULT_MAX_INPUT_BYTES = 1 << 30
STDIN = "-"
_CHUNK = 1 << 20


def max_input_bytes() -> int:
    """The largest input read, in bytes: XLA_GPU_MAX_INPUT_BYTES or 1 GiB."""
    value = os.environ.get("XLA_GPU_MAX_INPUT_BYTES", "").strip()
    if not value:
        return DEFAULT_MAX_INPUT_BYTES
    try:
        limit = int(value, 0)
    except ValueError:
        limit = 0
    if limit <= 0:
        raise ArgumentError("XLA_GPU_MAX_INPUT_BYTES must be a positive number of bytes, "
                            f"got {value!r}")
    return limit


def _name(path) -> str:
    if isinstance(path, bytes):
        return os.fsdecode(path)
    return str(path)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def read_input(path, *, stdin_ok: bool = False) -> tuple[bytes, str]:
    """The bytes of `path` (a str or os.PathLike; "-" is stdin where
    `stdin_ok`) and the name diagnostics give it ("<stdin>" for stdin)."""
    if isinstance(path, bool) or not isinstance(path, (str, bytes, os.PathLike)):
        raise ArgumentError(f"expected a file name, got {type(path).__name__}")
    limit = max_input_bytes()
    if stdin_ok and path == STDIN:
        return _read_stdin(limit), "<stdin>"
    name = _name(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is
        # refused below); reading a regular file ignores the flag.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) |
                     getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ArgumentError(f"cannot read '{name}': {e.strerror}") from None
    except ValueError as e:  # an embedded NUL
        raise ArgumentError(f"cannot read {name!r}: {e}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ArgumentError(f"input '{name}' is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise ArgumentError(f"input '{name}' is not a regular file "
                                f"({_kind(info.st_mode)})")
        if info.st_size > limit:
            raise _too_large(f"'{name}'", limit)
        return _read_fd(fd, limit, f"'{name}'", info.st_size), name
    except OSError as e:
        raise ArgumentError(f"cannot read '{name}': {e.strerror}") from None
    finally:
        os.close(fd)


def _read_stdin(limit: int) -> bytes:
    import sys
    stream = sys.stdin
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        raise ArgumentError("cannot read <stdin>: it is closed") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise _too_large("<stdin>", limit)
        return _read_fd(fd, limit, "<stdin>", 0)
    except OSError as e:
        raise ArgumentError(f"cannot read <stdin>: {e.strerror}") from None


def _too_large(shown: str, limit: int) -> ArgumentError:
    return ArgumentError(f"input {shown} is larger than the limit of {limit} bytes "
                         "(XLA_GPU_MAX_INPUT_BYTES)")


def _read_fd(fd: int, limit: int, shown: str, expected: int) -> bytes:
    """Reads `fd` to its end in chunks (a signal handler runs between
    them), refusing more than `limit` bytes."""
    data = bytearray()
    if expected:
        data = bytearray(expected)
        view = memoryview(data)
        filled = 0
        with open(fd, "rb", buffering=0, closefd=False) as f:
            while filled < expected:
                n = f.readinto(view[filled:filled + _CHUNK])
                if not n:  # the file shrank while read
                    break
                filled += n
        view.release()
        del data[filled:]
    while True:
        chunk = os.read(fd, min(_CHUNK, limit + 1 - len(data)))
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise _too_large(shown, limit)
    return bytes(data)


def position(data: bytes, offset: int) -> tuple[int, int]:
    """The 1-based line and column (in characters) of byte `offset`."""
    line = data.count(b"\n", 0, offset) + 1
    start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[start:offset].decode("utf-8", errors="replace")) + 1
    return line, column


def decode_utf8(data: bytes, source: str,
                make_error: Callable[[str, int, int], Exception] | None = None) -> str:
    """`data` as UTF-8 text; bytes that are not UTF-8 raise
    `make_error(message, line, column)` (default an ArgumentError
    "source:line:column: message")."""
    try:
        return codecs.decode(data, "utf-8")
    except UnicodeDecodeError as e:
        line, column = position(data, e.start)
        message = (f"the input is not UTF-8 text: byte 0x{data[e.start]:02x} at byte offset "
                   f"{e.start} ({e.reason})")
        if make_error is not None:
            raise make_error(message, line, column) from None
        raise ArgumentError(f"{source}:{line}:{column}: {message}") from None


def decode_hlo_text(data: bytes, source: str) -> str:
    """HLO text from bytes: UTF-8, or HloParseError at the first byte that
    is not."""
    return decode_utf8(data, source, lambda message, line, column: HloParseError(
        message, line, column, source=source))


def check_hlo_text(text: str, source: str = "<hlo>") -> None:
    """HLO text is UTF-8: a str holding a lone surrogate (which no UTF-8
    text decodes to) raises HloParseError at its line and column. Here, not
    in the parser: compile() checks it before every cache lookup."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        line = text.count("\n", 0, e.start) + 1
        column = e.start - text.rfind("\n", 0, e.start)
        raise HloParseError(f"lone surrogate U+{ord(text[e.start]):04X} in the text (not "
                            "a character: HLO text is UTF-8)", line, column,
                            source=source) from None
