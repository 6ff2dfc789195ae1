//===- lower_to_host.cpp - the grid-emulated kernel to LLVM for the host --===//
//
// The cpu target's counterpart of xla-lower-to-llvm. What differs from the
// NVVM lowering:
//   - math: f32 exp/expm1/log/log1p/tanh/erf are arithmetic already
//     (xla-approximate-host-math, in the cpu pipeline before this pass);
//     the rest become LLVM intrinsics where MathToLLVM has them (the x86
//     backend turns the transcendental ones into libm calls), else libm
//     calls (sinf's kin, f64); the JIT resolves both in the process's libm;
//   - bf16: x86 without AVX512-BF16 computes bf16 arithmetic in f32 and
//     rounds through `__truncsfbf2`, which the JIT cannot resolve. Every
//     bf16 arith op is therefore computed in f32 here and rounded back
//     (once per op, as the GPU's bf16 instructions round), and the
//     conversions become integer ops (round to nearest even, NaN kept),
//     all in i32/i16 so that they vectorize; bf16 values that are only
//     moved (loads, stores, selects, phis) become i16 afterwards;
//   - no kernels, no special registers: gpu and nvvm ops are an error.
//
//===----------------------------------------------------------------------===//

#include "LLVMLowering.h"
#include "Passes.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERTOHOSTPASS
#include "Passes.h.inc"

namespace {

Type withElement(Type like, Type element) {
  if (auto shaped = dyn_cast<ShapedType>(like)) return shaped.clone(element);
  return element;
}

Value splat(OpBuilder &b, Location loc, Type type, int64_t value) {
  auto attr = b.getIntegerAttr(getElementTypeOrSelf(type), value);
  if (auto shaped = dyn_cast<ShapedType>(type))
    return arith::ConstantOp::create(b, loc, DenseElementsAttr::get(shaped, attr));
  return arith::ConstantOp::create(b, loc, attr);
}

// Whether the f32 `value` is exactly a bf16 value (or NaN): an extension
// of a bf16, an f32 constant whose low 16 bits are zero, or an op that
// returns one of its such operands, possibly with its sign changed (max,
// min, negation, absolute value, copysign, select). The ReLU after a bf16
// add is maximumf(extf(round(a + b)), 0): rounding it again only takes
// the high half.
bool exactInBF16(Value value, int depth = 0) {
  if (depth > 8) return false;
  if (auto ext = value.getDefiningOp<arith::ExtFOp>())
    return getElementTypeOrSelf(ext.getIn().getType()).isBF16();
  Attribute constant;
  if (matchPattern(value, m_Constant(&constant))) {
    auto exact = [](const APFloat &f) {
      return f.isNaN() || (f.bitcastToAPInt().getZExtValue() & 0xffff) == 0;
    };
    if (auto f = dyn_cast<FloatAttr>(constant)) return exact(f.getValue());
    if (auto dense = dyn_cast<DenseFPElementsAttr>(constant))
      return llvm::all_of(dense.getValues<APFloat>(), exact);
    return false;
  }
  Operation *op = value.getDefiningOp();
  if (!op) return false;
  if (isa<arith::MaximumFOp, arith::MinimumFOp, arith::MaxNumFOp, arith::MinNumFOp,
          arith::NegFOp, math::AbsFOp, math::CopySignOp>(op))
    return llvm::all_of(op->getOperands(),
                        [&](Value v) { return exactInBF16(v, depth + 1); });
  if (auto select = dyn_cast<arith::SelectOp>(op))
    return exactInBF16(select.getTrueValue(), depth + 1) &&
           exactInBF16(select.getFalseValue(), depth + 1);
  return false;
}

// f32 -> bf16, round to nearest even, NaN -> 0x7fc0, computed on the bits:
// (x + 0x7fff + bit 16 of x) >> 16, after NaN is replaced by the quiet NaN
// 0x7fc00000 (which that rounds to 0x7fc0). The NaN is chosen among f32s:
// a select of i16s next to the bitcast to bf16 is folded by LLVM into a
// select of bf16 lanes, which x86 scalarizes lane by lane.
struct TruncFToBF16AsIntegers : OpRewritePattern<arith::TruncFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::TruncFOp op,
                                PatternRewriter &rewriter) const override {
    Value x = op.getIn();
    if (!getElementTypeOrSelf(x.getType()).isF32() ||
        !getElementTypeOrSelf(op.getType()).isBF16() || op.getRoundingmodeAttr())
      return failure();
    Location loc = op.getLoc();
    Type i32 = withElement(x.getType(), rewriter.getI32Type());
    Type i16 = withElement(x.getType(), rewriter.getI16Type());
    // x != x: NaN.
    Value isNan = arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::UNE, x, x);
    Value quietNan = arith::BitcastOp::create(rewriter, loc, x.getType(),
                                              splat(rewriter, loc, i32, 0x7fc00000));
    Value canonical = arith::SelectOp::create(rewriter, loc, isNan, quietNan, x);
    Value bits = arith::BitcastOp::create(rewriter, loc, i32, canonical);
    if (exactInBF16(x)) {  // nothing to round: the high half
      Value high = arith::TruncIOp::create(
          rewriter, loc, i16,
          arith::ShRUIOp::create(rewriter, loc, bits, splat(rewriter, loc, i32, 16)));
      rewriter.replaceOpWithNewOp<arith::BitcastOp>(op, op.getType(), high);
      return success();
    }
    Value lsb = arith::AndIOp::create(
        rewriter, loc,
        arith::ShRUIOp::create(rewriter, loc, bits, splat(rewriter, loc, i32, 16)),
        splat(rewriter, loc, i32, 1));
    Value rounded = arith::AddIOp::create(
        rewriter, loc,
        arith::AddIOp::create(rewriter, loc, bits, splat(rewriter, loc, i32, 0x7fff)),
        lsb);
    Value high = arith::TruncIOp::create(
        rewriter, loc, i16,
        arith::ShRUIOp::create(rewriter, loc, rounded, splat(rewriter, loc, i32, 16)));
    rewriter.replaceOpWithNewOp<arith::BitcastOp>(op, op.getType(), high);
    return success();
  }
};

// x86 has no bf16 registers: the backend promotes every bf16 value that
// lives in a register (a select, a phi, a vector shuffle) to f32 and rounds
// it back for the store through `__truncsfbf2`, which the JIT cannot
// resolve (and which would cost a call per element). Once the arithmetic
// is f32 (above), bf16 values are only moved, so they become i16 here:
// the same bits, integer registers, no conversions.
Type bf16AsI16(Type type) {
  MLIRContext *ctx = type.getContext();
  if (type.isBF16()) return IntegerType::get(ctx, 16);
  if (auto vector = dyn_cast<VectorType>(type))
    return vector.getElementType().isBF16()
               ? vector.clone(IntegerType::get(ctx, 16)) : type;
  if (auto array = dyn_cast<LLVM::LLVMArrayType>(type))
    return LLVM::LLVMArrayType::get(bf16AsI16(array.getElementType()),
                                    array.getNumElements());
  if (auto strct = dyn_cast<LLVM::LLVMStructType>(type)) {
    if (strct.isIdentified()) return type;
    SmallVector<Type> body = llvm::map_to_vector(strct.getBody(), bf16AsI16);
    return LLVM::LLVMStructType::getLiteral(ctx, body, strct.isPacked());
  }
  if (auto fn = dyn_cast<LLVM::LLVMFunctionType>(type)) {
    SmallVector<Type> params = llvm::map_to_vector(fn.getParams(), bf16AsI16);
    return LLVM::LLVMFunctionType::get(bf16AsI16(fn.getReturnType()), params,
                                       fn.isVarArg());
  }
  return type;
}

Attribute bf16AttrAsI16(Attribute attr) {
  if (auto typeAttr = dyn_cast<TypeAttr>(attr))
    return TypeAttr::get(bf16AsI16(typeAttr.getValue()));
  if (auto floatAttr = dyn_cast<FloatAttr>(attr); floatAttr && floatAttr.getType().isBF16())
    return IntegerAttr::get(IntegerType::get(attr.getContext(), 16),
                            floatAttr.getValue().bitcastToAPInt());
  if (auto dense = dyn_cast<DenseFPElementsAttr>(attr);
      dense && dense.getElementType().isBF16())
    return dense.bitcast(IntegerType::get(attr.getContext(), 16));
  return attr;
}

// Ops that only move bf16 values; anything else on bf16 (arithmetic left
// over) keeps the types, and the backend's promotion, as before.
bool onlyMovesValues(Operation *op) {
  return isa<LLVM::LoadOp, LLVM::StoreOp, LLVM::SelectOp, LLVM::BitcastOp,
             LLVM::ConstantOp, LLVM::AllocaOp, LLVM::GEPOp, LLVM::BrOp,
             LLVM::CondBrOp, LLVM::SwitchOp, LLVM::CallOp, LLVM::ReturnOp,
             LLVM::LLVMFuncOp, LLVM::InsertElementOp, LLVM::ExtractElementOp,
             LLVM::ShuffleVectorOp, LLVM::InsertValueOp, LLVM::ExtractValueOp,
             LLVM::UndefOp, LLVM::PoisonOp, LLVM::ZeroOp, LLVM::FreezeOp,
             LLVM::GlobalOp, LLVM::AddressOfOp,
             UnrealizedConversionCastOp>(op);
}

// Whether `pred` holds for one of the op's attributes. Operation::getAttrs()
// builds (and uniques) a dictionary of the inherent attributes held as
// properties on every call: asked of every op of a module twice, that was
// a tenth of this pass. The inherent attributes one by one, then the
// discardable ones, are the same attributes.
template <typename Pred>
bool anyAttribute(Operation *op, Pred pred) {
  if (std::optional<RegisteredOperationName> info = op->getRegisteredInfo())
    for (StringAttr name : info->getAttributeNames())
      if (std::optional<Attribute> attr = op->getInherentAttr(name.getValue()))
        if (*attr && pred(*attr)) return true;
  return llvm::any_of(op->getDiscardableAttrs(),
                      [&](NamedAttribute a) { return pred(a.getValue()); });
}

bool touchesBF16(Operation *op) {
  auto hasBF16 = [](Type t) { return bf16AsI16(t) != t; };
  if (llvm::any_of(op->getOperandTypes(), hasBF16) ||
      llvm::any_of(op->getResultTypes(), hasBF16))
    return true;
  for (Region &region : op->getRegions())
    for (Block &block : region)
      if (llvm::any_of(block.getArgumentTypes(), hasBF16)) return true;
  return anyAttribute(op, [](Attribute a) { return bf16AttrAsI16(a) != a; });
}

// i16 -> bf16 bitcasts that became i16 -> i16 (and any other bitcast to
// its own type) are dropped.
void eraseIdentityBitcasts(ModuleOp module) {
  module.walk([](LLVM::BitcastOp cast) {
    if (cast.getArg().getType() == cast.getType()) {
      cast.replaceAllUsesWith(cast.getArg());
      cast.erase();
    }
  });
}

void moveBF16AsI16(ModuleOp module) {
  bool movesOnly = true, anyBF16 = false;
  module.walk([&](Operation *op) -> WalkResult {
    if (!touchesBF16(op)) return WalkResult::advance();
    anyBF16 = true;
    if (onlyMovesValues(op)) return WalkResult::advance();
    movesOnly = false;
    return WalkResult::interrupt();
  });
  if (!movesOnly) return;
  // Nothing to retype (most kernels: no bf16 at all).
  if (!anyBF16) return eraseIdentityBitcasts(module);
  module.walk([](Operation *op) {
    for (Value result : op->getResults()) result.setType(bf16AsI16(result.getType()));
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          arg.setType(bf16AsI16(arg.getType()));
    for (NamedAttribute named : op->getAttrs()) {
      Attribute converted = bf16AttrAsI16(named.getValue());
      if (converted != named.getValue()) op->setAttr(named.getName(), converted);
    }
  });
  eraseIdentityBitcasts(module);
}

// Index arithmetic in 64 bits. The shared pipeline computes an index in
// i32 where every value of it fits (xla-simplify-affine: a GPU's 32-bit
// arithmetic is cheaper) and addresses elements with i32 GEP indices
// (xla-lower-tensors). On the host every such index is sign-extended
// again for its address, and LLVM's loop vectorizer has to prove, for
// every access of a thread loop, that the i32 sums of the truncated loop
// counters do not wrap before it can see the access's stride: that proof
// was half of its time on the reduction kernels (the LLVM pipeline ~30%
// faster in all). Computed in i64 from the index values themselves, an
// address is an affine function of the loop counters as it is.
//
// An i32 value v is recomputed as an i64 w with w == sext(v) where v is
// not poison: from index values cast to i32 (which fit in i32: the casts
// of xla-simplify-affine) and constants, through additions, subtractions
// and products that cannot wrap (nsw: the same value in 64 bits) and
// unsigned divisions and remainders of values known to be non-negative.
// GEP indices (sign-extended by LLVM) and casts back to index or i64 use
// w; the i32 ops stay for any other user (the canonicalizer drops the
// ones left unused).
class IndexWidener {
public:
  struct Wide {
    Value value;        // i64
    bool nonNegative;   // v >= 0: zero and sign extension agree
  };

  std::optional<Wide> widen(Value v, int depth = 0) {
    auto found = memo.find(v);
    if (found != memo.end()) return found->second;
    std::optional<Wide> wide = compute(v, depth);
    memo[v] = wide;
    return wide;
  }

private:
  static bool isI32(Value v) { return v.getType().isInteger(32); }

  std::optional<Wide> compute(Value v, int depth) {
    // Deeper trees are not index arithmetic of the emitters (a few ops an
    // index); the limit also bounds the recursion.
    if (!isI32(v) || depth > 32) return std::nullopt;
    Operation *op = v.getDefiningOp();
    if (!op) return std::nullopt;
    OpBuilder b(op->getContext());
    b.setInsertionPointAfter(op);
    Location loc = op->getLoc();
    Type i64 = b.getI64Type();
    if (isa<arith::IndexCastOp, arith::IndexCastUIOp>(op)) {
      Value in = op->getOperand(0);
      if (!in.getType().isIndex()) return std::nullopt;
      return Wide{arith::IndexCastOp::create(b, loc, i64, in),
                  isa<arith::IndexCastUIOp>(op)};
    }
    APInt constant;
    if (matchPattern(v, m_ConstantInt(&constant))) {
      int64_t c = constant.getSExtValue();
      return Wide{arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(c)), c >= 0};
    }
    auto binary = [&](Value lhs, Value rhs) -> std::optional<std::pair<Wide, Wide>> {
      std::optional<Wide> l = widen(lhs, depth + 1);
      if (!l) return std::nullopt;
      std::optional<Wide> r = widen(rhs, depth + 1);
      if (!r) return std::nullopt;
      return std::make_pair(*l, *r);
    };
    auto flags = [](bool nonNegative) {
      return nonNegative ? arith::IntegerOverflowFlags::nsw | arith::IntegerOverflowFlags::nuw
                         : arith::IntegerOverflowFlags::nsw;
    };
    if (auto overflow = dyn_cast<arith::ArithIntegerOverflowFlagsInterface>(op)) {
      if (!overflow.hasNoSignedWrap() || !isa<arith::AddIOp, arith::SubIOp, arith::MulIOp>(op))
        return std::nullopt;
      auto operands = binary(op->getOperand(0), op->getOperand(1));
      if (!operands) return std::nullopt;
      auto [l, r] = *operands;
      b.setInsertionPointAfter(op);  // after the operands' wide values
      if (isa<arith::AddIOp>(op)) {
        bool nonNegative = l.nonNegative && r.nonNegative;
        return Wide{arith::AddIOp::create(b, loc, l.value, r.value, flags(nonNegative)),
                    nonNegative};
      }
      if (isa<arith::MulIOp>(op)) {
        bool nonNegative = l.nonNegative && r.nonNegative;
        return Wide{arith::MulIOp::create(b, loc, l.value, r.value, flags(nonNegative)),
                    nonNegative};
      }
      // l - r of non-negative values without unsigned wrap: l >= r.
      bool nonNegative = l.nonNegative && r.nonNegative && overflow.hasNoUnsignedWrap();
      return Wide{arith::SubIOp::create(b, loc, l.value, r.value, flags(nonNegative)),
                  nonNegative};
    }
    if (isa<arith::DivUIOp, arith::RemUIOp>(op)) {
      // Non-negative results only (zero and sign extension agree): a
      // quotient by a constant of at least 2 or of a non-negative value, a
      // remainder by a positive constant or of a non-negative value.
      APInt divisor;
      bool constant = matchPattern(op->getOperand(1), m_ConstantInt(&divisor)) &&
                      divisor.isStrictlyPositive();
      std::optional<Wide> l = widen(op->getOperand(0), depth + 1);
      bool nonNegativeLhs = l && l->nonNegative;
      bool nonNegative = nonNegativeLhs ||
                         (constant && (isa<arith::RemUIOp>(op) || divisor.uge(2)));
      if (!nonNegative) return std::nullopt;
      b.setInsertionPointAfter(op);
      // By a power of two, a shift or a mask of the wide value. By another
      // divisor the i32 op stays (x86 has no 64-bit vector multiply-high:
      // an i64 division by a constant would keep the loop scalar) and its
      // result is extended.
      if (constant && divisor.isPowerOf2() && nonNegativeLhs) {
        Value r = arith::ConstantOp::create(
            b, loc, b.getI64IntegerAttr(divisor.getZExtValue()));
        Value result = isa<arith::DivUIOp>(op)
                           ? Value(arith::DivUIOp::create(b, loc, l->value, r))
                           : Value(arith::RemUIOp::create(b, loc, l->value, r));
        return Wide{result, true};
      }
      return Wide{arith::ExtUIOp::create(b, loc, i64, v), true};
    }
    return std::nullopt;
  }

  DenseMap<Value, std::optional<Wide>> memo;
};

void widenIndexArithmetic(ModuleOp module) {
  IndexWidener widener;
  SmallVector<LLVM::GEPOp> geps;
  SmallVector<Operation *> extensions;
  module.walk([&](Operation *op) {
    if (auto gep = dyn_cast<LLVM::GEPOp>(op)) geps.push_back(gep);
    else if (isa<arith::IndexCastOp, arith::IndexCastUIOp, arith::ExtSIOp, arith::ExtUIOp>(op) &&
             op->getOperand(0).getType().isInteger(32) &&
             (op->getResult(0).getType().isIndex() ||
              op->getResult(0).getType().isInteger(64)))
      extensions.push_back(op);
  });
  for (LLVM::GEPOp gep : geps) {
    MutableOperandRange indices = gep.getDynamicIndicesMutable();
    for (unsigned i = 0, e = indices.size(); i < e; ++i) {
      Value index = indices[i].get();
      if (!index.getType().isInteger(32)) continue;
      // A struct's field is a constant, never a dynamic index: each
      // dynamic index here scales an element size, sign-extended.
      if (std::optional<IndexWidener::Wide> wide = widener.widen(index))
        indices[i].set(wide->value);
    }
  }
  for (Operation *ext : extensions) {
    std::optional<IndexWidener::Wide> wide = widener.widen(ext->getOperand(0));
    bool zeroExtends = isa<arith::IndexCastUIOp, arith::ExtUIOp>(ext);
    if (!wide || (zeroExtends && !wide->nonNegative)) continue;
    Type type = ext->getResult(0).getType();
    if (type.isInteger(64)) {
      ext->getResult(0).replaceAllUsesWith(wide->value);
      ext->erase();
    } else {
      ext->setOperand(0, wide->value);   // i64 -> index: the same value
    }
  }
}

struct LowerToHostPass : impl::LowerToHostPassBase<LowerToHostPass> {
  // The pattern sets are the same for every module: built and frozen once
  // per pass instance (a pipeline runs it on kernel after kernel), not once
  // per module. The LLVM patterns hold the type converter: it lives here.
  LogicalResult initialize(MLIRContext *ctx) override {
    {
      RewritePatternSet patterns(ctx);
      patterns.add<TruncFToBF16AsIntegers>(ctx, /*benefit=*/2);
      arith::populateExpandBFloat16Patterns(patterns);
      bf16Patterns = FrozenRewritePatternSet(std::move(patterns));
    }
    {
      RewritePatternSet patterns(ctx);
      populateMathToLibmConversionPatterns(patterns);
      libmPatterns = FrozenRewritePatternSet(std::move(patterns));
    }
    llvmConverter = std::make_shared<LLVMTypeConverter>(ctx, LowerToLLVMOptions(ctx));
    RewritePatternSet patterns(ctx);
    populateCommonToLLVMPatterns(*llvmConverter, patterns);
    // Intrinsics win over libm calls where both exist.
    populateMathToLLVMConversionPatterns(*llvmConverter, patterns,
                                         /*approximateLog1p=*/false,
                                         /*benefit=*/2);
    populateMathToLibmConversionPatterns(patterns, /*benefit=*/1);
    llvmPatterns = FrozenRewritePatternSet(std::move(patterns));
    return success();
  }

  std::shared_ptr<LLVMTypeConverter> llvmConverter;
  FrozenRewritePatternSet bf16Patterns, libmPatterns, llvmPatterns;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();

    // What the conversions below can change, seen in the same walk: with
    // no bf16 value the float emulation has no illegal op, and without
    // expm1 or log1p the libm conversion has none either; their drivers
    // (each builds its legalizer from its patterns) are skipped then.
    bool anyBF16Value = false, anyExpm1OrLog1p = false;
    auto isBF16 = [](Type t) { return getElementTypeOrSelf(t).isBF16(); };
    WalkResult gpuLeft = module.walk([&](Operation *op) -> WalkResult {
      if (!anyBF16Value && (llvm::any_of(op->getOperandTypes(), isBF16) ||
                            llvm::any_of(op->getResultTypes(), isBF16)))
        anyBF16Value = true;
      if (isa<math::ExpM1Op, math::Log1pOp>(op)) anyExpm1OrLog1p = true;
      if (isa_and_nonnull<gpu::GPUDialect, NVVM::NVVMDialect>(op->getDialect()) ||
          isa<ShuffleReduceOp>(op))
        return op->emitOpError("has no host lowering (run xla-emulate-grid "
                               "first)");
      if (isa_and_nonnull<XlaGpuDialect>(op->getDialect()))
        return op->emitOpError("has no host lowering (run the shared "
                               "pipeline's passes first)");
      return WalkResult::advance();
    });
    if (gpuLeft.wasInterrupted()) return signalPassFailure();

    widenIndexArithmetic(module);

    // bf16 arithmetic in f32, one rounding per op: an arith op (or a
    // vector op that computes) is illegal only with a bf16 (element) type
    // among its operands and results.
    if (anyBF16Value) {
      TypeConverter converter;
      Type bf16 = BFloat16Type::get(ctx);
      arith::populateEmulateUnsupportedFloatsConversions(
          converter, {bf16}, Float32Type::get(ctx));
      RewritePatternSet patterns(ctx);
      arith::populateEmulateUnsupportedFloatsPatterns(patterns, converter);
      ConversionTarget target(*ctx);
      arith::populateEmulateUnsupportedFloatsLegality(target, converter);
      if (failed(applyPartialConversion(module, target, std::move(patterns))))
        return signalPassFailure();
    }
    // The emulation marks its conversions `contract`, which lets the folder
    // drop a truncf/extf pair between two ops: keep every rounding.
    module.walk([](Operation *op) {
      if (isa<arith::ExtFOp, arith::TruncFOp>(op))
        if (auto fmf = dyn_cast<arith::ArithFastMathInterface>(op))
          op->setAttr(fmf.getFastMathAttrName(),
                      arith::FastMathFlagsAttr::get(
                          op->getContext(), arith::FastMathFlags::none));
    });
    // bf16 <-> f32 conversions as integer ops; f32 -> bf16 chooses the NaN
    // among i16s (upstream's expansion selects between bf16 values, which
    // x86 cannot do in vector registers: every lane went through a scalar).
    // One sweep: the worklist revisits what a rewrite makes, so the patterns
    // are done after it, and a second sweep (the driver's default, until
    // nothing changes) only folded again what the canonicalizer after this
    // pass folds, and ran region simplification over every op once more
    // (12% of this pass). Measured on 478 kernels (the five bench models',
    // bench/corpus's and 141 bf16 ones): the same final modules but the
    // order of two constants in one; the same objects. The driver reports
    // failure when a sweep changed anything: that is no error here.
    (void)applyPatternsGreedily(module, bf16Patterns,
                                GreedyRewriteConfig().setMaxIterations(1));

    // expm1 and log1p to libm first: MathToLLVM expands them as exp(x) - 1
    // and log(1 + x), which lose every digit near 0 (expm1(1e-8) = 0).
    if (anyExpm1OrLog1p) {
      ConversionTarget target(*ctx);
      target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
      target.addIllegalOp<math::ExpM1Op, math::Log1pOp>();
      if (failed(applyPartialConversion(module, target, libmPatterns)))
        return signalPassFailure();
    }

    LLVMConversionTarget target(*ctx);
    target.addLegalOp<ModuleOp>();
    // Without rollback (the upstream LLVM patterns and ours never fail after
    // changing the IR): the driver keeps no record of every change to undo
    // it, 15% of this pass. Ops are then replaced at once instead of at the
    // end, which lets the folder see through an already converted operand
    // now and then (two of 478 kernels, the five bench models', bench/corpus's
    // and 141 bf16 ones, lost an `icmp ne %x, false`; their objects are the
    // same).
    ConversionConfig config;
    config.allowPatternRollback = false;
    if (failed(applyFullConversion(module, target, llvmPatterns, config)))
      return signalPassFailure();

    // convert-scf-to-cf leaves an scf.for's `llvm.loop_annotation` (the
    // thread loops' parallel accesses, xla-emulate-grid) on the loop's
    // latch branch as a plain attribute; the branch's own `loop_annotation`
    // is what becomes `!llvm.loop` metadata.
    // The same walk collects the unrealized casts that are left (the work
    // of `reconcile-unrealized-casts`, which the cpu pipeline then need not
    // run: its own walk over the module found none in any kernel).
    SmallVector<UnrealizedConversionCastOp> casts;
    module.walk([&](Operation *op) {
      if (auto cast = dyn_cast<UnrealizedConversionCastOp>(op)) {
        casts.push_back(cast);
        return;
      }
      auto annotation =
          op->getAttrOfType<LLVM::LoopAnnotationAttr>("llvm.loop_annotation");
      if (!annotation) return;
      op->removeAttr("llvm.loop_annotation");
      if (auto br = dyn_cast<LLVM::BrOp>(op)) br.setLoopAnnotationAttr(annotation);
      else if (auto condBr = dyn_cast<LLVM::CondBrOp>(op))
        condBr.setLoopAnnotationAttr(annotation);
    });
    moveBF16AsI16(module);
    // After the bf16 moves become i16 ones, as the reconcile pass after
    // this one did (they retype the casts and never erase one).
    if (!casts.empty()) reconcileUnrealizedCasts(casts);
  }
};

} // namespace
} // namespace mlir::xla_gpu
