"""Helpers shared by run_cpu.py and run_gpu.py: statistics, markdown tables,
the machine's description, the sections of RESULTS.md, charts. numpy only
(matplotlib when installed, else a tiny PNG writer)."""

from __future__ import annotations

import math
import os
import platform
import re
import statistics
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def median(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def median_seconds(fn, repeat: int, warmup: int = 1) -> float:
    """Median wall time of `repeat` calls of `fn`, after `warmup` calls."""
    import time
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def alternating_median_seconds(fns, repeat: int, warmup: int = 1) -> list[float]:
    """Median wall time of each of `fns` over `repeat` rounds in which each
    runs once, in turn (after `warmup` rounds): both sides see the same
    machine, including what the other leaves running (a runtime's thread
    pool that keeps spinning after its work)."""
    import time
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, out in zip(fns, times):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def geomean(xs) -> float:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def fmt(x, digits: int = 1, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if abs(x) >= 100:
        s = f"{x:.0f}"
    elif abs(x) >= 10:
        s = f"{x:.{max(digits - 1, 0)}f}" if digits > 1 else f"{x:.0f}"
    else:
        s = f"{x:.{digits}f}" if abs(x) >= 1 or x == 0 else f"{x:.{digits + 1}g}"
    return s + unit


def fmt_ratio(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def reason(e: BaseException | str, limit: int = 110) -> str:
    """The first line of an error without the parser's location prefix."""
    text = first_line(e, 1000)
    text = re.sub(r"^(HloError|CompileError|ValueError): ", "", text)
    text = re.sub(r"^line \d+: instruction '[^']*' \(([^)]*)\): ", r"\1: ", text)
    text = re.sub(r"^fusion '[^']*': ", "", text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def ratio(a, b) -> float | None:
    if a is None or b is None or not b or not math.isfinite(a) or not math.isfinite(b):
        return None
    return a / b


def md_table(header: list[str], rows: list[list], align: str | None = None) -> str:
    """align: one character per column, 'l' or 'r' (default: first l, rest r)."""
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
    return "\n".join(lines)


def first_line(e: BaseException | str, limit: int = 140) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def machine() -> dict:
    info = {"nproc": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Hypervisor vendor"):
                info[key.strip()] = value.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    try:
        info["load_1min_at_start"] = os.getloadavg()[0]
    except OSError:
        pass
    return info


def machine_line(info: dict) -> str:
    cpu = info.get("Model name", platform.processor() or "?")
    extra = f", {info['Hypervisor vendor']} guest" if "Hypervisor vendor" in info else ""
    mem = f", {info['memory_gib']} GiB memory" if "memory_gib" in info else ""
    load = f"; load average {info['load_1min_at_start']:.2f} at the start" \
        if "load_1min_at_start" in info else ""
    return (f"{cpu}, {info.get('nproc')} CPUs (nproc){extra}{mem}; Python "
            f"{info.get('python')}, {info.get('platform')}{load}")


def git_head() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "xla_gpu"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + (" (xla_gpu/ has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def check_outputs(got, want, spec_outputs, reduction: bool = False) -> tuple[str, bool]:
    """'ok' or a description of the worst mismatch (with the error relative
    to the output's scale, so summation-order noise reads as such). A
    `reduction`'s outputs pass within the tolerance relative to their
    scale, as the tests compare reductions (another summation order moves
    a sum by a few ulps of its largest terms, not of itself)."""
    from xla_gpu.hlo.numerics import compare
    worst, scale_err, reordered = None, 0.0, 0
    for k, (g, w, o) in enumerate(zip(got, want, spec_outputs)):
        g, w = np.asarray(g), np.asarray(w)
        m = compare(g, w, o.dtype, k)
        if m is not None and m.count > 0 and reduction and \
                compare(g, w, o.dtype, k, scale_relative=True) is None:
            reordered += m.count
            continue
        if m is not None and (worst is None or m.count > worst.count):
            worst = m
            if g.shape == w.shape and g.size:
                a, e = g.astype(np.float64), w.astype(np.float64)
                with np.errstate(invalid="ignore"):
                    finite = np.isfinite(e) & np.isfinite(a)
                    scale = np.max(np.abs(e[finite])) if finite.any() else 0.0
                    diff = np.max(np.abs(a - e)[finite]) if finite.any() else np.inf
                scale_err = diff / scale if scale else float("inf")
    if worst is None:
        return ("ok" if not reordered else
                f"ok ({reordered} sums differ in the last bits: summation order)"), True
    if worst.count < 0:
        return f"shape {worst.actual} != {worst.expected}", False
    dtype = spec_outputs[worst.output].dtype
    from xla_gpu.hlo.shape import is_float
    if not is_float(dtype):
        return f"{worst.count}/{worst.total} differ ({dtype}, exact)", False
    return (f"{worst.count}/{worst.total} differ beyond {dtype} "
            f"tolerance (max err {scale_err:.1e} of max abs)"), False


# -- RESULTS.md: one section per script, replaced in place ---------------------

def update_section(path: Path, name: str, body: str, title: str = "# Benchmarks") -> None:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    text = path.read_text() if path.exists() else f"{title}\n\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + ("\n" + tail.lstrip("\n") if tail.strip() else "")
        if not text.endswith("\n"):
            text += "\n"
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text)


# -- charts --------------------------------------------------------------------

def bar_chart(path: Path, labels: list[str], series: dict[str, list[float | None]],
              title: str, ylabel: str, log: bool = True, hline: float | None = None,
              panels: list[tuple] | None = None) -> str:
    """Grouped bars, one group per label; with `panels`, several charts
    stacked (each a (labels, series, title, ylabel, log, hline) tuple).
    Returns how the chart was drawn."""
    panels = panels or [(labels, series, title, ylabel, log, hline)]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _png_bars(path, panels)
        return "numpy+zlib PNG writer (no matplotlib: bars only, no text)"
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, 4.6 * len(panels)), squeeze=False)
    for ax, (labels, series, title, ylabel, log, hline) in zip(axes[:, 0], panels):
        n = len(series)
        width = 0.8 / max(n, 1)
        x = np.arange(len(labels))
        for k, (name, values) in enumerate(series.items()):
            v = [np.nan if (y is None or not math.isfinite(y)) else y for y in values]
            ax.bar(x + (k - (n - 1) / 2) * width, v, width, label=name)
        if hline is not None:
            ax.axhline(hline, color="k", lw=0.8, ls="--")
        if log:
            ax.set_yscale("log")
            from matplotlib.ticker import FuncFormatter
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return "matplotlib"


def _png_bars(path: Path, panels) -> None:
    colors = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189)]
    ph, w = 300, 1000
    img = np.full((ph * len(panels), w, 3), 255, np.uint8)
    for p, (labels, series, _t, _y, log, hline) in enumerate(panels):
        top = p * ph
        vals = [y for s in series.values() for y in s if y and math.isfinite(y) and y > 0]
        if not vals:
            continue
        lo, hi = (math.log10(min(vals)) - 0.2, math.log10(max(vals)) + 0.2) if log \
            else (0.0, max(vals) * 1.1)

        def ypix(v):
            f = (math.log10(v) - lo) / (hi - lo) if log else v / hi
            return top + ph - 10 - int(f * (ph - 20))
        group = (w - 20) / max(len(labels), 1)
        bw = group * 0.8 / max(len(series), 1)
        for k, values in enumerate(series.values()):
            for i, v in enumerate(values):
                if not v or not math.isfinite(v) or v <= 0:
                    continue
                x0 = int(10 + i * group + group * 0.1 + k * bw)
                img[ypix(v):top + ph - 10, x0:max(int(x0 + bw) - 1, x0 + 1)] = colors[k % 5]
        if hline is not None and hline > 0:
            img[ypix(hline), :] = 0
        img[top + ph - 10, :] = 0
    raw = b"".join(b"\0" + row.tobytes() for row in img)

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, img.shape[0],
                                                            8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    path.write_bytes(png)


def entry_name(text: str) -> str:
    """The ENTRY computation's name: the corpus' HLO is one fusion written
    as an ENTRY of plain ops, which `xla_gpu.compile` would otherwise take
    as a whole program (HLO passes, thunks); `fusion=` names it as the one
    fusion to compile."""
    import re
    match = re.search(r"^ENTRY\s+%?([\w.\-]+)", text, re.M)
    if match is None:
        raise ValueError("the HLO text has no ENTRY computation")
    return match.group(1)
