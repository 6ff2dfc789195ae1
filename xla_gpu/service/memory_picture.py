"""Buffer assignment as a picture: every buffer a rectangle over the
schedule positions where it is live (x) at its offset in its allocation
(y), the allocations stacked; below, the bytes live at each position with
the peak marked; beside them the memory analysis' figures (what jax's
`compiled.memory_analysis()` reports) and the allocations. Self-contained
SVG in an HTML page: no external URL.

    picture = memory_picture(assignment)                 # MemoryPicture
    write_memory_dumps(assignment, "/tmp/dump", memory)  # memory-usage.html

Two peaks: `peak_memory_in_bytes` (arguments + outputs + temp - alias: the
allocations, which exist for the whole run) is the one the memory
analysis reports; the live peak is the most bytes that buffers hold at one
schedule position (what a perfect packing would need), drawn as a red
line where it is reached. An allocation's band is as tall as its share of
the total, but at least MIN_BAND pixels so that small ones stay visible.
Past `max_buffers` buffers only the largest are drawn (the page says how
many were left out); the live-bytes curve always counts all of them.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..hlo.graph_html import html_page
from ..runtime.buffers import Allocation
from ..runtime.program import MemoryAnalysis
from .heap_simulator import merge_intervals

__all__ = ["MemoryPicture", "PictureBuffer", "memory_picture", "memory_svg", "memory_html",
           "write_memory_dumps", "DEFAULT_MAX_BUFFERS", "MIN_BAND"]

DEFAULT_MAX_BUFFERS = 20000
MIN_BAND = 16.0
_BANDS_H = 560.0
_LABEL_W = 250.0
_CURVE_H = 150.0
_MARGIN = 16.0

_KIND_FILL = {"parameter": "#fffde7", "output": "#e3f2fd", "temp": "#f1f8e9",
              "constant": "#eeeeee", "thread_local": "#fce4ec"}


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


@dataclass
class PictureBuffer:
    """One buffer: the values that share it, where it is, when it lives
    (inclusive schedule positions)."""
    index: int
    allocation: int
    offset: int
    size: int
    intervals: list[tuple[int, int]]
    values: list[str]
    shape: str


@dataclass
class MemoryPicture:
    name: str
    allocations: list[Allocation]
    buffers: list[PictureBuffer]           # those drawn
    total_buffers: int
    schedule: list[str]                    # instruction names by position
    end_time: int                          # the last position (outputs live to it)
    live_bytes: list[int]                  # per position 0..end_time
    live_peak: int
    live_peak_time: int
    memory: MemoryAnalysis
    live_at_peak: list[PictureBuffer] = field(default_factory=list)

    @property
    def peak_memory(self) -> int:
        return self.memory.peak_memory_in_bytes

    @property
    def left_out(self) -> int:
        return self.total_buffers - len(self.buffers)


def _counted(allocation: Allocation) -> bool:
    """Whether the allocation is in peak_memory_in_bytes (constants are
    not, unless they are an output)."""
    return allocation.kind != "constant" or allocation.output_index is not None


def memory_picture(assignment, memory: MemoryAnalysis | None = None,
                   max_buffers: int = DEFAULT_MAX_BUFFERS) -> MemoryPicture:
    """The picture's data from a BufferAssignment (`assign_buffers`);
    `memory` defaults to the assignment's memory analysis (the compiler
    adds the generated code's size to its copy)."""
    if max_buffers < 1:
        raise ValueError(f"max_buffers must be at least 1, got {max_buffers}")
    live = assignment.live_ranges
    memory = memory if memory is not None else assignment.memory_analysis()
    allocations = list(assignment.allocations)
    found: list[PictureBuffer] = []
    for buffer in assignment.alias.buffers():
        placed = next(((v.instruction, v.index) for v in buffer.values
                       if assignment.has_slice(v.instruction, v.index)), None)
        if placed is None:
            continue
        where = assignment.slice(*placed)
        intervals = merge_intervals([live.range_of(v) for v in buffer.values])
        first = buffer.values[0]
        found.append(PictureBuffer(len(found), where.allocation, where.offset, buffer.size,
                                   [(iv.start, iv.end) for iv in intervals],
                                   [v.name() for v in buffer.values], str(first.shape)))
    end_time = live.end_time
    # Bytes live at each position: +size where an interval starts, -size
    # after it ends.
    delta = [0] * (end_time + 2)
    for b in found:
        if not _counted(allocations[b.allocation]):
            continue
        for start, end in b.intervals:
            delta[max(0, start)] += b.size
            delta[min(end, end_time) + 1] -= b.size
    live_bytes, running = [], 0
    for t in range(end_time + 1):
        running += delta[t]
        live_bytes.append(running)
    live_peak = max(live_bytes, default=0)
    peak_time = live_bytes.index(live_peak) if live_bytes else 0
    at_peak = sorted((b for b in found if _counted(allocations[b.allocation]) and
                      any(s <= peak_time <= e for s, e in b.intervals)),
                     key=lambda b: (-b.size, b.index))
    drawn = found
    if len(found) > max_buffers:
        keep = sorted(found, key=lambda b: (-b.size, b.index))[:max_buffers]
        drawn = sorted(keep, key=lambda b: b.index)
    return MemoryPicture(assignment.module.name, allocations, drawn, len(found),
                         [inst.name for inst in live.flattened], end_time, live_bytes,
                         live_peak, peak_time, memory, at_peak)


def _allocation_text(a: Allocation) -> str:
    if a.kind == "parameter":
        text = f"parameter {a.parameter}" + (
            f" {{{','.join(map(str, a.parameter_index))}}}" if a.parameter_index else "")
    elif a.kind == "constant":
        text = f"constant {a.constant}"
    else:
        text = a.kind
    if a.output_index is not None:
        text += f", output {{{','.join(map(str, a.output_index))}}}"
    return text


def memory_svg(picture: MemoryPicture) -> str:
    """The picture as an <svg>: `data-peak-bytes` is peak_memory_in_bytes,
    `data-live-peak-bytes` the live peak; one rect.allocation per
    allocation, one g.buffer (a rect per live interval) per buffer drawn."""
    columns = picture.end_time + 1
    chart_w = min(1400.0, max(600.0, columns * 8.0))
    sx = chart_w / columns
    x0 = _MARGIN + _LABEL_W
    total = sum(a.size for a in picture.allocations) or 1
    bands = []
    y = _MARGIN + 18
    for a in picture.allocations:
        h = max(MIN_BAND, a.size / total * _BANDS_H)
        bands.append((y, h))
        y += h + 4
    bands_bottom = y
    curve_top = bands_bottom + 36
    width = x0 + chart_w + _MARGIN + 60
    height = curve_top + _CURVE_H + 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="memory" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="11" '
           f'data-peak-bytes="{picture.peak_memory}" '
           f'data-live-peak-bytes="{picture.live_peak}" '
           f'data-live-peak-position="{picture.live_peak_time}">',
           f'<text x="{x0:.1f}" y="{_MARGIN + 8:.1f}" font-weight="bold">buffers by schedule '
           f'position (x) and offset in their allocation (y)</text>']
    for a, (by, bh) in zip(picture.allocations, bands):
        out.append(f'<rect class="allocation" data-index="{a.index}" data-size="{a.size}" '
                   f'x="{x0:.1f}" y="{by:.1f}" width="{chart_w:.1f}" height="{bh:.1f}" '
                   f'fill="{_KIND_FILL.get(a.kind, "#fff")}" stroke="#999" stroke-width="0.5">'
                   f'<title>allocation {a.index}: {_esc(_allocation_text(a))}, '
                   f'{a.size} bytes</title></rect>')
        out.append(f'<text x="{x0 - 6:.1f}" y="{by + min(bh, 24) / 2 + 4:.1f}" '
                   f'text-anchor="end">#{a.index} {_esc(_allocation_text(a)[:30])} '
                   f'({_esc(_bytes(a.size))})</text>')
    for b in picture.buffers:
        a = picture.allocations[b.allocation]
        by, bh = bands[b.allocation]
        scale = bh / a.size if a.size else 0.0
        top = by + b.offset * scale
        h = max(1.5, b.size * scale)
        hue = (b.index * 137.508) % 360
        title = (f"{', '.join(b.values[:6])}{' ...' if len(b.values) > 6 else ''}: {b.shape}, "
                 f"{b.size} bytes at offset {b.offset} of allocation {b.allocation}, live "
                 + ", ".join(f"{s}-{e}" for s, e in b.intervals))
        rects = "".join(f'<rect x="{x0 + s * sx:.2f}" y="{top:.2f}" '
                        f'width="{max(0.8, (e - s + 1) * sx):.2f}" height="{h:.2f}"/>'
                        for s, e in b.intervals)
        out.append(f'<g class="buffer" data-allocation="{b.allocation}" '
                   f'data-offset="{b.offset}" data-size="{b.size}" '
                   f'fill="hsl({hue:.0f},65%,72%)" stroke="hsl({hue:.0f},50%,38%)" '
                   f'stroke-width="0.6"><title>{_esc(title)}</title>{rects}</g>')
    # The schedule axis, and the live peak's position through the bands.
    px = x0 + (picture.live_peak_time + 0.5) * sx
    step = max(1, round(columns / 12))
    for t in range(0, columns, step):
        out.append(f'<text x="{x0 + (t + 0.5) * sx:.1f}" y="{bands_bottom + 12:.1f}" '
                   f'text-anchor="middle" font-size="9">{t}</text>')
    out.append(f'<line class="peak" x1="{px:.1f}" y1="{_MARGIN + 12:.1f}" x2="{px:.1f}" '
               f'y2="{curve_top + _CURVE_H:.1f}" stroke="#d50000" stroke-width="1.5" '
               f'stroke-dasharray="5,3"/>')
    # Live bytes per position, a step curve under the allocated total.
    top_bytes = max(picture.peak_memory, picture.live_peak, 1)
    sy = _CURVE_H / top_bytes
    base = curve_top + _CURVE_H
    points = []
    for t, v in enumerate(picture.live_bytes):
        points += [(x0 + t * sx, base - v * sy), (x0 + (t + 1) * sx, base - v * sy)]
    out.append(f'<rect x="{x0:.1f}" y="{curve_top:.1f}" width="{chart_w:.1f}" '
               f'height="{_CURVE_H:.1f}" fill="#fafafa" stroke="#999" stroke-width="0.5"/>')
    if points:
        poly = " ".join(f"{px_:.1f},{py_:.1f}" for px_, py_ in points)
        out.append(f'<polygon class="live" points="{x0:.1f},{base:.1f} {poly} '
                   f'{points[-1][0]:.1f},{base:.1f}" fill="#90caf9" stroke="#1565c0" '
                   f'stroke-width="1"/>')
    peak_y = base - picture.peak_memory * sy
    out.append(f'<line class="allocated" x1="{x0:.1f}" y1="{peak_y:.1f}" '
               f'x2="{x0 + chart_w:.1f}" y2="{peak_y:.1f}" stroke="#6a1b9a" stroke-width="1.5"/>')
    out.append(f'<text x="{x0 + 4:.1f}" y="{peak_y - 4:.1f}" text-anchor="start" '
               f'fill="#6a1b9a">allocated (peak_memory_in_bytes): {picture.peak_memory} '
               f'bytes ({_esc(_bytes(picture.peak_memory))})</text>')
    live_y = base - picture.live_peak * sy
    where = picture.schedule[picture.live_peak_time] \
        if picture.live_peak_time < len(picture.schedule) else "program end"
    anchor = "start" if picture.live_peak_time < columns / 2 else "end"
    shift = 6 if anchor == "start" else -6
    out.append(f'<circle class="live-peak" cx="{px:.1f}" cy="{live_y:.1f}" r="3.5" '
               f'fill="#d50000"/>')
    out.append(f'<text x="{px + shift:.1f}" y="{max(curve_top + 10, live_y + 14):.1f}" '
               f'text-anchor="{anchor}" fill="#d50000">live peak {picture.live_peak} bytes '
               f'at position {picture.live_peak_time} ({_esc(where)})</text>')
    out.append(f'<text x="{x0 - 6:.1f}" y="{curve_top + 12:.1f}" text-anchor="end">'
               f'bytes live</text>')
    out.append(f'<text x="{x0 - 6:.1f}" y="{base:.1f}" text-anchor="end">0</text>')
    out.append(f'<text x="{x0 + chart_w / 2:.1f}" y="{base + 28:.1f}" text-anchor="middle">'
               f'schedule position (0-{picture.end_time}: the flattened schedule; '
               f'{picture.end_time} is the program\'s end)</text>')
    out.append("</svg>")
    return "\n".join(out)


def memory_html(picture: MemoryPicture) -> str:
    """The page: figures, the picture, the allocations and the buffers
    live at the live peak."""
    m = picture.memory
    figures = "".join(f"<tr><td class=\"l\">{_esc(k)}</td><td>{v}</td><td>{_esc(_bytes(v))}"
                      f"</td></tr>" for k, v in m.to_dict().items())
    header = (f"<h1>{_esc(picture.name)} \u2014 memory usage</h1>"
              f"<p>peak_memory_in_bytes {m.peak_memory_in_bytes} "
              f"({_esc(_bytes(m.peak_memory_in_bytes))}) = arguments "
              f"{m.argument_size_in_bytes} + outputs {m.output_size_in_bytes} + temp "
              f"{m.temp_size_in_bytes} - alias {m.alias_size_in_bytes}; live peak "
              f"{picture.live_peak} bytes at schedule position {picture.live_peak_time}; "
              f"{len(picture.allocations)} allocations, {picture.total_buffers} buffers, "
              f"{picture.end_time} instructions in the flattened schedule.</p>")
    if picture.left_out:
        header += (f'<p class="note">truncated: the {len(picture.buffers)} largest of '
                   f'{picture.total_buffers} buffers drawn ({picture.left_out} left out); '
                   f'buffer-assignment.txt has them all</p>')
    rows = []
    counts: dict[int, int] = {}
    for b in picture.buffers:
        counts[b.allocation] = counts.get(b.allocation, 0) + 1
    for a in picture.allocations:
        rows.append(f"<tr><td>{a.index}</td><td class=\"l\">{_esc(_allocation_text(a))}</td>"
                    f"<td>{a.size}</td><td>{counts.get(a.index, 0)}</td></tr>")
    peak_rows = "".join(
        f"<tr><td class=\"l\">{_esc(', '.join(b.values[:3]))}</td><td class=\"l\">"
        f"{_esc(b.shape)}</td><td>{b.size}</td><td>{b.allocation}</td><td>{b.offset}</td></tr>"
        for b in picture.live_at_peak[:25])
    more = len(picture.live_at_peak) - 25
    after = (f"<section><h2>memory_analysis()</h2><table><tr><th class=\"l\">field</th>"
             f"<th>bytes</th><th></th></tr>{figures}</table>"
             f"<h2>allocations</h2><table><tr><th>#</th><th class=\"l\">what</th>"
             f"<th>size</th><th>buffers drawn</th></tr>{''.join(rows)}</table>"
             f"<h2>buffers live at the live peak (position {picture.live_peak_time}), largest "
             f"first</h2><table><tr><th class=\"l\">values</th><th class=\"l\">shape</th>"
             f"<th>size</th><th>allocation</th><th>offset</th></tr>{peak_rows}</table>"
             + (f"<p>... and {more} more</p>" if more > 0 else "") + "</section>")
    return html_page(f"{picture.name} memory usage", header, memory_svg(picture), after,
                     pannable=False)


def write_memory_dumps(assignment, dump_dir: str | os.PathLike,
                       memory: MemoryAnalysis | None = None,
                       max_buffers: int = DEFAULT_MAX_BUFFERS) -> list[Path]:
    """Writes memory-usage.html (the picture and figures) and
    memory-analysis.json (the figures) into `dump_dir`; returns the paths."""
    picture = memory_picture(assignment, memory, max_buffers)
    directory = Path(dump_dir)
    directory.mkdir(parents=True, exist_ok=True)
    page, figures = directory / "memory-usage.html", directory / "memory-analysis.json"
    page.write_text(memory_html(picture), encoding="utf-8")
    data = dict(picture.memory.to_dict(), live_peak_bytes=picture.live_peak,
                live_peak_position=picture.live_peak_time,
                live_peak_instruction=(picture.schedule[picture.live_peak_time]
                                       if picture.live_peak_time < len(picture.schedule)
                                       else None))
    figures.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return [page, figures]
