"""The concatenate emitter: one `xla_gpu.loop` per operand, launched for
the largest operand; each operand's loop runs over its own shape, on the
blocks that shape needs (XLA's block range per operand: `bl_x in [0, B-1]`
with B the operand's own block count), so each operand is read coalesced
and written at its offset. Every root comes from a concatenate hero (several heroes split
alike may share the loops: operand k of each) through an epilogue that
keeps the element's linear position (elementwise ops, bitcasts, reshapes):
the epilogue runs on the value read and its result is written at the
root's own index of that element."""

from __future__ import annotations

from math import gcd, prod

from mlir import ir
from mlir.dialects import arith, tensor

from ..analysis.concatenate import concatenate_refusal
from ..analysis.indexing import delinearize, dim, indexing_map, linearize
from ..dialects import xla_gpu
from ..ir import IndexingMap
from .base import KernelEmitter
from ..hlo.shape import bit_width
from .loop_config import linear_thread_expr, loop_config, thread_variables, with_unroll

__all__ = ["ConcatenateEmitter"]


class ConcatenateEmitter(KernelEmitter):
    name = "concatenate"

    def __init__(self, fusion):
        super().__init__(fusion)
        refusal = concatenate_refusal(fusion.roots, fusion.heroes)
        if refusal is not None:
            raise fusion.roots[0].error("internal: the fusion analysis chose the "
                                        f"concatenate emitter for a fusion it cannot "
                                        f"take ({refusal})")
        self.heroes = list(dict.fromkeys(fusion.heroes))
        first = self.heroes[0]
        self._hero_ids = {id(h) for h in self.heroes}
        self._operand_ids = {id(o) for h in self.heroes for o in h.operands}
        self.axis = first.attrs["dimensions"][0]
        self.largest = max((o.shape.dims for o in first.operands),
                           key=lambda d: d[self.axis])
        output_types = [s.element_type for s in fusion.output_shapes]
        config = loop_config(self.largest, fusion.computation.instructions, output_types,
                             fusion.device)
        # As XLA: the unroll factor divides every operand's size on the axis
        # (an operand one row long is not unrolled); sub-byte outputs keep
        # the factor that makes each thread write whole bytes.
        unroll = config.unroll
        for operand in first.operands:
            unroll = gcd(unroll, operand.shape.dims[self.axis])
        sub_byte = any(bit_width(t) < 8 and t != "pred" for t in output_types)
        if unroll != config.unroll and not sub_byte:
            config = with_unroll(config, unroll)
        self.config = config

    def root_groups(self):
        return [[r] for r, h in zip(self.fusion.roots, self.fusion.heroes) if r is not h]

    def is_subgraph_root(self, inst) -> bool:
        return id(inst) in self._operand_ids

    def is_excluded(self, inst) -> bool:
        return id(inst) in self._hero_ids

    def prepare_subgraphs(self) -> None:
        for root, hero in zip(self.fusion.roots, self.fusion.heroes):
            if root is not hero:
                self.partitioned.subgraph_of(root).injected = [hero]

    def _operand_map(self, size: int) -> IndexingMap:
        """The thread-to-index map of an operand `size` long on the axis:
        consecutive threads cover its own shape (the launch's threads and
        unroll), its blocks only (the others skip the loop)."""
        config = self.config
        shape = list(self.largest)
        shape[self.axis] = size
        count = prod(shape)
        per_block = config.threads * config.unroll
        blocks = -(-count // per_block)
        linear = linear_thread_expr(config.threads, blocks, config.unroll)
        results = delinearize(linear, shape)
        constraints = [(linear, 0, count - 1)] if blocks * per_block > count else []
        dims, symbols = thread_variables(config)
        dims = [dims[0], (dims[1][0], blocks)]
        return indexing_map(dims, symbols, results, constraints)

    def _position_maps(self) -> dict[int, ir.Attribute]:
        """For roots of another shape than their hero: the map from the
        hero's index to the root's index of the same element (row-major
        linear positions are kept by the epilogue)."""
        maps = {}
        for k, (root, hero) in enumerate(zip(self.fusion.roots, self.fusion.heroes)):
            src, dst = list(hero.shape.dims), list(root.shape.dims)
            if src == dst:
                continue
            linear = linearize([dim(i) for i in range(len(src))], src)
            maps[k] = self.index_map(indexing_map(
                [(f"d{i}", s) for i, s in enumerate(src)], [],
                delinearize(linear, dst) if dst else []))
        return maps

    def emit_entry(self, params, outputs, thread_id, block_id):
        results = list(outputs)
        offset = 0
        rank = len(self.largest)
        positions = self._position_maps()
        maps: dict[int, ir.Attribute] = {}   # by the operand's size on the axis
        slots = []                           # (root, hero, output slot)
        for k, (root, hero) in enumerate(zip(self.fusion.roots, self.fusion.heroes)):
            slots.append((k, root, hero))
        for j, operand0 in enumerate(self.heroes[0].operands):
            size = operand0.shape.dims[self.axis]
            if size == 0:
                continue
            if size not in maps:
                maps[size] = self.index_map(self._operand_map(size))
            loop = xla_gpu.build_loop(maps[size], [thread_id, block_id], results)
            block = loop.region.blocks[0]
            with ir.InsertionPoint(block), self.calls_shared():
                args = list(block.arguments)
                indices = args[1:1 + rank]
                iters = args[1 + rank:]
                read = {id(h): self.value_at(h.operands[j], params, indices)
                        for h in self.heroes}
                hero_index = list(indices)
                if offset:
                    hero_index[self.axis] = arith.addi(
                        indices[self.axis], arith.constant(ir.IndexType.get(), offset))
                written = list(iters)
                moved: dict[str, list] = {}     # root indices, by position map
                for k, root, hero in slots:
                    value = read[id(hero)]
                    out_index = hero_index
                    if k in positions:
                        key = str(positions[k])
                        if key not in moved:
                            moved[key] = xla_gpu.build_apply_indexing(positions[k],
                                                                      hero_index)
                        out_index = moved[key]
                    if root is not hero:
                        value = self.call_subgraph(root, params, out_index, [value])[0]
                    written[k] = tensor.insert(value, written[k], out_index)
                xla_gpu.YieldOp(written)
            results = list(loop.results)
            offset += size
        return results
