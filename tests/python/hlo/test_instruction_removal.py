"""Removing instructions one at a time from large computations: the list
is searched from position hints (`HloComputation._position`), which only
deletions and appends keep close; these tests hold every removal to the
plain list (the instruction itself goes, the others keep their order),
through appends, reorders, list replacements and hints gone stale, and
check the module bookkeeping the fast paths of the mutation API keep."""

from __future__ import annotations

import random

import pytest

from xla_gpu.hlo import HloError, parse_module
from xla_gpu.hlo.module import HloComputation, HloInstruction, HloModule
from xla_gpu.hlo.shape import Shape

SCALAR = Shape("f32", ())


def _computation(size: int) -> tuple[HloModule, HloComputation]:
    """A module whose entry has `size` parameters feeding one root tuple
    (nothing else reads them, so any of the others may be removed once
    the root no longer reads it)."""
    comp = HloComputation("e", is_entry=True)
    module = HloModule("m", [comp]).link()
    params = [comp.add_instruction(HloInstruction.create_parameter(k, SCALAR, f"p{k}"))
              for k in range(size)]
    comp.set_root(comp.add("tuple", Shape("", (), None, (SCALAR,)), params[:1]))
    return module, comp


@pytest.mark.parametrize("seed", range(6))
def test_each_removal_takes_that_instruction_and_keeps_the_order(seed):
    rng = random.Random(seed)
    module, comp = _computation(400)
    expected = list(comp._instructions)
    removable = [i for i in expected[1:] if i is not comp.root]
    for step in range(900):
        action = rng.random()
        if action < 0.08:
            # Appends (what a fusion pass adds) land after everything.
            inst = comp.add_instruction(
                HloInstruction.create_parameter(1000 + step, SCALAR, "q"))
            expected.append(inst)
            removable.append(inst)
        elif action < 0.10:
            # The list replaced by a reordered copy (as a sort or a rewrite
            # of the list does): the hints no longer describe it.
            order = list(comp._instructions)
            k = rng.randrange(len(order))
            order.insert(rng.randrange(len(order)), order.pop(k))
            comp._instructions = order
            expected = list(order)
        elif action < 0.12 and len(removable) > 8:
            # Several at once take the other path.
            doomed = rng.sample(removable, 5)
            comp.remove_instructions(doomed)
            ids = {id(d) for d in doomed}
            expected = [i for i in expected if id(i) not in ids]
            removable = [i for i in removable if id(i) not in ids]
        elif removable:
            inst = removable.pop(rng.randrange(len(removable)))
            name = inst.name
            comp.remove_instruction(inst)
            expected.remove(inst)
            assert inst.parent is None
            assert module.unique_name(name) == name   # the name was released
            module.release_name(name)
        assert len(comp._instructions) == len(expected)
        assert all(a is b for a, b in zip(comp._instructions, expected)), step
    assert not removable or len(comp._instructions) > 1


def test_a_removal_unlinks_the_operands_users_and_refuses_live_ones():
    module = parse_module("""
HloModule m

ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] negate(p)
  b = f32[4] add(p, p)
  c = f32[4] multiply(a, p)
  ROOT t = (f32[4], f32[4]) tuple(b, c)
}
""")
    comp = module.entry
    p, a, b, c, t = comp.instructions
    with pytest.raises(HloError, match="used by 'c'"):
        comp.remove_instruction(a)
    with pytest.raises(HloError, match="root"):
        comp.remove_instruction(t)
    t.replace_operand_with(1, p)
    comp.remove_instruction(c)
    assert [u.name for u in p.users] == ["a", "b", "t"]
    assert [u.name for u in a.users] == []
    comp.remove_instruction(a)
    assert [i.name for i in comp.instructions] == ["p", "b", "t"]
    with pytest.raises(HloError, match="not in computation"):
        comp.remove_instruction(a)


def test_instructions_compare_by_identity():
    """The mutation API finds instructions in operand and user lists with
    `in`, `list.index` and `list.remove`: that is an identity search only
    while instructions keep object equality."""
    assert HloInstruction.__eq__ is object.__eq__
    a = HloInstruction.create_parameter(0, SCALAR, "x")
    b = HloInstruction.create_parameter(0, SCALAR, "x")
    assert a != b and [a, b].index(b) == 1


def test_a_computation_added_before_the_last_or_another_one():
    module, entry = _computation(3)
    first = module.add_computation(HloComputation("f"))
    assert [c.name for c in module.computations] == ["f", "e"]
    second = module.add_computation(HloComputation("f"), before=entry)
    third = module.add_computation(HloComputation("g"), before=first)
    fourth = module.add_computation(HloComputation("h"), before=HloComputation("x"))
    assert [c.name for c in module.computations] == ["g", "f", "f.1", "e", "h"]
    assert (first.module, second.module, third.module, fourth.module) == (module,) * 4


def test_unique_names_as_xla_gives_them():
    module, comp = _computation(3)
    names = [comp.add_instruction(HloInstruction.create_parameter(9, SCALAR, n)).name
             for n in ("p1", "add", "add", "add.7", "add.7", "add", "x.y", "x.y", "p1.0")]
    assert names == ["p1.1", "add", "add.1", "add.7", "add.8", "add.9", "x.y", "x.y.1",
                     "p1.0"]
    assert module.unique_name("") == "instruction"


_CALLS = """HloModule calls
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
twice {
  x = f32[4] parameter(0)
  ROOT y = f32[4] add(x, x)
}
ENTRY e {
  p = f32[4] parameter(0)
  c = f32[4] call(p), to_apply=twice
  z = f32[] constant(0)
  ROOT r = f32[] reduce(c, z), dimensions={0}, to_apply=add
}
"""


def test_a_released_module_keeps_what_another_shares():
    # A compile's input module shares computations with the program's own
    # module: releasing the input unlinks only what it alone has (its
    # instructions point at each other: left linked, cyclic garbage).
    import gc
    module = parse_module(_CALLS).link()
    by_name = {c.name: c for c in module.computations}
    kept = HloModule("kept", [by_name["add"]])
    entry = by_name["e"]
    root = entry.root
    module.release(keep=kept)
    assert module.computations == [] and entry.root is None and root.parent is None
    assert root.operands == [] and root.users == []
    assert [i.name for i in by_name["add"].instructions] == ["a", "b", "s"]
    assert by_name["add"].root.operands[0].name == "a"
    del module, entry, root, by_name
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        assert gc.collect() == 0, gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_unreachable_computations_are_released_as_they_go():
    module = parse_module(_CALLS).link()
    twice = module.computation("twice")
    call = module.entry.find("c")
    call.replace_all_uses_with(call.operands[0])
    module.entry.remove_dead()
    assert module.remove_unreachable_computations() == 1
    assert twice.instructions == [] and twice.root is None and twice.module is None
    assert [c.name for c in module.computations] == ["add", "e"]
