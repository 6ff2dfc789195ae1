//===- lower_xla_loops_to_scf.cpp - xla_gpu.loop -> scf -------------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERXLALOOPSTOSCFPASS
#include "Passes.h.inc"

namespace {

// lo <= value <= hi, as the reference walkthrough writes it (cmpi sge, cmpi sle, andi).
Value inRange(PatternRewriter &rewriter, Location loc, Value value,
              Interval bounds) {
  auto cst = [&](int64_t v) {
    return arith::ConstantIndexOp::create(rewriter, loc, v);
  };
  Value lo = arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::sge,
                                   value, cst(bounds.lower));
  Value hi = arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::sle,
                                   value, cst(bounds.upper));
  return arith::AndIOp::create(rewriter, loc, lo, hi);
}

struct LowerLoop : OpRewritePattern<LoopOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(LoopOp op,
                                PatternRewriter &rewriter) const override {
    const IndexingMap &map = op.getIndexingMap();
    Location loc = op.getLoc();
    SmallVector<Value> lbs, ubs, steps;
    for (const Variable &sym : map.getSymbols()) {
      // An empty range makes a loop that runs zero times; only a range that
      // reaches INT64_MAX has no exclusive upper bound.
      if (sym.bounds.upper == INT64_MAX)
        return rewriter.notifyMatchFailure(op, "unbounded symbol");
      lbs.push_back(arith::ConstantIndexOp::create(rewriter, loc, sym.bounds.lower));
      ubs.push_back(arith::ConstantIndexOp::create(rewriter, loc, sym.bounds.upper + 1));
      steps.push_back(arith::ConstantIndexOp::create(rewriter, loc, 1));
    }
    SmallVector<Value> dims(op.getDims());
    TypeRange resultTypes = op.getResultTypes();

    // The innermost body: check the domain, then run the loop's body.
    auto emitBody = [&](OpBuilder &, Location, ValueRange ivs,
                        ValueRange iterArgs) -> scf::ValueVector {
      Value inBounds;
      auto conjoin = [&](Value cond) {
        inBounds = inBounds ? arith::AndIOp::create(rewriter, loc, inBounds, cond)
                                  .getResult()
                            : cond;
      };
      for (auto [dim, var] : llvm::zip(dims, map.getDims()))
        conjoin(inRange(rewriter, loc, dim, var.bounds));
      SmallVector<Value> operands(dims);
      llvm::append_range(operands, ivs);
      for (const Constraint &c : map.getConstraints()) {
        Value v = ApplyIndexingOp::create(rewriter, loc, operands,
                                          map.withSingleResult(c.expr))
                      .getResult(0);
        conjoin(inRange(rewriter, loc, v, c.bounds));
      }
      if (!inBounds) inBounds = arith::ConstantIntOp::create(rewriter, loc, 1, 1);

      auto ifOp = scf::IfOp::create(rewriter, loc, resultTypes, inBounds,
                                    /*withElseRegion=*/!resultTypes.empty());
      if (!resultTypes.empty()) {
        rewriter.setInsertionPointToEnd(&ifOp.getElseRegion().front());
        scf::YieldOp::create(rewriter, loc, iterArgs);
      }
      Block *thenBlock = &ifOp.getThenRegion().front();
      if (!thenBlock->empty()) rewriter.eraseOp(thenBlock->getTerminator());
      rewriter.setInsertionPointToEnd(thenBlock);
      SmallVector<Value> bodyArgs(ivs);
      for (AffineExpr result : map.getAffineMap().getResults())
        bodyArgs.push_back(ApplyIndexingOp::create(rewriter, loc, operands,
                                                   map.withSingleResult(result))
                               .getResult(0));
      llvm::append_range(bodyArgs, iterArgs);
      rewriter.inlineBlockBefore(op.getBody(), thenBlock, thenBlock->end(),
                                 bodyArgs);
      auto yield = cast<YieldOp>(thenBlock->getTerminator());
      rewriter.setInsertionPoint(yield);
      rewriter.replaceOpWithNewOp<scf::YieldOp>(yield, yield.getValues());
      rewriter.setInsertionPointAfter(ifOp);
      return scf::ValueVector(ifOp.getResults().begin(), ifOp.getResults().end());
    };

    if (lbs.empty()) {
      scf::ValueVector results = emitBody(rewriter, loc, {}, op.getInits());
      rewriter.replaceOp(op, results);
      return success();
    }
    scf::LoopNest nest = scf::buildLoopNest(rewriter, loc, lbs, ubs, steps,
                                            op.getInits(), emitBody);
    rewriter.replaceOp(op, nest.results);
    return success();
  }
};

struct LowerXlaLoopsToScfPass
    : impl::LowerXlaLoopsToScfPassBase<LowerXlaLoopsToScfPass> {
  void runOnOperation() override {
    if (failed(lowerXlaLoopsToScf(getOperation()))) signalPassFailure();
  }
};

} // namespace

LogicalResult lowerXlaLoopsToScf(Operation *root) {
  RewritePatternSet patterns(root->getContext());
  patterns.add<LowerLoop>(root->getContext());
  // A walk, not the greedy driver: lowering must not also fold or move the
  // surrounding IR.
  walkAndApplyPatterns(root, std::move(patterns));
  auto remaining = root->walk([](LoopOp loop) {
    loop.emitOpError("cannot be lowered to scf: a symbol's range reaches "
                     "INT64_MAX");
    return WalkResult::interrupt();
  });
  return failure(remaining.wasInterrupted());
}

} // namespace mlir::xla_gpu
