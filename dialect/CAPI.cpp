//===- CAPI.cpp - C API of the xla_gpu dialect ----------------------------===//

#include "CAPI.h"

#include <cstring>

#include "Passes.h"
#include "PtxSerializer.h"
#include "XlaGpuDialect.h"
#include "mlir/CAPI/AffineExpr.h"
#include "mlir/CAPI/AffineMap.h"
#include "mlir/CAPI/IR.h"
#include "mlir/CAPI/Registration.h"
#include "mlir/CAPI/Support.h"

using namespace mlir;
using namespace mlir::xla_gpu;

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(XlaGpu, xla_gpu, XlaGpuDialect)

void xlaGpuRegisterDialect(MlirDialectRegistry registry) {
  registerXlaGpuDialect(*unwrap(registry));
}

void xlaGpuRegisterPasses(void) {
  static bool registered = [] {
    registerXlaGpuPasses();
    return true;
  }();
  (void)registered;
}

static const IndexingMap &mapOf(MlirAttribute attr) {
  return cast<IndexingMapAttr>(unwrap(attr)).getIndexingMap();
}

bool xlaGpuAttributeIsAIndexingMap(MlirAttribute attr) {
  return isa<IndexingMapAttr>(unwrap(attr));
}

MlirAttribute xlaGpuIndexingMapAttrGet(
    MlirContext ctx, MlirAffineMap map, const MlirStringRef *dimNames,
    const int64_t *dimBounds, const MlirStringRef *symbolNames,
    const int64_t *symbolBounds, intptr_t numConstraints,
    const MlirAffineExpr *constraintExprs, const int64_t *constraintBounds,
    char *error, size_t errorSize) {
  AffineMap affineMap = unwrap(map);
  auto variables = [](unsigned n, const MlirStringRef *names,
                      const int64_t *bounds) {
    std::vector<Variable> vars;
    for (unsigned i = 0; i < n; ++i)
      vars.push_back({Interval{bounds[2 * i], bounds[2 * i + 1]},
                      names ? unwrap(names[i]).str() : std::string()});
    return vars;
  };
  std::vector<Variable> dims =
      variables(affineMap.getNumDims(), dimNames, dimBounds);
  std::vector<Variable> symbols =
      variables(affineMap.getNumSymbols(), symbolNames, symbolBounds);
  std::vector<Constraint> constraints;
  for (intptr_t i = 0; i < numConstraints; ++i)
    constraints.push_back({unwrap(constraintExprs[i]),
                           Interval{constraintBounds[2 * i],
                                    constraintBounds[2 * i + 1]}});
  if (auto err = IndexingMap::validate(affineMap, dims, symbols, constraints)) {
    if (error && errorSize > 0) {
      std::strncpy(error, err->c_str(), errorSize - 1);
      error[errorSize - 1] = '\0';
    }
    return MlirAttribute{nullptr};
  }
  return wrap(IndexingMapAttr::get(
      unwrap(ctx), IndexingMap(affineMap, std::move(dims), std::move(symbols),
                               std::move(constraints))));
}

MlirAffineMap xlaGpuIndexingMapAttrGetAffineMap(MlirAttribute attr) {
  return wrap(mapOf(attr).getAffineMap());
}

MlirStringRef xlaGpuIndexingMapAttrGetDimName(MlirAttribute attr,
                                              intptr_t pos) {
  return wrap(llvm::StringRef(mapOf(attr).getDims()[pos].name));
}

MlirStringRef xlaGpuIndexingMapAttrGetSymbolName(MlirAttribute attr,
                                                 intptr_t pos) {
  return wrap(llvm::StringRef(mapOf(attr).getSymbols()[pos].name));
}

void xlaGpuIndexingMapAttrGetDimBounds(MlirAttribute attr, intptr_t pos,
                                       int64_t *lo, int64_t *hi) {
  const Interval &b = mapOf(attr).getDims()[pos].bounds;
  *lo = b.lower;
  *hi = b.upper;
}

void xlaGpuIndexingMapAttrGetSymbolBounds(MlirAttribute attr, intptr_t pos,
                                          int64_t *lo, int64_t *hi) {
  const Interval &b = mapOf(attr).getSymbols()[pos].bounds;
  *lo = b.lower;
  *hi = b.upper;
}

intptr_t xlaGpuIndexingMapAttrGetNumConstraints(MlirAttribute attr) {
  return mapOf(attr).getConstraints().size();
}

MlirAffineExpr xlaGpuIndexingMapAttrGetConstraint(MlirAttribute attr,
                                                  intptr_t pos, int64_t *lo,
                                                  int64_t *hi) {
  const Constraint &c = mapOf(attr).getConstraints()[pos];
  *lo = c.bounds.lower;
  *hi = c.bounds.upper;
  return wrap(c.expr);
}

bool xlaGpuIndexingMapAttrIsKnownEmpty(MlirAttribute attr) {
  return mapOf(attr).isKnownEmpty();
}

MlirAttribute xlaGpuIndexingMapAttrSimplify(MlirAttribute attr) {
  IndexingMap map = mapOf(attr);
  map.simplify();
  return wrap(IndexingMapAttr::get(unwrap(attr).getContext(), map));
}

MlirAttribute xlaGpuIndexingMapAttrGetLinearization(MlirContext ctx,
                                                    intptr_t rank,
                                                    const int64_t *shape) {
  return wrap(IndexingMapAttr::get(
      unwrap(ctx), IndexingMap::getLinearization(
                       llvm::ArrayRef<int64_t>(shape, rank), unwrap(ctx))));
}

MlirAttribute xlaGpuIndexingMapAttrCompose(MlirAttribute first,
                                           MlirAttribute second) {
  return wrap(IndexingMapAttr::get(unwrap(first).getContext(),
                                   IndexingMap::compose(mapOf(first),
                                                        mapOf(second))));
}

MlirAttribute xlaGpuIndexingMapAttrRemoveUnusedSymbols(MlirAttribute attr) {
  return wrap(IndexingMapAttr::get(unwrap(attr).getContext(),
                                   mapOf(attr).withoutUnusedSymbols()));
}

void xlaGpuIndexingMapAttrEvaluateRange(MlirAttribute attr, MlirAffineExpr expr,
                                        int64_t *lo, int64_t *hi) {
  Interval r = mapOf(attr).evaluateRange(unwrap(expr));
  *lo = r.lower;
  *hi = r.upper;
}

bool xlaGpuSerializeToPtx(MlirOperation gpuModule, const void *libdevice,
                          size_t libdeviceSize, MlirStringCallback callback,
                          void *userData) {
  Operation *op = unwrap(gpuModule);
  auto module = dyn_cast<gpu::GPUModuleOp>(op);
  if (!module) {
    op->emitError("expected a gpu.module, got ") << op->getName();
    return false;
  }
  FailureOr<SmallString<0>> ptx = serializeToPtx(
      module, ArrayRef<char>(static_cast<const char *>(libdevice),
                             libdevice ? libdeviceSize : 0));
  if (failed(ptx))
    return false;
  callback(wrap(StringRef(*ptx)), userData);
  return true;
}
