"""Builders for every xla_gpu op, generated from dialect/XlaGpuOps.td by
`mlir-tblgen -gen-python-op-bindings`, plus helpers for ops with regions.

    from xla_gpu.dialects import xla_gpu
    xla_gpu.build_apply_indexing(map_attr, dims, symbols)   # results inferred
    loop = xla_gpu.build_loop(map_attr, dims, inits)        # body block made
    xla_gpu.build_shuffle_reduce(combiner, values, 16)      # results
    op = xla_gpu.build_atomic_rmw(tensor, indices)          # body block made

The generated classes: ApplyIndexingOp, LoopOp, YieldOp, PureCallOp,
AllocateSharedOp, SyncThreadsOp, ShuffleReduceOp(result_types, combiner,
operands, max_distance), PredicatedInsertOp(value, dest, indices, cond),
PredicatedExtractOp(src, indices, cond, fallback), AtomicRMWOp(result_type,
input, indices) (without its body block: use build_atomic_rmw).
"""

from __future__ import annotations

from typing import Sequence

from mlir import ir as _ir

from .. import ir as _xla_ir  # loads libXlaGpu.so and registers the passes
from ._xla_gpu_ops_gen import *  # noqa: F401,F403
from ._xla_gpu_ops_gen import (ApplyIndexingOp, AtomicRMWOp, LoopOp,
                               ShuffleReduceOp)


def build_apply_indexing(map_attr: _ir.Attribute, dims: Sequence[_ir.Value],
                   symbols: Sequence[_ir.Value] = ()) -> list[_ir.Value]:
    """`xla_gpu.apply_indexing #map(dims)[symbols]`: one index per result."""
    view = _xla_ir.IndexingMap.from_attr(map_attr)
    index = _ir.IndexType.get()
    op = ApplyIndexingOp([index] * len(view.affine_map.results),
                         [*dims, *symbols], map_attr)
    return list(op.results)


def build_loop(map_attr: _ir.Attribute, dims: Sequence[_ir.Value],
         inits: Sequence[_ir.Value] = ()) -> LoopOp:
    """An `xla_gpu.loop` with its body block created: the block's arguments
    are the induction variables, the map results, then the iter_args. Fill it
    and end it with `xla_gpu.YieldOp(values)`."""
    view = _xla_ir.IndexingMap.from_attr(map_attr)
    op = LoopOp([v.type for v in inits], list(dims), map_attr, list(inits))
    index = _ir.IndexType.get()
    num_index = len(view.symbols) + len(view.affine_map.results)
    op.region.blocks.append(*([index] * num_index), *[v.type for v in inits])
    return op


def build_shuffle_reduce(combiner, values: Sequence[_ir.Value],
                         max_distance: int = 16) -> list[_ir.Value]:
    """`xla_gpu.shuffle_reduce(values) to max_distance combiner=@f`: the
    butterfly over the warp's lanes. `combiner` is a func.func op, a symbol
    name or a FlatSymbolRefAttr; the results have the values' types."""
    if isinstance(combiner, str):
        combiner = _ir.FlatSymbolRefAttr.get(combiner)
    elif not isinstance(combiner, _ir.FlatSymbolRefAttr):
        combiner = _ir.FlatSymbolRefAttr.get(
            _ir.StringAttr(combiner.attributes["sym_name"]).value)
    op = ShuffleReduceOp([v.type for v in values], combiner, list(values),
                         max_distance)
    return list(op.results)


def build_atomic_rmw(tensor: _ir.Value, indices: Sequence[_ir.Value],
                     lanes: int = 1) -> AtomicRMWOp:
    """An `xla_gpu.atomic_rmw %tensor[indices]` with its body block created:
    one argument, the element's current value (with `lanes` > 1, the
    vector of that many consecutive elements of the innermost dimension).
    Fill it and end it with `xla_gpu.YieldOp([new_value])`; the op's result
    is the updated tensor."""
    op = AtomicRMWOp(tensor.type, tensor, list(indices))
    element = _ir.RankedTensorType(tensor.type).element_type
    op.regions[0].blocks.append(
        _ir.VectorType.get([lanes], element) if lanes > 1 else element)
    return op
