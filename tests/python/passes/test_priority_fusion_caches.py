"""PriorityFusion keeps, per node and per (producer, consumer) pair, what it
computed (costs, legality, fused times) until the nodes change, and
computes a cost only when every consumer of a producer can fuse. Each
cached answer is held here to the one computed afresh when it is used: a
pair's legality does not read the producer's users (but for a reduction,
which fuses only into a single user), and a cost reads nothing that changes
without its node being forgotten."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_gpu.hlo import module_to_text, parse_file, parse_module
from xla_gpu.hlo.passes import optimization_pipeline, priority_fusion as pf
from xla_gpu.hlo.passes.cost_model import fusion_cost, node_cost, wrapped_fusion_counts
from xla_gpu.hlo.passes.pipeline import PassContext

DATA = Path(__file__).resolve().parents[1] / "hlo_inputs"
MODELS = sorted((DATA / "models").glob("*.hlo")) + sorted(DATA.glob("*.pre.hlo"))


def _fuse(module):
    """The optimization pipeline up to priority fusion (included)."""
    for hlo_pass in optimization_pipeline().passes:
        hlo_pass.run_in(module, PassContext())
        if isinstance(hlo_pass, pf.PriorityFusion):
            return module
    raise AssertionError("no priority fusion in the pipeline")


class _Checked(pf._PriorityFusionRun):
    """The pass, every cached answer a priority is about to read checked
    against the answer computed now."""
    counts: dict = {}

    def _count(self, key):
        _Checked.counts[key] = _Checked.counts.get(key, 0) + 1

    def priority(self, producer):
        if producer.parent is self.comp and self.producer_ok(producer):
            for inst in [producer, *producer.users]:
                cached = self.costs.get(id(inst))
                if cached is not None:
                    self._count("cost")
                    assert node_cost(inst, {}) == cached, inst.name
            for consumer in producer.users:
                before = self.pairs.get(id(producer), {}).get(id(consumer))
                entry = self.legal(producer, consumer)
                if entry is not before:
                    continue   # computed now
                self._count("legal")
                assert self.can_fuse(producer, consumer) == entry[2], \
                    (producer.name, consumer.name)
                if entry[3] is not None:
                    self._count("time")
                    assert pf.fused_time(producer, node_cost(producer, {}), consumer,
                                         node_cost(consumer, {})) == entry[3], \
                        (producer.name, consumer.name)
        return super().priority(producer)


class _Uncached(pf._PriorityFusionRun):
    """The pass without the pair and cost caches."""

    def priority(self, producer):
        self.pairs.clear()
        self.costs.clear()
        return super().priority(producer)


@pytest.fixture
def checked(monkeypatch):
    _Checked.counts = {}
    monkeypatch.setattr(pf, "_PriorityFusionRun", _Checked)
    return _Checked.counts


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_cached_answers_are_the_answers_now(checked, path):
    _fuse(parse_file(str(path)))


def test_the_caches_are_used(checked):
    for path in MODELS:
        _fuse(parse_file(str(path)))
    assert checked.get("legal", 0) > 100
    assert checked.get("time", 0) > 100
    assert checked.get("cost", 0) > 100


def test_same_output_without_the_caches(monkeypatch):
    text = (DATA / "models" / "gpt_adamw_1layer.hlo").read_text()
    cached = module_to_text(_fuse(parse_module(text)))
    monkeypatch.setattr(pf, "_PriorityFusionRun", _Uncached)
    assert module_to_text(_fuse(parse_module(text))) == cached


# A reduction with two users fuses into neither; once it has one, into that
# one (an elementwise epilogue): its earlier verdict, cached, must not be
# reused then.
_REDUCTION_USERS = """
HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[64,128] parameter(0)
  c = f32[] constant(0)
  r = f32[64] reduce(x, c), dimensions={1}, to_apply=add
  d = f32[64] exponential(r)
  ROOT n = f32[64] negate(r)
}
"""


def test_a_reductions_verdict_follows_its_users():
    module = parse_module(_REDUCTION_USERS)
    comp = module.entry
    by_name = {i.name: i for i in comp.instructions}
    r, d, n = by_name["r"], by_name["d"], by_name["n"]
    run = pf._PriorityFusionRun(pf.PriorityFusion(), comp)
    assert not run.legal(r, n)[2]
    comp.remove_instruction(d)
    assert run.legal(r, n)[2]
    assert run.priority(r) is not None


_LOOP_USERS = """
HloModule m

ENTRY e {
  x = f32[64] parameter(0)
  e = f32[64] exponential(x)
  d = f32[64] sine(e)
  ROOT n = f32[64] negate(e)
}
"""


def test_a_loop_producers_verdict_outlives_a_change_of_its_users():
    module = parse_module(_LOOP_USERS)
    comp = module.entry
    by_name = {i.name: i for i in comp.instructions}
    e, d, n = by_name["e"], by_name["d"], by_name["n"]
    run = pf._PriorityFusionRun(pf.PriorityFusion(), comp)
    entry = run.legal(e, n)
    assert entry[2]
    comp.remove_instruction(d)
    assert run.legal(e, n) is entry   # reused: a loop producer fuses into any number


def test_grown_fusion_costs_are_the_walked_ones(monkeypatch):
    """A fusion grown by a lone producer or a fusion gets its cost derived
    from the ones before (`grown_fusion_cost`): each is the one the walk
    gives."""
    derived = []
    grow = pf.grown_fusion_cost

    def checked(cost, counts, operands, producer, fusion, *producer_cost):
        grown = grow(cost, counts, operands, producer, fusion, *producer_cost)
        if grown is not None:
            derived.append(producer.opcode)
            walked, walked_counts = fusion_cost(fusion, {})
            assert grown == (walked, walked_counts), fusion.name
        return grown

    monkeypatch.setattr(pf, "grown_fusion_cost", checked)
    for path in MODELS:
        _fuse(parse_file(str(path)))
    assert derived.count("fusion") > 20 and len(derived) - derived.count("fusion") > 20


def test_absorbed_fusion_costs_are_the_walked_ones(monkeypatch):
    """A fusion that absorbed its consumer gets its cost derived from the
    one before (`absorbed_fusion_cost`): each is the one the walk gives."""
    derived = []
    absorb = pf.absorbed_fusion_cost

    def checked(*args):
        grown = absorb(*args)
        if grown is not None:
            fusion = args[-1]
            derived.append(fusion.name)
            assert grown == fusion_cost(fusion, {}), fusion.name
        return grown

    monkeypatch.setattr(pf, "absorbed_fusion_cost", checked)
    for path in MODELS:
        _fuse(parse_file(str(path)))
    assert len(derived) > 20


_GROWN = """
HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[64,128] parameter(0)
  y = f32[64,128] parameter(1)
  z = f32[128] parameter(2)
  c = f32[] constant(0)
  m = f32[64,128] multiply(x, y)
  b = f32[64,128] broadcast(z), dimensions={1}
  s = f32[64,128] subtract(m, b)
  r = f32[64] reduce(s, c), dimensions={1}, to_apply=add
  ROOT t = f32[64,128] tanh(s)
}
"""


def test_grown_fusion_cost_only_where_the_walk_agrees():
    """Derived for a producer of new operands; refused for one that reads
    an operand the fusion already has (that parameter gains a user), and
    for a body with an op counted apart (its counts divide)."""
    module = parse_module(_GROWN).link()
    by_name = {i.name: i for i in module.entry.instructions}
    tanh = pf.create_fusion(by_name["t"])
    pf.fuse_producer(tanh, by_name["s"])
    cost, counts = fusion_cost(tanh, {})
    assert counts is not None
    before = list(tanh.operands)          # m, b
    pf.fuse_producer(tanh, by_name["b"])  # z: a new operand
    grown = pf.grown_fusion_cost(cost, counts, before, by_name["b"], tanh)
    assert grown is not None and grown == fusion_cost(tanh, {})
    cost, counts = grown
    before = list(tanh.operands)          # m, z
    pf.fuse_producer(tanh, by_name["m"])  # x, y: new operands
    grown = pf.grown_fusion_cost(cost, counts, before, by_name["m"], tanh)
    assert grown is not None and grown == fusion_cost(tanh, {})

    reduce = pf.create_fusion(by_name["r"])
    assert fusion_cost(reduce, {})[1] is None   # a reduce: counted apart

    shared = parse_module(_GROWN.replace("broadcast(z), dimensions={1}", "negate(x)")).link()
    by_name = {i.name: i for i in shared.entry.instructions}
    tanh = pf.create_fusion(by_name["t"])
    pf.fuse_producer(tanh, by_name["s"])
    pf.fuse_producer(tanh, by_name["m"])
    cost, counts = fusion_cost(tanh, {})
    before = list(tanh.operands)          # b, x, y
    pf.fuse_producer(tanh, by_name["b"])  # reads x, already an operand
    assert pf.grown_fusion_cost(cost, counts, before, by_name["b"], tanh) is None


_ABSORBED = """
HloModule m

ENTRY e {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  n = f32[64] negate(x)
  p = f32[64] exponential(n)
  a = f32[64] add(p, y)
  b = f32[8,64] broadcast(p), dimensions={1}
  ROOT t = (f32[64], f32[8,64]) tuple(a, b)
}
"""


@pytest.mark.parametrize("consumer", ["a", "b"])
def test_absorbed_fusion_cost_only_where_the_walk_agrees(consumer):
    """Derived for an elementwise consumer (it reads the old root once per
    element, as the old walk started it); refused for a broadcast, which
    reads it 8 times per element (all its counts would be 8 times theirs)."""
    module = parse_module(_ABSORBED).link()
    by_name = {i.name: i for i in module.entry.instructions}
    producer = pf.create_fusion(by_name["p"])
    pf.fuse_producer(producer, by_name["n"])
    cost, counts = fusion_cost(producer, {})
    before = (cost, counts, list(producer.operands), 64)
    other = by_name["b" if consumer == "a" else "a"]
    other.replace_operand_with(0, by_name["y"] if consumer == "b" else by_name["x"])
    fusion = pf.absorb_consumer(producer, by_name[consumer])
    grown = pf.absorbed_fusion_cost(*before, by_name[consumer], fusion)
    if consumer == "a":
        assert grown is not None and grown == fusion_cost(fusion, {})
    else:
        assert grown is None


def test_wrapped_fusion_counts_are_the_walked_ones():
    """A lone consumer's cost stands for the fusion `create_fusion` wraps
    around it (`wrapped_fusion_counts`, so that the fusion grown from it
    gets its cost derived too): where the counts are given, the cost and
    counts are the ones the walk of that fusion gives."""
    derived = refused = 0
    for path in MODELS[:6]:
        module = parse_file(str(path))
        for hlo_pass in optimization_pipeline().passes:
            if isinstance(hlo_pass, pf.PriorityFusion):
                break
            hlo_pass.run_in(module, PassContext())
        for inst in list(module.entry.instructions):
            if inst.parent is None or inst.opcode in ("parameter", "tuple") or \
                    inst is module.entry.root or not pf.is_fusible(inst):
                continue
            cost = node_cost(inst, {})
            counts = wrapped_fusion_counts(inst, cost)
            if counts is None:
                refused += 1
                continue
            derived += 1
            fusion = pf.create_fusion(inst)
            assert fusion_cost(fusion, {}) == (cost, counts), inst.name
    assert derived > 50 and refused > 5


_CONSTANT_READ = """
HloModule m

ENTRY e {
  x = f32[64,128] parameter(0)
  y = f32[64,128] parameter(1)
  c = f32[] constant(2)
  k = f32[64,128] broadcast(c), dimensions={}
  m = f32[64,128] multiply(x, k)
  s = f32[64,128] add(m, y)
  ROOT t = f32[64,128] tanh(s)
}
"""


def test_grown_fusion_cost_of_a_producer_reading_a_scalar_constant():
    """A producer's scalar-constant operand is cloned into the fusion, not
    made a parameter: the grown cost is derived without it (the walk gives
    the clone no parameter count and no flops)."""
    module = parse_module(_CONSTANT_READ).link()
    by_name = {i.name: i for i in module.entry.instructions}
    tanh = pf.create_fusion(by_name["t"])
    pf.fuse_producer(tanh, by_name["s"])
    for name in ("m", "k"):
        cost, counts = fusion_cost(tanh, {})
        before = list(tanh.operands)
        pf.fuse_producer(tanh, by_name[name])
        grown = pf.grown_fusion_cost(cost, counts, before, by_name[name], tanh)
        assert grown is not None and grown == fusion_cost(tanh, {}), name
        assert all(o.opcode != "constant" for o in tanh.operands)


def test_loop_epilogue_verdicts_are_the_trials(monkeypatch):
    """A transpose producer fused into a loop consumer that no hero walk
    enters is accepted for the loop emitter without a trial body
    (`loop_epilogue`): each such verdict is the trial's."""
    compared = []
    shortcut = pf._PriorityFusionRun.loop_epilogue

    def checked(self, producer, consumer):
        taken = shortcut(self, producer, consumer)
        if taken:
            scratch = pf._scratch_body(consumer, producer)
            trial = pf.body_acceptable(scratch)
            pf.release_trial(scratch)
            assert (trial.kind, trial.ok, trial.hero_kind, trial.reads_parameter_types,
                    trial.plain) == ("loop", True, "loop", False, False), \
                (producer.name, consumer.name)
            # The consumer's heroes (the trial's are their clones).
            assert [h.opcode for h in trial.heroes] == \
                [h.opcode for h in self.info(consumer).heroes], (producer.name, consumer.name)
            compared.append(consumer.name)
        return taken

    monkeypatch.setattr(pf._PriorityFusionRun, "loop_epilogue", checked)
    for path in MODELS:
        _fuse(parse_file(str(path)))
    assert len(compared) > 20


class _WideChecked(pf._PriorityFusionRun):
    """The pass, each priority of a producer with many consumers (from the
    terms kept since its last evaluation) checked against the one computed
    from every consumer now."""
    checked = 0

    def _wide_priority(self, producer, consumers, vp):
        kept = super()._wide_priority(producer, consumers, vp)
        self.wide.pop(id(producer), None)
        fresh = super()._wide_priority(producer, consumers, vp)
        assert kept == fresh, producer.name
        _WideChecked.checked += 1
        return kept


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_wide_producers_priorities_are_the_priorities_now(monkeypatch, path):
    text = path.read_text()
    monkeypatch.setattr(pf, "WIDE_PRODUCER_CONSUMERS", 10 ** 9)
    plain = module_to_text(_fuse(parse_module(text)))
    monkeypatch.setattr(pf, "WIDE_PRODUCER_CONSUMERS", 2)
    _WideChecked.checked = 0
    monkeypatch.setattr(pf, "_PriorityFusionRun", _WideChecked)
    assert module_to_text(_fuse(parse_module(text))) == plain
    if path.name == "gpt_adamw_1layer.hlo":
        assert _WideChecked.checked > 100
