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
                       bool /*wouldBeCloned*/) const final {
    auto callee = dyn_cast<func::FuncOp>(callable);
    if (!isa<PureCallOp>(call) || !callee) return false;
    Operation *symbolTable = SymbolTable::getNearestSymbolTable(callee);
    if (!symbolTable) return false;
    auto uses = SymbolTable::getSymbolUses(callee, symbolTable);
    return uses && llvm::range_size(*uses) <= 1;
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
