//===- XlaGpuDialect.h - the xla_gpu dialect ------------------------------===//
//
// Everything a user of the dialect needs: the dialect, #xla_gpu.indexing_map
// and the ops.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_DIALECT_XLAGPUDIALECT_H
#define XLA_GPU_DIALECT_XLAGPUDIALECT_H

#include "IndexingMap.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "XlaGpuDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "XlaGpuAttrs.h.inc"

#define GET_OP_CLASSES
#include "XlaGpuOps.h.inc"

namespace mlir::xla_gpu {
/// Adds the xla_gpu dialect (and the extensions it needs) to `registry`.
void registerXlaGpuDialect(DialectRegistry &registry);
} // namespace mlir::xla_gpu

#endif // XLA_GPU_DIALECT_XLAGPUDIALECT_H
