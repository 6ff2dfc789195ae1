//===- simplify_affine.cpp - apply_indexing -> arith ----------------------===//

#include <limits>

#include "Passes.h"
#include "RangeInference.h"
#include "XlaGpuDialect.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_SIMPLIFYAFFINEPASS
#include "Passes.h.inc"

namespace {

bool fitsI32(Interval r) {
  return r.lower >= std::numeric_limits<int32_t>::min() &&
         r.upper <= std::numeric_limits<int32_t>::max();
}

class Emitter {
public:
  Emitter(PatternRewriter &rewriter, Location loc, const IndexingMap &map,
          ValueRange operands, Type type)
      : b(rewriter), loc(loc), map(map), operands(operands), type(type) {}

  Value emit(AffineExpr expr) {
    Interval range = map.evaluateRange(expr);
    switch (expr.getKind()) {
    case AffineExprKind::Constant:
      return constant(cast<AffineConstantExpr>(expr).getValue());
    case AffineExprKind::DimId:
      return operand(cast<AffineDimExpr>(expr).getPosition());
    case AffineExprKind::SymbolId:
      return operand(map.getNumDims() +
                     cast<AffineSymbolExpr>(expr).getPosition());
    default:
      break;
    }
    auto bin = cast<AffineBinaryOpExpr>(expr);
    auto flags = [&](Interval l, Interval r) {
      bool nonNegative = l.lower >= 0 && r.lower >= 0 && range.lower >= 0;
      return arith::IntegerOverflowFlags(
          static_cast<uint32_t>(arith::IntegerOverflowFlags::nsw) |
          (nonNegative ? static_cast<uint32_t>(arith::IntegerOverflowFlags::nuw)
                       : 0));
    };
    Interval lhsRange = map.evaluateRange(bin.getLHS());
    if (expr.getKind() == AffineExprKind::Add) {
      // a + b * -c as a - b * c.
      if (auto mul = dyn_cast<AffineBinaryOpExpr>(bin.getRHS());
          mul && mul.getKind() == AffineExprKind::Mul) {
        if (auto c = dyn_cast<AffineConstantExpr>(mul.getRHS());
            c && c.getValue() < 0 && c.getValue() != INT64_MIN) {
          AffineExpr positive = mul.getLHS() * -c.getValue();
          return arith::SubIOp::create(b, loc, emit(bin.getLHS()),
                                       emit(positive),
                                       arith::IntegerOverflowFlags::nsw);
        }
      }
      return arith::AddIOp::create(b, loc, emit(bin.getLHS()),
                                   emit(bin.getRHS()),
                                   flags(lhsRange, map.evaluateRange(bin.getRHS())));
    }
    if (expr.getKind() == AffineExprKind::Mul)
      return arith::MulIOp::create(b, loc, emit(bin.getLHS()),
                                   emit(bin.getRHS()),
                                   flags(lhsRange, map.evaluateRange(bin.getRHS())));
    int64_t c = cast<AffineConstantExpr>(bin.getRHS()).getValue();
    Value lhs = emit(bin.getLHS());
    Value divisor = constant(c);
    bool nonNegative = lhsRange.lower >= 0;
    switch (expr.getKind()) {
    case AffineExprKind::FloorDiv:
      if (nonNegative) return arith::DivUIOp::create(b, loc, lhs, divisor);
      return arith::FloorDivSIOp::create(b, loc, lhs, divisor);
    case AffineExprKind::CeilDiv:
      if (nonNegative) return arith::CeilDivUIOp::create(b, loc, lhs, divisor);
      return arith::CeilDivSIOp::create(b, loc, lhs, divisor);
    default: {
      if (nonNegative) return arith::RemUIOp::create(b, loc, lhs, divisor);
      // Floor modulo: the signed remainder, shifted up when negative.
      Value rem = arith::RemSIOp::create(b, loc, lhs, divisor);
      Value negative = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                             rem, constant(0));
      Value shifted = arith::AddIOp::create(b, loc, rem, divisor);
      return arith::SelectOp::create(b, loc, negative, shifted, rem);
    }
    }
  }

private:
  Value constant(int64_t v) {
    return arith::ConstantOp::create(b, loc, type, b.getIntegerAttr(type, v));
  }
  Value operand(unsigned i) {
    Value v = operands[i];
    if (v.getType() == type) return v;
    const Variable &var = i < map.getNumDims()
                              ? map.getDims()[i]
                              : map.getSymbols()[i - map.getNumDims()];
    if (var.bounds.lower >= 0)
      return arith::IndexCastUIOp::create(b, loc, type, v);
    return arith::IndexCastOp::create(b, loc, type, v);
  }

  PatternRewriter &b;
  Location loc;
  const IndexingMap &map;
  ValueRange operands;
  Type type;
};

struct LowerApplyIndexing : OpRewritePattern<ApplyIndexingOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ApplyIndexingOp op,
                                PatternRewriter &rewriter) const override {
    const IndexingMap &original = op.getIndexingMap();
    // Narrow the variables to what their operands can be.
    std::vector<Variable> dims = original.getDims(),
                          symbols = original.getSymbols();
    for (auto [i, operand] : llvm::enumerate(op.getOperands())) {
      Variable &var = i < dims.size() ? dims[i] : symbols[i - dims.size()];
      if (auto r = inferRange(operand)) {
        Interval narrowed = var.bounds.intersect(*r);
        if (!narrowed.isEmpty()) var.bounds = narrowed;
      }
    }
    IndexingMap map(original.getAffineMap(), dims, symbols);
    SmallVector<AffineExpr> results;
    for (AffineExpr e : original.getAffineMap().getResults())
      results.push_back(map.simplifyExpr(e));

    // i32 when every operand and every intermediate value fits.
    bool narrow = true;
    for (const Variable &v : llvm::concat<const Variable>(dims, symbols))
      narrow &= fitsI32(v.bounds);
    for (AffineExpr e : results)
      e.walk([&](AffineExpr sub) { narrow &= fitsI32(map.evaluateRange(sub)); });
    Type type = narrow ? Type(rewriter.getI32Type()) : rewriter.getIndexType();

    Emitter emitter(rewriter, op.getLoc(), map, op.getOperands(), type);
    SmallVector<Value> values;
    for (AffineExpr e : results) {
      Value v = emitter.emit(e);
      if (v.getType() != rewriter.getIndexType()) {
        if (map.evaluateRange(e).lower >= 0)
          v = arith::IndexCastUIOp::create(rewriter, op.getLoc(),
                                           rewriter.getIndexType(), v);
        else
          v = arith::IndexCastOp::create(rewriter, op.getLoc(),
                                         rewriter.getIndexType(), v);
      }
      values.push_back(v);
    }
    rewriter.replaceOp(op, values);
    return success();
  }
};

struct SimplifyAffinePass : impl::SimplifyAffinePassBase<SimplifyAffinePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<LowerApplyIndexing>(&getContext());
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace
} // namespace mlir::xla_gpu
