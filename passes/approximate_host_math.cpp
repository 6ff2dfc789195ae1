//===- approximate_host_math.cpp - vectorizable f32 math for the host -----===//
//
// The cpu target, before xla-lower-to-host. A libm call (tanhf, expf...)
// in the loop over a block's threads keeps LLVM's loop vectorizer from
// running over the threads: it has no vector form of the function. This
// pass replaces f32 math.exp, math.expm1, math.log, math.log1p, math.tanh
// and math.erf (scalars or vectors; f16/bf16 math reaches here as f32
// through xla-expand-float-ops) by straight-line arith, with selects where
// the function has special cases, which vectorizes like any other
// arithmetic. The error bounds, measured against numpy in float64 over
// every binade (tests/python/test_cpu_speed_math.py):
//
//   exp    ~1 ulp   x = k ln2 + r (Cody-Waite), |r| <= ln2/2, e^r - 1 by
//                   its Taylor series to r^8 (< 0.1 ulp truncation), then
//                   scaled by 2^k in two steps so that subnormal results
//                   are rounded once (exp(-100) is 3.7e-44, not 0).
//   expm1  ~1.5    the same reduction; 2^k (e^r - 1) + (2^k - 1), where
//                   2^k - 1 is exact, so there is no cancellation near 0:
//                   expm1(1e-8) = 1e-8.
//   log    ~1      m 2^e with m in [sqrt(1/2), sqrt(2)), subnormal inputs
//                   scaled by 2^23 first; log(1 + f) = f - (f^2/2 -
//                   s (f^2/2 + R(s^2))) with s = f / (2 + f) and R the
//                   series of 2 atanh(s) - 2s (fdlibm's arrangement).
//   log1p  ~2.5    u = 1 + x; x when u == 1, else log(u) * x / (u - 1)
//                   (the rounding of 1 + x cancels out).
//   tanh   ~4.5    x P(x^2) / Q(x^2), a rational fit on [0, 9] (0.19 ulp
//                   in exact arithmetic; the rest is f32 rounding), |x|
//                   clamped to 9 and the result to 1, as XLA:CPU does. A
//                   vectorized loop runs it in half the time of e / (e + 2)
//                   with e = expm1(2 |x|) (2.5 ulp; used here before).
//   erf    ~2.5    |x| < 1: x P(x^2); 1 <= |x| < 4: 1 - e^(-x^2) Q(|x| - 1),
//                   with P and Q least-squares fits (relative error) of
//                   erf(x)/x and erfc(x) e^(x^2); 1 beyond.
//
// NaN in gives NaN out, infinities and signed zeros as libm gives them.
// Polynomials are Horner chains of mulf/addf marked `contract`, which LLVM
// fuses into FMAs where the host has them. XLA:CPU approximates the same
// functions (measured on its jit: tanh 4.5 ulp, erf 5.1, expm1 5.0,
// log1p 2.4). Other math ops (sin, cos, pow...) stay libm calls, as on
// XLA:CPU; f64 math stays libm.
//
//===----------------------------------------------------------------------===//

#include <limits>

#include "Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_APPROXIMATEHOSTMATHPASS
#include "Passes.h.inc"

namespace {

// ln 2 split so that k * kLn2Hi is exact for |k| < 2^8.
constexpr double kLn2Hi = 0.693145751953125;
constexpr double kLn2Lo = 1.428606765330187045e-06;
constexpr double kLog2E = 1.4426950408889634;

// e^r - 1 = r + r^2 (1/2 + r/6 + ...): the coefficients after r.
constexpr double kExpm1Series[] = {1.0 / 2,    1.0 / 6,    1.0 / 24,
                                   1.0 / 120,  1.0 / 720,  1.0 / 5040,
                                   1.0 / 40320};
// 2 atanh(s) = 2s + s z (2/3 + 2/5 z + ...), z = s^2.
constexpr double kAtanhSeries[] = {2.0 / 3, 2.0 / 5, 2.0 / 7, 2.0 / 9,
                                   2.0 / 11};
// tanh(x) = x P(x^2) / Q(x^2) on [0, 9]: a least-squares fit of the
// relative error, reweighted toward minimax (Lawson), then the coefficients
// rounded to f32 one at a time, highest first, the others refit after each
// (the fit's own error is then 0.19 ulp; the rest is f32 arithmetic).
constexpr double kTanhNumerator[] = {
    1.0, 0.1368097960948944, 0.0038696618285030127, 2.8034375645802356e-05,
    3.0650024740452864e-08, -1.2252658089517698e-11};
constexpr double kTanhDenominator[] = {
    1.0, 0.4701431095600128, 0.02725072018802166, 0.00039409834425896406,
    1.2892487575300038e-06};
// erf(x) / x = P(x^2) on [0, 1].
constexpr double kErfSmall[] = {
    1.1283791211856533,    -0.37612319818438955,  0.11280130624143014,
    -0.026709955242718242, 0.0049160266055300605, -0.0005625398986523894};
// erfc(x) e^(x^2) = Q(x - 1) on [1, 4].
constexpr double kErfcScaled[] = {
    0.42758350080680124,    -0.27320641235915044,  0.15430003505265089,
    -0.07885852992614491,   0.03656441582427894,   -0.014985055596591395,
    0.005129964202209562,   -0.001357484039846776, 0.0002525190784577955,
    -2.8806731717664902e-05, 1.4981616882070448e-06};

// Builds f32 arithmetic over scalars or vectors of the shape of `like`.
class F32Math {
public:
  F32Math(ImplicitLocOpBuilder &b, Type like) : b_(b) {
    Type f32 = b.getF32Type(), i32 = b.getI32Type();
    if (auto v = dyn_cast<VectorType>(like)) {
      float_ = v.clone(f32);
      int_ = v.clone(i32);
    } else {
      float_ = f32;
      int_ = i32;
    }
  }

  Value f(double value) {
    auto attr = b_.getF32FloatAttr(static_cast<float>(value));
    if (auto v = dyn_cast<VectorType>(float_))
      return arith::ConstantOp::create(b_, DenseElementsAttr::get(v, attr));
    return arith::ConstantOp::create(b_, attr);
  }
  Value i(int32_t value) {
    auto attr = b_.getI32IntegerAttr(value);
    if (auto v = dyn_cast<VectorType>(int_))
      return arith::ConstantOp::create(b_, DenseElementsAttr::get(v, attr));
    return arith::ConstantOp::create(b_, attr);
  }
  Value inf() { return f(std::numeric_limits<double>::infinity()); }
  Value nan() { return f(std::numeric_limits<double>::quiet_NaN()); }

  Value add(Value x, Value y) { return arith::AddFOp::create(b_, x, y, contract()); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b_, x, y, contract()); }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b_, x, y, contract()); }
  Value div(Value x, Value y) { return arith::DivFOp::create(b_, x, y); }
  Value fma(Value x, Value y, Value z) { return add(mul(x, y), z); }
  Value abs(Value x) { return math::AbsFOp::create(b_, x); }
  Value floor(Value x) { return math::FloorOp::create(b_, x); }
  Value copySign(Value x, Value sign) { return math::CopySignOp::create(b_, x, sign); }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b_, p, x, y);
  }
  Value select(Value c, Value x, Value y) { return arith::SelectOp::create(b_, c, x, y); }
  // x with values below `lo` / above `hi` replaced (NaN stays NaN).
  Value clamp(Value x, double lo, double hi) {
    x = select(cmp(arith::CmpFPredicate::OLT, x, f(lo)), f(lo), x);
    return select(cmp(arith::CmpFPredicate::OGT, x, f(hi)), f(hi), x);
  }
  // c[0] + x (c[1] + x (c[2] + ...)).
  Value horner(ArrayRef<double> c, Value x) {
    Value r = f(c.back());
    for (double coefficient : llvm::reverse(c.drop_back()))
      r = fma(r, x, f(coefficient));
    return r;
  }

  Value bitsOf(Value x) { return arith::BitcastOp::create(b_, int_, x); }
  Value floatOf(Value bits) { return arith::BitcastOp::create(b_, float_, bits); }
  Value toInt(Value x) { return arith::FPToSIOp::create(b_, int_, x); }
  Value toFloat(Value x) { return arith::SIToFPOp::create(b_, float_, x); }
  Value addI(Value x, Value y) { return arith::AddIOp::create(b_, x, y); }
  Value subI(Value x, Value y) { return arith::SubIOp::create(b_, x, y); }
  Value cmpI(arith::CmpIPredicate p, Value x, Value y) {
    return arith::CmpIOp::create(b_, p, x, y);
  }

  // 2^k for an integer k in [-126, 127].
  Value pow2(Value k) {
    return floatOf(arith::ShLIOp::create(b_, addI(k, i(127)), i(23)));
  }
  // v 2^k for k in [-252, 254], in two exact steps but the last, so that a
  // subnormal or overflowing result is rounded once.
  Value scale(Value v, Value k) {
    Value half = arith::ShRSIOp::create(b_, k, i(1));
    return mul(mul(v, pow2(half)), pow2(subI(k, half)));
  }

  // x = k ln2 + r with |r| <= ln2/2 (a little more after rounding); x
  // must be finite and |x| < 180.
  std::pair<Value, Value> reduceLn2(Value x) {
    Value k = floor(fma(x, f(kLog2E), f(0.5)));
    Value r = fma(k, f(-kLn2Hi), x);
    r = fma(k, f(-kLn2Lo), r);
    return {toInt(k), r};
  }
  // e^r - 1 for |r| <= ln2/2.
  Value expm1Reduced(Value r) { return fma(mul(r, r), horner(kExpm1Series, r), r); }

  Value exp(Value x) {
    // e^-104 rounds to 0, e^89 overflows: no other inputs need care.
    auto [k, r] = reduceLn2(clamp(x, -104.0, 89.0));
    return scale(add(f(1.0), expm1Reduced(r)), k);
  }

  Value expm1(Value x) {
    // expm1(x) rounds to -1 below -20; 89 overflows.
    auto [k, r] = reduceLn2(clamp(x, -20.0, 89.0));
    Value p = expm1Reduced(r);
    // k <= 24: 2^k - 1 is exact and 2^k p + (2^k - 1) rounds once.
    Value t = pow2(arith::MinSIOp::create(b_, k, i(24)));
    Value near = fma(t, p, sub(t, f(1.0)));
    Value far = sub(scale(add(f(1.0), p), k), f(1.0));
    Value result = select(cmpI(arith::CmpIPredicate::sgt, k, i(24)), far, near);
    // -0 stays -0.
    return select(cmp(arith::CmpFPredicate::OEQ, x, f(0.0)), x, result);
  }

  Value log(Value x) {
    // Subnormals: x 2^23 is normal.
    Value subnormal = cmp(arith::CmpFPredicate::OLT, x, f(0x1p-126));
    Value scaled = select(subnormal, mul(x, f(0x1p23)), x);
    Value bits = bitsOf(scaled);
    Value exponent = subI(arith::ShRSIOp::create(b_, bits, i(23)), i(127));
    exponent = subI(exponent, select(subnormal, i(23), i(0)));
    // m in [1, 2), then [sqrt(1/2), sqrt(2)).
    Value m = floatOf(arith::OrIOp::create(
        b_, arith::AndIOp::create(b_, bits, i(0x7fffff)), i(0x3f800000)));
    Value big = cmp(arith::CmpFPredicate::OGT, m, f(1.41421356237309504));
    m = select(big, mul(m, f(0.5)), m);
    Value e = toFloat(addI(exponent, arith::ExtUIOp::create(b_, int_, big)));
    Value fraction = sub(m, f(1.0));  // exact
    Value s = div(fraction, add(f(2.0), fraction));
    Value z = mul(s, s);
    Value r = mul(z, horner(kAtanhSeries, z));
    Value halfSquare = mul(mul(f(0.5), fraction), fraction);
    Value inner = fma(s, add(halfSquare, r), mul(e, f(kLn2Lo)));
    Value result = fma(e, f(kLn2Hi), sub(fraction, sub(halfSquare, inner)));
    result = select(cmp(arith::CmpFPredicate::OEQ, x, inf()), inf(), result);
    result = select(cmp(arith::CmpFPredicate::OEQ, x, f(0.0)), f(-std::numeric_limits<double>::infinity()),
                    result);
    // Negative or NaN.
    return select(cmp(arith::CmpFPredicate::ULT, x, f(0.0)), nan(), result);
  }

  Value log1p(Value x) {
    Value u = add(f(1.0), x);
    Value result = mul(log(u), div(x, sub(u, f(1.0))));
    result = select(cmp(arith::CmpFPredicate::OEQ, u, f(1.0)), x, result);
    return select(cmp(arith::CmpFPredicate::OEQ, x, inf()), x, result);
  }

  Value tanh(Value x) {
    // x P(x^2) / Q(x^2) on |x| <= 9, capped at 1, the sign put back: no
    // reduction step, 12 FMAs or multiplications and a division. From
    // 9.02 on tanh rounds to exactly 1 in f32 (1 - 2e^-2x < 2^-25), which
    // the fit, a hair below 1 at 9, does not give: there the result is 1,
    // so that 1 - tanh(x)^2 is 0 as XLA computes it. The comparisons are
    // false for NaN, which goes through the fit and stays NaN.
    Value a = abs(x);
    Value saturated = cmp(arith::CmpFPredicate::OGE, a, f(9.02));
    a = select(cmp(arith::CmpFPredicate::OGT, a, f(9.0)), f(9.0), a);
    Value z = mul(a, a);
    Value y = div(mul(a, horner(kTanhNumerator, z)), horner(kTanhDenominator, z));
    y = select(cmp(arith::CmpFPredicate::OGT, y, f(1.0)), f(1.0), y);
    y = select(saturated, f(1.0), y);
    return copySign(y, x);
  }

  Value erf(Value x) {
    Value a = abs(x);
    Value small = mul(a, horner(kErfSmall, mul(a, a)));
    Value mid = sub(f(1.0), mul(exp(mul(a, sub(f(0.0), a))),
                                horner(kErfcScaled, sub(a, f(1.0)))));
    Value result = select(cmp(arith::CmpFPredicate::OLT, a, f(1.0)), small,
                          select(cmp(arith::CmpFPredicate::OLT, a, f(4.0)), mid,
                                 f(1.0)));
    result = select(cmp(arith::CmpFPredicate::UNO, x, x), x, result);
    return copySign(result, x);
  }

private:
  arith::FastMathFlags contract() const { return arith::FastMathFlags::contract; }

  ImplicitLocOpBuilder &b_;
  Type float_, int_;
};

template <typename Op>
struct Approximate : OpRewritePattern<Op> {
  using Fn = Value (F32Math::*)(Value);
  Approximate(MLIRContext *ctx, Fn fn) : OpRewritePattern<Op>(ctx), fn(fn) {}

  LogicalResult matchAndRewrite(Op op, PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32()) return failure();
    if (auto v = dyn_cast<VectorType>(type); v && v.isScalable()) return failure();
    ImplicitLocOpBuilder b(op.getLoc(), rewriter);
    F32Math math(b, type);
    rewriter.replaceOp(op, (math.*fn)(op.getOperand()));
    return success();
  }
  Fn fn;
};

struct ApproximateHostMathPass
    : impl::ApproximateHostMathPassBase<ApproximateHostMathPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    RewritePatternSet patterns(ctx);
    patterns.add<Approximate<math::ExpOp>>(ctx, &F32Math::exp);
    patterns.add<Approximate<math::ExpM1Op>>(ctx, &F32Math::expm1);
    patterns.add<Approximate<math::LogOp>>(ctx, &F32Math::log);
    patterns.add<Approximate<math::Log1pOp>>(ctx, &F32Math::log1p);
    patterns.add<Approximate<math::TanhOp>>(ctx, &F32Math::tanh);
    patterns.add<Approximate<math::ErfOp>>(ctx, &F32Math::erf);
    // Most kernels have none of the ops the patterns rewrite: a plain walk
    // finds that out for less than the pattern driver (which looks each op
    // up among the patterns). The driver neither folds nor erases, so
    // skipping it changes nothing else.
    llvm::SmallDenseSet<OperationName> roots;
    for (const auto &pattern : patterns.getNativePatterns())
      if (std::optional<OperationName> root = pattern->getRootKind())
        roots.insert(*root);
    if (!getOperation()
             ->walk([&](Operation *op) {
               return roots.contains(op->getName()) ? WalkResult::interrupt()
                                                    : WalkResult::advance();
             })
             .wasInterrupted())
      return;
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace
} // namespace mlir::xla_gpu
