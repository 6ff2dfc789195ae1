"""MultiOutputFusion's reachability map answers "does a read b" from bitset
rows built as far as a question needs, and by a walk of the graph for a
question far past the rows built (where rows built that far would be
dropped at the next merge). Both are held here to the ancestor sets of
random graphs, with control predecessors, after rows were dropped, and
with one or the other way forced; and the pass makes the same merges
either way on a training step."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from xla_gpu.hlo import module_to_text, parse_file, parse_module
from xla_gpu.hlo.module import CONTROL_PREDECESSORS
from xla_gpu.hlo.passes import multi_output_fusion, optimize
from xla_gpu.hlo.passes.multi_output_fusion import ReachabilityMap

DATA = Path(__file__).resolve().parents[1]


def _random_graph(seed: int, size: int = 160):
    """A computation of `size` adds over three parameters, each reading two
    earlier values (most near, some far), a few with a control
    predecessor; its order and every instruction's ancestors (itself
    included), by name."""
    rng = random.Random(seed)
    lines = [f"  p{k} = f32[4] parameter({k})" for k in range(3)]
    names = ["p0", "p1", "p2"]
    reads: dict[str, set[str]] = {n: set() for n in names}
    for k in range(size):
        name = f"v{k}"
        picks = []
        for _ in range(2):
            if rng.random() < 0.7:
                picks.append(names[max(0, len(names) - 1 - rng.randrange(6))])
            else:
                picks.append(rng.choice(names))
        line = f"  {name} = f32[4] add({picks[0]}, {picks[1]})"
        reads[name] = set(picks)
        if k > 10 and rng.random() < 0.08:
            pred = rng.choice(names[3:])
            line += f", control-predecessors={{{pred}}}"
            reads[name].add(pred)
        lines.append(line)
        names.append(name)
    lines.append(f"  ROOT out = (f32[4], f32[4]) tuple({names[-1]}, {names[-2]})")
    text = "HloModule random\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"
    module = parse_module(text)
    comp = module.entry
    order = comp.instructions
    ancestors: dict[str, set[str]] = {}
    for inst in order:
        mine = {inst.name}
        if inst.name in reads:
            for r in reads[inst.name]:
                mine |= ancestors[r]
        else:
            for o in inst.operands:
                mine |= ancestors[o.name]
        ancestors[inst.name] = mine
    return comp, order, ancestors


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ahead", [0, 8, 1 << 60], ids=["walks", "mixed", "rows"])
def test_answers_are_the_ancestor_sets(monkeypatch, seed, ahead):
    monkeypatch.setattr(multi_output_fusion, "_ROWS_BUILT_AHEAD", ahead)
    comp, order, ancestors = _random_graph(seed)
    assert any(i.attrs.get(CONTROL_PREDECESSORS) for i in order)
    rng = random.Random(100 + seed)
    reach = ReachabilityMap(order)
    for step in range(600):
        if step % 150 == 149:
            # Rows dropped past a point, as after a merge there.
            reach.reorder(order, rng.randrange(len(order)))
        a, b = rng.choice(order), rng.choice(order)
        assert reach.depends(a, b) == (b.name in ancestors[a.name]), (a.name, b.name)


def test_far_questions_walk_and_build_no_rows(monkeypatch):
    comp, order, ancestors = _random_graph(7, size=400)
    reach = ReachabilityMap(order)
    last, first = order[-3], order[3]
    assert reach.depends(last, first) == (first.name in ancestors[last.name])
    assert reach._ancestors == []   # answered by the walk
    near = order[40]
    reach.depends(near, order[5])
    assert len(reach._ancestors) == 41   # near the rows built: built


@pytest.mark.parametrize("path", [
    DATA / "hlo_inputs" / "models" / "gpt_adamw_1layer.hlo",
    DATA / "programs" / "transformer_block" / "before_optimizations.hlo",
], ids=lambda p: p.parent.name if p.parent.name != "models" else p.stem)
def test_walks_and_rows_make_the_same_merges(monkeypatch, path):
    def run(ahead: int):
        merged: list[tuple[str, str]] = []
        merge = multi_output_fusion.MultiOutputFusion._merge

        def logged(self, first, second):
            merged.append((first.name, second.name))
            merge(self, first, second)

        walks = [0]
        search = ReachabilityMap._search

        def counted(self, a, pb):
            walks[0] += 1
            return search(self, a, pb)

        with monkeypatch.context() as m:
            m.setattr(multi_output_fusion, "_ROWS_BUILT_AHEAD", ahead)
            m.setattr(multi_output_fusion.MultiOutputFusion, "_merge", logged)
            m.setattr(ReachabilityMap, "_search", counted)
            text = module_to_text(optimize(parse_file(str(path)),
                                           gemm_fusion_max_multiply_adds=1 << 19))
        return text, merged, walks[0]

    text, merged, walks = run(0)
    rows_text, rows_merged, no_walks = run(1 << 60)
    assert no_walks == 0 and walks > (10 if "gpt" in path.name else 0)
    assert merged == rows_merged
    assert text == rows_text
