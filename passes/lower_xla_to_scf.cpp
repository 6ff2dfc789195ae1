//===- lower_xla_to_scf.cpp - the xla_gpu control ops -> scf --------------===//
//
// xla_gpu.loop as in xla-lower-xla-loops-to-scf, and the predicated tensor
// accesses as an scf.if around the plain access:
//
//   predicated_insert %v into %t[%i] if %c    scf.if %c { tensor.insert }
//                                              else { yield %t }
//   predicated_extract %t[%i] if %c else %d    scf.if %c { tensor.extract }
//                                              else { yield %d }
//
// so that both targets (and the later passes) see only scf and tensor.
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERXLATOSCFPASS
#include "Passes.h.inc"

namespace {

// scf.if %cond -> (type) { then(builder) } else { yield %otherwise }.
template <typename Fn>
Value ifElse(PatternRewriter &rewriter, Location loc, Value cond, Type type,
             Fn then, Value otherwise) {
  auto ifOp = scf::IfOp::create(rewriter, loc, TypeRange{type}, cond,
                                /*withElseRegion=*/true);
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointToStart(&ifOp.getThenRegion().front());
  scf::YieldOp::create(rewriter, loc, then(rewriter));
  rewriter.setInsertionPointToStart(&ifOp.getElseRegion().front());
  scf::YieldOp::create(rewriter, loc, otherwise);
  return ifOp.getResult(0);
}

struct LowerPredicatedInsert : OpRewritePattern<PredicatedInsertOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(PredicatedInsertOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value result = ifElse(
        rewriter, loc, op.getCondition(), op.getType(),
        [&](OpBuilder &b) -> Value {
          return tensor::InsertOp::create(b, loc, op.getValue(), op.getDest(),
                                          op.getIndices());
        },
        op.getDest());
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct LowerPredicatedExtract : OpRewritePattern<PredicatedExtractOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(PredicatedExtractOp op,
                                PatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value result = ifElse(
        rewriter, loc, op.getCondition(), op.getType(),
        [&](OpBuilder &b) -> Value {
          return tensor::ExtractOp::create(b, loc, op.getSrc(),
                                           op.getIndices());
        },
        op.getFallback());
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct LowerXlaToScfPass : impl::LowerXlaToScfPassBase<LowerXlaToScfPass> {
  void runOnOperation() override {
    if (failed(lowerXlaLoopsToScf(getOperation()))) return signalPassFailure();
    RewritePatternSet patterns(&getContext());
    patterns.add<LowerPredicatedInsert, LowerPredicatedExtract>(&getContext());
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace
} // namespace mlir::xla_gpu
