"""The pictures a dump directory gets: the HLO module before and after
optimization as Graphviz .dot and as a self-contained HTML page
(xla_gpu.hlo.graphviz, xla_gpu.hlo.graph_html), and buffer assignment as
a memory picture (xla_gpu.service.memory_picture).

The .dot text is checked by a small parser here (balanced braces, every
edge between declared nodes, one cluster per fusion) and, where Graphviz
is installed, by `dot` itself; the pages by html.parser (an <svg>, no
reference to anything outside the file)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from xla_gpu.analysis.emitter_kind import fusion_emitter
from xla_gpu.errors import ArgumentError
from xla_gpu.hlo import parse_file, parse_module
from xla_gpu.hlo.graph_html import _layout, graph_html, layout_svg, write_graph_dumps
from xla_gpu.hlo.graphviz import (FUSION_COLORS, GraphCluster, build_graph, graph_to_dot,
                                  module_to_dot)
from xla_gpu.service import assign_buffers, schedule_module
from xla_gpu.service.memory_picture import memory_html, memory_picture, write_memory_dumps

HERE = Path(__file__).resolve().parents[1]
PROGRAMS = HERE / "programs"
HAS_DOT = shutil.which("dot") is not None


# ------------------------------------------------------------ checkers

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|->|[{}\[\];=,]|[^\s{}\[\];=,"]+', re.S)


class DotGraph:
    """What the checker finds in .dot text: node ids declared, edges,
    cluster names, the attributes of each node and cluster."""

    def __init__(self, text: str):
        tokens = _TOKEN.findall(text)
        assert "".join(tokens).count('"') % 2 == 0
        self.nodes: dict[str, dict[str, str]] = {}
        self.clusters: dict[str, dict[str, str]] = {}
        self.edges: list[tuple[str, str, dict[str, str]]] = []
        depth = 0
        stack: list[str | None] = []
        k = 0

        def attrs(at: int) -> tuple[dict[str, str], int]:
            out: dict[str, str] = {}
            assert tokens[at] == "["
            at += 1
            while tokens[at] != "]":
                key = tokens[at]
                assert tokens[at + 1] == "=", tokens[at:at + 3]
                out[key] = tokens[at + 2].strip('"')
                at += 3
                if tokens[at] == ",":
                    at += 1
            return out, at + 1

        assert tokens[0] == "digraph" and tokens[2] == "{"
        k = 3
        depth = 1
        while k < len(tokens):
            tok = tokens[k]
            if tok == "}":
                depth -= 1
                assert depth >= 0, "unbalanced braces"
                if stack:
                    stack.pop()
                k += 1
            elif tok == "subgraph":
                name = tokens[k + 1]
                assert tokens[k + 2] == "{"
                assert name not in self.clusters, f"cluster {name} twice"
                self.clusters[name] = {}
                stack.append(name)
                depth += 1
                k += 3
            elif tok in ("graph", "node", "edge") and tokens[k + 1] == "[":
                _, k = attrs(k + 1)
            elif tokens[k + 1] == "=":      # a cluster's attribute
                assert stack, f"attribute {tok} outside a cluster"
                self.clusters[stack[-1]][tok] = tokens[k + 2].strip('"')
                k += 3
            elif tokens[k + 1] == "->":
                edge_attrs: dict[str, str] = {}
                end = k + 3
                if tokens[end] == "[":
                    edge_attrs, end = attrs(end)
                self.edges.append((tok, tokens[k + 2], edge_attrs))
                k = end
            elif tokens[k + 1] == "[":
                assert tok not in self.nodes, f"node {tok} declared twice"
                node_attrs, k = attrs(k + 1)
                node_attrs["cluster"] = stack[-1] if stack else ""
                self.nodes[tok] = node_attrs
            elif tok == ";":
                k += 1
            else:
                raise AssertionError(f"unexpected token {tok!r} at {k}")
        assert depth == 0, "unbalanced braces"

    def check_edges(self) -> None:
        for src, dst, _ in self.edges:
            assert src in self.nodes, f"edge from undeclared {src}"
            assert dst in self.nodes, f"edge to undeclared {dst}"


class Page(HTMLParser):
    """Tags, attributes and text of an HTML page."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag: str, **classes) -> list[dict[str, str | None]]:
        out = []
        for name, attrs in self.tags:
            if name == tag and all(attrs.get(k) == v for k, v in classes.items()):
                out.append(attrs)
        return out


def check_self_contained(text: str) -> Page:
    """The page parses, holds an <svg>, and refers to nothing outside it
    (the SVG namespace is a name, not a reference)."""
    page = Page(text)
    assert page.find("svg"), "no <svg>"
    outside = re.findall(r"https?://[^\s\"'<>]*", text)
    assert set(outside) <= {"http://www.w3.org/2000/svg"}, set(outside)
    for match in re.finditer(r"https?://", text):
        assert text[max(0, match.start() - 7):match.start()] == 'xmlns="', \
            text[match.start() - 40:match.start() + 40]
    for tag, attrs in page.tags:
        assert "src" not in attrs and tag not in ("link", "iframe", "img"), (tag, attrs)
    return page


def fusions_drawn(module) -> list:
    """The fusion instructions a full drawing has: the ENTRY's and those of
    the computations of its calls, whiles and conditionals, each time they
    are called."""
    found = []
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        for inst in comp.instructions:
            a = inst.attrs
            if inst.opcode == "fusion":
                found.append(inst)
                stack.append(a["calls"])
            elif inst.opcode == "call":
                stack.append(a["to_apply"])
            elif inst.opcode == "while":
                stack += [a["condition"], a["body"]]
            elif inst.opcode == "conditional":
                stack += a.get("branch_computations") or \
                    [a["true_computation"], a["false_computation"]]
    return found


def program(name: str):
    return parse_file(PROGRAMS / name / "after_optimizations_cpu.hlo")


def big_module(n: int) -> str:
    lines = ["HloModule big", "", "ENTRY main {", "  p0 = f32[4] parameter(0)",
             "  p1 = f32[4] parameter(1)"]
    prev = ["p0", "p1"]
    for i in range(n):
        lines.append(f"  a{i} = f32[4] add({prev[-1]}, {prev[-2] if i % 3 else 'p0'})")
        prev.append(f"a{i}")
    lines[-1] = "  ROOT" + lines[-1][1:]
    return "\n".join(lines + ["}"])


# ----------------------------------------------------------------- dot

@pytest.mark.parametrize("name", ["mlp_train_step", "while_newton", "cond_switch",
                                  "scan_rnn"])
def test_dot_declares_every_endpoint_and_one_cluster_per_fusion(name):
    module = program(name)
    graph = build_graph(module, fusion_kind=fusion_emitter)
    dot = DotGraph(graph_to_dot(graph))
    dot.check_edges()
    fusions = fusions_drawn(module)
    clusters = [c for c in dot.clusters if c.startswith("cluster_fusion_")]
    assert len(clusters) == len(fusions) > 0
    # Each fusion's cluster is coloured by the emitter the analysis chose.
    by_label = {attrs["label"].split(" ")[0]: attrs for name_, attrs in dot.clusters.items()
                if name_.startswith("cluster_fusion_")}
    for inst in fusions:
        kind = fusion_emitter(inst) or "fusion"
        assert by_label[inst.name]["fillcolor"] == FUSION_COLORS[kind][0], inst.name
    # The fused instructions are drawn inside the clusters.
    inside = sum(1 for n in dot.nodes.values() if n["cluster"].startswith("cluster_fusion_"))
    assert inside >= sum(len(f.attrs["calls"].instructions) for f in fusions)
    assert graph.shown == graph.total


def test_control_flow_is_drawn_distinguishably():
    dot = DotGraph(module_to_dot(program("while_newton")))
    shapes = {attrs["label"].split("\\n")[0]: attrs.get("shape") for attrs in dot.nodes.values()}
    assert shapes["while.0"] == "hexagon"
    assert shapes["x.1"] == "ellipse"             # a parameter
    roles = sorted(e[2].get("label") for e in dot.edges if e[2].get("style") == "dashed")
    assert roles == ["body", "condition"]
    assert sum(c.startswith("cluster_while_") for c in dot.clusters) == 2
    # The body's instructions are inside the body's cluster.
    body = next(c for c, a in dot.clusters.items() if "body" in a["label"])
    assert any(n["cluster"] == body for n in dot.nodes.values())

    dot = DotGraph(module_to_dot(program("cond_switch")))
    conditionals = [a for a in dot.nodes.values() if a.get("shape") == "octagon"]
    assert conditionals
    branches = [c for c in dot.clusters if c.startswith("cluster_conditional_")]
    assert len(branches) >= 2
    dot.check_edges()


def test_constants_parameters_and_shapes_are_labelled():
    module = parse_module("""HloModule m
ENTRY e {
  p = f32[2,3] parameter(0)
  c = f32[] constant(1.5)
  b = f32[2,3] broadcast(c), dimensions={}
  ROOT a = f32[2,3] add(p, b)
}""")
    dot = DotGraph(module_to_dot(module))
    dot.check_edges()
    labels = {a["label"].split("\\n")[0]: a for a in dot.nodes.values()}
    assert labels["c"]["label"] == "c\\nconstant 1.5\\nf32[]"
    assert labels["p"]["shape"] == "ellipse"
    assert labels["a"].get("penwidth") == "2.5"        # the root
    edge_labels = sorted(e[2]["label"] for e in dot.edges)
    assert edge_labels == ["f32[2,3]", "f32[2,3]", "f32[]"]


@pytest.mark.skipif(not HAS_DOT, reason="Graphviz's dot is not installed")
@pytest.mark.parametrize("name", ["mlp_train_step", "while_newton", "cond_switch"])
def test_graphviz_reads_the_dot(name):
    done = subprocess.run(["dot", "-Tsvg"], input=module_to_dot(program(name)).encode(),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert b"<svg" in done.stdout


# ---------------------------------------------------------------- html

@pytest.mark.parametrize("engine", ["python"] + (["dot"] if HAS_DOT else []))
def test_the_page_is_self_contained(engine):
    graph = build_graph(program("while_newton"), fusion_kind=fusion_emitter)
    page = check_self_contained(graph_html(graph, engine=engine))
    assert page.find("script") and page.find("input", id="find")
    names = " ".join(page.text)
    assert "while.0" in names and "abs_reduce_fusion" in names
    if engine == "python":
        assert len(page.find("g", **{"class": "node"})) == len(graph.top.nodes())
        assert len(page.find("g", **{"class": "cluster"})) == len(graph.top.clusters())
    else:
        assert "drawn by Graphviz dot" in names


def test_the_own_layout_keeps_clusters_apart():
    """Siblings never overlap and every item lies inside its cluster."""
    for name in ("mlp_train_step", "while_newton", "cond_switch", "scan_rnn"):
        graph = build_graph(program(name), fusion_kind=fusion_emitter)
        root, boxes = _layout(graph)
        assert len(boxes) == len(graph.top.nodes())
        stack = [root]
        while stack:
            box = stack.pop()
            kids = box.children
            for k, a in enumerate(kids):
                assert box.x <= a.x and a.x + a.w <= box.x + box.w + 1e-6, (name, a.item)
                assert box.y <= a.y and a.y + a.h <= box.y + box.h + 1e-6, (name, a.item)
                for b in kids[k + 1:]:
                    apart = a.x + a.w <= b.x or b.x + b.w <= a.x or \
                        a.y + a.h <= b.y or b.y + b.h <= a.y
                    assert apart, (name, a.item, b.item)
            stack.extend(c for c in kids if isinstance(c.item, GraphCluster))


def test_a_big_module_is_truncated_with_a_note(tmp_path):
    module = parse_module(big_module(6000))
    graph = build_graph(module)
    assert (graph.shown, graph.total) == (5000, 6002)
    dot_text = graph_to_dot(graph)
    assert "truncated: 5000 of 6002 instructions drawn" in dot_text
    dot = DotGraph(dot_text)
    dot.check_edges()
    assert len(dot.nodes) == 5001                      # and the note
    paths = write_graph_dumps(module, tmp_path, "big", engine="python")
    page = paths[1].read_text()
    assert "truncated: 5000 of 6002 instructions drawn" in page
    check_self_contained(page)
    assert all(p.stat().st_size < 8_000_000 for p in paths)
    small = build_graph(module, max_instructions=10)
    assert small.shown == 10 and len(DotGraph(graph_to_dot(small)).nodes) == 11


def test_a_bad_layout_choice_is_an_argument_error(monkeypatch, tmp_path):
    module = parse_module(big_module(3))
    monkeypatch.setenv("XLA_GPU_GRAPH_LAYOUT", "svgz")
    with pytest.raises(ArgumentError, match="XLA_GPU_GRAPH_LAYOUT"):
        write_graph_dumps(module, tmp_path, "m")
    monkeypatch.setenv("XLA_GPU_GRAPH_LAYOUT", "python")
    page = write_graph_dumps(module, tmp_path, "m")[1].read_text()
    assert "own layered layout" in page


def test_layout_svg_escapes_names():
    module = parse_module(big_module(2))
    graph = build_graph(module)
    graph.top.nodes()[0].lines[0] = 'a<b>&"c'
    svg = layout_svg(graph)
    assert 'a&lt;b&gt;&amp;&quot;c' in svg and 'a<b>' not in svg


# -------------------------------------------------------------- memory

def assigned(name: str):
    module = program(name)
    schedule = schedule_module(module)
    return assign_buffers(module, schedule)


def live_peak(assignment) -> int:
    """The most bytes live at one schedule position, counted the plain way."""
    live = assignment.live_ranges
    counted = {a.index for a in assignment.allocations
               if a.kind != "constant" or a.output_index is not None}
    buffers = []
    for buffer in assignment.alias.buffers():
        value = buffer.values[0]
        where = assignment.slice(value.instruction, value.index)
        if where.allocation in counted:
            buffers.append((buffer.size, [live.range_of(v) for v in buffer.values]))
    return max(sum(size for size, ivs in buffers if any(iv.start <= t <= iv.end for iv in ivs))
               for t in range(live.end_time + 1))


@pytest.mark.parametrize("name", ["mlp_train_step", "while_newton", "scan_rnn"])
def test_memory_picture_has_every_buffer_and_the_peak(name):
    assignment = assigned(name)
    page = check_self_contained(memory_html(memory_picture(assignment)))
    svg = page.find("svg")[0]
    memory = assignment.memory_analysis()
    assert int(svg["data-peak-bytes"]) == memory.peak_memory_in_bytes
    assert int(svg["data-live-peak-bytes"]) == live_peak(assignment)
    assert live_peak(assignment) <= memory.peak_memory_in_bytes
    allocations = page.find("rect", **{"class": "allocation"})
    assert [int(a["data-size"]) for a in allocations] == \
        [a.size for a in assignment.allocations]
    buffers = page.find("g", **{"class": "buffer"})
    assert len(buffers) == len(assignment.alias.buffers())
    # Each buffer lies inside its allocation.
    for b in buffers:
        size = assignment.allocations[int(b["data-allocation"])].size
        assert int(b["data-offset"]) + int(b["data-size"]) <= size
    assert page.find("line", **{"class": "peak"})


def test_memory_picture_draws_the_largest_buffers_when_capped(tmp_path):
    assignment = assigned("mlp_train_step")
    paths = write_memory_dumps(assignment, tmp_path, max_buffers=3)
    page = check_self_contained(paths[0].read_text())
    buffers = page.find("g", **{"class": "buffer"})
    assert len(buffers) == 3
    sizes = sorted((b.size for b in assignment.alias.buffers()), reverse=True)
    assert sorted((int(b["data-size"]) for b in buffers), reverse=True) == sizes[:3]
    assert "truncated" in " ".join(page.text)
    figures = json.loads(paths[1].read_text())
    assert figures["peak_memory_in_bytes"] == assignment.memory_analysis().peak_memory_in_bytes
    assert figures["live_peak_bytes"] == live_peak(assignment)


# ------------------------------------------------------------ the tools

SMALL = """HloModule small

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[16,8] parameter(0)
  y = f32[8] parameter(1)
  yb = f32[16,8] broadcast(y), dimensions={1}
  m = f32[16,8] multiply(x, yb)
  e = f32[16,8] exponential(m)
  z = f32[] constant(0)
  r = f32[16] reduce(e, z), dimensions={1}, to_apply=add
  ROOT t = (f32[16], f32[16,8]) tuple(r, e)
}
"""


def test_xla_gpu_run_writes_the_pictures(tmp_path, capsys):
    from xla_gpu._cli import run_hlo
    source = tmp_path / "small.hlo"
    source.write_text(SMALL)
    dump = tmp_path / "dump"
    assert run_hlo([str(source), "--target=cpu", "--no-cache", "--dump-dir", str(dump)]) == 0
    assert "OK" in capsys.readouterr().out
    for stem in ("before_optimizations", "after_optimizations"):
        DotGraph((dump / f"{stem}.dot").read_text()).check_edges()
        check_self_contained((dump / f"{stem}.html").read_text())
    after = DotGraph((dump / "after_optimizations.dot").read_text())
    assert any(c.startswith("cluster_fusion_") for c in after.clusters)
    page = check_self_contained((dump / "memory-usage.html").read_text())
    figures = json.loads((dump / "memory-analysis.json").read_text())
    assert int(page.find("svg")[0]["data-peak-bytes"]) == figures["peak_memory_in_bytes"] > 0
    assert figures["generated_code_size_in_bytes"] > 0     # the executable's figures


def test_the_pass_pipeline_tool_writes_the_graphs(tmp_path, capsys):
    from xla_gpu.hlo.passes.__main__ import main
    source = tmp_path / "small.hlo"
    source.write_text(SMALL)
    assert main([str(source), "--dump-dir", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    for stem in ("before_optimizations", "after_optimizations"):
        DotGraph((tmp_path / "d" / f"{stem}.dot").read_text()).check_edges()
        check_self_contained((tmp_path / "d" / f"{stem}.html").read_text())
    before = DotGraph((tmp_path / "d" / "before_optimizations.dot").read_text())
    after = DotGraph((tmp_path / "d" / "after_optimizations.dot").read_text())
    assert not any(c.startswith("cluster_fusion_") for c in before.clusters)
    assert any(c.startswith("cluster_fusion_") for c in after.clusters)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
