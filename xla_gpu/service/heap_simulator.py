"""Packing temporaries into one allocation by offset (XLA's
GlobalDecreasingSizeBestFitHeap, both of its orders, keeping the smaller
heap as XLA's ChooseBestHeapAlgorithm does).

Every buffer has a size and the times it is live (a union of intervals of
the flattened schedule). Buffers are placed one by one, largest first
("spatial") or longest-lived first ("temporal"); each goes into the
smallest free gap, among the buffers already placed that are live at the
same time, that fits it (best fit), or on top of them. Offsets are
aligned; buffers never live at the same time may share bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .liveness import Interval

__all__ = ["HeapItem", "HeapResult", "pack", "align_up", "merge_intervals"]


def align_up(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def merge_intervals(intervals: list[Interval]) -> list[Interval]:
    """Sorted, non-overlapping, touching ones (end + 1 == start) kept apart
    only when they do not touch."""
    out: list[Interval] = []
    for iv in sorted(intervals, key=lambda i: (i.start, i.end)):
        if out and iv.start <= out[-1].end:
            if iv.end > out[-1].end:
                out[-1] = Interval(out[-1].start, iv.end)
        else:
            out.append(iv)
    return out


def _overlap(a: list[Interval], b: list[Interval]) -> bool:
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i].start <= b[j].end and b[j].start <= a[i].end:
            return True
        if a[i].end < b[j].end:
            i += 1
        else:
            j += 1
    return False


@dataclass
class HeapItem:
    key: int                      # the caller's id for the buffer
    size: int
    intervals: list[Interval]     # merged
    start: int = field(init=False)
    end: int = field(init=False)

    def __post_init__(self):
        self.intervals = merge_intervals(self.intervals)
        self.start = self.intervals[0].start if self.intervals else 0
        self.end = self.intervals[-1].end if self.intervals else -1


@dataclass
class HeapResult:
    offsets: dict[int, int]
    size: int
    order: str


def _pack_in_order(items: list[HeapItem], alignment: int) -> tuple[dict[int, int], int]:
    n = len(items)
    placed_items: list[HeapItem] = []
    # Bounds of the placed items, for a vectorized first filter.
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    offsets_arr = np.empty(n, np.int64)
    offsets: dict[int, int] = {}
    heap = 0
    for item in items:
        if item.size == 0 or not item.intervals:
            offsets[item.key] = 0
            continue
        m = len(placed_items)
        near = np.nonzero((starts[:m] <= item.end) & (ends[:m] >= item.start))[0]
        busy = sorted((int(offsets_arr[j]), placed_items[j].size) for j in near
                      if _overlap(placed_items[j].intervals, item.intervals))
        best_offset = None
        best_gap = None
        cursor = 0
        for off, size in busy:
            if off - cursor >= item.size:
                gap = off - cursor
                if best_gap is None or gap < best_gap:
                    best_gap, best_offset = gap, cursor
            cursor = max(cursor, align_up(off + size, alignment))
        if best_offset is None:
            best_offset = cursor
        offsets[item.key] = best_offset
        starts[m], ends[m], offsets_arr[m] = item.start, item.end, best_offset
        placed_items.append(item)
        heap = max(heap, best_offset + item.size)
    return offsets, heap


def pack(items: list[HeapItem], alignment: int = 64) -> HeapResult:
    """Offsets for every item (by key) and the heap's size: the smaller of
    the size-ordered and the lifetime-ordered best fit."""
    spatial = sorted(items, key=lambda it: (-it.size, it.start, it.key))
    temporal = sorted(items, key=lambda it: (-(it.end - it.start), -it.size, it.key))
    best = None
    for name, order in (("spatial", spatial), ("temporal", temporal)):
        offsets, size = _pack_in_order(order, alignment)
        if best is None or size < best.size:
            best = HeapResult(offsets, size, name)
    return best
