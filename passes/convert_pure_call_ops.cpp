//===- convert_pure_call_ops.cpp - xla_gpu.pure_call -> func.call ---------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_CONVERTPURECALLOPSPASS
#include "Passes.h.inc"

namespace {

struct ConvertPureCallOpsPass
    : impl::ConvertPureCallOpsPassBase<ConvertPureCallOpsPass> {
  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    getOperation().walk([&](PureCallOp call) {
      rewriter.setInsertionPoint(call);
      rewriter.replaceOpWithNewOp<func::CallOp>(
          call, call.getCalleeAttr(), call.getResultTypes(), call.getOperands());
    });
  }
};

} // namespace
} // namespace mlir::xla_gpu
