"""The cpu target's native thunk executor (ffi/host_executor.cc): the same
results and counters as the Python thunk loop, the thunks it leaves to
Python called back with their errors intact, its gemm on every dimension
order, and a malformed command stream refused without a crash."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.runtime import host_executor
from xla_gpu.runtime.thunks import ThunkError, walk

from test_cpu_kernels_grid import NEGATE_65536
from test_thunks import COND_INDEX, CUSTOM, GEMM, KERNEL_COPY_MEMSET, WHILE

try:
    from xla_gpu.runtime._host_run import HostRun as _HostRun
except ImportError:   # a source tree without the built extension
    _HostRun = None

pytestmark = pytest.mark.skipif(host_executor.native_executor() is None,
                                reason="libXlaGpuFfi.so cannot be loaded or built here")


def _both(text: str, *args, monkeypatch):
    """(native executable, its results, python executable, its results)."""
    native = xla_gpu.compile(text, target="cpu")
    got = native.run(*args)
    monkeypatch.setenv("XLA_GPU_HOST_EXECUTOR", "python")
    python = xla_gpu.compile(text, target="cpu")
    want = python.run(*args)
    monkeypatch.delenv("XLA_GPU_HOST_EXECUTOR")
    assert native._native_program() is not None and python._native_program() is None
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
    return native, got, python, want


def test_loops_copies_memsets_and_kernels_match_the_python_executor(monkeypatch):
    x = np.linspace(-1, 1, 8).astype(np.float32)
    native, got, python, want = _both(WHILE, x, monkeypatch=monkeypatch)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert native.stats == python.stats
    # 5 iterations of a loop of known trip count: the condition's kernel
    # never runs (16 launches when it did).
    assert native.stats["while_iterations"] == 5 and native.kernel_launches() == 10
    assert native._native_program().callbacks == []
    y = np.arange(16, dtype=np.float32)
    native, got, python, want = _both(KERNEL_COPY_MEMSET, y, monkeypatch=monkeypatch)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert native.stats == python.stats and native.stats["memsets"] >= 1


def test_a_loop_of_unknown_trip_count_tests_its_condition_in_both_executors(monkeypatch):
    # The counter starts at a parameter: no count is known, the native
    # WHILE command runs the condition and reads the predicate.
    text = WHILE.replace("zero = s32[] constant(0)", "zero = s32[] parameter(1)") \
        .replace(', backend_config={"known_trip_count":{"n":"5"}}', "")
    x = np.linspace(-1, 1, 8).astype(np.float32)
    native, got, python, want = _both(text, x, np.int32(2), monkeypatch=monkeypatch)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert native.stats == python.stats
    assert native.stats["while_iterations"] == 3 and native.kernel_launches() == 10


@pytest.mark.parametrize("index", [-3, 0, 1, 2, 7])
def test_conditional_branch_choice_matches_including_out_of_range(index, monkeypatch):
    x = np.linspace(-2, 2, 4).astype(np.float32)
    native, got, python, want = _both(COND_INDEX, np.int32(index), x,
                                      monkeypatch=monkeypatch)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert native._native_program().callbacks == []


def test_small_gemms_run_natively_on_permuted_batch_and_contracting_dims(monkeypatch):
    import ml_dtypes
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 4, 3)).astype(np.float32)
    b = rng.standard_normal((5, 4, 2)).astype(np.float32)
    h = rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16)
    g = rng.standard_normal((3, 2)).astype(ml_dtypes.bfloat16)
    native, got, python, want = _both(GEMM, a, b, h, g, monkeypatch=monkeypatch)
    np.testing.assert_allclose(got[0], np.maximum(np.einsum("bkm,nkb->bmn", a, b), 0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=0)
    program = native._native_program()
    gemms = [t for t in walk(native.thunks) if t.kind == "gemm"]
    # The f32 product is the executor's; the bf16 one (converted) is numpy's.
    assert len(gemms) == 2
    assert [t.kind for t in program.callbacks] == ["gemm"]
    assert native.stats["gemms"] == 2


def _dot_module(lhs: str, rhs: str, out: str, dims: str, dtype: str = "f32") -> str:
    return f"""HloModule m
ENTRY e {{
  a = {dtype}{lhs} parameter(0)
  b = {dtype}{rhs} parameter(1)
  ROOT d = {dtype}{out} dot(a, b), {dims}
}}
"""


@pytest.mark.parametrize("lhs,rhs,out,dims,einsum", [
    ("[6,5]{1,0}", "[5,7]{1,0}", "[6,7]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "mk,kn->mn"),
    ("[6,5]{0,1}", "[5,7]{0,1}", "[6,7]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "mk,kn->mn"),
    ("[5,6]{1,0}", "[7,5]{1,0}", "[6,7]{0,1}",
     "lhs_contracting_dims={0}, rhs_contracting_dims={1}", "km,nk->mn"),
    ("[3,2,4,5]{3,2,1,0}", "[3,5,6]{2,1,0}", "[3,2,4,6]{3,2,1,0}",
     "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={3}, "
     "rhs_contracting_dims={1}", "bxyk,bkn->bxyn"),
    ("[4,1,5]{2,1,0}", "[5,3]{1,0}", "[4,1,3]{2,1,0}",
     "lhs_contracting_dims={2}, rhs_contracting_dims={0}", "mzk,kn->mzn"),
], ids=["row-major", "column-major-operands", "transposed-output", "two-free-dims",
        "unit-dim"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_native_gemm_layouts(lhs, rhs, out, dims, einsum, dtype, monkeypatch):
    text = _dot_module(lhs, rhs, out, dims, dtype)
    np_type = np.float32 if dtype == "f32" else np.float64
    rng = np.random.default_rng(1)
    shape = lambda s: tuple(int(d) for d in s[1:s.index("]")].split(","))  # noqa: E731
    a = rng.standard_normal(shape(lhs)).astype(np_type)
    b = rng.standard_normal(shape(rhs)).astype(np_type)
    native, got, python, want = _both(text, a, b, monkeypatch=monkeypatch)
    expected = np.einsum(einsum, a.astype(np.float64), b.astype(np.float64))
    tolerance = 1e-5 if dtype == "f32" else 1e-12
    np.testing.assert_allclose(got[0], expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(got[0], want[0], rtol=tolerance, atol=tolerance)
    assert native._native_program().callbacks == []   # every one native


# Shapes around the executor's f32 tiles (6 or 4 rows, panels of two
# vectors of columns, dot products along a long k): edge rows and columns,
# a single row tile read in place, transposed operands packed, batches.
_TILE_CASES = [
    ("[13,37]{1,0}", "[37,53]{1,0}", "[13,53]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "mk,kn->mn"),
    ("[5,9]{1,0}", "[9,40]{1,0}", "[5,40]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "mk,kn->mn"),
    ("[8,5]{1,0}", "[5,48]{1,0}", "[8,48]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "mk,kn->mn"),
    ("[100,7]{1,0}", "[7,21]{1,0}", "[100,21]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "mk,kn->mn"),
    ("[2,9000]{1,0}", "[9000,3]{1,0}", "[2,3]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "mk,kn->mn"),
    ("[1,300]{1,0}", "[300,7]{1,0}", "[1,7]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={0}", "mk,kn->mn"),
    ("[11,300]{1,0}", "[35,300]{1,0}", "[11,35]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}", "mk,nk->mn"),
    ("[70,29]{1,0}", "[45,29]{1,0}", "[70,45]{1,0}",
     "lhs_contracting_dims={1}, rhs_contracting_dims={1}", "mk,nk->mn"),
    ("[17,66]{1,0}", "[17,33]{0,1}", "[66,33]{1,0}",
     "lhs_contracting_dims={0}, rhs_contracting_dims={0}", "km,kn->mn"),
    ("[3,19,8]{2,1,0}", "[3,8,34]{2,1,0}", "[3,19,34]{2,1,0}",
     "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
     "rhs_contracting_dims={1}", "bmk,bkn->bmn"),
]
_TILE_IDS = ["edge-rows-and-columns", "one-row-tile", "one-vector-tail",
             "column-tail-in-row-chunks", "long-k-plain-loop", "single-row", "dots-along-k",
             "transposed-rhs-packed", "transposed-lhs", "batched"]


def _shape(s: str) -> tuple[int, ...]:
    return tuple(int(d) for d in s[1:s.index("]")].split(","))


@pytest.mark.parametrize("lhs,rhs,out,dims,einsum", _TILE_CASES, ids=_TILE_IDS)
def test_native_f32_gemm_tiles_on_edge_shapes(lhs, rhs, out, dims, einsum, monkeypatch):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(_shape(lhs)).astype(np.float32)
    b = rng.standard_normal(_shape(rhs)).astype(np.float32)
    native, got, python, want = _both(_dot_module(lhs, rhs, out, dims), a, b,
                                      monkeypatch=monkeypatch)
    expected = np.einsum(einsum, a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got[0], expected, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5)
    assert native._native_program().callbacks == []


_NARROWER = """
import sys
import numpy as np
import xla_gpu
from xla_gpu.runtime import host_executor
cases = {cases!r}
rng = np.random.default_rng(7)
assert host_executor.native_gemm_vector_width() <= {width}
for lhs, rhs, out, dims, einsum in cases:
    shape = lambda s: tuple(int(d) for d in s[1:s.index("]")].split(","))
    a = rng.standard_normal(shape(lhs)).astype(np.float32)
    b = rng.standard_normal(shape(rhs)).astype(np.float32)
    text = {module!r}.format(lhs=lhs, rhs=rhs, out=out, dims=dims)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    got = exe.run(a, b)[0]
    assert exe._native_program().callbacks == []
    np.testing.assert_allclose(got, np.einsum(einsum, a.astype(np.float64), b.astype(np.float64)),
                               rtol=2e-5, atol=2e-5)
print("ok")
"""


@pytest.mark.parametrize("cap,width", [("avx2", 8), ("none", 0)])
def test_narrower_gemm_tiles_give_the_same_products(cap, width):
    """XLA_GPU_HOST_GEMM_VECTOR caps the tiles' vector width (read once per
    process): the AVX2 tiles and the plain loop on the same edge shapes."""
    import os
    import subprocess
    import sys
    module = ("HloModule m\nENTRY e {{\n  a = f32{lhs} parameter(0)\n"
              "  b = f32{rhs} parameter(1)\n  ROOT d = f32{out} dot(a, b), {dims}\n}}\n")
    script = _NARROWER.format(cases=_TILE_CASES, width=width, module=module)
    env = dict(os.environ, XLA_GPU_HOST_GEMM_VECTOR=cap)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_mid_size_f32_gemms_run_natively_where_the_host_has_avx512(monkeypatch):
    """A 16x128 @ 128x512 product (2^20 multiply-adds, past the plain
    loop's size) runs in the executor's AVX-512 tiles, not as a Python
    callback to numpy's BLAS; on a host without AVX-512 it stays numpy's."""
    text = _dot_module("[16,128]{1,0}", "[128,512]{1,0}", "[16,512]{1,0}",
                       "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    native, got, python, want = _both(text, a, b, monkeypatch=monkeypatch)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5)
    callbacks = native._native_program().callbacks
    if host_executor.native_gemm_vector_width() >= 16:
        assert callbacks == [] and native.stats["gemms"] == 1
    else:
        assert [t.kind for t in callbacks] == ["gemm"]
    # A transposed rhs with few rows and a short k would cost as much to
    # pack as to multiply: numpy's.
    text = _dot_module("[16,128]{1,0}", "[512,128]{1,0}", "[16,512]{1,0}",
                       "lhs_contracting_dims={1}, rhs_contracting_dims={1}")
    exe = xla_gpu.compile(text, target="cpu")
    exe.run(a, rng.standard_normal((512, 128)).astype(np.float32))
    assert [t.kind for t in exe._native_program().callbacks] == ["gemm"]


def test_a_python_thunk_error_comes_out_and_the_next_run_recovers():
    from xla_gpu.hlo import interpreter
    calls = []

    def fails_once(x, y, scale):
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("first call fails")
        return scale * x + y
    interpreter.register_custom_call("xla_gpu_test_thunk_axpy", fails_once)
    try:
        exe = xla_gpu.compile(CUSTOM, target="cpu")
        x = np.ones((4, 8), np.float32)
        with pytest.raises(xla_gpu.XlaGpuError, match="first call fails"):
            exe.run(x, x)
        # The custom call is the executor's one Python thunk.
        assert [t.kind for t in exe._native_program().callbacks] == ["custom_call"]
        (r,) = exe.run(x, 2 * x)
        np.testing.assert_array_equal(r, 5 * x)
        assert exe.stats["custom_calls"] == 1 and len(calls) == 2
    finally:
        interpreter.unregister_custom_call("xla_gpu_test_thunk_axpy")


TWO_KERNELS = """HloModule m
scaled {
  x = f32[16] parameter(0)
  two = f32[] constant(2)
  t = f32[16] broadcast(two), dimensions={}
  ROOT m = f32[16] multiply(x, t)
}
shifted {
  x = f32[16] parameter(0)
  one = f32[] constant(1)
  t = f32[16] broadcast(one), dimensions={}
  ROOT a = f32[16] add(x, t)
}
ENTRY e {
  p = f32[16] parameter(0)
  s = f32[16] fusion(p), kind=kLoop, calls=scaled
  ROOT a = f32[16] fusion(s), kind=kLoop, calls=shifted
}
"""


def _set(index: int, value: int):
    def mutate(code):
        code[index] = value
        return code
    return mutate


@pytest.mark.parametrize("mutate", [
    _set(0, 99),                     # unknown opcode
    lambda code: code[:3],           # cut short
    _set(3, 1000),                   # allocation out of range
    _set(4, -8),                     # negative offset
    _set(1, 50),                     # kernel index out of range
], ids=["opcode", "truncated", "allocation", "offset", "kernel"])
@pytest.mark.parametrize("path", ["c", "ctypes"])
def test_a_malformed_command_stream_is_refused(mutate, path):
    exe = xla_gpu.compile(TWO_KERNELS, target="cpu", command_buffers=False)
    y = np.arange(16, dtype=np.float32)
    np.testing.assert_array_equal(exe.run(y)[0], 2 * y + 1)
    program = exe._native_program()
    assert program.code[0] == host_executor.KERNEL
    program.code = np.ascontiguousarray(mutate(program.code.copy()))
    # The C run path is built again over the new stream; False: the
    # executor called through ctypes from the Python path.
    exe._host_run = None if path == "c" else False
    with pytest.raises(ThunkError, match="refused command word 0"):
        exe.run(y)
    assert (_HostRun is not None and isinstance(exe._host_run, _HostRun)) == \
        (path == "c" and _HostRun is not None)


def test_outputs_held_by_the_caller_are_not_reused(monkeypatch):
    x = np.linspace(-1, 1, 8).astype(np.float32)
    exe = xla_gpu.compile(WHILE, target="cpu")
    first = exe.run(x)
    kept = [a.copy() for a in first]
    tail = exe.run(x)[1][2:]        # only a view of one output is held
    for _ in range(6):
        again = exe.run(-x)
        assert not any(np.shares_memory(a, b) for a in first for b in again)
        assert not np.shares_memory(tail, again[1])
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)


def test_kernel_outputs_are_reused_only_once_dropped():
    text = """HloModule m
fused {
  x = f32[256,64] parameter(0)
  ROOT n = f32[256,64] negate(x)
}
"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    x = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    (first,) = exe.run(x)
    (second,) = exe.run(x)
    assert not np.shares_memory(first, second)
    address = second.ctypes.data
    view = first[3:]                       # only a view of the first is held
    del first, second
    (third,) = exe.run(2 * x)
    assert third.ctypes.data == address   # the dropped one's memory again
    assert not np.shares_memory(view, third)
    np.testing.assert_array_equal(view, -x[3:])
    np.testing.assert_array_equal(third, -2 * x)


@pytest.mark.parametrize("path", ["c", "python"])
def test_an_in_place_kernels_operand_copy_is_pool_memory_reused_once_dropped(path):
    # A lone dynamic-update-slice fusion updates its operand in place: the
    # run copies the caller's array (never written) into pool memory, which
    # is the output, and hands it out again only once the output is dropped.
    # Both ways: the C run path, and HostKernel.run's Python path.
    text = """HloModule m
fused {
  x = f32[64,32] parameter(0)
  u = f32[8,32] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  ROOT d = f32[64,32] dynamic-update-slice(x, u, i, z)
}
ENTRY e {
  x = f32[64,32] parameter(0)
  u = f32[8,32] parameter(1)
  i = s32[] parameter(2)
  ROOT f = f32[64,32] fusion(x, u, i), kind=kLoop, calls=fused
}
"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert exe.spec.emitter == "in_place_dynamic_update_slice"
    kernel = exe._load()
    if path == "python":
        kernel._c_run = False
    x = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    original = x.copy()

    def expected(row, value):
        want = original.copy()
        want[row:row + 8] = value
        return want

    (first,) = exe.run(x, np.full((8, 32), -1, np.float32), np.asarray(4, np.int32))
    (second,) = exe.run(x, np.full((8, 32), -2, np.float32), np.asarray(40, np.int32))
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(x, original)
    address = second.ctypes.data
    view = first[2:]
    del first, second
    (third,) = exe.run(x, np.full((8, 32), -3, np.float32), np.asarray(9, np.int32))
    assert third.ctypes.data == address    # the dropped output's memory again
    if path == "python":
        pool = kernel.spec._host_call_plan.pool
        assert any(entry[2] == address for entry, _ in pool._held[-1])   # operand 0's
    else:
        assert _HostRun is None or isinstance(kernel._c_run, _HostRun)
    assert not np.shares_memory(view, third)
    np.testing.assert_array_equal(view, expected(4, -1)[2:])
    np.testing.assert_array_equal(third, expected(9, -3))
    np.testing.assert_array_equal(x, original)


# Two kernels of 512K threads: big enough to run as block ranges on host
# threads where that is faster (the executor's SPLIT command).
BIG_KERNELS = """HloModule m
scaled {
  x = f32[512,1024] parameter(0)
  two = f32[] constant(2)
  t = f32[512,1024] broadcast(two), dimensions={}
  ROOT m = f32[512,1024] multiply(x, t)
}
squashed {
  x = f32[512,1024] parameter(0)
  ROOT a = f32[512,1024] tanh(x)
}
ENTRY e {
  p = f32[512,1024] parameter(0)
  s = f32[512,1024] fusion(p), kind=kLoop, calls=scaled
  ROOT a = f32[512,1024] fusion(s), kind=kLoop, calls=squashed
}
"""


def test_big_kernels_split_natively_after_timing_both_ways(monkeypatch):
    from xla_gpu.runtime import HostKernel
    if host_executor.native_block_runner() is None:
        pytest.skip("no native block pool here")
    # Choose again after 4 runs, so the test sees a slot go back to timing.
    monkeypatch.setattr(HostKernel, "REPROBE_EVERY", 4)
    x = np.random.default_rng(3).standard_normal((512, 1024)).astype(np.float32)
    native, got, python, want = _both(BIG_KERNELS, x, monkeypatch=monkeypatch)
    program = native._native_program()
    # Both kernels run in the executor as SPLIT commands: no Python launch.
    assert program.callbacks == [] and program._split_kernels == 2
    np.testing.assert_array_equal(got[0], want[0])
    assert native.stats == python.stats and native.stats["kernels"] == 2
    slots = program._probes.reshape(-1, host_executor.PROBE_WORDS)
    runs = HostKernel.PROBE_RUNS
    for _ in range(2 * runs - 1):       # the first run was _both's
        (again,) = native.run(x)
        np.testing.assert_array_equal(again, want[0])
    # Each kernel was timed `runs` times each way, and a way chosen (1: one
    # thread, 2: split) ...
    assert slots[:, 1].tolist() == [runs, runs] and slots[:, 2].tolist() == [runs, runs]
    assert set(slots[:, 0].tolist()) <= {1, 2} and (slots[:, 3:5] > 0).all()
    # ... which holds for REPROBE_EVERY runs, then both ways are timed again.
    for _ in range(4):
        np.testing.assert_array_equal(native.run(x)[0], want[0])
    assert slots[:, :3].tolist() == [[0, 0, 0], [0, 0, 0]]
    if _HostRun is not None:
        assert isinstance(native._host_run, _HostRun)


# SPLIT whole blocks_fn nargs blocks parts probe runs reprobe (alloc off)*nargs
@pytest.mark.parametrize("mutate", [
    _set(2, 9),                      # blocks entry out of the kernel table
    _set(5, 0),                      # no parts
    _set(6, 2),                      # probe slot out of range (2 slots)
    _set(7, 0),                      # no timed runs
    _set(4, -1),                     # negative block count
    lambda code: code[:8],           # cut short
], ids=["blocks_fn", "parts", "probe", "runs", "blocks", "truncated"])
@pytest.mark.parametrize("path", ["c", "ctypes"])
def test_a_malformed_split_command_is_refused(mutate, path):
    if host_executor.native_block_runner() is None:
        pytest.skip("no native block pool here")
    exe = xla_gpu.compile(BIG_KERNELS, target="cpu", command_buffers=False)
    program = exe._native_program()
    assert program.code[0] == host_executor.SPLIT
    program.code = np.ascontiguousarray(mutate(program.code.copy()))
    exe._host_run = None if path == "c" else False
    with pytest.raises(ThunkError, match="refused command word 0"):
        exe.run(np.ones((512, 1024), np.float32))


# -- the C run path (xla_gpu.runtime._host_run) ---------------------------------

needs_host_run = pytest.mark.skipif(_HostRun is None,
                                    reason="xla_gpu.runtime._host_run is not built here")

# A donated parameter (its allocation is written, so the argument is copied
# in), an output in column-major layout (a strided view), an output taken
# from the donated parameter's allocation and a constant output (copies).
DONATED_TRANSPOSED = """HloModule m, input_output_alias={ {0}: (0, {}, may-alias) }, \
entry_computation_layout={(f32[4,8]{1,0}, f32[4,8]{1,0})->\
(f32[4,8]{1,0}, f32[4,8]{0,1}, f32[8]{0})}
ENTRY e {
  p = f32[4,8]{1,0} parameter(0)
  q = f32[4,8]{1,0} parameter(1)
  a = f32[4,8]{1,0} add(p, q)
  t = f32[4,8]{0,1} copy(a)
  c = f32[8]{0} constant({1,2,3,4,5,6,7,8})
  ROOT r = (f32[4,8]{1,0}, f32[4,8]{0,1}, f32[8]{0}) tuple(a, t, c)
}
"""


def _c_and_python(exe, *args):
    """The C path's results and counters, then the Python path's."""
    got = exe.run(*args)
    assert isinstance(exe._host_run, _HostRun)
    got_stats = dict(exe.stats)
    want = exe._run_cpu(list(args))
    assert got_stats == exe.stats and got_stats
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.strides == w.strides
        np.testing.assert_array_equal(g, w)
    return got


@needs_host_run
def test_the_c_run_path_gives_the_python_paths_results_and_counters():
    x = np.linspace(-1, 1, 8).astype(np.float32)
    _c_and_python(xla_gpu.compile(WHILE, target="cpu"), x)
    _c_and_python(xla_gpu.compile(KERNEL_COPY_MEMSET, target="cpu"),
                  np.arange(16, dtype=np.float32))
    cond = xla_gpu.compile(COND_INDEX, target="cpu")
    for index in (-1, 0, 2, 5):
        _c_and_python(cond, np.asarray(index, np.int32), np.linspace(-2, 2, 4, dtype=np.float32))
    exe = xla_gpu.compile(DONATED_TRANSPOSED, target="cpu")
    p = np.arange(32, dtype=np.float32).reshape(4, 8)
    q = np.full((4, 8), 0.5, np.float32)
    a, t, c = _c_and_python(exe, p, q)
    np.testing.assert_array_equal(a, p + q)
    np.testing.assert_array_equal(t, p + q)
    assert t.strides == (4, 16)                       # the column-major buffer
    np.testing.assert_array_equal(c, np.arange(1, 9, dtype=np.float32))
    np.testing.assert_array_equal(p, np.arange(32, dtype=np.float32).reshape(4, 8))
    c[:] = 0                                          # a copy, not the constant
    np.testing.assert_array_equal(exe.run(p, q)[2], np.arange(1, 9, dtype=np.float32))


@needs_host_run
def test_arguments_the_c_path_does_not_take_go_the_python_way():
    exe = xla_gpu.compile(DONATED_TRANSPOSED, target="cpu")
    p = np.arange(32, dtype=np.float32).reshape(4, 8)
    q = np.full((4, 8), 0.5, np.float32)
    want = exe.run(p, q)
    wide = np.zeros((4, 16), np.float32)
    wide[:, ::2] = q
    raw = np.zeros(4 * 8 + 1, np.float32)
    shifted = raw[1:33].reshape(4, 8)                  # contiguous, 4 bytes off 16
    shifted[...] = q
    class Subclass(np.ndarray):
        pass
    for other in (wide[:, ::2], np.asfortranarray(q), q.view(Subclass), shifted):
        got = exe.run(p, other)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(xla_gpu.errors.ArgumentError, match="argument 1: expected dtype"):
        exe.run(p, q.astype(np.float64))
    with pytest.raises(xla_gpu.errors.ArgumentError, match="argument 0: expected shape"):
        exe.run(p[:2], q)
    with pytest.raises(xla_gpu.errors.ArgumentError, match="takes 2 arguments"):
        exe.run(p)


@needs_host_run
def test_the_c_path_hands_a_buffer_out_again_only_once_dropped():
    exe = xla_gpu.compile(TWO_KERNELS, target="cpu", command_buffers=False)
    y = np.arange(16, dtype=np.float32)
    (first,) = exe.run(y)
    (second,) = exe.run(y)
    assert isinstance(exe._host_run, _HostRun) and not np.shares_memory(first, second)
    address = second.ctypes.data
    view = first[3:]
    del first, second
    (third,) = exe.run(2 * y)
    assert third.ctypes.data == address
    assert not np.shares_memory(view, third)
    np.testing.assert_array_equal(view, (2 * y + 1)[3:])
    np.testing.assert_array_equal(third, 4 * y + 1)


@needs_host_run
def test_concurrent_c_path_runs_never_share_a_buffer():
    import threading
    exe = xla_gpu.compile(WHILE, target="cpu")
    reference = xla_gpu.compile(WHILE, target="cpu")
    inputs = [np.linspace(-1, 1, 8).astype(np.float32) * (k + 1) for k in range(4)]
    wants = [reference._run_cpu([x]) for x in inputs]
    errors: list[str] = []

    def worker(k):
        for _ in range(200):
            got = exe.run(inputs[k])
            if not all(np.array_equal(g, w) for g, w in zip(got, wants[k])):
                errors.append(f"thread {k}: wrong results")
                return
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(exe._host_run, _HostRun) and errors == []


@needs_host_run
@pytest.mark.parametrize("value", ["0x5A", "90", "007", "256", "x"])
def test_the_c_path_reads_the_debug_fill_as_the_python_path_does(value, monkeypatch):
    exe = xla_gpu.compile(TWO_KERNELS, target="cpu", command_buffers=False)
    y = np.arange(16, dtype=np.float32)
    monkeypatch.setenv("XLA_GPU_DEBUG_FILL", value)
    try:
        fill = int(value, 0)
    except ValueError:
        fill = None
    if fill is None or not 0 <= fill <= 255:
        with pytest.raises(xla_gpu.errors.ArgumentError, match="XLA_GPU_DEBUG_FILL"):
            exe.run(y)
    else:
        np.testing.assert_array_equal(exe.run(y)[0], 2 * y + 1)


# A two-output reduction (a tuple root: a pool buffer per output), an
# elementwise bf16 kernel, and a 64K-thread kernel (a SPLIT command).
ROW_SUM_AND_MAX = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
fused {
  x = f32[128,256] parameter(0)
  z = f32[] constant(0)
  m = f32[] constant(-inf)
  s = f32[128] reduce(x, z), dimensions={1}, to_apply=add
  r = f32[128] reduce(x, m), dimensions={1}, to_apply=max
  ROOT t = (f32[128], f32[128]) tuple(s, r)
}
ENTRY e {
  x = f32[128,256] parameter(0)
  ROOT f = (f32[128], f32[128]) fusion(x), kind=kInput, calls=fused
}
"""
SCALE_BF16 = """HloModule m
fused {
  x = bf16[64,64] parameter(0)
  y = bf16[64,64] parameter(1)
  ROOT m = bf16[64,64] multiply(x, y)
}
ENTRY e {
  x = bf16[64,64] parameter(0)
  y = bf16[64,64] parameter(1)
  ROOT f = bf16[64,64] fusion(x, y), kind=kLoop, calls=fused
}
"""


@needs_host_run
@pytest.mark.parametrize("text", [ROW_SUM_AND_MAX, SCALE_BF16, NEGATE_65536],
                         ids=["two_outputs", "bf16", "split"])
def test_a_single_kernels_c_run_gives_the_python_paths_results(text):
    import ml_dtypes
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    kernel = exe._load()
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(p.shape).astype(p.storage_dtype)
            for p in kernel.spec.parameters]
    for _ in range(8):                  # past the SPLIT command's timed runs
        got = exe.run(*args)
        assert isinstance(kernel._c_run, _HostRun)
        kernel._c_run, c_run = False, kernel._c_run
        want = exe.run(*args)
        kernel._c_run = c_run
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert type(g) is np.ndarray and g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    if text is SCALE_BF16:
        assert got[0].dtype == ml_dtypes.bfloat16


@needs_host_run
def test_arguments_a_single_kernels_c_run_does_not_take_go_the_python_way():
    exe = xla_gpu.compile(SCALE_BF16, target="cpu", cache=False)
    x = np.ones((64, 64), np.float32)
    # f32 where bf16 is expected: the Python path converts nothing and says so.
    with pytest.raises(xla_gpu.XlaGpuError, match="argument 0: expected dtype bf16"):
        exe.run(x, x)
    import ml_dtypes
    y = np.full((64, 64), 3, ml_dtypes.bfloat16)
    twice = np.full((64, 64), 6, ml_dtypes.bfloat16)
    np.testing.assert_array_equal(exe.run(y, np.full((64, 64), 2, ml_dtypes.bfloat16))[0],
                                  twice)
    # A non-contiguous view and a wrong shape go the Python way, which
    # copies or reports them.
    wide = np.full((64, 128), 2, ml_dtypes.bfloat16)
    np.testing.assert_array_equal(exe.run(y, wide[:, ::2])[0], twice)
    with pytest.raises(xla_gpu.XlaGpuError, match="argument 1: expected shape"):
        exe.run(y, wide)
    assert isinstance(exe._load()._c_run, _HostRun)


# -- donated arguments written in place (run(donated=...)) -----------------------

# An SGD step whose new parameters must alias the old ones, and one whose
# other output still reads the old parameters (may-alias: buffer
# assignment decides whether the parameter's allocation is written; when it
# is not, nothing is written in place). Either way the run with donated=
# gives the copying run's results bit for bit.
SGD = """HloModule m, input_output_alias={ {0}: (0, {}, must-alias) }, \
entry_computation_layout={(f32[2048]{0}, f32[2048]{0})->(f32[2048]{0}, f32[2048]{0})}
ENTRY e {
  p = f32[2048]{0} parameter(0)
  g = f32[2048]{0} parameter(1)
  lr = f32[] constant(0.01)
  l = f32[2048]{0} broadcast(lr), dimensions={}
  s = f32[2048]{0} multiply(g, l)
  n = f32[2048]{0} subtract(p, s)
  ROOT t = (f32[2048]{0}, f32[2048]{0}) tuple(n, s)
}
"""
# (A reduction of the old parameters fused with the update: our buffer
# assignment keeps the parameter's allocation unwritten, so under may-alias
# the argument is copied.)
SGD_READS_OLD = """HloModule m, input_output_alias={ {0}: (0, {}, may-alias) }, \
entry_computation_layout={(f32[2048]{0}, f32[2048]{0})->(f32[2048]{0}, f32[])}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[2048]{0} parameter(0)
  g = f32[2048]{0} parameter(1)
  lr = f32[] constant(0.01)
  l = f32[2048]{0} broadcast(lr), dimensions={}
  s = f32[2048]{0} multiply(g, l)
  n = f32[2048]{0} subtract(p, s)
  z = f32[] constant(0)
  sq = f32[2048]{0} multiply(p, p)
  r = f32[] reduce(sq, z), dimensions={0}, to_apply=add
  ROOT t = (f32[2048]{0}, f32[]) tuple(n, r)
}
"""


def _aligned(values, alignment=64, skew=0):
    """A copy of `values` at `skew` bytes past an `alignment` boundary."""
    from xla_gpu.runtime.spec import aligned_empty
    raw = aligned_empty((values.nbytes + alignment,), np.uint8, alignment)
    out = raw[skew:skew + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


@pytest.mark.parametrize("path", ["c", "python"])
@pytest.mark.parametrize("text", ["transposed", "sgd", "sgd_reads_old"])
def test_a_donated_argument_is_written_in_place_and_is_its_output(path, text):
    rng = np.random.default_rng(3)
    if text == "transposed":
        # The transpose reads the aliased output back from the parameter's
        # allocation after the add wrote it.
        exe = xla_gpu.compile(DONATED_TRANSPOSED, target="cpu")
        p0 = np.arange(32, dtype=np.float32).reshape(4, 8)
        other = np.full((4, 8), 0.5, np.float32)
    else:
        exe = xla_gpu.compile(SGD if text == "sgd" else SGD_READS_OLD, target="cpu")
        p0 = rng.standard_normal(2048).astype(np.float32)
        other = rng.standard_normal(2048).astype(np.float32)
    if path == "python":
        exe._host_run = False
    # Written in place where buffer assignment lets the program write the
    # parameter's allocation (always under must-alias).
    in_place = bool(exe._cpu_plan().donatable)
    assert in_place or text == "sgd_reads_old"
    want_p, p = p0.copy(), _aligned(p0)
    for _ in range(4):   # a training loop: each step's output is the next input
        want = exe.run(want_p, other)
        got = exe.run(p, other, donated=[0])
        assert (got[0] is p) == in_place
        assert np.shares_memory(got[0], p) == in_place
        if not in_place:
            p = _aligned(got[0])
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape and g.strides == w.strides
            np.testing.assert_array_equal(g, w)
        # The other outputs are not the donated memory; nor is the copying run's.
        assert not any(np.shares_memory(g, p) for g in got[1:])
        assert not np.shares_memory(want[0], want_p)
        want_p, p = want[0], got[0]
    if path == "c":
        assert isinstance(exe._host_run, _HostRun)


@pytest.mark.parametrize("path", ["c", "python"])
def test_donated_arguments_it_cannot_write_in_place_are_copied(path):
    exe = xla_gpu.compile(DONATED_TRANSPOSED, target="cpu")
    if path == "python":
        exe._host_run = False
    p0 = np.arange(32, dtype=np.float32).reshape(4, 8)
    q = np.full((4, 8), 0.5, np.float32)
    want = exe.run(p0, q)
    readonly = _aligned(p0)
    readonly.flags.writeable = False
    twice = _aligned(p0)
    cases = {
        "misaligned": (_aligned(p0, skew=16), q),    # what the kernels read, not a pool's
        "read-only": (readonly, q),
        "passed twice": (twice, twice),              # p + p: its own want
        "a view of the other": (_aligned(p0), None),
        "not donated": (_aligned(p0), q),
    }
    for name, (p, other) in cases.items():
        if other is None:
            other = p[:, :]                          # the same memory, another array
        expect = exe.run(p.copy(), other.copy()) if other is not q else want
        donated = [] if name == "not donated" else [0]
        got = exe.run(p, other, donated=donated)
        assert not np.shares_memory(got[0], p), name
        np.testing.assert_array_equal(p, p0, err_msg=name)   # left as it was
        for g, w in zip(got, expect):
            np.testing.assert_array_equal(g, w, err_msg=name)
    # Without donated= an argument is never written (the default).
    p = _aligned(p0)
    assert not np.shares_memory(exe.run(p, q)[0], p)
    np.testing.assert_array_equal(p, p0)


def test_donated_must_name_parameters():
    exe = xla_gpu.compile(DONATED_TRANSPOSED, target="cpu")
    p = np.arange(32, dtype=np.float32).reshape(4, 8)
    for bad in ([2], [-1], "0", [True], 0):
        with pytest.raises(xla_gpu.errors.ArgumentError, match="run\\(donated=...\\)"):
            exe.run(p, p, donated=bad)
