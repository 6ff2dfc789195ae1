//===- lower_tensors.cpp - tensors -> bare pointers, loads and stores -----===//

#include "Passes.h"
#include "TensorTypeConversion.h"
#include "XlaGpuDialect.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "mlir/Dialect/Complex/IR/Complex.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERTENSORSPASS
#include "Passes.h.inc"

namespace {

constexpr unsigned kSharedMemorySpace = 3;

// The function argument a tensor value is (an in-place update of), if any.
// `cache` remembers the scf.if results already traced: without it a chain
// of n ifs (unrolled bounds checks) costs 2^n.
BlockArgument traceToArgument(Value value,
                              llvm::DenseMap<Value, BlockArgument> &cache) {
  for (int steps = 0; steps < 1000; ++steps) {
    if (auto arg = dyn_cast<BlockArgument>(value)) {
      Operation *parent = arg.getOwner()->getParentOp();
      if (isa<func::FuncOp>(parent)) return arg;
      if (auto loop = dyn_cast<scf::ForOp>(parent)) {
        if (arg == loop.getInductionVar()) return {};
        value = loop.getInitArgs()[arg.getArgNumber() - 1];
        continue;
      }
      return {};
    }
    Operation *op = value.getDefiningOp();
    unsigned result = cast<OpResult>(value).getResultNumber();
    if (auto insert = dyn_cast<tensor::InsertOp>(op)) value = insert.getDest();
    else if (auto atomic = dyn_cast<AtomicRMWOp>(op)) value = atomic.getInput();
    else if (auto write = dyn_cast<vector::TransferWriteOp>(op))
      value = write.getBase();
    else if (auto loop = dyn_cast<scf::ForOp>(op))
      value = loop.getInitArgs()[result];
    else if (auto loop = dyn_cast<LoopOp>(op))
      value = loop.getInits()[result];
    else if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
      if (auto it = cache.find(value); it != cache.end()) return it->second;
      BlockArgument a =
          traceToArgument(ifOp.thenYield().getOperand(result), cache);
      if (!ifOp.elseBlock() ||
          traceToArgument(ifOp.elseYield().getOperand(result), cache) != a)
        a = {};
      cache[value] = a;
      return a;
    } else if (auto switchOp = dyn_cast<scf::IndexSwitchOp>(op)) {
      // Every region must update the same argument.
      if (auto it = cache.find(value); it != cache.end()) return it->second;
      BlockArgument a;
      bool first = true;
      for (Region &region : switchOp->getRegions()) {
        auto yield = cast<scf::YieldOp>(region.front().getTerminator());
        BlockArgument b = traceToArgument(yield.getOperand(result), cache);
        if (first) a = b;
        else if (b != a) a = {};
        first = false;
      }
      cache[value] = a;
      return a;
    } else {
      return {};
    }
  }
  return {};
}

// Element types as stored in memory: i1 takes a byte, complex<T> is a
// struct of its real and imaginary parts (as XLA and C lay them out).
Type storageType(Type element) {
  if (element.isInteger(1)) return IntegerType::get(element.getContext(), 8);
  if (auto complex = dyn_cast<ComplexType>(element)) {
    Type part = complex.getElementType();
    return LLVM::LLVMStructType::getLiteral(element.getContext(), {part, part});
  }
  return element;
}

// A loaded complex<T> struct as a complex value (complex.create of its
// parts: `convert-complex-to-standard` and xla-expand-complex then keep the
// parts apart).
Value complexFromStruct(OpBuilder &b, Location loc, ComplexType type,
                        Value loaded) {
  Value re = LLVM::ExtractValueOp::create(b, loc, loaded, ArrayRef<int64_t>{0});
  Value im = LLVM::ExtractValueOp::create(b, loc, loaded, ArrayRef<int64_t>{1});
  return complex::CreateOp::create(b, loc, type, re, im);
}

// A complex value as the struct stored for it.
Value structFromComplex(OpBuilder &b, Location loc, Value value) {
  Type storage = storageType(value.getType());
  Value result = LLVM::PoisonOp::create(b, loc, storage);
  result = LLVM::InsertValueOp::create(
      b, loc, result, complex::ReOp::create(b, loc, value), ArrayRef<int64_t>{0});
  return LLVM::InsertValueOp::create(
      b, loc, result, complex::ImOp::create(b, loc, value), ArrayRef<int64_t>{1});
}

// The GEP index: an i32 index cast to `index` is used as it is, anything
// else becomes i64.
Value gepIndex(OpBuilder &b, Location loc, Value index) {
  if (auto cast = index.getDefiningOp<arith::IndexCastUIOp>())
    if (cast.getIn().getType().isInteger(32)) return cast.getIn();
  return arith::IndexCastUIOp::create(b, loc, b.getI64Type(), index);
}

// The address of element `indices` (one index, or none for a rank-0
// tensor) of the buffer at `ptr`.
Value elementAddress(OpBuilder &b, Location loc, Value ptr, Type element,
                     ValueRange indices) {
  Value index = indices.empty() ? arith::ConstantIndexOp::create(b, loc, 0)
                                : indices.front();
  return LLVM::GEPOp::create(b, loc, ptr.getType(), storageType(element), ptr,
                             ValueRange{gepIndex(b, loc, index)},
                             LLVM::GEPNoWrapFlags::inbounds);
}

struct Analysis {
  // extract / transfer_read ops that read arguments the function never
  // writes: their loads are invariant.
  llvm::DenseSet<Operation *> invariantReads;
};

struct LowerExtract : OpConversionPattern<tensor::ExtractOp> {
  LowerExtract(const TypeConverter &c, MLIRContext *ctx, const Analysis &a)
      : OpConversionPattern(c, ctx), analysis(a) {}
  LogicalResult
  matchAndRewrite(tensor::ExtractOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type element = op.getType();
    Value addr = elementAddress(rewriter, loc, adaptor.getTensor(), element,
                                adaptor.getIndices());
    Value loaded = LLVM::LoadOp::create(
        rewriter, loc, storageType(element), addr, /*alignment=*/0,
        /*isVolatile=*/false, /*isNonTemporal=*/false,
        /*isInvariant=*/analysis.invariantReads.contains(op));
    if (auto complex = dyn_cast<ComplexType>(element))
      loaded = complexFromStruct(rewriter, loc, complex, loaded);
    else if (storageType(element) != element)
      loaded = arith::TruncIOp::create(rewriter, loc, element, loaded);
    rewriter.replaceOp(op, loaded);
    return success();
  }
  const Analysis &analysis;
};

struct LowerInsert : OpConversionPattern<tensor::InsertOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(tensor::InsertOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type element = op.getScalar().getType();
    Value addr = elementAddress(rewriter, loc, adaptor.getDest(), element,
                                adaptor.getIndices());
    Value value = adaptor.getScalar();
    if (isa<ComplexType>(element))
      value = structFromComplex(rewriter, loc, value);
    else if (storageType(element) != element)
      value = arith::ExtUIOp::create(rewriter, loc, storageType(element), value);
    LLVM::StoreOp::create(rewriter, loc, value, addr);
    rewriter.replaceOp(op, adaptor.getDest());
    return success();
  }
};

struct LowerTransferRead : OpConversionPattern<vector::TransferReadOp> {
  LowerTransferRead(const TypeConverter &c, MLIRContext *ctx, const Analysis &a)
      : OpConversionPattern(c, ctx), analysis(a) {}
  LogicalResult
  matchAndRewrite(vector::TransferReadOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    VectorType type = op.getVectorType();
    if (type.getRank() != 1 || adaptor.getIndices().size() != 1 ||
        storageType(type.getElementType()) != type.getElementType() ||
        !op.getInBoundsValues()[0])
      return rewriter.notifyMatchFailure(op, "not an in-bounds 1-d read");
    Location loc = op.getLoc();
    Value addr = elementAddress(rewriter, loc, adaptor.getBase(),
                                type.getElementType(), adaptor.getIndices());
    rewriter.replaceOp(op, LLVM::LoadOp::create(
                               rewriter, loc, type, addr, /*alignment=*/0,
                               false, false,
                               analysis.invariantReads.contains(op)));
    return success();
  }
  const Analysis &analysis;
};

struct LowerTransferWrite : OpConversionPattern<vector::TransferWriteOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(vector::TransferWriteOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    VectorType type = op.getVectorType();
    if (type.getRank() != 1 || adaptor.getIndices().size() != 1 ||
        storageType(type.getElementType()) != type.getElementType() ||
        !op.getInBoundsValues()[0] || !op.getResult())
      return rewriter.notifyMatchFailure(op, "not an in-bounds 1-d write");
    Location loc = op.getLoc();
    Value addr = elementAddress(rewriter, loc, adaptor.getBase(),
                                type.getElementType(), adaptor.getIndices());
    LLVM::StoreOp::create(rewriter, loc, adaptor.getValueToStore(), addr);
    rewriter.replaceOp(op, adaptor.getBase());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// xla_gpu.atomic_rmw
//
// A region that combines %current with one value by an op LLVM has an
// atomicrmw for becomes that atomicrmw (monotonic); a region that yields a
// value independent of %current an atomic exchange. Anything else runs in
// a compare-and-swap loop:
//
//   %init = llvm.load %addr atomic monotonic
//   scf.while (%old = %init) {
//     %new = <region>(%old)
//     %seen, %ok = llvm.cmpxchg %addr, %old, %new monotonic monotonic
//     scf.condition(!%ok) %seen
//   }
//
// Elements narrower than 32 bits are updated through the aligned 32-bit
// word that holds them: the CAS loop extracts the element from the word
// and puts the new one back (or/and/xor are word-wide atomics with the
// other bytes left unchanged). Little-endian, as NVPTX and x86 are.
//===----------------------------------------------------------------------===//

// How one atomic_rmw is done without a loop.
struct AtomicPlan {
  enum Kind { kNothing, kExchange, kBinary, kWordBitwise } kind;
  LLVM::AtomicBinOp binOp = LLVM::AtomicBinOp::xchg;
  Value operand;                        // combined with %current
  SmallVector<Operation *> independent; // region ops run once, before
};

std::optional<LLVM::AtomicBinOp> hardwareBinOp(Operation *op, Type element,
                                               bool native16BitFloatAdd) {
  unsigned bits = element.getIntOrFloatBitWidth();
  if (isa<FloatType>(element)) {
    if (native16BitFloatAdd && isa<Float16Type, BFloat16Type>(element) &&
        isa<arith::AddFOp>(op))
      return LLVM::AtomicBinOp::fadd;
    if (bits != 32 && bits != 64) return std::nullopt;
    if (isa<arith::AddFOp>(op)) return LLVM::AtomicBinOp::fadd;
    if (isa<arith::MaxNumFOp>(op)) return LLVM::AtomicBinOp::fmax;
    if (isa<arith::MinNumFOp>(op)) return LLVM::AtomicBinOp::fmin;
    if (isa<arith::MaximumFOp>(op)) return LLVM::AtomicBinOp::fmaximum;
    if (isa<arith::MinimumFOp>(op)) return LLVM::AtomicBinOp::fminimum;
    return std::nullopt;
  }
  if (isa<arith::OrIOp>(op)) return LLVM::AtomicBinOp::_or;
  if (isa<arith::AndIOp>(op)) return LLVM::AtomicBinOp::_and;
  if (isa<arith::XOrIOp>(op)) return LLVM::AtomicBinOp::_xor;
  if (bits != 32 && bits != 64) return std::nullopt;
  if (isa<arith::AddIOp>(op)) return LLVM::AtomicBinOp::add;
  if (isa<arith::MaxSIOp>(op)) return LLVM::AtomicBinOp::max;
  if (isa<arith::MinSIOp>(op)) return LLVM::AtomicBinOp::min;
  if (isa<arith::MaxUIOp>(op)) return LLVM::AtomicBinOp::umax;
  if (isa<arith::MinUIOp>(op)) return LLVM::AtomicBinOp::umin;
  return std::nullopt;
}

// Whether (and how) `op` maps to one atomic instruction.
std::optional<AtomicPlan> planAtomic(AtomicRMWOp op, bool native16BitFloatAdd) {
  Block *body = op.getBody();
  Value current = op.getCurrentValue();
  Value result = cast<YieldOp>(body->getTerminator()).getValues().front();
  Type element = op.getElementType();
  unsigned bits = storageType(element).getIntOrFloatBitWidth();
  llvm::DenseSet<Value> dependent{current};
  Operation *combining = nullptr;
  AtomicPlan plan{AtomicPlan::kNothing};
  for (Operation &inner : body->without_terminator()) {
    bool usesCurrent = false;
    inner.walk([&](Operation *nested) {
      for (Value v : nested->getOperands()) usesCurrent |= dependent.contains(v);
    });
    if (!isMemoryEffectFree(&inner)) return std::nullopt;
    if (!usesCurrent) {
      plan.independent.push_back(&inner);
      continue;
    }
    if (combining) return std::nullopt;  // more than one step
    combining = &inner;
    for (Value r : inner.getResults()) dependent.insert(r);
  }
  if (result == current) return plan;  // writes back what is there
  if (!dependent.contains(result)) {
    if (bits < 32) return std::nullopt;
    plan.kind = AtomicPlan::kExchange;
    plan.operand = result;
    return plan;
  }
  if (combining->getNumResults() != 1 || combining->getNumOperands() != 2 ||
      combining->getNumRegions() != 0 || result != combining->getResult(0))
    return std::nullopt;
  Value lhs = combining->getOperand(0), rhs = combining->getOperand(1);
  if (lhs == current && !dependent.contains(rhs)) plan.operand = rhs;
  else if (rhs == current && !dependent.contains(lhs)) plan.operand = lhs;
  else return std::nullopt;
  std::optional<LLVM::AtomicBinOp> binOp =
      hardwareBinOp(combining, element, native16BitFloatAdd);
  if (!binOp) return std::nullopt;
  plan.binOp = *binOp;
  // Narrow elements go through their word, except the native 16-bit fadd.
  plan.kind = bits < 32 && *binOp != LLVM::AtomicBinOp::fadd
                  ? AtomicPlan::kWordBitwise
                  : AtomicPlan::kBinary;
  return plan;
}

// A complex atomic_rmw that adds a value to %current: the value's
// parts are added to the element's parts by two float atomics (as XLA does;
// each part's sum is exact in the end, the pair is not one atomic update).
std::optional<AtomicPlan> planComplexAdd(AtomicRMWOp op) {
  Block *body = op.getBody();
  Value current = op.getCurrentValue();
  Value result = cast<YieldOp>(body->getTerminator()).getValues().front();
  AtomicPlan plan{AtomicPlan::kBinary, LLVM::AtomicBinOp::fadd};
  complex::AddOp add;
  for (Operation &inner : body->without_terminator()) {
    bool usesCurrent = false;
    inner.walk([&](Operation *nested) {
      for (Value v : nested->getOperands())
        usesCurrent |= v == current || (add && v == add.getResult());
    });
    if (!isMemoryEffectFree(&inner)) return std::nullopt;
    if (!usesCurrent) {
      plan.independent.push_back(&inner);
      continue;
    }
    add = dyn_cast<complex::AddOp>(&inner);
    if (!add || plan.operand) return std::nullopt;  // one step only
    if (add.getLhs() == current && add.getRhs() != current)
      plan.operand = add.getRhs();
    else if (add.getRhs() == current && add.getLhs() != current)
      plan.operand = add.getLhs();
    else
      return std::nullopt;
  }
  if (!add || result != add.getResult()) return std::nullopt;
  return plan;
}

// The aligned 32-bit word holding a narrow element: its address, the
// element's bit offset in it and the mask of the other elements' bits.
struct Word {
  Value addr, shift, others;
};

Word containingWord(OpBuilder &b, Location loc, Value addr, unsigned bits) {
  Type i64 = b.getI64Type(), i32 = b.getI32Type();
  Value asInt = LLVM::PtrToIntOp::create(b, loc, i64, addr);
  Value offset = arith::AndIOp::create(
      b, loc, asInt, arith::ConstantIntOp::create(b, loc, i64, 3));
  Value back = arith::SubIOp::create(
      b, loc, arith::ConstantIntOp::create(b, loc, i64, 0), offset);
  Value wordAddr = LLVM::GEPOp::create(b, loc, addr.getType(), b.getI8Type(),
                                       addr, ValueRange{back});
  Value shift = arith::TruncIOp::create(
      b, loc, i32,
      arith::ShLIOp::create(b, loc, offset,
                            arith::ConstantIntOp::create(b, loc, i64, 3)));
  Value ones = arith::ConstantIntOp::create(b, loc, i32, (1u << bits) - 1);
  Value mask = arith::ShLIOp::create(b, loc, ones, shift);
  Value others = arith::XOrIOp::create(
      b, loc, mask, arith::ConstantIntOp::create(b, loc, i32, -1));
  return {wordAddr, shift, others};
}

// The width of an element as stored: a complex element is its two parts.
unsigned storageBits(Type element) {
  if (auto complex = dyn_cast<ComplexType>(element))
    return 2 * complex.getElementType().getIntOrFloatBitWidth();
  return storageType(element).getIntOrFloatBitWidth();
}

// The element's bits, as stored (i1 as i8; a complex element as one
// integer twice its part's width, the real part in the low half: it comes
// first in memory, and NVPTX and x86 are little-endian).
Value toBits(OpBuilder &b, Location loc, Value value, Type storage) {
  Type element = value.getType();
  if (auto complex = dyn_cast<ComplexType>(element)) {
    unsigned half = complex.getElementType().getIntOrFloatBitWidth();
    Type halfType = b.getIntegerType(half), whole = b.getIntegerType(2 * half);
    Value re = arith::BitcastOp::create(
        b, loc, halfType, complex::ReOp::create(b, loc, value));
    Value im = arith::BitcastOp::create(
        b, loc, halfType, complex::ImOp::create(b, loc, value));
    Value high = arith::ShLIOp::create(
        b, loc, arith::ExtUIOp::create(b, loc, whole, im),
        arith::ConstantIntOp::create(b, loc, whole, half));
    return arith::OrIOp::create(
        b, loc, arith::ExtUIOp::create(b, loc, whole, re), high);
  }
  Type bits = b.getIntegerType(storage.getIntOrFloatBitWidth());
  if (isa<FloatType>(element))
    return arith::BitcastOp::create(b, loc, bits, value);
  if (element != bits) return arith::ExtUIOp::create(b, loc, bits, value);
  return value;
}

Value fromBits(OpBuilder &b, Location loc, Value bits, Type element) {
  if (auto complex = dyn_cast<ComplexType>(element)) {
    Type part = complex.getElementType();
    unsigned half = part.getIntOrFloatBitWidth();
    Type halfType = b.getIntegerType(half);
    Value high = arith::ShRUIOp::create(
        b, loc, bits, arith::ConstantIntOp::create(b, loc, bits.getType(), half));
    Value re = arith::BitcastOp::create(
        b, loc, part, arith::TruncIOp::create(b, loc, halfType, bits));
    Value im = arith::BitcastOp::create(
        b, loc, part, arith::TruncIOp::create(b, loc, halfType, high));
    return complex::CreateOp::create(b, loc, complex, re, im);
  }
  if (isa<FloatType>(element))
    return arith::BitcastOp::create(b, loc, element, bits);
  if (bits.getType() != element)
    return arith::TruncIOp::create(b, loc, element, bits);
  return bits;
}

struct LowerAtomicRMW : OpConversionPattern<AtomicRMWOp> {
  LowerAtomicRMW(const TypeConverter &converter, MLIRContext *ctx,
                 bool native16BitFloatAdd, bool vectorFloatAdd)
      : OpConversionPattern(converter, ctx),
        native16BitFloatAdd(native16BitFloatAdd),
        vectorFloatAdd(vectorFloatAdd) {}
  bool native16BitFloatAdd;
  bool vectorFloatAdd;

  LogicalResult
  matchAndRewrite(AtomicRMWOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Type element = op.getElementType();
    Type storage = storageType(element);
    Value addr = elementAddress(rewriter, loc, adaptor.getInput(), element,
                                adaptor.getIndices());
    if (auto lanes = dyn_cast<VectorType>(op.getCurrentValue().getType())) {
      // Consecutive elements: one hardware atomic per lane, or one vector
      // reduction (the analysis refused any other region).
      std::optional<AtomicPlan> plan = planAtomic(op, native16BitFloatAdd);
      if (!plan) return rewriter.notifyMatchFailure(op, "no atomic plan");
      emitLanes(rewriter, loc, *plan, addr, lanes, storage);
      rewriter.replaceOp(op, adaptor.getInput());
      return success();
    }
    if (auto complex = dyn_cast<ComplexType>(element)) {
      // An addition is two float atomics; any other update (a scatter's
      // replacement, a product...) a CAS loop on the whole element as one
      // integer: atomic as a pair, which two per-part updates would not be.
      if (std::optional<AtomicPlan> plan = planComplexAdd(op))
        emitComplexAdd(rewriter, loc, *plan, addr, complex.getElementType());
      else
        emitCasLoop(rewriter, loc, op, addr, storage);
      rewriter.replaceOp(op, adaptor.getInput());
      return success();
    }
    if (std::optional<AtomicPlan> plan = planAtomic(op, native16BitFloatAdd))
      emitAtomic(rewriter, loc, op, *plan, addr, storage);
    else
      emitCasLoop(rewriter, loc, op, addr, storage);
    rewriter.replaceOp(op, adaptor.getInput());
    return success();
  }

  void emitComplexAdd(ConversionPatternRewriter &rewriter, Location loc,
                      const AtomicPlan &plan, Value addr, Type part) const {
    Value operand = planOperand(rewriter, plan);
    Value parts[2] = {complex::ReOp::create(rewriter, loc, operand),
                      complex::ImOp::create(rewriter, loc, operand)};
    for (int k = 0; k < 2; ++k) {
      Value partAddr = LLVM::GEPOp::create(
          rewriter, loc, addr.getType(), part, addr,
          ArrayRef<LLVM::GEPArg>{k}, LLVM::GEPNoWrapFlags::inbounds);
      LLVM::AtomicRMWOp::create(rewriter, loc, LLVM::AtomicBinOp::fadd,
                                partAddr, parts[k],
                                LLVM::AtomicOrdering::monotonic);
    }
  }

  // The value `plan` combines with %current, its region's independent ops
  // cloned before the atomic (they run once).
  static Value planOperand(ConversionPatternRewriter &rewriter,
                           const AtomicPlan &plan) {
    IRMapping mapping;
    for (Operation *inner : plan.independent) rewriter.clone(*inner, mapping);
    return mapping.lookupOrDefault(plan.operand);
  }

  // `plan` on the lanes of a vector atomic_rmw at `addr` on: sm_90's
  // vector reduction for 2 or 4 f32 adds, else one atomic per lane.
  void emitLanes(ConversionPatternRewriter &rewriter, Location loc,
                 const AtomicPlan &plan, Value addr, VectorType lanes,
                 Type storage) const {
    if (plan.kind == AtomicPlan::kNothing) return;
    Value operand = planOperand(rewriter, plan);
    int64_t count = lanes.getNumElements();
    SmallVector<Value> values;
    for (int64_t k = 0; k < count; ++k) {
      Value position = LLVM::ConstantOp::create(
          rewriter, loc, rewriter.getI32Type(), rewriter.getI32IntegerAttr(k));
      values.push_back(
          LLVM::ExtractElementOp::create(rewriter, loc, operand, position));
    }
    if (vectorFloatAdd && plan.kind == AtomicPlan::kBinary &&
        plan.binOp == LLVM::AtomicBinOp::fadd && storage.isF32() &&
        (count == 2 || count == 4)) {
      // NVPTX has no vector atomicrmw (LLVM would split it, or worse), so
      // the PTX is written here. `red`, not `atom`: the old values are not
      // wanted. The address is generic; CUDA maps global memory one to one.
      std::string text = "red.global.add.v" + std::to_string(count) +
                         ".f32 [$0], {";
      std::string constraints = "l";
      for (int64_t k = 0; k < count; ++k) {
        text += (k ? ", $" : "$") + std::to_string(k + 1);
        constraints += ",f";
      }
      text += "};";
      SmallVector<Value> operands{addr};
      operands.append(values);
      LLVM::InlineAsmOp::create(
          rewriter, loc, TypeRange{}, operands, text, constraints,
          /*has_side_effects=*/true, /*is_align_stack=*/false,
          LLVM::tailcallkind::TailCallKind::None,
          LLVM::AsmDialectAttr::get(rewriter.getContext(),
                                    LLVM::AsmDialect::AD_ATT),
          /*operand_attrs=*/ArrayAttr());
      return;
    }
    auto binOp = plan.kind == AtomicPlan::kExchange ? LLVM::AtomicBinOp::xchg
                                                     : plan.binOp;
    for (int64_t k = 0; k < count; ++k) {
      Value laneAddr = k == 0 ? addr
                              : LLVM::GEPOp::create(
                                    rewriter, loc, addr.getType(), storage,
                                    addr, ArrayRef<LLVM::GEPArg>{int32_t(k)},
                                    LLVM::GEPNoWrapFlags::inbounds);
      LLVM::AtomicRMWOp::create(rewriter, loc, binOp, laneAddr, values[k],
                                LLVM::AtomicOrdering::monotonic);
    }
  }

  void emitAtomic(ConversionPatternRewriter &rewriter, Location loc,
                  AtomicRMWOp op, const AtomicPlan &plan, Value addr,
                  Type storage) const {
    if (plan.kind == AtomicPlan::kNothing) return;
    Value operand = planOperand(rewriter, plan);
    auto monotonic = LLVM::AtomicOrdering::monotonic;
    if (plan.kind != AtomicPlan::kWordBitwise) {
      LLVM::AtomicRMWOp::create(
          rewriter, loc,
          plan.kind == AtomicPlan::kExchange ? LLVM::AtomicBinOp::xchg
                                             : plan.binOp,
          addr, operand, monotonic);
      return;
    }
    // or/and/xor of a narrow element: the same op on its word, with the
    // other bits of the word left as they are.
    unsigned bits = storage.getIntOrFloatBitWidth();
    Word word = containingWord(rewriter, loc, addr, bits);
    Type i32 = rewriter.getI32Type();
    Value placed = arith::ShLIOp::create(
        rewriter, loc,
        arith::ExtUIOp::create(rewriter, loc, i32,
                               toBits(rewriter, loc, operand, storage)),
        word.shift);
    if (plan.binOp == LLVM::AtomicBinOp::_and)
      placed = arith::OrIOp::create(rewriter, loc, placed, word.others);
    LLVM::AtomicRMWOp::create(rewriter, loc, plan.binOp, word.addr, placed,
                              monotonic);
  }

  void emitCasLoop(ConversionPatternRewriter &rewriter, Location loc,
                   AtomicRMWOp op, Value addr, Type storage) const {
    Type element = op.getElementType();
    unsigned bits = storageBits(element);
    bool narrow = bits < 32;
    Type i32 = rewriter.getI32Type();
    Type wordType = narrow ? i32 : rewriter.getIntegerType(bits);
    Word word{addr, Value(), Value()};
    if (narrow) word = containingWord(rewriter, loc, addr, bits);
    auto monotonic = LLVM::AtomicOrdering::monotonic;
    unsigned alignment = narrow ? 4 : bits / 8;
    // The first guess of a 128-bit element (c128) is a plain load: an
    // atomic one would be a CAS itself on NVPTX (and x86 without AVX), and
    // a torn guess only fails the CAS, which then hands back the whole value.
    Value init = LLVM::LoadOp::create(
        rewriter, loc, wordType, word.addr, alignment, /*isVolatile=*/false,
        /*isNonTemporal=*/false, /*isInvariant=*/false,
        /*isInvariantGroup=*/false,
        bits > 64 ? LLVM::AtomicOrdering::not_atomic : monotonic);

    auto loop = scf::WhileOp::create(rewriter, loc, TypeRange{wordType},
                                     ValueRange{init});
    Block *before = rewriter.createBlock(&loop.getBefore(), {}, {wordType},
                                         {loc});
    Value old = before->getArgument(0);
    Value current;
    if (narrow) {
      Value shifted = arith::ShRUIOp::create(rewriter, loc, old, word.shift);
      Value elementBits = arith::TruncIOp::create(
          rewriter, loc, rewriter.getIntegerType(bits), shifted);
      current = fromBits(rewriter, loc, elementBits, element);
    } else {
      current = fromBits(rewriter, loc, old, element);
    }
    auto yield = cast<YieldOp>(op.getBody()->getTerminator());
    Value updated = yield.getValues().front();
    rewriter.inlineBlockBefore(op.getBody(), before, before->end(), {current});
    rewriter.setInsertionPoint(yield);
    Value newWord = toBits(rewriter, loc, updated, storage);
    if (narrow) {
      Value placed = arith::ShLIOp::create(
          rewriter, loc, arith::ExtUIOp::create(rewriter, loc, i32, newWord),
          word.shift);
      Value others = arith::AndIOp::create(rewriter, loc, old, word.others);
      newWord = arith::OrIOp::create(rewriter, loc, others, placed);
    }
    auto cas = LLVM::AtomicCmpXchgOp::create(rewriter, loc, word.addr, old,
                                             newWord, monotonic, monotonic);
    Value seen = LLVM::ExtractValueOp::create(rewriter, loc, cas,
                                              ArrayRef<int64_t>{0});
    Value ok = LLVM::ExtractValueOp::create(rewriter, loc, cas,
                                            ArrayRef<int64_t>{1});
    Value retry = arith::XOrIOp::create(
        rewriter, loc, ok, arith::ConstantIntOp::create(rewriter, loc, 1, 1));
    scf::ConditionOp::create(rewriter, loc, retry, ValueRange{seen});
    rewriter.eraseOp(yield);

    Block *after = rewriter.createBlock(&loop.getAfter(), {}, {wordType},
                                        {loc});
    scf::YieldOp::create(rewriter, loc, after->getArgument(0));
    rewriter.setInsertionPointAfter(loop);
  }
};

// A module-level global, and a generic pointer to it.
Value addressOfNewGlobal(ConversionPatternRewriter &rewriter, Operation *op,
                         StringRef prefix, Type type, bool constant,
                         Attribute value, unsigned addrSpace) {
  auto module = op->getParentOfType<ModuleOp>();
  std::string name;
  for (int i = 0;; ++i) {
    name = (prefix + "_" + llvm::Twine(i)).str();
    if (!SymbolTable::lookupSymbolIn(module, name)) break;
  }
  LLVM::GlobalOp global;
  {
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(module.getBody());
    global = LLVM::GlobalOp::create(rewriter, op->getLoc(), type, constant,
                                    LLVM::Linkage::Private, name, value,
                                    /*alignment=*/16, addrSpace);
  }
  Location loc = op->getLoc();
  Value addr = LLVM::AddressOfOp::create(rewriter, loc, global);
  if (addrSpace != 0)
    addr = LLVM::AddrSpaceCastOp::create(
        rewriter, loc, LLVM::LLVMPointerType::get(rewriter.getContext()), addr);
  return addr;
}

struct LowerAllocateShared : OpConversionPattern<AllocateSharedOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(AllocateSharedOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto tensor = cast<RankedTensorType>(op.getType());
    auto array = LLVM::LLVMArrayType::get(storageType(tensor.getElementType()),
                                          tensor.getNumElements());
    rewriter.replaceOp(op, addressOfNewGlobal(rewriter, op, "shared", array,
                                              /*constant=*/false, Attribute(),
                                              kSharedMemorySpace));
    return success();
  }
};

struct LowerSyncThreads : OpConversionPattern<SyncThreadsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(SyncThreadsOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    gpu::BarrierOp::create(rewriter, op.getLoc());
    rewriter.replaceOp(op, adaptor.getOperands());
    return success();
  }
};

struct LowerTensorConstant : OpConversionPattern<arith::ConstantOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(arith::ConstantOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto tensor = dyn_cast<RankedTensorType>(op.getType());
    auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
    if (!tensor || !dense) return failure();
    if (auto complex = dyn_cast<ComplexType>(tensor.getElementType())) {
      // The parts, interleaved, as an array of 2N floats (the layout of N
      // complex structs).
      auto partType = cast<FloatType>(complex.getElementType());
      SmallVector<APFloat> parts;
      parts.reserve(2 * tensor.getNumElements());
      for (std::complex<APFloat> v : dense.getValues<std::complex<APFloat>>()) {
        parts.push_back(v.real());
        parts.push_back(v.imag());
      }
      auto flat = RankedTensorType::get(
          {static_cast<int64_t>(parts.size())}, partType);
      auto array = LLVM::LLVMArrayType::get(partType, parts.size());
      rewriter.replaceOp(
          op, addressOfNewGlobal(rewriter, op, "constant", array,
                                 /*constant=*/true,
                                 DenseElementsAttr::get(flat, parts), 0));
      return success();
    }
    if (storageType(tensor.getElementType()) != tensor.getElementType())
      return rewriter.notifyMatchFailure(op, "i1 tensor constants");
    auto array = LLVM::LLVMArrayType::get(tensor.getElementType(),
                                          tensor.getNumElements());
    rewriter.replaceOp(op, addressOfNewGlobal(rewriter, op, "constant", array,
                                              /*constant=*/true, dense, 0));
    return success();
  }
};

// Checks what the lowering relies on; fills the analysis.
LogicalResult analyze(func::FuncOp func, Analysis &analysis) {
  llvm::DenseSet<Value> written;
  llvm::DenseMap<Value, BlockArgument> traced;
  WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
    for (Type t : llvm::concat<Type>(op->getOperandTypes(), op->getResultTypes())) {
      auto tensor = dyn_cast<RankedTensorType>(t);
      if (!tensor) continue;
      if (!tensor.hasStaticShape() || tensor.getRank() > 1)
        return op->emitOpError("xla-lower-tensors needs static 1-d tensors "
                               "(run xla-flatten-tensors first), got ")
               << tensor;
      Type element = tensor.getElementType();
      auto complex = dyn_cast<ComplexType>(element);
      if (!element.isIntOrFloat() &&
          !(complex && isa<FloatType>(complex.getElementType())))
        return op->emitOpError("xla-lower-tensors: element type ")
               << element << " is not supported";
    }
    if (auto atomic = dyn_cast<AtomicRMWOp>(op)) {
      unsigned bits = storageBits(atomic.getElementType());
      // 128 bits only for complex<f64>, whose CAS loop is all it needs.
      bool complex128 = isa<ComplexType>(atomic.getElementType()) && bits == 128;
      if (bits != 8 && bits != 16 && bits != 32 && bits != 64 && !complex128)
        return op->emitOpError("xla-lower-tensors: no atomic update of ")
               << atomic.getElementType()
               << " elements (8, 16, 32 or 64 bits, or complex<f64>)";
      // Lanes are one hardware atomic each: a CAS loop would need the
      // region per lane.
      if (isa<VectorType>(atomic.getCurrentValue().getType())) {
        std::optional<AtomicPlan> plan =
            planAtomic(atomic, /*native16BitFloatAdd=*/false);
        if (!plan || plan->kind == AtomicPlan::kWordBitwise || bits < 32)
          return op->emitOpError(
              "on a vector of elements needs a region that one hardware "
              "atomic does (an add, min, max, or, and, xor or exchange of "
              "32- or 64-bit elements)");
      }
    }
    Value dest;
    if (auto insert = dyn_cast<tensor::InsertOp>(op)) dest = insert.getDest();
    if (auto write = dyn_cast<vector::TransferWriteOp>(op)) dest = write.getBase();
    if (auto atomic = dyn_cast<AtomicRMWOp>(op)) dest = atomic.getInput();
    if (dest)
      if (BlockArgument arg = traceToArgument(dest, traced)) written.insert(arg);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted()) return failure();
  for (Block &block : func.getBody())
    if (auto ret = dyn_cast<func::ReturnOp>(block.getTerminator()))
      for (auto [i, value] : llvm::enumerate(ret.getOperands()))
        if (isa<RankedTensorType>(value.getType()) && !traceToArgument(value, traced))
          return ret.emitOpError("returned tensor #")
                 << i << " is not an in-place update of a function argument";
  func.walk([&](Operation *op) {
    Value source;
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) source = extract.getTensor();
    if (auto read = dyn_cast<vector::TransferReadOp>(op)) source = read.getBase();
    if (!source) return;
    BlockArgument arg = traceToArgument(source, traced);
    bool declaredInvariant =
        arg && func.getArgAttr(arg.getArgNumber(), "xla.invariant");
    if (arg && (declaredInvariant || !written.contains(arg)))
      analysis.invariantReads.insert(op);
  });
  return success();
}

struct LowerTensorsPass : impl::LowerTensorsPassBase<LowerTensorsPass> {
  using LowerTensorsPassBase::LowerTensorsPassBase;
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    ModuleOp module = getOperation();
    if (failed(verifyTensorSizesFitInt64(module))) return signalPassFailure();
    Analysis analysis;
    for (auto func : module.getOps<func::FuncOp>())
      if (failed(analyze(func, analysis))) return signalPassFailure();

    TypeConverter converter;
    converter.addConversion([](Type t) { return t; });
    converter.addConversion([&](RankedTensorType) -> Type {
      return LLVM::LLVMPointerType::get(ctx);
    });

    RewritePatternSet patterns(ctx);
    ConversionTarget target(*ctx);
    populateTensorTypeConversion(converter, patterns, target,
                                 [](Type t) { return isa<TensorType>(t); });
    patterns.add<LowerExtract, LowerTransferRead>(converter, ctx, analysis);
    patterns.add<LowerInsert, LowerTransferWrite, LowerAllocateShared,
                 LowerSyncThreads, LowerTensorConstant, RetypeOp<PureCallOp>>(
        converter, ctx);
    patterns.add<LowerAtomicRMW>(converter, ctx, native16BitFloatAdd,
                                  vectorFloatAdd);
    // Without rollback: these patterns never fail after changing the IR,
    // nor leave IR the conversion cannot legalize, so the driver need not
    // record each change to undo it (the same final modules on 478 kernels,
    // both targets; 10-15% less time here and in xla-flatten-tensors and
    // xla-expand-complex).
    ConversionConfig config;
    config.allowPatternRollback = false;
    if (failed(applyPartialConversion(module, target, std::move(patterns), config)))
      return signalPassFailure();

    // Outputs were written in place: functions return nothing.
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal() || func.getNumResults() == 0) continue;
      bool allPointers = llvm::all_of(func.getResultTypes(), [](Type t) {
        return isa<LLVM::LLVMPointerType>(t);
      });
      if (!allPointers) continue;
      func.walk([](func::ReturnOp ret) { ret->setOperands({}); });
      func.setType(FunctionType::get(ctx, func.getArgumentTypes(), {}));
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
