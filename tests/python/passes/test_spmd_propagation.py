"""Sharding propagation: what each value of the entry gets from the
shardings the module states."""

from __future__ import annotations

from xla_gpu.hlo import parse_module
from xla_gpu.hlo.passes.spmd import parse_sharding, propagate, sharding_of
from spmd_cases import MODULE_WITH_ADD, ONE_ELEMENT_UPDATES

ROWS8 = "{devices=[8,1]<=[8]}"
COLS8 = "{devices=[1,8]<=[8]}"


def _shardings(text: str, n: int = 8) -> dict[str, str]:
    module = parse_module(text)
    entry = module.entry
    order = entry.instructions
    fixed = {id(i): sharding_of(i, n) for i in order if sharding_of(i, n) is not None}
    out = propagate(entry, fixed, n, order)
    return {i.name: str(out[id(i)]) for i in order}


def test_elementwise_forward_and_broadcast_backward():
    got = _shardings(f"""
HloModule m
ENTRY e {{
  x = f32[16,8] parameter(0), sharding={ROWS8}
  c = f32[] constant(2)
  b = f32[16,8] broadcast(c), dimensions={{}}
  v = f32[8] parameter(1), sharding={{replicated}}
  bv = f32[16,8] broadcast(v), dimensions={{1}}
  m = f32[16,8] multiply(x, b)
  ROOT a = f32[16,8] add(m, bv)
}}""")
    assert got["m"] == ROWS8 and got["a"] == ROWS8
    # The broadcasts are cut as their user is (each device builds its rows).
    assert got["b"] == ROWS8 and got["bv"] == ROWS8
    assert got["c"] == "{replicated}" and got["v"] == "{replicated}"


def test_transpose_reshape_and_reduce():
    got = _shardings(MODULE_WITH_ADD + f"""ENTRY e {{
  x = f32[16,8] parameter(0), sharding={ROWS8}
  t = f32[8,16] transpose(x), dimensions={{1,0}}
  r = f32[8,16,1] reshape(t)
  z = f32[] constant(0)
  s = f32[8] reduce(t, z), dimensions={{1}}, to_apply=add
  ROOT out = (f32[8,16,1], f32[8]) tuple(r, s)
}}""")
    assert got["t"] == COLS8
    assert got["r"] == "{devices=[1,8,1]<=[8]}"
    # Summing over the cut dim leaves the same value on every device.
    assert got["s"] == "{replicated}"


def test_dot_merges_batch_and_free_dims_of_both_operands():
    got = _shardings("""
HloModule m
ENTRY e {
  x = f32[4,8] parameter(0), sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}
  w = f32[8,16] parameter(1), sharding={devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}
  ROOT d = f32[4,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    assert parse_sharding(got["d"]) == parse_sharding("{devices=[2,4]<=[8]}")


def test_dot_over_a_cut_contracting_dim_is_replicated():
    got = _shardings(f"""
HloModule m
ENTRY e {{
  x = f32[4,16] parameter(0), sharding={COLS8}
  w = f32[16,8] parameter(1), sharding={ROWS8}
  ROOT d = f32[4,8] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}""")
    assert got["d"] == "{replicated}"


def test_touched_dims_lose_their_cut():
    got = _shardings(f"""
HloModule m
lt {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}}
ENTRY e {{
  x = f32[16,16] parameter(0), sharding={{devices=[2,4]<=[8]}}
  i = s32[] parameter(1)
  d = f32[16,8] dynamic-slice(x, i, i), dynamic_slice_sizes={{16,8}}
  s = f32[16,8] slice(x), slice={{[0:16], [0:8]}}
  k = f32[16,16] sort(x), dimensions={{1}}, to_apply=lt
  ROOT out = (f32[16,8], f32[16,8], f32[16,16]) tuple(d, s, k)
}}""")
    assert parse_sharding(got["d"]) == parse_sharding(
        "{devices=[2,1,4]<=[8] last_tile_dim_replicate}")
    # (a slice's columns stay cut: each device's far columns come piece by
    # piece, XLA's compact halo exchange)
    assert parse_sharding(got["s"]) == parse_sharding("{devices=[2,4]<=[8]}")
    # (a sort keeps its rows cut: the sorted dim is whole on each device)
    assert parse_sharding(got["k"]) == parse_sharding(
        "{devices=[2,1,4]<=[8] last_tile_dim_replicate}")


def test_stated_shardings_win_and_uneven_ones_stay():
    got = _shardings(f"""
HloModule m
ENTRY e {{
  x = f32[16,8] parameter(0), sharding={ROWS8}
  n = f32[16,8] negate(x), sharding={COLS8}
  y = f32[6,8] parameter(1), sharding={ROWS8}
  ROOT out = (f32[16,8], f32[6,8]) tuple(n, y)
}}""")
    assert got["n"] == COLS8
    # 6 rows do not split 8 ways: chunks of one row, the last two padding
    assert got["y"] == ROWS8


def test_a_one_element_slice_of_a_cut_vector_squeezes_to_a_replicated_scalar():
    # x_ref[0] += 1 on a sharded ref (jax's mutable arrays): slice [0:1] of
    # a cut vector, reshaped to a scalar. Nothing stays cut; the reshape's
    # sharding is replicated (the propagation crashed on it).
    got = _shardings(ONE_ELEMENT_UPDATES, n=2)
    assert got["r0"] == "{replicated}" and got["a0"] == "{replicated}"
    assert got["u1"] == "{devices=[2]<=[2]}"


def test_sharding_group_values_take_one_sharding():
    """jax's shard_alike: the operands of xla.sdy.ShardingGroup calls with
    one group id get one sharding: the stated one where a member has it,
    else what propagation found for one of them; another group, and a
    member of another shape, are left alone."""
    got = _shardings(f"""
HloModule m
ENTRY e {{
  x = f32[16,8] parameter(0), sharding={ROWS8}
  i = s32[128] iota(), iota_dimension=0
  r = s32[16,8] reshape(i)
  c = f32[16,8] convert(r)
  g0 = () custom-call(x), custom_call_target="xla.sdy.ShardingGroup", frontend_attributes={{xla.sdy.sharding_group_id="0 : i64"}}
  g1 = () custom-call(c), custom_call_target="xla.sdy.ShardingGroup", frontend_attributes={{xla.sdy.sharding_group_id="0 : i64"}}
  y = f32[16,8] parameter(1), sharding={COLS8}
  t = f32[8,16] transpose(y), dimensions={{1,0}}
  n = f32[8,16] negate(t)
  k = f32[16,8] parameter(2)
  h0 = () custom-call(n), custom_call_target="xla.sdy.ShardingGroup", frontend_attributes={{xla.sdy.sharding_group_id="1 : i64"}}
  h1 = () custom-call(k), custom_call_target="xla.sdy.ShardingGroup", frontend_attributes={{xla.sdy.sharding_group_id="1 : i64"}}
  ROOT o = (f32[16,8], f32[16,8], f32[8,16]) tuple(x, c, n)
}}""")
    # Group 0: the iota's value is cut as the stated x is (rows), and so is
    # what it is computed from.
    assert got["c"] == ROWS8 and got["r"] == ROWS8
    # Group 1: n (rows of the transposed columns) and k, of another shape.
    assert got["n"] == ROWS8 and got["k"] == "{replicated}"


SCAN_STACKING_STEPS = """
HloModule m
body {
  s = (s32[], f32[4,8,16], f32[4,8,16], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  xs = f32[4,8,16] get-tuple-element(s), index=1
  ys = f32[4,8,16] get-tuple-element(s), index=2
  other = f32[8] get-tuple-element(s), index=3
  z = s32[] constant(0)
  step = f32[1,8,16] dynamic-slice(xs, i, z, z), dynamic_slice_sizes={1,8,16}
  two = f32[] constant(2)
  twos = f32[1,8,16] broadcast(two), dimensions={}
  y = f32[1,8,16] multiply(step, twos)
  written = f32[4,8,16] dynamic-update-slice(ys, y, i, z, z)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT out = (s32[], f32[4,8,16], f32[4,8,16], f32[8]) tuple(next, xs, written, other)
}
cond {
  s = (s32[], f32[4,8,16], f32[4,8,16], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[4,8,16] parameter(0), sharding=%s
  zero = f32[] constant(0)
  init = f32[4,8,16] broadcast(zero), dimensions={}
  o = f32[8] parameter(1), sharding={replicated}
  i0 = s32[] constant(0)
  t = (s32[], f32[4,8,16], f32[4,8,16], f32[8]) tuple(i0, x, init, o)
  w = (s32[], f32[4,8,16], f32[4,8,16], f32[8]) while(t), condition=cond, body=body
  ROOT ys = f32[4,8,16] get-tuple-element(w), index=2
}
"""


def test_a_scans_stacked_outputs_are_cut_as_each_step_is():
    # Each step's value is cut along dim 2 (the input's cut, untouched by
    # the slice): the stack it is written into takes that cut, not a
    # replicated one gathered at every step.
    got = _shardings(SCAN_STACKING_STEPS % "{devices=[1,1,8]<=[8]}")
    assert got["ys"] == "{devices=[1,1,8]<=[8]}", got
    # A cut along the written dim would be a different slice per device:
    # the stack stays as it starts.
    got = _shardings(SCAN_STACKING_STEPS % "{devices=[8,1,1]<=[8]}")
    assert got["ys"] == "{replicated}", got
