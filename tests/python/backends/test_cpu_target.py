"""The cpu target: emitted kernels run on the host by grid emulation
(xla-emulate-grid + xla-lower-to-host + ExecutionEngine), against numpy."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from mlir import ir as mlir_ir

from xla_gpu import pipeline
from xla_gpu.backends import cpu

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16

ROOT = Path(__file__).resolve().parents[3]
GELU = (ROOT / "examples" / "gelu.mlir").read_text()
TRANSPOSE = (ROOT / "tests" / "lit" / "walkthrough" / "transpose.mlir").read_text()


def bf16_round(x: np.ndarray) -> np.ndarray:
    """f32 -> nearest bf16 (ties to even) -> f32."""
    return np.asarray(x, np.float32).astype(BF16).astype(np.float32)


def gelu_reference(x: np.ndarray) -> np.ndarray:
    """@gelu of examples/gelu.mlir, op by op, rounding to bf16 after each op
    as the kernel does (tanh in f32, then rounded)."""
    c = lambda v: np.float32(BF16(v))  # noqa: E731  (the IR's bf16 constants)
    x = x.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        return _gelu_ops(x, c)


def _gelu_ops(x, c):
    t = bf16_round(x * x)
    t = bf16_round(t * x)
    t = bf16_round(t * c(4.467770e-02))
    t = bf16_round(x + t)
    t = bf16_round(t * c(7.968750e-01))
    t = bf16_round(np.tanh(t))
    t = bf16_round(t + c(1.0))
    t = bf16_round(t * c(0.5))
    return bf16_round(x * t).astype(BF16)


def ulp_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in bf16 ulps (the bit patterns on one ordered integer line);
    two NaNs are equal whatever their payloads."""
    def ordered(v):
        bits = v.view(np.uint16).astype(np.int32)
        return np.where(bits & 0x8000, 0x8000 - bits, bits)
    diff = np.abs(ordered(a) - ordered(b))
    both_nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return np.where(both_nan, 0, diff)


def gelu_module(shape: tuple[int, int, int]) -> tuple[str, int]:
    """examples/gelu.mlir for another [d0, d1, d2] (d2 a multiple of 512):
    128 threads x 4 elements per block, as the loop emitter tiles it."""
    d0, d1, d2 = shape
    per_row = d2 // 512
    blocks = d0 * d1 * per_row
    text = GELU.replace("6x512x4096", f"{d0}x{d1}x{d2}")
    old_map = ('"(th_x, bl_x)[vector_index] -> ("\n'
               ' "bl_x floordiv 4096, (bl_x floordiv 8) mod 512, '
               '(bl_x mod 8) * 512 + th_x * 4 + vector_index),"\n'
               ' "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"')
    assert old_map in text
    text = text.replace(old_map, (
        f'"(th_x, bl_x)[vector_index] -> (bl_x floordiv {d1 * per_row}, '
        f'(bl_x floordiv {per_row}) mod {d1}, (bl_x mod {per_row}) * 512 + th_x * 4 + '
        f'vector_index), domain: th_x in [0, 127], bl_x in [0, {blocks - 1}], '
        f'vector_index in [0, 3]"'))
    text = text.replace("[0 : index, 24575 : index]", f"[0 : index, {blocks - 1} : index]")
    return text, blocks


def test_pipeline_targets():
    cuda, cpu_passes = pipeline.passes_for("cuda"), pipeline.passes_for("cpu")
    assert cuda == pipeline.PASSES
    shared = cuda.index("xla-expand-float-ops") + 1
    # The same passes; only cuda's lower-tensors has native 16-bit float
    # atomics and vector f32 reductions.
    assert [pipeline.pass_name(p) for p in cpu_passes[:shared]] == \
        [pipeline.pass_name(p) for p in cuda[:shared]]
    assert "xla-lower-tensors{native-16bit-float-add=true vector-float-add=true}" in cuda
    assert "xla-lower-tensors" in cpu_passes
    assert "xla-lower-to-llvm" not in cpu_passes and "xla-lower-to-host" in cpu_passes
    text = pipeline.pipeline_string(target="cpu", threads=128, blocks=960)
    assert "xla-emulate-grid{threads=128 blocks=960}" in text
    assert pipeline.pipeline_string() == pipeline.pipeline_string(pipeline.PASSES)
    with pytest.raises(ValueError, match="unknown target"):
        pipeline.passes_for("rocm")
    with pytest.raises(ValueError, match="threads must be a positive int"):
        pipeline.passes_for("cpu", threads=0)


def test_cpu_pipeline_output(ctx):
    module = mlir_ir.Module.parse(GELU)
    pipeline.run(module, target="cpu")
    text = str(module)
    assert "llvm.func @main_host(%arg0: !llvm.ptr)" in text   # packed arguments
    assert "llvm.func @_mlir_ciface_main_host(" in text
    assert "llvm.func @main_host_blocks(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, %arg3: i64)" in text
    for absent in ("nvvm", "gpu.", "__nv_", "tensor<", "scf.", "func.func"):
        assert absent not in text, absent


def test_gelu_small_shape():
    text, blocks = gelu_module((2, 16, 1024))
    kernel = cpu.compile_module(text)
    assert (kernel.threads, kernel.blocks, kernel.num_args) == (128, blocks, 2)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 16, 1024), dtype=np.float32) * 3).astype(BF16)
    x.flat[:6] = [0.0, -0.0, np.inf, -np.inf, 1e-30, -5.0]
    out = np.zeros_like(x)
    kernel.run([x, out])
    diff = ulp_diff(out, gelu_reference(x))
    print(f"GELU 2x16x1024 bf16: max ulp diff {diff.max()}")
    assert diff.max() <= 1
    # The blocks split among threads give the same bits.
    again = np.zeros_like(x)
    kernel.run([x, again], workers=3)
    assert np.array_equal(again.view(np.uint16), out.view(np.uint16))


def test_gelu_example_full_size():
    start = time.perf_counter()
    kernel = cpu.compile_module(GELU, threads=128, blocks=24576)
    compiled = time.perf_counter()
    x = np.random.default_rng(0).standard_normal((6, 512, 4096), dtype=np.float32).astype(BF16)
    out = np.zeros_like(x)
    before = time.perf_counter()
    kernel.run([x, out])
    ran = time.perf_counter()
    diff = ulp_diff(out, gelu_reference(x))
    print(f"GELU 6x512x4096 bf16 on the cpu target: compile {compiled - start:.3f} s, "
          f"run {ran - before:.3f} s, max ulp diff {diff.max()}")
    assert diff.max() <= 1
    assert ran - before < 10


def test_transpose_shared_memory_and_barrier():
    kernel = cpu.compile_module(TRANSPOSE, entry="transpose")
    assert (kernel.threads, kernel.blocks) == (128, 960)
    x = np.random.default_rng(2).standard_normal((20, 160, 170), dtype=np.float32)
    out = np.full((170, 160, 20), np.nan, np.float32)
    kernel.run([x, out])
    np.testing.assert_allclose(out, np.abs(np.exp(x)).transpose(2, 1, 0), rtol=1e-6)


# Values computed before a barrier and used after it: a loaded value, a
# comparison of it (i1), an index loaded from memory, an scf.for result and a
# vector, over two barriers; the neighbour's value goes through shared memory.
KEPT_ACROSS_BARRIERS = """
func.func @main(%in: tensor<256xf32>, %idx: tensor<256xi32>, %out: tensor<256xf32>)
    -> tensor<256xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : f32
  %two = arith.constant 2.0 : f32
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %bid = gpu.block_id x {xla.range = [0 : index, 3 : index]}
  %base = arith.muli %bid, %c64 : index
  %i = arith.addi %base, %tid : index
  %v = tensor.extract %in[%i] : tensor<256xf32>
  %positive = arith.cmpf ogt, %v, %zero : f32
  %k32 = tensor.extract %idx[%i] : tensor<256xi32>
  %k = arith.index_cast %k32 : i32 to index
  %acc = scf.for %j = %c0 to %c4 step %c1 iter_args(%a = %zero) -> (f32) {
    %jf = arith.index_cast %j : index to i32
    %f = arith.sitofp %jf : i32 to f32
    %p = arith.mulf %v, %f : f32
    %s = arith.addf %a, %p : f32
    scf.yield %s : f32
  }
  %vec = vector.broadcast %v : f32 to vector<2xf32>
  %shm = xla_gpu.allocate_shared : tensor<64xf32>
  %w = tensor.insert %v into %shm[%tid] : tensor<64xf32>
  %s1 = xla_gpu.sync_threads %w : tensor<64xf32>
  %t1 = arith.addi %tid, %c1 : index
  %n1 = arith.remui %t1, %c64 : index
  %u = tensor.extract %s1[%n1] : tensor<64xf32>
  %u2 = arith.mulf %u, %two : f32
  %shm2 = xla_gpu.allocate_shared : tensor<64xf32>
  %w2 = tensor.insert %u2 into %shm2[%tid] : tensor<64xf32>
  %s2 = xla_gpu.sync_threads %w2 : tensor<64xf32>
  %t3 = arith.addi %tid, %c3 : index
  %n3 = arith.remui %t3, %c64 : index
  %x = tensor.extract %s2[%n3] : tensor<64xf32>
  %sel = arith.select %positive, %x, %acc : f32
  %g = tensor.extract %in[%k] : tensor<256xf32>
  %e = vector.extract %vec[1] : f32 from vector<2xf32>
  %r0 = arith.addf %sel, %g : f32
  %r = arith.addf %r0, %e : f32
  %o = tensor.insert %r into %out[%i] : tensor<256xf32>
  return %o : tensor<256xf32>
}
"""


def test_values_kept_across_barriers(ctx):
    module = mlir_ir.Module.parse(KEPT_ACROSS_BARRIERS)
    passes = pipeline.passes_for("cpu")
    pipeline.run(module, passes=passes[:passes.index("xla-emulate-grid") + 1])
    emulated = str(module)
    # Three phases in the block loop; the loaded values have per-thread slots.
    assert emulated.count("scf.for") >= 4
    assert "llvm.alloca" in emulated and "!llvm.array<64 x" in emulated

    kernel = cpu.compile_module(KEPT_ACROSS_BARRIERS)
    assert (kernel.threads, kernel.blocks, kernel.num_args) == (64, 4, 3)
    rng = np.random.default_rng(3)
    values = rng.standard_normal(256, dtype=np.float32)
    idx = rng.integers(0, 256, 256, dtype=np.int32)
    out = np.zeros(256, np.float32)
    kernel.run([values, idx, out])

    v = values.reshape(4, 64)
    u2 = np.roll(v, -1, axis=1) * 2             # neighbour tid+1, doubled
    x = np.roll(u2, -3, axis=1).reshape(256)    # then the one at tid+3
    acc = values * 0 + values * 1 + values * 2 + values * 3
    expected = np.where(values > 0, x, acc) + values[idx] + values
    np.testing.assert_allclose(out, expected, rtol=1e-6)


# A loop emitter kernel whose last block is partial: 1000 elements, 8 blocks
# of 128 threads; the thread-range constraint masks the last 24 threads.
PARTIAL_LAST_BLOCK = """
#map = #xla_gpu.indexing_map<"(th_x, bl_x) -> (bl_x * 128 + th_x), domain: th_x in [0, 127], bl_x in [0, 7], bl_x * 128 + th_x in [0, 999]">
func.func @main(%in: tensor<1000xf32>, %out: tensor<1000xf32>) -> tensor<1000xf32> {
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %bid = gpu.block_id x {xla.range = [0 : index, 7 : index]}
  %r = xla_gpu.loop (%tid, %bid) -> (%i) in #map iter_args(%it = %out) -> (tensor<1000xf32>) {
    %v = tensor.extract %in[%i] : tensor<1000xf32>
    %e = math.exp %v : f32
    %n = tensor.insert %e into %it[%i] : tensor<1000xf32>
    xla_gpu.yield %n : tensor<1000xf32>
  }
  return %r : tensor<1000xf32>
}
"""


def test_partial_last_block():
    kernel = cpu.compile_module(PARTIAL_LAST_BLOCK)
    assert (kernel.threads, kernel.blocks) == (128, 8)
    x = np.linspace(-3, 3, 1000, dtype=np.float32)
    out = np.full(1000, np.nan, np.float32)
    kernel.run([x, out])
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_run_checks_buffers():
    kernel = cpu.compile_module(PARTIAL_LAST_BLOCK)
    x = np.zeros(1000, np.float32)
    with pytest.raises(ValueError, match="takes 2 buffers"):
        kernel.run([x])
    with pytest.raises(ValueError, match="expects 4000"):
        kernel.run([x, np.zeros(10, np.float32)])
    with pytest.raises(ValueError, match="not C-contiguous"):
        kernel.run([x, np.zeros(2000, np.float32)[::2]])


def test_launch_dimensions_checked():
    with pytest.raises(mlir_ir.MLIRError, match="threads=256 exceeds the xla.range"):
        cpu.compile_module(PARTIAL_LAST_BLOCK, threads=256)
    # Fewer blocks than the range allows is a smaller launch.
    kernel = cpu.compile_module(PARTIAL_LAST_BLOCK, blocks=2)
    x = np.ones(1000, np.float32)
    out = np.zeros(1000, np.float32)
    kernel.run([x, out])
    assert (out[:256] == np.float32(np.e)).all() and (out[256:] == 0).all()


def test_shared_object_runs_through_ctypes(ctx, tmp_path):
    import ctypes
    module = mlir_ir.Module.parse(TRANSPOSE)
    pipeline.run(module, target="cpu")
    try:
        library = cpu.shared_object(module, "transpose")
    except cpu.HostCompileError as e:
        pytest.skip(str(e))
    path = tmp_path / "kernel.so"
    path.write_bytes(library)
    entry = ctypes.CDLL(str(path)).transpose_host
    entry.argtypes, entry.restype = [ctypes.POINTER(ctypes.c_void_p)], None
    x = np.random.default_rng(4).standard_normal((20, 160, 170), dtype=np.float32)
    out = np.zeros((170, 160, 20), np.float32)
    entry((ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data))
    np.testing.assert_allclose(out, np.abs(np.exp(x)).transpose(2, 1, 0), rtol=1e-6)


def test_cpu_target_kernels_are_configured_for_the_host_emulation():
    # A loop fusion as large as the H200 runs at once is unrolled on cuda;
    # on the cpu target it is not (one element per emulated thread keeps
    # the thread loop's accesses contiguous), unless device=H200 asks for
    # the cuda kernel's exact configuration. Both give the same values.
    import xla_gpu
    from xla_gpu.analysis.device import H200
    text = """
HloModule big
fused {
  p = f32[1024,512] parameter(0)
  t = f32[1024,512] tanh(p)
  ROOT m = f32[1024,512] multiply(t, p)
}
ENTRY e {
  p = f32[1024,512] parameter(0)
  ROOT f = f32[1024,512] fusion(p), kind=kLoop, calls=fused
}"""
    x = np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float32)
    host = xla_gpu.compile(text, target="cpu", fusion="fused")
    exact = xla_gpu.compile(text, target="cpu", fusion="fused", device=H200)
    cuda = xla_gpu.compile(text, target="cuda", fusion="fused")
    assert host.spec.threads * host.spec.blocks == 1024 * 512
    assert exact.launch_dims["blocks"] == cuda.launch_dims["blocks"] == host.spec.blocks // 4
    (a,), (b,) = host.run(x), exact.run(x)
    np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(a, np.tanh(x) * x, rtol=1e-5, atol=1e-6)
