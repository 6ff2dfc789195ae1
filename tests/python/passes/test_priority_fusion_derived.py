"""PriorityFusion answers most of its emitter questions without building a
trial body: a hero-free producer fused into a fusion keeps the consumer's
verdict (`substitutes`), a reduction fused into a consumer its hero walks
never reach is refused (`refused_epilogue`), and two plain loop bodies make
a plain one. Each shortcut is held here to the answer it replaces: the
trial body's analysis, and `body_acceptable` of the fusion actually built."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_gpu.analysis.reduction import reduction_shared_bytes, reduction_shared_need
from xla_gpu.analysis.fusion import choose_emitter, fusion_roots
from xla_gpu.hlo import module_to_text, parse_file, parse_module
from xla_gpu.hlo.passes import optimize, priority_fusion as pf
from xla_gpu.hlo.passes.fusion_utils import body_acceptable, release_trial

DATA = Path(__file__).resolve().parents[1] / "hlo_inputs"
MODELS = sorted((DATA / "models").glob("*.hlo")) + sorted(DATA.glob("*.pre.hlo"))


def _trial(producer, consumer):
    body = pf._scratch_body(consumer, producer)
    info = body_acceptable(body)
    release_trial(body)
    return info


class _Checked(pf._PriorityFusionRun):
    """The pass, every shortcut answer checked against the general one."""
    counts: dict = {}

    def _count(self, key):
        _Checked.counts[key] = _Checked.counts.get(key, 0) + 1

    def substitutes(self, producer, consumer, c_info):
        used = super().substitutes(producer, consumer, c_info)
        if used:
            self._count("substitutes")
            t = _trial(producer, consumer)
            assert (t.kind, t.ok, t.hero_kind, t.reads_parameter_types) == \
                (c_info.kind, True, c_info.hero_kind, c_info.reads_parameter_types), \
                (producer.name, consumer.name)
        return used

    def refused_epilogue(self, producer, consumer):
        refused = super().refused_epilogue(producer, consumer)
        if refused:
            self._count("refused")
            t = _trial(producer, consumer)
            assert not (t.ok and t.kind == "reduction"), (producer.name, consumer.name)
        return refused

    def _check_built(self, before):
        for inst in self.comp._instructions:
            info = self.infos.get(id(inst))
            if inst.opcode != "fusion" or info is None or before.get(id(inst)) is info:
                continue
            self._count("built")
            full = body_acceptable(inst.attrs["calls"])
            assert (full.kind, full.ok, full.hero_kind, full.plain,
                    full.reads_parameter_types) == \
                (info.kind, info.ok, info.hero_kind, info.plain,
                 info.reads_parameter_types), inst.name

    def fuse_everywhere(self, producer):
        before = dict(self.infos)
        super().fuse_everywhere(producer)
        self._check_built(before)

    def absorb(self, producer, consumer):
        before = dict(self.infos)
        super().absorb(producer, consumer)
        self._check_built(before)


@pytest.fixture
def checked(monkeypatch):
    _Checked.counts = {}
    monkeypatch.setattr(pf, "_PriorityFusionRun", _Checked)
    return _Checked.counts


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_shortcuts_give_the_general_answer(checked, path):
    optimize(parse_file(str(path)))


def test_the_shortcuts_are_taken(checked):
    for path in MODELS:
        optimize(parse_file(str(path)))
    assert checked.get("substitutes", 0) > 20
    assert checked.get("refused", 0) > 5


def test_same_output_with_and_without_the_shortcuts(monkeypatch):
    """The optimized module is the one the trial bodies give."""
    text = (DATA / "models" / "gpt_adamw_1layer.hlo").read_text()
    fast = module_to_text(optimize(parse_module(text)))
    monkeypatch.setattr(pf._PriorityFusionRun, "substitutes", lambda self, p, c, i: False)
    monkeypatch.setattr(pf._PriorityFusionRun, "refused_epilogue", lambda self, p, c: False)
    monkeypatch.setattr(pf._PriorityFusionRun, "_substituted_info", lambda self, p, c: None)
    monkeypatch.setattr(pf, "_plain_info", lambda f: pf.body_acceptable(f.attrs["calls"]))
    slow = module_to_text(optimize(parse_module(text)))
    assert fast == slow


# A trivial producer (a broadcast of a scalar) changes what find_hero walks
# through: the consumer's verdict is reused only when no walk looks at it.
_TRIVIAL = """
HloModule m

fused_reduce {
  p0 = f32[64,128] parameter(0)
  p1 = f32[64,128] parameter(1)
  m = f32[64,128] multiply(p0, p1)
  c = f32[] constant(0)
  ROOT r = f32[64] reduce(m, c), dimensions={1}, to_apply=add
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[64,128] parameter(0)
  s = f32[] parameter(1)
  b = f32[64,128] broadcast(s), dimensions={}
  ROOT f = f32[64] fusion(x, b), kind=kInput, calls=fused_reduce
}
"""


def _run(module):
    return pf._PriorityFusionRun(pf.PriorityFusion(), module.entry)


def test_trial_view_of_a_trivial_producer():
    module = parse_module(_TRIVIAL)
    entry = module.entry
    b = next(i for i in entry.instructions if i.name == "b")
    f = next(i for i in entry.instructions if i.name == "f")
    view = pf._TrialView(b, f)
    assert view.producer_trivial          # a broadcast of a rank-0 value
    assert view.walks() == (False, False)   # the root is the reduce: no walk
    run = _run(module)
    c_info = run.info(f)
    assert c_info.kind == "reduction"
    assert run.substitutes(b, f, c_info)
    t = _trial(b, f)
    assert (t.kind, t.ok) == ("reduction", True)


def test_row_and_column_reductions_say_whether_parameters_count():
    row = parse_module(_TRIVIAL)
    body = next(c for c in row.computations if c.name == "fused_reduce")
    choice = choose_emitter(fusion_roots(body))
    types = [p.shape.element_type for p in body.parameters]
    need, reads = reduction_shared_need(choice.roots, choice.heroes, types)
    assert not reads and need == reduction_shared_bytes(choice.roots, choice.heroes, types)
    column = parse_module(_TRIVIAL.replace("dimensions={1}, to_apply", "dimensions={0}, "
                                           "to_apply").replace("f32[64] reduce", "f32[128] reduce")
                          .replace("ROOT f = f32[64]", "ROOT f = f32[128]"))
    body = next(c for c in column.computations if c.name == "fused_reduce")
    choice = choose_emitter(fusion_roots(body))
    need, reads = reduction_shared_need(choice.roots, choice.heroes, types)
    assert reads and need == reduction_shared_bytes(choice.roots, choice.heroes, types)


_INNER_REDUCE = """
HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused_reduce {
  p0 = f32[64,128] parameter(0)
  e = f32[64,128] exponential(p0)
  c = f32[] constant(0)
  ROOT r = f32[64] reduce(e, c), dimensions={1}, to_apply=add
}

ENTRY e {
  x = f32[64,128,64] parameter(0)
  z = f32[] constant(0)
  r1 = f32[64,128] reduce(x, z), dimensions={2}, to_apply=add
  ROOT f = f32[64] fusion(r1), kind=kInput, calls=fused_reduce
}
"""


def test_a_producer_with_a_hero_gets_a_trial():
    """A reduce fused into a reduction's input would be computed again per
    element read: the trial is refused, so the consumer's verdict (the
    reduction emitter takes it) must not be reused."""
    module = parse_module(_INNER_REDUCE)
    entry = module.entry
    r1 = next(i for i in entry.instructions if i.name == "r1")
    f = next(i for i in entry.instructions if i.name == "f")
    run = _run(module)
    c_info = run.info(f)
    assert (c_info.kind, c_info.ok) == ("reduction", True)
    assert not run.substitutes(r1, f, c_info)
    assert not _trial(r1, f).ok
    assert not run.can_fuse(r1, f)
