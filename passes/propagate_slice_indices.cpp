//===- propagate_slice_indices.cpp - buffer slices of callee parameters ---===//

#include "Passes.h"
#include "XlaGpuDialect.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_PROPAGATESLICEINDICESPASS
#include "Passes.h.inc"

namespace {

constexpr llvm::StringLiteral kSliceIndex = "xla.slice_index";
constexpr llvm::StringLiteral kInvariant = "xla.invariant";

struct PropagateSliceIndicesPass
    : impl::PropagateSliceIndicesPassBase<PropagateSliceIndicesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable table(module);
    // callee parameter -> the caller argument every call passes, or null
    // once two calls disagree.
    bool changed = true;
    for (int round = 0; changed && round < 64; ++round) {
      changed = false;
      llvm::DenseMap<std::pair<Operation *, unsigned>, BlockArgument> source;
      llvm::DenseSet<std::pair<Operation *, unsigned>> conflicting;
      module.walk([&](CallOpInterface call) {
        auto ref = dyn_cast<SymbolRefAttr>(call.getCallableForCallee());
        auto callee = ref ? table.lookup<func::FuncOp>(ref.getRootReference())
                          : func::FuncOp();
        if (!callee || callee.isExternal()) return;
        for (auto [i, operand] : llvm::enumerate(call.getArgOperands())) {
          auto key = std::make_pair(callee.getOperation(), unsigned(i));
          auto arg = dyn_cast<BlockArgument>(operand);
          auto owner = arg ? dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())
                           : func::FuncOp();
          if (!owner || !owner.getArgAttr(arg.getArgNumber(), kSliceIndex)) {
            conflicting.insert(key);
            continue;
          }
          auto [it, inserted] = source.try_emplace(key, arg);
          if (!inserted && it->second != arg) conflicting.insert(key);
        }
      });
      for (auto [key, arg] : source) {
        if (conflicting.contains(key)) continue;
        auto callee = cast<func::FuncOp>(key.first);
        auto owner = cast<func::FuncOp>(arg.getOwner()->getParentOp());
        for (StringRef name : {StringRef(kSliceIndex), StringRef(kInvariant)}) {
          Attribute value = owner.getArgAttr(arg.getArgNumber(), name);
          if (value && callee.getArgAttr(key.second, name) != value) {
            callee.setArgAttr(key.second, name, value);
            changed = true;
          }
        }
      }
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
