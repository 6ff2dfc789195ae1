"""Shardings that do not cut a dimension evenly (f32[10,8] over 4 devices):
each device holds chunks of ceil(10 / 4) = 3 rows, the last one partly
padding, as XLA's partitioner does. The padding must never reach a real
result: reductions, dots contracting over the cut dim and the data
movement ops over it mask it or make the dim whole first. Every program
here runs partitioned in the reference interpreter against the same
program on one device; before padding, these cuts were replicated."""

from __future__ import annotations

import random
import warnings
from collections import Counter

import numpy as np
import pytest

from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes.sharding_annotations import ShardingAnnotationRemover
from xla_gpu.hlo.passes.spmd import SpmdFallbackWarning, partition_module
from xla_gpu.hlo.passes.spmd.reshard import Emitter
from xla_gpu.hlo.printer import module_to_text
from spmd_cases import MODULE_WITH_ADD, run_partitioned

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "collective-permute")

MAX = """
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""


@pytest.fixture(autouse=True)
def nan_padding(monkeypatch):
    """Padding made of NaN: any padding read into a real result shows."""
    monkeypatch.setattr(Emitter, "padding_value", float("nan"))


def _collectives(module) -> Counter:
    return Counter(inst.opcode for comp in module.computations
                   for inst in comp.instructions if inst.opcode in COLLECTIVES)


def _shapes(module, opcode: str) -> list[tuple[int, ...]]:
    return [inst.shape.dims for inst in module.entry.instructions if inst.opcode == opcode]


def _one_device(text: str, args):
    single = parse_module(text)
    ShardingAnnotationRemover().run(single)
    return evaluate(single, *args)


def _check(text: str, n: int, args, rtol=1e-5, atol=1e-5):
    """The partitioned run against the one-device run; the partition result."""
    want = _one_device(text, args)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    got, result = run_partitioned(text, n, args)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}")
    return result


def _normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# exp(x) makes the padding non-zero (exp(0) = 1): a reduction or a dot that
# read it would be off.
_REDUCE = MODULE_WITH_ADD + MAX + """ENTRY e {
  x = f32[10,8] parameter(0)
  c = f32[10,8] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  e = f32[10,8] exponential(c)
  z = f32[] constant(0)
  s = f32[8] reduce(e, z), dimensions={0}, to_apply=add
  lo = f32[] constant(-inf)
  ne = f32[10,8] negate(e)
  m = f32[8] reduce(ne, lo), dimensions={0}, to_apply=max
  ROOT out = (f32[8], f32[8]) tuple(s, m)
}"""


def test_reduce_over_the_uneven_dim_masks_the_padding():
    result = _check(_REDUCE, 4, [_normal(10, 8)])
    module = result.module
    # The chunks are 3 rows (the last device's: 1 real, 2 padding); the
    # sums are local then one all-reduce each, nothing gathered.
    assert (3, 8) in _shapes(module, "exponential")
    assert _collectives(module) == Counter({"all-reduce": 2})
    assert len(_shapes(module, "select")) == 2          # each reduce masks
    # The value was cut from the whole parameter: padded to 12 rows first.
    assert (12, 8) in _shapes(module, "pad")
    assert result.notes == []


def test_dot_contracting_over_the_uneven_dim_masks_both_operands():
    text = """
HloModule m
ENTRY e {
  x = f32[6,10] parameter(0)
  w = f32[10,4] parameter(1)
  xc = f32[6,10] custom-call(x), custom_call_target="Sharding", sharding={devices=[1,4]<=[4]}
  wc = f32[10,4] custom-call(w), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  xe = f32[6,10] exponential(xc)
  we = f32[10,4] exponential(wc)
  ROOT d = f32[6,4] dot(xe, we), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    result = _check(text, 4, [_normal(6, 10), _normal(10, 4, seed=1)], rtol=1e-4)
    module = result.module
    assert _shapes(module, "dot") == [(6, 4)]
    assert sorted(_shapes(module, "select")) == [(3, 4), (6, 3)]
    assert _collectives(module) == Counter({"all-reduce": 1})


def test_dot_summed_into_an_uneven_cut_is_a_padded_reduce_scatter():
    text = """
HloModule m
ENTRY e {
  x = f32[6,16] parameter(0), sharding={devices=[1,4]<=[4]}
  w = f32[16,4] parameter(1), sharding={devices=[4,1]<=[4]}
  d = f32[6,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = f32[6,4] custom-call(d), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  ROOT n = f32[6,4] negate(c)
}"""
    with pytest.warns(SpmdFallbackWarning, match="'n'.*returned whole"):
        result = _check(text, 4, [_normal(6, 16), _normal(16, 4, seed=1)], rtol=1e-4)
    module = result.module
    # 6 rows summed and scattered 4 ways: padded to 8, chunks of 2.
    assert (8, 4) in _shapes(module, "pad")
    assert _shapes(module, "reduce-scatter") == [(2, 4)]
    assert (2, 4) in _shapes(module, "negate")
    # The result is returned whole: gathered once, at the end.
    assert _collectives(module) == Counter({"reduce-scatter": 1, "all-gather": 1})


def test_elementwise_chain_and_constraints_keep_padded_chunks():
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[10,6] parameter(0)
  y = f32[10,6] parameter(1)
  a = f32[10,6] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  b = f32[10,6] multiply(a, y)
  c = f32[10,6] exponential(b)
  t = f32[6,10] transpose(c), dimensions={1,0}
  r = f32[6,2,5] reshape(t)
  m = f32[6,2,5] custom-call(r), custom_call_target="Sharding", sharding={devices=[4,1,1]<=[4]}
  z = f32[] constant(0)
  s = f32[6,2] reduce(m, z), dimensions={2}, to_apply=add
  ROOT out = (f32[6,2], f32[6,2,5]) tuple(s, m)
}"""
    with pytest.warns(SpmdFallbackWarning, match="output 1's sharding"):
        result = _check(text, 4, [_normal(10, 6), _normal(10, 6, seed=1)])
    module = result.module
    for op, dims in (("multiply", (3, 6)), ("exponential", (3, 6)),
                     ("transpose", (6, 3))):
        assert dims in _shapes(module, op), op
    # Rows moved to the second dim's cut of the reshaped value: one
    # all-to-all (the 10 padded to 12, the 6 to 8), then output 1 is
    # gathered back whole; the reduce over the uncut dim needs nothing.
    kinds = _collectives(module)
    assert kinds["all-to-all"] == 1 and kinds["all-reduce"] == 0


def test_rows_to_columns_uneven_is_one_all_to_all():
    text = """
HloModule m
ENTRY e {
  x = f32[10,7] parameter(0)
  a = f32[10,7] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  n = f32[10,7] negate(a)
  b = f32[10,7] custom-call(n), custom_call_target="Sharding", sharding={devices=[1,4]<=[4]}
  ROOT e = f32[10,7] exponential(b)
}"""
    with pytest.warns(SpmdFallbackWarning, match="'e'"):
        result = _check(text, 4, [_normal(10, 7)])
    module = result.module
    assert _shapes(module, "all-to-all") == [(3, 4, 2)]
    assert (10, 2) in _shapes(module, "exponential")


def test_data_movement_over_the_uneven_dim_is_done_whole():
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[10,8] parameter(0)
  a = f32[10,8] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,2]<=[8]}
  e = f32[10,8] exponential(a)
  v = f32[10,8] reverse(e), dimensions={0}
  s = f32[5,8] slice(v), slice={[2:7], [0:8]}
  c = f32[15,8] concatenate(s, e), dimensions={0}
  z = f32[] constant(0)
  w = f32[15,8] reduce-window(c, z), window={size=3x1 pad=2_0x0_0}, to_apply=add
  p = f32[17,8] pad(w, z), padding=1_1x0_0
  ROOT k = f32[17,8] custom-call(p), custom_call_target="Sharding", sharding={devices=[2,4]<=[8]}
}"""
    with pytest.warns(SpmdFallbackWarning, match="'k'"):
        result = _check(text, 8, [_normal(10, 8)])
    # exp on chunks of 3 rows by 4 columns; the column cut stays through
    # the data movement (the reverse keeps the uneven rows cut, each device
    # taking its chunk of them padded on the left; the concatenate, uneven
    # along the rows with the columns cut already, moves the rows' cut to
    # the columns within each column group (all-to-alls, as XLA) and joins
    # whole rows of one column; the window and the pad after them keep the
    # rows cut by halo exchange).
    assert _shapes(result.module, "exponential") == [(3, 4)]
    assert _shapes(result.module, "reverse") == [(3, 4)]
    assert (15, 1) in _shapes(result.module, "concatenate")
    assert (4, 4) in _shapes(result.module, "reduce-window")


def test_a_loop_over_an_uneven_state():
    text = MODULE_WITH_ADD + """cond {
  p = (s32[], f32[10,6]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[10,6]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  c = f32[10,6] get-tuple-element(p), index=1
  e = f32[10,6] exponential(c)
  z = f32[] constant(0)
  s = f32[6] reduce(e, z), dimensions={0}, to_apply=add
  sb = f32[10,6] broadcast(s), dimensions={1}
  h = f32[] constant(0.01)
  hb = f32[10,6] broadcast(h), dimensions={}
  c2 = f32[10,6] multiply(sb, hb)
  c3 = f32[10,6] add(c, c2)
  ROOT t = (s32[], f32[10,6]) tuple(j, c3)
}
ENTRY e {
  x = f32[10,6] parameter(0)
  a = f32[10,6] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  zero = s32[] constant(0)
  init = (s32[], f32[10,6]) tuple(zero, a)
  loop = (s32[], f32[10,6]) while(init), condition=cond, body=body
  l = f32[10,6] get-tuple-element(loop), index=1
  z = f32[] constant(0)
  ROOT r = f32[6] reduce(l, z), dimensions={0}, to_apply=add
}"""
    result = _check(text, 4, [_normal(10, 6) * 0.1], rtol=1e-4)
    text_out = module_to_text(result.module)
    assert "f32[3,6]" in text_out and "while(" in text_out
    # one in the body (run each iteration), one for the result
    assert _collectives(result.module) == Counter({"all-reduce": 2})


def test_uneven_entry_parameter_is_passed_whole_and_cut_inside():
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[6,5] parameter(0), sharding={devices=[4,1]<=[4]}
  z = f32[] constant(0)
  ROOT r = f32[5] reduce(x, z), dimensions={0}, to_apply=add
}"""
    with pytest.warns(SpmdFallbackWarning,
                      match="'x'.*does not cut f32.6,5. evenly.*passed whole"):
        result = _check(text, 4, [_normal(6, 5)])
    assert result.parameter_shardings[0].is_replicated
    assert _shapes(result.module, "reduce") == [(5,)]
    assert (2, 5) in _shapes(result.module, "dynamic-slice")
    assert _collectives(result.module) == Counter({"all-reduce": 1})


def test_more_chunks_than_rows():
    """f32[3,4] over 8 devices: chunks of one row, five devices hold only
    padding."""
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[3,4] parameter(0)
  w = f32[3,5] parameter(1)
  a = f32[3,4] custom-call(x), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
  e = f32[3,4] exponential(a)
  z = f32[] constant(0)
  s = f32[4] reduce(e, z), dimensions={0}, to_apply=add
  b = f32[3,5] custom-call(w), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
  d = f32[4,5] dot(e, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT out = (f32[4], f32[4,5]) tuple(s, d)
}"""
    result = _check(text, 8, [_normal(3, 4), _normal(3, 5, seed=1)], rtol=1e-4)
    assert (1, 4) in _shapes(result.module, "exponential")


# ------------------------------------------------------------ random programs

SHARDINGS = [
    "{replicated}", "{devices=[8,1]<=[8]}", "{devices=[1,8]<=[8]}", "{devices=[2,4]<=[8]}",
    "{devices=[4,2]<=[2,4]T(1,0)}", "{devices=[4,1,2]<=[8] last_tile_dim_replicate}",
    "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
    "{devices=[8,1]7,6,5,4,3,2,1,0}", "{devices=[1,2,4]<=[8] last_tile_dim_replicate}",
]


RESHAPED = ["{devices=[8,1,1]<=[8]}", "{devices=[4,1,1,2]<=[8] last_tile_dim_replicate}",
            "{devices=[4,2,1]<=[8]}"]


def _program(seed: int) -> str:
    """Square f32[10,10] values (10 is uneven over 4 and 8 devices) through
    ops that read across a cut dim; exp / max make the padding matter."""
    r = random.Random(seed)
    lines = ["HloModule random", "add {", "  a = f32[] parameter(0)",
             "  b = f32[] parameter(1)", "  ROOT s = f32[] add(a, b)", "}",
             "max {", "  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
             "  ROOT s = f32[] maximum(a, b)", "}", "ENTRY e {"]
    values = []
    for i in range(2):
        lines.append(f"  p{i} = f32[10,10] parameter({i})")
        lines.append(f"  q{i} = f32[10,10] custom-call(p{i}), custom_call_target=\"Sharding\", "
                     f"sharding={r.choice(SHARDINGS)}")
        values.append(f"q{i}")
    for k in range(r.randint(3, 8)):
        op = r.choice(["add", "dot", "dot_t", "transpose", "reduce", "max", "constraint",
                       "exp", "rows", "reverse", "window", "reshape"])
        a, b, v = r.choice(values), r.choice(values), f"v{k}"
        if op == "add":
            lines.append(f"  {v} = f32[10,10] add({a}, {b})")
        elif op == "exp":
            lines.append(f"  {v}t = f32[10,10] tanh({a})")
            lines.append(f"  {v} = f32[10,10] exponential({v}t)")
        elif op in ("dot", "dot_t"):
            lc, rc = (1, 0) if op == "dot" else (0, 1)
            lines.append(f"  {v}d = f32[10,10] dot({a}, {b}), lhs_contracting_dims={{{lc}}}, "
                         f"rhs_contracting_dims={{{rc}}}")
            lines.append(f"  {v} = f32[10,10] tanh({v}d)")
        elif op == "transpose":
            lines.append(f"  {v} = f32[10,10] transpose({a}), dimensions={{1,0}}")
        elif op == "constraint":
            lines.append(f"  {v} = f32[10,10] custom-call({a}), custom_call_target=\"Sharding\", "
                         f"sharding={r.choice(SHARDINGS)}")
        elif op == "rows":
            lines.append(f"  {v}s = f32[5,10] slice({a}), slice={{[3:8], [0:10]}}")
            lines.append(f"  {v} = f32[10,10] concatenate({v}s, {v}s), dimensions={{0}}")
        elif op == "reverse":
            lines.append(f"  {v} = f32[10,10] reverse({a}), dimensions={{{r.randint(0, 1)}}}")
        elif op == "window":
            lines.append(f"  z{k} = f32[] constant(0)")
            lines.append(f"  {v} = f32[10,10] reduce-window({a}, z{k}), "
                         "window={size=1x3 pad=0_0x0_2}, to_apply=add")
        elif op == "reshape":
            lines.append(f"  {v}r = f32[10,2,5] reshape({a})")
            lines.append(f"  {v}c = f32[10,2,5] custom-call({v}r), "
                         f"custom_call_target=\"Sharding\", "
                         f"sharding={r.choice(RESHAPED)}")
            lines.append(f"  {v} = f32[10,10] reshape({v}c)")
        else:   # reduce (sum or max) and broadcast back
            kind, init = ("add", "0") if op == "reduce" else ("max", "-inf")
            lines.append(f"  z{k} = f32[] constant({init})")
            lines.append(f"  {v}r = f32[10] reduce({a}, z{k}), dimensions={{{r.randint(0, 1)}}}, "
                         f"to_apply={kind}")
            lines.append(f"  {v} = f32[10,10] broadcast({v}r), dimensions={{{r.randint(0, 1)}}}")
        values.append(v)
    lines.append(f"  ROOT out = (f32[10,10], f32[10,10]) tuple({values[-1]}, "
                 f"{r.choice(values)})")
    lines.append("}")
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(60))
def test_random_uneven_program_matches_one_device(seed):
    text = _program(seed)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal((10, 10)).astype(np.float32) for _ in range(2)]
    want = _one_device(text, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpmdFallbackWarning)
        got, _ = run_partitioned(text, 8, args)
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, want[i], rtol=1e-3, atol=1e-3,
                                   err_msg=f"output {i} of\n{text}")


def test_random_programs_keep_uneven_cuts():
    """The random programs above really run on padded chunks."""
    padded = 0
    for seed in range(10):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpmdFallbackWarning)
            result = partition_module(parse_module(_program(seed)), 8)
        text = module_to_text(result.module)
        padded += ("f32[2,10]" in text or "f32[10,2]" in text or "f32[3,10]" in text or
                   "f32[10,3]" in text)
    assert padded >= 8
