"""ctypes arrays whose types are made once per element type and length.

`ctype * n` (and `create_string_buffer(n)`) makes a new array type unless
ctypes' weak cache still holds one; a type lives in reference cycles, so
each type made and dropped is garbage for the cycle collector (a compile or
a jax call that makes some leaves work for `gc.collect`, which jax's own
tests count). Keeping the types here makes them once."""

from __future__ import annotations

import ctypes
import functools
from typing import Any, Iterable

__all__ = ["array_type", "array_of", "char_buffer"]


@functools.lru_cache(maxsize=4096)
def array_type(ctype: Any, length: int) -> Any:
    """ctypes' `ctype * length`, made once."""
    return ctype * length


def array_of(ctype: Any, values: Iterable, length: int | None = None) -> Any:
    """An array of `ctype` holding `values` (of `length` elements: default
    their count, at least 1, since a zero-length array has no address)."""
    values = list(values)
    count = max(len(values), 1) if length is None else length
    return array_type(ctype, count)(*values)


def char_buffer(size: int) -> Any:
    """A zeroed, writable `char[size]` (as `create_string_buffer(size)`)."""
    return array_type(ctypes.c_char, size)()
