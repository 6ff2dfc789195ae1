//===- lower_tensors.cpp - tensors -> bare pointers, loads and stores -----===//

#include "Passes.h"
#include "TensorTypeConversion.h"
#include "XlaGpuDialect.h"
#include "llvm/ADT/DenseSet.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERTENSORSPASS
#include "Passes.h.inc"

namespace {

constexpr unsigned kSharedMemorySpace = 3;

// The function argument a tensor value is (an in-place update of), if any.
BlockArgument traceToArgument(Value value) {
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
    else if (auto write = dyn_cast<vector::TransferWriteOp>(op))
      value = write.getBase();
    else if (auto loop = dyn_cast<scf::ForOp>(op))
      value = loop.getInitArgs()[result];
    else if (auto loop = dyn_cast<LoopOp>(op))
      value = loop.getInits()[result];
    else if (auto ifOp = dyn_cast<scf::IfOp>(op)) {
      BlockArgument a = traceToArgument(ifOp.thenYield().getOperand(result));
      if (!ifOp.elseBlock() ||
          traceToArgument(ifOp.elseYield().getOperand(result)) != a)
        return {};
      return a;
    } else {
      return {};
    }
  }
  return {};
}

// Element types as stored in memory: i1 takes a byte.
Type storageType(Type element) {
  if (element.isInteger(1)) return IntegerType::get(element.getContext(), 8);
  return element;
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
    if (storageType(element) != element)
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
    if (storageType(element) != element)
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
  WalkResult walk = func.walk([&](Operation *op) -> WalkResult {
    for (Type t : llvm::concat<Type>(op->getOperandTypes(), op->getResultTypes())) {
      auto tensor = dyn_cast<RankedTensorType>(t);
      if (!tensor) continue;
      if (!tensor.hasStaticShape() || tensor.getRank() > 1)
        return op->emitOpError("xla-lower-tensors needs static 1-d tensors "
                               "(run xla-flatten-tensors first), got ")
               << tensor;
      if (!tensor.getElementType().isIntOrFloat())
        return op->emitOpError("xla-lower-tensors: element type ")
               << tensor.getElementType() << " is not supported";
    }
    Value dest;
    if (auto insert = dyn_cast<tensor::InsertOp>(op)) dest = insert.getDest();
    if (auto write = dyn_cast<vector::TransferWriteOp>(op)) dest = write.getBase();
    if (dest)
      if (BlockArgument arg = traceToArgument(dest)) written.insert(arg);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted()) return failure();
  for (Block &block : func.getBody())
    if (auto ret = dyn_cast<func::ReturnOp>(block.getTerminator()))
      for (auto [i, value] : llvm::enumerate(ret.getOperands()))
        if (isa<RankedTensorType>(value.getType()) && !traceToArgument(value))
          return ret.emitOpError("returned tensor #")
                 << i << " is not an in-place update of a function argument";
  func.walk([&](Operation *op) {
    Value source;
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) source = extract.getTensor();
    if (auto read = dyn_cast<vector::TransferReadOp>(op)) source = read.getBase();
    if (!source) return;
    BlockArgument arg = traceToArgument(source);
    bool declaredInvariant =
        arg && func.getArgAttr(arg.getArgNumber(), "xla.invariant");
    if (arg && (declaredInvariant || !written.contains(arg)))
      analysis.invariantReads.insert(op);
  });
  return success();
}

struct LowerTensorsPass : impl::LowerTensorsPassBase<LowerTensorsPass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    ModuleOp module = getOperation();
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
    if (failed(applyPartialConversion(module, target, std::move(patterns))))
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
