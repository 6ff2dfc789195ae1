//===- expand_float_ops.cpp - narrow-float math through f32 ---------------===//

#include "Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_EXPANDFLOATOPSPASS
#include "Passes.h.inc"

namespace {

// bf16 and f16: native arithmetic on sm_80+, but no math library.
bool isHalfWidth(Type t) { return t.isBF16() || t.isF16(); }
// f8 / f6 / f4: nothing native but conversions.
bool isTiny(Type t) {
  auto f = dyn_cast<FloatType>(t);
  return f && f.getWidth() < 16;
}

bool needsExpansion(Operation *op) {
  bool isMath = isa<math::MathDialect>(op->getDialect());
  bool isArithFloat =
      isa<arith::AddFOp, arith::SubFOp, arith::MulFOp, arith::DivFOp,
          arith::RemFOp, arith::NegFOp, arith::MaximumFOp, arith::MinimumFOp,
          arith::MaxNumFOp, arith::MinNumFOp, arith::CmpFOp>(op);
  if (!isMath && !isArithFloat) return false;
  return llvm::any_of(op->getOperandTypes(), [&](Type t) {
    Type e = getElementTypeOrSelf(t);
    return isTiny(e) || (isMath && isHalfWidth(e));
  });
}

Type widen(Type t) {
  Type f32 = Float32Type::get(t.getContext());
  if (auto v = dyn_cast<VectorType>(t)) return v.clone(f32);
  return f32;
}

struct ExpandFloatOp : RewritePattern {
  ExpandFloatOp(MLIRContext *ctx)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, ctx) {}
  LogicalResult matchAndRewrite(Operation *op,
                                PatternRewriter &rewriter) const override {
    if (!needsExpansion(op)) return failure();
    Location loc = op->getLoc();
    SmallVector<Value> operands;
    for (Value v : op->getOperands()) {
      bool narrow = isa<FloatType>(getElementTypeOrSelf(v.getType())) &&
                    getElementTypeOrSelf(v.getType()).getIntOrFloatBitWidth() < 32;
      operands.push_back(narrow ? arith::ExtFOp::create(rewriter, loc,
                                                        widen(v.getType()), v)
                                      .getResult()
                                : v);
    }
    SmallVector<Type> resultTypes;
    for (Type t : op->getResultTypes())
      resultTypes.push_back(isa<FloatType>(getElementTypeOrSelf(t)) ? widen(t) : t);
    OperationState state(loc, op->getName(), operands, resultTypes,
                         op->getAttrs());
    Operation *wide = rewriter.create(state);
    SmallVector<Value> results;
    for (auto [orig, value] : llvm::zip(op->getResults(), wide->getResults()))
      results.push_back(orig.getType() == value.getType()
                            ? value
                            : arith::TruncFOp::create(rewriter, loc,
                                                      orig.getType(), value)
                                  .getResult());
    rewriter.replaceOp(op, results);
    return success();
  }
};

struct ExpandFloatOpsPass
    : impl::ExpandFloatOpsPassBase<ExpandFloatOpsPass> {
  void runOnOperation() override {
    // Most kernels have no narrow float math: a plain walk finds that out
    // for less than the pattern driver's (which neither folds nor erases,
    // so skipping it changes nothing else).
    if (!getOperation()
             ->walk([](Operation *op) {
               return needsExpansion(op) ? WalkResult::interrupt()
                                         : WalkResult::advance();
             })
             .wasInterrupted())
      return;
    RewritePatternSet patterns(&getContext());
    patterns.add<ExpandFloatOp>(&getContext());
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace
} // namespace mlir::xla_gpu
