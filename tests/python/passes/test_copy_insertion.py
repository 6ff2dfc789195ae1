"""Copy insertion for conditionals and while loops: the pass adds a copy
only where two elements would otherwise share a buffer or a buffer still
needed would be overwritten, and the compiled programs (target "cpu")
agree with the reference interpreter for every branch taken."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes import CopyInsertion, verify_module


def _inserted(text: str):
    module = parse_module(text).link()
    result = module.clone()
    CopyInsertion().run(result)
    verify_module(result)
    return result


def _root_opcodes(module, name: str) -> list[str]:
    root = module.computation(name).root
    assert root.opcode == "tuple"
    return [o.opcode for o in root.operands]


def _copies(module) -> int:
    return sum(i.opcode == "copy" for c in module.computations for i in c.instructions)


def _check_compiled(text: str, *arg_sets) -> None:
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    module = parse_module(text)
    for args in arg_sets:
        got = exe.run(*args)
        want = evaluate(module, *args)
        got = got if isinstance(got, (tuple, list)) else (got,)
        want = want if isinstance(want, (tuple, list)) else (want,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6, atol=1e-6)


# A branch returning one value at two elements, and a constant at two: each
# element of the conditional is a buffer of its own, so the second
# occurrence (and every constant) is copied, nothing else.
_DUPLICATES = """
HloModule duplicates
left {
  p = (f32[3], f32[3]) parameter(0)
  a = f32[3] get-tuple-element(p), index=0
  b = f32[3] get-tuple-element(p), index=1
  s = f32[3] sine(a)
  m = f32[3] multiply(a, b)
  ROOT r = (f32[3], f32[3], f32[3], f32[3]) tuple(s, m, s, m)
}
right {
  p = (f32[3], f32[3]) parameter(0)
  a = f32[3] get-tuple-element(p), index=0
  three = f32[3] constant({3, 3, 3})
  t = f32[3] multiply(a, three)
  z = f32[3] constant({0, 0, 0})
  ROOT r = (f32[3], f32[3], f32[3], f32[3]) tuple(t, t, z, z)
}
ENTRY main {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  two = f32[] constant(2)
  x0 = f32[1] slice(x), slice={[0:1]}
  x0s = f32[] reshape(x0)
  lt = pred[] compare(x0s, two), direction=LT
  i = s32[] convert(lt)
  ops = (f32[3], f32[3]) tuple(x, y)
  c = (f32[3], f32[3], f32[3], f32[3]) conditional(i, ops, ops), branch_computations={left, right}
  c0 = f32[3] get-tuple-element(c), index=0
  c1 = f32[3] get-tuple-element(c), index=1
  c2 = f32[3] get-tuple-element(c), index=2
  c3 = f32[3] get-tuple-element(c), index=3
  ROOT out = (f32[3], f32[3], s32[], f32[3], f32[3]) tuple(c0, c1, i, c2, c3)
}
"""


def test_conditional_branch_returning_a_value_twice_gets_one_copy():
    result = _inserted(_DUPLICATES)
    assert _root_opcodes(result, "left") == ["sine", "multiply", "copy", "copy"]
    assert _root_opcodes(result, "right") == ["multiply", "copy", "copy", "copy"]
    left = result.computation("left").root.operands
    assert left[2].operands[0] is left[0] and left[3].operands[0] is left[1]
    assert _copies(result) == 5
    # Idempotent: the copies already there need no more.
    again = result.clone()
    assert not CopyInsertion().run(again)


def test_conditional_with_duplicate_results_compiles_and_matches():
    y = np.array([0.5, -1.5, 2.0], np.float32)
    _check_compiled(_DUPLICATES,
                    (np.array([2.14, 0.3, -1.0], np.float32), y),
                    (np.array([1.72, 0.3, -1.0], np.float32), y))


# One branch returns its operand tuple unchanged, the other writes element 0
# and returns its own (scalar) operand at element 0 and a constant at 1.
_FORWARDED = """
HloModule forwarded
keep {
  ROOT p = (s32[], s32[]) parameter(0)
}
replace {
  q = s32[] parameter(0)
  zero = s32[] constant(0)
  ROOT r = (s32[], s32[]) tuple(q, zero)
}
ENTRY main {
  pick = s32[] parameter(0)
  other = s32[] parameter(1)
  a = s32[] parameter(2)
  b = s32[] parameter(3)
  ops = (s32[], s32[]) tuple(a, b)
  ROOT c = (s32[], s32[]) conditional(pick, ops, other), branch_computations={keep, replace}
}
"""


def test_conditional_returning_parameters_copies_each_element():
    result = _inserted(_FORWARDED)
    keep = result.computation("keep").root
    assert [o.opcode for o in keep.operands] == ["copy", "copy"]
    assert [o.operands[0].opcode for o in keep.operands] == ["get-tuple-element"] * 2
    assert _root_opcodes(result, "replace") == ["copy", "copy"]


def test_conditional_returning_parameters_compiles_and_matches():
    args = [np.int32(1), np.int32(5), np.int32(7), np.int32(9)]
    _check_compiled(_FORWARDED, (np.int32(0), *args[1:]), (np.int32(1), *args[1:]),
                    (np.int32(4), *args[1:]))


# Branch 0 returns its operand `e` at element 0 while branch 1 writes that
# element: `e` may become the result's buffer only when it dies at the
# conditional and branch 1 cannot read it.
_ALIASED = """
HloModule aliased
pass {
  p = (f32[4]) parameter(0)
  g = f32[4] get-tuple-element(p), index=0
  n = f32[4] negate(g)
  ROOT r = (f32[4], f32[4]) tuple(g, n)
}
write {
  p = (f32[4]) parameter(0)
  g = f32[4] get-tuple-element(p), index=0
  s = f32[4] sine(g)
  c = f32[4] cosine(g)
  ROOT r = (f32[4], f32[4]) tuple(s, c)
}
ENTRY main {
  i = s32[] parameter(0)
  x = f32[4] parameter(1)
  y = f32[4] parameter(2)
  e = f32[4] exponential(x)
  l = f32[4] log(y)
  t0 = (f32[4]) tuple(e)
  t1 = (f32[4]) tuple(OPERAND1)
  c = (f32[4], f32[4]) conditional(i, t0, t1), branch_computations={pass, write}
  c0 = f32[4] get-tuple-element(c), index=0
  c1 = f32[4] get-tuple-element(c), index=1
  ROOT o = (f32[4], f32[4], f32[4]) tuple(c0, c1, AFTER)
}
"""


@pytest.mark.parametrize("operand1, after, copied", [
    ("l", "l", False),   # e dies at the conditional, branch 1 never sees it
    ("e", "l", True),    # branch 1 reads e: its write must not land on e
    ("l", "e", True),    # e is still needed after the conditional
])
def test_conditional_forwarded_operand_is_copied_only_when_needed(operand1, after, copied):
    text = _ALIASED.replace("OPERAND1", operand1).replace("AFTER", after)
    result = _inserted(text)
    assert _root_opcodes(result, "pass")[0] == ("copy" if copied else "get-tuple-element")
    assert _root_opcodes(result, "write") == ["sine", "cosine"]
    x = np.array([0.3, -1.0, 2.0, 0.1], np.float32)
    y = np.array([1.5, 0.25, 3.0, 0.7], np.float32)
    _check_compiled(text, (np.int32(0), x, y), (np.int32(1), x, y))


# The body replaces element 0 of the state with a constant and never reads
# its previous value; the copy of the constant may run before the
# schedule reaches the body's parameter.
_CONSTANT_STATE = """
HloModule constant_state
body {
  s = (s32[], s32[]) parameter(0)
  seven = s32[] constant(7)
  b = s32[] get-tuple-element(s), index=1
  one = s32[] constant(1)
  next = s32[] add(b, one)
  ROOT t = (s32[], s32[]) tuple(seven, next)
}
cond {
  s = (s32[], s32[]) parameter(0)
  b = s32[] get-tuple-element(s), index=1
  ten = s32[] constant(10)
  ROOT lt = pred[] compare(b, ten), direction=LT
}
ENTRY main {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  init = (s32[], s32[]) tuple(a, b)
  ROOT w = (s32[], s32[]) while(init), condition=cond, body=body
}
"""


def test_loop_writing_a_state_element_it_never_reads():
    result = _inserted(_CONSTANT_STATE)
    assert _root_opcodes(result, "body") == ["copy", "add"]
    _check_compiled(_CONSTANT_STATE, (np.int32(33), np.int32(4)),
                    (np.int32(33), np.int32(12)))


# The outer body hands its element 0 to an inner loop that carries it
# unchanged (so it keeps the outer state's buffer) and also writes the next
# element 0: the write must wait for the inner loop, which reads the old
# value through its state tuple.
_NESTED = """
HloModule nested
inner_body {
  s = (s32[], s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  a = s32[] get-tuple-element(s), index=1
  a1 = s32[] add(a, one)
  limit = s32[] get-tuple-element(s), index=2
  ROOT t = (s32[], s32[], s32[]) tuple(i1, a1, limit)
}
inner_cond {
  s = (s32[], s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  limit = s32[] get-tuple-element(s), index=2
  ROOT le = pred[] compare(i, limit), direction=LE
}
outer_body {
  zero = s32[] constant(0)
  s = (s32[], s32[], s32[]) parameter(0)
  acc = s32[] get-tuple-element(s), index=1
  i = s32[] get-tuple-element(s), index=0
  init = (s32[], s32[], s32[]) tuple(zero, acc, i)
  w = (s32[], s32[], s32[]) while(init), condition=inner_cond, body=inner_body
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  acc1 = s32[] get-tuple-element(w), index=1
  n = s32[] get-tuple-element(s), index=2
  ROOT t = (s32[], s32[], s32[]) tuple(i1, acc1, n)
}
outer_cond {
  s = (s32[], s32[], s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] get-tuple-element(s), index=2
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  n = s32[] parameter(0)
  start = s32[] parameter(1)
  acc = s32[] parameter(2)
  init = (s32[], s32[], s32[]) tuple(start, acc, n)
  w = (s32[], s32[], s32[]) while(init), condition=outer_cond, body=outer_body
  i = s32[] get-tuple-element(w), index=0
  a = s32[] get-tuple-element(w), index=1
  ROOT out = (s32[], s32[], s32[]) tuple(n, i, a)
}
"""


def test_nested_loop_reading_the_outer_state_it_carries():
    _check_compiled(_NESTED, (np.int32(3), np.int32(0), np.int32(0)),
                    (np.int32(4), np.int32(2), np.int32(5)))


# The body returns one value at element 1 and, reshaped to f32[1], at
# element 2: a bitcast views the same bytes, so the two elements would share
# one buffer unless the later one is copied. The simplifier makes this of a
# dynamic-update-slice that overwrites a whole f32[1] (jax's scan writing
# its one-step output), so the compiled module below hits it too.
_BITCAST_TWICE = """
HloModule bitcast_twice
body {
  s = (s32[], f32[], f32[1]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[] get-tuple-element(s), index=1
  y = f32[] sine(x)
  y1 = f32[1] bitcast(y)
  ROOT t = (s32[], f32[], f32[1]) tuple(i1, y, y1)
}
cond {
  s = (s32[], f32[], f32[1]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[] parameter(0)
  zero = s32[] constant(0)
  z = f32[1] constant({0})
  init = (s32[], f32[], f32[1]) tuple(zero, x, z)
  ROOT w = (s32[], f32[], f32[1]) while(init), condition=cond, body=body
}
"""

_UPDATE_OF_ALL = """
HloModule update_of_all
body {
  s = (s32[], f32[], f32[1], f32[1]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[] get-tuple-element(s), index=1
  y = f32[] sine(x)
  c = f32[] cosine(x)
  y1 = f32[1] reshape(y)
  c1 = f32[1] reshape(c)
  zero = s32[] constant(0)
  a = f32[1] get-tuple-element(s), index=2
  a1 = f32[1] dynamic-update-slice(a, c1, zero)
  b = f32[1] get-tuple-element(s), index=3
  b1 = f32[1] dynamic-update-slice(b, y1, zero)
  ROOT t = (s32[], f32[], f32[1], f32[1]) tuple(i1, y, a1, b1)
}
cond {
  s = (s32[], f32[], f32[1], f32[1]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(1)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[] parameter(0)
  zero = s32[] constant(0)
  z = f32[1] constant({0})
  init = (s32[], f32[], f32[1], f32[1]) tuple(zero, x, z, z)
  w = (s32[], f32[], f32[1], f32[1]) while(init), condition=cond, body=body
  w1 = f32[] get-tuple-element(w), index=1
  w2 = f32[1] get-tuple-element(w), index=2
  w3 = f32[1] get-tuple-element(w), index=3
  ROOT out = (f32[], f32[1], f32[1]) tuple(w1, w2, w3)
}
"""


def test_loop_returning_a_value_and_its_bitcast_copies_the_bitcast():
    result = _inserted(_BITCAST_TWICE)
    assert _root_opcodes(result, "body") == ["add", "sine", "copy"]
    _check_compiled(_BITCAST_TWICE, (np.float32(3.0),), (np.float32(-0.5),))
    _check_compiled(_UPDATE_OF_ALL, (np.float32(3.0),), (np.float32(0.25),))


# Tokens have no buffer: copy insertion never copies one (a token returned
# twice, a token parameter returned, a token in a loop's state), and the
# program passes tokens over at the entry.
_TOKENS = """
HloModule tokens
body {
  s = (s32[], token[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  t = token[] get-tuple-element(s), index=1
  t1 = token[] after-all(t)
  x = f32[4] get-tuple-element(s), index=2
  x1 = f32[4] add(x, x)
  ROOT r = (s32[], token[], f32[4]) tuple(i1, t1, x1)
}
cond {
  s = (s32[], token[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[4] parameter(0)
  t = token[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], token[], f32[4]) tuple(zero, t, x)
  w = (s32[], token[], f32[4]) while(init), condition=cond, body=body
  wt = token[] get-tuple-element(w), index=1
  wx = f32[4] get-tuple-element(w), index=2
  ROOT r = (f32[4], token[], token[], token[], f32[4]) tuple(wx, wt, wt, t, x)
}
"""


def test_tokens_are_never_copied():
    result = _inserted(_TOKENS)
    copied = [i.operands[0].shape for c in result.computations for i in c.instructions
              if i.opcode == "copy"]
    assert copied and all(s.element_type != "token" for s in copied)
    assert _root_opcodes(result, "main") == ["get-tuple-element", "get-tuple-element",
                                             "get-tuple-element", "parameter", "copy"]
    x = np.arange(4, dtype=np.float32)
    _check_compiled(_TOKENS, (x, None), (x + 1, np.zeros((0,), np.uint8)))


# An inner loop (a fori_loop) in an outer loop's body (a scan) carries the
# outer state's element 1 unchanged (its factor) and produces the outer
# state's next element 1 (its product): without a copy both would live in
# the outer state's buffer 1.
_LOOP_IN_LOOP_CARRY = """
HloModule fori_in_scan, entry_computation_layout={(f32[])->f32[]}

inner_body {
  s = (f32[], f32[], f32[], f32[]) parameter(0)
  i = f32[] get-tuple-element(s), index=0
  one = f32[] constant(1)
  next = f32[] add(i, one)
  acc = f32[] get-tuple-element(s), index=1
  factor = f32[] get-tuple-element(s), index=3
  product = f32[] multiply(acc, factor)
  end = f32[] get-tuple-element(s), index=2
  ROOT t = (f32[], f32[], f32[], f32[]) tuple(next, product, end, factor)
}

inner_cond {
  s = (f32[], f32[], f32[], f32[]) parameter(0)
  i = f32[] get-tuple-element(s), index=0
  end = f32[] get-tuple-element(s), index=2
  ROOT lt = pred[] compare(i, end), direction=LT
}

outer_body {
  s = (s32[], f32[]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  next = s32[] add(k, one)
  carry = f32[] get-tuple-element(s), index=1
  start = f32[] convert(k)
  two = f32[] constant(2)
  end = f32[] add(start, two)
  init = (f32[], f32[], f32[], f32[]) tuple(start, start, end, carry)
  loop = (f32[], f32[], f32[], f32[]) while(init), condition=inner_cond, body=inner_body
  product = f32[] get-tuple-element(loop), index=1
  ROOT t = (s32[], f32[]) tuple(next, product)
}

outer_cond {
  s = (s32[], f32[]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(k, n), direction=LT
}

ENTRY main {
  x = f32[] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[]) tuple(zero, x)
  loop = (s32[], f32[]) while(init), condition=outer_cond, body=outer_body
  ROOT r = f32[] get-tuple-element(loop), index=1
}
"""


def test_inner_loop_carrying_the_outer_element_it_replaces():
    inserted = _inserted(_LOOP_IN_LOOP_CARRY)
    assert _root_opcodes(inserted, "outer_body")[1] == "copy"
    _check_compiled(_LOOP_IN_LOOP_CARRY, (np.float32(0.75),), (np.float32(-1.5),))


# A loop in a conditional branch whose state is the branch's parameter: that
# buffer is the conditional's operand, here an ENTRY parameter read again
# after the conditional, so the loop must start from a copy.
_LOOP_ON_BRANCH_PARAMETER = """
HloModule branch_while

cond {
  s = f32[4] parameter(0)
  e = f32[] constant(100)
  r = f32[] reduce(s, e), dimensions={0}, to_apply=mx
  lim = f32[] constant(50)
  ROOT lt = pred[] compare(r, lim), direction=LT
}

mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] minimum(a, b)
}

body {
  s = f32[4] parameter(0)
  two = f32[] constant(2)
  t = f32[4] broadcast(two), dimensions={}
  ROOT n = f32[4] add(s, t)
}

grow {
  x = f32[4] parameter(0)
  ROOT w = f32[4] while(x), condition=cond, body=body
}

keep {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}

ENTRY main {
  p = pred[] parameter(0)
  x = f32[4] parameter(1)
  c = f32[4] conditional(p, x, x), true_computation=grow, false_computation=keep
  ROOT t = (f32[4], f32[4]) tuple(c, x)
}
"""


def test_loop_on_a_branch_parameter_starts_from_a_copy():
    inserted = _inserted(_LOOP_ON_BRANCH_PARAMETER)
    loop = inserted.computation("grow").root
    assert loop.opcode == "while" and loop.operands[0].opcode == "copy"
    x = np.array([1, 2, 3, 4], np.float32)
    _check_compiled(_LOOP_ON_BRANCH_PARAMETER, (np.bool_(True), x), (np.bool_(False), x))


# A conditional in a loop body handed the carried values (jax's lax.cond on
# the carry, as expm's squaring loop does): its result is the new state, so
# without copies the branch that computes would write element 1 while
# reading the old element 1 for element 2.
_CONDITIONAL_ON_THE_CARRY = """
HloModule cond_on_carry

square {
  s = (f32[4], f32[4]) parameter(0)
  x = f32[4] get-tuple-element(s), index=0
  y = f32[4] get-tuple-element(s), index=1
  xx = f32[4] multiply(x, x)
  xy = f32[4] add(x, y)
  ROOT t = (f32[4], f32[4]) tuple(xx, xy)
}

keep {
  s = (f32[4], f32[4]) parameter(0)
  x = f32[4] get-tuple-element(s), index=0
  y = f32[4] get-tuple-element(s), index=1
  ROOT t = (f32[4], f32[4]) tuple(x, y)
}

body {
  s = (s32[], f32[4], f32[4]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  next = s32[] add(k, one)
  x = f32[4] get-tuple-element(s), index=1
  y = f32[4] get-tuple-element(s), index=2
  pair = (f32[4], f32[4]) tuple(x, y)
  odd = s32[] and(k, one)
  c = (f32[4], f32[4]) conditional(odd, pair, pair), branch_computations={square, keep}
  nx = f32[4] get-tuple-element(c), index=0
  ny = f32[4] get-tuple-element(c), index=1
  ROOT t = (s32[], f32[4], f32[4]) tuple(next, nx, ny)
}

cond {
  s = (s32[], f32[4], f32[4]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(k, n), direction=LT
}

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[4], f32[4]) tuple(zero, x, y)
  loop = (s32[], f32[4], f32[4]) while(init), condition=cond, body=body
  a = f32[4] get-tuple-element(loop), index=1
  b = f32[4] get-tuple-element(loop), index=2
  ROOT r = (f32[4], f32[4]) tuple(a, b)
}
"""


def test_conditional_on_the_loop_carry_writes_the_state_through_copies():
    inserted = _inserted(_CONDITIONAL_ON_THE_CARRY)
    assert _root_opcodes(inserted, "body")[1:] == ["copy", "copy"]
    x = np.array([0.5, -1.0, 1.5, 2.0], np.float32)
    y = np.array([1.0, 2.0, -3.0, 0.25], np.float32)
    _check_compiled(_CONDITIONAL_ON_THE_CARRY, (x, y), (y, x))


# The same with the branch's operand a tuple: the loop starts from an
# element of the branch's parameter (jax's expm gradient: a fori_loop inside
# lax.cond on several values), a buffer of the caller read again after the
# conditional.
_LOOP_ON_A_BRANCH_TUPLE_ELEMENT = """
HloModule branch_tuple_while

cond {
  s = (s32[], f32[4]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(k, n), direction=LT
}

body {
  s = (s32[], f32[4]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  next = s32[] add(k, one)
  v = f32[4] get-tuple-element(s), index=1
  two = f32[] constant(2)
  t = f32[4] broadcast(two), dimensions={}
  w = f32[4] multiply(v, t)
  ROOT r = (s32[], f32[4]) tuple(next, w)
}

grow {
  p = (f32[4], f32[4]) parameter(0)
  x = f32[4] get-tuple-element(p), index=0
  y = f32[4] get-tuple-element(p), index=1
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  loop = (s32[], f32[4]) while(init), condition=cond, body=body
  grown = f32[4] get-tuple-element(loop), index=1
  ROOT sum = f32[4] add(grown, y)
}

keep {
  p = (f32[4], f32[4]) parameter(0)
  x = f32[4] get-tuple-element(p), index=0
  ROOT n = f32[4] negate(x)
}

ENTRY main {
  b = pred[] parameter(0)
  x0 = f32[4] parameter(1)
  one = f32[] constant(1)
  ones = f32[4] broadcast(one), dimensions={}
  x = f32[4] add(x0, ones)
  pair = (f32[4], f32[4]) tuple(x, x0)
  c = f32[4] conditional(b, pair, pair), true_computation=grow, false_computation=keep
  ROOT t = (f32[4], f32[4]) tuple(c, x)
}
"""


def test_loop_on_a_branch_tuple_element_starts_from_a_copy():
    inserted = _inserted(_LOOP_ON_A_BRANCH_TUPLE_ELEMENT)
    init = inserted.computation("grow").instructions
    loop_init = next(i for i in init if i.opcode == "while").operands[0]
    assert loop_init.operands[1].opcode == "copy"
    x = np.array([0.5, -1.0, 2.0, 3.0], np.float32)
    _check_compiled(_LOOP_ON_A_BRANCH_TUPLE_ELEMENT, (np.bool_(True), x), (np.bool_(False), x))
