//===- vectorize_loads_stores.cpp - element accesses -> vector transfers --===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_VECTORIZELOADSSTORESPASS
#include "Passes.h.inc"

namespace {

constexpr int64_t kMaxVectorBits = 128;

// The trip count N of `for %i = 0 to N step 1`, if the loop is one.
std::optional<int64_t> vectorLoopSize(scf::ForOp loop) {
  APInt lb, ub, step;
  if (!matchPattern(loop.getLowerBound(), m_ConstantInt(&lb)) ||
      !matchPattern(loop.getUpperBound(), m_ConstantInt(&ub)) ||
      !matchPattern(loop.getStep(), m_ConstantInt(&step)) || !lb.isZero() ||
      !step.isOne() || ub.getSExtValue() < 2)
    return std::nullopt;
  return ub.getSExtValue();
}

// A contiguous access `base + %iv`: the apply_indexing producing the index,
// and its operands with %iv replaced by 0 (the base, computable before the
// loop).
struct Contiguous {
  IndexingMap map;
  SmallVector<Value> operands;  // loop-invariant, but for the one at ivPos
  unsigned ivPos;
};

std::optional<Contiguous> matchContiguous(Value index, scf::ForOp loop,
                                          int64_t n) {
  auto apply = index.getDefiningOp<ApplyIndexingOp>();
  if (!apply || apply->getNumResults() != 1) return std::nullopt;
  const IndexingMap &map = apply.getIndexingMap();
  Value iv = loop.getInductionVar();
  std::optional<unsigned> ivPos;
  for (auto [i, operand] : llvm::enumerate(apply.getOperands())) {
    if (operand == iv) {
      if (ivPos) return std::nullopt;
      ivPos = i;
    } else if (!loop.isDefinedOutsideOfLoop(operand)) {
      return std::nullopt;
    }
  }
  if (!ivPos) return std::nullopt;
  MLIRContext *ctx = loop.getContext();
  unsigned numDims = map.getNumDims();
  bool ivIsDim = *ivPos < numDims;
  const Variable &ivVar = ivIsDim ? map.getDims()[*ivPos]
                                  : map.getSymbols()[*ivPos - numDims];
  if (!ivVar.bounds.contains(Interval{0, n - 1})) return std::nullopt;
  AffineExpr ivExpr = ivIsDim ? getAffineDimExpr(*ivPos, ctx)
                              : getAffineSymbolExpr(*ivPos - numDims, ctx);
  // Constraints free of %iv hold for all n elements or for none (the
  // access is one vector either way); one on %iv could cut the vector.
  for (const Constraint &c : map.getConstraints()) {
    bool usesIv = false;
    c.expr.walk([&](AffineExpr e) { usesIv |= e == ivExpr; });
    if (usesIv) return std::nullopt;
  }
  AffineExpr expr = map.getAffineMap().getResult(0);
  AffineExpr zero = getAffineConstantExpr(0, ctx);
  AffineExpr base = expr.replace(ivExpr, zero);
  // expr == base + iv, and base a multiple of n everywhere in the domain.
  if (map.simplifyExpr(expr) != map.simplifyExpr(base + ivExpr) ||
      map.simplifyExpr(base % n) != zero)
    return std::nullopt;
  return Contiguous{map, SmallVector<Value>(apply.getOperands()), *ivPos};
}

bool isVectorizable(RankedTensorType tensor, int64_t n) {
  Type element = tensor.getElementType();
  if (tensor.getRank() != 1 || !tensor.hasStaticShape() ||
      tensor.getDimSize(0) % n != 0 || !element.isIntOrFloat())
    return false;
  unsigned bits = element.getIntOrFloatBitWidth();
  return bits >= 8 && n * bits <= kMaxVectorBits;
}

// The base index (the access at %iv = 0), built at the insertion point.
Value hoistBase(OpBuilder &b, Location loc, const Contiguous &access) {
  SmallVector<Value> operands(access.operands);
  operands[access.ivPos] = arith::ConstantIndexOp::create(b, loc, 0);
  return ApplyIndexingOp::create(b, loc, operands, access.map).getResult(0);
}

void vectorizeReads(scf::ForOp loop, int64_t n) {
  OpBuilder b(loop);
  for (auto extract :
       llvm::make_early_inc_range(loop.getBody()->getOps<tensor::ExtractOp>())) {
    auto type = extract.getTensor().getType();
    if (extract.getIndices().size() != 1 || !isVectorizable(type, n) ||
        !loop.isDefinedOutsideOfLoop(extract.getTensor()))
      continue;
    auto access = matchContiguous(extract.getIndices()[0], loop, n);
    if (!access) continue;
    b.setInsertionPoint(loop);
    Location loc = extract.getLoc();
    Value base = hoistBase(b, loop.getLoc(), *access);
    Value pad = arith::ConstantOp::create(
        b, loc, b.getZeroAttr(type.getElementType()));
    auto vectorType = VectorType::get({n}, type.getElementType());
    Value vector = vector::TransferReadOp::create(
        b, loc, vectorType, extract.getTensor(), ValueRange{base}, pad,
        ArrayRef<bool>{true});
    b.setInsertionPoint(extract);
    Value element = vector::ExtractOp::create(
        b, loc, vector, ArrayRef<OpFoldResult>{loop.getInductionVar()});
    extract.replaceAllUsesWith(element);
    extract.erase();
  }
}

void vectorizeWrites(scf::ForOp loop, int64_t n) {
  // tensor.insert into an iteration argument whose result is yielded back
  // at the same position, the argument used by nothing else.
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  struct Write {
    tensor::InsertOp insert;
    unsigned position;
    Contiguous access;
  };
  SmallVector<Write> writes;
  for (auto [position, arg] : llvm::enumerate(loop.getRegionIterArgs())) {
    if (!arg.hasOneUse()) continue;
    auto insert = dyn_cast<tensor::InsertOp>(*arg.getUsers().begin());
    if (!insert || insert->getBlock() != loop.getBody() ||
        insert.getDest() != arg || !insert->hasOneUse() ||
        *insert->getUsers().begin() != yield ||
        yield.getOperand(position) != insert.getResult() ||
        insert.getIndices().size() != 1 ||
        !isVectorizable(insert.getDest().getType(), n))
      continue;
    if (auto access = matchContiguous(insert.getIndices()[0], loop, n))
      writes.push_back({insert, static_cast<unsigned>(position), *access});
  }
  if (writes.empty()) return;

  IRRewriter rewriter(loop.getContext());
  rewriter.setInsertionPoint(loop);
  SmallVector<Value> vectorInits;
  for (Write &w : writes) {
    auto vectorType = VectorType::get({n}, w.insert.getScalar().getType());
    vectorInits.push_back(arith::ConstantOp::create(
        rewriter, loop.getLoc(), rewriter.getZeroAttr(vectorType)));
  }
  unsigned firstNew = loop.getNumResults();
  auto newLoop = cast<scf::ForOp>(*loop.replaceWithAdditionalYields(
      rewriter, vectorInits, /*replaceInitOperandUsesInLoop=*/false,
      [&](OpBuilder &b, Location loc, ArrayRef<BlockArgument> newArgs) {
        // The new body's induction variable is its first argument.
        Value iv = newArgs.front().getOwner()->getArgument(0);
        SmallVector<Value> yielded;
        for (auto [w, arg] : llvm::zip(writes, newArgs))
          yielded.push_back(vector::InsertOp::create(
              b, w.insert.getLoc(), w.insert.getScalar(), arg,
              ArrayRef<OpFoldResult>{iv}));
        return yielded;
      }));
  // The tensor passes through the loop unchanged. (The inserts are gone
  // after this: keep their locations.)
  SmallVector<Location> locs;
  for (Write &w : writes) {
    locs.push_back(w.insert.getLoc());
    rewriter.replaceOp(w.insert, w.insert.getDest());
  }
  rewriter.setInsertionPointAfter(newLoop);
  for (auto [i, w] : llvm::enumerate(writes)) {
    Value tensor = newLoop.getInitArgs()[w.position];
    // Computed after the loop; CSE merges it with a read's equal base.
    Value base = hoistBase(rewriter, newLoop.getLoc(), w.access);
    auto write = vector::TransferWriteOp::create(
        rewriter, locs[i], newLoop.getResult(firstNew + i), tensor,
        ValueRange{base}, ArrayRef<bool>{true});
    newLoop.getResult(w.position).replaceAllUsesWith(write.getResult());
  }
}

struct VectorizeLoadsStoresPass
    : impl::VectorizeLoadsStoresPassBase<VectorizeLoadsStoresPass> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) { loops.push_back(loop); });
    for (scf::ForOp loop : loops) {
      auto n = vectorLoopSize(loop);
      if (!n) continue;
      vectorizeReads(loop, *n);
      vectorizeWrites(loop, *n);
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
