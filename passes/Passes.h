//===- Passes.h - xla_gpu passes ------------------------------------------===//

#ifndef XLA_GPU_PASSES_PASSES_H
#define XLA_GPU_PASSES_PASSES_H

#include <memory>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Complex/IR/Complex.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "XlaGpuDialect.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DECL
#include "Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Passes.h.inc"

/// Lowers every xla_gpu.loop under `root` to scf.for + scf.if +
/// apply_indexing (shared by the two lowering passes). Fails, with a
/// diagnostic at the loop, when one cannot be lowered.
LogicalResult lowerXlaLoopsToScf(Operation *root);

} // namespace mlir::xla_gpu

#endif // XLA_GPU_PASSES_PASSES_H
