//===- erase_dead_functions.cpp - drop unreachable functions --------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::xla_gpu {

#define GEN_PASS_DEF_ERASEDEADFUNCTIONSPASS
#include "Passes.h.inc"

namespace {

struct EraseDeadFunctionsPass
    : impl::EraseDeadFunctionsPassBase<EraseDeadFunctionsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable table(module);
    llvm::SetVector<func::FuncOp> live;
    for (auto f : module.getOps<func::FuncOp>())
      if (f.isPublic()) live.insert(f);
    // Worklist over the functions' symbol references: calls, and ops that
    // name a function without calling it directly (a shuffle_reduce's
    // combiner). SetVector keeps it finite.
    for (size_t i = 0; i < live.size(); ++i) {
      func::FuncOp f = live[i];
      f.getBody().walk([&](Operation *op) {
        op->getAttrDictionary().walk([&](SymbolRefAttr ref) {
          if (auto callee = table.lookup<func::FuncOp>(ref.getRootReference()))
            live.insert(callee);
        });
      });
    }
    for (auto f : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (!live.contains(f)) f.erase();
  }
};

} // namespace
} // namespace mlir::xla_gpu
