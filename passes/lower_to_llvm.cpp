//===- lower_to_llvm.cpp - to the llvm and nvvm dialects ------------------===//

#include "LLVMLowering.h"
#include "Passes.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERTOLLVMPASS
#include "Passes.h.inc"

namespace {

struct LowerToLLVMPass : impl::LowerToLLVMPassBase<LowerToLLVMPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();

    // Kernels: functions marked xla.entry, else public ones without results.
    llvm::DenseSet<StringRef> kernels;
    bool anyMarked = false;
    for (auto f : module.getOps<func::FuncOp>())
      anyMarked |= f->hasAttr("xla.entry");
    for (auto f : module.getOps<func::FuncOp>()) {
      bool isKernel = anyMarked ? f->hasAttr("xla.entry")
                                : f.isPublic() && f.getNumResults() == 0 &&
                                      !f.isExternal();
      if (isKernel) kernels.insert(f.getSymName());
    }

    // xla_gpu ops are lowered by earlier passes; say which.
    WalkResult leftOver =
        module.walk<WalkOrder::PreOrder>([](Operation *op) -> WalkResult {
      if (!isa_and_nonnull<XlaGpuDialect>(op->getDialect()))
        return WalkResult::advance();
      StringRef pass = llvm::TypeSwitch<Operation *, StringRef>(op)
          .Case([](ShuffleReduceOp) { return "xla-lower-shuffle-reduce"; })
          .Case<AtomicRMWOp, AllocateSharedOp, SyncThreadsOp>(
              [](Operation *) { return "xla-lower-tensors"; })
          .Case([](ApplyIndexingOp) { return "xla-simplify-affine"; })
          .Case([](PureCallOp) { return "xla-convert-pure-call-ops"; })
          .Default([](Operation *) { return "xla-lower-xla-to-scf"; });
      return op->emitOpError("has no LLVM lowering (run ") << pass
                                                           << " first)";
    });
    if (leftOver.wasInterrupted()) return signalPassFailure();

    LowerToLLVMOptions options(ctx);
    LLVMTypeConverter converter(ctx, options);
    RewritePatternSet patterns(ctx);
    populateCommonToLLVMPatterns(converter, patterns);
    // libdevice calls win over generic math lowerings where both exist.
    populateLibDeviceConversionPatterns(converter, patterns, /*benefit=*/10);
    populateGpuToNVVMConversionPatterns(converter, patterns);
    populateMathToLLVMConversionPatterns(converter, patterns);

    LLVMConversionTarget target(*ctx);
    target.addLegalOp<ModuleOp>();
    configureGpuToNVVMConversionLegality(target);
    if (failed(applyFullConversion(module, target, std::move(patterns))))
      return signalPassFailure();

    for (auto f : module.getOps<LLVM::LLVMFuncOp>()) {
      if (!kernels.contains(f.getSymName())) continue;
      f->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), UnitAttr::get(ctx));
      f->removeAttr("xla.entry");
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
