"""An HLO module as a graph to look at: Graphviz `.dot` text (XLA's
--xla_dump_hlo_as_dot) built from one drawing model that the HTML page
(`graph_html`) lays out too.

    graph = build_graph(module, fusion_kind=emitter_of)   # HloGraph
    text = graph_to_dot(graph)                             # or module_to_dot(module)

What is drawn: the ENTRY computation's instructions as nodes, edges from
operand to user labelled with the operand's shape; a fusion as a cluster
(`cluster_fusion_N`) holding its fused computation's instructions, coloured
by the emitter that emits it (`fusion_kind(fusion_instruction)` -> "loop",
"reduction", ...; without one, the fusion's name and `kind` attribute say
what they can); a `call` as a cluster of its callee; a `while` and a
`conditional` as nodes of their own shape and colour, with their
condition, body and branches as clusters beside them, joined by dashed
edges. Parameters are yellow ellipses, constants grey boxes, the root of
each computation has a thick border. Reducers and comparators (`to_apply`
of a reduce, a sort's comparator) are named in their user's label, not
drawn.

Size is bounded: past `max_instructions` instructions (default
DEFAULT_MAX_INSTRUCTIONS) the graph stops, says so in its title and in a
note node, and counts what it left out; labels are cut at LABEL_CHARS.
Imports nothing but the HLO IR (no numpy, no MLIR).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .module import CONTROL_PREDECESSORS, HloComputation, HloInstruction, HloModule
from .printer import shape_to_text
from .shape import Shape

__all__ = ["HloGraph", "GraphNode", "GraphCluster", "GraphEdge", "build_graph",
           "graph_to_dot", "module_to_dot", "fusion_kind_from_name", "FUSION_COLORS",
           "DEFAULT_MAX_INSTRUCTIONS", "LABEL_CHARS"]

DEFAULT_MAX_INSTRUCTIONS = 5000
LABEL_CHARS = 64

# Fill and border of a fusion cluster by the emitter that emits it.
FUSION_COLORS: dict[str, tuple[str, str]] = {
    "loop": ("#e3f2fd", "#1e88e5"),
    "reduction": ("#e8f5e9", "#43a047"),
    "transpose": ("#fff8e1", "#f9a825"),
    "scatter": ("#fce4ec", "#d81b60"),
    "concatenate": ("#f3e5f5", "#8e24aa"),
    "in_place_dynamic_update_slice": ("#e0f7fa", "#00acc1"),
    "input_slices": ("#f1f8e9", "#7cb342"),
    "sort": ("#ede7f6", "#5e35b1"),
    "topk": ("#fbe9e7", "#f4511e"),
    "convolution": ("#e8eaf6", "#3949ab"),
    "custom": ("#eceff1", "#546e7a"),
    "fusion": ("#fafafa", "#757575"),     # the emitter is not known
}

# Node fill and shape by what the instruction is.
_NODE_STYLE: dict[str, tuple[str, str]] = {
    "parameter": ("#fff3b0", "ellipse"),
    "constant": ("#e0e0e0", "box"),
    "while": ("#ffcc80", "hexagon"),
    "conditional": ("#e1bee7", "octagon"),
    "call": ("#cfd8dc", "box"),
    "matmul": ("#90caf9", "box"),
    "reduce": ("#a5d6a7", "box"),
    "collective": ("#ef9a9a", "box"),
    "plumbing": ("#f5f5f5", "box"),
    "custom-call": ("#b3e5fc", "box"),
    "note": ("#ffffff", "note"),
    "op": ("#ffffff", "box"),
}

_MATMUL = {"dot", "convolution", "ragged-dot"}
_REDUCE = {"reduce", "reduce-window", "reduce-precision", "select-and-scatter"}
_PLUMBING = {"tuple", "get-tuple-element", "bitcast", "reshape", "copy",
             "optimization-barrier", "opt-barrier", "after-all", "add-dependency"}
_COLLECTIVE_WORDS = ("all-reduce", "all-gather", "all-to-all", "collective",
                     "reduce-scatter", "send", "recv", "async")

# Attributes worth a place in a node's label.
_LABEL_ATTRS = ("direction", "dimensions", "index", "custom_call_target", "slice",
                "iota_dimension", "comparison_direction", "fft_type", "distribution")


@dataclass
class GraphNode:
    id: str
    lines: list[str]          # name, what it is, its shape
    category: str             # a key of _NODE_STYLE
    tooltip: str = ""
    is_root: bool = False

    @property
    def fill(self) -> str:
        return _NODE_STYLE[self.category][0]

    @property
    def shape(self) -> str:
        return _NODE_STYLE[self.category][1]


@dataclass
class GraphCluster:
    id: str                   # cluster_...
    label: str
    kind: str                 # "fusion", "call", "while", "conditional", "module"
    fill: str = "#ffffff"
    border: str = "#9e9e9e"
    emitter: str = ""         # a fusion's emitter (a FUSION_COLORS key)
    items: list["GraphNode | GraphCluster"] = field(default_factory=list)
    tooltip: str = ""

    def nodes(self) -> list[GraphNode]:
        out: list[GraphNode] = []
        stack: list[GraphNode | GraphCluster] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, GraphCluster):
                stack.extend(reversed(item.items))
            else:
                out.append(item)
        return out

    def clusters(self) -> list["GraphCluster"]:
        out: list[GraphCluster] = []
        stack: list[GraphNode | GraphCluster] = list(reversed(self.items))
        while stack:
            item = stack.pop()
            if isinstance(item, GraphCluster):
                out.append(item)
                stack.extend(reversed(item.items))
        return out


@dataclass
class GraphEdge:
    src: str
    dst: str
    label: str = ""
    style: str = "data"       # "data", "control" (dotted), "call" (dashed)


@dataclass
class HloGraph:
    title: str
    top: GraphCluster         # the ENTRY computation (not itself drawn as a cluster)
    edges: list[GraphEdge]
    shown: int                # instructions drawn
    total: int                # instructions a full drawing would have
    module_name: str = ""

    @property
    def truncated(self) -> bool:
        return self.shown < self.total

    def truncation_note(self) -> str:
        if not self.truncated:
            return ""
        return (f"truncated: {self.shown} of {self.total} instructions drawn; "
                "the text dump has them all")


def _cut(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _shape_text(shape: Shape) -> str:
    return _cut(shape_to_text(shape, layout=False))


def fusion_kind_from_name(inst: HloInstruction) -> str:
    """A fusion's emitter as its name and `kind` attribute tell it (the
    names XLA's and xla_gpu's rename-fusions give: loop_*, input_reduce_*,
    wrapped_*), "fusion" when they do not; the fusion analysis' decision
    is better where there is one."""
    kind = str(inst.attrs.get("kind", ""))
    if kind == "kCustom":
        return "custom"
    name = inst.name.replace("-", "_")
    for word, emitter in (("scatter", "scatter"), ("transpose", "transpose"),
                          ("concatenate", "concatenate"),
                          ("dynamic_update_slice", "in_place_dynamic_update_slice"),
                          ("topk", "topk"), ("sort", "sort"), ("convolution", "convolution"),
                          ("reduce", "reduction")):
        if word in name and (name.startswith(("input_", "loop_")) or kind == "kInput"):
            return emitter
    if name.startswith(("loop_", "wrapped_")) or kind == "kLoop":
        return "loop"
    return "fusion"


def _category(inst: HloInstruction) -> str:
    op = inst.opcode
    if op in ("parameter", "constant", "while", "conditional", "call", "custom-call"):
        return op
    if op in _MATMUL:
        return "matmul"
    if op in _REDUCE:
        return "reduce"
    if op in _PLUMBING:
        return "plumbing"
    if any(w in op for w in _COLLECTIVE_WORDS):
        return "collective"
    return "op"


def _attr_text(key: str, value) -> str:
    if isinstance(value, HloComputation):
        return f"{key}={value.name}"
    if isinstance(value, (list, tuple)) and value and \
            all(isinstance(v, HloComputation) for v in value):
        return f"{key}={{{', '.join(v.name for v in value)}}}"
    if isinstance(value, tuple):
        return f"{key}={{{','.join(map(str, value))}}}"
    if isinstance(value, list) and key == "slice":
        return key + "={" + ", ".join(f"[{s[0]}:{s[1]}" + (f":{s[2]}" if s[2] != 1 else "") + "]"
                                       for s in value) + "}"
    return f"{key}={value}"


def _node_lines(inst: HloInstruction) -> list[str]:
    op = inst.opcode
    if op == "parameter":
        what = f"parameter {inst.parameter_number}"
    elif op == "constant":
        what = "constant"
        if not inst.shape.is_tuple and inst.shape.num_elements == 1 and \
                inst.literal is not None:
            try:
                what += " " + _cut(str(inst.literal.reshape(())[()]), 24)
            except (ValueError, AttributeError, TypeError):
                pass
    else:
        extras = [_attr_text(k, inst.attrs[k]) for k in _LABEL_ATTRS if k in inst.attrs]
        extras += [_attr_text(k, v) for k, v in inst.attrs.items()
                   if k in ("to_apply", "comparator", "scatter") and isinstance(v, HloComputation)
                   and op != "call"]
        what = " ".join([op, *extras])
    return [_cut(inst.name), _cut(what), _shape_text(inst.shape)]


def _tooltip(inst: HloInstruction) -> str:
    operands = ", ".join(o.name for o in inst.operands[:8])
    if len(inst.operands) > 8:
        operands += f", ... ({len(inst.operands)} operands)"
    text = f"{inst.name} = {shape_to_text(inst.shape)} {inst.opcode}({operands})"
    return _cut(text, 400)


def _callees(inst: HloInstruction) -> list[tuple[str, HloComputation]]:
    """The computations drawn inside (fusion, call) or beside (while,
    conditional) `inst`, with the name each role has."""
    a = inst.attrs
    op = inst.opcode
    if op == "fusion" and isinstance(a.get("calls"), HloComputation):
        return [("fused", a["calls"])]
    if op == "call" and isinstance(a.get("to_apply"), HloComputation):
        return [("callee", a["to_apply"])]
    if op == "while":
        out = [(role, a[key]) for role, key in (("condition", "condition"), ("body", "body"))
               if isinstance(a.get(key), HloComputation)]
        return out
    if op == "conditional":
        branches = a.get("branch_computations")
        if isinstance(branches, list):
            return [(f"branch {k}", c) for k, c in enumerate(branches)
                    if isinstance(c, HloComputation)]
        return [(role, a[key]) for role, key in (("true", "true_computation"),
                                                 ("false", "false_computation"))
                if isinstance(a.get(key), HloComputation)]
    return []


def _count(comp: HloComputation) -> int:
    """Instructions a full drawing of `comp` has (a callee drawn each time
    it is called), walked without recursion; a computation that calls
    itself (invalid HLO) counts its own instructions once."""
    memo: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[HloComputation, bool]] = [(comp, False)]
    while stack:
        c, expanded = stack.pop()
        if id(c) in memo:
            continue
        callees = [callee for inst in c.instructions for _, callee in _callees(inst)]
        if expanded:
            visiting.discard(id(c))
            memo[id(c)] = len(c.instructions) + sum(memo.get(id(k), 0) for k in callees)
            continue
        visiting.add(id(c))
        stack.append((c, True))
        stack.extend((k, False) for k in callees if id(k) not in memo and id(k) not in visiting)
    return memo[id(comp)]


class _Builder:
    def __init__(self, fusion_kind: Callable[[HloInstruction], str | None] | None,
                 budget: int):
        self.fusion_kind = fusion_kind
        self.budget = budget
        self.shown = 0
        self.edges: list[GraphEdge] = []
        self.counter = 0
        self.clusters = 0
        self.active: set[int] = set()      # computations being drawn (no cycles)

    def new_id(self) -> str:
        self.counter += 1
        return f"n{self.counter}"

    def new_cluster(self, kind: str) -> str:
        self.clusters += 1
        return f"cluster_{kind}_{self.clusters}"

    def emitter(self, inst: HloInstruction) -> str:
        kind = None
        if self.fusion_kind is not None:
            try:
                kind = self.fusion_kind(inst)
            except Exception:   # noqa: BLE001 - a picture is drawn even where analysis fails
                kind = None
        if not kind:
            kind = fusion_kind_from_name(inst)
        return kind if kind in FUSION_COLORS else "fusion"

    def draw(self, comp: HloComputation, into: GraphCluster,
             inputs: list[str | None] | None = None) -> str | None:
        """Draws `comp`'s instructions into `into`; `inputs` are the node ids
        feeding its parameters (a fusion's or call's operands). Returns the
        id of the node that gives its result (None when not drawn)."""
        if id(comp) in self.active:
            return None
        self.active.add(id(comp))
        out: dict[int, str] = {}        # instruction -> node giving its value
        node_in: dict[int, str] = {}    # instruction -> node its operands go to
        by_name: dict[str, HloInstruction] = {}
        try:
            for inst in comp.post_order():
                by_name[inst.name] = inst
                if self.shown >= self.budget:
                    break
                self.add(inst, comp, into, out, node_in, inputs)
            for inst in comp.instructions:
                target = node_in.get(id(inst))
                if target is None:
                    continue
                for operand in inst.operands:
                    source = out.get(id(operand))
                    if source is not None:
                        self.edges.append(GraphEdge(source, target, _shape_text(operand.shape)))
                for name in inst.attrs.get(CONTROL_PREDECESSORS) or ():
                    pred = by_name.get(name)
                    source = out.get(id(pred)) if pred is not None else None
                    if source is not None:
                        self.edges.append(GraphEdge(source, target, "", "control"))
        finally:
            self.active.discard(id(comp))
        return out.get(id(comp.root)) if comp.root is not None else None

    def add(self, inst: HloInstruction, comp: HloComputation, into: GraphCluster,
            out: dict[int, str], node_in: dict[int, str],
            inputs: list[str | None] | None) -> None:
        callees = _callees(inst)
        is_root = inst is comp.root
        if inst.opcode in ("fusion", "call") and callees:
            callee = callees[0][1]
            self.shown += 1
            kind = "fusion" if inst.opcode == "fusion" else "call"
            if kind == "fusion":
                emitter = self.emitter(inst)
                fill, border = FUSION_COLORS[emitter]
                label = f"{inst.name} ({emitter} emitter)" if emitter != "fusion" else \
                    f"{inst.name} (fusion)"
            else:
                emitter, fill, border = "", "#f5f5f5", "#607d8b"
                label = f"{inst.name} = call {callee.name}"
            cluster = GraphCluster(self.new_cluster(kind), _cut(label, 96), kind, fill, border,
                                   emitter, tooltip=_tooltip(inst))
            into.items.append(cluster)
            feeds = [out.get(id(o)) for o in inst.operands]
            result = self.draw(callee, cluster, feeds)
            if result is None:   # nothing drawn inside: a plain node stands for it
                node = GraphNode(self.new_id(), _node_lines(inst), _category(inst),
                                 _tooltip(inst), is_root)
                cluster.items.append(node)
                result = node.id
                node_in[id(inst)] = node.id
            out[id(inst)] = result
            return
        node = GraphNode(self.new_id(), _node_lines(inst), _category(inst), _tooltip(inst),
                         is_root)
        into.items.append(node)
        self.shown += 1
        out[id(inst)] = node.id
        node_in[id(inst)] = node.id
        if inst.opcode == "parameter" and inputs is not None:
            number = inst.parameter_number
            if number is not None and 0 <= number < len(inputs) and inputs[number] is not None:
                self.edges.append(GraphEdge(inputs[number], node.id, _shape_text(inst.shape)))
        for role, callee in callees:   # while / conditional
            if self.shown >= self.budget:
                break
            cluster = GraphCluster(self.new_cluster(inst.opcode),
                                   _cut(f"{inst.name} {role}: {callee.name}", 96), inst.opcode,
                                   "#fffaf0" if inst.opcode == "while" else "#fbf5fc",
                                   "#fb8c00" if inst.opcode == "while" else "#8e24aa")
            into.items.append(cluster)
            self.draw(callee, cluster)
            # The callee's own parameter (not one of a fusion inside it).
            members = cluster.nodes()
            target = next((n for n in cluster.items if isinstance(n, GraphNode)
                           and n.category == "parameter"), members[0] if members else None)
            if target is not None:
                self.edges.append(GraphEdge(node.id, target.id, role, "call"))


def build_graph(module: HloModule, *, title: str = "",
                fusion_kind: Callable[[HloInstruction], str | None] | None = None,
                max_instructions: int = DEFAULT_MAX_INSTRUCTIONS) -> HloGraph:
    """The drawing of `module`'s ENTRY computation (see the module
    docstring). `fusion_kind(fusion_instruction)` names the emitter of a
    fusion (a FUSION_COLORS key; None or an error: guessed from the name)."""
    if max_instructions < 1:
        raise ValueError(f"max_instructions must be at least 1, got {max_instructions}")
    entry = module.entry
    builder = _Builder(fusion_kind, max_instructions)
    top = GraphCluster("entry", entry.name, "module")
    builder.draw(entry, top)
    total = _count(entry)
    graph = HloGraph(title or module.name, top, builder.edges, builder.shown,
                     max(total, builder.shown), module.name)
    if graph.truncated:
        top.items.append(GraphNode("truncated", ["truncated", _cut(
            f"{graph.shown} of {graph.total} instructions drawn"), "see the text dump"],
            "note", graph.truncation_note()))
    return graph


# ------------------------------------------------------------------- dot

def _quote(text: str) -> str:
    """A dot string: backslashes and quotes escaped (dot's own escapes such
    as \\l stay text), control characters dropped."""
    text = "".join(c if c >= " " else " " for c in text)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(lines: list[str]) -> str:
    """Lines as one dot string, dot's \\n between them."""
    return '"' + "\\n".join(_quote(line)[1:-1] for line in lines) + '"'


def graph_to_dot(graph: HloGraph) -> str:
    """The graph as Graphviz text (`dot -Tsvg` draws it)."""
    title = graph.title + (f" ({graph.truncation_note()})" if graph.truncated else "")
    out = [f"digraph {_quote(graph.module_name or 'hlo')} {{",
           f"  graph [rankdir=TB, compound=true, fontname=\"Helvetica\", fontsize=14, "
           f"labelloc=t, label={_quote(title)}, nodesep=0.25, ranksep=0.35];",
           "  node [shape=box, style=\"filled\", fontname=\"Helvetica\", fontsize=10, "
           "margin=\"0.08,0.03\"];",
           "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\", "
           "fontcolor=\"#555555\"];"]

    def emit(item: GraphNode | GraphCluster, indent: str) -> None:
        if isinstance(item, GraphNode):
            style = "filled,rounded" if item.shape == "box" else "filled"
            attrs = [f"label={_label(item.lines)}", f"shape={item.shape}",
                     f"style={_quote(style)}", f"fillcolor={_quote(item.fill)}"]
            if item.tooltip:
                attrs.append(f"tooltip={_quote(item.tooltip)}")
            if item.is_root:
                attrs.append("penwidth=2.5")
            out.append(f"{indent}{item.id} [{', '.join(attrs)}];")
            return
        out.append(f"{indent}subgraph {item.id} {{")
        inner = indent + "  "
        out.append(f"{inner}label={_quote(item.label)}; style=\"filled,rounded\"; "
                   f"fillcolor={_quote(item.fill)}; color={_quote(item.border)}; "
                   f"penwidth=1.5; fontsize=11;")
        if item.tooltip:
            out.append(f"{inner}tooltip={_quote(item.tooltip)};")
        for child in item.items:
            emit(child, inner)
        out.append(f"{indent}}}")

    for item in graph.top.items:
        emit(item, "  ")
    for edge in graph.edges:
        attrs = []
        if edge.label:
            attrs.append(f"label={_quote(edge.label)}")
        if edge.style == "control":
            attrs.append("style=dotted")
        elif edge.style == "call":
            attrs.append("style=dashed, constraint=true")
        tail = f" [{', '.join(attrs)}]" if attrs else ""
        out.append(f"  {edge.src} -> {edge.dst}{tail};")
    out.append("}")
    return "\n".join(out) + "\n"


def module_to_dot(module: HloModule, **kwargs) -> str:
    """`graph_to_dot(build_graph(module, **kwargs))`."""
    return graph_to_dot(build_graph(module, **kwargs))
