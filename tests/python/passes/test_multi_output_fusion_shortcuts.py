"""MultiOutputFusion decides most pairs without building their merged body:
`_surely_refused` refuses from shapes and heroes what `_shapes_compatible`
would refuse (asked before whether either reaches the other), reachability
far past the rows built is a walk of the graph, the scans look again only
at the instructions a merge changed, an accepted trial body becomes the
merged fusion's body, and the order after a merge is made where it
changed. Each shortcut is held here to the plain rule it replaces: a trial
body for every pair, reachability from rows only, every round scanning the
whole computation, every merged body built again, the computation's own
sort."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_gpu.analysis.fusion import find_hero
from xla_gpu.hlo import module_to_text, parse_file, parse_module
from xla_gpu.hlo.passes import multi_output_fusion, optimize
from xla_gpu.hlo.passes.fusion_utils import fusion_roots
from xla_gpu.hlo.passes.multi_output_fusion import MultiOutputFusion

DATA = Path(__file__).resolve().parents[1]
PROGRAMS = [
    DATA / "hlo_inputs" / "models" / "gpt_adamw_1layer.hlo",
    DATA / "programs" / "adam_step" / "before_optimizations.hlo",
    DATA / "programs" / "transformer_block" / "before_optimizations.hlo",
]
GEMM_BOUND = 1 << 19   # the cpu target's, as the compiler runs it


def _optimized(path: Path) -> str:
    return module_to_text(optimize(parse_file(str(path)),
                                   gemm_fusion_max_multiply_adds=GEMM_BOUND))


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.parent.name)
def test_the_precheck_refuses_only_what_the_trial_refuses(monkeypatch, path):
    asked = {"sure": 0, "accepted": 0}

    def both(self, first, second):
        sure = multi_output_fusion._surely_refused(self._side(first), self._side(second))
        ok = multi_output_fusion._merge_acceptable(first, second)
        assert not (sure and ok), f"{first.name} + {second.name} refused, the trial accepts"
        asked["sure"] += sure
        asked["accepted"] += ok
        return ok

    # Every pair reaches the trial: the precheck's verdict is taken there.
    monkeypatch.setattr(MultiOutputFusion, "_refused_by_sides", lambda self, a, b: False)
    monkeypatch.setattr(MultiOutputFusion, "_acceptable", both)
    _optimized(path)
    if path.name == "gpt_adamw_1layer.hlo":
        assert asked["sure"] > 20 and asked["accepted"] > 20


class _Everything:
    """A pending set holding every instruction: the scans look at all."""

    def __contains__(self, key) -> bool:
        return True

    def discard(self, key) -> None:
        pass

    def update(self, keys) -> None:
        pass


def _merges(monkeypatch, path: Path, plain: bool) -> tuple[str, list[tuple[str, str]], int]:
    """The optimized module, the merges in order, and how many merged
    bodies were adopted trials; `plain`: with no shortcut (a trial for
    every pair, released; every round looking at every instruction; the
    computation sorted by its own sort)."""
    merged: list[tuple[str, str]] = []
    adopted = [0]
    merge, one_merge = MultiOutputFusion._merge, MultiOutputFusion._one_merge
    merge_bodies = multi_output_fusion.merge_fusions

    def logged(self, first, second):
        merged.append((first.name, second.name))
        merge(self, first, second)

    def counted(first, second, name="fusion", trial=None):
        adopted[0] += trial is not None
        return merge_bodies(first, second, name, trial)

    def rescanning(self, comp):
        self._consumers_pending = _Everything()
        self._shared_pending = _Everything()
        self._consumer_settled.clear()
        self._siblings.clear()
        self._mergeable.clear()
        return one_merge(self, comp)

    with monkeypatch.context() as m:
        m.setattr(MultiOutputFusion, "_merge", logged)
        m.setattr(multi_output_fusion, "merge_fusions", counted)
        if plain:
            m.setattr(multi_output_fusion, "_common_prefix", lambda before, after: 0)
            m.setattr(MultiOutputFusion, "_one_merge", rescanning)
            m.setattr(MultiOutputFusion, "_refused_by_sides", lambda self, a, b: False)
            m.setattr(MultiOutputFusion, "_acceptable",
                      lambda self, a, b: multi_output_fusion._merge_acceptable(a, b))
            # Reachability from rows only, however far ahead of those built.
            m.setattr(multi_output_fusion, "_ROWS_BUILT_AHEAD", 1 << 60)
            m.setattr(multi_output_fusion, "_sorted_after_merge", lambda *args: None)
        text = _optimized(path)
    return text, merged, adopted[0]


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.parent.name)
def test_the_shortcuts_change_no_merge(monkeypatch, path):
    text, merged, adopted = _merges(monkeypatch, path, plain=False)
    plain_text, plain_merged, plain_adopted = _merges(monkeypatch, path, plain=True)
    assert merged == plain_merged
    assert text == plain_text
    assert plain_adopted == 0
    if path.name == "gpt_adamw_1layer.hlo":
        assert len(merged) > 20 and adopted > 20


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.parent.name)
def test_the_order_after_a_merge_is_the_sorts(monkeypatch, path):
    placed, wide_readers = [], []
    order_after = multi_output_fusion._sorted_after_merge

    def checked(insts, kept, readers, removed_at, positions, fusion):
        # (a reader of many operands, as the program's root tuple, is
        # searched for its new operands alone)
        wide_readers.extend(r for r in readers if len(r.operands) > 8)
        order = order_after(insts, kept, readers, removed_at, positions, fusion)
        comp = fusion.parent
        saved = comp._instructions, comp._unordered, comp._valid_prefix
        comp._instructions, comp._unordered, comp._valid_prefix = list(insts), True, 0
        comp._restore_order()   # the whole sort
        full = comp._instructions
        comp._instructions, comp._unordered, comp._valid_prefix = saved
        assert order is not None
        assert [i.name for i in order] == [i.name for i in full]
        placed.append(len(order))
        return order

    monkeypatch.setattr(multi_output_fusion, "_sorted_after_merge", checked)
    _optimized(path)
    if path.name == "gpt_adamw_1layer.hlo":
        assert len(placed) > 20
        assert wide_readers


def test_the_hero_walk_is_find_heros():
    module = optimize(parse_file(str(PROGRAMS[0])), gemm_fusion_max_multiply_adds=GEMM_BOUND)
    roots = [r for inst in module.entry.instructions if inst.opcode == "fusion"
             for r in fusion_roots(inst.attrs["calls"]) if not r.shape.is_tuple]
    assert len(roots) > 50
    for r in roots:
        assert multi_output_fusion._hero_walk(r)[0] is find_hero(r)


# A reduction read by two loop fusions of its output's shape. Merged with
# the reduction, `neg`'s root reads the reduce itself, which becomes its
# hero: the merged body is a reduction with an epilogue. In `neg`'s own
# body the root is its own hero (its operand a parameter), of a shape
# other than the reduce input's, which a reduction emitter takes only from
# a reduce's epilogue: a check reading the heroes there would refuse it.
REDUCE_READ_TWICE = """
HloModule m

region_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused_reduce {
  p0 = f32[512,256] parameter(0)
  c0 = f32[] constant(0)
  ROOT r = f32[256] reduce(p0, c0), dimensions={0}, to_apply=region_add
}

fused_neg {
  q0 = f32[256] parameter(0)
  ROOT n = f32[256] negate(q0)
}

fused_exp {
  e0 = f32[256] parameter(0)
  ROOT e = f32[256] exponential(e0)
}

ENTRY main {
  x = f32[512,256] parameter(0)
  red = f32[256] fusion(x), kind=kInput, calls=fused_reduce
  neg = f32[256] fusion(red), kind=kLoop, calls=fused_neg
  ex = f32[256] fusion(red), kind=kLoop, calls=fused_exp
  ROOT t = (f32[256], f32[256]) tuple(neg, ex)
}
"""


def test_a_consumer_whose_hero_becomes_the_reduce_is_not_refused_early():
    module = parse_module(REDUCE_READ_TWICE).link()
    red, neg = module.entry.find("red"), module.entry.find("neg")
    sides = multi_output_fusion._Side(red), multi_output_fusion._Side(neg)
    assert sides[1].heroes[0].opcode == "negate"   # in its own body
    assert multi_output_fusion._merge_acceptable(red, neg)
    assert not multi_output_fusion._surely_refused(*sides)
    assert MultiOutputFusion().run(module)
    merged = [i for i in module.entry.instructions if i.opcode == "fusion" and i.shape.is_tuple]
    assert len(merged) == 1
    assert sorted(r.opcode for r in fusion_roots(merged[0].attrs["calls"])) == \
        ["negate", "reduce"]


# Two loop fusions of one operand whose outputs have different shapes: no
# emitter takes them together, which the precheck says without a trial.
SIBLINGS_OF_TWO_SHAPES = """
HloModule m

fused_a {
  a0 = f32[64,32] parameter(0)
  ROOT a1 = f32[64,32] exponential(a0)
}

fused_b {
  b0 = f32[64,32] parameter(0)
  ROOT b1 = f32[2048] bitcast(b0)
}

ENTRY main {
  x = f32[64,32] parameter(0)
  fa = f32[64,32] fusion(x), kind=kLoop, calls=fused_a
  fb = f32[2048] fusion(x), kind=kLoop, calls=fused_b
  ROOT t = (f32[64,32], f32[2048]) tuple(fa, fb)
}
"""


def test_siblings_of_two_shapes_are_refused_without_a_trial(monkeypatch):
    module = parse_module(SIBLINGS_OF_TWO_SHAPES).link()
    fa, fb = module.entry.find("fa"), module.entry.find("fb")
    assert not multi_output_fusion._merge_acceptable(fa, fb)
    assert multi_output_fusion._surely_refused(multi_output_fusion._Side(fa),
                                               multi_output_fusion._Side(fb))
    trials = []
    trial_merge = multi_output_fusion.trial_merge

    def recorded(first, second):
        trials.append((first.name, second.name))
        return trial_merge(first, second)

    monkeypatch.setattr(multi_output_fusion, "trial_merge", recorded)
    refused = []
    surely = multi_output_fusion._surely_refused

    def logged(first_side, second_side):
        answer = surely(first_side, second_side)
        refused.append((first_side.inst.name, second_side.inst.name, answer))
        return answer

    monkeypatch.setattr(multi_output_fusion, "_surely_refused", logged)
    assert not MultiOutputFusion().run(module)
    assert refused == [("fa", "fb", True)] and trials == []
