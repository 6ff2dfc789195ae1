"""An HLO graph (`graphviz.build_graph`) as a self-contained HTML page:
inline SVG with a little inline script to pan (drag), zoom (wheel, + / -),
fit, and find an instruction by name; no external URL, no network (XLA's
--xla_dump_hlo_as_html).

    write_graph_dumps(module, "/tmp/dump", "after_optimizations",
                      fusion_kind=emitter_of)   # -> .dot and .html

The SVG comes from Graphviz's `dot` when it is installed (and the graph is
not too big for it: DOT_MAX_ITEMS nodes and edges, and it finishes within
DOT_TIMEOUT_S), otherwise from the layered layout here (XLA_GPU_GRAPH_LAYOUT
= auto, dot or python chooses), in pure Python: each cluster laid out on its own (its children in
layers by longest path, ordered by barycenters, placed under their
operands) and then drawn as one box in its parent's layout, so clusters
never overlap; edges are curves from operand to user. The page says which
drew it.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from ..errors import ArgumentError
from .graphviz import (DEFAULT_MAX_INSTRUCTIONS, FUSION_COLORS, GraphCluster, GraphNode,
                       HloGraph, build_graph, graph_to_dot)
from .module import HloInstruction, HloModule

__all__ = ["layout_svg", "dot_svg", "graph_html", "write_graph_dumps", "html_page",
           "DOT_MAX_ITEMS", "DOT_TIMEOUT_S", "LAYOUT_ENV"]

# dot's spline routing takes minutes on a few hundred nodes with long edges
# (a parameter read all over the module): bigger graphs, or a dot that takes
# longer than DOT_TIMEOUT_S, get the own layout.
DOT_MAX_ITEMS = 1200      # nodes + edges
DOT_TIMEOUT_S = 20.0
LAYOUT_ENV = "XLA_GPU_GRAPH_LAYOUT"

_FONT = 10
_CHAR_W = 6.1             # mean advance of a 10 px sans-serif character
_LINE_H = 13
_NODE_PAD_X = 8
_NODE_PAD_Y = 6
_CLUSTER_PAD = 10
_CLUSTER_LABEL_H = 18
_H_GAP = 18
_V_GAP = 36
_MARGIN = 20


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


# ---------------------------------------------------------------- layout

class _Box:
    """An item's size and place (x, y of its top-left corner, relative to
    its parent cluster's content while laying out, absolute after)."""
    __slots__ = ("item", "w", "h", "x", "y", "children")

    def __init__(self, item, w: float, h: float):
        self.item = item
        self.w, self.h = w, h
        self.x = self.y = 0.0
        self.children: list[_Box] = []


def _node_size(node: GraphNode) -> tuple[float, float]:
    width = max(len(line) for line in node.lines) * _CHAR_W + 2 * _NODE_PAD_X
    if node.shape in ("ellipse", "hexagon", "octagon"):
        width += 18
    return max(width, 40.0), len(node.lines) * _LINE_H + 2 * _NODE_PAD_Y


def _layers(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Longest-path layers of n items; a cycle (never in valid HLO) is
    broken at its lowest-numbered item."""
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for a, b in edges:
        succ[a].append(b)
        indeg[b] += 1
    layer = [0] * n
    ready = [i for i in range(n) if indeg[i] == 0]
    ready.reverse()
    done = [False] * n
    remaining = n
    while remaining:
        if not ready:   # a cycle: take the first item left
            ready.append(next(i for i in range(n) if not done[i]))
        i = ready.pop()
        if done[i]:
            continue
        done[i] = True
        remaining -= 1
        for j in succ[i]:
            if done[j]:
                continue
            layer[j] = max(layer[j], layer[i] + 1)
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    # Sources (parameters, constants) sit just above their first user.
    has_pred = [False] * n
    for a, b in edges:
        has_pred[b] = True
    for i in range(n):
        if not has_pred[i] and succ[i]:
            layer[i] = max(layer[i], min(layer[j] for j in succ[i]) - 1)
    return layer


def _arrange(sizes: list[tuple[float, float]], edges: list[tuple[int, int]]
             ) -> tuple[list[tuple[float, float]], float, float]:
    """Places n items of the given sizes in layers: top-left corners, and
    the total width and height."""
    n = len(sizes)
    if n == 0:
        return [], 0.0, 0.0
    edges = sorted({(a, b) for a, b in edges if a != b})
    layer = _layers(n, edges)
    depth = max(layer) + 1
    rows: list[list[int]] = [[] for _ in range(depth)]
    for i in range(n):
        rows[layer[i]].append(i)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        if layer[a] < layer[b]:
            preds[b].append(a)
            succs[a].append(b)
    rank = [0.0] * n
    for row in rows:
        for k, i in enumerate(row):
            rank[i] = k

    def sweep(order: range, neighbours: list[list[int]]) -> None:
        for d in order:
            row = rows[d]
            keyed = []
            for k, i in enumerate(row):
                near = neighbours[i]
                keyed.append((sum(rank[j] for j in near) / len(near) if near else rank[i], k, i))
            keyed.sort()
            rows[d] = [i for _, _, i in keyed]
            for k, i in enumerate(rows[d]):
                rank[i] = k

    for _ in range(3):
        sweep(range(1, depth), preds)
        sweep(range(depth - 2, -1, -1), succs)
    sweep(range(1, depth), preds)

    # x: each item under the middle of its operands, pushed right of its
    # left neighbour; y: layers stacked, each as tall as its tallest item.
    centre = [0.0] * n
    x = [0.0] * n
    for d in range(depth):
        right = -_H_GAP
        for i in rows[d]:
            w = sizes[i][0]
            want = (sum(centre[j] for j in preds[i]) / len(preds[i]) - w / 2
                    if preds[i] else right + _H_GAP)
            x[i] = max(want, right + _H_GAP)
            right = x[i] + w
            centre[i] = x[i] + w / 2
    left = min(x)
    y_of = []
    y = 0.0
    for d in range(depth):
        y_of.append(y)
        y += max(sizes[i][1] for i in rows[d]) + _V_GAP
    places = [(x[i] - left, y_of[layer[i]]) for i in range(n)]
    width = max(places[i][0] + sizes[i][0] for i in range(n))
    return places, width, y - _V_GAP


def _layout(graph: HloGraph) -> tuple[_Box, dict[str, _Box]]:
    """Boxes for every cluster and node at absolute positions, and the
    node boxes by id."""
    # Each node's chain of enclosing items, top first.
    chain: dict[str, list] = {}
    stack: list[tuple[GraphCluster | GraphNode, list]] = [(graph.top, [])]
    while stack:
        item, path = stack.pop()
        here = path + [item]
        if isinstance(item, GraphNode):
            chain[item.id] = here
        else:
            stack.extend((child, here) for child in item.items)
    # Every edge joins two children of the innermost cluster holding both.
    child_edges: dict[int, list[tuple[int, int]]] = {}
    for edge in graph.edges:
        pa, pb = chain.get(edge.src), chain.get(edge.dst)
        if pa is None or pb is None or edge.src == edge.dst:
            continue
        k = 0
        while k < min(len(pa), len(pb)) and pa[k] is pb[k]:
            k += 1
        if k == 0 or k >= len(pa) or k >= len(pb):
            continue
        child_edges.setdefault(id(pa[k - 1]), []).append((id(pa[k]), id(pb[k])))

    # Clusters bottom-up (children before parents), without recursion.
    boxes: dict[str, _Box] = {}
    order: list[GraphCluster] = []
    todo: list[GraphCluster] = [graph.top]
    while todo:
        cluster = todo.pop()
        order.append(cluster)
        todo.extend(c for c in cluster.items if isinstance(c, GraphCluster))
    built: dict[int, _Box] = {}
    for cluster in reversed(order):
        children = []
        for child in cluster.items:
            if isinstance(child, GraphNode):
                box = _Box(child, *_node_size(child))
                boxes[child.id] = box
            else:
                box = built[id(child)]
            children.append(box)
        index = {id(b.item): k for k, b in enumerate(children)}
        edges = [(index[a], index[b]) for a, b in child_edges.get(id(cluster), [])
                 if a in index and b in index]
        places, width, height = _arrange([(b.w, b.h) for b in children], edges)
        top_pad = _CLUSTER_LABEL_H if cluster is not graph.top else 0
        label_w = len(cluster.label) * (_CHAR_W + 0.5) if cluster is not graph.top else 0
        for box, (px, py) in zip(children, places):
            box.x, box.y = px + _CLUSTER_PAD, py + _CLUSTER_PAD + top_pad
        own = _Box(cluster, max(width, label_w) + 2 * _CLUSTER_PAD,
                   height + 2 * _CLUSTER_PAD + top_pad)
        own.children = children
        built[id(cluster)] = own
    root = built[id(graph.top)]
    # Absolute positions, top down.
    todo_boxes = [(root, _MARGIN, _MARGIN)]
    while todo_boxes:
        box, ox, oy = todo_boxes.pop()
        box.x += ox
        box.y += oy
        todo_boxes.extend((c, box.x, box.y) for c in box.children)
    return root, boxes


def _node_svg(box: _Box) -> str:
    node: GraphNode = box.item
    x, y, w, h = box.x, box.y, box.w, box.h
    stroke = 2.5 if node.is_root else 1.0
    common = f'fill="{node.fill}" stroke="#333" stroke-width="{stroke}"'
    if node.shape == "ellipse":
        shape = f'<ellipse cx="{x + w / 2:.1f}" cy="{y + h / 2:.1f}" rx="{w / 2:.1f}" ' \
                f'ry="{h / 2:.1f}" {common}/>'
    elif node.shape in ("hexagon", "octagon"):
        c = 10.0
        if node.shape == "hexagon":
            pts = [(x, y + h / 2), (x + c, y), (x + w - c, y), (x + w, y + h / 2),
                   (x + w - c, y + h), (x + c, y + h)]
        else:
            pts = [(x, y + c), (x + c, y), (x + w - c, y), (x + w, y + c),
                   (x + w, y + h - c), (x + w - c, y + h), (x + c, y + h), (x, y + h - c)]
        shape = '<polygon points="' + " ".join(f"{px:.1f},{py:.1f}" for px, py in pts) + \
            f'" {common}/>'
    elif node.shape == "note":
        shape = f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" ' \
                f'fill="#fff8c4" stroke="#c62828" stroke-width="2"/>'
    else:
        shape = f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="4" ' \
                f'{common}/>'
    texts = []
    for k, line in enumerate(node.lines):
        weight = ' font-weight="bold"' if k == 0 else ""
        texts.append(f'<text x="{x + w / 2:.1f}" y="{y + _NODE_PAD_Y + (k + 0.8) * _LINE_H:.1f}" '
                     f'text-anchor="middle"{weight}>{_esc(line)}</text>')
    title = f"<title>{_esc(node.tooltip or node.lines[0])}</title>"
    return (f'<g class="node" id="{_esc(node.id)}" data-name="{_esc(node.lines[0])}">'
            f'{title}{shape}{"".join(texts)}</g>')


def layout_svg(graph: HloGraph) -> str:
    """The graph drawn by the pure-Python layered layout, as an <svg>."""
    root, boxes = _layout(graph)
    width, height = root.w + 2 * _MARGIN, root.h + 2 * _MARGIN
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
           f'height="{height:.0f}" font-family="Helvetica, Arial, sans-serif" '
           f'font-size="{_FONT}">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
           'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
           'fill="#555"/></marker></defs>']
    # Clusters, outermost first (inner ones are drawn over them).
    todo = list(reversed(root.children))
    while todo:
        box = todo.pop()
        if isinstance(box.item, GraphCluster):
            c: GraphCluster = box.item
            emitter = f' data-emitter="{_esc(c.emitter)}"' if c.emitter else ""
            out.append(f'<g class="cluster" id="{_esc(c.id)}" data-kind="{_esc(c.kind)}"{emitter}>'
                       f'<title>{_esc(c.tooltip or c.label)}</title>'
                       f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" '
                       f'height="{box.h:.1f}" rx="6" fill="{c.fill}" stroke="{c.border}" '
                       f'stroke-width="1.5"/><text x="{box.x + 8:.1f}" y="{box.y + 13:.1f}" '
                       f'font-size="11" font-weight="bold">{_esc(c.label)}</text></g>')
            todo.extend(reversed(box.children))
    for edge in graph.edges:
        a, b = boxes.get(edge.src), boxes.get(edge.dst)
        if a is None or b is None:
            continue
        x1, x2 = a.x + a.w / 2, b.x + b.w / 2
        if b.y >= a.y + a.h:
            y1, y2 = a.y + a.h, b.y
        elif a.y >= b.y + b.h:
            y1, y2 = a.y, b.y + b.h
        else:
            y1, y2 = a.y + a.h / 2, b.y + b.h / 2
        bend = max(18.0, abs(y2 - y1) / 2) * (1 if y2 >= y1 else -1)
        dash = {"control": ' stroke-dasharray="2,3"', "call": ' stroke-dasharray="6,4"'}.get(
            edge.style, "")
        path = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} " \
               f"{x2:.1f},{y2:.1f}"
        label = ""
        if edge.label:
            label = (f'<text class="elabel" x="{(x1 + x2) / 2 + 3:.1f}" '
                     f'y="{(y1 + y2) / 2:.1f}" font-size="8">{_esc(edge.label)}</text>')
        out.append(f'<g class="edge" data-src="{_esc(edge.src)}" data-dst="{_esc(edge.dst)}">'
                   f'<path d="{path}" fill="none" stroke="#555" stroke-width="1"{dash} '
                   f'marker-end="url(#arrow)"/>{label}</g>')
    for box in boxes.values():
        out.append(_node_svg(box))
    out.append("</svg>")
    return "\n".join(out)


_XML_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.S)
_XLINK_NS = re.compile(r'\s+xmlns:xlink="[^"]*"')


def dot_svg(dot_text: str, timeout: float = DOT_TIMEOUT_S) -> tuple[str | None, str]:
    """`dot -Tsvg` of `dot_text` made fit for inlining in a page (no XML
    prologue or DOCTYPE, no namespace but SVG's), and a note; (None, why)
    when dot is not installed, fails or takes longer than `timeout`."""
    dot = shutil.which("dot")
    if dot is None:
        return None, "Graphviz's dot is not installed"
    try:
        done = subprocess.run([dot, "-Tsvg"], input=dot_text.encode("utf-8"),
                              capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, f"dot took longer than {timeout:.0f} s"
    except OSError as e:
        return None, f"dot could not run ({e.strerror})"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"dot failed ({reason[0] if reason else f'status {done.returncode}'})"
    svg = done.stdout.decode("utf-8", "replace")
    svg = _XML_PROLOGUE.sub("", svg, count=1)
    svg = _XLINK_NS.sub("", svg, count=1)
    svg = svg.replace("<svg ", '<svg class="graph" ', 1)
    return svg, "drawn by Graphviz dot"


_CSS = """
body { margin: 0; font-family: Helvetica, Arial, sans-serif; font-size: 13px; color: #222; }
header { padding: 8px 12px; border-bottom: 1px solid #ccc; background: #fafafa; }
header h1 { font-size: 16px; margin: 0 0 4px 0; }
header p { margin: 2px 0; }
.note { color: #b71c1c; font-weight: bold; }
.legend span { display: inline-block; padding: 1px 6px; margin: 2px 4px 2px 0;
  border: 1.5px solid; border-radius: 4px; font-size: 11px; }
.controls button { font-size: 13px; min-width: 28px; }
.controls input { font-size: 13px; width: 220px; }
#view { position: absolute; top: var(--header-h, 110px); left: 0; right: 0; bottom: 0;
  overflow: hidden; cursor: grab; background: #fff; }
#view.dragging { cursor: grabbing; }
#view svg { width: 100%; height: 100%; }
.elabel { fill: #555; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
g.found > rect, g.found > ellipse, g.found > polygon, g.found > path,
g.found > a > rect, g.found > a > ellipse, g.found > a > polygon, g.found > a > path
  { stroke: #d50000 !important; stroke-width: 4px !important; }
table { border-collapse: collapse; margin: 6px 0; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
th { background: #eee; } td.l, th.l { text-align: left; }
.figure { overflow-x: auto; padding: 8px 12px; }
section { padding: 4px 12px; }
"""

# Pan (drag), zoom (wheel, buttons), fit, find: all through the SVG's viewBox.
_JS = """
(function () {
  var view = document.getElementById('view');
  var svg = view.querySelector('svg');
  var header = document.querySelector('header');
  function place() { view.style.top = header.offsetHeight + 'px'; }
  place(); window.addEventListener('resize', place);
  if (!svg) return;
  svg.removeAttribute('width'); svg.removeAttribute('height');
  var vb = svg.getAttribute('viewBox').split(/[ ,]+/).map(Number);
  var full = vb.slice();
  function set() { svg.setAttribute('viewBox', vb.join(' ')); }
  function point(ev) {
    var r = svg.getBoundingClientRect();
    var s = Math.max(vb[2] / r.width, vb[3] / r.height);
    var ox = (r.width * s - vb[2]) / 2, oy = (r.height * s - vb[3]) / 2;
    return [vb[0] - ox + (ev.clientX - r.left) * s, vb[1] - oy + (ev.clientY - r.top) * s, s];
  }
  function zoom(f, cx, cy) {
    if (cx === undefined) { cx = vb[0] + vb[2] / 2; cy = vb[1] + vb[3] / 2; }
    vb = [cx - (cx - vb[0]) * f, cy - (cy - vb[1]) * f, vb[2] * f, vb[3] * f]; set();
  }
  view.addEventListener('wheel', function (ev) {
    ev.preventDefault(); var p = point(ev); zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15, p[0], p[1]);
  }, {passive: false});
  var drag = null;
  view.addEventListener('mousedown', function (ev) {
    drag = [ev.clientX, ev.clientY, point(ev)[2]]; view.classList.add('dragging'); });
  window.addEventListener('mousemove', function (ev) {
    if (!drag) return;
    vb[0] -= (ev.clientX - drag[0]) * drag[2]; vb[1] -= (ev.clientY - drag[1]) * drag[2];
    drag[0] = ev.clientX; drag[1] = ev.clientY; set();
  });
  window.addEventListener('mouseup', function () {
    drag = null; view.classList.remove('dragging'); });
  function on(id, f) { var b = document.getElementById(id); if (b) b.addEventListener('click', f); }
  on('zoom-in', function () { zoom(1 / 1.4); });
  on('zoom-out', function () { zoom(1.4); });
  on('fit', function () { vb = full.slice(); set(); });
  var found = [], at = -1;
  function find() {
    var q = document.getElementById('find').value.trim().toLowerCase();
    found.forEach(function (g) { g.classList.remove('found'); });
    found = []; at = -1;
    if (!q) return;
    svg.querySelectorAll('g.node').forEach(function (g) {
      var name = (g.getAttribute('data-name') || g.textContent || '').toLowerCase();
      if (name.indexOf(q) >= 0) { g.classList.add('found'); found.push(g); }
    });
    document.getElementById('found').textContent = found.length + ' found';
    next();
  }
  function next() {
    if (!found.length) return;
    at = (at + 1) % found.length;
    // The node's centre on the screen, back in the viewBox's units.
    var r = found[at].getBoundingClientRect();
    var p = point({clientX: r.left + r.width / 2, clientY: r.top + r.height / 2});
    var w = Math.min(vb[2], 900), h = vb[3] * w / vb[2];
    vb = [p[0] - w / 2, p[1] - h / 2, w, h]; set();
  }
  var input = document.getElementById('find');
  if (input) input.addEventListener('keydown', function (ev) {
    if (ev.key === 'Enter') { if (found.length && input.value === input.dataset.last) next();
      else { input.dataset.last = input.value; find(); } } });
})();
"""


def html_page(title: str, header_html: str, svg: str, after_html: str = "",
              pannable: bool = True) -> str:
    """A self-contained page: a header, then the SVG, in a view that pans
    and zooms filling the window (`pannable`) or as it is, followed by
    `after_html`."""
    if not pannable:
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{_esc(title)}</title><style>{_CSS}</style></head>\n<body>\n"
                f"<header>{header_html}</header>\n<div class=\"figure\">\n{svg}\n</div>\n"
                f"{after_html}\n</body></html>\n")
    buttons = ('<p class="controls"><button id="zoom-in" title="zoom in">+</button> '
               '<button id="zoom-out" title="zoom out">&minus;</button> '
               '<button id="fit">fit</button> &nbsp; <input id="find" '
               'placeholder="find an instruction (Enter: next)"> <span id="found"></span> '
               '&nbsp; drag to pan, wheel to zoom</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            f"<header>{header_html}{buttons}{after_html}</header>\n"
            f"<div id=\"view\">\n{svg}\n</div>\n<script>{_JS}</script>\n</body></html>\n")


def _legend(graph: HloGraph) -> str:
    used = sorted({c.emitter for c in graph.top.clusters() if c.kind == "fusion"})
    if not used:
        return ""
    spans = "".join(f'<span style="background:{FUSION_COLORS[k][0]};'
                    f'border-color:{FUSION_COLORS[k][1]}">{_esc(k)}</span>' for k in used)
    return f'<p class="legend">fusions by emitter: {spans} &nbsp; parameters: yellow ' \
           f'ellipses, constants: grey, while: orange hexagons, conditional: purple ' \
           f'octagons; dashed edges: control flow, dotted: control dependencies</p>'


def _engine(engine: str | None) -> str:
    if engine is None:
        engine = os.environ.get(LAYOUT_ENV, "").strip() or "auto"
        if engine not in ("auto", "dot", "python"):
            raise ArgumentError(f"{LAYOUT_ENV} must be auto, dot or python, got {engine!r}")
    if engine not in ("auto", "dot", "python"):
        raise ArgumentError(f"the graph layout engine must be 'auto', 'dot' or 'python', "
                            f"got {engine!r}")
    return engine


def graph_html(graph: HloGraph, *, dot_text: str | None = None, engine: str | None = None,
               stage: str = "") -> str:
    """The page for `graph`. `engine`: "auto" (dot when installed and the
    graph has at most DOT_MAX_ITEMS nodes and edges, else the own layout),
    "dot" (falls back to the own layout, saying why, when dot fails or
    takes longer than DOT_TIMEOUT_S) or "python"; None: XLA_GPU_GRAPH_LAYOUT,
    else "auto"."""
    engine = _engine(engine)
    items = len(graph.top.nodes()) + len(graph.edges)
    svg, how = None, "drawn by xla_gpu's own layered layout"
    if engine == "dot" or (engine == "auto" and items <= DOT_MAX_ITEMS and shutil.which("dot")):
        svg, why = dot_svg(dot_text if dot_text is not None else graph_to_dot(graph))
        if svg is not None:
            how = why
        else:
            how += f" ({why})"
    if svg is None:
        svg = layout_svg(graph)
    fusions = sum(1 for c in graph.top.clusters() if c.kind == "fusion")
    heading = graph.title + (f" \u2014 {stage}" if stage else "")
    header = (f"<h1>{_esc(heading)}</h1><p>{graph.shown} instructions drawn, {fusions} "
              f"fusions, {len(graph.edges)} edges; {_esc(how)}.</p>")
    if graph.truncated:
        header += f'<p class="note">{_esc(graph.truncation_note())}</p>'
    header += _legend(graph)
    return html_page(heading, header, svg)


def write_graph_dumps(module: HloModule, dump_dir: str | os.PathLike, stem: str, *,
                      fusion_kind: Callable[[HloInstruction], str | None] | None = None,
                      max_instructions: int = DEFAULT_MAX_INSTRUCTIONS,
                      engine: str | None = None) -> list[Path]:
    """Writes `stem`.dot and `stem`.html of `module` into `dump_dir`
    (created if needed) and returns their paths."""
    graph = build_graph(module, fusion_kind=fusion_kind, max_instructions=max_instructions)
    dot_text = graph_to_dot(graph)
    directory = Path(dump_dir)
    directory.mkdir(parents=True, exist_ok=True)
    dot_path, html_path = directory / f"{stem}.dot", directory / f"{stem}.html"
    dot_path.write_text(dot_text, encoding="utf-8")
    html_path.write_text(graph_html(graph, dot_text=dot_text, engine=engine,
                                    stage=stem.replace("_", " ")), encoding="utf-8")
    return [dot_path, html_path]
