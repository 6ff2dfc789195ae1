//===- RangeInference.h - integer ranges of index values ------------------===//
//
// What xla-simplify-arith and xla-simplify-affine know about an index or
// integer value: constants, `xla.range` on gpu ids, scf.for induction
// variables, apply_indexing results (over the map's domain) and simple arith.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_PASSES_RANGEINFERENCE_H
#define XLA_GPU_PASSES_RANGEINFERENCE_H

#include <optional>

#include "IndexingMap.h"
#include "mlir/IR/Value.h"

namespace mlir::xla_gpu {

/// The closed range of `value`, or std::nullopt when unknown. Looks through
/// at most a few levels of defining ops.
std::optional<Interval> inferRange(Value value);

/// The `xla.range = [lo : index, hi : index]` attribute of an op, if any.
std::optional<Interval> getXlaRange(Operation *op);

} // namespace mlir::xla_gpu

#endif // XLA_GPU_PASSES_RANGEINFERENCE_H
