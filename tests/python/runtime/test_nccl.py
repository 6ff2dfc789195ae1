"""The cuda target's collectives through NCCL: the library and its tables,
the clique rule (one rank per GPU), what each collective thunk asks NCCL
to do on a rank, and cuda compiles of programs with collectives. Running
them needs a GPU (and the nccl extra): those tests skip without one."""

from __future__ import annotations


import numpy as np
import pytest

import xla_gpu
from xla_gpu import runtime
from xla_gpu.errors import CudaUnavailableError, UnsupportedError, XlaGpuError
from xla_gpu.hlo import evaluate_devices, parse_module
from xla_gpu.runtime import collective_thunks as CT
from xla_gpu.runtime import nccl
from xla_gpu.runtime.buffers import ArrayRef, BufferSlice
from xla_gpu.runtime.program import load_program
from xla_gpu.runtime.thunks import walk



def _nccl_loads() -> bool:
    try:
        nccl.nccl_library()
    except nccl.NcclUnavailableError:
        return False
    return True


HAS_WHEEL = _nccl_loads()
needs_wheel = pytest.mark.skipif(not HAS_WHEEL, reason="the nccl extra (nvidia-nccl-cu13) "
                                 "is not installed")
HAS_GPU = runtime.cuda_available()
needs_gpu = pytest.mark.skipif(not (HAS_GPU and HAS_WHEEL), reason="needs a GPU and NCCL")

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
maxs {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT m = s32[] maximum(a, b)
}"""

# One device: every collective a one-rank NCCL clique runs.
ONE_DEVICE = f"""HloModule m, num_partitions=1
{ADD}
ENTRY main {{
  p = f32[4,8] parameter(0)
  q = s32[2,3] parameter(1)
  ar = f32[4,8] all-reduce(p), replica_groups={{{{0}}}}, to_apply=add, channel_id=1
  ag = s32[2,3] all-gather(q), replica_groups={{{{0}}}}, dimensions={{0}}, channel_id=2
  rs = s32[2,3] reduce-scatter(q), replica_groups={{{{0}}}}, dimensions={{0}}, to_apply=maxs, channel_id=3
  cp = f32[4,8] collective-permute(p), source_target_pairs={{{{0,0}}}}, channel_id=4
  none = f32[4,8] collective-permute(p), source_target_pairs={{}}, channel_id=5
  a2a = s32[2,3] all-to-all(q), replica_groups={{{{0}}}}, dimensions={{0}}, channel_id=6
  bc = f32[4,8] collective-broadcast(p), replica_groups={{{{0}}}}, channel_id=7
  id = u32[] partition-id()
  ROOT t = (f32[4,8], s32[2,3], s32[2,3], f32[4,8], f32[4,8], s32[2,3], f32[4,8], u32[]) tuple(ar, ag, rs, cp, none, a2a, bc, id)
}}
"""

# Four partitions: what rank 1 of each clique does.
FOUR = f"""HloModule m, num_partitions=4
{ADD}
ENTRY main {{
  p = f32[2,3] parameter(0)
  ar = f32[2,3] all-reduce(p), replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true, to_apply=add, channel_id=1
  ag = f32[8,3] all-gather(p), replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true, dimensions={{0}}, channel_id=2
  cp = f32[2,3] collective-permute(p), source_target_pairs={{{{0,1}},{{1,2}},{{3,0}}}}, channel_id=3
  id = u32[] partition-id()
  ROOT t = (f32[2,3], f32[8,3], f32[2,3], u32[]) tuple(ar, ag, cp, id)
}}
"""


def _address(ref: ArrayRef) -> int:
    """A made-up device address per slice (the plans are plain data)."""
    return 0x10000 * (ref.slice.allocation + 1) + ref.slice.offset


def _thunks(exe) -> dict[str, object]:
    return {t.name: t for t in walk(exe.thunks)}


# -- the library --------------------------------------------------------------------


@needs_wheel
def test_the_wheel_library_is_found_and_reports_its_version():
    lib = nccl.nccl_library()
    assert "nvidia/nccl/lib" in str(lib._name)
    major, minor, _ = nccl.nccl_version()
    assert (major, minor) >= (2, 19)


def test_a_missing_library_is_a_clear_unavailable_error(monkeypatch, tmp_path):
    monkeypatch.setattr(nccl, "_lib", None)
    monkeypatch.setenv("XLA_GPU_NCCL_LIBRARY", str(tmp_path / "libnccl.so.2"))
    with pytest.raises(nccl.NcclUnavailableError,
                       match=r"NCCL \(libnccl.so.2\) not found.*\$XLA_GPU_NCCL_LIBRARY") as e:
        nccl.nccl_library()
    assert isinstance(e.value, CudaUnavailableError)


@needs_wheel
def test_nccl_errors_name_the_call_the_result_and_nccls_message():
    assert "invalid usage" in nccl.error_string(5)
    with pytest.raises(nccl.NcclError, match=r"ncclAllReduce \(x\) failed: "
                                             r"ncclInvalidArgument: invalid argument") as e:
        nccl._check("ncclAllReduce (x)", 4)
    assert e.value.call == "ncclAllReduce (x)" and e.value.result == 4
    assert isinstance(e.value, XlaGpuError)
    nccl._check("ncclGroupEnd", 0)   # success raises nothing


# -- the tables ---------------------------------------------------------------------


@pytest.mark.parametrize("etype, reduction, want", [
    ("f32", "sum", (nccl.FLOAT32, nccl.SUM, 1)),
    ("bf16", "max", (nccl.BFLOAT16, nccl.MAX, 1)),
    ("s8", "product", (nccl.INT8, nccl.PROD, 1)),
    ("u64", "min", (nccl.UINT64, nccl.MIN, 1)),
    ("f8e4m3fn", "sum", (nccl.FLOAT8E4M3, nccl.SUM, 1)),
    # pred: or / and are max / min of its 0 / 1 byte
    ("pred", "sum", (nccl.UINT8, nccl.MAX, 1)),
    ("pred", "and", (nccl.UINT8, nccl.MIN, 1)),
    # complex numbers sum as pairs of reals
    ("c64", "sum", (nccl.FLOAT32, nccl.SUM, 2)),
    ("c128", "sum", (nccl.FLOAT64, nccl.SUM, 2)),
])
def test_reductions_map_to_nccl_types_and_ops(etype, reduction, want):
    assert nccl.reduction_call(etype, reduction) == want


@pytest.mark.parametrize("etype, reduction, message", [
    ("s4", "sum", "no sub-byte types"),
    ("u2", "max", "no sub-byte types"),
    ("s16", "sum", "no such data type"),
    ("f8e4m3fnuz", "sum", "no such data type"),
    ("c64", "max", "only sums complex"),
    ("c128", "product", "only sums complex"),
    ("s32", "and", "no bitwise reductions"),
])
def test_what_nccl_cannot_reduce_is_refused(etype, reduction, message):
    with pytest.raises(UnsupportedError, match=message):
        nccl.reduction_call(etype, reduction)


def test_n_ranks_on_one_gpu_are_refused_before_nccl_is_called(monkeypatch):
    nccl.check_one_rank_per_gpu([0])
    nccl.check_one_rank_per_gpu([0, 1, 2, 3])
    with pytest.raises(nccl.NcclError, match=r"ncclCommInitAll failed: ncclInvalidUsage: 2 "
                                             r"ranks on one GPU \(GPU 0 would hold ranks 0, 1"):
        nccl.check_one_rank_per_gpu([0, 0])
    with pytest.raises(nccl.NcclError, match=r"3 ranks on one GPU \(GPU 1 .*ranks 1, 2, 3 of "
                                             "a 4-rank clique"):
        nccl.check_one_rank_per_gpu([0, 1, 1, 1])
    # communicator() refuses before loading anything.
    monkeypatch.setattr(nccl, "nccl_library", lambda: pytest.fail("NCCL was loaded"))
    with pytest.raises(nccl.NcclError, match="2 ranks on one GPU"):
        nccl.communicator((0, 0), 1)


# -- compiling for cuda ---------------------------------------------------------------


@pytest.fixture(scope="module")
def one_device():
    return xla_gpu.compile(ONE_DEVICE, target="cuda", arch="sm_90", cache=False)


def test_a_program_with_collectives_compiles_for_cuda(one_device):
    kinds = {name: t.kind for name, t in _thunks(one_device).items()}
    assert kinds["ar"] == "all_reduce" and kinds["ag"] == "all_gather"
    assert kinds["rs"] == "reduce_scatter" and kinds["cp"] == "collective_permute"
    assert kinds["a2a"] == "all_to_all" and kinds["bc"] == "collective_broadcast"
    text = one_device.thunk_sequence_text()
    assert "all_reduce ar" in text and "collective_permute cp" in text


def test_one_rank_plans_name_the_nccl_calls(one_device):
    t = _thunks(one_device)
    ops = {name: t[name].nccl_ops(_address, 0, 1, (0,))
           for name in ("ar", "ag", "rs", "cp", "none", "a2a", "bc")}
    assert [(o.kind, o.count, o.datatype, o.op) for o in ops["ar"]] == \
        [("all_reduce", 32, nccl.FLOAT32, nccl.SUM)]
    assert [(o.kind, o.count, o.datatype) for o in ops["ag"]] == \
        [("all_gather", 24, nccl.UINT8)]
    assert [(o.kind, o.count, o.datatype, o.op) for o in ops["rs"]] == \
        [("reduce_scatter", 6, nccl.INT32, nccl.MAX)]
    # A device that sends to itself copies; one nobody sends to gets zeros.
    assert [(o.kind, o.count) for o in ops["cp"]] == [("copy", 128)]
    assert [(o.kind, o.count) for o in ops["none"]] == [("zero", 128)]
    assert [(o.kind, o.count) for o in ops["a2a"]] == [("copy", 24)]
    assert [(o.kind, o.count, o.peer) for o in ops["bc"]] == [("broadcast", 128, 0)]
    ar = t["ar"]
    assert ops["ar"][0].send == _address(ar.operands[0])
    assert ops["ar"][0].recv == _address(ar.results[0])


def test_four_rank_plans_send_and_receive_by_rank():
    exe = xla_gpu.compile(FOUR, target="cuda", arch="sm_90", cache=False)
    t = _thunks(exe)
    ids = (0, 1, 2, 3)
    (ag,) = t["ag"].nccl_ops(_address, 1, 4, ids)
    assert (ag.kind, ag.count) == ("all_gather", 24)    # each rank's 2x3 f32
    cp = t["cp"]
    # partition 1 sends to 2 and receives from 0
    got = [(o.kind, o.peer, o.count) for o in cp.nccl_ops(_address, 1, 4, ids)]
    assert got == [("send", 2, 24), ("recv", 0, 24)]
    # partition 2 sends nothing (no pair from 2) and receives from 1
    assert [(o.kind, o.peer) for o in cp.nccl_ops(_address, 2, 4, ids)] == [("recv", 1)]
    # partition 0 sends to 1 and receives from 3
    assert [(o.kind, o.peer) for o in cp.nccl_ops(_address, 0, 4, ids)] == \
        [("send", 1), ("recv", 3)]
    with pytest.raises(XlaGpuError, match="'ag'.*do not fit a group of 2"):
        t["ag"].nccl_ops(_address, 0, 2, (0, 1))


def test_all_to_all_blocks_go_to_their_ranks():
    ref = ArrayRef(BufferSlice(0, 0, 96), "f32", (4, 6))
    out = ArrayRef(BufferSlice(1, 0, 96), "f32", (4, 6))
    thunk = CT.AllToAllThunk("a2a", operands=[ref], results=[out], dimension=0)
    ops = thunk.nccl_ops(_address, 2, 4, (0, 1, 2, 3))
    sends = [(o.peer, o.send - _address(ref), o.count) for o in ops if o.kind == "send"]
    recvs = [(o.peer, o.recv - _address(out), o.count) for o in ops if o.kind == "recv"]
    assert sends == [(0, 0, 24), (1, 24, 24), (3, 72, 24)]
    assert recvs == [(0, 0, 24), (1, 24, 24), (3, 72, 24)]
    assert [(o.kind, o.send - _address(ref)) for o in ops if o.kind == "copy"] == [("copy", 48)]


@pytest.mark.parametrize("etype, root, message", [
    ("s16", "add", "sum reduction over s16: NCCL has no such data type"),
    ("s32", "and", "and reduction over s32: NCCL has no bitwise reductions"),
    ("c64", "multiply", "product reduction over c64: NCCL only sums complex"),
    ("f32", "multiply", None),      # ncclProd
])
def test_reductions_nccl_cannot_do_are_refused_at_compile_time(etype, root, message):
    text = f"""HloModule m, num_partitions=4
r {{
  a = {etype}[] parameter(0)
  b = {etype}[] parameter(1)
  ROOT m = {etype}[] {root}(a, b)
}}
ENTRY e {{
  x = {etype}[2,3] parameter(0)
  ROOT s = {etype}[2,3] all-reduce(x), replica_groups={{{{0,1,2,3}}}}, use_global_device_ids=true, to_apply=r, channel_id=1
}}
"""
    if message is None:
        xla_gpu.compile(text, target="cuda", arch="sm_90", cache=False)
        return
    with pytest.raises(UnsupportedError,
                       match=f"'s'.*cuda target \\(NCCL\\): an NCCL {message}"):
        xla_gpu.compile(text, target="cuda", arch="sm_90", cache=False)


GATHER_MINOR = """HloModule m, num_partitions=4
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[2,3] parameter(0)
  g = f32[2,12] all-gather(x), replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={1}, channel_id=1
  s = f32[2,3] reduce-scatter(g), replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={1}, to_apply=add, channel_id=2
  a = f32[2,12] all-to-all(g), replica_groups={{0,1,2,3}}, dimensions={1}, channel_id=3
  ROOT t = (f32[2,12], f32[2,3], f32[2,12]) tuple(g, s, a)
}
"""


def test_a_dimension_behind_a_major_one_goes_through_scratch_in_columns():
    # Along dimension 1 of a row-major f32[2,12]: each rank's block is a
    # column of 2 rows of 3 floats (12 bytes), the rows 48 bytes apart.
    exe = xla_gpu.compile(GATHER_MINOR, target="cuda", arch="sm_90", cache=False)
    t = _thunks(exe)
    ids, scratch = (0, 1, 2, 3), 0x900000
    g, s, a = t["g"], t["s"], t["a"]
    assert g.nccl_scratch_bytes(4) == 256 and s.nccl_scratch_bytes(4) == 256
    ops = g.nccl_ops(_address, 1, 4, ids, scratch)
    assert (ops[0].kind, ops[0].recv, ops[0].count) == ("all_gather", scratch, 24)
    out = _address(g.results[0])
    assert [(o.kind, o.send - scratch, o.recv - out, o.count, o.height, o.src_pitch,
             o.dst_pitch) for o in ops[1:]] == \
        [("copy2d", 24 * r, 12 * r, 12, 2, 12, 48) for r in range(4)]
    ops = s.nccl_ops(_address, 1, 4, ids, scratch)
    src = _address(s.operands[0])
    assert [(o.kind, o.send - src, o.recv - scratch, o.src_pitch, o.dst_pitch)
            for o in ops[:4]] == [("copy2d", 12 * r, 24 * r, 48, 12) for r in range(4)]
    assert (ops[4].kind, ops[4].send, ops[4].count) == ("reduce_scatter", scratch, 6)
    # all-to-all: columns to scratch, the kept block copied, every send and
    # receive in one group, columns back
    assert a.nccl_scratch_bytes(4) == 2 * 256
    kinds = [o.kind for o in a.nccl_ops(_address, 1, 4, ids, scratch)]
    assert kinds == ["copy2d"] * 4 + ["copy"] + ["send", "recv"] * 3 + ["copy2d"] * 4


def _apply_copies(ops, src: np.ndarray, dst: np.ndarray) -> None:
    for op in ops:
        for row in range(op.height):
            s, d = op.send + row * op.src_pitch, op.recv + row * op.dst_pitch
            dst[d:d + op.count] = src[s:s + op.count]


def test_gathered_columns_land_where_a_concatenation_puts_them():
    # The copies' arithmetic on host bytes: NCCL's gather of 4 ranks' [2,3]
    # blocks (one run each), then the copy2d steps, is a concatenation
    # along dimension 1; split_blocks undoes it.
    blocks = [np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * r for r in range(4)]
    gathered = np.concatenate([b.ravel() for b in blocks]).view(np.uint8)
    out = np.zeros(gathered.size, np.uint8)
    _apply_copies(nccl.gather_blocks(0, 0, 2, 12, 4), gathered, out)
    np.testing.assert_array_equal(out.view(np.float32).reshape(2, 12),
                                  np.concatenate(blocks, axis=1))
    back = np.zeros_like(gathered)
    _apply_copies(nccl.split_blocks(0, 0, 2, 12, 4), out, back)
    np.testing.assert_array_equal(back, gathered)


def test_saved_cuda_programs_with_collectives_load_with_the_same_plans(one_device, tmp_path):
    one_device.save(tmp_path / "program")
    loaded = load_program(tmp_path / "program", expected_digest=one_device.artifact_digest)
    assert loaded.thunk_sequence_text() == one_device.thunk_sequence_text()
    before, after = _thunks(one_device), _thunks(loaded)
    for name in ("ar", "ag", "rs", "cp", "none", "a2a", "bc"):
        assert after[name].nccl_ops(_address, 0, 1, (0,)) == \
            before[name].nccl_ops(_address, 0, 1, (0,))


# -- running (the dispatch without a GPU; the real runs with one) ----------------------


@pytest.mark.skipif(HAS_GPU, reason="checks the machine without a GPU")
def test_run_partitioned_on_cuda_without_a_gpu_is_a_clear_error():
    exe = xla_gpu.compile(FOUR, target="cuda", arch="sm_90", cache=False)
    args = [[np.zeros((2, 3), np.float32)]] * 4
    with pytest.raises(CudaUnavailableError, match="no GPU"):
        exe.run_partitioned(args)


@needs_gpu
def test_one_rank_collectives_run_on_the_gpu_as_the_interpreter_says(one_device):
    rng = np.random.default_rng(0)
    p = rng.standard_normal((4, 8)).astype(np.float32)
    q = rng.integers(-50, 50, (2, 3)).astype(np.int32)
    got = one_device.run(p, q)
    (want,) = evaluate_devices(parse_module(ONE_DEVICE), [[p, q]])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    got = one_device.run_partitioned([[p, q]])[0]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
