//===- expand_complex.cpp - complex values as pairs of floats -------------===//
//
// After `convert-complex-to-standard` the complex arithmetic is arith/math
// on the parts; what is left of the complex type is values that cross
// function boundaries, loops and branches (reduction accumulators, reducer
// arguments), complex.create / re / im / constant and selects. This pass
// replaces every complex<T> value by its two T parts (a 1:N type
// conversion), so that the later stages (the cpu target's grid emulation,
// the LLVM lowerings, warp shuffles) see floats only:
//
//   %c = complex.create %a, %b : complex<f32>       (gone: uses take %a, %b)
//   %r = complex.re %c : complex<f32>                -> %a
//   scf.for ... iter_args(%acc = %c) -> complex<f32> -> iter_args(%acc_re = %a,
//                                                       %acc_im = %b) -> f32, f32
//   func.func @add(complex<f32>, complex<f32>) -> complex<f32>
//                                 -> @add(f32, f32, f32, f32) -> (f32, f32)
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "TensorTypeConversion.h"
#include "mlir/Conversion/ComplexToStandard/ComplexToStandard.h"
#include "mlir/Dialect/Complex/IR/Complex.h"
#include "mlir/Dialect/LLVMIR/LLVMTypes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_COMPLEXTOSTANDARDPASS
#define GEN_PASS_DEF_EXPANDCOMPLEXPASS
#include "Passes.h.inc"

namespace {

// Whether `t` is or holds a complex type. The types of a kernel are
// checked without the generic sub-element walk (which sets up a walker per
// call): scalars, shaped types by their element, pointers, functions.
bool containsComplex(Type t) {
  if (isa<ComplexType>(t)) return true;
  if (isa<IntegerType, FloatType, IndexType, LLVM::LLVMPointerType>(t))
    return false;
  if (auto shaped = dyn_cast<ShapedType>(t))
    return containsComplex(shaped.getElementType());
  if (auto fn = dyn_cast<FunctionType>(t))
    return llvm::any_of(fn.getInputs(), containsComplex) ||
           llvm::any_of(fn.getResults(), containsComplex);
  bool found = false;
  t.walk([&](Type sub) {
    if (isa<ComplexType>(sub)) found = true;
  });
  return found;
}

// Whether any value (an op's result or a block's argument) or function
// signature of `module` has a complex type: most kernels have none, and
// then both complex passes have nothing to convert (their conversion
// drivers would still visit every op to find that out).
bool hasComplexValues(ModuleOp module) {
  return module
      .walk([](Operation *op) {
        if (llvm::any_of(op->getResultTypes(), containsComplex))
          return WalkResult::interrupt();
        for (Region &region : op->getRegions())
          for (Block &block : region)
            if (llvm::any_of(block.getArgumentTypes(), containsComplex))
              return WalkResult::interrupt();
        if (auto fn = dyn_cast<FunctionOpInterface>(op))
          if (containsComplex(fn.getFunctionType()))
            return WalkResult::interrupt();
        return WalkResult::advance();
      })
      .wasInterrupted();
}

bool isComplex(Type t) { return isa<ComplexType>(t); }

struct ExpandCreate : OpConversionPattern<complex::CreateOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(complex::CreateOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    SmallVector<Value> parts;
    for (ValueRange operand : adaptor.getOperands())
      llvm::append_range(parts, operand);
    rewriter.replaceOpWithMultiple(op, {parts});
    return success();
  }
};

template <typename PartOp, int kPart>
struct ExpandPart : OpConversionPattern<PartOp> {
  using OpConversionPattern<PartOp>::OpConversionPattern;
  using OneToNOpAdaptor = typename OpConversionPattern<PartOp>::OneToNOpAdaptor;
  LogicalResult
  matchAndRewrite(PartOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    ValueRange parts = adaptor.getOperands().front();
    if (parts.size() != 2) return failure();
    rewriter.replaceOp(op, parts[kPart]);
    return success();
  }
};

struct ExpandConstant : OpConversionPattern<complex::ConstantOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(complex::ConstantOp op, OneToNOpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    ArrayAttr value = op.getValue();
    SmallVector<Value> parts;
    for (Attribute part : value)
      parts.push_back(arith::ConstantOp::create(rewriter, op.getLoc(),
                                                cast<TypedAttr>(part)));
    rewriter.replaceOpWithMultiple(op, {parts});
    return success();
  }
};

// select(%c, %x, %y) on complex values: one select per part.
struct ExpandSelect : OpConversionPattern<arith::SelectOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(arith::SelectOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    if (!isComplex(op.getType())) return failure();
    ValueRange cond = adaptor.getCondition();
    ValueRange lhs = adaptor.getTrueValue(), rhs = adaptor.getFalseValue();
    if (cond.size() != 1 || lhs.size() != 2 || rhs.size() != 2)
      return failure();
    SmallVector<Value> parts;
    for (int k = 0; k < 2; ++k)
      parts.push_back(arith::SelectOp::create(rewriter, op.getLoc(), cond[0],
                                              lhs[k], rhs[k]));
    rewriter.replaceOpWithMultiple(op, {parts});
    return success();
  }
};

struct ExpandComplexPass : impl::ExpandComplexPassBase<ExpandComplexPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    ModuleOp module = getOperation();
    if (!hasComplexValues(module)) return;

    TypeConverter converter;
    converter.addConversion([](Type t) { return t; });
    converter.addConversion(
        [](ComplexType t, SmallVectorImpl<Type> &parts) -> LogicalResult {
          parts.assign(2, t.getElementType());
          return success();
        });

    RewritePatternSet patterns(ctx);
    ConversionTarget target(*ctx);
    populateTensorTypeConversion(converter, patterns, target, isComplex);
    patterns.add<ExpandCreate, ExpandConstant, ExpandSelect,
                 ExpandPart<complex::ReOp, 0>, ExpandPart<complex::ImOp, 1>>(
        converter, ctx);
    ConversionConfig config;
    config.allowPatternRollback = false;  // see lower_tensors.cpp
    if (failed(applyPartialConversion(module, target, std::move(patterns), config)))
      return signalPassFailure();
  }
};

struct ComplexToStandardPass
    : impl::ComplexToStandardPassBase<ComplexToStandardPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!hasComplexValues(module)) return;
    // The upstream pass itself, on the (few) kernels with complex values.
    OpPassManager pipeline(ModuleOp::getOperationName());
    pipeline.addPass(createConvertComplexToStandardPass());
    if (failed(runPipeline(pipeline, module))) signalPassFailure();
  }
};

} // namespace
} // namespace mlir::xla_gpu
