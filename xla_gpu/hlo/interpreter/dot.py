"""dot: dot_general in the compute type of the result, rounded once."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..module import HloError
from .dtypes import compute_dtype, down, etype_of, up
from .elementwise import convert


def dot_general(lhs: np.ndarray, rhs: np.ndarray, lt: str, rt: str,
                etype: str, lb: Sequence[int], rb: Sequence[int],
                lc: Sequence[int], rc: Sequence[int]) -> np.ndarray:
    """dot_general of lhs (of type lt) and rhs (rt) into `etype`, in the
    compute type of `etype` (not yet rounded): batch dimensions first, then
    lhs's free dimensions, then rhs's."""
    lb, rb, lc, rc = tuple(lb), tuple(rb), tuple(lc), tuple(rc)
    if len(lb) != len(rb) or len(lc) != len(rc):
        raise HloError("dot dimension numbers do not pair up")
    for dims, rank, what in ((lb + lc, lhs.ndim, "lhs"),
                             (rb + rc, rhs.ndim, "rhs")):
        if len(set(dims)) != len(dims) or any(not 0 <= d < rank
                                              for d in dims):
            raise HloError(f"bad {what} dot dimensions {list(dims)} for rank "
                           f"{rank}")
    for l_, r_ in zip(lb + lc, rb + rc):
        if lhs.shape[l_] != rhs.shape[r_]:
            raise HloError(f"lhs dimension {l_} ({lhs.shape[l_]}) does not "
                           f"match rhs dimension {r_} ({rhs.shape[r_]})")
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    lsub = [""] * lhs.ndim
    rsub = [""] * rhs.ndim
    out = []
    for l_, r_ in zip(lb, rb):
        lsub[l_] = rsub[r_] = next(letters)
        out.append(lsub[l_])
    for l_, r_ in zip(lc, rc):
        lsub[l_] = rsub[r_] = next(letters)
    for i in range(lhs.ndim):
        if not lsub[i]:
            lsub[i] = next(letters)
            out.append(lsub[i])
    for i in range(rhs.ndim):
        if not rsub[i]:
            rsub[i] = next(letters)
            out.append(rsub[i])
    cdt = compute_dtype(etype)
    x = convert(lhs, lt, etype) if lt != etype else lhs
    y = convert(rhs, rt, etype) if rt != etype else rhs
    spec = f"{''.join(lsub)},{''.join(rsub)}->{''.join(out)}"
    return np.einsum(spec, up(x, etype).astype(cdt),
                     up(y, etype).astype(cdt))


def _h_dot(ev, inst, ops, batch):
    a = inst.attrs
    etype = inst.shape.element_type
    result = dot_general(
        np.asarray(ops[0]), np.asarray(ops[1]), etype_of(inst, 0),
        etype_of(inst, 1), etype, a.get("lhs_batch_dims", ()),
        a.get("rhs_batch_dims", ()), a.get("lhs_contracting_dims", ()),
        a.get("rhs_contracting_dims", ()))
    return down(result, etype)


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "dot": _h_dot,
}
