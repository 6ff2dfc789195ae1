//===- TensorTypeConversion.h - shared parts of tensor type conversions ---===//
//
// xla-flatten-tensors (N-d -> 1-d) and xla-lower-tensors (tensor -> pointer)
// change tensor types everywhere: signatures, calls, returns, scf-carried
// values, and ops whose only change is their types.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_PASSES_TENSORTYPECONVERSION_H
#define XLA_GPU_PASSES_TENSORTYPECONVERSION_H

#include <functional>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/Dialect/SCF/Transforms/Patterns.h"
#include "mlir/IR/BuiltinOps.h"
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

/// Signatures, calls, returns and scf-carried values under `converter`; a
/// func.func is legal once its signature and body are, any other op once
/// none of its operand or result types is `illegal`.
inline void populateTensorTypeConversion(
    TypeConverter &converter, RewritePatternSet &patterns,
    ConversionTarget &target, std::function<bool(Type)> illegal) {
  populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns,
                                                                 converter);
  populateReturnOpTypeConversionPattern(patterns, converter);
  populateCallOpTypeConversionPattern(patterns, converter);
  scf::populateSCFStructuralTypeConversionsAndLegality(converter, patterns,
                                                       target);
  target.addDynamicallyLegalOp<func::FuncOp>([&converter](func::FuncOp f) {
    return converter.isSignatureLegal(f.getFunctionType()) &&
           converter.isLegal(&f.getBody());
  });
  target.markUnknownOpDynamicallyLegal([illegal](Operation *op) {
    return llvm::none_of(op->getOperandTypes(), illegal) &&
           llvm::none_of(op->getResultTypes(), illegal);
  });
  target.addLegalOp<ModuleOp>();
}

} // namespace mlir::xla_gpu

#endif // XLA_GPU_PASSES_TENSORTYPECONVERSION_H
