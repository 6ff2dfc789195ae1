//===- optimize_loops.cpp - full unrolling of small loops -----------------===//

#include "Passes.h"
#include "llvm/ADT/SetVector.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_OPTIMIZELOOPSPASS
#include "Passes.h.inc"

namespace {

std::optional<int64_t> tripCount(scf::ForOp loop) {
  APInt lb, ub, step;
  if (!matchPattern(loop.getLowerBound(), m_ConstantInt(&lb)) ||
      !matchPattern(loop.getUpperBound(), m_ConstantInt(&ub)) ||
      !matchPattern(loop.getStep(), m_ConstantInt(&step)) ||
      step.getSExtValue() <= 0)
    return std::nullopt;
  int64_t span = ub.getSExtValue() - lb.getSExtValue();
  if (span <= 0) return 0;
  return (span + step.getSExtValue() - 1) / step.getSExtValue();
}

// The pure, region-free ops of `loop`'s body that `load`'s indices depend
// on (in block order), if the indices depend on nothing else in the loop
// but the induction variable.
std::optional<SmallVector<Operation *>> indexSlice(scf::ForOp loop,
                                                   Operation *load) {
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> worklist(load->getOperands().drop_front());
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    if (v == loop.getInductionVar() || loop.isDefinedOutsideOfLoop(v)) continue;
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != loop.getBody() || def->getNumRegions() ||
        !isMemoryEffectFree(def))
      return std::nullopt;
    if (slice.insert(def)) llvm::append_range(worklist, def->getOperands());
  }
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  });
  return ordered;
}

// The first load of the body worth pipelining: a read of a loop-invariant
// tensor whose indices are computed from the induction variable.
Operation *findPipelinableLoad(scf::ForOp loop) {
  for (Operation &op : *loop.getBody()) {
    Value source;
    if (auto e = dyn_cast<tensor::ExtractOp>(op)) source = e.getTensor();
    if (auto r = dyn_cast<vector::TransferReadOp>(op)) source = r.getBase();
    if (!source || !loop.isDefinedOutsideOfLoop(source)) continue;
    // The first iteration's fallback is an arith.constant zero: none for a
    // complex element (a complex convolution's operands).
    if (!Builder(loop.getContext()).getZeroAttr(op.getResult(0).getType()))
      continue;
    // Other operands (a transfer_read's padding) must be invariant too.
    bool dependsOnIv = false;
    for (Value v : op.getOperands().drop_front())
      dependsOnIv |= !loop.isDefinedOutsideOfLoop(v);
    if (dependsOnIv && indexSlice(loop, &op)) return &op;
  }
  return nullptr;
}

// Clones `slice` and `load` at the builder's point with the induction
// variable (any of `fromIvs`) replaced by `iv`.
Value cloneLoadAt(OpBuilder &b, ValueRange fromIvs, ArrayRef<Operation *> slice,
                  Operation *load, Value iv) {
  IRMapping mapping;
  for (Value from : fromIvs) mapping.map(from, iv);
  for (Operation *op : slice) b.clone(*op, mapping);
  return b.clone(*load, mapping)->getResult(0);
}

void pipelineLoad(scf::ForOp loop, Operation *load) {
  SmallVector<Operation *> slice = *indexSlice(loop, load);
  IRRewriter rewriter(loop.getContext());
  rewriter.setInsertionPoint(loop);
  Location loc = load->getLoc();
  // The first iteration's value; the loop may run zero times, in which case
  // it is never used but must still be a valid read: guard it too.
  Value runs = arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::slt,
                                     loop.getLowerBound(), loop.getUpperBound());
  Type type = load->getResult(0).getType();
  auto guardedLoad = [&](OpBuilder &b, Value cond, ValueRange fromIvs, Value iv,
                         Value fallback) {
    auto ifOp = scf::IfOp::create(b, loc, TypeRange{type}, cond, true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    scf::YieldOp::create(b, loc, cloneLoadAt(b, fromIvs, slice, load, iv));
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    scf::YieldOp::create(b, loc, fallback);
    return ifOp.getResult(0);
  };
  Value zero =
      arith::ConstantOp::create(rewriter, loc, rewriter.getZeroAttr(type));
  Value oldIv = loop.getInductionVar();
  Value first = guardedLoad(rewriter, runs, oldIv, loop.getLowerBound(), zero);

  Value ub = loop.getUpperBound(), step = loop.getStep();
  unsigned position = loop.getNumRegionIterArgs();
  auto newLoop = cast<scf::ForOp>(*loop.replaceWithAdditionalYields(
      rewriter, first, /*replaceInitOperandUsesInLoop=*/false,
      [&](OpBuilder &b, Location, ArrayRef<BlockArgument> newArgs) {
        // The body may or may not have moved into the new loop yet: the
        // slice refers to the old or the new induction variable.
        Value iv = newArgs[0].getOwner()->getArgument(0);
        Value next = arith::AddIOp::create(b, loc, iv, step);
        Value inRange = arith::CmpIOp::create(
            b, loc, arith::CmpIPredicate::slt, next, ub);
        return SmallVector<Value>{
            guardedLoad(b, inRange, ValueRange{oldIv, iv}, next, newArgs[0])};
      }));
  // Issue the next iteration's load first, so that it overlaps this
  // iteration's work.
  auto yield = cast<scf::YieldOp>(newLoop.getBody()->getTerminator());
  auto prefetch = yield.getOperand(position).getDefiningOp<scf::IfOp>();
  Operation *inRange = prefetch.getCondition().getDefiningOp();
  Operation *next = inRange->getOperand(0).getDefiningOp();
  Block::iterator start = newLoop.getBody()->begin();
  for (Operation *op : {next, inRange, prefetch.getOperation()})
    op->moveBefore(newLoop.getBody(), start);
  // The body's own load (moved, not cloned) is now the carried value.
  load->getResult(0).replaceAllUsesWith(newLoop.getRegionIterArgs()[position]);
  load->erase();
}

struct OptimizeLoopsPass : impl::OptimizeLoopsPassBase<OptimizeLoopsPass> {
  using OptimizeLoopsPassBase::OptimizeLoopsPassBase;

  void runOnOperation() override {
    // Post-order: inner loops unroll first, then their parents are sized
    // with the unrolled bodies.
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) { loops.push_back(loop); });
    for (scf::ForOp loop : loops) {
      auto trips = tripCount(loop);
      int64_t bodyOps = 0;
      loop.getBody()->walk([&](Operation *) { ++bodyOps; });
      if (trips && *trips >= 1 && *trips <= maxTripCount &&
          *trips * bodyOps <= maxUnrolledOps) {
        if (failed(loopUnrollFull(loop))) {
          loop.emitOpError("could not be unrolled");
          return signalPassFailure();
        }
        continue;
      }
      if (trips && *trips <= 1) continue;  // nothing to overlap
      if (Operation *load = findPipelinableLoad(loop)) pipelineLoad(loop, load);
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
