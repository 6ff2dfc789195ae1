"""The concatenate emitter: one `xla_gpu.loop` per operand, over the
largest operand's shape, so each operand is read coalesced and written at
its offset; an elementwise epilogue (e.g. a convert of the concatenation)
runs on the written values."""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from ..analysis.fusion import epilogue_chain_ok
from ..analysis.indexing import ELEMENTWISE_OPCODES, delinearize, map_text
from ..dialects import xla_gpu
from ..ir import IndexingMap
from .base import KernelEmitter
from .loop_config import linear_thread_expr, loop_config

__all__ = ["ConcatenateEmitter", "is_elementwise_epilogue"]


def is_elementwise_epilogue(root, hero) -> bool:
    """Whether every instruction from `hero` up to `root` is elementwise on
    the hero's shape (so the epilogue runs at the hero's index)."""
    return epilogue_chain_ok(root, hero, lambda i: i.opcode in ELEMENTWISE_OPCODES
                             and i.shape.dims == hero.shape.dims)


class ConcatenateEmitter(KernelEmitter):
    name = "concatenate"

    def __init__(self, fusion):
        super().__init__(fusion)
        self.root = fusion.roots[0]
        self.hero = fusion.heroes[0]
        if not is_elementwise_epilogue(self.root, self.hero):
            raise self.root.error("internal: concatenate epilogue is not elementwise")
        self.axis = self.hero.attrs["dimensions"][0]
        self.largest = max((o.shape.dims for o in self.hero.operands),
                           key=lambda d: d[self.axis])
        self.config = loop_config(self.largest, fusion.computation.instructions,
                                  [s.element_type for s in fusion.output_shapes])

    def root_groups(self):
        return [] if self.root is self.hero else [[self.root]]

    def is_subgraph_root(self, inst) -> bool:
        return any(inst is o for o in self.hero.operands)

    def is_excluded(self, inst) -> bool:
        return inst is self.hero

    def prepare_subgraphs(self) -> None:
        if self.root is not self.hero:
            self.partitioned.subgraph_of(self.root).injected = [self.hero]

    def _operand_map(self, size: int) -> str:
        t, u, b = self.config.threads, self.config.unroll, self.config.blocks
        linear = linear_thread_expr(t, b, u)
        results = delinearize(linear, self.largest)
        constraints = [(linear, 0, self.config.num_elements - 1)]
        if size < self.largest[self.axis]:
            constraints.append((results[self.axis], 0, size - 1))
        text = map_text([("th_x", t), ("bl_x", b)], [("vector_index", u)], results,
                        constraints)
        return str(IndexingMap.parse(text).simplified())

    def emit_entry(self, params, outputs, thread_id, block_id):
        result = outputs[0]
        offset = 0
        rank = len(self.largest)
        for operand in self.hero.operands:
            size = operand.shape.dims[self.axis]
            if size == 0:
                continue
            attr = self.index_map(self._operand_map(size))
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
