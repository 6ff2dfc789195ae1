//===- merge_pointers.cpp - one argument per buffer slice -----------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_MERGEPOINTERSPASS
#include "Passes.h.inc"

namespace {

struct MergePointersPass : impl::MergePointersPassBase<MergePointersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal()) continue;
      // Most functions have no two arguments of one slice: nothing to
      // merge, and no need for the walk of the whole module (every op's
      // attributes) that finds the function's uses.
      llvm::SmallDenseSet<Attribute, 8> slices;
      bool shared = false;
      for (unsigned i = 0, e = func.getNumArguments(); i < e && !shared; ++i)
        if (Attribute slice = func.getArgAttr(i, "xla.slice_index"))
          shared = !slices.insert(slice).second;
      if (!shared) continue;
      auto uses = SymbolTable::getSymbolUses(func, module);
      if (!uses || !uses->empty()) continue;  // a callee keeps its signature
      llvm::DenseMap<Attribute, BlockArgument> first;
      llvm::BitVector erase(func.getNumArguments());
      for (BlockArgument arg : func.getArguments()) {
        Attribute slice = func.getArgAttr(arg.getArgNumber(), "xla.slice_index");
        if (!slice) continue;
        auto [it, inserted] = first.try_emplace(slice, arg);
        if (inserted) continue;
        if (it->second.getType() != arg.getType()) {
          func.emitOpError("arguments #")
              << it->second.getArgNumber() << " and #" << arg.getArgNumber()
              << " share slice " << slice << " but have different types";
          return signalPassFailure();
        }
        arg.replaceAllUsesWith(it->second);
        erase.set(arg.getArgNumber());
      }
      if (erase.any() && failed(func.eraseArguments(erase)))
        return signalPassFailure();
    }
  }
};

} // namespace
} // namespace mlir::xla_gpu
