"""SPMD programs compiled and run on many emulated devices (cpu target):
`xla_gpu.compile(..., num_partitions=N, num_replicas=R)` makes one
ProgramExecutable whose collectives are thunks of their own, and
`run_partitioned` runs it on every device (a thread and a set of buffers
each) with the collectives meeting in a rendezvous. Checked against jax's
own per-device results (the SPMD programs jax partitioned for 8 devices in
tests/python/data/spmd) and against the reference interpreter's
`evaluate_devices` on hand-written programs for every collective; failures
(a device that raises, a device that never arrives) reach every device
within the timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu.errors import ArgumentError, UnsupportedError
from xla_gpu.hlo import evaluate_devices, parse_module
from xla_gpu.hlo.collectives import CollectiveError, CollectiveTimeoutError
from xla_gpu.runtime import collective_thunks
from xla_gpu.runtime.program import ProgramExecutable, load_program
from xla_gpu.runtime.thunks import thunk_from_dict, walk

SPMD = Path(__file__).resolve().parents[1] / "data" / "spmd"
CASES = sorted(p.name.split(".")[0] for p in SPMD.glob("*.partitioned.hlo"))


def reducer(op: str, dtype: str = "f32", name: str = "add") -> str:
    return f"""
{name} {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT c = {dtype}[] {op}(a, b)
}}
"""


ADD = reducer("add")


def module_text(body: str, partitions: int = 4, replicas: int = 1, extra: str = ADD) -> str:
    return f"HloModule m, replica_count={replicas}, num_partitions={partitions}\n{extra}\n{body}"


def device_args(n: int, shapes, dtype=np.float32) -> list[list[np.ndarray]]:
    """Device d's argument k: d * 10 + k + 0, 1, 2, ... (distinct on every
    device, so that a collective that mixes devices up is seen)."""
    out = []
    for d in range(n):
        args = []
        for k, shape in enumerate(shapes):
            size = int(np.prod(shape))
            args.append((np.arange(size) + 10 * d + k).reshape(shape).astype(dtype))
        out.append(args)
    return out


def kinds(exe) -> list[str]:
    return [t.kind for t in walk(exe.thunks)]


def check(text: str, args, **options):
    """Compiles `text`, runs it on every device and compares each device's
    outputs with the interpreter's run of all the devices."""
    exe = xla_gpu.compile(text, target="cpu", **options)
    assert isinstance(exe, ProgramExecutable)
    got = exe.run_partitioned(args)
    module = parse_module(text)
    want = evaluate_devices(module, args, num_replicas=exe.num_replicas,
                            num_partitions=exe.num_partitions)
    assert len(got) == len(want) == exe.num_devices
    for d, (g_leaves, w_leaves) in enumerate(zip(got, want)):
        assert len(g_leaves) == len(w_leaves)
        for g, w in zip(g_leaves, w_leaves):
            assert g.dtype == w.dtype and g.shape == w.shape, (d, g.dtype, g.shape, w.shape)
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                       rtol=1e-6, atol=1e-6, err_msg=f"device {d}")
    return exe, got


# ------------------------------------------------------- jax's SPMD programs

def spmd_case(name: str):
    data = np.load(SPMD / f"{name}.npz")
    n = int(data["num_replicas"]) * int(data["num_partitions"])
    inputs = sorted(k for k in data.files if k.startswith("in_") and "_dev" not in k)
    outputs = sorted(k for k in data.files if k.startswith("out_") and "_dev" not in k)
    args = [[data[f"{k}_dev{d}"] for k in inputs] for d in range(n)]
    expected = [[data[f"{k}_dev{d}"] for k in outputs] for d in range(n)]
    return data, args, expected


def assert_matches_jax(results, expected) -> None:
    assert len(results) == len(expected)
    for d, (got_leaves, want_leaves) in enumerate(zip(results, expected)):
        assert len(got_leaves) == len(want_leaves)
        for k, (got, want) in enumerate(zip(got_leaves, want_leaves)):
            assert got.dtype == want.dtype and got.shape == want.shape, (d, k)
            if np.issubdtype(want.dtype, np.floating):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5,
                                           err_msg=f"device {d}, output {k}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"device {d}, output {k}")


@pytest.mark.parametrize("name", CASES)
def test_spmd_case_compiled_matches_jax_per_device(name):
    data, args, expected = spmd_case(name)
    text = (SPMD / f"{name}.partitioned.hlo").read_text()
    exe = xla_gpu.compile(text, target="cpu",
                          num_partitions=int(data["num_partitions"]))
    assert (exe.num_replicas, exe.num_partitions) == (int(data["num_replicas"]),
                                                      int(data["num_partitions"]))
    assert_matches_jax(exe.run_partitioned(args), expected)
    # The collectives are thunks of their own, never inside a kernel.
    hlo_ops = {i.opcode for c in parse_module(text).computations for i in c.instructions}
    if "all-reduce" in hlo_ops:
        assert "all_reduce" in kinds(exe)
    if "partition-id" in hlo_ops:
        assert "device_id" in kinds(exe)


def test_spmd_case_runs_the_same_from_python_thunks(monkeypatch):
    """The native executor calls the collectives back; without it every
    thunk runs from Python, with the same results."""
    monkeypatch.setenv("XLA_GPU_HOST_EXECUTOR", "python")
    _, args, expected = spmd_case("psum_in_loop")
    exe = xla_gpu.compile((SPMD / "psum_in_loop.partitioned.hlo").read_text(), target="cpu")
    assert_matches_jax(exe.run_partitioned(args), expected)


def test_outputs_of_one_run_are_not_overwritten_by_the_next():
    """Each device has buffers of its own, and a run's outputs stay the
    caller's while the next run goes on."""
    _, args, expected = spmd_case("dp_mlp_step")
    exe = xla_gpu.compile((SPMD / "dp_mlp_step.partitioned.hlo").read_text(), target="cpu")
    first = exe.run_partitioned(args)
    shuffled = args[1:] + args[:1]
    second = exe.run_partitioned(shuffled)
    assert_matches_jax(first, expected)
    third = exe.run_partitioned(args)
    assert_matches_jax(third, expected)
    assert not all(np.array_equal(a, b) for a, b in zip(first[0], second[0]))


# ------------------------------------------------------------- each collective

ALL_REDUCE = """
ENTRY e {
  x = T[8] parameter(0)
  ROOT a = T[8] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=red
}"""


@pytest.mark.parametrize("op, dtype, kind", [
    ("add", "f32", "sum"), ("multiply", "f32", "product"), ("maximum", "f32", "max"),
    ("minimum", "f32", "min"), ("add", "s32", "sum"), ("and", "s32", "and"),
    ("or", "s32", "or"), ("and", "pred", "and"), ("or", "pred", "or"),
    ("add", "bf16", "sum"), ("maximum", "u8", "max"),
])
def test_all_reduce_of_every_reducer(op, dtype, kind):
    import ml_dtypes
    np_dtype = {"f32": np.float32, "s32": np.int32, "pred": np.bool_, "u8": np.uint8,
                "bf16": ml_dtypes.bfloat16}[dtype]
    text = module_text(ALL_REDUCE.replace("T[", f"{dtype}["), extra=reducer(op, dtype, "red"))
    args = device_args(4, [(8,)], np.int64)
    args = [[(a % 3 == 0) if dtype == "pred" else a.astype(np_dtype) for a in dev]
            for dev in args]
    exe, _ = check(text, args)
    (thunk,) = [t for t in walk(exe.thunks) if t.kind == "all_reduce"]
    assert thunk.reduction == kind


def test_a_large_all_reduce_is_computed_by_every_device_at_once():
    """Above PARALLEL_ALL_REDUCE_BYTES each device reduces a slice: the
    same fold, the same results as the interpreter's."""
    n = collective_thunks.PARALLEL_ALL_REDUCE_BYTES // 4 + 5
    text = module_text(f"""
ENTRY e {{
  x = f32[{n}] parameter(0)
  y = f32[{n}] parameter(1)
  ROOT a = (f32[{n}], f32[{n}]) all-reduce(x, y), channel_id=1, replica_groups={{{{0,1,2}}}}, use_global_device_ids=true, to_apply=add
}}""", partitions=3)
    rng = np.random.default_rng(0)
    args = [[rng.standard_normal(n).astype(np.float32) for _ in range(2)] for _ in range(3)]
    exe, got = check(text, args)
    np.testing.assert_array_equal(got[2][0], (args[0][0] + args[1][0]) + args[2][0])


def test_an_unknown_reducer_is_refused_naming_the_instruction():
    text = module_text(ALL_REDUCE.replace("T[", "f32["), extra="""
red {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  s = f32[] add(a, b)
  ROOT c = f32[] multiply(s, a)
}""")
    with pytest.raises(UnsupportedError, match="'a'.*reducer 'red'"):
        xla_gpu.compile(text, target="cpu")


HANDWRITTEN = {
    "tuple_all_reduce": ("""
ENTRY e {
  x = f32[2] parameter(0)
  y = f32[3,2] parameter(1)
  ROOT a = (f32[2], f32[3,2]) all-reduce(x, y), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
}""", 4, 1, [(2,), (3, 2)]),
    "all_gather_and_reduce_scatter": ("""
ENTRY e {
  x = f32[2,3] parameter(0)
  g0 = f32[8,3] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  g1 = f32[2,6]{0,1} all-gather(x), channel_id=2, replica_groups={{0,2},{1,3}}, dimensions={1}, use_global_device_ids=true
  y = f32[8,3] multiply(g0, g0)
  rs = f32[2,3] reduce-scatter(y), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
  ROOT t = (f32[8,3], f32[2,6]{0,1}, f32[2,3]) tuple(g0, g1, rs)
}""", 4, 1, [(2, 3)]),
    "all_to_all_array_and_tuple": ("""
ENTRY e {
  x = f32[4,2] parameter(0)
  y = f32[3] parameter(1)
  a = f32[4,2] all-to-all(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  xt = f32[2,4] transpose(x), dimensions={1,0}
  b = f32[2,4] all-to-all(xt), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={1}
  t = (f32[3], f32[3], f32[3], f32[3]) all-to-all(y, y, y, y), channel_id=3, replica_groups={{0,1,2,3}}
  t0 = f32[3] get-tuple-element(t), index=0
  t3 = f32[3] get-tuple-element(t), index=3
  ROOT r = (f32[4,2], f32[2,4], f32[3], f32[3]) tuple(a, b, t0, t3)
}""", 4, 1, [(4, 2), (3,)]),
    "collective_permute_cycle_and_missing_sources": ("""
ENTRY e {
  x = f32[2,2] parameter(0)
  cycle = f32[2,2] collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  some = f32[2,2] collective-permute(x), channel_id=2, source_target_pairs={{0,2},{3,1}}
  ROOT t = (f32[2,2], f32[2,2]) tuple(cycle, some)
}""", 4, 1, [(2, 2)]),
    "collective_broadcast": ("""
ENTRY e {
  x = f32[3] parameter(0)
  ROOT b = f32[3] collective-broadcast(x), channel_id=1, replica_groups={{2,0},{3,1}}
}""", 4, 1, [(3,)]),
    "iota_replica_groups": ("""
ENTRY e {
  x = f32[2] parameter(0)
  a = f32[2] all-reduce(x), channel_id=1, replica_groups=[2,2]<=[4], use_global_device_ids=true, to_apply=add
  b = f32[2] all-reduce(x), channel_id=2, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=add
  c = f32[4] all-gather(x), channel_id=3, replica_groups=[2,2]<=[2,2]T(1,0), dimensions={0}, use_global_device_ids=true
  ROOT t = (f32[2], f32[2], f32[4]) tuple(a, b, c)
}""", 4, 1, [(2,)]),
    "async_pairs": ("""
rs_computation {
  p = f32[8] parameter(0)
  ROOT rs = f32[2] reduce-scatter(p), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true, to_apply=add
}
ENTRY e {
  x = f32[8] parameter(0)
  y = f32[2] parameter(1)
  s = f32[8] all-reduce-start(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  d = f32[8] all-reduce-done(s)
  g = (f32[2], f32[8]) all-gather-start(y), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  gd = f32[8] all-gather-done(g)
  p = (f32[2], f32[2], u32[], u32[]) collective-permute-start(y), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  pd = f32[2] collective-permute-done(p)
  as = ((f32[8]), f32[2], s32[]) async-start(d), calls=rs_computation
  ad = f32[2] async-done(as)
  ROOT t = (f32[8], f32[8], f32[2], f32[2]) tuple(d, gd, pd, ad)
}""", 4, 1, [(8,), (2,)]),
    "device_ids": ("""
ENTRY e {
  x = f32[2] parameter(0)
  r = u32[] replica-id()
  p = u32[] partition-id()
  pf = f32[] convert(p)
  b = f32[2] broadcast(pf), dimensions={}
  y = f32[2] add(x, b)
  ROOT t = (u32[], u32[], f32[2]) tuple(r, p, y)
}""", 3, 2, [(2,)]),
    "replicas_and_partitions": ("""
ENTRY e {
  x = f32[4] parameter(0)
  cross_replica = f32[4] all-reduce(x), replica_groups={}, to_apply=add
  replicas_in_every_partition = f32[4] all-reduce(x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=false, to_apply=add
  flattened = f32[4] all-reduce(x), channel_id=2, replica_groups={{0,3},{1,2}}, use_global_device_ids=true, to_apply=add
  across_partitions = f32[4] collective-permute(x), channel_id=3, source_target_pairs={{0,1},{1,0}}
  across_replicas = f32[4] collective-permute(x), source_target_pairs={{1,0}}
  g = f32[8] all-gather(x), replica_groups={{1,0}}, dimensions={0}
  ROOT t = (f32[4], f32[4], f32[4], f32[4], f32[4], f32[8]) tuple(cross_replica, replicas_in_every_partition, flattened, across_partitions, across_replicas, g)
}""", 2, 2, [(4,)]),
}


@pytest.mark.parametrize("name", sorted(HANDWRITTEN))
def test_each_collective_matches_the_interpreter(name):
    body, partitions, replicas, shapes = HANDWRITTEN[name]
    text = module_text(body, partitions, replicas)
    check(text, device_args(partitions * replicas, shapes))


def test_async_done_is_its_start_result():
    """The work is at the start; the done's value is the start's result
    (one buffer: no copy after the collective)."""
    body, partitions, replicas, shapes = HANDWRITTEN["async_pairs"]
    exe = xla_gpu.compile(module_text(body, partitions, replicas), target="cpu")
    assert kinds(exe).count("copy") == 0
    assert {"all_reduce", "all_gather", "collective_permute", "reduce_scatter"} <= \
        set(kinds(exe))


def test_a_collective_in_a_loop_meets_once_per_iteration():
    text = module_text("""
body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[4] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  r = f32[4] all-reduce(v), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=add
  half = f32[] constant(0.5)
  h = f32[4] broadcast(half), dimensions={}
  m = f32[4] multiply(r, h)
  p = u32[] partition-id()
  pf = f32[] convert(p)
  pb = f32[4] broadcast(pf), dimensions={}
  w = f32[4] add(m, pb)
  ROOT t = (s32[], f32[4]) tuple(j, w)
}
cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(25)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[4]) tuple(zero, x)
  w = (s32[], f32[4]) while(t), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(w), index=1
}""")
    exe, _ = check(text, device_args(4, [(4,)]))
    assert exe.stats["collectives"] == 25 and exe.stats["while_iterations"] == 25


def test_one_device_runs_its_collectives_with_run():
    """A program of one device (jax's psum on one device) runs with `run`:
    every group is the device itself."""
    text = module_text("""
ENTRY e {
  x = f32[2] parameter(0)
  a = f32[2] all-reduce(x), channel_id=1, replica_groups={{0}}, use_global_device_ids=true, to_apply=add
  p = u32[] partition-id()
  ROOT t = (f32[2], u32[]) tuple(a, p)
}""", partitions=1)
    exe = xla_gpu.compile(text, target="cpu")
    x = np.array([1.5, 2.5], np.float32)
    a, p = exe.run(x)
    np.testing.assert_array_equal(a, x)
    assert p == 0


def test_collectives_are_not_folded_or_fused():
    """Collectives of constants stay collectives (folding them as one
    device's would be wrong on several), and no fusion takes them in."""
    text = module_text("""
ENTRY e {
  c = f32[2] constant({1, 2})
  a = f32[2] all-reduce(c), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  p = f32[2] collective-permute(c), channel_id=2, source_target_pairs={{0,1}}
  x = f32[2] parameter(0)
  y = f32[2] multiply(x, x)
  s = f32[2] all-reduce(y), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  z = f32[2] add(s, a)
  ROOT t = (f32[2], f32[2]) tuple(z, p)
}""")
    exe, got = check(text, device_args(4, [(2,)]))
    np.testing.assert_array_equal(got[1][1], [1, 2])
    np.testing.assert_array_equal(got[2][1], [0, 0])
    # The two all-reduces are independent: combined into one of two operands.
    assert kinds(exe).count("all_reduce") == 1 and "collective_permute" in kinds(exe)
    for comp in parse_module(exe.as_text()).computations:
        if not comp.is_entry:
            assert not any(i.opcode in ("all-reduce", "collective-permute")
                           for i in comp.instructions if comp.name != "add"), comp.name


# -------------------------------------------------------------- options, errors

PSUM = module_text("""
ENTRY e {
  x = f32[2] parameter(0)
  ROOT a = f32[2] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
}""")


@pytest.mark.parametrize("options, message", [
    ({"num_partitions": 0}, "num_partitions must be a positive integer"),
    ({"num_partitions": "4"}, "num_partitions must be a positive integer"),
    ({"num_replicas": True}, "num_replicas must be a positive integer"),
    ({"num_partitions": 2}, "num_partitions=2 but the module header says num_partitions=4"),
    ({"num_replicas": 2}, "num_replicas=2 but the module header says replica_count=1"),
])
def test_bad_device_counts_are_argument_errors(options, message):
    with pytest.raises(ArgumentError, match=message):
        xla_gpu.compile(PSUM, target="cpu", **options)


def test_device_counts_default_to_the_header_or_come_from_the_arguments():
    exe = xla_gpu.compile(PSUM, target="cpu")
    assert (exe.num_replicas, exe.num_partitions, exe.num_devices) == (1, 4, 4)
    # A header without counts takes the arguments'.
    bare = PSUM.replace("HloModule m, replica_count=1, num_partitions=4", "HloModule m")
    exe = xla_gpu.compile(bare, target="cpu", num_partitions=4)
    assert exe.num_devices == 4
    check(bare, device_args(4, [(2,)]), num_partitions=4)
    with pytest.raises(ArgumentError, match="4097 devices, more than the 4096"):
        xla_gpu.compile(bare.replace("{{0,1,2,3}}", "{}").replace(
            "channel_id=1, ", "").replace(", use_global_device_ids=true", ""),
            target="cpu", num_partitions=4097)


def test_groups_that_do_not_fit_the_devices_are_refused_at_compile_time():
    with pytest.raises(xla_gpu.XlaGpuError, match="'a'.*devices \\[2, 3\\] are in none"):
        xla_gpu.compile(PSUM.replace("{{0,1,2,3}}", "{{0,1}}"), target="cpu")
    with pytest.raises(xla_gpu.XlaGpuError, match="'p'.*names partition 4, but there are 4"):
        xla_gpu.compile(module_text("""
ENTRY e {
  x = f32[2] parameter(0)
  ROOT p = f32[2] collective-permute(x), channel_id=1, source_target_pairs={{0,4}}
}"""), target="cpu")


def test_run_arguments_are_checked_per_device():
    exe = xla_gpu.compile(PSUM, target="cpu")
    x = np.zeros(2, np.float32)
    with pytest.raises(ArgumentError, match="runs on 4 devices.*run_partitioned"):
        exe.run(x)
    with pytest.raises(ArgumentError, match="takes 4 argument lists \\(one per device\\), "
                                            "got 3"):
        exe.run_partitioned([[x]] * 3)
    with pytest.raises(ArgumentError, match="device 2: argument 0: expected shape \\[2\\]"):
        exe.run_partitioned([[x], [x], [np.zeros(3, np.float32)], [x]])
    with pytest.raises(ArgumentError, match="device 1: program 'm' takes 1 argument"):
        exe.run_partitioned([[x], [], [x], [x]])
    with pytest.raises(ArgumentError, match="timeout"):
        exe.run_partitioned([[x]] * 4, timeout=0)
    # The same array for every device is fine (read only).
    out = exe.run_partitioned([[np.ones(2, np.float32)]] * 4)
    np.testing.assert_array_equal(out[3][0], [4, 4])


def test_save_and_load_of_a_program_with_collectives(tmp_path):
    body, partitions, replicas, shapes = HANDWRITTEN["async_pairs"]
    text = module_text(body, partitions, replicas)
    exe = xla_gpu.compile(text, target="cpu")
    args = device_args(4, shapes)
    before = exe.run_partitioned(args)
    for thunk in walk(exe.thunks):
        data = json.loads(json.dumps(thunk.to_dict()))
        assert thunk_from_dict(data).to_dict() == thunk.to_dict()
    exe.save(tmp_path / "program")
    loaded = load_program(tmp_path / "program", expected_digest=exe.artifact_digest)
    assert (loaded.num_replicas, loaded.num_partitions) == (1, 4)
    after = loaded.run_partitioned(args)
    for b, a in zip(before, after):
        for x, y in zip(b, a):
            np.testing.assert_array_equal(x, y)
    # Every collective thunk kind round-trips (device ids too).
    other = xla_gpu.compile(module_text(HANDWRITTEN["device_ids"][0], 3, 2), target="cpu")
    seen = {t.kind for e in (exe, other) for t in walk(e.thunks)}
    for thunk in walk(other.thunks):
        assert thunk_from_dict(json.loads(json.dumps(thunk.to_dict()))).to_dict() == \
            thunk.to_dict()
    assert {"all_reduce", "all_gather", "collective_permute", "reduce_scatter",
            "device_id"} <= seen


def test_a_malformed_collective_thunk_is_an_artifact_error():
    with pytest.raises(xla_gpu.ArtifactError, match="malformed collective_permute"):
        thunk_from_dict({"kind": "collective_permute", "name": "p", "operands": [],
                         "results": [], "replica_groups": [], "mode": "cross-partition",
                         "pairs": [[0, 1], [0, 2]]})
    with pytest.raises(xla_gpu.ArtifactError, match="malformed all_reduce"):
        thunk_from_dict({"kind": "all_reduce", "name": "a", "operands": [], "results": [],
                         "replica_groups": [], "mode": "sideways", "reduction": "sum"})


# ----------------------------------------------------------- devices that fail

def picky(x):
    """A custom call that fails on device 3's input (device_args: 30, 31)."""
    if np.any(x == 30):
        raise RuntimeError("device 3 is broken")
    return x * 2


FAILING = module_text("""
ENTRY e {
  x = f32[2] parameter(0)
  c = f32[2] custom-call(x), custom_call_target="xla_gpu_test_collectives_picky", api_version=API_VERSION_TYPED_FFI
  ROOT a = f32[2] all-reduce(c), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
}""")


def test_a_device_that_fails_fails_every_device_naming_it():
    from xla_gpu.hlo import interpreter
    interpreter.register_custom_call("xla_gpu_test_collectives_picky", picky)
    try:
        exe = xla_gpu.compile(FAILING, target="cpu")
        with pytest.raises(CollectiveError) as info:
            exe.run_partitioned(device_args(4, [(2,)]), timeout=60)
        error = info.value
        assert isinstance(error, xla_gpu.XlaGpuError)
        assert error.instruction == "a" and error.missing == (3,)
        assert sorted(error.device_errors) == [0, 1, 2, 3]
        assert "device 3 is broken" in str(error.device_errors[3])
        for d in range(3):
            message = str(error.device_errors[d])
            assert isinstance(error.device_errors[d], CollectiveError)
            assert "'a'" in message and "device 3" in message and "broken" in message
        # The executable runs again, on inputs no device fails on.
        args = device_args(4, [(2,)])
        args[3] = [np.array([1, 2], np.float32)]
        out = exe.run_partitioned(args)
        np.testing.assert_array_equal(out[0][0], 2 * (np.array([30, 33]) + [1, 2]))
    finally:
        interpreter.unregister_custom_call("xla_gpu_test_collectives_picky")


# Device 3 loops while its argument is positive (forever: the body never
# changes it) before the all-reduce every device meets at; the others loop
# zero times.
SPINNING = module_text("""
body {
  s = (s32[], f32[2]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  v = f32[2] get-tuple-element(s), index=1
  one = f32[] constant(1)
  o = f32[2] broadcast(one), dimensions={}
  w = f32[2] add(v, o)
  ROOT t = (s32[], f32[2]) tuple(k, w)
}
cond {
  s = (s32[], f32[2]) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  zero = s32[] constant(0)
  ROOT gt = pred[] compare(k, zero), direction=GT
}
ENTRY e {
  k = s32[] parameter(0)
  x = f32[2] parameter(1)
  pid = u32[] partition-id()
  three = u32[] constant(3)
  is3 = pred[] compare(pid, three), direction=EQ
  zero = s32[] constant(0)
  spins = s32[] select(is3, k, zero)
  t = (s32[], f32[2]) tuple(spins, x)
  w = (s32[], f32[2]) while(t), condition=cond, body=body
  v = f32[2] get-tuple-element(w), index=1
  ROOT a = f32[2] all-reduce(v), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
}""")


def spinning_args(spin: int) -> list[list[np.ndarray]]:
    return [[np.array(spin, np.int32), np.full(2, d, np.float32)] for d in range(4)]


@pytest.mark.parametrize("executor", ["native", "python"])
def test_a_device_that_never_arrives_times_out_on_every_device(executor, monkeypatch):
    monkeypatch.setenv("XLA_GPU_HOST_EXECUTOR", executor)
    exe = xla_gpu.compile(SPINNING, target="cpu")
    with pytest.raises(CollectiveTimeoutError) as info:
        exe.run_partitioned(spinning_args(1), timeout=0.3)
    error = info.value
    assert isinstance(error, TimeoutError) and error.instruction == "a"
    assert error.missing == (3,) and sorted(error.device_errors) == [0, 1, 2, 3]
    assert "did not arrive within 0.3 s" in str(error)
    # Device 3 was stopped in its loop, not left spinning.
    assert "device 3 (replica 0, partition 3) was stopped" in str(error.device_errors[3])
    out = exe.run_partitioned(spinning_args(0), timeout=30)
    np.testing.assert_array_equal(out[3][0], [6, 6])


_CHILD = textwrap.dedent("""
    import sys, numpy as np, xla_gpu
    exe = xla_gpu.compile(open(sys.argv[1]).read(), target="cpu")
    def args(spin):
        return [[np.array(spin, np.int32), np.full(2, d, np.float32)] for d in range(4)]
    exe.run_partitioned(args(0))
    print("running", flush=True)
    try:
        exe.run_partitioned(args(1), timeout=600)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    out = exe.run_partitioned(args(0), timeout=60)
    print("again", float(out[3][0][0]), flush=True)
""")


def test_ctrl_c_stops_every_device(tmp_path):
    program = tmp_path / "spinning.hlo"
    program.write_text(SPINNING)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(program)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ))
    try:
        assert child.stdout.readline().strip() == "running", child.stderr.read()
        time.sleep(0.5)                  # every device waiting or spinning by now
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert out.split("\n")[:2] == ["interrupted", "again 6.0"], (out, err)


# ----------------------------------------------------------- profiles and CLI

def test_a_profiled_run_gives_each_device_a_lane(tmp_path):
    body, partitions, replicas, shapes = HANDWRITTEN["async_pairs"]
    exe = xla_gpu.compile(module_text(body, partitions, replicas), target="cpu")
    trace_path = tmp_path / "trace.json"
    out = exe.run_partitioned(device_args(4, shapes), profile=trace_path)
    assert len(out) == 4
    events = json.loads(trace_path.read_text())["traceEvents"]
    lanes = {e["args"]["name"]: e["tid"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert {f"device {d}" for d in range(4)} <= set(lanes)
    for d in range(4):
        names = {e["name"] for e in events if e.get("ph") == "X" and
                 e.get("tid") == lanes[f"device {d}"]}
        assert {"s", "g", "p", "as", "run m"} <= names, names


def test_cli_runs_a_stored_case_on_its_devices(capsys):
    from xla_gpu._cli import run_hlo
    path = str(SPMD / "megatron_mlp.partitioned.hlo")
    assert run_hlo([path, "--target", "cpu", "--quiet", "--seed", "3"]) == 0
    line = capsys.readouterr().out
    assert "8 devices (1 replica x 8 partitions)" in line and "OK" in line
    assert run_hlo([path, "--target", "cpu", "--quiet", "--num-partitions", "4"]) == 2
    assert "num_partitions=4 but the module header says num_partitions=8" in \
        capsys.readouterr().err


def test_collectives_nccl_cannot_run_are_refused_on_cuda_naming_the_instruction():
    # NCCL has no 16-bit integers to add (the f32 all-reduce compiles).
    text = module_text("""
ENTRY e {
  x = s16[2,3] parameter(0)
  ROOT a = s16[2,3] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add16
}""", extra="""add16 {
  a = s16[] parameter(0)
  b = s16[] parameter(1)
  ROOT s = s16[] add(a, b)
}""")
    with pytest.raises(UnsupportedError, match="'a'.*cuda target \\(NCCL\\).*over s16"):
        xla_gpu.compile(text, target="cuda")
    xla_gpu.compile(PSUM, target="cuda")


def test_ragged_all_to_all_compiled_matches_the_interpreter_and_round_trips(tmp_path):
    """Its own thunk on the cpu target, the rows moved as the interpreter
    moves them (updates for every peer, recv_sizes of rank 2), saved and
    loaded; refused on cuda (no NCCL form yet), naming the instruction."""
    text = module_text("""
ENTRY e {
  x = f32[8,3] parameter(0)
  out = f32[6,3] parameter(1)
  io = s64[6] parameter(2)
  ss = s64[6] parameter(3)
  oo = s64[6] parameter(4)
  rs = s64[3,2] parameter(5)
  ROOT r = f32[6,3] ragged-all-to-all(x, out, io, ss, oo, rs), channel_id=1, replica_groups={{0,1,2}}
}""", partitions=3)
    rng = np.random.default_rng(1)
    # Device s sends sizes[s][d] rows to device d (two updates each), from
    # consecutive rows of its input, into consecutive rows of d's output.
    sizes = rng.integers(0, 2, size=(3, 3, 2))
    args = []
    for s in range(3):
        counts = sizes[s].reshape(-1)
        io = np.concatenate([[0], np.cumsum(counts)[:-1]])
        oo = np.zeros(6, np.int64)
        for d in range(3):
            # Where d puts sender s's updates: after senders 0..s-1's.
            before = sizes[:s, d].sum()
            oo[2 * d] = before
            oo[2 * d + 1] = before + sizes[s, d, 0]
        recv = sizes[:, s, :]   # recv_sizes of device s, [sender, update]
        args.append([rng.standard_normal((8, 3)).astype(np.float32),
                     np.full((6, 3), 7.0, np.float32), io.astype(np.int64),
                     counts.astype(np.int64), oo, recv.astype(np.int64)])
    exe, got = check(text, args)
    (thunk,) = [t for t in walk(exe.thunks) if t.kind == "ragged_all_to_all"]
    assert thunk_from_dict(json.loads(json.dumps(thunk.to_dict()))).to_dict() == thunk.to_dict()
    assert not np.array_equal(got[0][0], args[0][1])
    exe.save(tmp_path / "program")
    loaded = load_program(tmp_path / "program", expected_digest=exe.artifact_digest)
    for before, after in zip(got, loaded.run_partitioned(args)):
        np.testing.assert_array_equal(before[0], after[0])
    with pytest.raises(UnsupportedError, match="'r'.*ragged all-to-all over NCCL"):
        xla_gpu.compile(text, target="cuda")



def test_async_start_ordered_before_a_reader_of_the_loop_state_it_replaces():
    """A while body whose all-gather-start (control edges, as XLA orders
    jax's control_dep) runs before the dot that reads the state element
    the gather's result replaces: loop-state ordering gives the result a buffer
    of its own, and the values are the interpreter's."""
    text = module_text("""cond {
  p = (s32[], f32[4,4], f32[2,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  c = s32[] constant(3)
  ROOT lt = pred[] compare(i, c), direction=LT
}
body {
  p = (s32[], f32[4,4], f32[2,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  w = f32[4,4] get-tuple-element(p), index=1
  x = f32[2,4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  half = f32[2,4] slice(w), slice={[1:3], [0:4]}
  neg = f32[2,4] negate(half)
  s = (f32[2,4], f32[4,4]) all-gather-start(neg), channel_id=1, replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true
  y = f32[2,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, control-predecessors={s}
  d = f32[4,4] all-gather-done(s), control-predecessors={y}
  ROOT t = (s32[], f32[4,4], f32[2,4]) tuple(i1, d, y)
}
ENTRY e {
  w0 = f32[4,4] parameter(0)
  x0 = f32[2,4] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[4,4], f32[2,4]) tuple(z, w0, x0)
  loop = (s32[], f32[4,4], f32[2,4]) while(init), condition=cond, body=body
  ROOT r = f32[2,4] get-tuple-element(loop), index=2
}""", partitions=2)
    rng = np.random.default_rng(0)
    args = [[rng.standard_normal((4, 4)).astype(np.float32),
             rng.standard_normal((2, 4)).astype(np.float32)] for _ in range(2)]
    exe, _ = check(text, args)
    assert "all_gather" in kinds(exe)
