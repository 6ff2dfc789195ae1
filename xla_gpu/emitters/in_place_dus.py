"""The in-place dynamic-update-slice emitter: the output buffer is the
operand's buffer (the entry arguments share `xla.slice_index`; the runtime
passes one pointer), so the kernel only writes the update window, one
thread per update element. A root may be a bitcast of the
dynamic-update-slice that keeps its elements (a reshape between row-major
shapes; `xla_gpu.hlo.in_place` says which fusions this emitter and buffer
sharing treat as in place): the window's elements are then written at the
bitcast's positions."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from ..analysis.indexing import delinearize, dim, indexing_map, linearize
from ..dialects import xla_gpu
from ..hlo.in_place import in_place_parameter, in_place_update
from ..hlo.shape import Shape
from ..ir import IndexingMap
from .base import KernelEmitter
from .loop_config import loop_config, thread_to_output_map

__all__ = ["InPlaceDynamicUpdateSliceEmitter"]


class InPlaceDynamicUpdateSliceEmitter(KernelEmitter):
    name = "in_place_dynamic_update_slice"

    def __init__(self, fusion):
        super().__init__(fusion)
        # The analysis chose this emitter by `hlo.in_place`'s rule, the one
        # buffer sharing follows: each root writes over a fusion parameter.
        self.updates = [in_place_update(root) for root in fusion.roots]
        for root, update in zip(fusion.roots, self.updates):
            if update is None or update.opcode != "dynamic-update-slice":
                raise root.error("internal: in-place root is not a dynamic-update-slice "
                                 "written over a fusion parameter")
        # Roots that bitcast their update: the map from the DUS index to theirs.
        self._bitcasts = {k: (dus.shape, root.shape)
                          for k, (root, dus) in enumerate(zip(fusion.roots, self.updates))
                          if root is not dus}
        self.update_dims = list(self.updates[0].operands[1].shape.dims)
        self.config = loop_config(self.update_dims, fusion.computation.instructions,
                                  [s.element_type for s in fusion.output_shapes],
                                  fusion.device)
        for k, root in enumerate(fusion.roots):
            self.aliases[k] = in_place_parameter(root).parameter_number
        # Updates and start indices root subgraphs; the updates are written here.
        self._read_ids = {id(o) for r in self.updates for o in r.operands[1:]}
        self._update_ids = {id(r) for r in self.updates}
        # The chains of bitcasts from the roots down to the updates.
        for root, update in zip(fusion.roots, self.updates):
            while root is not update:
                self._update_ids.add(id(root))
                root = root.operands[0]

    def root_groups(self):
        return []

    def is_subgraph_root(self, inst) -> bool:
        return id(inst) in self._read_ids

    def is_excluded(self, inst) -> bool:
        return id(inst) in self._update_ids

    def emit_entry(self, params, outputs, thread_id, block_id):
        attr = self.index_map(thread_to_output_map(self.config, self.update_dims))
        loop = xla_gpu.build_loop(attr, [thread_id, block_id], list(outputs))
        block = loop.region.blocks[0]
        rank = len(self.update_dims)
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            indices = args[1:1 + rank]
            iters = args[1 + rank:]
            emitter = self.function_emitter(params, lambda i: False)
            written = []
            for k, (root, it) in enumerate(zip(self.updates, iters)):
                operand, update = root.operands[:2]
                out_index = []
                for d, (start, size) in enumerate(zip(root.operands[2:], update.shape.dims)):
                    value = emitter.start_index(start, operand.shape.dims[d] - size)
                    out_index.append(arith.addi(indices[d], value))
                value = emitter.emit1(update, indices)
                if k in self._bitcasts:
                    out_index = self.maps.apply(_bitcast_map(*self._bitcasts[k]), out_index)
                written.append(tensor.insert(value, it, out_index))
            xla_gpu.YieldOp(written)
        return list(loop.results)


def _bitcast_map(source: Shape, target: Shape) -> IndexingMap:
    """`(source index) -> (target index)` of the element at the same place
    in memory (a bitcast keeps the bytes: the physical linear index)."""
    src_order = list(reversed(source.minor_to_major))     # major to minor
    dst_order = list(reversed(target.minor_to_major))
    physical = [dim(d) for d in src_order]
    linear = linearize(physical, [source.dims[d] for d in src_order])
    target_physical = delinearize(linear, [target.dims[d] for d in dst_order])
    results = [None] * target.rank
    for position, d in enumerate(dst_order):
        results[d] = target_physical[position]
    return indexing_map([(f"d{i}", size) for i, size in enumerate(source.dims)], [],
                        results)
