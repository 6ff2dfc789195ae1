"""A trace as a picture: a self-contained SVG (in an HTML page) of the
trace-event JSON that compiles and runs record, for a look without a trace
viewer or a network (Perfetto's UI shows the same data interactively).

One lane per thread, grouped by process (compile, run); an event is a bar
from its start to its end, nested events one row below their parent,
coloured by category (HLO pass, kernel stage, kernel, gemm, copy...). The
axis is in milliseconds from the first event. Hovering a bar shows its
name, duration and arguments. Past `max_events` events only the longest
are drawn (the page says how many were left out).

    svg = trace_svg(json.load(open("t.json")))
    write_trace_html(data, "t.html")
"""

from __future__ import annotations

import html
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from .._trace import write_file

__all__ = ["trace_svg", "trace_html", "write_trace_html", "DEFAULT_MAX_EVENTS"]

DEFAULT_MAX_EVENTS = 20000
_ROW_H = 16.0
_LANE_GAP = 8.0
_LABEL_W = 220.0
_AXIS_H = 26.0
_MARGIN = 10.0

# Colours by event category; others get one from _PALETTE by name.
_CATEGORY_FILL = {
    "compile": "#90caf9", "hlo-pipeline": "#b39ddb", "hlo-pass": "#ce93d8",
    "kernel": "#ffcc80", "kernel-stage": "#ffe0b2", "dump": "#e0e0e0",
    "run": "#a5d6a7", "gemm": "#ef9a9a", "copy": "#80deea", "memset": "#b0bec5",
    "while": "#c5e1a5", "while_iteration": "#dcedc8", "conditional": "#fff59d",
    "command_buffer": "#bcaaa4", "custom_call": "#f48fb1", "sort": "#80cbc4",
    "convolution": "#f8bbd0", "fft": "#9fa8da", "topk": "#80cbc4",
}
_PALETTE = ("#aed581", "#4fc3f7", "#ffb74d", "#e57373", "#9575cd", "#4db6ac")


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


def _fill(category: str) -> str:
    known = _CATEGORY_FILL.get(category)
    if known is not None:
        return known
    return _PALETTE[sum(map(ord, category)) % len(_PALETTE)]


def _duration(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.3f} ms"
    return f"{us:.1f} µs"


def _lanes(data: dict[str, Any], max_events: int, processes=None):
    """[(lane title, [(event, depth)])] and how many events were left out."""
    events = [e for e in data.get("traceEvents", ()) if e.get("ph") == "X" and
              (processes is None or e["pid"] in processes)]
    dropped = max(len(events) - max_events, 0)
    if dropped:
        events = sorted(events, key=lambda e: -e["dur"])[:max_events]
    names: dict[tuple, str] = {}
    for e in data.get("traceEvents", ()):
        if e.get("ph") == "M":
            key = ("p", e["pid"]) if e["name"] == "process_name" else ("t", e["pid"], e["tid"])
            names[key] = e.get("args", {}).get("name", "")
    by_lane: dict[tuple[int, int], list] = defaultdict(list)
    for e in events:
        by_lane[(e["pid"], e["tid"])].append(e)
    lanes = []
    for (pid, tid), lane in sorted(by_lane.items(),
                                   key=lambda item: (item[0][0], min(e["ts"]
                                                                     for e in item[1]))):
        lane.sort(key=lambda e: (e["ts"], -e["dur"]))
        placed, open_ends = [], []
        for e in lane:
            while open_ends and open_ends[-1] <= e["ts"]:
                open_ends.pop()
            placed.append((e, len(open_ends)))
            open_ends.append(e["ts"] + e["dur"])
        title = f"{names.get(('p', pid), f'process {pid}')} · " \
                f"{names.get(('t', pid, tid), f'thread {tid}')}"
        lanes.append((title, placed))
    return lanes, dropped


def trace_svg(data: dict[str, Any], width: float = 1400.0,
              max_events: int = DEFAULT_MAX_EVENTS, processes=None) -> str:
    """The trace `data` (the trace-event JSON object) as an SVG string;
    `processes`: the pids to draw (default: all)."""
    lanes, dropped = _lanes(data, max_events, processes)
    spans = [(e["ts"], e["ts"] + e["dur"]) for _, placed in lanes for e, _ in placed]
    begin = min((s for s, _ in spans), default=0.0)
    end = max((t for _, t in spans), default=1.0)
    length = max(end - begin, 1e-3)
    plot_w = width - _LABEL_W - 2 * _MARGIN
    scale = plot_w / length
    height = _MARGIN + _AXIS_H + sum(
        (max((d for _, d in placed), default=0) + 1) * _ROW_H + _LANE_GAP
        for _, placed in lanes) + _MARGIN
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
           f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
           'font-family="Helvetica, Arial, sans-serif" font-size="11">',
           f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>']
    x0 = _MARGIN + _LABEL_W
    # The time axis: about ten ticks at a round step.
    step = 10 ** int(f"{length / 10:e}".split("e")[1])
    for factor in (1, 2, 5, 10):
        if length / (step * factor) <= 10:
            step *= factor
            break
    tick = 0.0
    while tick <= length:
        x = x0 + tick * scale
        out.append(f'<line x1="{x:.1f}" y1="{_MARGIN + _AXIS_H - 6:.1f}" x2="{x:.1f}" '
                   f'y2="{height - _MARGIN:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{_MARGIN + 12:.1f}" text-anchor="middle" '
                   f'fill="#555">{tick / 1e3:g} ms</text>')
        tick += step
    y = _MARGIN + _AXIS_H
    for title, placed in lanes:
        rows = max((d for _, d in placed), default=0) + 1
        lane_h = rows * _ROW_H
        out.append(f'<rect x="{_MARGIN:.1f}" y="{y:.1f}" width="{width - 2 * _MARGIN:.1f}" '
                   f'height="{lane_h:.1f}" fill="#fafafa" stroke="#ddd"/>')
        out.append(f'<text x="{_MARGIN + 4:.1f}" y="{y + 12:.1f}" fill="#222">'
                   f'{_esc(title[:40])}</text>')
        for e, depth in placed:
            x = x0 + (e["ts"] - begin) * scale
            w = max(e["dur"] * scale, 0.5)
            top = y + depth * _ROW_H + 1
            args = e.get("args") or {}
            tip = f"{e['name']} ({e.get('cat', '')}): {_duration(e['dur'])}" + "".join(
                f"\n{k}: {v}" for k, v in args.items())
            out.append(f'<g><title>{_esc(tip)}</title><rect x="{x:.2f}" y="{top:.1f}" '
                       f'width="{w:.2f}" height="{_ROW_H - 2:.1f}" '
                       f'fill="{_fill(e.get("cat", ""))}" stroke="#0003" stroke-width="0.5"/>')
            chars = int((w - 4) / 6)
            if chars >= 4:
                label = e["name"] if len(e["name"]) <= chars else e["name"][:chars - 1] + "…"
                out.append(f'<text x="{x + 2:.2f}" y="{top + 11:.1f}" fill="#111">'
                           f'{_esc(label)}</text>')
            out.append('</g>')
        y += lane_h + _LANE_GAP
    if dropped:
        out.append(f'<text x="{_MARGIN:.1f}" y="{height - 2:.1f}" fill="#b71c1c">'
                   f'{dropped} shorter events not drawn</text>')
    out.append('</svg>')
    return "\n".join(out)


def trace_html(data: dict[str, Any], title: str = "xla_gpu trace") -> str:
    """A page holding `trace_svg(data)`: no script, no external URL."""
    categories = sorted({e.get("cat", "") for e in data.get("traceEvents", ())
                         if e.get("ph") == "X"})
    legend = " ".join(f'<span style="background:{_fill(c)}">{_esc(c)}</span>'
                      for c in categories)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>body{{margin:8px;font-family:Helvetica,"
            "Arial,sans-serif;font-size:13px}} .legend span{{display:inline-block;"
            "padding:1px 6px;margin:2px 4px 2px 0;border-radius:4px;font-size:11px}}"
            f"</style></head><body><h1 style=\"font-size:16px\">{_esc(title)}</h1>"
            "<p>Open the JSON beside this page in ui.perfetto.dev or chrome://tracing to "
            "zoom; hover a bar here for its details.</p>"
            f"<p class=\"legend\">{legend}</p>{trace_svg(data)}</body></html>\n")


def write_trace_html(data: dict[str, Any], path: str | os.PathLike,
                     title: str = "xla_gpu trace") -> Path:
    """Writes `trace_html(data)` to `path` (never through a planted link)."""
    return write_file(path, trace_html(data, title))
