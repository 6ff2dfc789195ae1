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

    // The domain check is split: the dimensions' ranges and the constraints
    // free of symbols hold or fail for the whole nest and are tested once,
    // outside it; only constraints on symbols are tested per iteration.
    // (A bounds check of a partial last block that is free of the vector
    // symbol then leaves the vector loop's body straight-line, which
    // xla-vectorize-loads-stores needs.)
    SmallVector<Constraint> outerConstraints, innerConstraints;
    for (const Constraint &c : map.getConstraints()) {
      bool usesSymbol = false;
      c.expr.walk([&](AffineExpr e) {
        usesSymbol |= isa<AffineSymbolExpr>(e);
      });
      (usesSymbol ? innerConstraints : outerConstraints).push_back(c);
    }
    auto conjoin = [&](Value &all, Value cond) {
      all = all ? arith::AndIOp::create(rewriter, loc, all, cond).getResult()
                : cond;
    };
    auto checkConstraints = [&](Value &all, ValueRange operands,
                                ArrayRef<Constraint> constraints) {
      for (const Constraint &c : constraints) {
        Value v = ApplyIndexingOp::create(rewriter, loc, operands,
                                          map.withSingleResult(c.expr))
                      .getResult(0);
        conjoin(all, inRange(rewriter, loc, v, c.bounds));
      }
    };

    // The innermost body: check the constraints on symbols, then run the
    // loop's body.
    auto emitBody = [&](OpBuilder &, Location, ValueRange ivs,
                        ValueRange iterArgs) -> scf::ValueVector {
      SmallVector<Value> operands(dims);
      llvm::append_range(operands, ivs);
      auto bodyArgsHere = [&](ValueRange iterArgs) {
        SmallVector<Value> bodyArgs(ivs);
        for (AffineExpr result : map.getAffineMap().getResults())
          bodyArgs.push_back(ApplyIndexingOp::create(rewriter, loc, operands,
                                                     map.withSingleResult(result))
                                 .getResult(0));
        llvm::append_range(bodyArgs, iterArgs);
        return bodyArgs;
      };
      Value inBounds;
      checkConstraints(inBounds, operands, innerConstraints);
      if (!inBounds) {
        // Nothing to check per iteration: the body, straight-line.
        SmallVector<Value> bodyArgs = bodyArgsHere(iterArgs);
        Block *block = rewriter.getInsertionBlock();
        Block::iterator point = rewriter.getInsertionPoint();
        rewriter.inlineBlockBefore(op.getBody(), block, point, bodyArgs);
        auto yield = cast<YieldOp>(*std::prev(point));
        scf::ValueVector results(yield.getValues().begin(),
                                 yield.getValues().end());
        rewriter.eraseOp(yield);
        return results;
      }

      auto ifOp = scf::IfOp::create(rewriter, loc, resultTypes, inBounds,
                                    /*withElseRegion=*/!resultTypes.empty());
      if (!resultTypes.empty()) {
        rewriter.setInsertionPointToEnd(&ifOp.getElseRegion().front());
        scf::YieldOp::create(rewriter, loc, iterArgs);
      }
      Block *thenBlock = &ifOp.getThenRegion().front();
      if (!thenBlock->empty()) rewriter.eraseOp(thenBlock->getTerminator());
      rewriter.setInsertionPointToEnd(thenBlock);
      SmallVector<Value> bodyArgs = bodyArgsHere(iterArgs);
      rewriter.inlineBlockBefore(op.getBody(), thenBlock, thenBlock->end(),
                                 bodyArgs);
      auto yield = cast<YieldOp>(thenBlock->getTerminator());
      rewriter.setInsertionPoint(yield);
      rewriter.replaceOpWithNewOp<scf::YieldOp>(yield, yield.getValues());
      rewriter.setInsertionPointAfter(ifOp);
      return scf::ValueVector(ifOp.getResults().begin(), ifOp.getResults().end());
    };
    auto emitNest = [&](ValueRange inits) -> SmallVector<Value> {
      if (lbs.empty()) return emitBody(rewriter, loc, {}, inits);
      scf::LoopNest nest =
          scf::buildLoopNest(rewriter, loc, lbs, ubs, steps, inits, emitBody);
      return SmallVector<Value>(nest.results);
    };

    // The check outside the nest (symbols, unused there, at their lower
    // bounds).
    Value outerCond;
    for (auto [dim, var] : llvm::zip(dims, map.getDims()))
      conjoin(outerCond, inRange(rewriter, loc, dim, var.bounds));
    SmallVector<Value> outerOperands(dims);
    llvm::append_range(outerOperands, lbs);
    checkConstraints(outerCond, outerOperands, outerConstraints);
    if (!outerCond) {
      rewriter.replaceOp(op, emitNest(op.getInits()));
      return success();
    }
    auto outerIf = scf::IfOp::create(rewriter, loc, resultTypes, outerCond,
                                     /*withElseRegion=*/!resultTypes.empty());
    if (!resultTypes.empty()) {
      rewriter.setInsertionPointToEnd(&outerIf.getElseRegion().front());
      scf::YieldOp::create(rewriter, loc, op.getInits());
    }
    Block *outerThen = &outerIf.getThenRegion().front();
    if (!outerThen->empty()) rewriter.eraseOp(outerThen->getTerminator());
    rewriter.setInsertionPointToEnd(outerThen);
    SmallVector<Value> results = emitNest(op.getInits());
    rewriter.setInsertionPointToEnd(outerThen);
    scf::YieldOp::create(rewriter, loc, results);
    rewriter.replaceOp(op, outerIf.getResults());
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
