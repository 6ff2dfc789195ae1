"""Ops that move or pick elements without computing on them: constants,
tuples, broadcast, reshape, bitcast, transpose, slices, pads,
concatenates, reverse, iota, gather and scatter."""

from __future__ import annotations

import math
from typing import Any, Callable

import ml_dtypes
import numpy as np

from ..module import HloComputation, HloError
from ..shape import bit_width
from .dtypes import Value, etype_of, is_int, up, wrap_int
from .elementwise import bitcast_convert, convert
from .reductions import combine_at, simple_binary, ufunc_for


def _h_constant(ev, inst, ops, batch):
    if inst.literal is None:
        raise HloError("the constant's value was elided from the text "
                       "('{...}')")
    return inst.literal


def _h_tuple(ev, inst, ops, batch):
    return tuple(ops)


def _h_gte(ev, inst, ops, batch):
    return ops[0][inst.attrs["index"]]


def _h_broadcast(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    if batch is not None:
        return x
    dims = tuple(inst.attrs.get("dimensions", ()))
    out_dims = inst.shape.dims
    if len(dims) != x.ndim:
        raise HloError(f"broadcast dimensions {list(dims)} do not match the "
                       f"rank-{x.ndim} operand")
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order)
    shape = [1] * len(out_dims)
    for i, d in enumerate(sorted(dims)):
        if x.shape[i] != out_dims[d]:
            raise HloError(f"operand dimension {order[i]} ({x.shape[i]}) does "
                           f"not match output dimension {d} ({out_dims[d]})")
        shape[d] = x.shape[i]
    return np.broadcast_to(x.reshape(shape), out_dims)


def _h_reshape(ev, inst, ops, batch):
    if batch is not None:
        return np.asarray(ops[0])
    return np.reshape(ops[0], inst.shape.dims)


def _h_bitcast(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    src_shape = inst.operands[0].shape
    src, dst = src_shape.element_type, inst.shape.element_type
    if batch is not None:  # scalars: only the element type can change
        return x if src == dst else bitcast_convert(x, src, dst, x.shape)
    buf = src_shape.physical_from_logical(x).reshape(-1)   # memory order
    if src != dst:
        if src_shape.num_elements * bit_width(src) != \
                inst.shape.num_elements * bit_width(dst):
            raise HloError(f"bitcast from {src_shape} to {inst.shape} "
                           "changes the byte size")
        buf = bitcast_convert(buf, src, dst, (inst.shape.num_elements,))
    elif buf.size != inst.shape.num_elements:
        raise HloError(f"bitcast from {src_shape} to {inst.shape} changes "
                       "the element count")
    return inst.shape.logical_from_physical(buf.reshape(inst.shape.physical_shape().dims))


def _h_transpose(ev, inst, ops, batch):
    if batch is not None:
        return np.asarray(ops[0])
    return np.transpose(ops[0], inst.attrs["dimensions"])


def _h_copy_like(ev, inst, ops, batch):
    return ops[0]


def _h_slice(ev, inst, ops, batch):
    spec = inst.attrs.get("slice")
    x = np.asarray(ops[0])
    if not isinstance(spec, list) or len(spec) != x.ndim:
        raise HloError("slice needs one [start:limit:stride] per dimension")
    for (start, limit, stride), n in zip(spec, x.shape):
        if not 0 <= start <= limit <= n or stride < 1:
            raise HloError(f"slice [{start}:{limit}:{stride}] is out of "
                           f"bounds for a dimension of size {n}")
    return x[tuple(slice(s, l, st) for s, l, st in spec)]


def _index_scalar(v: Value) -> int:
    arr = np.asarray(v)
    if arr.dtype.kind in "biu" or arr.dtype in (ml_dtypes.int4, ml_dtypes.int2,
                                                 ml_dtypes.uint4,
                                                 ml_dtypes.uint2):
        return int(arr.astype(np.int64) if arr.dtype.kind != "u" else arr)
    raise HloError(f"start indices must be integers, got {arr.dtype}")


def _start_indices(ops: list, first: int, rank: int) -> list[int]:
    rest = ops[first:]
    if len(rest) == 1 and np.ndim(rest[0]) == 1:  # one vector of starts
        vec = np.asarray(rest[0])
        return [_index_scalar(vec[i]) for i in range(vec.shape[0])]
    return [_index_scalar(v) for v in rest]


def _h_dynamic_slice(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    starts = _start_indices(ops, 1, x.ndim)
    sizes = tuple(inst.attrs.get("dynamic_slice_sizes", inst.shape.dims))
    if len(starts) != x.ndim or len(sizes) != x.ndim:
        raise HloError("dynamic-slice needs one start index and size per "
                       "dimension")
    index = []
    for s, size, n in zip(starts, sizes, x.shape):
        if size > n:
            raise HloError(f"slice size {size} exceeds the dimension {n}")
        s = min(max(s, 0), n - size)
        index.append(slice(s, s + size))
    return x[tuple(index)]


def _h_dynamic_update_slice(ev, inst, ops, batch):
    x = np.array(ops[0], copy=True)
    update = np.asarray(ops[1])
    starts = _start_indices(ops, 2, x.ndim)
    if len(starts) != x.ndim or update.ndim != x.ndim:
        raise HloError("dynamic-update-slice needs one start index per "
                       "dimension")
    index = []
    for s, size, n in zip(starts, update.shape, x.shape):
        if size > n:
            raise HloError(f"update size {size} exceeds the dimension {n}")
        s = min(max(s, 0), n - size)
        index.append(slice(s, s + size))
    x[tuple(index)] = update
    return x


def _h_pad(ev, inst, ops, batch):
    x = np.asarray(ops[0])
    value = np.asarray(ops[1])
    config = inst.attrs.get("padding")
    if not isinstance(config, list) or len(config) != x.ndim:
        raise HloError("pad needs one lo_hi_interior entry per dimension")
    grown = []
    for (lo, hi, interior), n in zip(config, x.shape):
        core = n + max(n - 1, 0) * interior
        grown.append(max(lo, 0) + core + max(hi, 0))
    out = np.full(grown, value, dtype=x.dtype)
    place = tuple(slice(max(lo, 0), max(lo, 0) + (n - 1) * (interior + 1) + 1
                        if n else max(lo, 0), interior + 1)
                  for (lo, hi, interior), n in zip(config, x.shape))
    out[place] = x
    crop = tuple(slice(max(-lo, 0), size - max(-hi, 0))
                 for (lo, hi, _), size in zip(config, grown))
    out = out[crop]
    if out.shape != inst.shape.dims:
        raise HloError(f"padding {config} of {x.shape} gives {out.shape}, "
                       f"not {inst.shape}")
    return out


def _h_concatenate(ev, inst, ops, batch):
    dims = inst.attrs.get("dimensions")
    if not isinstance(dims, tuple) or len(dims) != 1:
        raise HloError("concatenate needs dimensions={d}")
    return np.concatenate([np.asarray(o) for o in ops], axis=dims[0])


def _h_reverse(ev, inst, ops, batch):
    dims = tuple(inst.attrs.get("dimensions", ()))
    x = np.asarray(ops[0])
    return np.flip(x, axis=dims) if dims else x


def _h_iota(ev, inst, ops, batch):
    dims = inst.shape.dims
    d = inst.attrs.get("iota_dimension")
    if not isinstance(d, int) or not 0 <= d < len(dims):
        raise HloError(f"bad iota_dimension {d!r} for {inst.shape}")
    etype = inst.shape.element_type
    line = np.arange(dims[d], dtype=np.int64)
    values = convert(line, "s64", etype) if etype != "s64" else line
    shape = [1] * len(dims)
    shape[d] = dims[d]
    return np.broadcast_to(values.reshape(shape), dims)


# ---- gather / scatter


def _as_index_array(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "u" and x.dtype.itemsize == 8:
        return np.minimum(x, np.uint64(2 ** 62)).astype(np.int64)
    if x.dtype.kind not in "biu" and x.dtype not in (
            ml_dtypes.int4, ml_dtypes.int2, ml_dtypes.uint4, ml_dtypes.uint2):
        raise HloError(f"indices must be integers, got {x.dtype}")
    return x.astype(np.int64)


def _index_vectors(indices: np.ndarray, ivd: int) -> tuple[np.ndarray, int]:
    """Indices with the index vector dimension moved last (added when
    ivd == rank); returns (array, original rank incl. an added dim)."""
    idx = _as_index_array(indices)
    if ivd == idx.ndim:
        idx = idx[..., None]
    if not 0 <= ivd < idx.ndim:
        raise HloError(f"bad index_vector_dim {ivd}")
    return np.moveaxis(idx, ivd, -1), idx.ndim


def _batch_position(dim: int, ivd: int) -> int:
    """Position of indices dimension `dim` among the non-index-vector dims."""
    return dim - 1 if dim > ivd else dim


def _h_gather(ev, inst, ops, batch):
    operand = np.asarray(ops[0])
    a = inst.attrs
    offset_dims = tuple(a.get("offset_dims", ()))
    collapsed = tuple(a.get("collapsed_slice_dims", ()))
    start_map = tuple(a.get("start_index_map", ()))
    op_batch = tuple(a.get("operand_batching_dims", ()))
    idx_batch = tuple(a.get("start_indices_batching_dims", ()))
    ivd = a.get("index_vector_dim")
    slice_sizes = tuple(a.get("slice_sizes", ()))
    if not isinstance(ivd, int):
        raise HloError("gather needs index_vector_dim")
    rank = operand.ndim
    if len(slice_sizes) != rank:
        raise HloError("gather needs one slice size per operand dimension")
    idx, _ = _index_vectors(ops[1], ivd)
    if idx.shape[-1] != len(start_map):
        raise HloError("start_index_map does not match the index vector size")
    out_dims = inst.shape.dims
    out_rank = len(out_dims)
    batch_dims = [d for d in range(out_rank) if d not in offset_dims]
    if len(batch_dims) != idx.ndim - 1:
        raise HloError("output batch dimensions do not match the indices")
    grid = np.indices(out_dims, dtype=np.int64, sparse=True)
    grid = [np.broadcast_to(g, out_dims) for g in grid]
    batch_coords = tuple(grid[d] for d in batch_dims)
    vectors = idx[batch_coords] if batch_dims else \
        np.broadcast_to(idx, out_dims + idx.shape[-1:])
    starts: list[Any] = [np.zeros(out_dims, np.int64) for _ in range(rank)]
    for k, d in enumerate(start_map):
        starts[d] = vectors[..., k]
    for od, idd in zip(op_batch, idx_batch):
        starts[od] = batch_coords[_batch_position(idd, ivd)]
    offset_operand_dims = [d for d in range(rank)
                           if d not in collapsed and d not in op_batch]
    if len(offset_operand_dims) != len(offset_dims):
        raise HloError("offset_dims do not match the non-collapsed operand "
                       "dimensions")
    full = []
    for d in range(rank):
        s = np.clip(starts[d], 0, max(operand.shape[d] - slice_sizes[d], 0))
        if d in offset_operand_dims:
            s = s + grid[offset_dims[offset_operand_dims.index(d)]]
        full.append(s)
    return operand[tuple(full)]


def _h_scatter(ev, inst, ops, batch):
    n = (len(ops) - 1) // 2
    operands = [np.array(o, copy=True) for o in ops[:n]]
    updates = [np.asarray(u) for u in ops[n + 1:]]
    a = inst.attrs
    uwd = tuple(a.get("update_window_dims", ()))
    iwd = tuple(a.get("inserted_window_dims", ()))
    sd2od = tuple(a.get("scatter_dims_to_operand_dims", ()))
    ibd = tuple(a.get("input_batching_dims", ()))
    sibd = tuple(a.get("scatter_indices_batching_dims", ()))
    ivd = a.get("index_vector_dim")
    comp = a.get("to_apply")
    if not isinstance(ivd, int) or not isinstance(comp, HloComputation):
        raise HloError("scatter needs index_vector_dim and to_apply")
    op_shape = operands[0].shape
    rank = len(op_shape)
    idx, _ = _index_vectors(ops[n], ivd)
    if idx.shape[-1] != len(sd2od):
        raise HloError("scatter_dims_to_operand_dims does not match the "
                       "index vector size")
    upd_shape = updates[0].shape
    scatter_dims = [d for d in range(len(upd_shape)) if d not in uwd]
    scatter_shape = tuple(upd_shape[d] for d in scatter_dims)
    if scatter_shape != idx.shape[:-1]:
        raise HloError(f"update scatter dimensions {scatter_shape} do not "
                       f"match the indices {idx.shape[:-1]}")
    window_operand_dims = [d for d in range(rank)
                           if d not in iwd and d not in ibd]
    if len(window_operand_dims) != len(uwd):
        raise HloError("update_window_dims do not match the operand")
    window_sizes = [1] * rank
    for k, d in enumerate(window_operand_dims):
        window_sizes[d] = upd_shape[uwd[k]]
    count = math.prod(scatter_shape)
    wcount = math.prod(upd_shape[d] for d in uwd)
    if count == 0 or wcount == 0:
        return tuple(operands) if inst.shape.is_tuple else operands[0]
    vec = idx.reshape(count, len(sd2od))
    starts = np.zeros((count, rank), np.int64)
    for k, d in enumerate(sd2od):
        starts[:, d] = vec[:, k]
    if ibd:
        coords = np.unravel_index(np.arange(count), scatter_shape) \
            if scatter_shape else ()
        for od, sd in zip(ibd, sibd):
            starts[:, od] = coords[_batch_position(sd, ivd)]
    sizes = np.array(window_sizes, np.int64)
    valid = np.all((starts >= 0) & (starts + sizes <= np.array(op_shape)),
                   axis=1)
    # Window element offsets, in row-major order of the update window dims.
    wshape = tuple(upd_shape[d] for d in uwd)
    woff = np.zeros((wcount, rank), np.int64)
    wcoords = np.unravel_index(np.arange(wcount), wshape) if wshape else ()
    for k, d in enumerate(window_operand_dims):
        woff[:, d] = wcoords[k]
    full = starts[valid][:, None, :] + woff[None, :, :]
    linear = np.ravel_multi_index(tuple(full.reshape(-1, rank).T), op_shape) \
        if rank else np.zeros(full.shape[0] * wcount, np.int64)
    upd_vals = [np.transpose(u, scatter_dims + list(uwd))
                .reshape(count, wcount)[valid].reshape(-1) for u in updates]
    flats = [o.reshape(-1) for o in operands]
    etype = etype_of(inst, 0)
    simple = simple_binary(comp, etype) if n == 1 else None
    if simple == "assign":
        flats[0][linear] = upd_vals[0]
    elif simple is not None and (flats[0].dtype.kind in "biuc" or
                                 flats[0].dtype in (np.float32, np.float64)):
        ufunc = ufunc_for(simple, etype)
        if is_int(etype) and bit_width(etype) < 8:
            wide = up(flats[0], etype)
            ufunc.at(wide, linear, up(upd_vals[0], etype))
            flats[0][:] = wrap_int(wide, etype)
        else:
            ufunc.at(flats[0], linear, upd_vals[0])
    else:
        combine_at(ev, comp, flats, linear, upd_vals)
    return tuple(operands) if inst.shape.is_tuple else operands[0]


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "constant": _h_constant,
    "tuple": _h_tuple,
    "get-tuple-element": _h_gte,
    "broadcast": _h_broadcast,
    "reshape": _h_reshape,
    "bitcast": _h_bitcast,
    "transpose": _h_transpose,
    "optimization-barrier": _h_copy_like,
    "slice": _h_slice,
    "dynamic-slice": _h_dynamic_slice,
    "dynamic-update-slice": _h_dynamic_update_slice,
    "pad": _h_pad,
    "concatenate": _h_concatenate,
    "reverse": _h_reverse,
    "iota": _h_iota,
    "gather": _h_gather,
    "scatter": _h_scatter,
    "add-dependency": _h_copy_like,
    "domain": _h_copy_like,
    "opt-barrier": _h_copy_like,
}
