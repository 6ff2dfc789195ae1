"""Windowed ops along a cut dimension (XLA's halo exchange, simplified):
slice, pad and reduce-window keep a dim cut when each device's result
chunk reads its own chunk of the operand and some of its neighbours'
along that dim; a window may reach several devices away (a window of 7
over chunks of 2 rows, a slice shifting the rows by 20): it then takes
whole chunks from the nearer devices and the edge of the farthest one,
or, far from its chunk, its pieces from the devices holding them.

Output element o of such an op along the dim reads the operand elements
[o * stride + offset, o * stride + offset + width):

  slice [start:limit:stride]   width 1, offset start
  pad low_high (no interior)   width 1, stride 1, offset -low (outside the
                               operand: the padding value)
  pad with interior I          (interior_reach) the operand elements a
                               result chunk covers, padded locally with I
                               around and between them, the chunk then
                               cut out at a per-device offset
  reduce-window                width (size - 1) * window dilation + 1,
                               offset -pad_low (outside the operand: the
                               init value); a base dilated by B counts
                               positions of the dilated operand (element
                               e at e * B): each device takes the
                               elements its positions cover, spreads
                               them out itself with the init value
                               between them, and cuts its positions out
                               (as a convolution's dilated input)

A device whose result chunk is i (chunks of m) reads a window of
(m - 1) * stride + width operand elements from i * m * stride + offset.
Each device sends its chunk's last elements to the next device along the
dim and its first ones to the previous (two collective-permutes, sized by
the largest reach of any device; one more pair per further device a
window reaches: whole chunks to distance d - 1, the edge to distance d,
as XLA's ExchangeHalo), joins them around its chunk, and
dynamic-slices its window out (offsets by partition-id); positions outside
the operand (and an uneven operand's padding) become the fill value by a
select. The op then runs locally on the window with no padding left along
that dim.

Which exchange is XLA's choice, read on its halo sizes (far_halo's
compact_choice): where a halo is over twice the window (a slice or pad
shifting the dim by more than a chunk), each window comes piece by piece
from the devices holding it (far_halo: XLA's compact exchange, a few
collective-permutes in all); where the compact windows would span half
the dim, or the halos past the neighbours add up to the whole dim, the
dim is made whole instead; otherwise, the pairs per distance above.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...module import HloInstruction
from ...shape import Shape
from .far_halo import CompactHalo, compact_choice
from .placement import device_coords, groups_along
from .sharding import HloSharding

__all__ = ["Window", "window_along", "halo_reach", "windowed_dims",
           "convolution_windows", "convolution_reach", "WindowedOps"]


@dataclass(frozen=True)
class Window:
    stride: int
    width: int
    offset: int
    fill: bool          # positions outside the operand read a fill value
    # a convolution's input dilation: operand element e at position e * base
    # (stride, width and offset then count those positions)
    base: int = 1


def window_along(inst, dim: int) -> Window | None:
    """The window `inst` reads along `dim` (None: the op is not one of
    these, or reads this dim in a way a window does not describe)."""
    op = inst.opcode
    if op == "slice":
        start, _, stride = inst.attrs["slice"][dim]
        return Window(stride, 1, start, False)
    if op == "pad":
        low, high, *rest = tuple(inst.attrs["padding"][dim]) + (0,)
        if rest[0]:
            return None                 # interior padding: not a window
        return Window(1, 1, -low, True)
    if op == "reduce-window":
        if len(inst.operands) != 2:
            return None
        window = inst.attrs.get("window") or {}

        def get(key, default):
            values = window.get(key)
            return values[dim] if values is not None else default
        pad = window.get("pad")
        low = tuple(pad[dim])[0] if pad is not None else 0
        # a dilated window spans (size - 1) * dilation + 1 elements; the
        # local op keeps its dilation and reads the same positions (a
        # dilated base: its holes read the init value, as the padding)
        span = (get("size", 1) - 1) * get("rhs_dilate", 1) + 1
        return Window(get("stride", 1), span, -low, True, get("lhs_dilate", 1))
    return None


@dataclass(frozen=True)
class Reach:
    left: int                # elements needed from the previous device
    right: int               # from the next device
    starts: tuple[int, ...]  # per chunk index: its window's first operand position
    width: int               # the window every device cuts
    masked: bool             # whether a real result reads outside the operand
    # the windows lie far from the chunks: sent piece by piece (far_halo)
    # rather than by a pair of permutes per distance
    compact: bool = False
    n_out: int = 0           # the result's elements along the dim


def halo_reach(window: Window, n_in: int, n_out: int, count: int) -> Reach | None:
    """The halo sizes of `window` over a dim of n_in operand / n_out result
    elements cut `count` ways; None where the dim is better made whole
    (XLA's choice, see the module's docstring)."""
    k = -(-n_in // count)
    m = -(-n_out // count)
    width = (m - 1) * window.stride + window.width
    left = right = 0
    masked = False
    starts = []
    for i in range(count):
        start = i * m * window.stride + window.offset
        starts.append(start)
        real = max(0, min(m, n_out - i * m))
        if real == 0:
            continue
        hi = start + (real - 1) * window.stride + window.width
        if start < 0 or hi > n_in:
            masked = True
        lo, hi = max(start, 0), min(hi, n_in)
        if lo >= hi:
            continue
        left = max(left, i * k - lo)
        right = max(right, hi - (i + 1) * k)
    if masked and not window.fill:
        return None
    # XLA's choice: far windows (a shift by more than a chunk) piece by
    # piece, windows spanning half the dim or more gathered, the rest by
    # a pair of permutes per distance
    compact = compact_choice(starts, width, k, count)
    if compact is None or \
            (not compact and not _reachable(left, right, k, count)):
        return None
    return Reach(left, right, tuple(starts), width, masked, bool(compact), n_out)


def interior_of(inst, dim: int) -> int:
    """A pad's interior padding along `dim` (0 for other ops)."""
    if inst.opcode != "pad":
        return 0
    p = tuple(inst.attrs["padding"][dim])
    return p[2] if len(p) > 2 else 0


def interior_reach(inst, dim: int, count: int) -> tuple[Reach, list[int]] | None:
    """For a pad with interior padding I along a cut `dim`: the operand
    elements each device's result chunk reads (its window, a Reach as for
    the windows above) and, per chunk index, where the chunk starts in its
    window once padded locally with I between, before and after its
    elements; None where the dim is better made whole.

    Operand element e sits at position e * (I + 1) + low of the result;
    result chunk i (chunks of m) covers positions [i * m, i * m + m), so it
    reads the elements from ceil((i * m - low) / (I + 1)) on."""
    n_in, n_out = inst.operands[0].shape.dims[dim], inst.shape.dims[dim]
    low = tuple(inst.attrs["padding"][dim])[0]
    step = interior_of(inst, dim) + 1
    k, m = -(-n_in // count), -(-n_out // count)
    starts, offsets, width = [], [], 1
    for i in range(count):
        first = i * m - low                      # as a dilated position
        e_lo = -(-first // step)
        e_hi = (first + m - 1) // step
        starts.append(e_lo)
        offsets.append(first - e_lo * step + step - 1)
        width = max(width, e_hi - e_lo + 1)
    reach = _chunk_windows_reach(starts, width, k, m, n_in, n_out, count)
    return None if reach is None else (reach, offsets)


def dilated_reach(window: Window, n_in: int, n_out: int,
                  count: int) -> tuple[Reach, list[int], int] | None:
    """For a convolution's input dilated by window.base along a cut dim:
    the operand elements each result chunk reads (a Reach), and, once a
    device pads its elements locally (base - 1 zeros before and between
    them, `high` after), where its window of positions starts (per chunk
    index); None where the dim is better made whole."""
    base, stride = window.base, window.stride
    k, m = -(-n_in // count), -(-n_out // count)
    need = (m - 1) * stride + window.width
    starts, offsets, width = [], [], 1
    for i in range(count):
        first = i * m * stride + window.offset
        e_lo = -(-first // base)
        starts.append(e_lo)
        offsets.append(first - e_lo * base + base - 1)
        width = max(width, (first + need - 1) // base - e_lo + 1)
    high = max(0, max(offsets) + need - (base - 1 + (width - 1) * base + 1))
    reach = _chunk_windows_reach(starts, width, k, m, n_in, n_out, count)
    return None if reach is None else (reach, offsets, high)


def _chunk_windows_reach(starts: list[int], width: int, k: int, m: int, n_in: int,
                         n_out: int, count: int) -> Reach | None:
    """The Reach of windows of `width` operand elements from `starts` (one
    per result chunk of m; operand chunks of k, `count` of them): how far
    they reach into the left and right neighbours' chunks, whether any
    reaches past the operand's ends (masked), and whether they are sent
    piece by piece (compact); None where the dim is better made whole
    (XLA's choice, as halo_reach). Chunks wholly padding read nothing."""
    left = right = 0
    masked = False
    for i, start in enumerate(starts):
        if min(m, n_out - i * m) <= 0:
            continue
        lo, hi = start, start + width
        if lo < 0 or hi > n_in:
            masked = True
        lo, hi = max(lo, 0), min(hi, n_in)
        if lo < hi:
            left = max(left, i * k - lo)
            right = max(right, hi - (i + 1) * k)
    compact = compact_choice(starts, width, k, count)
    if compact is None or \
            (not compact and not _reachable(left, right, k, count)):
        return None
    return Reach(left, right, tuple(starts), width, masked, bool(compact), n_out)


def _reachable(left: int, right: int, k: int, count: int) -> bool:
    """Whether halos of left / right elements (chunks of k, `count` of
    them) are worth a pair of permutes per distance: from the neighbours,
    or from further devices while each device's window stays short of the
    whole dim (XLA's bound: else gathering the dim moves no more)."""
    if left <= k and right <= k:
        return True
    return left + right + k < k * count


def convolution_reach(window: Window, n_in: int, n_out: int, count: int):
    """halo_reach, or dilated_reach for a dilated input (None: no halo
    exchange reaches)."""
    if window.base != 1:
        return dilated_reach(window, n_in, n_out, count)
    return halo_reach(window, n_in, n_out, count)


def windowed_dims(inst, counts, touched) -> list[int]:
    """The touched dims of `inst` a halo exchange keeps cut (`counts`: the
    chunks per dim of the cut asked for)."""
    out = []
    for d in sorted(touched):
        if counts[d] <= 1:
            continue
        if interior_of(inst, d):
            if interior_reach(inst, d, counts[d]) is not None:
                out.append(d)
            continue
        window = window_along(inst, d)
        if window is None:
            continue
        if convolution_reach(window, inst.operands[0].shape.dims[d], inst.shape.dims[d],
                             counts[d]) is not None:
            out.append(d)
    return out


def convolution_windows(inst) -> dict[int, tuple[int, Window]] | None:
    """A convolution's input spatial dim -> (its result dim, the window it
    reads; zeros outside the input), for its spatial dims; None for a
    convolution whose labels cannot be read."""
    labels = inst.attrs.get("dim_labels")
    if not isinstance(labels, str) or "->" not in labels or "_" not in labels:
        return None
    operands, result = labels.split("->")
    lhs = operands.split("_")[0]
    window = inst.attrs.get("window") or {}
    out = {}
    for k in range(sum(ch.isdigit() for ch in lhs)):
        key = str(k)
        if key not in lhs or key not in result:
            return None

        def get(name, default):
            values = window.get(name)
            return values[k] if values is not None and k < len(values) else default
        pad = window.get("pad")
        low = tuple(pad[k])[0] if pad is not None and k < len(pad) else 0
        width = (get("size", 1) - 1) * get("rhs_dilate", 1) + 1
        out[lhs.index(key)] = (result.index(key), Window(get("stride", 1), width, -low, True,
                                                         get("lhs_dilate", 1)))
    return out


def convolution_spatial_cuts(inst, counts) -> dict[int, int] | None:
    """Input spatial dim -> result dim for the result dims `counts` cuts
    that are spatial and reachable by a halo exchange; None when a cut
    result dim is neither that nor the batch."""
    windows = convolution_windows(inst)
    if windows is None:
        return None
    by_result = {d_out: (d_in, w) for d_in, (d_out, w) in windows.items()}
    out = {}
    for d_out, c in enumerate(counts):
        if c <= 1 or d_out not in by_result:
            continue
        d_in, w = by_result[d_out]
        if convolution_reach(w, inst.operands[0].shape.dims[d_in], inst.shape.dims[d_out],
                             c) is None:
            return None
        out[d_in] = d_out
    return out


class WindowedOps(CompactHalo):
    """A base of the partitioner (uses its emitter)."""

    def window_chunk(self, x, s: HloSharding, operand_shape: Shape, dim: int,
                     reach: Reach, fill) -> HloInstruction:
        """x (s's chunk of the operand) -> each device's window along `dim`
        (reach.width elements), positions outside the operand set to the
        scalar `fill`."""
        rank, n = operand_shape.rank, self.n
        k = x.shape.dims[dim]
        groups = groups_along(s, rank, [dim])
        coords = [c[dim] for c in device_coords(s, rank, n)]
        if reach.compact:
            n_out = reach.n_out
            m = -(-n_out // len(reach.starts))
            real = [i * m < n_out for i in range(len(reach.starts))]
            win = self.compact_window(x, s, rank, dim, reach.starts, reach.width, real)
            if reach.masked:
                win = self.mask_outside(win, dim, [reach.starts[i] for i in coords],
                                        operand_shape.dims[dim], fill)
            return win
        parts = []

        def piece(lo, hi):
            if (lo, hi) == (0, k):
                return x            # a whole chunk to a far device
            dims = list(x.shape.dims)
            dims[dim] = hi - lo
            config = [(0, size, 1) for size in x.shape.dims]
            config[dim] = (lo, hi, 1)
            return self.add("slice", x.shape.with_dims(tuple(dims)), [x], slice=config)

        def hops(size):
            # (distance, elements from it): whole chunks from the nearer
            # devices, the rest from the farthest; the farthest first
            out = [(d, min(k, size - (d - 1) * k)) for d in range(1, -(-size // k) + 1)]
            return out[::-1]

        # a device with no device that far along the dim receives zeros:
        # positions outside the operand, which no real window reads
        # unmasked
        for d, size in hops(reach.left):
            parts.append(self.collective_permute(
                piece(k - size, k), [(g[j], g[j + d]) for g in groups
                                     for j in range(len(g) - d)]))
        parts.append(x)
        for d, size in hops(reach.right)[::-1]:
            parts.append(self.collective_permute(
                piece(0, size), [(g[j + d], g[j]) for g in groups
                                 for j in range(len(g) - d)]))
        ext = x
        if len(parts) > 1:
            dims = list(x.shape.dims)
            dims[dim] = sum(p.shape.dims[dim] for p in parts)
            ext = self.add("concatenate", x.shape.with_dims(tuple(dims)), parts,
                           dimensions=(dim,))
        # ext holds operand positions [i * k - left, i * k - left + len);
        # every device's window, real or not, must lie inside it (a
        # dynamic-slice would clamp the offset), so it is padded around.
        length = ext.shape.dims[dim]
        offsets = [reach.starts[i] - (i * k - reach.left) for i in coords]
        low = max(0, -min(offsets))
        high = max(0, max(o + reach.width for o in offsets) - length)
        if low or high:
            config = [(0, 0, 0)] * rank
            config[dim] = (low, high, 0)
            dims = list(ext.shape.dims)
            dims[dim] += low + high
            ext = self.add("pad", ext.shape.with_dims(tuple(dims)),
                           [ext, self.zero(ext.shape.element_type)], padding=config)
        local = list(ext.shape.dims)
        local[dim] = reach.width
        starts = [self.scalar(0)] * rank
        starts[dim] = self.table_value([o + low for o in offsets])
        win = self.add("dynamic-slice", ext.shape.with_dims(tuple(local)), [ext, *starts],
                       dynamic_slice_sizes=tuple(local))
        if reach.masked:
            win = self.mask_outside(win, dim, [reach.starts[i] for i in coords],
                                    operand_shape.dims[dim], fill)
        return win

    def mask_outside(self, x, dim: int, starts: list[int], size: int, fill):
        """select(0 <= starts[device] + index < size, x, fill) along `dim`."""
        local = tuple(x.shape.dims)
        index = self.add("iota", Shape("s32", local), iota_dimension=dim)
        base = self.add("broadcast", Shape("s32", local), [self.table_value(starts)],
                        dimensions=())
        pos = self.add("add", Shape("s32", local), [index, base])
        zero = self.add("broadcast", Shape("s32", local), [self.scalar(0)], dimensions=())
        end = self.add("broadcast", Shape("s32", local), [self.scalar(size)], dimensions=())
        ge = self.add("compare", Shape("pred", local), [pos, zero], direction="GE")
        lt = self.add("compare", Shape("pred", local), [pos, end], direction="LT")
        inside = self.add("and", Shape("pred", local), [ge, lt])
        fills = self.add("broadcast", x.shape.with_dims(local), [fill], dimensions=())
        return self.add("select", x.shape.with_dims(local), [inside, x, fills])

    def window_convolution_input(self, inst, x, want: HloSharding, cuts: dict[int, int]):
        """The input chunk x (cut by `want`) widened to the windows its
        result chunk reads along the spatial dims `cuts` (input dim ->
        result dim), zeros outside the input."""
        windows = convolution_windows(inst)
        shape = inst.operands[0].shape
        counts = want.counts(shape.rank)
        zero = self.zero(shape.element_type)
        for d_in, d_out in sorted(cuts.items()):
            w = windows[d_in][1]
            if w.base == 1:
                reach = halo_reach(w, shape.dims[d_in], inst.shape.dims[d_out], counts[d_in])
                x = self.window_chunk(x, want, shape, d_in, reach, zero)
                continue
            x = self.dilated_window(x, want, shape, d_in, w, inst.shape.dims[d_out], zero)
        return x

    def dilated_window(self, x, s: HloSharding, operand_shape: Shape, dim: int, w: Window,
                       n_out: int, fill) -> HloInstruction:
        """x (s's chunk of an operand dilated by w.base along `dim`) -> the
        dilated positions each device's result chunk reads: the elements'
        window (halo exchange), spread out locally (base - 1 fills before
        and between them), each device's positions cut out; the op then
        runs undilated along `dim`."""
        count = s.counts(operand_shape.rank)[dim]
        reach, offsets, high = dilated_reach(w, operand_shape.dims[dim], n_out, count)
        x = self.window_chunk(x, s, operand_shape, dim, reach, fill)
        config = [(0, 0, 0)] * operand_shape.rank
        config[dim] = (w.base - 1, high, w.base - 1)
        dims = list(x.shape.dims)
        dims[dim] = w.base - 1 + (dims[dim] - 1) * w.base + 1 + high
        x = self.add("pad", x.shape.with_dims(tuple(dims)), [x, fill], padding=config)
        m = -(-n_out // count)
        dims[dim] = (m - 1) * w.stride + w.width
        coords = device_coords(s, operand_shape.rank, self.n)
        starts = [self.scalar(0)] * operand_shape.rank
        starts[dim] = self.table_value([offsets[c[dim]] for c in coords])
        return self.add("dynamic-slice", x.shape.with_dims(tuple(dims)), [x, *starts],
                        dynamic_slice_sizes=tuple(dims))

    def emit_windowed(self, inst, dims: list[int], inner: HloSharding) -> HloInstruction:
        """`inst` with `dims` (cut by `inner`, the sharding it is computed
        with) kept cut by halo exchange; its other touched dims are whole
        in `inner`. Returns the local result (inner's chunk)."""
        rank = inst.shape.rank
        operand = inst.operands[0]
        x = self.value(operand, inner)
        fill = self.value(inst.operands[1], HloSharding.replicated()) \
            if len(inst.operands) > 1 else None
        counts = inner.counts(rank)
        interior = {}       # dim -> per chunk index, its start after the local pad
        for d in dims:
            if interior_of(inst, d):
                reach, interior[d] = interior_reach(inst, d, counts[d])
            else:
                window = window_along(inst, d)
                if window.base != 1:
                    x = self.dilated_window(x, inner, operand.shape, d, window,
                                            inst.shape.dims[d], fill)
                    continue
                reach = halo_reach(window, operand.shape.dims[d], inst.shape.dims[d],
                                   counts[d])
            x = self.window_chunk(x, inner, operand.shape, d, reach, fill)
        shape = self.local_shape(inst.shape, inner)
        attrs = {k: v for k, v in inst.attrs.items() if k != "sharding"}
        op = inst.opcode
        if op == "slice":
            config = list(inst.attrs["slice"])
            for d in dims:
                config[d] = (0, x.shape.dims[d], window_along(inst, d).stride)
            attrs["slice"] = config
            # the other dims: the untouched ones are cut (their full local
            # size), the touched ones whole
            for d in range(rank):
                if d not in dims and counts[d] > 1:
                    config[d] = (0, x.shape.dims[d], 1)
            return self.add("slice", shape, [x], **attrs)
        if op == "pad":
            config = [tuple(p) for p in inst.attrs["padding"]]
            for d in dims:
                # (interior I: the window's elements spread out, I of the
                # padding value before, between and after them; each
                # device's chunk is then cut out below)
                gap = interior_of(inst, d)
                config[d] = (gap, gap, gap) if d in interior else (0, 0, 0)
            if all(tuple(p)[:2] == (0, 0) and (len(p) < 3 or p[2] == 0) for p in config):
                return x
            attrs["padding"] = config
            if not interior:
                return self.add("pad", shape, [x, fill], **attrs)
            dims_now = []
            for d, p in enumerate(config):
                low, high, gap = tuple(p) + (0,) * (3 - len(p))
                size = x.shape.dims[d]
                dims_now.append(low + high + size + max(size - 1, 0) * gap)
            padded = self.add("pad", x.shape.with_dims(tuple(dims_now)), [x, fill], **attrs)
            coords = device_coords(inner, rank, self.n)
            starts = [self.table_value([interior[d][c[d]] for c in coords])
                      if d in interior else self.scalar(0) for d in range(rank)]
            return self.add("dynamic-slice", shape, [padded, *starts],
                            dynamic_slice_sizes=tuple(shape.dims))
        window = {key: list(v) for key, v in (inst.attrs.get("window") or {}).items()}
        if "pad" in window:
            window["pad"] = [tuple(p) for p in window["pad"]]
            for d in dims:
                window["pad"][d] = (0, 0)
        if "lhs_dilate" in window:
            # (a dilated base was spread out with its window)
            for d in dims:
                window["lhs_dilate"][d] = 1
        attrs["window"] = {key: tuple(v) if key != "pad" else v
                           for key, v in window.items()}
        return self.add("reduce-window", shape, [x, fill], **attrs)
