"""The concatenate emitter: one `xla_gpu.loop` per operand, over the
largest operand's shape, so each operand is read coalesced and written at
its offset; an elementwise epilogue (e.g. a convert of the concatenation)
runs on the written values."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from ..analysis.epilogue import is_elementwise_epilogue
from ..analysis.indexing import delinearize, indexing_map
from ..dialects import xla_gpu
from ..ir import IndexingMap
from .base import KernelEmitter
from .loop_config import linear_thread_expr, loop_config, thread_variables

__all__ = ["ConcatenateEmitter"]


class ConcatenateEmitter(KernelEmitter):
    name = "concatenate"

    def __init__(self, fusion):
        super().__init__(fusion)
        self.root = fusion.roots[0]
        self.hero = fusion.heroes[0]
        if not is_elementwise_epilogue(self.root, self.hero):
            raise self.root.error("internal: the fusion analysis chose the concatenate "
                                  "emitter for an epilogue that is not elementwise")
        self._operand_ids = {id(o) for o in self.hero.operands}
        self.axis = self.hero.attrs["dimensions"][0]
        self.largest = max((o.shape.dims for o in self.hero.operands),
                           key=lambda d: d[self.axis])
        self.config = loop_config(self.largest, fusion.computation.instructions,
                                  [s.element_type for s in fusion.output_shapes])

    def root_groups(self):
        return [] if self.root is self.hero else [[self.root]]

    def is_subgraph_root(self, inst) -> bool:
        return id(inst) in self._operand_ids

    def is_excluded(self, inst) -> bool:
        return inst is self.hero

    def prepare_subgraphs(self) -> None:
        if self.root is not self.hero:
            self.partitioned.subgraph_of(self.root).injected = [self.hero]

    def _operand_map(self, size: int) -> IndexingMap:
        """The thread-to-index map of an operand `size` long on the axis:
        the largest operand's shape, cut to `size` on the axis."""
        config = self.config
        linear = linear_thread_expr(config.threads, config.blocks, config.unroll)
        results = delinearize(linear, self.largest)
        constraints = [(linear, 0, config.num_elements - 1)]
        if size < self.largest[self.axis]:
            constraints.append((results[self.axis], 0, size - 1))
        dims, symbols = thread_variables(config)
        return indexing_map(dims, symbols, results, constraints)

    def emit_entry(self, params, outputs, thread_id, block_id):
        result = outputs[0]
        offset = 0
        rank = len(self.largest)
        maps: dict[int, ir.Attribute] = {}   # by the operand's size on the axis
        for operand in self.hero.operands:
            size = operand.shape.dims[self.axis]
            if size == 0:
                continue
            if size not in maps:
                maps[size] = self.index_map(self._operand_map(size))
            attr = maps[size]
            loop = xla_gpu.build_loop(attr, [thread_id, block_id], [result])
            block = loop.region.blocks[0]
            with ir.InsertionPoint(block):
                args = list(block.arguments)
                indices = args[1:1 + rank]
                value = self.value_at(operand, params, indices)
                out_indices = list(indices)
                if offset:
                    out_indices[self.axis] = arith.addi(
                        indices[self.axis], arith.constant(ir.IndexType.get(), offset))
                if self.root is not self.hero:
                    value = self.call_subgraph(self.root, params, out_indices, [value])[0]
                xla_gpu.YieldOp([tensor.insert(value, args[1 + rank], out_indices)])
            result = loop.results[0]
            offset += size
        return [result]
