"""The reduction and scatter emitters' ops (shuffle_reduce, predicated_insert,
predicated_extract, atomic_rmw): Python builders, and hand-written kernels
run on the cpu target against numpy. The warp shuffle must give the GPU
butterfly's bits exactly; the atomics must be atomic when blocks run on
several host threads (workers=2)."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir as mlir_ir
from mlir.dialects import arith, func

from xla_gpu.backends import cpu
from xla_gpu.dialects import xla_gpu

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = ml_dtypes.bfloat16


def butterfly(lanes: np.ndarray, combine, max_distance: int = 16) -> np.ndarray:
    """The GPU's xor butterfly over the last axis (groups of lanes): for d
    = max_distance, ..., 1 every lane i computes combine(mine, lane i^d's)."""
    cur = lanes.copy()
    for d in (16, 8, 4, 2, 1):
        if d > max_distance:
            continue
        other = cur[..., np.arange(cur.shape[-1]) ^ d]
        cur = combine(cur, other)
    return cur


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and \
        a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes()


# ---------------------------------------------------------------------------
# Builders


def test_builders(ctx):
    with mlir_ir.Location.unknown():
        _build_ops()


def _build_ops():
    f32, i32 = mlir_ir.F32Type.get(), mlir_ir.IntegerType.get_signless(32)
    index, i1 = mlir_ir.IndexType.get(), mlir_ir.IntegerType.get_signless(1)
    tile = mlir_ir.RankedTensorType.get([4, 8], f32)
    module = mlir_ir.Module.create()
    with mlir_ir.InsertionPoint(module.body):
        argmax = func.FuncOp("argmax", ([f32, i32, f32, i32], [f32, i32]),
                             visibility="private")
        with mlir_ir.InsertionPoint(argmax.add_entry_block()):
            v, i, w, j = argmax.arguments
            gt = arith.cmpf(arith.CmpFPredicate.OGT, w, v)
            func.ReturnOp([arith.select(gt, w, v), arith.select(gt, j, i)])
        main = func.FuncOp("main", ([tile, f32, i32, index, i1], [tile, f32, f32]))
        with mlir_ir.InsertionPoint(main.add_entry_block()):
            t, x, k, idx, cond = main.arguments
            # The generated class: result types first.
            shuffled = xla_gpu.ShuffleReduceOp(
                [f32, i32], mlir_ir.FlatSymbolRefAttr.get("argmax"), [x, k], 16)
            # The helper: from the combiner op.
            again = xla_gpu.build_shuffle_reduce(argmax, list(shuffled.results), 4)
            inserted = xla_gpu.PredicatedInsertOp(again[0], t, [idx, idx], cond).result
            extracted = xla_gpu.PredicatedExtractOp(inserted, [idx, idx], cond, x).result
            atomic = xla_gpu.build_atomic_rmw(inserted, [idx, idx])
            body = atomic.regions[0].blocks[0]
            with mlir_ir.InsertionPoint(body):
                xla_gpu.YieldOp([arith.addf(body.arguments[0], extracted)])
            func.ReturnOp([atomic.result, extracted, again[0]])
    assert module.operation.verify()
    text = str(module)
    assert str(mlir_ir.Module.parse(text)) == text
    for line in [
            "xla_gpu.shuffle_reduce(%arg1, %arg2) to 16 combiner=@argmax : f32, i32",
            "to 4 combiner=@argmax : f32, i32",
            "xla_gpu.predicated_insert %1#0 into %arg0[%arg3, %arg3] if %arg4 : tensor<4x8xf32>",
            "xla_gpu.predicated_extract %2[%arg3, %arg3] if %arg4 else %arg1 : tensor<4x8xf32>",
            "xla_gpu.atomic_rmw %2[%arg3, %arg3] : tensor<4x8xf32> {",
            "^bb0(%arg5: f32):"]:
        assert line in text, (line, text)


def test_shuffle_reduce_verifies_combiner(ctx):
    text = """
    func.func private @add(%a: f32, %b: f32) -> f32 {
      return %a : f32
    }
    func.func @f(%a: f32, %i: i32) -> f32 {
      %r:2 = xla_gpu.shuffle_reduce(%a, %i) to 16 combiner=@add : f32, i32
      return %r#0 : f32
    }"""
    with pytest.raises(mlir_ir.MLIRError, match="combiner @add has type"):
        mlir_ir.Module.parse(text)


# ---------------------------------------------------------------------------
# shuffle_reduce on the cpu target

ROW_SUM = """
func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
// Not commutative: lane i computes mix(mine, theirs), every lane a value
// of its own.
func.func private @mix(%a: f32, %b: f32) -> f32 {
  %c = arith.constant 0.75 : f32
  %m = arith.mulf %a, %c : f32
  %s = arith.addf %m, %b : f32
  return %s : f32
}
func.func @main(%in: tensor<16x32xf32>, %sums: tensor<16xf32>,
                %mixed: tensor<16x32xf32>) -> (tensor<16xf32>, tensor<16x32xf32>) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %bid = gpu.block_id x {xla.range = [0 : index, 3 : index]}
  %warp = arith.divui %tid, %c32 : index
  %lane = arith.remui %tid, %c32 : index
  %base = arith.muli %bid, %c4 : index
  %row = arith.addi %base, %warp : index
  %v = tensor.extract %in[%row, %lane] : tensor<16x32xf32>
  %sum = xla_gpu.shuffle_reduce(%v) to 16 combiner=@add : f32
  %mix = xla_gpu.shuffle_reduce(%v) to 16 combiner=@mix : f32
  %first = arith.cmpi eq, %lane, %c0 : index
  %s = xla_gpu.predicated_insert %sum into %sums[%row] if %first : tensor<16xf32>
  %m = tensor.insert %mix into %mixed[%row, %lane] : tensor<16x32xf32>
  return %s, %m : tensor<16xf32>, tensor<16x32xf32>
}
"""


@pytest.fixture(scope="module")
def row_sum_kernel():
    return cpu.compile_module(ROW_SUM)


def _row_sum_input(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Magnitudes from 1e-4 to 1e4: the order of the additions shows in the
    # low bits.
    mags = 10.0 ** rng.uniform(-4, 4, (16, 32))
    return (rng.choice([-1.0, 1.0], (16, 32)) * mags).astype(np.float32)


@pytest.mark.parametrize("workers", [1, 2])
def test_row_sum_is_the_butterfly(row_sum_kernel, workers):
    assert (row_sum_kernel.threads, row_sum_kernel.blocks) == (128, 4)
    x = _row_sum_input(1)
    sums = np.zeros(16, np.float32)
    mixed = np.zeros((16, 32), np.float32)
    row_sum_kernel.run([x, sums, mixed], workers=workers)

    expected = butterfly(x, lambda a, b: a + b)
    # Every lane of the GPU's butterfly holds the same sum; lane 0 wrote it.
    assert (expected == expected[:, :1]).all()
    assert same_bits(sums, expected[:, 0].copy())
    # A sequential sum rounds differently: the test sees the order.
    sequential = np.array([np.float32(sum(np.float64(v) for v in r)) for r in x], np.float32)
    assert not same_bits(sums, sequential)

    def mix(a, b):
        return (a * np.float32(0.75)).astype(np.float32) + b
    assert same_bits(mixed, butterfly(x, mix))
    assert not same_bits(mixed, butterfly(x, lambda a, b: mix(b, a)))


ARGMAX = """
// Both values of the other lane when its value is larger, or equal with a
// smaller index.
func.func private @argmax(%v: f32, %i: i32, %w: f32, %j: i32) -> (f32, i32) {
  %gt = arith.cmpf ogt, %w, %v : f32
  %eq = arith.cmpf oeq, %w, %v : f32
  %lt = arith.cmpi slt, %j, %i : i32
  %tie = arith.andi %eq, %lt : i1
  %take = arith.ori %gt, %tie : i1
  %m = arith.select %take, %w, %v : f32
  %k = arith.select %take, %j, %i : i32
  return %m, %k : f32, i32
}
// 16 lanes per row: the butterfly stops at distance 8.
func.func @main(%in: tensor<8x16xf32>, %vals: tensor<8xf32>, %args: tensor<8xi32>)
    -> (tensor<8xf32>, tensor<8xi32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %row = arith.divui %tid, %c16 : index
  %col = arith.remui %tid, %c16 : index
  %v = tensor.extract %in[%row, %col] : tensor<8x16xf32>
  %i = arith.index_cast %col : index to i32
  %r:2 = xla_gpu.shuffle_reduce(%v, %i) to 8 combiner=@argmax : f32, i32
  %first = arith.cmpi eq, %col, %c0 : index
  %a = xla_gpu.predicated_insert %r#0 into %vals[%row] if %first : tensor<8xf32>
  %b = xla_gpu.predicated_insert %r#1 into %args[%row] if %first : tensor<8xi32>
  return %a, %b : tensor<8xf32>, tensor<8xi32>
}
"""


def test_argmax_two_values():
    kernel = cpu.compile_module(ARGMAX)
    rng = np.random.default_rng(2)
    x = rng.integers(0, 6, (8, 16)).astype(np.float32)   # many ties
    x[3, :] = 5.0
    vals = np.zeros(8, np.float32)
    args = np.full(8, -1, np.int32)
    kernel.run([x, vals, args])
    np.testing.assert_array_equal(vals, x.max(axis=1))
    np.testing.assert_array_equal(args, x.argmax(axis=1))   # the first maximum


def test_shuffle_needs_whole_warps():
    text = ROW_SUM.replace("[0 : index, 127 : index]", "[0 : index, 111 : index]")
    with pytest.raises(mlir_ir.MLIRError, match="needs whole warps"):
        cpu.compile_module(text)


# ---------------------------------------------------------------------------
# atomic_rmw on the cpu target

HISTOGRAM = """
func.func @main(%bins: tensor<4096xi32>, %w: tensor<4096xf32>,
                %hist: tensor<16xf32>, %count: tensor<16xi32>, %top: tensor<16xf32>)
    -> (tensor<16xf32>, tensor<16xi32>, tensor<16xf32>) {
  %c128 = arith.constant 128 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %bid = gpu.block_id x {xla.range = [0 : index, 31 : index]}
  %base = arith.muli %bid, %c128 : index
  %i = arith.addi %base, %tid : index
  %b32 = tensor.extract %bins[%i] : tensor<4096xi32>
  %b = arith.index_cast %b32 : i32 to index
  %v = tensor.extract %w[%i] : tensor<4096xf32>
  %h = xla_gpu.atomic_rmw %hist[%b] : tensor<16xf32> {
  ^bb0(%cur: f32):
    %n = arith.addf %cur, %v : f32
    xla_gpu.yield %n : f32
  }
  %k = xla_gpu.atomic_rmw %count[%b] : tensor<16xi32> {
  ^bb0(%cur: i32):
    %one = arith.constant 1 : i32
    %n = arith.addi %cur, %one : i32
    xla_gpu.yield %n : i32
  }
  %t = xla_gpu.atomic_rmw %top[%b] : tensor<16xf32> {
  ^bb0(%cur: f32):
    %n = arith.maximumf %cur, %v : f32
    xla_gpu.yield %n : f32
  }
  return %h, %k, %t : tensor<16xf32>, tensor<16xi32>, tensor<16xf32>
}
"""


def test_atomic_histogram_two_workers():
    kernel = cpu.compile_module(HISTOGRAM)
    assert "llvm.atomicrmw fadd" in kernel.llvm_ir
    assert "llvm.atomicrmw add" in kernel.llvm_ir
    assert "llvm.atomicrmw fmaximum" in kernel.llvm_ir
    rng = np.random.default_rng(3)
    bins = rng.integers(0, 16, 4096).astype(np.int32)
    w = rng.integers(-8, 9, 4096).astype(np.float32)   # sums exact in any order
    for _ in range(3):
        hist = np.zeros(16, np.float32)
        count = np.zeros(16, np.int32)
        top = np.full(16, -np.inf, np.float32)
        kernel.run([bins, w, hist, count, top], workers=2)
        np.testing.assert_array_equal(count, np.bincount(bins, minlength=16))
        np.testing.assert_array_equal(hist, np.bincount(bins, weights=w, minlength=16))
        np.testing.assert_array_equal(top, [w[bins == b].max() for b in range(16)])


PRODUCT = """
func.func @main(%bins: tensor<1024xi32>, %f: tensor<1024xf32>, %prod: tensor<64xf32>)
    -> tensor<64xf32> {
  %c128 = arith.constant 128 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %bid = gpu.block_id x {xla.range = [0 : index, 7 : index]}
  %base = arith.muli %bid, %c128 : index
  %i = arith.addi %base, %tid : index
  %b32 = tensor.extract %bins[%i] : tensor<1024xi32>
  %b = arith.index_cast %b32 : i32 to index
  %v = tensor.extract %f[%i] : tensor<1024xf32>
  %p = xla_gpu.atomic_rmw %prod[%b] : tensor<64xf32> {
  ^bb0(%cur: f32):
    %n = arith.mulf %cur, %v : f32
    xla_gpu.yield %n : f32
  }
  return %p : tensor<64xf32>
}
"""


def test_cas_loop_product_two_workers():
    kernel = cpu.compile_module(PRODUCT)
    assert "llvm.cmpxchg" in kernel.llvm_ir and "llvm.atomicrmw" not in kernel.llvm_ir
    rng = np.random.default_rng(4)
    bins = rng.integers(0, 64, 1024).astype(np.int32)
    # Powers of two (and signs): the product is exact in any order.
    f = (rng.choice([-1.0, 1.0], 1024) * 2.0 ** rng.integers(-2, 3, 1024)).astype(np.float32)
    expected = np.ones(64, np.float64)
    np.multiply.at(expected, bins, f.astype(np.float64))
    for _ in range(3):
        prod = np.ones(64, np.float32)
        kernel.run([bins, f, prod], workers=2)
        np.testing.assert_array_equal(prod, expected.astype(np.float32))


NARROW = """
func.func @main(%bins: tensor<2048xi32>, %bf: tensor<16xbf16>, %s16: tensor<16xi16>,
                %m8: tensor<16xi8>, %flags: tensor<16xi8>)
    -> (tensor<16xbf16>, tensor<16xi16>, tensor<16xi8>, tensor<16xi8>) {
  %c128 = arith.constant 128 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %bid = gpu.block_id x {xla.range = [0 : index, 15 : index]}
  %base = arith.muli %bid, %c128 : index
  %i = arith.addi %base, %tid : index
  %b32 = tensor.extract %bins[%i] : tensor<2048xi32>
  %b = arith.index_cast %b32 : i32 to index
  %i32 = arith.index_cast %i : index to i32
  %a = xla_gpu.atomic_rmw %bf[%b] : tensor<16xbf16> {
  ^bb0(%cur: bf16):
    %one = arith.constant 1.0 : bf16
    %n = arith.addf %cur, %one : bf16
    xla_gpu.yield %n : bf16
  }
  %c = xla_gpu.atomic_rmw %s16[%b] : tensor<16xi16> {
  ^bb0(%cur: i16):
    %x = arith.trunci %i32 : i32 to i16
    %n = arith.addi %cur, %x : i16
    xla_gpu.yield %n : i16
  }
  %m = xla_gpu.atomic_rmw %m8[%b] : tensor<16xi8> {
  ^bb0(%cur: i8):
    %x = arith.trunci %i32 : i32 to i8
    %n = arith.maxsi %cur, %x : i8
    xla_gpu.yield %n : i8
  }
  %f = xla_gpu.atomic_rmw %flags[%b] : tensor<16xi8> {
  ^bb0(%cur: i8):
    %c7 = arith.constant 7 : i32
    %c1 = arith.constant 1 : i8
    %k32 = arith.andi %i32, %c7 : i32
    %k = arith.trunci %k32 : i32 to i8
    %bit = arith.shli %c1, %k : i8
    %n = arith.ori %cur, %bit : i8
    xla_gpu.yield %n : i8
  }
  return %a, %c, %m, %f : tensor<16xbf16>, tensor<16xi16>, tensor<16xi8>, tensor<16xi8>
}
"""


def test_narrow_atomics_two_workers():
    kernel = cpu.compile_module(NARROW)
    assert "llvm.cmpxchg" in kernel.llvm_ir          # bf16, i16, i8 max
    assert "llvm.atomicrmw _or" in kernel.llvm_ir    # i8 or: on the word
    rng = np.random.default_rng(5)
    bins = rng.integers(0, 16, 2048).astype(np.int32)   # neighbours share words
    i = np.arange(2048)
    for _ in range(3):
        bf = np.zeros(16, BF16)
        s16 = np.zeros(16, np.int16)
        m8 = np.full(16, -128, np.int8)
        flags = np.zeros(16, np.int8)
        kernel.run([bins, bf, s16, m8, flags], workers=2)
        counts = np.bincount(bins, minlength=16)
        assert counts.max() <= 256                      # exact in bf16
        np.testing.assert_array_equal(bf.astype(np.float32), counts.astype(np.float32))
        wrapped = np.bincount(bins, weights=i, minlength=16).astype(np.int64)
        np.testing.assert_array_equal(s16, wrapped.astype(np.int16))
        as_i8 = i.astype(np.int8)
        np.testing.assert_array_equal(m8, [as_i8[bins == b].max() for b in range(16)])
        expected = np.zeros(16, np.uint8)
        np.bitwise_or.at(expected, bins, (1 << (i & 7)).astype(np.uint8))
        np.testing.assert_array_equal(flags.view(np.uint8), expected)
