"""fft: FFT, IFFT, RFFT and IRFFT over the innermost fft_length dimensions."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..module import HloError
from .dtypes import etype_of, is_float, up


def _h_fft(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    kind = str(inst.attrs.get("fft_type", "")).upper()
    lengths = tuple(inst.attrs.get("fft_length", ()))
    if not 1 <= len(lengths) <= 3 or len(lengths) > x.ndim:
        raise HloError(f"fft needs fft_length of 1 to 3 sizes over the last "
                       f"dimensions, got {list(lengths)} for rank {x.ndim}")
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    out_dtype = inst.shape.dtype
    src = etype_of(inst, 0)
    if kind in ("FFT", "IFFT"):
        if src not in ("c64", "c128") or x.shape[-len(lengths):] != lengths:
            raise HloError(f"{kind} needs a complex operand whose last "
                           f"dimensions are {list(lengths)}")
        fn = np.fft.fftn if kind == "FFT" else np.fft.ifftn
        out = fn(x.astype(np.complex128), s=lengths, axes=axes)
    elif kind == "RFFT":
        if not is_float(src) or x.shape[-len(lengths):] != lengths:
            raise HloError(f"RFFT needs a real operand whose last "
                           f"dimensions are {list(lengths)}")
        out = np.fft.rfftn(up(x, src), s=lengths, axes=axes)
    elif kind == "IRFFT":
        expected = lengths[:-1] + (lengths[-1] // 2 + 1,)
        if src not in ("c64", "c128") or x.shape[-len(lengths):] != expected:
            raise HloError(f"IRFFT needs a complex operand whose last "
                           f"dimensions are {list(expected)}")
        out = np.fft.irfftn(x.astype(np.complex128), s=lengths, axes=axes)
    else:
        raise HloError(f"unknown fft_type '{kind}' (FFT, IFFT, RFFT, IRFFT)")
    return np.asarray(out).astype(out_dtype)


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "fft": _h_fft,
}
