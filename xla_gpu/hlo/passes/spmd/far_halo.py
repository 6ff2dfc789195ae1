"""Windows far from a device's own chunk (XLA's compact halo exchange,
ExchangeHaloCompact, re-derived): a slice or pad shifting a cut dim by
more than a chunk (a[20:60] of 64 rows over 8 devices), or any window whose
reach past its chunk is over twice the window itself. A pair of
collective-permutes per distance would send whole chunks to every device;
instead each device's window is cut into pieces, each lying in one source
chunk (or outside the operand), and the pieces are sent by as few
collective-permutes as XLA's greedy packing makes: one round takes, for
each source device, its next pending piece (ordered by where the piece
sits in its window) unless the target already receives one this round, or
the round would join a piece ending a chunk with one starting the next
(their common slice would span the whole chunk for nothing); every round's
collective-permute sends the same slice of each source's chunk (the union
of its pieces' ranges).

Each device then joins, piece by piece, what it received, its own chunk's
slice or the padding (a select over the kinds by partition-id table), and
dynamic-slices its window out. The choice of this exchange over the pairs
per distance, or over gathering the dim, is XLA's (see `compact_choice`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...module import HloInstruction
from ...shape import Shape
from .placement import device_coords, groups_along
from .sharding import HloSharding

__all__ = ["compact_choice", "compact_plan", "CompactHalo"]

_PAD, _SELF = -2, -1


def compact_choice(starts, width: int, k: int, count: int) -> bool | None:
    """XLA's choice for windows of `width` operand positions from `starts`
    (per chunk index; chunks of k, `count` of them), read on its halo
    sizes (every chunk's, padding chunks' too): True for the compact
    exchange (the largest halo over twice the window), None where the dim
    is better gathered (compact windows spanning half the dim or more, or
    halos past the neighbours adding up to the whole dim), False for the
    pairs of permutes per distance."""
    left = [i * k - starts[i] for i in range(count)]
    right = [starts[i] + width - (i + 1) * k for i in range(count)]
    if max(max(left), max(right)) > 2 * width:
        return None if 2 * width >= count * k else True
    # (the first device's left halo and the last's right one are the
    # operand's padding, never exchanged)
    far_left = max(left[1:], default=0)
    far_right = max(right[:-1], default=0)
    if far_left + far_right + k >= k * count and (far_left > k or far_right > k):
        return None
    return False


@dataclass
class Piece:
    offset: int          # where it sits in its device's window
    start: int           # its range in the source chunk (padding: as if)
    limit: int
    source: int          # the source chunk index (the device's own, or _PAD)
    permute: int = _PAD  # the collective-permute bringing it (_SELF: own)


def compact_plan(starts, width: int, k: int, count: int, real=None):
    """(pieces per chunk index, the permutes: (slice start, limit, [(source,
    target) chunk indices])). Positions outside [0, k * count) are padding;
    a padding run is cut at chunk boundaries (pieces stay aligned across
    devices) unless every device is in padding at that piece. A chunk
    index whose `real` is false (a result chunk wholly padding) reads
    nothing."""
    extent = k * count
    raw = []
    for i in range(count):
        pieces, pos, limit = [], starts[i], starts[i] + width
        if real is not None and not real[i]:
            limit = pos
        while pos < limit:
            lo = pos % k
            size = limit - pos
            if pos < 0 or pos >= extent:
                if pos < 0:
                    size = min(size, -pos)
                pieces.append(Piece(pos - starts[i], lo, lo + size, _PAD))
            else:
                size = min(k - lo, size)
                pieces.append(Piece(pos - starts[i], lo, lo + size, pos // k, _SELF))
            pos += size
        raw.append(pieces)
    halos = [[] for _ in range(count)]
    cursor = [0] * count
    while any(cursor[i] < len(raw[i]) for i in range(count)):
        live = [i for i in range(count) if cursor[i] < len(raw[i])]
        all_padding = all(raw[i][cursor[i]].source == _PAD for i in live)
        for i in live:
            p = raw[i][cursor[i]]
            if not all_padding and p.source == _PAD and p.limit > k:
                # a chunk's worth now, the rest at the next piece
                halos[i].append(Piece(p.offset, p.start, k, _PAD))
                p.offset += k - p.start
                p.limit -= k
                p.start = 0
            else:
                halos[i].append(p)
                cursor[i] += 1
    # per source chunk: the pieces other devices want from it
    wanted = [[] for _ in range(count)]
    for i in range(count):
        for j, p in enumerate(halos[i]):
            if p.source != _PAD and p.source != i:
                wanted[p.source].append((i, j))
    for src in wanted:
        src.sort(key=lambda t: halos[t[0]][t[1]].offset)
    permutes = []
    taken = [0] * count
    while True:
        pairs, seen = [], set()
        lo, hi = k, 0
        for src in range(count):
            if taken[src] >= len(wanted[src]):
                continue
            dst, j = wanted[src][taken[src]]
            p = halos[dst][j]
            if pairs and (dst in seen or (lo > p.limit and hi == k and p.start == 0) or
                          (hi < p.start and lo == 0 and p.limit == k)):
                continue
            p.permute = len(permutes)
            seen.add(dst)
            pairs.append((src, dst))
            lo, hi = min(lo, p.start), max(hi, p.limit)
            taken[src] += 1
        if not pairs:
            break
        permutes.append((lo, hi, pairs))
    return halos, permutes


class CompactHalo:
    """A base of the partitioner (uses its emitter)."""

    def compact_window(self, x, s: HloSharding, rank: int, dim: int, starts,
                       width: int, real) -> HloInstruction:
        """x (s's chunk) -> each device's `width` positions from starts[its
        chunk index] along `dim` (where real[chunk index]; any values
        elsewhere); positions outside the operand's chunks hold zeros (the
        caller masks them to its fill)."""
        k = x.shape.dims[dim]
        count = len(starts)
        halos, permutes = compact_plan(list(starts), width, k, count, real)
        groups = groups_along(s, rank, [dim])
        coords = [c[dim] for c in device_coords(s, rank, self.n)]
        zero = self.zero(x.shape.element_type)

        def with_size(size):
            dims = list(x.shape.dims)
            dims[dim] = size
            return x.shape.with_dims(tuple(dims))

        def cut(lo, hi):
            if (lo, hi) == (0, k):
                return x
            config = [(0, size, 1) for size in x.shape.dims]
            config[dim] = (lo, hi, 1)
            return self.add("slice", with_size(hi - lo), [x], slice=config)

        received = []
        for lo, hi, pairs in permutes:
            moved = cut(lo, hi)
            received.append(self.collective_permute(
                moved, sorted((g[a], g[b]) for g in groups for a, b in pairs)))
        if all(p.source == _PAD for h in halos for p in h):
            return self.add("broadcast", with_size(width), [zero], dimensions=())
        parts, first_size, self_start = [], 0, 0
        for j in range(max(len(h) for h in halos)):
            here = [h[j] if j < len(h) else None for h in halos]
            size, own_lo, own_hi = 0, k, 0
            for p in here:
                if p is None:
                    continue
                if p.permute >= 0:
                    lo, hi, _ = permutes[p.permute]
                    size = max(size, hi - lo)
                elif p.permute == _SELF:
                    own_lo, own_hi = min(own_lo, p.start), max(own_hi, p.limit)
                    size = max(size, own_hi - own_lo)
                else:
                    size = max(size, p.limit - p.start)
            # the own slice widened (to the left) to the piece's size
            own_lo = max(0, own_lo - (size - (own_hi - own_lo)))
            if j == 0:
                first_size, self_start = size, own_lo
            kinds, choice = [], []
            for p in here:
                key = _PAD if p is None or p.permute == _PAD else p.permute
                if key not in kinds:
                    kinds.append(key)
                choice.append(kinds.index(key))
            buffers = []
            for key in kinds:
                if key >= 0:
                    b = received[key]
                elif key == _SELF:
                    b = cut(own_lo, own_lo + size)
                else:
                    b = self.add("broadcast", with_size(size), [zero], dimensions=())
                if b.shape.dims[dim] != size:
                    # the first piece ends where the next begins (padded on
                    # the left), the others begin at their start
                    extra = size - b.shape.dims[dim]
                    config = [(0, 0, 0)] * rank
                    config[dim] = (extra, 0, 0) if j == 0 else (0, extra, 0)
                    b = self.add("pad", with_size(size), [b, zero], padding=config)
                buffers.append(b)
            picked = buffers[0]
            if len(buffers) > 1:
                table = self.table_value([choice[c] for c in coords])
                for index, b in enumerate(buffers[1:], 1):
                    same = self.add("compare", Shape("pred", ()),
                                    [table, self.scalar(index)], direction="EQ")
                    shape = with_size(size)
                    mask = self.add("broadcast", shape.with_dims(shape.dims, "pred"), [same],
                                    dimensions=())
                    picked = self.add("select", with_size(size), [mask, b, picked])
            parts.append(picked)
        joined = parts[0]
        total = sum(p.shape.dims[dim] for p in parts)
        if len(parts) > 1:
            joined = self.add("concatenate", with_size(total), parts, dimensions=(dim,))
        # where each device's window starts in what it joined
        offsets = []
        for i in range(count):
            if not halos[i]:
                offsets.append(0)       # (a padding chunk of the result)
                continue
            p = halos[i][0]
            if p.permute >= 0:
                lo, hi, _ = permutes[p.permute]
                offsets.append(p.start - lo + first_size - (hi - lo))
            elif p.permute == _SELF:
                offsets.append(p.start - self_start)
            else:
                offsets.append(first_size - (p.limit - p.start))
        need = max(o + width for o in offsets)
        if need > total:
            config = [(0, 0, 0)] * rank
            config[dim] = (0, need - total, 0)
            joined = self.add("pad", with_size(need), [joined, zero], padding=config)
            total = need
        if total == width:
            return joined
        starts_at = [self.scalar(0)] * rank
        starts_at[dim] = self.table_value([offsets[c] for c in coords])
        return self.add("dynamic-slice", with_size(width), [joined, *starts_at],
                        dynamic_slice_sizes=tuple(with_size(width).dims))
