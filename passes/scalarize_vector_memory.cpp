//===- scalarize_vector_memory.cpp - vector loads/stores as scalar ones ---===//
//
// The cpu target after xla-emulate-grid. The emitters give each GPU thread
// a few consecutive elements, read and written as one vector access
// (`llvm.load %p : vector<4xf32>`), which is what the GPU wants. On the
// host, the loop over a block's threads is what should become SIMD code
// (consecutive threads in consecutive lanes), and LLVM's loop vectorizer
// refuses a loop whose body has values of vector type. This pass splits
// every such access into one scalar access per element (the same memory,
// the same flags; atomic and volatile accesses stay whole); the thread loop then has scalar ops only, and the
// vectorizer turns the per-element accesses of consecutive threads into
// interleaved vector accesses. Where the vector was built from, or taken
// apart into, scalars (vector.from_elements, vector.extract), canonicalize
// removes the vector entirely. Small vectors carried through scf.for and
// scf.if (a thread's vector accumulators) become one value per element
// too (splitCarriedVectors, which xla-emulate-grid also runs first).
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "ScalarizeVectors.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_SCALARIZEVECTORMEMORYPASS
#include "Passes.h.inc"

namespace {

// Longer vectors stay as they are (the emitters' vectors are 2 to 8 wide).
constexpr int64_t kMaxElements = 64;

// The element type of a 1-D fixed vector of whole bytes that this pass
// splits, or null.
Type splittableElement(Type type) {
  auto vector = dyn_cast<VectorType>(type);
  if (!vector || vector.getRank() != 1 || vector.isScalable() ||
      vector.getNumElements() > kMaxElements)
    return {};
  Type element = vector.getElementType();
  if (!element.isIntOrFloat() || element.getIntOrFloatBitWidth() % 8 != 0)
    return {};  // i1 vectors are bit-packed in memory
  return element;
}

// The alignment of element `i` of an access aligned to `alignment` (0:
// the ABI alignment, which an element of the vector also has).
unsigned elementAlignment(unsigned alignment, int64_t i, int64_t bytes) {
  if (alignment == 0 || i == 0) return alignment;
  uint64_t offset = static_cast<uint64_t>(i * bytes);
  return std::min<uint64_t>(alignment, offset & (~offset + 1));
}

Value elementAddress(OpBuilder &b, Location loc, Value base, Type element,
                     int64_t i) {
  if (i == 0) return base;
  return LLVM::GEPOp::create(b, loc, base.getType(), element, base,
                             ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)},
                             LLVM::GEPNoWrapFlags::inbounds);
}

// A vector of at most 64 bits that is only loaded and stored whole (a
// copy: the transposes and concatenates move 4 x bf16 per thread) moves as
// one integer instead: the vectorizer then packs consecutive threads'
// copies into contiguous vector accesses without shuffles.
bool isWholeCopy(LLVM::LoadOp load) {
  auto vector = cast<VectorType>(load.getType());
  unsigned bits = vector.getNumElements() * vector.getElementTypeBitWidth();
  if (bits > 64 || !llvm::isPowerOf2_32(bits) || load.getResult().use_empty())
    return false;
  return llvm::all_of(load.getResult().getUses(), [](OpOperand &use) {
    auto store = dyn_cast<LLVM::StoreOp>(use.getOwner());
    return store && use.getOperandNumber() == 0 && !store.getVolatile_() &&
           store.getOrdering() == LLVM::AtomicOrdering::not_atomic;
  });
}

void copyAsInteger(LLVM::LoadOp load) {
  auto vector = cast<VectorType>(load.getType());
  auto integer = IntegerType::get(load.getContext(),
                                  vector.getNumElements() * vector.getElementTypeBitWidth());
  OpBuilder b(load);
  auto whole = LLVM::LoadOp::create(
      b, load.getLoc(), integer, load.getAddr(), load.getAlignment().value_or(0),
      /*isVolatile=*/false, load.getNontemporal(), load.getInvariant(),
      load.getInvariantGroup());
  whole.setAccessGroupsAttr(load.getAccessGroupsAttr());
  for (OpOperand &use : llvm::make_early_inc_range(load.getResult().getUses())) {
    auto store = cast<LLVM::StoreOp>(use.getOwner());
    b.setInsertionPoint(store);
    auto copy = LLVM::StoreOp::create(
        b, store.getLoc(), whole.getResult(), store.getAddr(),
        store.getAlignment().value_or(0), /*isVolatile=*/false,
        store.getNontemporal(), store.getInvariantGroup());
    copy.setAccessGroupsAttr(store.getAccessGroupsAttr());
    store.erase();
  }
  load.erase();
}

// The per-access metadata of `from` on `to`: access groups (the thread
// loop's parallel accesses, xla-emulate-grid: LLVM takes a loop for
// parallel only when every access in it is in the group), alias scopes and
// TBAA.
template <typename OpT>
void copyAccessMetadata(OpT from, OpT to) {
  to.setAccessGroupsAttr(from.getAccessGroupsAttr());
  to.setAliasScopesAttr(from.getAliasScopesAttr());
  to.setNoaliasScopesAttr(from.getNoaliasScopesAttr());
  to.setTbaaAttr(from.getTbaaAttr());
}

void splitLoad(LLVM::LoadOp load, Type element) {
  auto vector = cast<VectorType>(load.getType());
  int64_t n = vector.getNumElements();
  int64_t bytes = element.getIntOrFloatBitWidth() / 8;
  OpBuilder b(load);
  Location loc = load.getLoc();
  SmallVector<Value> elements;
  for (int64_t i = 0; i < n; ++i) {
    Value addr = elementAddress(b, loc, load.getAddr(), element, i);
    auto part = LLVM::LoadOp::create(
        b, loc, element, addr,
        elementAlignment(load.getAlignment().value_or(0), i, bytes),
        /*isVolatile=*/false, load.getNontemporal(), load.getInvariant(),
        load.getInvariantGroup());
    copyAccessMetadata(load, part);
    elements.push_back(part);
  }
  Value whole = vector::FromElementsOp::create(b, loc, vector, elements);
  load.getResult().replaceAllUsesWith(whole);
  load.erase();
}

void splitStore(LLVM::StoreOp store, Type element) {
  Value value = store.getValue();
  int64_t n = cast<VectorType>(value.getType()).getNumElements();
  int64_t bytes = element.getIntOrFloatBitWidth() / 8;
  OpBuilder b(store);
  Location loc = store.getLoc();
  auto fromElements = value.getDefiningOp<vector::FromElementsOp>();
  for (int64_t i = 0; i < n; ++i) {
    Value scalar = fromElements
                       ? fromElements.getElements()[i]
                       : vector::ExtractOp::create(b, loc, value,
                                                   ArrayRef<int64_t>{i})
                             .getResult();
    Value addr = elementAddress(b, loc, store.getAddr(), element, i);
    auto part = LLVM::StoreOp::create(
        b, loc, scalar, addr,
        elementAlignment(store.getAlignment().value_or(0), i, bytes),
        /*isVolatile=*/false, store.getNontemporal(),
        store.getInvariantGroup());
    copyAccessMetadata(store, part);
  }
  store.erase();
}

// The element values of a 1-D vector `v` (vector.extract each).
SmallVector<Value> elementsOf(OpBuilder &b, Location loc, Value v) {
  auto vector = cast<VectorType>(v.getType());
  if (auto fromElements = v.getDefiningOp<vector::FromElementsOp>())
    return SmallVector<Value>(fromElements.getElements());
  SmallVector<Value> elements;
  for (int64_t i = 0; i < vector.getNumElements(); ++i)
    elements.push_back(vector::ExtractOp::create(b, loc, v, ArrayRef<int64_t>{i}));
  return elements;
}

// A small 1-D vector carried through control flow (loop-carried, or an
// scf.if result) becomes one value per element: after convert-scf-to-cf
// it would be a vector-typed block argument (a phi), which stops LLVM's
// loop vectorizer as a vector load does.
bool isCarriedVector(Type type) {
  auto vector = dyn_cast<VectorType>(type);
  return vector && vector.getRank() == 1 && !vector.isScalable() &&
         vector.getNumElements() <= kMaxElements &&
         vector.getElementType().isIntOrFloat();
}

// `values` with each carried vector replaced by its elements.
SmallVector<Value> flattenCarried(OpBuilder &b, Location loc, ValueRange values) {
  SmallVector<Value> flat;
  for (Value v : values) {
    if (isCarriedVector(v.getType()))
      llvm::append_range(flat, elementsOf(b, loc, v));
    else
      flat.push_back(v);
  }
  return flat;
}

// The values of `types` rebuilt from `flat` (the flattenCarried form):
// a carried vector from its elements.
SmallVector<Value> regroupCarried(OpBuilder &b, Location loc, TypeRange types,
                                  ValueRange flat) {
  SmallVector<Value> values;
  unsigned next = 0;
  for (Type type : types) {
    if (!isCarriedVector(type)) {
      values.push_back(flat[next++]);
      continue;
    }
    auto vector = cast<VectorType>(type);
    SmallVector<Value> elements(flat.slice(next, vector.getNumElements()));
    next += vector.getNumElements();
    values.push_back(vector::FromElementsOp::create(b, loc, vector, elements).getResult());
  }
  return values;
}

void flattenYield(Block &block) {
  auto yield = cast<scf::YieldOp>(block.getTerminator());
  OpBuilder inner(yield);
  yield->setOperands(flattenCarried(inner, yield.getLoc(), yield.getOperands()));
}

// `op`'s results replaced by those of `split`, which carries the
// vectors element by element; `op` is erased.
void replaceCarrier(Operation *op, Operation *split) {
  OpBuilder b(op->getContext());
  b.setInsertionPointAfter(split);
  SmallVector<Value> values =
      regroupCarried(b, op->getLoc(), op->getResultTypes(), split->getResults());
  op->replaceAllUsesWith(values);
  op->erase();
}

void splitIfResults(scf::IfOp op) {
  SmallVector<Type> types;
  for (Type type : op.getResultTypes()) {
    if (!isCarriedVector(type)) {
      types.push_back(type);
      continue;
    }
    auto vector = cast<VectorType>(type);
    types.append(vector.getNumElements(), vector.getElementType());
  }
  OpBuilder b(op);
  auto split = scf::IfOp::create(b, op.getLoc(), types, op.getCondition(),
                                 /*withElseRegion=*/true);
  for (auto [from, to] : {std::pair{&op.getThenRegion(), &split.getThenRegion()},
                          std::pair{&op.getElseRegion(), &split.getElseRegion()}}) {
    to->getBlocks().clear();
    to->getBlocks().splice(to->end(), from->getBlocks());
    flattenYield(to->front());
  }
  replaceCarrier(op, split);
}

void splitLoopCarried(scf::ForOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto split = scf::ForOp::create(b, loc, op.getLowerBound(), op.getUpperBound(),
                                  op.getStep(), flattenCarried(b, loc, op.getInitArgs()));
  split->setDiscardableAttrs(op->getDiscardableAttrDictionary());
  Block *oldBody = op.getBody(), *newBody = split.getBody();
  // The old body's arguments, rebuilt from the new body's at its start.
  OpBuilder start = OpBuilder::atBlockBegin(newBody);
  SmallVector<Value> replacements{split.getInductionVar()};
  llvm::append_range(replacements,
                     regroupCarried(start, loc, op.getInitArgs().getTypes(),
                                    newBody->getArguments().drop_front()));
  // scf.for::create gave the new body a yield of nothing: the old body's
  // ops (and its yield) replace it.
  if (!newBody->empty() && newBody->back().hasTrait<OpTrait::IsTerminator>())
    newBody->back().erase();
  newBody->getOperations().splice(newBody->end(), oldBody->getOperations());
  for (auto [from, to] : llvm::zip(oldBody->getArguments(), replacements))
    from.replaceAllUsesWith(to);
  flattenYield(*newBody);
  replaceCarrier(op, split);
}

} // namespace

void splitCarriedVectors(Operation *root) {
  // Inner ops before the ops holding them (a post-order walk).
  SmallVector<Operation *> carriers;
  root->walk([&](Operation *op) {
    if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
      if (llvm::any_of(ifOp.getResultTypes(), isCarriedVector))
        carriers.push_back(op);
    } else if (auto forOp = dyn_cast<scf::ForOp>(op)) {
      if (llvm::any_of(forOp.getResultTypes(), isCarriedVector))
        carriers.push_back(op);
    }
  });
  for (Operation *op : carriers) {
    if (auto ifOp = dyn_cast<scf::IfOp>(op)) splitIfResults(ifOp);
    else splitLoopCarried(cast<scf::ForOp>(op));
  }
}

namespace {

struct ScalarizeVectorMemoryPass
    : impl::ScalarizeVectorMemoryPassBase<ScalarizeVectorMemoryPass> {
  void runOnOperation() override {
    splitCarriedVectors(getOperation());

    SmallVector<LLVM::LoadOp> loads;
    SmallVector<LLVM::StoreOp> stores;
    getOperation()->walk([&](Operation *op) {
      if (auto load = dyn_cast<LLVM::LoadOp>(op)) {
        if (load.getOrdering() == LLVM::AtomicOrdering::not_atomic &&
            !load.getVolatile_() && splittableElement(load.getType()))
          loads.push_back(load);
      } else if (auto store = dyn_cast<LLVM::StoreOp>(op)) {
        if (store.getOrdering() == LLVM::AtomicOrdering::not_atomic &&
            !store.getVolatile_() &&
            splittableElement(store.getValue().getType()))
          stores.push_back(store);
      }
    });
    // Whole copies first (their stores go with them), then loads: a store
    // of a loaded vector then sees its elements.
    SmallVector<LLVM::LoadOp> copies, splits;
    llvm::DenseSet<Operation *> copyStores;
    for (LLVM::LoadOp load : loads) {
      if (!isWholeCopy(load)) {
        splits.push_back(load);
        continue;
      }
      copies.push_back(load);
      for (Operation *user : load.getResult().getUsers()) copyStores.insert(user);
    }
    for (LLVM::LoadOp load : copies) copyAsInteger(load);
    for (LLVM::LoadOp load : splits)
      splitLoad(load, splittableElement(load.getType()));
    for (LLVM::StoreOp store : stores)
      if (!copyStores.contains(store))
        splitStore(store, splittableElement(store.getValue().getType()));
  }
};

} // namespace
} // namespace mlir::xla_gpu
