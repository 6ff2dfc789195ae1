"""reduce (sequential or an order-preserving pairwise tree; see the
package docstring), reduce-window and select-and-scatter."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..module import HloComputation, HloError
from ..shape import ELEMENT_TYPES
from .dtypes import check_elements, down, etype_of, is_float, up
from .elementwise import binary_arith


_SEQUENTIAL_REDUCE_LIMIT = 1024


# ---- reduce


_SIMPLE_REDUCERS = {"add": np.add, "multiply": np.multiply,
                    "maximum": np.maximum, "minimum": np.minimum,
                    "and": None, "or": None, "xor": None}


def simple_binary(comp: HloComputation, etype: str) -> str | None:
    """The opcode when `comp` is `ROOT op(p0, p1)` of two scalar `etype`
    parameters ('assign' for `ROOT p1`)."""
    params = comp.parameters
    if len(params) != 2 or any(p.shape.is_tuple or p.shape.rank or
                               p.shape.element_type != etype for p in params):
        return None
    root = comp.root
    if root is params[1]:
        return "assign"
    if root.opcode not in _SIMPLE_REDUCERS or root.shape.is_tuple or \
            root.shape.element_type != etype or len(root.operands) != 2:
        return None
    if {id(o) for o in root.operands} != {id(params[0]), id(params[1])}:
        return None
    if root.operands[0] is root.operands[1]:
        return None
    return root.opcode


def ufunc_for(op: str, etype: str):
    if op in ("and", "or", "xor"):
        if etype == "pred":
            return {"and": np.logical_and, "or": np.logical_or,
                    "xor": np.logical_xor}[op]
        return {"and": np.bitwise_and, "or": np.bitwise_or,
                "xor": np.bitwise_xor}[op]
    if etype == "pred":
        return {"add": np.logical_or, "multiply": np.logical_and,
                "maximum": np.logical_or, "minimum": np.logical_and}[op]
    return _SIMPLE_REDUCERS[op]


def _h_reduce(ev, inst, ops, batch):
    n = len(ops) // 2
    inputs = [np.asarray(o) for o in ops[:n]]
    inits = [np.asarray(o) for o in ops[n:]]
    comp = inst.attrs["to_apply"]
    dims = tuple(inst.attrs.get("dimensions", ()))
    rank = inputs[0].ndim
    if any(x.shape != inputs[0].shape for x in inputs):
        raise HloError("reduce inputs differ in shape")
    if sorted(set(dims)) != sorted(dims) or any(not 0 <= d < rank
                                                for d in dims):
        raise HloError(f"bad reduce dimensions {list(dims)}")
    kept = [d for d in range(rank) if d not in dims]
    kept_shape = tuple(inputs[0].shape[d] for d in kept)
    count = math.prod(inputs[0].shape[d] for d in dims)
    flat = [np.transpose(x, kept + sorted(dims)).reshape(kept_shape + (count,))
            for x in inputs]
    etypes = [etype_of(inst, k) for k in range(n)]
    if n == 1:
        simple = simple_binary(comp, etypes[0])
        if simple is not None and simple != "assign":
            return _reduce_simple(simple, flat[0], inits[0], etypes[0],
                                  kept_shape)
    return _reduce_general(ev, comp, flat, inits, kept_shape, count,
                           n > 1 or inst.shape.is_tuple)


def _reduce_simple(op: str, x: np.ndarray, init: np.ndarray, etype: str,
                   kept_shape: tuple[int, ...]) -> np.ndarray:
    ufunc = ufunc_for(op, etype)
    init_b = np.broadcast_to(init, kept_shape)
    if x.shape[-1] == 0:
        return np.array(init_b, copy=True)
    if (is_float(etype) or etype in ("c64", "c128")) and \
            op in ("add", "multiply"):
        # Sequential, rounding to the element type after every step.
        dtype = ELEMENT_TYPES[etype]
        seq = np.concatenate([init_b[..., None].astype(dtype), x], axis=-1)
        try:
            return np.asarray(ufunc.accumulate(seq, axis=-1)[..., -1])
        except TypeError:  # no accumulate loop for the type: step by step
            acc = seq[..., 0]
            for i in range(1, seq.shape[-1]):
                acc = binary_arith(op, acc, seq[..., i], etype)
            return np.asarray(acc)
    if etype == "pred":
        return np.asarray(ufunc(init_b, ufunc.reduce(x, axis=-1)))
    wide = up(x, etype)
    total = ufunc.reduce(wide, axis=-1)
    return down(ufunc(up(init_b, etype), total), etype)


def _reduce_general(ev, comp, flat, inits, kept_shape, count, is_tuple):
    def call(a, b, batch):
        out = ev.apply(comp, list(a) + list(b), batch)
        return list(out) if is_tuple else [out]

    inits_b = [np.broadcast_to(i, kept_shape) for i in inits]
    if count == 0:
        acc = [np.array(i, copy=True) for i in inits_b]
    elif count <= _SEQUENTIAL_REDUCE_LIMIT:
        acc = inits_b
        for r in range(count):
            acc = call(acc, [x[..., r] for x in flat], kept_shape)
    else:
        vals = flat
        while vals[0].shape[-1] > 1:
            m = vals[0].shape[-1]
            half = m // 2
            left = [v[..., 0:2 * half:2] for v in vals]
            right = [v[..., 1:2 * half:2] for v in vals]
            combined = call(left, right, kept_shape + (half,))
            if m % 2:
                combined = [np.concatenate([c, v[..., -1:]], axis=-1)
                            for c, v in zip(combined, vals)]
            vals = combined
        acc = call(inits_b, [v[..., 0] for v in vals], kept_shape)
    acc = [np.array(a, copy=True) for a in acc]
    return tuple(acc) if is_tuple else acc[0]


# ---- reduce-window


def _h_reduce_window(ev, inst, ops, batch):
    n = len(ops) // 2
    inputs = [np.asarray(o) for o in ops[:n]]
    inits = [np.asarray(o) for o in ops[n:]]
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, HloComputation):
        raise HloError("reduce-window needs to_apply=<computation>")
    window = inst.attrs.get("window", {})
    if not isinstance(window, dict):
        raise HloError("reduce-window needs window={size=...}")
    size, stride, pad, base_dil, win_dil = _window_fields(window, inputs[0].ndim)
    out_leaves = inst.shape.leaves()
    out_dims = out_leaves[0].dims
    padded = []
    for x, init in zip(inputs, inits):
        # Base dilation, then padding (negative padding crops), with init.
        dil_shape = [max((d - 1) * b + 1, 0) for d, b in zip(x.shape, base_dil)]
        grown = [max(lo, 0) + d + max(hi, 0)
                 for (lo, hi), d in zip(pad, dil_shape)]
        check_elements("the dilated, padded operand", grown)
        buf = np.full(grown, init, dtype=x.dtype)
        place = tuple(slice(max(lo, 0), max(lo, 0) + dd, b)
                      for (lo, _), dd, b in zip(pad, dil_shape, base_dil))
        buf[place] = x
        crop = tuple(slice(max(-lo, 0), g - max(-hi, 0))
                     for (lo, hi), g in zip(pad, grown))
        padded.append(buf[crop])
    acc = [np.broadcast_to(i, out_dims) for i in inits]
    is_tuple = n > 1 or inst.shape.is_tuple
    for w in np.ndindex(*size):
        views = []
        for p in padded:
            idx = tuple(slice(wi * wd, wi * wd + (o - 1) * s + 1, s)
                        if o else slice(0, 0)
                        for wi, wd, o, s in zip(w, win_dil, out_dims, stride))
            view = p[idx]
            if view.shape != out_dims:
                raise HloError(f"window does not fit: {view.shape} vs "
                               f"{out_dims}")
            views.append(view)
        out = ev.apply(comp, acc + views, out_dims)
        acc = list(out) if is_tuple else [out]
    acc = [np.array(a, copy=True) for a in acc]
    return tuple(acc) if is_tuple else acc[0]


# ---- select-and-scatter


def _window_fields(window: dict, rank: int) -> tuple:
    """(size, stride, pad, base dilation, window dilation) of a window
    over a rank-`rank` operand, defaults where a field is absent."""
    size = tuple(window.get("size", (1,) * rank))
    stride = tuple(window.get("stride", (1,) * rank))
    pad = list(window.get("pad", [(0, 0)] * rank))
    base_dil = tuple(window.get("lhs_dilate", (1,) * rank))
    win_dil = tuple(window.get("rhs_dilate", (1,) * rank))
    if not all(len(t) == rank for t in (size, stride, pad, base_dil, win_dil)):
        raise HloError("window fields do not match the operand rank")
    return size, stride, pad, base_dil, win_dil


def _windows_of(x: np.ndarray, window: dict, fill) -> tuple:
    """The padded operand, its validity mask and the window geometry
    (size, stride, dilation) of a reduce-window-like op."""
    size, stride, pad, base_dil, win_dil = _window_fields(window, x.ndim)
    if any(b != 1 for b in base_dil):
        raise HloError("select-and-scatter with base dilation is not "
                       "supported")
    grown = [max(lo, 0) + d + max(hi, 0) for (lo, hi), d in zip(pad, x.shape)]
    check_elements("the padded operand", grown)
    buf = np.full(grown, fill, dtype=x.dtype)
    valid = np.zeros(grown, bool)
    index = np.full(grown, -1, np.int64)
    place = tuple(slice(max(lo, 0), max(lo, 0) + d)
                  for (lo, _), d in zip(pad, x.shape))
    buf[place] = x
    valid[place] = True
    index[place] = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    crop = tuple(slice(max(-lo, 0), g - max(-hi, 0))
                 for (lo, hi), g in zip(pad, grown))
    return buf[crop], valid[crop], index[crop], size, stride, win_dil


def combine_at(ev, comp: HloComputation, flats: list[np.ndarray],
               targets: np.ndarray, values: list[np.ndarray]) -> None:
    """flats[t] = comp(flats[t], v) for the (target, value) pairs in order
    (several flats for a variadic combiner). The k-th update of every target
    goes in round k, so each round writes distinct elements and runs
    batched; repeated targets are combined in their order."""
    if targets.size == 0:
        return
    order = np.argsort(targets, kind="stable")
    sorted_t = targets[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_t)) + 1]
    ranks_sorted = np.arange(sorted_t.size) - np.repeat(
        starts, np.diff(np.r_[starts, sorted_t.size]))
    occurrence = np.empty_like(ranks_sorted)
    occurrence[order] = ranks_sorted
    is_tuple = len(flats) > 1 or comp.root.shape.is_tuple
    for r in range(int(occurrence.max()) + 1):
        sel = np.flatnonzero(occurrence == r)
        t = targets[sel]
        out = ev.apply(comp, [f[t] for f in flats] + [v[sel] for v in values],
                       (sel.size,))
        for f, v in zip(flats, list(out) if is_tuple else [out]):
            f[t] = v


def _h_select_and_scatter(ev, inst, ops, batch):
    operand, source, init = (np.asarray(o) for o in ops)
    select = inst.attrs.get("select")
    scatter = inst.attrs.get("scatter")
    if not isinstance(select, HloComputation) or \
            not isinstance(scatter, HloComputation):
        raise HloError("select-and-scatter needs select= and scatter= "
                       "computations")
    window = inst.attrs.get("window", {})
    if not isinstance(window, dict):
        raise HloError("select-and-scatter needs window={size=...}")
    padded, valid, index, size, stride, dil = _windows_of(
        operand, window, np.zeros((), operand.dtype))
    out_dims = source.shape
    if len(out_dims) != operand.ndim:
        raise HloError("the source's rank differs from the operand's")
    sel_val = np.zeros(out_dims, operand.dtype)
    sel_idx = np.full(out_dims, -1, np.int64)
    have = np.zeros(out_dims, bool)
    # XLA's order: the window's elements in row-major order; a candidate
    # replaces the current choice when select(current, candidate) is false.
    for w in np.ndindex(*size):
        view = tuple(slice(wi * wd, wi * wd + (o - 1) * s + 1, s)
                     if o else slice(0, 0)
                     for wi, wd, o, s in zip(w, dil, out_dims, stride))
        cand, cvalid, cidx = padded[view], valid[view], index[view]
        if cand.shape != out_dims:
            raise HloError(f"the window does not fit: {list(cand.shape)} vs "
                           f"the source {list(out_dims)}")
        keep = np.asarray(ev.apply(select, [sel_val, cand], out_dims),
                          bool) if have.any() else np.zeros(out_dims, bool)
        take = cvalid & (~have | ~keep)
        sel_val = np.where(take, cand, sel_val)
        sel_idx = np.where(take, cidx, sel_idx)
        have |= cvalid
    result = np.array(np.broadcast_to(init, operand.shape), copy=True)
    flat = result.reshape(-1)
    chosen = sel_idx.reshape(-1)
    ok = chosen >= 0
    if simple_binary(scatter, etype_of(inst, 0)) == "assign":
        flat[chosen[ok]] = source.reshape(-1)[ok]
    else:
        combine_at(ev, scatter, [flat], chosen[ok], [source.reshape(-1)[ok]])
    return result


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "reduce": _h_reduce,
    "reduce-window": _h_reduce_window,
    "select-and-scatter": _h_select_and_scatter,
}
