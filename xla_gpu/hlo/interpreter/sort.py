"""sort (the bitonic network XLA:GPU runs; stable as XLA's
StableSortExpander), topk and XLA:CPU's TopK custom call."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..module import HloComputation, HloError
from .dtypes import Value, etype_of, is_float, is_int, up
from .elementwise import total_order_key


def _comparator_args(lhs: list[np.ndarray], rhs: list[np.ndarray]) -> list:
    """Comparator arguments: lhs0, rhs0, lhs1, rhs1, ..."""
    out: list[np.ndarray] = []
    for a, b in zip(lhs, rhs):
        out += [a, b]
    return out


def _comparator_less(ev, comp: HloComputation, lhs: list[np.ndarray],
                     rhs: list[np.ndarray]) -> np.ndarray:
    """comp(lhs, rhs) on arrays of equal shape: whether lhs goes first."""
    shape = lhs[0].shape
    if not math.prod(shape):
        return np.zeros(shape, bool)
    out = ev.apply(comp, _comparator_args(lhs, rhs), shape)
    if isinstance(out, tuple):
        raise HloError(f"the comparator '{comp.name}' returns a tuple, "
                       "not a pred")
    return np.asarray(out).astype(bool, copy=False)


def _network_masks(n: int) -> list[int]:
    """The xor masks of the bitonic sorting network over n elements, in
    the order its steps run: for stage s, first the "flip" mask
    2^(s+1) - 1 (a block of 2^(s+1) compared against itself reversed),
    then 2^m for m = s-1 .. 0. This form sorts without ascending and
    descending halves, so every step swaps towards the same order."""
    stages = max(n - 1, 0).bit_length()
    masks = []
    for stage in range(stages):
        masks.append((2 << stage) - 1)
        masks.extend(1 << m for m in range(stage - 1, -1, -1))
    return masks


def _sort_permutation(ev, comp: HloComputation, keys: list[np.ndarray],
                      stable: bool) -> np.ndarray:
    """The order XLA:GPU's sort gives the rows of `keys` (arrays of shape
    [B, n], sorted along the last axis) under the comparator `comp`, as
    an index array of shape [B, n].

    It runs the bitonic network the GPU sort runs: each step compares
    every pair (i, j = i ^ mask) with i < j < n and swaps it when the
    element at j goes first, i.e. comp(x[j], x[i]) (pairs with j past the
    end are skipped, as if padded with elements that sort last). A
    network only ever swaps, so the result is a permutation for any
    comparator, including ones that are no strict weak order (an LT
    compare of keys with NaNs): then the order is the network's, the
    same the compiled sort gives. For a strict weak order it is sorted.

    `stable`: as XLA's StableSortExpander, elements for which comp gives
    the same answer both ways round (equal under a strict weak order) are
    ordered by their original index, which makes the sort stable.
    Without it equal elements end up in the network's order, one of the
    orders XLA allows for is_stable=false.

    Every step is one batched comparator evaluation (two when stable)
    over all rows and the step's pairs (about n/2): ceil(log2 n) *
    (ceil(log2 n) + 1) / 2 steps."""
    rows, n = keys[0].shape
    perm = np.broadcast_to(np.arange(n, dtype=np.int64), (rows, n)).copy()
    if n <= 1 or rows == 0:
        return perm
    current = [np.array(k, copy=True) for k in keys]
    position = np.arange(n, dtype=np.int64)
    for mask in _network_masks(n):
        partner = position ^ mask
        lower = (position < partner) & (partner < n)
        i, j = position[lower], partner[lower]
        at_i = [c[:, i] for c in current]
        at_j = [c[:, j] for c in current]
        # The element at j goes first: swap.
        swap = _comparator_less(ev, comp, at_j, at_i)
        if stable:
            backwards = _comparator_less(ev, comp, at_i, at_j)
            swap = np.where(swap == backwards, perm[:, j] < perm[:, i], swap)
        for arr, (xi, xj) in zip(current + [perm],
                                 list(zip(at_i, at_j)) + [(perm[:, i], perm[:, j])]):
            arr[:, i] = np.where(swap, xj, xi)
            arr[:, j] = np.where(swap, xi, xj)
    return perm


def _sort_along(ev, comp: HloComputation, arrays: list[np.ndarray],
                dim: int, stable: bool) -> list[np.ndarray]:
    """`arrays` (one shape) sorted along `dim` by the comparator."""
    moved = [np.moveaxis(a, dim, -1) for a in arrays]
    lead = moved[0].shape[:-1]
    n = moved[0].shape[-1]
    rows = [m.reshape(-1, n) for m in moved]
    perm = _sort_permutation(ev, comp, rows, stable)
    return [np.moveaxis(np.take_along_axis(r, perm, axis=1)
                        .reshape(lead + (n,)), -1, dim) for r in rows]


def _h_sort(ev, inst, ops, batch):
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, HloComputation):
        raise HloError("sort needs to_apply=<comparator>")
    arrays = [np.asarray(o) for o in ops]
    if not arrays:
        raise HloError("sort needs at least one operand")
    rank = arrays[0].ndim
    dims = inst.attrs.get("dimensions", ())
    if not isinstance(dims, tuple) or len(dims) != 1 or \
            not 0 <= dims[0] < max(rank, 1):
        raise HloError(f"sort needs dimensions={{d}} with 0 <= d < {rank}")
    if any(a.shape != arrays[0].shape for a in arrays):
        raise HloError("sort operands differ in shape")
    if len(comp.parameters) != 2 * len(arrays):
        raise HloError(f"the comparator '{comp.name}' takes "
                       f"{len(comp.parameters)} parameters; {len(arrays)} "
                       f"operands need {2 * len(arrays)}")
    if rank == 0 or arrays[0].size == 0:
        out = [a.copy() for a in arrays]
    else:
        stable = inst.attrs.get("is_stable", False)
        stable = stable is True or str(stable).lower() == "true"
        out = _sort_along(ev, comp, arrays, dims[0], stable)
    return tuple(out) if inst.shape.is_tuple else out[0]


def _order_key(x: np.ndarray, etype: str) -> np.ndarray:
    """int64 keys ordering values of `etype` as XLA's TopK does (floats by
    IEEE totalOrder, -NaN first, NaN last)."""
    if is_float(etype):
        return total_order_key(x, etype)
    if etype == "pred":
        return np.asarray(x).astype(np.int64)
    if etype == "u64":  # order-preserving map of uint64 onto int64
        return (np.asarray(x).astype(np.uint64) ^ np.uint64(1 << 63)) \
            .view(np.int64)
    if is_int(etype):
        return up(x, etype).astype(np.int64)
    raise HloError(f"top-k of {etype} values is not supported")


def _topk(x: np.ndarray, etype: str, k: int, largest: bool,
          index_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    n = x.shape[-1] if x.ndim else 0
    if x.ndim == 0 or not 0 <= k <= n:
        raise HloError(f"top-k needs 0 <= k <= the last dimension; k={k}, "
                       f"operand shape {list(x.shape)}")
    key = _order_key(x, etype)
    # Descending keys via bitwise not (no overflow); ties: lower index first.
    order = np.argsort(~key if largest else key, axis=-1, kind="stable")
    order = order[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(index_dtype)


def _h_topk(ev, inst, ops, batch):
    k = inst.attrs.get("k")
    k = int(k) if isinstance(k, (int, str)) and str(k).lstrip("-").isdigit() \
        else None
    leaves = inst.shape.leaves()
    if k is None or len(leaves) != 2:
        raise HloError("topk needs k=<int> and a (values, indices) result")
    largest = inst.attrs.get("largest", True)
    if isinstance(largest, str):
        largest = largest == "true"
    values, indices = _topk(np.asarray(ops[0]), etype_of(inst, 0), k,
                            bool(largest), leaves[1].dtype)
    return values, indices


def custom_topk(ev, inst, ops) -> Value:
    """XLA:CPU's "TopK" custom call: (values, s32 indices) of the k first
    elements along the last dimension under the comparator computation
    (called with value and index pairs, or values alone: see hlo.topk)."""
    comps = inst.attrs.get("called_computations") or []
    leaves = inst.shape.leaves()
    if len(ops) != 1 or len(comps) != 1 or len(leaves) != 2:
        raise HloError("the TopK custom call takes one operand, one "
                       "comparator computation and returns (values, "
                       "indices)")
    x = np.asarray(ops[0])
    k = leaves[0].dims[-1] if leaves[0].dims else 0
    if x.ndim == 0 or k > x.shape[-1]:
        raise HloError(f"TopK: k={k} exceeds the last dimension of "
                       f"{list(x.shape)}")
    iota = np.broadcast_to(np.arange(x.shape[-1], dtype=leaves[1].dtype),
                           x.shape)
    # Ties: lower index first (XLA's TopK is stable).
    from ..topk import value_index_comparator   # also over values alone
    values, indices = _sort_along(ev, value_index_comparator(comps[0]),
                                  [x, np.asarray(iota)],
                                  x.ndim - 1, stable=True)
    return values[..., :k].copy(), indices[..., :k].copy()


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "sort": _h_sort,
    "topk": _h_topk,
}
