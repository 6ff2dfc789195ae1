"""The loop emitter: an `xla_gpu.loop` over the
output in linear order, each iteration calling the roots' subgraph and
inserting the results.

Outputs of several shapes (an ENTRY of plain ops taken as one fusion) get
one loop per shape under the launch of the largest: each thread covers the
same linear positions of every output that has them."""

from __future__ import annotations

from dataclasses import replace
from math import prod

from mlir import ir
from mlir.dialects import tensor

from ..dialects import xla_gpu
from .base import KernelEmitter
from .loop_config import loop_config, thread_to_output_map

__all__ = ["LoopEmitter"]


class LoopEmitter(KernelEmitter):
    name = "loop"

    def __init__(self, fusion):
        super().__init__(fusion)
        # Roots grouped by shape, in output order; outputs index into leaves.
        self.groups: dict[tuple[int, ...], list] = {}
        for root in dict.fromkeys(fusion.roots):
            dims = tuple(root.shape.leaves()[0].dims)
            self.groups.setdefault(dims, []).append(root)
        largest = max(self.groups, key=prod)
        self.config = loop_config(list(largest), fusion.computation.instructions,
                                  [s.element_type for s in fusion.output_shapes],
                                  fusion.device,
                                  split_grid=not fusion.one_dimensional_grid)

    def root_groups(self):
        return list(self.groups.values())

    def emit_entry(self, params, outputs, thread_id, block_id):
        # Output k belongs to root fusion.roots[...]; find each output's slot.
        slots = []
        for root in self.fusion.roots:
            for leaf in range(len(root.shape.leaves())):
                slots.append((root, leaf))
        results = list(outputs)
        group_of = {id(r): dims for dims, roots in self.groups.items() for r in roots}
        slots_of: dict[tuple[int, ...], list[int]] = {dims: [] for dims in self.groups}
        for k, (root, _) in enumerate(slots):
            slots_of[group_of[id(root)]].append(k)
        for dims, roots in self.groups.items():
            config = replace(self.config, num_elements=prod(dims))
            attr = self.index_map(thread_to_output_map(config, list(dims)))
            mine = slots_of[dims]
            ids = [thread_id, block_id] + ([self.block_id_y] if self.block_id_y is not None else [])
            loop = xla_gpu.build_loop(attr, ids, [results[k] for k in mine])
            block = loop.region.blocks[0]
            rank = len(dims)
            with ir.InsertionPoint(block), self.calls_shared():
                args = list(block.arguments)
                indices = args[1:1 + rank]
                iters = args[1 + rank:]
                values = {}
                for root in roots:
                    values[id(root)] = self.call_subgraph(root, params, indices)
                inserted = [tensor.insert(values[id(slots[k][0])][slots[k][1]], it, indices)
                            for k, it in zip(mine, iters)]
                xla_gpu.YieldOp(inserted)
            for k, r in zip(mine, loop.results):
                results[k] = r
        return results
