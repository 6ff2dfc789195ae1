"""The in-place dynamic-update-slice emitter: the output buffer is the
operand's buffer (the entry arguments share `xla.slice_index`; the runtime
passes one pointer), so the kernel only writes the update window, one
thread per update element."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from ..dialects import xla_gpu
from .base import KernelEmitter
from .loop_config import loop_config, thread_to_output_map

__all__ = ["InPlaceDynamicUpdateSliceEmitter"]


class InPlaceDynamicUpdateSliceEmitter(KernelEmitter):
    name = "in_place_dynamic_update_slice"

    def __init__(self, fusion):
        super().__init__(fusion)
        self.updates = list(fusion.roots)
        for root in self.updates:
            if root.opcode != "dynamic-update-slice":
                raise root.error("internal: in-place root is not a dynamic-update-slice")
        self.update_dims = list(self.updates[0].operands[1].shape.dims)
        self.config = loop_config(self.update_dims, fusion.computation.instructions,
                                  [s.element_type for s in fusion.output_shapes])
        for k, root in enumerate(self.updates):
            self.aliases[k] = root.operands[0].parameter_number
        # Updates and start indices root subgraphs; the updates are written here.
        self._read_ids = {id(o) for r in self.updates for o in r.operands[1:]}
        self._update_ids = {id(r) for r in self.updates}

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
            for root, it in zip(self.updates, iters):
                operand, update = root.operands[:2]
                out_index = []
                for d, (start, size) in enumerate(zip(root.operands[2:], update.shape.dims)):
                    value = emitter.start_index(start, operand.shape.dims[d] - size)
                    out_index.append(arith.addi(indices[d], value))
                value = emitter.emit1(update, indices)
                written.append(tensor.insert(value, it, out_index))
            xla_gpu.YieldOp(written)
        return list(loop.results)
