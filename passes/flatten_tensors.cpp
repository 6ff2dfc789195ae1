//===- flatten_tensors.cpp - N-d tensors -> 1-d ---------------------------===//

#include "Passes.h"
#include "TensorTypeConversion.h"
#include "XlaGpuDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_FLATTENTENSORSPASS
#include "Passes.h.inc"

namespace {

bool needsFlattening(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.hasStaticShape() && tensor.getRank() != 1;
}

class FlatTypeConverter : public TypeConverter {
public:
  FlatTypeConverter() {
    addConversion([](Type type) { return type; });
    addConversion([](RankedTensorType type) -> Type {
      if (!type.hasStaticShape() || type.getRank() == 1) return type;
      return RankedTensorType::get({type.getNumElements()},
                                   type.getElementType());
    });
  }
};

// The 1-d index of `indices` into a tensor of `type`.
Value linearIndex(OpBuilder &b, Location loc, RankedTensorType type,
                  ValueRange indices) {
  if (type.getRank() == 0) return arith::ConstantIndexOp::create(b, loc, 0);
  return ApplyIndexingOp::create(
             b, loc, indices,
             IndexingMap::getLinearization(type.getShape(), b.getContext()))
      .getResult(0);
}

struct FlattenExtract : OpConversionPattern<tensor::ExtractOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(tensor::ExtractOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto type = op.getTensor().getType();
    if (!needsFlattening(type)) return failure();
    Value index = linearIndex(rewriter, op.getLoc(), type, adaptor.getIndices());
    rewriter.replaceOpWithNewOp<tensor::ExtractOp>(op, adaptor.getTensor(),
                                                   index);
    return success();
  }
};

struct FlattenInsert : OpConversionPattern<tensor::InsertOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(tensor::InsertOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto type = op.getDest().getType();
    if (!needsFlattening(type)) return failure();
    Value index = linearIndex(rewriter, op.getLoc(), type, adaptor.getIndices());
    rewriter.replaceOpWithNewOp<tensor::InsertOp>(op, adaptor.getScalar(),
                                                  adaptor.getDest(), index);
    return success();
  }
};

// An in-bounds read of a 1-d vector along the innermost dimension (a
// scatter's row of updates): the same read of the flat tensor.
struct FlattenTransferRead : OpConversionPattern<vector::TransferReadOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(vector::TransferReadOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op.getBase().getType());
    if (!type || !needsFlattening(type)) return failure();
    VectorType vector = op.getVectorType();
    if (vector.getRank() != 1 || op.getMask() ||
        !op.getPermutationMap().isMinorIdentity() || !op.getInBoundsValues()[0])
      return rewriter.notifyMatchFailure(
          op, "only in-bounds 1-d reads along the innermost dimension");
    Location loc = op.getLoc();
    Value index = linearIndex(rewriter, loc, type, adaptor.getIndices());
    rewriter.replaceOpWithNewOp<vector::TransferReadOp>(
        op, vector, adaptor.getBase(), ValueRange{index},
        AffineMapAttr::get(AffineMap::getMinorIdentityMap(1, 1, op.getContext())),
        adaptor.getPadding(), /*mask=*/Value(),
        rewriter.getBoolArrayAttr({true}));
    return success();
  }
};

// The op keeps its region (the element type does not change).
struct FlattenAtomicRMW : OpConversionPattern<AtomicRMWOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(AtomicRMWOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto type = cast<RankedTensorType>(op.getInput().getType());
    if (!needsFlattening(type)) return failure();
    Location loc = op.getLoc();
    Value index = linearIndex(rewriter, loc, type, adaptor.getIndices());
    OperationState state(loc, op->getName());
    state.addOperands({adaptor.getInput(), index});
    state.addTypes(adaptor.getInput().getType());
    state.addAttributes(op->getDiscardableAttrDictionary().getValue());
    state.addRegion();
    Operation *flat = rewriter.create(state);
    Region &region = flat->getRegion(0);
    rewriter.inlineRegionBefore(op.getComputation(), region, region.end());
    rewriter.replaceOp(op, flat->getResults());
    return success();
  }
};

struct FlattenConstant : OpConversionPattern<arith::ConstantOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(arith::ConstantOp op, OpAdaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
    if (!dense || !needsFlattening(op.getType())) return failure();
    auto type = cast<ShapedType>(getTypeConverter()->convertType(op.getType()));
    rewriter.replaceOpWithNewOp<arith::ConstantOp>(op, dense.reshape(type));
    return success();
  }
};

struct FlattenTensorsPass
    : impl::FlattenTensorsPassBase<FlattenTensorsPass> {
  void runOnOperation() override {
    if (failed(verifyTensorSizesFitInt64(getOperation())))
      return signalPassFailure();
    MLIRContext *ctx = &getContext();
    FlatTypeConverter converter;
    RewritePatternSet patterns(ctx);
    ConversionTarget target(*ctx);

    populateTensorTypeConversion(converter, patterns, target, needsFlattening);
    patterns.add<FlattenExtract, FlattenInsert, FlattenConstant, FlattenAtomicRMW,
                 FlattenTransferRead,
                 RetypeOp<AllocateSharedOp>, RetypeOp<SyncThreadsOp>,
                 RetypeOp<PureCallOp>>(converter, ctx);
    ConversionConfig config;
    config.allowPatternRollback = false;  // see lower_tensors.cpp
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns), config)))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::xla_gpu
