"""The fusion passes answer their most frequent questions without the
general machinery: the loop emitter for bodies of plain elementwise ops
(no trial analysis), a producer-consumer fusion's time without building its
cost, the instruction order sorted only after what a rewrite moved, a DCE
that skips computations without dead code, trial bodies unlinked once
analysed. Each shortcut is held here to the general answer it replaces."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from xla_gpu.hlo import module_to_text, parse_file, parse_module
from xla_gpu.hlo.module import NameUniquer
from xla_gpu.hlo.passes import fusion_utils, optimize
from xla_gpu.hlo.passes.cost_model import fused_cost, fused_time, node_cost
from xla_gpu.hlo.passes.fusion_utils import (body_acceptable, create_fusion, fuse_producer,
                                             is_fusible, release_trial)
from xla_gpu.hlo.passes.priority_fusion import _scratch_body

DATA = Path(__file__).resolve().parents[1]
GPT = DATA / "hlo_inputs" / "models" / "gpt_adamw_1layer.hlo"


@pytest.fixture(scope="module")
def gpt():
    return parse_file(str(GPT))


def _pairs(module, limit=400):
    """(producer, consumer) pairs of fusible instructions of the ENTRY."""
    out = []
    for inst in module.entry.instructions:
        if not is_fusible(inst) or inst.shape.is_tuple or inst.opcode == "constant":
            continue
        for user in dict.fromkeys(inst.users):
            if is_fusible(user) and not user.shape.is_tuple:
                out.append((inst, user))
    return out[:limit]


def test_fused_time_is_the_fused_costs_time(gpt):
    pairs = _pairs(gpt)
    assert len(pairs) > 100
    for producer, consumer in pairs:
        pc, cc = node_cost(producer), node_cost(consumer)
        assert fused_time(producer, pc, consumer, cc) == fused_cost(producer, pc, consumer, cc).time


def _full_analysis(monkeypatch, body):
    with monkeypatch.context() as m:
        m.setattr(fusion_utils, "_plain_loop_body", lambda b: False)
        return body_acceptable(body)


def test_plain_loop_bodies_get_what_the_analysis_gives(monkeypatch, gpt):
    plain = 0
    for producer, consumer in _pairs(gpt):
        body = _scratch_body(consumer, producer)
        fast = body_acceptable(body)
        full = _full_analysis(monkeypatch, body)
        assert (fast.kind, fast.ok, fast.hero_kind) == (full.kind, full.ok, full.hero_kind)
        assert [id(h) for h in fast.heroes] == [id(h) for h in full.heroes]
        plain += fusion_utils._plain_loop_body(body)
    assert plain > 50   # the shortcut was taken


@pytest.mark.parametrize("opcode", ["reduce", "transpose", "concatenate", "slice", "map",
                                    "dynamic-update-slice"])
def test_bodies_with_other_heroes_are_analysed(opcode):
    assert opcode not in fusion_utils._PLAIN_LOOP_OPCODES


def test_release_trial_unlinks_the_body(gpt):
    producer, consumer = _pairs(gpt)[0]
    body = _scratch_body(consumer, producer)
    insts = list(body.instructions)
    info = body_acceptable(body)
    release_trial(body)
    assert body.root is None and len(body) == 0
    assert all(not i.users and not i.operands and i.parent is None for i in insts)
    assert info.ok and info.heroes   # the answer stays readable


def _fused_bodies(module):
    """Fuses, into each elementwise consumer of the ENTRY, its first
    elementwise producer, the way PriorityFusion does."""
    fused = []
    comp = module.entry
    for producer, consumer in _pairs(module, limit=60):
        if producer.parent is not comp or consumer.parent is not comp:
            continue
        if len(producer.users) != 1 or producer.opcode in ("parameter", "reduce") or \
                consumer.opcode == "reduce":
            continue
        fusion = consumer if consumer.opcode == "fusion" else create_fusion(consumer)
        body = fusion.attrs["calls"]
        body.instructions   # sorted before the rewrite
        fuse_producer(fusion, producer)
        comp.remove_instruction(producer)
        fused.append(body)
    return fused


def test_fusing_a_producer_orders_the_body_as_the_sort_does(monkeypatch):
    bodies = _fused_bodies(parse_file(str(GPT)).link())
    assert len(bodies) > 5
    assert not any(b._unordered for b in bodies)   # ordered without a sort
    with monkeypatch.context() as m:
        m.setattr(fusion_utils, "_order_fused_producer", lambda *args: None)
        sorted_bodies = _fused_bodies(parse_file(str(GPT)).link())
    assert all(b._unordered for b in sorted_bodies)
    assert [[i.name for i in b.instructions] for b in bodies] == \
        [[i.name for i in b.instructions] for b in sorted_bodies]


def test_a_merge_keeps_the_order_before_the_merged_pair(monkeypatch):
    kept = []
    restore = type(parse_module(DEAD).entry)._restore_order

    def checked(comp):
        start = comp._valid_prefix
        if start:
            saved = list(comp._instructions)
            comp._valid_prefix = 0
            restore(comp)
            full = comp._instructions
            comp._instructions, comp._unordered, comp._valid_prefix = saved, True, start
            kept.append(start)
            restore(comp)
            assert [i.name for i in comp._instructions] == [i.name for i in full]
        else:
            restore(comp)

    monkeypatch.setattr(type(parse_module(DEAD).entry), "_restore_order", checked)
    optimize(parse_file(str(GPT)), gemm_fusion_max_multiply_adds=1 << 19)
    assert len(kept) > 10


def test_any_other_change_drops_the_kept_prefix():
    module = parse_file(str(GPT)).link()
    comp = module.entry
    comp._mark_unordered()
    comp._keep_order_before(5)
    assert comp._valid_prefix == 5
    comp._mark_unordered()
    assert comp._valid_prefix == 0
    comp._keep_order_before(5)
    dead = comp.add("constant", comp.parameters[0].shape.__class__("f32", (), None), [])
    comp.remove_instruction(dead)
    assert comp._valid_prefix == 0
    comp.instructions
    comp._keep_order_before(5)   # an ordered computation keeps no hint
    assert comp._valid_prefix == 0


DEAD = """
HloModule dead

ENTRY main {
  p = f32[4] parameter(0)
  a = f32[4] add(p, p)
  b = f32[4] multiply(a, a)
  c = f32[4] negate(b)
  ROOT r = f32[4] exponential(p)
}
"""


def test_dce_still_removes_dead_chains_and_skips_live_computations():
    module = parse_module(DEAD)
    comp = module.entry
    assert comp.remove_dead() == 3
    assert [i.name for i in comp.instructions] == ["p", "r"]
    assert comp.remove_dead() == 0


def test_name_table_built_at_once_matches_reserving_one_by_one():
    names = ["add", "add.1", "add.7", "x.y.3", "p.0", ".5", "a.", "fusion.10", "fusion.2",
             "fusion", "b.007", "add.3"]
    bulk = NameUniquer(names)
    one = NameUniquer()
    for n in names:
        one.reserve(n)
    assert bulk.used == one.used and bulk.next_id == one.next_id
    assert [bulk.get("add") for _ in range(3)] == [one.get("add") for _ in range(3)]


def test_optimize_pauses_and_restores_the_collector(monkeypatch):
    module = parse_module(DEAD)
    states = []
    from xla_gpu.hlo.passes.dce import HloDCE
    run = HloDCE.run

    def spy(self, m):
        states.append(gc.isenabled())
        return run(self, m)

    monkeypatch.setattr(HloDCE, "run", spy)
    assert gc.isenabled()
    optimize(module)
    assert gc.isenabled() and states and not any(states)
    gc.disable()
    try:
        optimize(module)
        assert not gc.isenabled()   # a caller's own setting is kept
    finally:
        gc.enable()


def test_overlapping_pipelines_leave_the_garbage_collector_on():
    """Two pipelines on two threads, the second starting before the first
    ends and ending after it: the collector stays paused while either runs
    (a per-call save and restore turns it back on under the second) and is
    on again after both."""
    import gc
    import threading

    from xla_gpu.hlo.passes.optimize import cyclic_gc_paused
    assert gc.isenabled()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with cyclic_gc_paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second():
        first_in.wait(10)
        with cyclic_gc_paused():
            second_in.set()
            first_out.wait(10)
            seen["while_second_runs"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"while_second_runs": False}
    assert gc.isenabled()


LATE_PARAMETER = """
HloModule late
fused {
  param_0 = f32[4] parameter(0)
  n = f32[4] negate(param_0)
  param_1 = f32[4] parameter(1)
  ROOT a = f32[4] add(n, param_1)
}
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  m = f32[4] multiply(x, y)
  ROOT f = f32[4] fusion(m, y), kind=kLoop, calls=fused
}
"""


def test_fusing_moves_a_later_parameter_the_producer_reads_as_the_sort_does():
    # The producer reads `y`, already the fusion's parameter 1, which the
    # body lists after the first reader of the fused value: the ordering
    # without a sort must move it before that reader, as the sort does.
    module = parse_module(LATE_PARAMETER).link()
    fusion = module.entry.root
    body = fusion.attrs["calls"]
    body.instructions
    fuse_producer(fusion, fusion.operands[0])
    assert not body._unordered
    got = [i.name for i in body._instructions]
    body._mark_unordered()
    assert got == [i.name for i in body.instructions]
    assert got.index("param_1") < got.index("n")


def test_a_changed_body_is_not_fused_through_a_stale_parameter_table():
    # fuse_producer keeps the body's parameters between calls; a body
    # changed by other means (its parameter 0 replaced) must be seen anew.
    from xla_gpu.hlo.module import HloInstruction

    def fused(stale_table: bool) -> str:
        module = parse_module(LATE_PARAMETER).link()
        fusion = module.entry.root
        body = fusion.attrs["calls"]
        fusion_utils._fusion_parameters(fusion)   # the table is kept
        old = body.parameter(0)
        new = body.add_instruction(HloInstruction.create_parameter(0, old.shape, "param_0"))
        old.replace_all_uses_with(new)
        body.remove_instruction(old)
        if not stale_table:
            del body._fusion_params
        fuse_producer(fusion, fusion.operands[0])
        module.entry.remove_instruction(module.entry.instructions[2])
        return module_to_text(module)

    assert fused(stale_table=True) == fused(stale_table=False)


def test_an_order_kept_whole_is_read_without_a_sort():
    module = parse_file(str(GPT)).link()
    comp = module.entry
    expected = [i.name for i in comp.instructions]
    comp._mark_unordered()
    comp._keep_order_before(len(comp))
    assert [i.name for i in comp.instructions] == expected
    assert not comp._unordered and comp._valid_prefix == 0
