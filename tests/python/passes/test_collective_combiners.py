"""The collective combiners: independent all-reduces (all-gathers,
reduce-scatters) that meet the same devices the same way become one
variadic collective; dependent ones, other groups, other reductions or
types, and groups past the byte threshold stay apart. Combined programs
run on emulated devices and match the reference interpreter's run of the
uncombined program."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.hlo import evaluate_devices, parse_module
from xla_gpu.hlo.passes.collective_combiners import (AllGatherCombiner, AllReduceCombiner,
                                                     ReduceScatterCombiner)

REDUCERS = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] maximum(a, b)
}
add_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] add(a, b)
}
"""


def module(body: str, partitions: int = 4) -> str:
    return f"HloModule m, num_partitions={partitions}\n{REDUCERS}\nENTRY e {{\n{body}\n}}\n"


def opcodes(comp) -> list[str]:
    return [i.opcode for i in comp.instructions]


GRADIENTS = module("""
  p0 = f32[8] parameter(0)
  p1 = f32[4,4] parameter(1)
  p2 = f32[3] parameter(2)
  a0 = f32[8] all-reduce(p0), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  a1 = f32[4,4] all-reduce(p1), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  a2 = f32[3] all-reduce(p2), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ROOT t = (f32[8], f32[4,4], f32[3]) tuple(a0, a1, a2)""")


def test_independent_all_reduces_become_one():
    m = parse_module(GRADIENTS)
    assert AllReduceCombiner().run(m)
    reduces = [i for i in m.entry.instructions if i.opcode == "all-reduce"]
    assert len(reduces) == 1
    (combined,) = reduces
    assert combined.shape.is_tuple and len(combined.operands) == 3
    assert [o.name for o in combined.operands] == ["p0", "p1", "p2"]
    assert [o.opcode for o in m.entry.root.operands] == ["get-tuple-element"] * 3
    assert not AllReduceCombiner().run(m)   # nothing left to combine


def test_a_dependent_all_reduce_is_not_combined():
    m = parse_module(module("""
  p0 = f32[8] parameter(0)
  a0 = f32[8] all-reduce(p0), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  n = f32[8] negate(a0)
  a1 = f32[8] all-reduce(n), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ROOT t = (f32[8], f32[8]) tuple(a0, a1)"""))
    assert not AllReduceCombiner().run(m)
    assert opcodes(m.entry).count("all-reduce") == 2


def test_combining_never_makes_a_cycle():
    # a1 depends on a0 and a3 on a2, a2 on nothing combined yet: after a0
    # and a2 combine, a3 reads a value computed after the combined
    # collective, so a1 and a3 may still combine, but never a0 with a1.
    m = parse_module(module("""
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  a0 = f32[8] all-reduce(p0), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  a2 = f32[8] all-reduce(p1), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  n0 = f32[8] negate(a0)
  n2 = f32[8] exponential(a2)
  a1 = f32[8] all-reduce(n0), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  a3 = f32[8] all-reduce(n2), channel_id=4, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ROOT t = (f32[8], f32[8], f32[8], f32[8]) tuple(a0, a1, a2, a3)"""))
    assert AllReduceCombiner().run(m)
    reduces = [i for i in m.entry.post_order() if i.opcode == "all-reduce"]
    assert [len(r.operands) for r in reduces] == [2, 2]
    assert {o.name for o in reduces[0].operands} == {"p0", "p1"}


@pytest.mark.parametrize("second", [
    # another reduction, another type, other groups, no channel id
    "a1 = f32[8] all-reduce(p1), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=max",
    "a1 = s32[8] all-reduce(p2), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add_s32",
    "a1 = f32[8] all-reduce(p1), channel_id=2, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add",
    "a1 = f32[8] all-reduce(p1), replica_groups={}, to_apply=add",
])
def test_different_collectives_stay_apart(second):
    m = parse_module(module(f"""
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  p2 = s32[8] parameter(2)
  a0 = f32[8] all-reduce(p0), channel_id=1, replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true, to_apply=add
  {second}
  ROOT t = tuple(a0, a1)""".replace("{{{{", "{{").replace("}}}}", "}}")))
    assert not AllReduceCombiner().run(m)


def test_the_byte_threshold_closes_a_group():
    m = parse_module(GRADIENTS)
    # 32 + 64 bytes fit under 100; the third (12 bytes) starts a new group.
    assert AllReduceCombiner(threshold_bytes=100).run(m)
    sizes = sorted(len(i.operands) for i in m.entry.instructions if i.opcode == "all-reduce")
    assert sizes == [1, 2]


def test_all_gathers_and_reduce_scatters_combine_by_dimension():
    m = parse_module(module("""
  p0 = f32[2,3] parameter(0)
  p1 = f32[2,5] parameter(1)
  p2 = f32[8,3] parameter(2)
  g0 = f32[8,3] all-gather(p0), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  g1 = f32[8,5] all-gather(p1), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  g2 = f32[2,12] all-gather(p0), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  r0 = f32[2,3] reduce-scatter(p2), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  r1 = f32[2,3] reduce-scatter(p2), channel_id=5, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  ROOT t = tuple(g0, g1, g2, r0, r1)"""))
    assert AllGatherCombiner().run(m)
    assert ReduceScatterCombiner().run(m)
    gathers = sorted(len(i.operands) for i in m.entry.instructions if i.opcode == "all-gather")
    scatters = [len(i.operands) for i in m.entry.instructions if i.opcode == "reduce-scatter"]
    assert gathers == [1, 2] and scatters == [2]


def _device_args(n: int, shapes, dtype=np.float32):
    return [[(np.arange(int(np.prod(s))) * (d + 1) + k).reshape(s).astype(dtype)
             for k, s in enumerate(shapes)] for d in range(n)]


@pytest.mark.parametrize("text", [GRADIENTS, module("""
  p0 = f32[2,3] parameter(0)
  p1 = f32[2,5] parameter(1)
  p2 = f32[8,3] parameter(2)
  g0 = f32[8,3] all-gather(p0), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  g1 = f32[8,5] all-gather(p1), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  r0 = f32[2,3] reduce-scatter(p2), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  e = f32[8,3] exponential(p2)
  r1 = f32[2,3] reduce-scatter(e), channel_id=5, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  ROOT t = tuple(g0, g1, r0, r1)""")], ids=["all_reduce", "gather_scatter"])
def test_combined_programs_run_as_the_interpreter_says(text):
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    optimized = exe.hlo_text
    for opcode in ("all-reduce", "all-gather", "reduce-scatter"):
        assert optimized.count(f" {opcode}(") <= 1, optimized
    m = parse_module(text)
    shapes = [p.shape.dims for p in m.entry.parameters]
    args = _device_args(4, shapes)
    got = exe.run_partitioned(args)
    want = evaluate_devices(m, args, num_replicas=1, num_partitions=4)
    for device in range(4):
        for g, w in zip(got[device], want[device]):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_async_pairs_made_synchronous_compute_the_same():
    """AsyncCollectivesToSync: each start/done pair whose start only its
    done reads becomes the plain collective, on every device the same
    values; a start read elsewhere, and the in-place permute, stay."""
    from xla_gpu.hlo.passes.async_collectives_to_sync import AsyncCollectivesToSync
    from xla_gpu.hlo.printer import module_to_text
    text = """HloModule m, num_partitions=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[4] parameter(0)
  g = (f32[4], f32[8]) all-gather-start(x), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  gd = f32[8] all-gather-done(g)
  r = f32[4] all-reduce-start(x), channel_id=2, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add
  rd = f32[4] all-reduce-done(r)
  p = (f32[4], f32[4], u32[], u32[]) collective-permute-start(x), channel_id=3, source_target_pairs={{0,1},{1,0}}
  pd = f32[4] collective-permute-done(p)
  q = (f32[4], f32[4], u32[], u32[]) collective-permute-start(rd), channel_id=4, source_target_pairs={{0,1},{1,0}}
  q0 = f32[4] get-tuple-element(q), index=0
  qd = f32[4] collective-permute-done(q)
  ROOT t = (f32[8], f32[4], f32[4], f32[4], f32[4]) tuple(gd, rd, pd, qd, q0)
}"""
    module = parse_module(text)
    assert AsyncCollectivesToSync().run(module)
    ops = [i.opcode for i in module.entry.instructions]
    assert {"all-gather", "all-reduce", "collective-permute"} <= set(ops)
    assert ops.count("collective-permute-start") == 1   # q: read by its get-tuple-element
    assert "all-gather-done" not in ops and "all-reduce-done" not in ops
    args = [[np.arange(4, dtype=np.float32) + 10 * d] for d in range(2)]
    before = evaluate_devices(parse_module(text), args, num_partitions=2)
    after = evaluate_devices(parse_module(module_to_text(module)), args, num_partitions=2)
    for b, a in zip(before, after):
        for x, y in zip(b, a):
            np.testing.assert_array_equal(x, y)
