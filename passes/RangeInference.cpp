//===- RangeInference.cpp - integer ranges of index values ----------------===//

#include "RangeInference.h"

#include "XlaGpuDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Matchers.h"

namespace mlir::xla_gpu {
namespace {

constexpr int kMaxDepth = 12;

std::optional<Interval> combine(std::optional<Interval> a,
                                std::optional<Interval> b, bool add) {
  if (!a || !b) return std::nullopt;
  int64_t lo, hi;
  if (add) {
    if (__builtin_add_overflow(a->lower, b->lower, &lo) ||
        __builtin_add_overflow(a->upper, b->upper, &hi))
      return std::nullopt;
  } else {
    if (__builtin_sub_overflow(a->lower, b->upper, &lo) ||
        __builtin_sub_overflow(a->upper, b->lower, &hi))
      return std::nullopt;
  }
  return Interval{lo, hi};
}

std::optional<Interval> multiply(std::optional<Interval> a,
                                 std::optional<Interval> b) {
  if (!a || !b) return std::nullopt;
  int64_t p[4];
  if (__builtin_mul_overflow(a->lower, b->lower, &p[0]) ||
      __builtin_mul_overflow(a->lower, b->upper, &p[1]) ||
      __builtin_mul_overflow(a->upper, b->lower, &p[2]) ||
      __builtin_mul_overflow(a->upper, b->upper, &p[3]))
    return std::nullopt;
  return Interval{*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
}

std::optional<Interval> infer(Value value, int depth);

std::optional<Interval> inferApplyIndexing(ApplyIndexingOp op, unsigned result,
                                           int depth) {
  const IndexingMap &map = op.getIndexingMap();
  // Results are only defined on the domain: operands are narrowed to it.
  std::vector<Variable> dims = map.getDims(), symbols = map.getSymbols();
  for (auto [i, operand] : llvm::enumerate(op.getOperands())) {
    Variable &var = i < dims.size() ? dims[i] : symbols[i - dims.size()];
    if (auto r = infer(operand, depth + 1))
      var.bounds = var.bounds.intersect(*r);
  }
  IndexingMap narrowed(map.getAffineMap(), dims, symbols);
  Interval r = narrowed.evaluateRange(map.getAffineMap().getResult(result));
  if (r.isEmpty()) return std::nullopt;
  return r;
}

std::optional<Interval> infer(Value value, int depth) {
  if (depth > kMaxDepth) return std::nullopt;
  APInt cst;
  if (matchPattern(value, m_ConstantInt(&cst))) {
    if (cst.getBitWidth() > 64) return std::nullopt;
    int64_t v = cst.getBitWidth() == 1 ? cst.getZExtValue() : cst.getSExtValue();
    return Interval{v, v};
  }
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    auto loop = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp());
    if (!loop || arg != loop.getInductionVar()) return std::nullopt;
    auto lb = infer(loop.getLowerBound(), depth + 1);
    auto ub = infer(loop.getUpperBound(), depth + 1);
    if (!lb || !ub || ub->upper == INT64_MIN) return std::nullopt;
    return Interval{lb->lower, ub->upper - 1};
  }
  Operation *op = value.getDefiningOp();
  if (auto r = getXlaRange(op)) return r;
  if (auto apply = dyn_cast<ApplyIndexingOp>(op))
    return inferApplyIndexing(apply, cast<OpResult>(value).getResultNumber(),
                              depth);
  if (auto add = dyn_cast<arith::AddIOp>(op))
    return combine(infer(add.getLhs(), depth + 1), infer(add.getRhs(), depth + 1),
                   /*add=*/true);
  if (auto sub = dyn_cast<arith::SubIOp>(op))
    return combine(infer(sub.getLhs(), depth + 1), infer(sub.getRhs(), depth + 1),
                   /*add=*/false);
  if (auto mul = dyn_cast<arith::MulIOp>(op))
    return multiply(infer(mul.getLhs(), depth + 1), infer(mul.getRhs(), depth + 1));
  if (isa<arith::IndexCastOp, arith::IndexCastUIOp>(op))
    return infer(op->getOperand(0), depth + 1);
  return std::nullopt;
}

} // namespace

std::optional<Interval> getXlaRange(Operation *op) {
  auto attr = op->getAttrOfType<ArrayAttr>("xla.range");
  if (!attr || attr.size() != 2) return std::nullopt;
  auto lo = dyn_cast<IntegerAttr>(attr[0]), hi = dyn_cast<IntegerAttr>(attr[1]);
  if (!lo || !hi) return std::nullopt;
  return Interval{lo.getInt(), hi.getInt()};
}

std::optional<Interval> inferRange(Value value) { return infer(value, 0); }

} // namespace mlir::xla_gpu
