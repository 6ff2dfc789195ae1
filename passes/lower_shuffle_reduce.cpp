//===- lower_shuffle_reduce.cpp - shuffle_reduce -> gpu.shuffle xor -------===//
//
// The cuda target's warp reduction. For each distance d = max_distance,
// ..., 2, 1 every value goes through `gpu.shuffle xor` by d (a 32-bit
// shuffle per piece) and the lane calls the combiner on its own values and
// the other lane's:
//
//   %x = xla_gpu.shuffle_reduce(%v) to 2 combiner=@add : f64
//   =>
//   %lo, %hi = the two i32 halves of %v          (f64 -> i64 -> 2 x i32)
//   %lo2 = gpu.shuffle xor %lo, 2, 32 ; %hi2 = gpu.shuffle xor %hi, 2, 32
//   %v2 = call @add(%v, <%lo2, %hi2 as f64>)
//   ... once more with distance 1
//
// i32 and f32 are shuffled as they are; values narrower than 32 bits are
// zero-extended to i32 and truncated back (bf16/f16 through their bits),
// index goes through i64.
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERSHUFFLEREDUCEPASS
#include "Passes.h.inc"

namespace {

constexpr int32_t kWarpSize = 32;

// `value` as it is in lane `lane xor distance`.
Value shuffleXor(OpBuilder &b, Location loc, Value value, int32_t distance) {
  Type type = value.getType();
  Type i32 = b.getI32Type(), i64 = b.getI64Type();
  auto shuffle32 = [&](Value v) -> Value {
    return gpu::ShuffleOp::create(b, loc, v, distance, kWarpSize,
                                  gpu::ShuffleMode::XOR)
        .getShuffleResult();
  };
  if (type.isIndex()) {
    Value asInt = arith::IndexCastOp::create(b, loc, i64, value);
    return arith::IndexCastOp::create(b, loc, type,
                                      shuffleXor(b, loc, asInt, distance));
  }
  unsigned width = type.getIntOrFloatBitWidth();
  if (width == 32) return shuffle32(value);  // i32 and f32 as they are
  Type bits = b.getIntegerType(width);
  Value asBits = isa<FloatType>(type)
                     ? arith::BitcastOp::create(b, loc, bits, value).getResult()
                     : value;
  Value shuffled;
  if (width < 32) {
    Value wide = arith::ExtUIOp::create(b, loc, i32, asBits);
    shuffled = arith::TruncIOp::create(b, loc, bits, shuffle32(wide));
  } else {
    // Up to 64 bits: two 32-bit halves.
    Value wide = width == 64 ? asBits
                             : arith::ExtUIOp::create(b, loc, i64, asBits);
    Value c32 = arith::ConstantIntOp::create(b, loc, i64, 32);
    Value lo = arith::TruncIOp::create(b, loc, i32, wide);
    Value hi = arith::TruncIOp::create(
        b, loc, i32, arith::ShRUIOp::create(b, loc, wide, c32));
    Value lo2 = arith::ExtUIOp::create(b, loc, i64, shuffle32(lo));
    Value hi2 = arith::ExtUIOp::create(b, loc, i64, shuffle32(hi));
    shuffled = arith::OrIOp::create(
        b, loc, lo2, arith::ShLIOp::create(b, loc, hi2, c32));
    if (width != 64) shuffled = arith::TruncIOp::create(b, loc, bits, shuffled);
  }
  if (isa<FloatType>(type))
    shuffled = arith::BitcastOp::create(b, loc, type, shuffled);
  return shuffled;
}

struct LowerShuffleReducePass
    : impl::LowerShuffleReducePassBase<LowerShuffleReducePass> {
  void runOnOperation() override {
    SmallVector<ShuffleReduceOp> ops;
    getOperation().walk([&](ShuffleReduceOp op) { ops.push_back(op); });
    for (ShuffleReduceOp op : ops) {
      OpBuilder b(op);
      Location loc = op.getLoc();
      SmallVector<Value> values(op.getOperands());
      for (int64_t d = op.getMaxDistance(); d >= 1; d /= 2) {
        SmallVector<Value> args(values);
        for (Value v : values)
          args.push_back(shuffleXor(b, loc, v, static_cast<int32_t>(d)));
        auto call = func::CallOp::create(b, loc, op.getCombinerAttr(),
                                         op.getResultTypes(), args);
        values.assign(call.getResults().begin(), call.getResults().end());
      }
      op.replaceAllUsesWith(values);
      op.erase();
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
