//===- lower_xla_to_scf.cpp - the xla_gpu control ops -> scf --------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERXLATOSCFPASS
#include "Passes.h.inc"

namespace {

struct LowerXlaToScfPass : impl::LowerXlaToScfPassBase<LowerXlaToScfPass> {
  void runOnOperation() override {
    if (failed(lowerXlaLoopsToScf(getOperation()))) signalPassFailure();
  }
};

} // namespace
} // namespace mlir::xla_gpu
