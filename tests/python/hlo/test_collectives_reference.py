"""The reference semantics of XLA's collectives (xla_gpu.hlo.collectives) and
the interpreter's many devices (evaluate_devices): replica groups in every
form XLA prints, the group modes, each collective on hand-written HLO, the
rendezvous' failures, and the SPMD programs jax 0.10.2 partitioned
(tests/python/data/spmd, made by make_spmd_cases.py there) run device by
device against jax's own per-device results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xla_gpu.errors import ArgumentError, HloError, HloParseError, XlaGpuError
from xla_gpu.hlo import parse_module
from xla_gpu.hlo.collectives import (CollectiveError, CollectiveTimeoutError, GroupMode,
                                     device_groups, group_mode_for, parse_replica_groups,
                                     parse_source_target_pairs, participating_devices)
from xla_gpu.hlo.interpreter import evaluate, evaluate_devices
from xla_gpu.hlo.printer import module_to_text

SPMD = Path(__file__).resolve().parents[1] / "data" / "spmd"
CASES = sorted(p.name.split(".")[0] for p in SPMD.glob("*.partitioned.hlo"))

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""


def module(body: str, partitions: int = 4, replicas: int = 1, extra: str = ADD):
    return parse_module(f"HloModule m, replica_count={replicas}, "
                        f"num_partitions={partitions}\n{extra}\n{body}")


def per_device(n: int, shape=(2,), dtype=np.float32):
    """Device d's argument: d * 10 + 0, 1, 2, ..."""
    size = int(np.prod(shape))
    return [[(np.arange(size) + 10 * d).reshape(shape).astype(dtype)] for d in range(n)]


# ----------------------------------------------------------------- replica groups

@pytest.mark.parametrize("text, groups", [
    ("{}", ()),
    ("{{0,1},{2,3}}", ((0, 1), (2, 3))),
    ("{ {3, 1} , {0,2} }", ((3, 1), (0, 2))),
    ("{{0,1,2,3,4,5,6,7}}", (tuple(range(8)),)),
    ("[2,4]<=[8]", ((0, 1, 2, 3), (4, 5, 6, 7))),
    ("[1,4]<=[4]", ((0, 1, 2, 3),)),
    ("[2,4]<=[4,2]T(1,0)", ((0, 2, 4, 6), (1, 3, 5, 7))),
    ("[4,2]<=[2,4]T(1,0)", ((0, 4), (1, 5), (2, 6), (3, 7))),
    # iota(8).reshape(2,2,2): element [i,j,k] = 4i+2j+k; read in (k,j,i) order.
    ("[4,2]<=[2,2,2]T(2,1,0)", ((0, 4), (2, 6), (1, 5), (3, 7))),
])
def test_replica_groups_list_and_iota_forms(text, groups):
    assert parse_replica_groups(text) == groups


# The mesh-axes form (what jax 0.10.2's XLA prints); the expected groups are
# what XLA's CPU runtime gathered for each of these replica_groups.
@pytest.mark.parametrize("text, groups", [
    ("mesh['a'=2,'b'=4] {'b'}", ((0, 1, 2, 3), (4, 5, 6, 7))),
    ("mesh['a'=2,'b'=4] {'a'}", ((0, 4), (1, 5), (2, 6), (3, 7))),
    ("mesh['a'=2,'b'=4] {'b','a'}", ((0, 4, 1, 5, 2, 6, 3, 7),)),
    ("mesh['axis_0'=8,'axis_1'=1] {'axis_0'}", (tuple(range(8)),)),
    ("mesh['a'=8] {'a':(2)2}", ((0, 2), (1, 3), (4, 6), (5, 7))),
    ("mesh['a'=8] {'a':(4)2,'a':(1)2}", ((0, 4, 1, 5), (2, 6, 3, 7))),
    ("mesh['a'=2,'b'=4] {'b':(2)2,'a'}", ((0, 4, 1, 5), (2, 6, 3, 7))),
    ("mesh['a'=2,'b'=2,'c'=2] {'c','a'}", ((0, 4, 1, 5), (2, 6, 3, 7))),
    ("mesh['x'=8], device_ids=([2,4]T(1,0)) {'x'}", ((0, 4, 1, 5, 2, 6, 3, 7),)),
    ("mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'b'}", ((3, 2), (1, 0))),
])
def test_replica_groups_mesh_axes_form(text, groups):
    assert parse_replica_groups(text) == groups


@pytest.mark.parametrize("text, message", [
    ("[2,4]<=[6]", "the iota has 6 ids"),
    ("[2,4]<=[4,2]T(0,0)", "not a permutation"),
    ("[8]<=[8]", "2 dimensions"),
    ("{{0,1},{1,2}}", "id 1 appears in more than one place"),
    ("{{0,1},{}}", "group 1 is empty"),
    ("{{0,1},}", "expected"),
    ("{0,1}", "expected"),
    ("0,1", "expected"),
    ("mesh['a'=2,'b'=4] {'c'}", "'c' is not an axis"),
    ("mesh['a'=8] {'a':(3)2}", "not a sub-axis"),
    ("mesh['a'=2] {'a'} junk", "expected the end"),
])
def test_malformed_replica_groups(text, message):
    with pytest.raises(HloError, match=message.replace("(", r"\(")):
        parse_replica_groups(text)


def test_source_target_pairs():
    assert parse_source_target_pairs("{{0,1},{1,2},{2,0}}") == ((0, 1), (1, 2), (2, 0))
    assert parse_source_target_pairs("{}") == ()
    for bad, message in (("{{0,1,2}}", "not a {source,target} pair"),
                         ("{{0,1},{0,2}}", "source 0 appears twice"),
                         ("{{0,2},{1,2}}", "target 2 appears twice")):
        with pytest.raises(HloError, match=message):
            parse_source_target_pairs(bad)


def test_parser_keeps_replica_groups_raw_and_prints_them_back():
    text = """HloModule m, num_partitions=8
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  a = f32[2] all-reduce(x), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), use_global_device_ids=true, to_apply=add
  ROOT b = f32[2] all-reduce(a), channel_id=2, replica_groups=mesh['x'=8], device_ids=([2,4]T(1,0)) {'x'}, use_global_device_ids=true, to_apply=add
}
"""
    m = parse_module(text)
    a, b = m.entry.find("a"), m.entry.find("b")
    assert a.attrs["replica_groups"] == "[2,4]<=[4,2]T(1,0)"
    assert b.attrs["replica_groups"] == "mesh['x'=8], device_ids=([2,4]T(1,0)) {'x'}"
    assert b.attrs["use_global_device_ids"] is True and b.attrs["channel_id"] == "2"
    again = parse_module(module_to_text(m))
    assert again.entry.find("b").attrs["replica_groups"] == b.attrs["replica_groups"]


def test_module_header_counts():
    m = module("ENTRY e {\n  ROOT x = f32[] parameter(0)\n}", partitions=4, replicas=2)
    assert (m.replica_count, m.num_partitions) == (2, 4)
    bare = parse_module("ENTRY e {\n  ROOT x = f32[] parameter(0)\n}")
    assert (bare.replica_count, bare.num_partitions) == (1, 1)
    bad = parse_module("HloModule m, num_partitions=zero\nENTRY e {\n  ROOT x = f32[] "
                       "parameter(0)\n}")
    with pytest.raises(HloError, match="num_partitions=zero"):
        bad.num_partitions


# -------------------------------------------------------------------- group modes

def test_group_modes_follow_channel_id_and_use_global_device_ids():
    assert group_mode_for("all-reduce", False, False) is GroupMode.CROSS_REPLICA
    assert group_mode_for("all-reduce", True, False) is GroupMode.CROSS_REPLICA_AND_PARTITION
    assert group_mode_for("all-gather", True, True) is GroupMode.FLATTENED_ID
    assert group_mode_for("all-to-all", False, None) is GroupMode.CROSS_REPLICA
    assert group_mode_for("collective-permute", True, None) is GroupMode.CROSS_PARTITION
    with pytest.raises(HloError, match="needs a channel_id"):
        group_mode_for("all-reduce", False, True)


@pytest.mark.parametrize("groups, mode, device, expected", [
    # 2 replicas x 4 partitions: device 5 is replica 1, partition 1.
    (((0, 1),), GroupMode.CROSS_REPLICA, 5, (1, 5)),
    (((1, 0),), GroupMode.CROSS_REPLICA, 2, (6, 2)),
    ((), GroupMode.CROSS_REPLICA, 5, (1, 5)),
    (((0, 1), (2, 3)), GroupMode.CROSS_PARTITION, 6, (6, 7)),
    ((), GroupMode.CROSS_PARTITION, 5, (4, 5, 6, 7)),
    (((0,), (1,)), GroupMode.CROSS_REPLICA_AND_PARTITION, 5, (4, 5, 6, 7)),
    (((1, 0),), GroupMode.CROSS_REPLICA_AND_PARTITION, 0, (4, 5, 6, 7, 0, 1, 2, 3)),
    (((7, 0), (1, 2, 3, 4, 5, 6)), GroupMode.FLATTENED_ID, 0, (7, 0)),
])
def test_participating_devices(groups, mode, device, expected):
    assert participating_devices(groups, mode, device, 2, 4) == expected


@pytest.mark.parametrize("groups, mode", [
    (((0, 1),), GroupMode.CROSS_REPLICA), ((), GroupMode.CROSS_REPLICA),
    (((0, 2), (3, 1)), GroupMode.CROSS_PARTITION), ((), GroupMode.CROSS_PARTITION),
    (((0,), (1,)), GroupMode.CROSS_REPLICA_AND_PARTITION),
    (((7, 0), (1, 2, 3), (4, 5, 6)), GroupMode.FLATTENED_ID),
])
def test_device_groups_agree_with_participating_devices(groups, mode):
    all_groups = device_groups(groups, mode, 2, 4)
    assert sorted(d for g in all_groups for d in g) == list(range(8))
    for g in all_groups:
        for d in g:
            assert participating_devices(groups, mode, d, 2, 4) == g


def test_participating_devices_errors():
    with pytest.raises(HloError, match="in none of the replica groups"):
        participating_devices(((0, 1),), GroupMode.CROSS_PARTITION, 2, 1, 4)
    with pytest.raises(HloError, match="cannot be empty"):
        participating_devices((), GroupMode.FLATTENED_ID, 0, 1, 4)
    with pytest.raises(HloError, match="only 4"):
        participating_devices(((0, 9),), GroupMode.CROSS_PARTITION, 0, 1, 4)


# ------------------------------------------------------------ the collectives

def run(body, n=4, args=None, partitions=None, replicas=1, extra=ADD, **kw):
    partitions = n // replicas if partitions is None else partitions
    m = module(body, partitions, replicas, extra)
    return evaluate_devices(m, args if args is not None else per_device(n), **kw)


def test_all_reduce_folds_in_group_order():
    # A subtraction reducer shows the order: ((x3 - x2) - x1) - x0.
    out = run("""
sub {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] subtract(a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{3,2,1,0}}, use_global_device_ids=true, to_apply=sub
}""")
    x = [np.arange(2, dtype=np.float32) + 10 * d for d in range(4)]
    for d in range(4):
        np.testing.assert_array_equal(out[d][0], ((x[3] - x[2]) - x[1]) - x[0])


def test_all_reduce_groups_and_tuple_operands():
    out = run("""
ENTRY e {
  x = f32[2] parameter(0)
  y = f32[2,1] reshape(x)
  ROOT r = (f32[2], f32[2,1]) all-reduce(x, y), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=add
}""")
    x = [np.arange(2, dtype=np.float32) + 10 * d for d in range(4)]
    for d in range(4):
        partner = d ^ 2            # groups {0,2} and {1,3}
        total = x[min(d, partner)] + x[max(d, partner)]
        np.testing.assert_array_equal(out[d][0], total)
        np.testing.assert_array_equal(out[d][1], total.reshape(2, 1))


def test_all_reduce_integer_max_cross_replica():
    mx = """
mx {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] maximum(a, b)
}"""
    args = [[np.array([5 - 3 * d, d], np.int32)] for d in range(4)]
    # 2 replicas x 2 partitions, no channel_id: replicas meet within a partition.
    out = run("""
ENTRY e {
  x = s32[2] parameter(0)
  ROOT r = s32[2] all-reduce(x), replica_groups={}, to_apply=mx
}""", args=args, replicas=2, extra=mx)
    for d in range(4):
        p = d % 2
        np.testing.assert_array_equal(out[d][0], np.maximum(args[p][0], args[2 + p][0]))


def test_all_gather_along_a_dimension_and_tuple_form():
    out = run("""
ENTRY e {
  x = f32[1,2] parameter(0)
  y = f32[2] reshape(x)
  a = f32[1,4] all-gather(x), channel_id=1, replica_groups={{1,0},{2,3}}, dimensions={1}, use_global_device_ids=true
  g = (f32[4,2], f32[8]) all-gather(x, y), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  g.1 = f32[4,2] get-tuple-element(g), index=0
  g.2 = f32[8] get-tuple-element(g), index=1
  ROOT t = (f32[1,4], f32[4,2], f32[8]) tuple(a, g.1, g.2)
}""", args=per_device(4, (1, 2)))
    x = [np.arange(2, dtype=np.float32) + 10 * d for d in range(4)]
    np.testing.assert_array_equal(out[0][0], np.concatenate([x[1], x[0]])[None])
    np.testing.assert_array_equal(out[3][0], np.concatenate([x[2], x[3]])[None])
    for d in range(4):
        np.testing.assert_array_equal(out[d][1], np.stack(x))
        np.testing.assert_array_equal(out[d][2], np.concatenate(x))


def test_reduce_scatter():
    out = run("""
ENTRY e {
  x = f32[8] parameter(0)
  ROOT r = f32[2] reduce-scatter(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={0}, to_apply=add
}""", args=per_device(4, (8,)))
    total = sum(np.arange(8, dtype=np.float32) + 10 * d for d in range(4))
    for d in range(4):
        np.testing.assert_array_equal(out[d][0], total[2 * d:2 * d + 2])


def test_all_to_all_array_and_tuple_forms():
    out = run("""
ENTRY e {
  x = s32[4,2] parameter(0)
  a = s32[4,2] all-to-all(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  r0 = s32[1,2] slice(x), slice={[0:1], [0:2]}
  r1 = s32[1,2] slice(x), slice={[1:2], [0:2]}
  t = (s32[1,2], s32[1,2]) all-to-all(r0, r1), channel_id=2, replica_groups={{0,3},{2,1}}
  t0 = s32[1,2] get-tuple-element(t), index=0
  t1 = s32[1,2] get-tuple-element(t), index=1
  ROOT o = (s32[4,2], s32[1,2], s32[1,2]) tuple(a, t0, t1)
}""", args=per_device(4, (4, 2), np.int32))
    x = [(np.arange(8) + 10 * d).reshape(4, 2).astype(np.int32) for d in range(4)]
    for d in range(4):
        # Device d receives block d (row d) of every device, in group order.
        np.testing.assert_array_equal(out[d][0], np.stack([x[j][d] for j in range(4)]))
    # Tuple form: in group {0,3} rank 0 receives operand 0 (row 0) of 0 and 3.
    np.testing.assert_array_equal(out[0][1], x[0][0:1])
    np.testing.assert_array_equal(out[0][2], x[3][0:1])
    np.testing.assert_array_equal(out[3][1], x[0][1:2])
    np.testing.assert_array_equal(out[3][2], x[3][1:2])
    np.testing.assert_array_equal(out[1][1], x[2][1:2])   # group {2,1}: 1 is rank 1


RAGGED = """
ENTRY e {
  x = f32[6,2] parameter(0)
  out = f32[5,2] parameter(1)
  io = s32[4] parameter(2)
  ss = s32[4] parameter(3)
  oo = s32[4] parameter(4)
  rs = s32[2,2] parameter(5)
  ROOT r = f32[5,2] ragged-all-to-all(x, out, io, ss, oo, rs), channel_id=1, replica_groups={{0,1}}
}"""


def ragged_args():
    """Two devices, two updates for each peer (offsets and sizes of 4
    numbers, recv_sizes laid out [sender, update])."""
    x = [(np.arange(12) + 100 * d).reshape(6, 2).astype(np.float32) for d in range(2)]
    out = [np.full((5, 2), -1.0 - d, np.float32) for d in range(2)]
    io = [np.array([0, 2, 1, 4], np.int32), np.array([5, 0, 1, 3], np.int32)]
    ss = [np.array([1, 0, 2, 1], np.int32), np.array([1, 2, 0, 2], np.int32)]
    oo = [np.array([4, 0, 0, 3], np.int32), np.array([0, 2, 0, 1], np.int32)]
    # Device d's recv_sizes[s, j]: what sender s's update j for d holds.
    rs = [np.array([[1, 0], [1, 2]], np.int32), np.array([[2, 1], [0, 2]], np.int32)]
    return [[x[d], out[d], io[d], ss[d], oo[d], rs[d]] for d in range(2)], x


def test_ragged_all_to_all_moves_rows_at_the_offsets_given():
    args, x = ragged_args()
    out = evaluate_devices(module(RAGGED, partitions=2), args, num_partitions=2)
    want0 = np.full((5, 2), -1.0, np.float32)
    want0[4] = x[0][0]           # its own update 0 (1 row from 0 at 4)
    want0[0:1] = x[1][5:6]       # device 1's update 0 for it: row 5 at 0
    want0[2:4] = x[1][0:2]       # device 1's update 1: rows 0..1 at 2
    want1 = np.full((5, 2), -2.0, np.float32)
    want1[0:2] = x[0][1:3]       # device 0's update 2 (its first for device 1)
    want1[3:4] = x[0][4:5]       # device 0's update 3
    want1[1:3] = x[1][3:5]       # its own update 3 (2 rows from 3 at 1)
    np.testing.assert_array_equal(out[0][0], want0)
    np.testing.assert_array_equal(out[1][0], want1)


@pytest.mark.parametrize("change, message", [
    (lambda a: a[1][5].__setitem__((0, 0), 3), "participant 0 sends 2 rows to participant 1 "
     r"\(update 0\), which expects 3"),
    (lambda a: a[0][2].__setitem__(0, 6), r"moves rows \[6, 7\) of an input of 6"),
    (lambda a: a[0][4].__setitem__(0, 5), r"to rows \[5, 6\) of participant 0's output of 5"),
    (lambda a: (a[0][3].__setitem__(0, -1), a[0][5].__setitem__((0, 0), -1)),
     r"moves rows \[0, -1\)"),
])
def test_ragged_all_to_all_refuses_sizes_and_offsets_that_do_not_fit(change, message):
    args, _ = ragged_args()
    change(args)
    with pytest.raises(XlaGpuError, match=message):
        evaluate_devices(module(RAGGED, partitions=2), args, num_partitions=2)


def test_collective_permute_cycle_and_partial():
    out = run("""
ENTRY e {
  x = f32[2] parameter(0)
  c = f32[2] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  p = f32[2] collective-permute(x), channel_id=2, source_target_pairs={{0,3},{3,1}}
  ROOT t = (f32[2], f32[2]) tuple(c, p)
}""")
    x = [np.arange(2, dtype=np.float32) + 10 * d for d in range(4)]
    for d in range(4):
        np.testing.assert_array_equal(out[d][0], x[(d - 1) % 4])
    np.testing.assert_array_equal(out[3][1], x[0])
    np.testing.assert_array_equal(out[1][1], x[3])
    np.testing.assert_array_equal(out[0][1], np.zeros(2, np.float32))
    np.testing.assert_array_equal(out[2][1], np.zeros(2, np.float32))


def test_collective_permute_cross_replica_names_replicas():
    # 2 replicas x 2 partitions, no channel_id: the pairs are replica ids and
    # each partition permutes its own replicas.
    out = run("""
ENTRY e {
  x = f32[2] parameter(0)
  ROOT c = f32[2] collective-permute(x), source_target_pairs={{0,1}}
}""", replicas=2)
    x = [np.arange(2, dtype=np.float32) + 10 * d for d in range(4)]
    np.testing.assert_array_equal(out[2][0], x[0])   # replica 1, partition 0
    np.testing.assert_array_equal(out[3][0], x[1])   # replica 1, partition 1
    np.testing.assert_array_equal(out[0][0], np.zeros(2, np.float32))


def test_collective_broadcast_from_the_groups_first_member():
    out = run("""
ENTRY e {
  x = f32[2] parameter(0)
  ROOT b = f32[2] collective-broadcast(x), channel_id=1, replica_groups={{2,0},{3,1}}
}""")
    x = [np.arange(2, dtype=np.float32) + 10 * d for d in range(4)]
    for d in range(4):
        np.testing.assert_array_equal(out[d][0], x[2] if d in (0, 2) else x[3])


def test_replica_and_partition_ids():
    out = run("""
ENTRY e {
  x = f32[2] parameter(0)
  r = u32[] replica-id()
  p = u32[] partition-id()
  ROOT t = (u32[], u32[]) tuple(r, p)
}""", n=6, replicas=2)
    assert [(int(r), int(p)) for r, p in out] == [(r, p) for r in range(2) for p in range(3)]


def test_async_pairs_do_the_work_at_the_start():
    rs = """
rs {
  y = f32[8] parameter(0)
  ROOT r = f32[2] reduce-scatter(y), channel_id=4, replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={0}, to_apply=add
}"""
    out = run("""
ENTRY e {
  x = f32[2] parameter(0)
  ars = f32[2] all-reduce-start(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  ard = f32[2] all-reduce-done(ars)
  ags = (f32[2], f32[8]) all-gather-start(x), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  agd = f32[8] all-gather-done(ags)
  cps = (f32[2], f32[2], u32[], u32[]) collective-permute-start(x), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  cpd = f32[2] collective-permute-done(cps)
  as = ((f32[8]), f32[2], s32[]) async-start(agd), calls=rs
  ad = f32[2] async-done(as)
  ROOT t = (f32[2], f32[8], f32[2], f32[2]) tuple(ard, agd, cpd, ad)
}""", extra=ADD + rs)
    x = [np.arange(2, dtype=np.float32) + 10 * d for d in range(4)]
    for d in range(4):
        np.testing.assert_array_equal(out[d][0], sum(x))
        np.testing.assert_array_equal(out[d][1], np.concatenate(x))
        np.testing.assert_array_equal(out[d][2], x[(d - 1) % 4])
        np.testing.assert_array_equal(out[d][3], 4 * x[d])


def test_collectives_in_a_while_loop_meet_once_per_iteration():
    # Three rounds of x = all-reduce(x) + partition-id: each round's sum needs
    # the round's values of every device.
    out = run("""
cond {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}
body {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[2] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  r = f32[2] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  p = u32[] partition-id()
  pf = f32[] convert(p)
  pb = f32[2] broadcast(pf), dimensions={}
  y = f32[2] add(r, pb)
  ROOT t = (s32[], f32[2]) tuple(j, y)
}
ENTRY e {
  x = f32[2] parameter(0)
  zero = s32[] constant(0)
  s = (s32[], f32[2]) tuple(zero, x)
  w = (s32[], f32[2]) while(s), condition=cond, body=body
  ROOT o = f32[2] get-tuple-element(w), index=1
}""")
    x = [np.arange(2, dtype=np.float32) + 10 * d for d in range(4)]
    for _ in range(3):
        total = sum(x)
        x = [total + d for d in range(4)]
    for d in range(4):
        np.testing.assert_array_equal(out[d][0], x[d])


def test_one_device_evaluate_is_the_identity():
    m = module("""
ENTRY e {
  x = f32[2] parameter(0)
  a = f32[2] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  g = f32[2] all-gather(x), channel_id=2, replica_groups={{0}}, dimensions={0}, use_global_device_ids=true
  c = f32[2] collective-permute(x), channel_id=3, source_target_pairs={{0,1},{1,0}}
  t = f32[2] all-to-all(x), channel_id=4, replica_groups={{0}}, dimensions={0}
  ROOT o = (f32[2], f32[2], f32[2], f32[2]) tuple(a, g, c, t)
}""")
    x = np.array([1, 2], np.float32)
    for value in evaluate(m, x):
        np.testing.assert_array_equal(value, x)


# ------------------------------------------------------------------ failures

BRANCHY = """
fine {
  x = f32[2] parameter(0)
  ROOT y = f32[2] negate(x)
}
broken {
  x = f32[2] parameter(0)
  ROOT y = f32[2] custom-call(x), custom_call_target="no_such_target_anywhere"
}
"""


def branch_on_partition(target_partition: int) -> str:
    """A selector that is 1 on one partition, 0 elsewhere."""
    return f"""
  p = u32[] partition-id()
  k = u32[] constant({target_partition})
  is = pred[] compare(p, k), direction=EQ
  one = s32[] constant(1)
  zero = s32[] constant(0)
  sel = s32[] select(is, one, zero)"""


def test_a_failing_device_stops_every_device():
    m = module(f"""
ENTRY e {{
  x = f32[2] parameter(0){branch_on_partition(2)}
  c = f32[2] conditional(sel, x, x), branch_computations={{fine, broken}}
  ROOT r = f32[2] all-reduce(c), channel_id=1, replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true, to_apply=add
}}""", extra=ADD + BRANCHY)
    with pytest.raises(CollectiveError) as info:
        evaluate_devices(m, per_device(4), timeout=30)
    e = info.value
    assert isinstance(e, XlaGpuError)
    assert "device 2" in str(e) and "no_such_target_anywhere" in str(e)
    assert set(e.device_errors) == {0, 1, 2, 3}
    assert not isinstance(e.device_errors[2], CollectiveError)
    for d in (0, 1, 3):
        stopped = e.device_errors[d]
        assert isinstance(stopped, CollectiveError)
        assert stopped.instruction == "r" and stopped.missing == (2,)
        assert "instruction 'r' (all-reduce)" in str(stopped) and "[2]" in str(stopped)


def test_a_device_that_skips_the_collective_stops_the_others():
    m = module(f"""
with_ar {{
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true, to_apply=add
}}
without {{
  x = f32[2] parameter(0)
  ROOT y = f32[2] negate(x)
}}
ENTRY e {{
  x = f32[2] parameter(0){branch_on_partition(3)}
  ROOT c = f32[2] conditional(sel, x, x), branch_computations={{with_ar, without}}
}}""")
    with pytest.raises(CollectiveError, match="finished its program without reaching it") \
            as info:
        evaluate_devices(m, per_device(4), timeout=30)
    assert info.value.instruction == "r" and info.value.missing == (3,)
    for d in (0, 1, 2):
        assert info.value.device_errors[d].missing == (3,)


def test_a_rendezvous_past_its_timeout():
    # Partition 1 spins in a loop that does not end while the others wait.
    m = module(f"""
cond {{
  s = s32[] parameter(0)
  big = s32[] constant(2000000000)
  ROOT lt = pred[] compare(s, big), direction=LT
}}
body {{
  s = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT t = s32[] add(s, one)
}}
spin {{
  x = f32[2] parameter(0)
  zero = s32[] constant(0)
  w = s32[] while(zero), condition=cond, body=body
  wf = f32[] convert(w)
  wb = f32[2] broadcast(wf), dimensions={{}}
  ROOT y = f32[2] add(x, wb)
}}
pass {{
  ROOT x = f32[2] parameter(0)
}}
ENTRY e {{
  x = f32[2] parameter(0){branch_on_partition(1)}
  c = f32[2] conditional(sel, x, x), branch_computations={{pass, spin}}
  ROOT r = f32[2] all-reduce(c), channel_id=1, replica_groups={{{{0,1}},{{2,3}}}}, use_global_device_ids=true, to_apply=add
}}""")
    with pytest.raises(CollectiveTimeoutError) as info:
        evaluate_devices(m, per_device(4), timeout=0.5)
    e = info.value
    assert isinstance(e, TimeoutError) and e.instruction == "r" and e.missing == (1,)
    assert "did not arrive within 0.5 s" in str(e)
    assert e.device_errors[0].missing == (1,)
    # The spinning device is stopped too, where it was.
    assert isinstance(e.device_errors[1], CollectiveTimeoutError)


def test_a_deadlock_is_reported_at_once():
    # Partition 0 runs a then b, partition 1 runs b then a.
    m = module(f"""
ab {{
  x = f32[2] parameter(0)
  a = f32[2] all-reduce(x), channel_id=1, replica_groups={{{{0,1}}}}, use_global_device_ids=true, to_apply=add
  ROOT b = f32[2] all-reduce(a), channel_id=2, replica_groups={{{{0,1}}}}, use_global_device_ids=true, to_apply=add
}}
ba {{
  x = f32[2] parameter(0)
  b = f32[2] all-reduce(x), channel_id=2, replica_groups={{{{0,1}}}}, use_global_device_ids=true, to_apply=add
  ROOT a = f32[2] all-reduce(b), channel_id=1, replica_groups={{{{0,1}}}}, use_global_device_ids=true, to_apply=add
}}
ENTRY e {{
  x = f32[2] parameter(0){branch_on_partition(1)}
  ROOT c = f32[2] conditional(sel, x, x), branch_computations={{ab, ba}}
}}""", partitions=2)
    with pytest.raises(CollectiveError, match="deadlock"):
        evaluate_devices(m, per_device(2), timeout=60)


def test_a_program_failing_on_every_device_raises_its_own_error():
    m = module("""
ENTRY e {
  x = f32[2] parameter(0)
  ROOT y = f32[2] custom-call(x), custom_call_target="no_such_target_anywhere"
}""", partitions=2)
    with pytest.raises(HloError, match="no_such_target_anywhere") as info:
        evaluate_devices(m, per_device(2))
    assert not isinstance(info.value, CollectiveError)


def test_arguments_are_checked_per_device():
    m = module("""
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
}""")
    with pytest.raises(ArgumentError, match="4 devices .* need 4 argument lists, got 3"):
        evaluate_devices(m, per_device(3))
    args = per_device(4)
    args[2] = [np.zeros(3, np.float32)]
    with pytest.raises(ArgumentError, match="of device 2"):
        evaluate_devices(m, args)
    with pytest.raises(ArgumentError, match="timeout"):
        evaluate_devices(m, per_device(4), timeout=0)
    with pytest.raises(ArgumentError, match="num_partitions"):
        evaluate_devices(m, per_device(4), num_partitions=-4)


def test_counts_given_override_the_header():
    m = module("""
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={}, to_apply=add
}""")
    # Cross-replica-and-partition with {}: every device of every partition.
    out = evaluate_devices(m, per_device(6), num_replicas=3, num_partitions=2)
    total = sum(np.arange(2, dtype=np.float32) + 10 * d for d in range(6))
    for d in range(6):
        np.testing.assert_array_equal(out[d][0], total)


# ------------------------------------------------------------------ verifier

@pytest.mark.parametrize("inst, message", [
    ("f32[6] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
     "use_global_device_ids=true", r"in groups of 4 gives f32\[8\], not f32\[6\]"),
    ("f32[2] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, "
     "use_global_device_ids=true", "not a dimension"),
    ("f32[1] reduce-scatter(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
     "use_global_device_ids=true, to_apply=add", "cannot split dimension 0"),
    ("f32[2] all-to-all(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}",
     "cannot split dimension 0"),
    ("(f32[2], f32[2]) all-to-all(x, x), channel_id=1, replica_groups={{0,1,2,3}}",
     r"one operand per participant \(4\), has 2"),
    ("f32[2] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{2,1}}",
     "target 1 appears twice"),
    ("f32[2] collective-permute(x), channel_id=1", "needs source_target_pairs"),
    ("f32[2] all-reduce(x), channel_id=1, replica_groups={}, use_global_device_ids=true, "
     "to_apply=add", "cannot be empty"),
    ("f32[2] all-reduce(x), replica_groups={{0,1}}, use_global_device_ids=true, "
     "to_apply=add", "needs a channel_id"),
    ("f32[2] all-reduce(x), channel_id=1, replica_groups={{0,9}}, "
     "use_global_device_ids=true, to_apply=add", "name id 9"),
    ("f32[2] all-reduce(x), channel_id=1, replica_groups=[2,2]<=[3], "
     "use_global_device_ids=true, to_apply=add", "the iota has 3 ids"),
    ("f32[3] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, "
     "use_global_device_ids=true, to_apply=add", r"gives f32\[2\], not f32\[3\]"),
    ("s32[] partition-id()", "produces u32"),
    ("f32[2] ragged-all-to-all(x, x, x, x, x), channel_id=1, replica_groups={{0,1,2,3}}",
     r"takes 6 operands \(input, output, input_offsets, send_sizes, output_offsets, "
     r"recv_sizes\), has 5"),
    ("f32[2] ragged-all-to-all(x, x, x, x, x, x), channel_id=1, replica_groups={{0,1,2,3}}",
     "offsets and sizes are s32 or s64"),
])
def test_verifier_refuses_inconsistent_collectives(inst, message):
    with pytest.raises(HloParseError, match=message):
        module(f"""
ENTRY e {{
  x = f32[2] parameter(0)
  ROOT r = {inst}
}}""")


def test_verifier_checks_the_async_pairs():
    with pytest.raises(HloParseError, match="all-gather-done"):
        module("""
ENTRY e {
  x = f32[2] parameter(0)
  s = (f32[2], f32[8]) all-gather-start(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT d = f32[2] all-gather-done(s)
}""")


# ------------------------------------------------------ jax's SPMD programs

def test_the_spmd_cases_are_there():
    assert {"dp_mlp_step", "fsdp_mlp", "megatron_mlp", "mesh2d_mlp", "permuted_mesh",
            "sharded_reductions", "psum", "pmax", "all_gather", "psum_scatter",
            "all_to_all", "ppermute", "axis_index", "psum_in_loop",
            "mesh2d_collectives"} <= set(CASES)


@pytest.mark.parametrize("name", CASES)
def test_spmd_case_matches_jax_per_device(name):
    data = np.load(SPMD / f"{name}.npz")
    replicas, partitions = int(data["num_replicas"]), int(data["num_partitions"])
    n = replicas * partitions
    inputs = sorted(k for k in data.files if k.startswith("in_") and "_dev" not in k)
    outputs = sorted(k for k in data.files if k.startswith("out_") and "_dev" not in k)
    m = parse_module((SPMD / f"{name}.partitioned.hlo").read_text(), source=name)
    assert (m.replica_count, m.num_partitions) == (replicas, partitions)
    args = [[data[f"{k}_dev{d}"] for k in inputs] for d in range(n)]
    results = evaluate_devices(m, args, timeout=60)
    for d in range(n):
        assert len(results[d]) == len(outputs)
        for k, got in zip(outputs, results[d]):
            expected = data[f"{k}_dev{d}"]
            assert got.dtype == expected.dtype and got.shape == expected.shape, (d, k)
            if np.issubdtype(expected.dtype, np.floating):
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5,
                                           err_msg=f"device {d}, {k}")
            else:
                np.testing.assert_array_equal(got, expected, err_msg=f"device {d}, {k}")
    # The annotated program before partitioning parses too.
    parse_module((SPMD / f"{name}.pre.hlo").read_text(), source=f"{name}.pre")
