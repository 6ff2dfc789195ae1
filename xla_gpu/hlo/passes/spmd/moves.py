"""Data movement along a cut dim without gathering it, as XLA's partitioner
does it:

  concatenate          the cut of the concatenated dim moved to another dim
                       (the first whose size the merged cut divides; one
                       all-to-all per operand, an uneven operand's padding
                       sliced off once its dim is whole), the operands
                       concatenated locally, the result's cut moved back
                       (one more all-to-all); with no such dim, the dim
                       made whole
  reverse              each device reverses the chunk the mirrored device
                       holds: the operand resharded to the tile assignment
                       flipped along the reversed dims (one
                       collective-permute), then a local reverse; along
                       an uneven cut, each device's chunk of the value
                       padded on the left instead (two collective-permutes
                       from the two devices holding its parts)
  dynamic-update-slice when the update lies inside one chunk along every
                       cut dim it writes (one element wide, or at constant
                       offsets inside one chunk): each device writes the
                       update at its clamped offset made local, where the
                       offset falls in its chunk, and keeps its chunk
                       elsewhere (no collective)

A base of the partitioner (with Emitter): each method returns the result
and its sharding, or None where the case is not one of these (the caller
then makes the touched dims whole).
"""

from __future__ import annotations

import numpy as np

from ...module import HloInstruction
from ...shape import Shape
from .placement import device_coords, groups_along, replicate_dims
from .sharding import HloSharding

__all__ = ["DataMovementOps", "move_tiles", "reverse_sharding"]


def move_tiles(s: HloSharding, rank: int, source: int, target: int) -> HloSharding:
    """`s` with the cut of dim `source` merged into dim `target` (target's
    chunk index major, source's minor: XLA's MoveAndMergeShardingTiles)."""
    array = s.array()
    axes = [a for a in range(array.ndim) if a != source]
    axes.insert(axes.index(target) + 1, source)
    moved = array.transpose(axes)
    at = axes.index(target)
    shape = list(moved.shape)
    merged = moved.reshape(shape[:at] + [shape[at] * shape[at + 1]] + shape[at + 2:])
    return HloSharding.tiled(np.expand_dims(merged, source), s.subgroups)


def target_dim_for(s: HloSharding, dims, source: int, allowed) -> int | None:
    """The first dim (of `allowed`) other than `source` whose size the
    merged cut (its own and source's) divides (XLA's
    GetFirstTargetDimToMoveShardingTiles); None if none."""
    counts = s.counts(len(dims))
    if counts[source] == 1 or dims[source] <= 1:
        return None
    for d in range(len(dims)):
        if d != source and d in allowed and dims[d] % (counts[d] * counts[source]) == 0:
            return d
    return None


def reverse_sharding(s: HloSharding, rank: int, dims) -> HloSharding:
    """The sharding whose chunk k along each of `dims` is s's chunk
    count-1-k: a reversed value's chunks sit on the devices of the
    operand's mirrored chunks."""
    if s.kind != "tiled" or s.has_manual_subgroup:
        return s
    array = s.array()
    for d in dims:
        if d < rank:
            array = np.flip(array, axis=d)
    return HloSharding.tiled(np.ascontiguousarray(array), s.subgroups)


class DataMovementOps:
    """Concatenate, reverse and dynamic-update-slice along cut dims."""

    def emit_concatenate(self, inst, s: HloSharding):
        rank = inst.shape.rank
        dim = inst.attrs["dimensions"][0]
        if s.kind != "tiled" or s.has_manual_subgroup:
            return None
        count = s.counts(rank)[dim]
        if count == 1:
            return None
        # (an operand cut unevenly along the dim moves too: one all-to-all
        # sends its padded chunks and the padding is sliced off where the
        # dim is whole, before the operands are joined; on a 2-D mesh, the
        # exchange within the groups along the dim's mesh axis does the same)
        target = target_dim_for(s, inst.shape.dims, dim, range(rank))
        if target is None:
            return None
        temp = move_tiles(s, rank, dim, target)
        operands = [self.value(o, temp) for o in inst.operands]
        new = self.add_clone(inst, operands, self.local_shape(inst.shape, temp))
        return self.reshard(new, temp, s, inst.shape), s

    def emit_reverse(self, inst, s: HloSharding):
        rank = inst.shape.rank
        dims = list(inst.attrs["dimensions"])
        if s.kind != "tiled" or s.has_manual_subgroup:
            return None
        counts = s.counts(rank)
        cut = [d for d in dims if counts[d] > 1]
        if not cut:
            return None
        even = [d for d in cut if inst.shape.dims[d] % counts[d] == 0]
        # even cuts: each device takes the mirrored chunk (one
        # collective-permute for all of them)
        x = self.value(inst.operands[0], reverse_sharding(s, rank, even))
        for d in cut:
            if d not in even:
                x = self.mirror_uneven(x, s, inst.shape, d)
        return self.add_clone(inst, [x], self.local_shape(inst.shape, s)), s

    def mirror_uneven(self, x, s: HloSharding, shape: Shape, dim: int):
        """x (s's chunk of a value cut unevenly along `dim`) -> the chunk
        whose local reverse is s's chunk of the value reversed along `dim`.

        Reversed, the padding at the end would come first; XLA's
        partitioner pads the value on the left instead (its halo exchange
        to pad on the left): with p = c * k - n padding elements (chunks of
        k, c of them), the left-padded value's chunk i holds the elements
        [i * k - p, i * k - p + k). The device holding result chunk j takes
        chunk c - 1 - j of that: the last r elements of the operand's chunk
        c - 2 - j - q and the first k - r of its chunk c - 1 - j - q
        (p = q * k + r), each by a collective-permute straight from the
        devices holding them (none receives what lies before the value:
        zeros, the result's padding once reversed)."""
        rank = shape.rank
        count = s.counts(rank)[dim]
        k = x.shape.dims[dim]
        q, r = divmod(count * k - shape.dims[dim], k)
        groups = groups_along(s, rank, [dim])
        parts = []
        for lo, hi, back in ((k - r, k, q + 1), (0, k - r, q)):
            if lo == hi:
                continue
            pairs = [(g[i - back], g[count - 1 - i]) for g in groups
                     for i in range(back, count)]
            dims = list(x.shape.dims)
            dims[dim] = hi - lo
            config = [(0, size, 1) for size in x.shape.dims]
            config[dim] = (lo, hi, 1)
            piece = self.add("slice", x.shape.with_dims(tuple(dims)), [x], slice=config)
            parts.append(self.collective_permute(piece, pairs))
        if len(parts) == 1:
            return parts[0]
        return self.add("concatenate", x.shape, parts, dimensions=(dim,))

    def emit_dynamic_update_slice(self, inst, s: HloSharding):
        """XLA's single-partition update (see the module's docstring)."""
        rank = inst.shape.rank
        if s.kind != "tiled" or s.has_manual_subgroup:
            return None
        dims, update = inst.shape.dims, inst.operands[1].shape.dims
        counts = s.counts(rank)
        written = [d for d in range(rank) if update[d] != dims[d]]
        cut = [d for d in written if counts[d] > 1]
        if not cut:
            return None
        chunk = s.local_dims(dims)
        for d in cut:
            if update[d] == 1:
                continue
            start = _constant_index(inst.operands[2 + d])
            if start is None:
                return None
            start = min(max(start, 0), dims[d] - update[d])
            if start // chunk[d] != (start + update[d] - 1) // chunk[d]:
                return None
        # the update whole along the written dims, cut as s along the others
        update_s = replicate_dims(s, rank, written, keep=list(range(rank)))
        base = self.value(inst.operands[0], s)
        upd = self.value(inst.operands[1], update_s)
        coords = device_coords(s, rank, self.n)
        inside = None
        indices = []
        for d in range(rank):
            index = inst.operands[2 + d]
            if d not in written:
                indices.append(self.scalar(0))
                continue
            # the global offset clamped as the op clamps it, in its own
            # type (an unsigned one past s32's range stays large), then s32
            # (an op's offsets share one type)
            x = self.value(index, HloSharding.replicated())
            t = x.shape
            x = self.add("clamp", t, [self.typed(0, t), x, self.typed(dims[d] - update[d], t)])
            x = self.as_s32(x)
            if d not in cut:
                indices.append(x)
                continue
            # made local; a device whose chunk it misses writes nowhere
            start = self.table_value([c[d] * chunk[d] for c in coords])
            local = self.add("subtract", Shape("s32", ()), [x, start])
            ge = self.add("compare", Shape("pred", ()), [local, self.scalar(0)],
                          direction="GE")
            lt = self.add("compare", Shape("pred", ()), [local, self.scalar(chunk[d])],
                          direction="LT")
            here = self.add("and", Shape("pred", ()), [ge, lt])
            inside = here if inside is None else \
                self.add("and", Shape("pred", ()), [inside, here])
            indices.append(self.add("select", Shape("s32", ()), [here, local, self.scalar(0)]))
        shape = base.shape
        new = self.add_clone(inst, [base, upd] + indices, shape)
        mask = self.add("broadcast", shape.with_dims(shape.dims, "pred"), [inside],
                        dimensions=())
        return self.add("select", shape, [mask, new, base]), s

    def typed(self, value: int, shape: Shape):
        return self.comp.add_instruction(HloInstruction.create_constant(
            np.array(value, shape.dtype), shape))

    def as_s32(self, x):
        if x.shape.element_type == "s32":
            return x
        return self.add("convert", Shape("s32", ()), [x])


def _constant_index(inst) -> int | None:
    """The value of a scalar integer constant (through converts and
    reshapes), else None."""
    while inst.opcode in ("convert", "reshape", "copy") and inst.operands:
        inst = inst.operands[0]
    if inst.opcode == "constant" and inst.literal is not None and inst.literal.size == 1:
        return int(inst.literal.reshape(()))
    return None
