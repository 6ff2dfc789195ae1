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
    // Only a private function can be dead: without one (a kernel whose
    // callees were all inlined) there is nothing to find, and the walk
    // below (every op's attribute dictionary) is skipped.
    if (llvm::all_of(module.getOps<func::FuncOp>(),
                     [](func::FuncOp f) { return f.isPublic(); }))
      return;
    SymbolTable table(module);
    llvm::SetVector<func::FuncOp> live;
    for (auto f : module.getOps<func::FuncOp>())
      if (f.isPublic()) live.insert(f);
    // Worklist over the functions' symbol references: calls, and ops that
    // name a function without calling it directly (a shuffle_reduce's
    // combiner). SetVector keeps it finite.
    for (size_t i = 0; i < live.size(); ++i) {
      func::FuncOp f = live[i];
      auto visit = [&](Attribute attr) {
        attr.walk([&](SymbolRefAttr ref) {
          if (auto callee = table.lookup<func::FuncOp>(ref.getRootReference()))
            live.insert(callee);
        });
      };
      // The inherent attributes one by one, then the discardable ones:
      // the same attributes as the op's attribute dictionary, which
      // getAttrDictionary() would build (and unique) for every op.
      f.getBody().walk([&](Operation *op) {
        if (std::optional<RegisteredOperationName> info = op->getRegisteredInfo()) {
          for (StringAttr name : info->getAttributeNames())
            if (std::optional<Attribute> attr = op->getInherentAttr(name.getValue()))
              if (*attr) visit(*attr);
        } else {
          visit(op->getAttrDictionary());
        }
        for (NamedAttribute named : op->getDiscardableAttrs()) visit(named.getValue());
      });
    }
    for (auto f : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (!live.contains(f)) f.erase();
  }
};

} // namespace
} // namespace mlir::xla_gpu
