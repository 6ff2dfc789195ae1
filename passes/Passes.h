//===- Passes.h - xla_gpu passes ------------------------------------------===//

#ifndef XLA_GPU_PASSES_PASSES_H
#define XLA_GPU_PASSES_PASSES_H

#include <memory>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DECL
#include "Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "Passes.h.inc"

} // namespace mlir::xla_gpu

#endif // XLA_GPU_PASSES_PASSES_H
