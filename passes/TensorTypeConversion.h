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
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/Support/MathExtras.h"
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

/// Fails with an error at the first op whose operand, result or block
/// argument is a static tensor with more elements than int64 holds (its
/// element count, which these passes compute, would overflow).
inline LogicalResult verifyTensorSizesFitInt64(Operation *root) {
  auto overflows = [](Type type) {
    auto shaped = dyn_cast<ShapedType>(type);
    if (!shaped || !shaped.hasRank()) return false;
    int64_t count = 1;
    for (int64_t dim : shaped.getShape())
      if (!ShapedType::isDynamic(dim) && llvm::MulOverflow(count, dim, count))
        return true;
    return false;
  };
  WalkResult result = root->walk([&](Operation *op) -> WalkResult {
    SmallVector<Type> types(op->getResultTypes());
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          types.push_back(arg.getType());
    if (auto func = dyn_cast<FunctionOpInterface>(op)) {
      llvm::append_range(types, func.getArgumentTypes());
      llvm::append_range(types, func.getResultTypes());
    }
    for (Type type : types)
      if (overflows(type))
        return op->emitOpError() << "uses " << type
                                 << ", whose element count does not fit in int64";
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

} // namespace mlir::xla_gpu

#endif // XLA_GPU_PASSES_TENSORTYPECONVERSION_H
