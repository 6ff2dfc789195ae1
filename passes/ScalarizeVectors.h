//===- ScalarizeVectors.h - small vectors as one value per element --------===//
//
// Shared by xla-scalarize-vector-memory and xla-emulate-grid (the cpu
// target): small 1-D vectors carried through scf control flow become one
// value per element.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_PASSES_SCALARIZE_VECTORS_H
#define XLA_GPU_PASSES_SCALARIZE_VECTORS_H

#include "mlir/IR/Operation.h"

namespace mlir::xla_gpu {

/// Every scf.if result and scf.for loop-carried value under `root` of a
/// small 1-D vector type becomes one result or iter_arg per element
/// (vector.from_elements rebuilds the vector for its uses, vector.extract
/// takes the yielded one apart; canonicalize folds the pairs away). After
/// convert-scf-to-cf such a vector would be a vector-typed block argument,
/// which LLVM's loop vectorizer refuses in the loop it belongs to.
void splitCarriedVectors(Operation *root);

} // namespace mlir::xla_gpu

#endif // XLA_GPU_PASSES_SCALARIZE_VECTORS_H
