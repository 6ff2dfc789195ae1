//===- optimize_loops.cpp - full unrolling of small loops -----------------===//

#include "Passes.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/IR/Matchers.h"

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

struct OptimizeLoopsPass : impl::OptimizeLoopsPassBase<OptimizeLoopsPass> {
  using OptimizeLoopsPassBase::OptimizeLoopsPassBase;

  void runOnOperation() override {
    // Post-order: inner loops unroll first, then their parents are sized
    // with the unrolled bodies.
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) { loops.push_back(loop); });
    for (scf::ForOp loop : loops) {
      auto trips = tripCount(loop);
      if (!trips || *trips < 1 || *trips > maxTripCount) continue;
      int64_t bodyOps = 0;
      loop.getBody()->walk([&](Operation *) { ++bodyOps; });
      if (*trips * bodyOps > maxUnrolledOps) continue;
      if (failed(loopUnrollFull(loop))) {
        loop.emitOpError("could not be unrolled");
        return signalPassFailure();
      }
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
