//===- XlaGpuDialect.cpp - dialect, aliases and the inliner rule ----------===//

#include "XlaGpuDialect.h"

#include "mlir/Dialect/Func/Extensions/InlinerExtension.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Transforms/InliningUtils.h"

#include "XlaGpuDialect.cpp.inc"

namespace mlir::xla_gpu {
namespace {

// Indexing maps print once at the top of the module as `#map = ...`.
struct XlaGpuOpAsmInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;
  AliasResult getAlias(Attribute attr, llvm::raw_ostream &os) const final {
    if (isa<IndexingMapAttr>(attr)) {
      os << "map";
      return AliasResult::FinalAlias;
    }
    return AliasResult::NoAlias;
  }
};

// The reference walkthrough's rule: a subgraph function is inlined into its pure_call only
// while it has a single call site; a function called from two or more sites
// stays outlined so that code size does not grow with the number of uses.
struct XlaGpuInlinerInterface : public DialectInlinerInterface {
  using DialectInlinerInterface::DialectInlinerInterface;

  bool isLegalToInline(Operation *call, Operation *callable,
                       bool wouldBeCloned) const final {
    auto callee = dyn_cast<func::FuncOp>(callable);
    if (!isa<PureCallOp>(call) || !callee) return false;
    // The inliner moves the body (instead of cloning it) exactly when its
    // use list counts one reference to a discardable callee: this call.
    // That list counts every symbol reference in the callables, and a
    // reference from anywhere else makes the callee non-discardable, so the
    // module holds no other use either. Answering from it spares a walk of
    // the whole module per call (quadratic in the calls of a kernel).
    if (!wouldBeCloned) return true;
    // Otherwise (two or more uses, or a callee the inliner keeps) count.
    Operation *symbolTable = SymbolTable::getNearestSymbolTable(callee);
    if (!symbolTable) return false;
    // The common answer, two call sites, from the calls alone: the inliner
    // asks again for every call of a shared subgraph in every round, and a
    // full count walks every attribute of the module each time.
    if (twoCallSitesIn(symbolTable, callee)) return false;
    auto uses = SymbolTable::getSymbolUses(callee, symbolTable);
    return uses && llvm::range_size(*uses) <= 1;
  }
  // Whether two pure_call or func.call ops in `symbolTable`'s own scope
  // (not in a nested symbol table, where the name could mean another
  // symbol) call `callee` by name: each is a use, so it has two or more.
  static bool twoCallSitesIn(Operation *symbolTable, func::FuncOp callee) {
    StringAttr name = callee.getSymNameAttr();
    int calls = 0;
    WalkResult walk = symbolTable->walk<WalkOrder::PreOrder>(
        [&](Operation *op) -> WalkResult {
          if (op == symbolTable) return WalkResult::advance();
          if (op->hasTrait<OpTrait::SymbolTable>()) return WalkResult::skip();
          SymbolRefAttr target;
          if (auto pure = dyn_cast<PureCallOp>(op)) target = pure.getCalleeAttr();
          else if (auto call = dyn_cast<func::CallOp>(op)) target = call.getCalleeAttr();
          if (target && target.getNestedReferences().empty() &&
              target.getRootReference() == name && ++calls == 2)
            return WalkResult::interrupt();
          return WalkResult::advance();
        });
    return walk.wasInterrupted();
  }

  bool isLegalToInline(Region *, Region *, bool, IRMapping &) const final {
    return true;
  }
  bool isLegalToInline(Operation *, Region *, bool, IRMapping &) const final {
    return true;
  }
};

} // namespace

void XlaGpuDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "XlaGpuOps.cpp.inc"
      >();
  registerAttributes();
  addInterfaces<XlaGpuOpAsmInterface, XlaGpuInlinerInterface>();
}

Operation *XlaGpuDialect::materializeConstant(OpBuilder &builder,
                                              Attribute value, Type type,
                                              Location loc) {
  auto typed = dyn_cast<TypedAttr>(value);
  if (!typed || !arith::ConstantOp::isBuildableWith(typed, type))
    return nullptr;
  return arith::ConstantOp::create(builder, loc, type, typed);
}

void registerXlaGpuDialect(DialectRegistry &registry) {
  registry.insert<XlaGpuDialect, func::FuncDialect>();
  // Inlining a pure_call moves func.return-terminated bodies: the func
  // dialect's inliner interface handles those.
  func::registerInlinerExtension(registry);
}

} // namespace mlir::xla_gpu
