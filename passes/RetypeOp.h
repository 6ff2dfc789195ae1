//===- RetypeOp.h - conversion of ops that only change types --------------===//

#ifndef XLA_GPU_PASSES_RETYPEOP_H
#define XLA_GPU_PASSES_RETYPEOP_H

#include "mlir/Transforms/DialectConversion.h"

namespace mlir::xla_gpu {

/// Converts an op whose only change is the types of its operands and
/// results (pure_call, sync_threads, allocate_shared under a type converter).
template <typename Op>
struct RetypeOp : OpConversionPattern<Op> {
  using OpConversionPattern<Op>::OpConversionPattern;
  LogicalResult
  matchAndRewrite(Op op, typename Op::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    SmallVector<Type> types;
    if (failed(this->getTypeConverter()->convertTypes(op->getResultTypes(),
                                                      types)))
      return failure();
    Operation *converted = rewriter.clone(*op);
    converted->setOperands(adaptor.getOperands());
    for (auto [result, type] : llvm::zip(converted->getResults(), types))
      result.setType(type);
    rewriter.replaceOp(op, converted->getResults());
    return success();
  }
};

} // namespace mlir::xla_gpu

#endif // XLA_GPU_PASSES_RETYPEOP_H
