//===- lower_to_llvm.cpp - to the llvm and nvvm dialects ------------------===//

#include "LLVMLowering.h"
#include "Passes.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_LOWERTOLLVMPASS
#include "Passes.h.inc"

namespace {

// CUDA's launch limits (blocks per grid in x and in y, threads per block).
constexpr int64_t kMaxBlocksX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxBlocksY = 65535;
constexpr int64_t kMaxThreadsPerBlock = 1024;

// The launch dimension a kernel's `gpu.thread_id` / `gpu.block_id` ops in
// `dimension` promise through their `xla.range` (one more than the upper
// bound): the largest over the module and the op that says it, or 0 where
// no op says.
template <typename IdOp>
std::pair<int64_t, Operation *>
launchDimension(ModuleOp module, gpu::Dimension dimension = gpu::Dimension::x) {
  std::pair<int64_t, Operation *> largest{0, nullptr};
  module.walk([&](IdOp op) {
    if (op.getDimension() != dimension) return;
    auto range = op->template getAttrOfType<ArrayAttr>("xla.range");
    if (!range || range.size() != 2) return;
    auto hi = dyn_cast<IntegerAttr>(range[1]);
    if (hi && hi.getInt() + 1 > largest.first)
      largest = {hi.getInt() + 1, op};
  });
  return largest;
}

// The `upper_bound` of gpu id ops from their xla.range, so that the NVVM
// special register reads carry LLVM range metadata.
template <typename IdOp>
void setUpperBounds(ModuleOp module) {
  module.walk([&](IdOp op) {
    auto range = op->template getAttrOfType<ArrayAttr>("xla.range");
    if (!range || range.size() != 2 || op.getUpperBoundAttr()) return;
    if (auto hi = dyn_cast<IntegerAttr>(range[1]))
      op.setUpperBoundAttr(IntegerAttr::get(IndexType::get(op.getContext()),
                                            hi.getInt() + 1));
  });
}

// math.sqrt as LLVM's sqrt intrinsic, which NVPTX emits as the IEEE
// `sqrt.rn.f32` (XLA:GPU's sqrt). libdevice's __nv_sqrtf would give
// `sqrt.approx.f32` unless __CUDA_PREC_SQRT is reflected as 1. Rewritten
// before the conversion so that the libdevice patterns never see it.
void sqrtToIntrinsic(ModuleOp module) {
  module.walk([](math::SqrtOp op) {
    if (!isa<Float32Type, Float64Type>(getElementTypeOrSelf(op.getType())))
      return;
    OpBuilder b(op);
    Value root = LLVM::SqrtOp::create(b, op.getLoc(), op.getOperand());
    op.replaceAllUsesWith(root);
    op.erase();
  });
}

// Every atomic at gpu (device) scope, as XLA:GPU's are: LLVM's default
// (system) scope makes NVPTX emit `.sys` CAS loops and loads, which also
// order against the host and peer GPUs and cost more.
void setDeviceScope(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  StringAttr device = StringAttr::get(ctx, "device");
  module.walk([&](Operation *op) {
    llvm::TypeSwitch<Operation *>(op)
        .Case<LLVM::AtomicRMWOp, LLVM::AtomicCmpXchgOp>([&](auto atomic) {
          if (!atomic.getSyncscopeAttr()) atomic.setSyncscopeAttr(device);
        })
        .Case<LLVM::LoadOp, LLVM::StoreOp>([&](auto access) {
          if (access.getOrdering() != LLVM::AtomicOrdering::not_atomic &&
              !access.getSyncscopeAttr())
            access.setSyncscopeAttr(device);
        });
  });
}

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

    // Launch limits the emitters' grids must respect (the loop emitter
    // splits a grid over the x limit over y; the others launch 1-D grids).
    auto [blocks, blockOp] = launchDimension<gpu::BlockIdOp>(module);
    if (blocks > kMaxBlocksX) {
      blockOp->emitOpError("a grid of ")
          << blocks << " blocks exceeds CUDA's limit of " << kMaxBlocksX
          << " blocks in x (only the loop emitter splits such a grid over y)";
      return signalPassFailure();
    }
    auto [blocksY, blockYOp] =
        launchDimension<gpu::BlockIdOp>(module, gpu::Dimension::y);
    if (blocksY > kMaxBlocksY) {
      blockYOp->emitOpError("a grid of ")
          << blocksY << " blocks in y exceeds CUDA's limit of " << kMaxBlocksY;
      return signalPassFailure();
    }
    auto [threads, threadOp] = launchDimension<gpu::ThreadIdOp>(module);
    if (threads > kMaxThreadsPerBlock) {
      threadOp->emitOpError("a block of ")
          << threads << " threads exceeds CUDA's limit of "
          << kMaxThreadsPerBlock << " threads per block";
      return signalPassFailure();
    }
    setUpperBounds<gpu::ThreadIdOp>(module);
    setUpperBounds<gpu::BlockIdOp>(module);
    sqrtToIntrinsic(module);

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
    // That marks llvm.intr.sqrt illegal (to send it to libdevice): the
    // IEEE sqrt of sqrtToIntrinsic stays.
    target.addLegalOp<LLVM::SqrtOp>();
    if (failed(applyFullConversion(module, target, std::move(patterns))))
      return signalPassFailure();

    // Kernels: `.entry`, and `.maxntid` from the threads the ids promise
    // (ptxas then budgets registers for that block size, and the driver
    // refuses a larger launch instead of running it wrongly).
    for (auto f : module.getOps<LLVM::LLVMFuncOp>()) {
      if (!kernels.contains(f.getSymName())) continue;
      f->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), UnitAttr::get(ctx));
      if (threads > 0)
        f->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
                   DenseI32ArrayAttr::get(
                       ctx, {static_cast<int32_t>(threads), 1, 1}));
      f->removeAttr("xla.entry");
    }
    setDeviceScope(module);
  }
};

} // namespace
} // namespace mlir::xla_gpu
