"""The input-slices emitter: every root slices one input shape (stride 1);
one loop over that input, each element written to every slice that
contains it."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, tensor

from ..dialects import xla_gpu
from .base import KernelEmitter
from .loop_config import loop_config, thread_to_output_map

__all__ = ["InputSlicesEmitter"]


class InputSlicesEmitter(KernelEmitter):
    name = "input_slices"

    def __init__(self, fusion):
        super().__init__(fusion)
        self.slices = list(fusion.roots)
        self.input_dims = list(self.slices[0].operands[0].shape.dims)
        self._input_ids = {id(s.operands[0]) for s in self.slices}
        self._slice_ids = {id(s) for s in self.slices}
        self.config = loop_config(self.input_dims, fusion.computation.instructions,
                                  [s.element_type for s in fusion.output_shapes],
                                  fusion.device)

    def root_groups(self):
        return []

    def is_subgraph_root(self, inst) -> bool:
        return id(inst) in self._input_ids

    def is_excluded(self, inst) -> bool:
        return id(inst) in self._slice_ids

    def emit_entry(self, params, outputs, thread_id, block_id):
        attr = self.index_map(thread_to_output_map(self.config, self.input_dims))
        loop = xla_gpu.build_loop(attr, [thread_id, block_id], list(outputs))
        block = loop.region.blocks[0]
        rank = len(self.input_dims)
        index = ir.IndexType.get()
        with ir.InsertionPoint(block):
            args = list(block.arguments)
            indices = args[1:1 + rank]
            iters = list(args[1 + rank:])
            emitter = self.function_emitter(params, lambda i: False)
            values = {}
            for s in self.slices:
                src = s.operands[0]
                if id(src) not in values:
                    values[id(src)] = emitter.emit1(src, indices)
            for k, s in enumerate(self.slices):
                cond, local = None, []
                for d, (start, limit, _) in zip(indices, s.attrs["slice"]):
                    checks = []
                    if start > 0:
                        checks.append(arith.cmpi(arith.CmpIPredicate.uge, d,
                                                 arith.constant(index, start)))
                    if limit < self.input_dims[len(local)]:
                        checks.append(arith.cmpi(arith.CmpIPredicate.ult, d,
                                                 arith.constant(index, limit)))
                    for c in checks:
                        cond = c if cond is None else arith.andi(cond, c)
                    local.append(arith.subi(d, arith.constant(index, start)) if start else d)
                value = values[id(s.operands[0])]
                if cond is None:
                    iters[k] = tensor.insert(value, iters[k], local)
                    continue
                if_op = scf.IfOp(cond, [iters[k].type], has_else=True)
                with ir.InsertionPoint(if_op.then_block):
                    scf.YieldOp([tensor.insert(value, iters[k], local)])
                with ir.InsertionPoint(if_op.else_block):
                    scf.YieldOp([iters[k]])
                iters[k] = if_op.results[0]
            xla_gpu.YieldOp(iters)
        return list(loop.results)
