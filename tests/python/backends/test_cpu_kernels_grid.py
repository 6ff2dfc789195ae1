"""The cpu target's grid emulation as SIMD-friendly loops: atomics of the
whole-grid entry (one host thread) are plain read-modify-writes while block
ranges run side by side with real atomics, and both agree with the
reference interpreter; thread loops are marked parallel only without
atomics; the runtime times one thread against block ranges on several."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.backends import cpu
from xla_gpu.hlo.numerics import compare

_SCATTER = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  operand = f32[8,64] parameter(0)
  indices = s32[512,1] parameter(1)
  updates = f32[512,64] parameter(2)
  ROOT scatter = f32[8,64] scatter(operand, indices, updates), update_window_dims={1},
      inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
      to_apply=add
}
"""


def _scatter_inputs():
    rng = np.random.default_rng(3)
    operand = rng.standard_normal((8, 64)).astype(np.float32)
    # 512 updates into 8 rows: every row is hit 64 times on average.
    indices = rng.integers(0, 8, (512, 1)).astype(np.int32)
    updates = rng.standard_normal((512, 64)).astype(np.float32)
    return operand, indices, updates


def test_colliding_scatter_adds_serial_and_side_by_side():
    inputs = _scatter_inputs()
    want = hlo.evaluate(hlo.parse_module(_SCATTER), *inputs)[0]
    exe = xla_gpu.compile(_SCATTER, target="cpu", cache=False)
    assert "_host_serial_blocks" in exe.host_mlir   # the whole grid's copy
    (got,) = exe.run(*inputs)
    assert compare(got, want, "f32", scale_relative=True) is None
    # The JIT'd kernel: the whole grid on one thread (serial copy), then
    # block ranges on three threads (atomics).
    kernel = cpu.from_lowered(exe.host_mlir, entry=exe.spec.name)
    assert kernel.num_args == 3   # the output is the operand's buffer
    for workers in (1, 3):
        out = inputs[0].copy()
        kernel.run([out, inputs[1], inputs[2]], workers=workers)
        assert compare(out, want, "f32", scale_relative=True) is None, workers


def _complex_scatter(c: str, multiply: bool) -> str:
    root = f"ROOT r = {c}[] multiply(a, b)" if multiply else f"ROOT b = {c}[] parameter(1)"
    b = f"b = {c}[] parameter(1)" if multiply else ""
    return f"""HloModule m
combine {{
  a = {c}[] parameter(0)
  {b}
  {root}
}}
fused {{
  operand = {c}[8,64] parameter(0)
  indices = s32[512,1] parameter(1)
  updates = {c}[512,64] parameter(2)
  ROOT scatter = {c}[8,64] scatter(operand, indices, updates), update_window_dims={{1}},
      inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1,
      to_apply=combine
}}
"""


def _run_serial_and_side_by_side(text, inputs):
    """The compiled kernel's results: the whole grid on one thread (atomics
    as plain read-modify-writes), then block ranges on three threads (real
    atomics)."""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert "_host_serial_blocks" in exe.host_mlir
    results = [np.asarray(exe.run(*inputs)[0])]
    kernel = cpu.from_lowered(exe.host_mlir, entry=exe.spec.name)
    for workers in (1, 3):
        out = inputs[0].copy()
        kernel.run([out, inputs[1], inputs[2]], workers=workers)
        results.append(out)
    return exe, results


@pytest.mark.parametrize("c, dtype", [("c64", np.complex64), ("c128", np.complex128)])
def test_colliding_complex_scatter_multiplies_are_whole_element_cas_loops(c, dtype):
    # A complex product is no float atomic: the whole element goes through
    # one CAS (64 bits for c64, 128 for c128). The factors are powers of i,
    # so every order of the colliding products gives the same exact value.
    text = _complex_scatter(c, multiply=True)
    rng = np.random.default_rng(7)
    operand = (rng.integers(-8, 8, (8, 64)) + 1j * rng.integers(-8, 8, (8, 64))).astype(dtype)
    indices = rng.integers(0, 8, (512, 1)).astype(np.int32)
    updates = (1j ** rng.integers(0, 4, (512, 64))).astype(dtype)
    (want,) = hlo.evaluate(hlo.parse_module(text), operand, indices, updates)
    exe, results = _run_serial_and_side_by_side(text, (operand, indices, updates))
    lowered = exe.mlir("lowering")
    bits = 64 if c == "c64" else 128
    assert re.search(rf"llvm\.cmpxchg .* : !llvm\.ptr, i{bits}\n", lowered)
    for got in results:
        np.testing.assert_array_equal(got, np.asarray(want))


@pytest.mark.parametrize("c, dtype", [("c64", np.complex64), ("c128", np.complex128)])
def test_colliding_complex_scatter_replacements_write_whole_elements(c, dtype):
    # Which of the colliding updates wins is unspecified; whichever does,
    # its real and imaginary parts land together (update k is k + k i).
    text = _complex_scatter(c, multiply=False)
    rng = np.random.default_rng(8)
    operand = np.full((8, 64), -1 - 1j, dtype)
    indices = rng.permutation(np.arange(512) % 8).reshape(512, 1).astype(np.int32)
    k = np.arange(512 * 64, dtype=np.float64).reshape(512, 64)
    updates = (k + 1j * k).astype(dtype)
    _, results = _run_serial_and_side_by_side(text, (operand, indices, updates))
    for got in results:
        assert np.array_equal(got.real, got.imag)
        for row in range(8):
            written = updates[indices[:, 0] == row]   # the updates aimed at it
            assert all(got[row, j] in written[:, j] for j in range(64))


def test_whole_grid_entry_of_a_kernel_without_atomics_is_the_block_loop():
    text = """HloModule m
fused {
  p = f32[4096] parameter(0)
  ROOT n = f32[4096] negate(p)
}
"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert "_host_serial_blocks" not in exe.host_mlir
    # The thread loop is parallel: access groups and the loop annotation.
    assert "parallelAccesses" in exe.host_mlir and "access_groups" in exe.host_mlir
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    np.testing.assert_array_equal(exe.run(x)[0], -x)


NEGATE_65536 = """HloModule m
fused {
  p = f32[65536] parameter(0)
  ROOT n = f32[65536] negate(p)
}
"""


def test_runtime_chooses_one_thread_or_ranges_by_timing_both():
    exe = xla_gpu.compile(NEGATE_65536, target="cpu", cache=False)
    kernel = exe._load()
    if kernel.workers <= 1:
        pytest.skip("one host core: nothing to split")
    # HostKernel.launch's own timing (run's C path times the same way in
    # the executor's SPLIT command: test_host_executor).
    kernel._c_run = False
    x = np.arange(65536, dtype=np.float32)
    for _ in range(2 * kernel.PROBE_RUNS):
        assert kernel.split is None
        np.testing.assert_array_equal(exe.run(x)[0], -x)
    # The probes decided one way or the other.
    assert kernel.split is not None
    for split in (True, False):   # both ways give the same result
        kernel.split = split
        np.testing.assert_array_equal(exe.run(x)[0], -x)


def _row_softmax_exp(rows: int, columns: int) -> str:
    return f"""HloModule m
fused {{
  x = f32[{rows},{columns}] parameter(0)
  b = f32[{rows}] parameter(1)
  l = f32[{rows}] log(b)
  bb = f32[{rows},{columns}] broadcast(l), dimensions={{0}}
  d = f32[{rows},{columns}] subtract(x, bb)
  ROOT e = f32[{rows},{columns}] exponential(d)
}}
"""


@pytest.mark.parametrize("rows,columns,host_threads", [
    (64, 100, 100),      # a block per row (128 threads would cut rows)
    (8, 3000, 1000),     # a long row: its largest divisor that is a block
    (16, 512, 128),      # rows a multiple of 128: the GPU's blocks already align
    (8, 100, 128),       # small loops keep the GPU's configuration
])
def test_host_loops_take_blocks_of_whole_rows(rows, columns, host_threads):
    from xla_gpu.analysis.device import H200
    text = _row_softmax_exp(rows, columns)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, columns)).astype(np.float32)
    b = rng.uniform(0.5, 2.0, rows).astype(np.float32)
    (want,) = hlo.evaluate(hlo.parse_module(text), x, b)
    host = xla_gpu.compile(text, target="cpu", cache=False)
    gpu = xla_gpu.compile(text, target="cpu", cache=False, device=H200)
    assert host.launch_dims["threads"] == host_threads
    assert host.launch_dims["blocks"] == -(-rows * columns // host_threads)
    assert gpu.launch_dims["threads"] == 128
    for exe in (host, gpu):
        assert compare(np.asarray(exe.run(x, b)[0]), np.asarray(want), "f32") is None


def _native_runner():
    from xla_gpu.runtime.host_executor import native_block_runner
    runner = native_block_runner()
    if runner is None:
        pytest.skip("libXlaGpuFfi.so cannot be loaded or built here")
    return runner


def test_native_block_ranges_give_the_whole_grids_result():
    import ctypes
    runner = _native_runner()
    text = """HloModule m
fused {
  p = f32[8192] parameter(0)
  q = f32[8192] parameter(1)
  ROOT n = f32[8192] multiply(p, q)
}
"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    kernel = exe._load()
    x = np.linspace(-3, 3, 8192, dtype=np.float32)
    y = np.arange(8192, dtype=np.float32)
    for parts in (1, 2, 3, 8, 1000):
        out = np.full(8192, np.nan, np.float32)
        pointers = [x.ctypes.data, y.ctypes.data, out.ctypes.data]
        assert len(pointers) == len(kernel.spec.kernel_args)
        packed = (ctypes.c_void_p * 3)(*pointers)
        assert runner(kernel._blocks_address, packed, 3, kernel.spec.blocks, parts) == 0
        np.testing.assert_array_equal(out, x * y, err_msg=f"{parts} parts")
    # More arguments than the runner has calls for: nothing runs, code 1;
    # a negative count: code 2.
    many = (ctypes.c_void_p * 65)()
    assert runner(kernel._blocks_address, many, 65, kernel.spec.blocks, 2) == 1
    assert runner(kernel._blocks_address, packed, 3, -1, 2) == 2


def test_native_block_ranges_from_several_python_threads_at_once():
    from concurrent.futures import ThreadPoolExecutor
    _native_runner()
    exe = xla_gpu.compile(NEGATE_65536, target="cpu", cache=False)
    kernel = exe._load()
    if kernel.workers <= 1:
        pytest.skip("one host core: nothing to split")
    kernel.split = True            # every launch in ranges
    kernel._runs_since_probe = -10**9
    errors: list[str] = []

    def worker(k):
        x = np.arange(65536, dtype=np.float32) * (k + 1)
        for _ in range(100):
            out = np.empty_like(x)
            kernel.launch([x.ctypes.data, out.ctypes.data])
            if not np.array_equal(out, -x):
                errors.append(f"thread {k}")
                return
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(worker, range(3)))
    assert errors == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_forked_child_splits_grids_on_a_pool_of_its_own():
    import ctypes
    import time
    import warnings
    runner = _native_runner()
    exe = xla_gpu.compile(NEGATE_65536, target="cpu", cache=False)
    kernel = exe._load()
    x = np.arange(65536, dtype=np.float32)
    out = np.empty_like(x)
    packed = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    # The parent's pool exists (and its workers run) before the fork.
    assert runner(kernel._blocks_address, packed, 2, kernel.spec.blocks, 2) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # fork with threads
        pid = os.fork()
    if pid == 0:   # the child: none of the parent's worker threads exist here
        try:
            out[...] = 0
            code = runner(kernel._blocks_address, packed, 2, kernel.spec.blocks, 2)
            os._exit(0 if code == 0 and np.array_equal(out, -x) else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child never finished its split kernel")
        time.sleep(0.02)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    np.testing.assert_array_equal(out, -x)
