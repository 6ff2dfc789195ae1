"""The shortcuts the simplification passes take to do less work per run:
CSE's (opcode, operands) buckets and late fusion-body texts, the passes'
dead-code walk, DCE's reachability test, and the garbage collector's
pause around the pipeline. Each test fails when its shortcut gives another
answer than the full work would."""

from __future__ import annotations

import gc

from xla_gpu.hlo import module_to_text, parse_module
from xla_gpu.hlo.passes import HloCSE, HloDCE, optimize
from xla_gpu.hlo.passes.cse import _BodyKeys
from xla_gpu.hlo.graph import reachable
from xla_gpu.hlo.passes.dce import _has_unreachable_computations
from xla_gpu.hlo.passes.util import has_side_effect, program_computations


def _cse(text: str):
    module = parse_module(text).link()
    changed = HloCSE().run(module)
    return module, changed


def _ops(comp, opcode):
    return [i for i in comp.instructions if i.opcode == opcode]


def test_cse_merges_a_pair_that_meets_only_after_an_earlier_merge():
    # add2 reads c, a duplicate of a: it equals add1 only once c is
    # merged into a, after add1 was visited alone in its bucket.
    module, changed = _cse("""
HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  a = f32[4] negate(p)
  add1 = f32[4] add(a, q)
  c = f32[4] negate(p)
  add2 = f32[4] add(c, q)
  ROOT t = (f32[4], f32[4]) tuple(add1, add2)
}
""")
    assert changed
    root = module.entry.root
    assert root.operands[0] is root.operands[1]
    assert len(_ops(module.entry, "add")) == 1 and len(_ops(module.entry, "negate")) == 1


def test_cse_bucket_keeps_every_distinct_instruction_of_one_operand_list():
    # Three slices of one parameter: the third equals the second, not the
    # first one the bucket began with.
    module, changed = _cse("""
HloModule m
ENTRY e {
  p = f32[8] parameter(0)
  s1 = f32[2] slice(p), slice={[0:2]}
  s2 = f32[2] slice(p), slice={[2:4]}
  s3 = f32[2] slice(p), slice={[2:4]}
  s4 = f32[2] slice(p), slice={[0:2]}
  ROOT t = (f32[2], f32[2], f32[2], f32[2]) tuple(s1, s2, s3, s4)
}
""")
    assert changed
    a, b, c, d = module.entry.root.operands
    assert a is d and b is c and a is not b
    assert [i.name for i in _ops(module.entry, "slice")] == ["s1", "s2"]


_FUSIONS = """
HloModule m
f1 {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}
f2 {
  y = f32[4] parameter(0)
  ROOT m = f32[4] negate(y)
}
f3 {
  z = f32[4] parameter(0)
  ROOT e = f32[4] exponential(z)
}
ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] fusion(p), kind=kLoop, calls=f1
  b = f32[4] fusion(p), kind=kLoop, calls=f2
  c = f32[4] fusion(p), kind=kLoop, calls=f3
  ROOT t = (f32[4], f32[4], f32[4]) tuple(a, b, c)
}
"""


def test_cse_compares_fusion_bodies_printed_late():
    module, changed = _cse(_FUSIONS)
    assert changed
    a, b, c = module.entry.root.operands
    assert a is b          # equal bodies under other names
    assert c is not a      # another body


def test_late_body_texts_only_where_no_rewrite_can_touch_them():
    module = parse_module(_FUSIONS).link()
    program = program_computations(module)
    bodies = {id(c): c for c in module.computations if not c.is_entry}
    comps = program + list(bodies.values())
    assert _BodyKeys(bodies).lazy_is_safe(program, comps)
    # A body whose instruction calls a computation the run rewrites: the
    # late text could differ from the one the module began with.
    tricky = parse_module("""
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
f1 {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=f2
}
f2 {
  u = f32[] parameter(0)
  v = f32[] parameter(1)
  ROOT w = f32[] add(u, v)
}
ENTRY e {
  p = f32[4] parameter(0)
  q = f32[] parameter(1)
  a = f32[] fusion(p), kind=kInput, calls=f1
  b = f32[] fusion(q, q), kind=kLoop, calls=f2
  ROOT t = (f32[], f32[]) tuple(a, b)
}
""").link()
    program = program_computations(tricky)
    bodies = {id(c): c for c in tricky.computations if c.name in ("f1", "f2")}
    assert not _BodyKeys(bodies).lazy_is_safe(program, program + list(bodies.values()))
    # A program computation that is also a fusion body.
    assert not _BodyKeys({id(tricky.entry): tricky.entry}).lazy_is_safe(
        program, program)


_DEAD = """
HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  a = f32[4] negate(p)
  b = f32[4] exponential(a)
  c = f32[4] add(b, q)
  d = f32[4] multiply(a, a)
  tok = token[] after-all()
  o = token[] outfeed(d, tok), outfeed_shape=f32[4]{0}
  unused = f32[4] sine(q)
  unused2 = f32[4] cosine(unused)
  ROOT r = f32[4] add(a, q)
}
"""


def test_dead_code_walk_removes_what_remove_dead_removes():
    # HloComputation.remove_dead's set-and-stack liveness walk against the
    # plain definition: what `reachable` finds from the root, the
    # parameters and the kept instructions lives.
    for keep in (None, has_side_effect):
        module = parse_module(_DEAD).link()
        entry = module.entry
        before = list(entry.instructions)
        starts = [entry.root] + [i for i in before if i.opcode == "parameter" or
                                 (keep is not None and keep(i))]
        live = {id(i) for i in reachable(starts, lambda i: i.operands)}
        expected = [i.name for i in before if id(i) in live]
        n = entry.remove_dead(keep) if keep else entry.remove_dead()
        assert n == len(before) - len(expected) > 0
        assert [i.name for i in entry.instructions] == expected
    # keep=has_side_effect keeps the outfeed and what it reads.
    assert {"o", "d", "tok"} <= {i.name for i in entry.instructions}


_CALLS = """
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
t {
  x = f32[] parameter(0)
  ROOT n = f32[] negate(x)
}
f {
  y = f32[] parameter(0)
  ROOT e = f32[] exponential(y)
}
orphan {
  z = f32[] parameter(0)
  ROOT c = f32[] cosine(z)
}
ENTRY e {
  p = f32[4] parameter(0)
  i = s32[] parameter(1)
  k = f32[] constant(0)
  r = f32[] reduce(p, k), dimensions={0}, to_apply=add
  ROOT c = f32[] conditional(i, r, r), branch_computations={t, f}
}
"""


def test_dce_reachability_follows_computation_lists_and_drops_orphans():
    module = parse_module(_CALLS).link()
    assert _has_unreachable_computations(module)
    assert HloDCE().run(module)
    assert sorted(c.name for c in module.computations) == ["add", "e", "f", "t"]
    # Branches reached only through the list attribute stay.
    assert not _has_unreachable_computations(module)
    assert not HloDCE().run(module)


_SMALL = """
HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] negate(p)
  b = f32[4] negate(p)
  ROOT r = f32[4] add(a, b)
}
"""


def test_pipeline_moves_what_it_made_to_the_oldest_generation():
    # Without the move, the first young collection after the pipeline
    # walks every object it made, and the module lands in a middle one.
    assert gc.isenabled() and gc.get_freeze_count() == 0
    result = optimize(parse_module(_SMALL))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    root = result.entry.root
    assert any(o is root for o in gc.get_objects(generation=2))


def test_pipeline_keeps_objects_the_process_froze():
    held = [[k] for k in range(1000)]
    gc.freeze()
    try:
        assert gc.get_freeze_count() >= 1000
        optimize(parse_module(_SMALL))
        # Not unfrozen (the count only drops as frozen objects die).
        assert gc.get_freeze_count() >= 1000
    finally:
        gc.unfreeze()
    del held


def test_callees_lists_what_the_called_computations_list():
    from xla_gpu.hlo.module import callees
    from xla_gpu.program.prepare import reachable_computations
    for text in (_CALLS, _FUSIONS):
        module = parse_module(text).link()
        for comp in module.computations:
            assert [id(c) for c in callees(comp)] == \
                [id(c) for i in comp.instructions for c in i.called_computations]
    module = parse_module(_CALLS).link()
    # Callees before callers, the last callee of the last instruction first.
    assert [c.name for c in reachable_computations(module.entry)] == ["f", "t", "add", "e"]
