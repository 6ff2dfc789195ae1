"""Builders for every xla_gpu op, generated from dialect/XlaGpuOps.td by
`mlir-tblgen -gen-python-op-bindings`, plus helpers for ops with regions.

    from xla_gpu.dialects import xla_gpu
    xla_gpu.build_apply_indexing(map_attr, dims, symbols)   # results inferred
    loop = xla_gpu.build_loop(map_attr, dims, inits)        # body block made
"""

from __future__ import annotations

from typing import Sequence

from mlir import ir as _ir

from .. import ir as _xla_ir  # loads libXlaGpu.so and registers the passes
from ._xla_gpu_ops_gen import *  # noqa: F401,F403
from ._xla_gpu_ops_gen import ApplyIndexingOp, LoopOp


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
