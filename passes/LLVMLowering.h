//===- LLVMLowering.h - patterns both LLVM lowerings share ------*- C++ -*-===//
//
// xla-lower-to-llvm (cuda) and xla-lower-to-host (cpu) differ in how math,
// gpu and shared memory lower; the rest of the conversion is this.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_PASSES_LLVMLOWERING_H
#define XLA_GPU_PASSES_LLVMLOWERING_H

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"

namespace mlir::xla_gpu {

// func, arith, cf, index and vector to LLVM, with signed floor/ceil division
// expanded first (xla-simplify-affine emits floordivsi where a dividend may
// be negative).
inline void populateCommonToLLVMPatterns(LLVMTypeConverter &converter,
                                         RewritePatternSet &patterns) {
  arith::populateCeilFloorDivExpandOpsPatterns(patterns);
  populateFuncToLLVMConversionPatterns(converter, patterns);
  arith::populateArithToLLVMConversionPatterns(converter, patterns);
  cf::populateControlFlowToLLVMConversionPatterns(converter, patterns);
  index::populateIndexToLLVMConversionPatterns(converter, patterns);
  populateVectorToLLVMConversionPatterns(converter, patterns);
}

} // namespace mlir::xla_gpu

#endif // XLA_GPU_PASSES_LLVMLOWERING_H
