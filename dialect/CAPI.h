/*===- CAPI.h - C API of the xla_gpu dialect --------------------*- C -*-===*\
|*                                                                          *|
|* For embedders that reach MLIR through its C API, and for the Python      *|
|* package (through ctypes). Every function takes or returns the handles of *|
|* mlir-c, so they mix with the upstream C API and Python bindings.         *|
\*===----------------------------------------------------------------------===*/

#ifndef XLA_GPU_DIALECT_CAPI_H
#define XLA_GPU_DIALECT_CAPI_H

#include <stddef.h>
#include <stdint.h>

#include "mlir-c/AffineExpr.h"
#include "mlir-c/AffineMap.h"
#include "mlir-c/IR.h"
#include "mlir-c/Support.h"

#ifdef __cplusplus
extern "C" {
#endif

MLIR_DECLARE_CAPI_DIALECT_REGISTRATION(XlaGpu, xla_gpu);

/* Adds the xla_gpu dialect and the extensions it relies on to `registry`. */
MLIR_CAPI_EXPORTED void xlaGpuRegisterDialect(MlirDialectRegistry registry);

/* Registers every xla_gpu pass in the global pass registry (idempotent). */
MLIR_CAPI_EXPORTED void xlaGpuRegisterPasses(void);

/* #xla_gpu.indexing_map */
MLIR_CAPI_EXPORTED bool xlaGpuAttributeIsAIndexingMap(MlirAttribute attr);

/* Builds an indexing map from its parts; names may be empty (d<i>/s<i>).
 * Bounds arrays hold (lo, hi) pairs. On invalid parts returns a null
 * attribute and writes a message to `error` (at most errorSize bytes). */
MLIR_CAPI_EXPORTED MlirAttribute xlaGpuIndexingMapAttrGet(
    MlirContext ctx, MlirAffineMap map, const MlirStringRef *dimNames,
    const int64_t *dimBounds, const MlirStringRef *symbolNames,
    const int64_t *symbolBounds, intptr_t numConstraints,
    const MlirAffineExpr *constraintExprs, const int64_t *constraintBounds,
    char *error, size_t errorSize);

MLIR_CAPI_EXPORTED MlirAffineMap xlaGpuIndexingMapAttrGetAffineMap(MlirAttribute attr);
/* The name as stored: empty for the default d<i> / s<i>. */
MLIR_CAPI_EXPORTED MlirStringRef xlaGpuIndexingMapAttrGetDimName(MlirAttribute attr, intptr_t pos);
MLIR_CAPI_EXPORTED MlirStringRef xlaGpuIndexingMapAttrGetSymbolName(MlirAttribute attr, intptr_t pos);
MLIR_CAPI_EXPORTED void xlaGpuIndexingMapAttrGetDimBounds(MlirAttribute attr, intptr_t pos, int64_t *lo, int64_t *hi);
MLIR_CAPI_EXPORTED void xlaGpuIndexingMapAttrGetSymbolBounds(MlirAttribute attr, intptr_t pos, int64_t *lo, int64_t *hi);
MLIR_CAPI_EXPORTED intptr_t xlaGpuIndexingMapAttrGetNumConstraints(MlirAttribute attr);
MLIR_CAPI_EXPORTED MlirAffineExpr xlaGpuIndexingMapAttrGetConstraint(MlirAttribute attr, intptr_t pos, int64_t *lo, int64_t *hi);
MLIR_CAPI_EXPORTED bool xlaGpuIndexingMapAttrIsKnownEmpty(MlirAttribute attr);
/* The map after range-aware simplification (constraints that always hold
 * dropped). */
MLIR_CAPI_EXPORTED MlirAttribute xlaGpuIndexingMapAttrSimplify(MlirAttribute attr);
/* `second ∘ first` (first's results feed second's dimensions), simplified. */
MLIR_CAPI_EXPORTED MlirAttribute xlaGpuIndexingMapAttrCompose(MlirAttribute first,
                                                           MlirAttribute second);
/* The map without the symbols nothing uses. */
MLIR_CAPI_EXPORTED MlirAttribute xlaGpuIndexingMapAttrRemoveUnusedSymbols(MlirAttribute attr);
/* The range of `expr` (over the map's variables) on the map's box domain. */
MLIR_CAPI_EXPORTED void xlaGpuIndexingMapAttrEvaluateRange(MlirAttribute attr,
                                                           MlirAffineExpr expr,
                                                           int64_t *lo, int64_t *hi);
/* The row-major linearization of a tensor of the given shape. */
MLIR_CAPI_EXPORTED MlirAttribute xlaGpuIndexingMapAttrGetLinearization(
    MlirContext ctx, intptr_t rank, const int64_t *shape);

/* PTX for `gpuModule` (a gpu.module of llvm/nvvm operations under one
 * #nvvm.target), as gpu-module-to-binary{format=isa} makes it, with two
 * fixed costs left out: the LLVM bitcode `libdevice` (libdeviceSize bytes;
 * may be empty) and the target's `link` files are read only when the module
 * declares an external function, and each thread keeps its TargetMachines.
 * On success calls `callback` once with the PTX and returns true; on failure
 * emits error diagnostics at the module and returns false. */
MLIR_CAPI_EXPORTED bool xlaGpuSerializeToPtx(MlirOperation gpuModule,
                                             const void *libdevice,
                                             size_t libdeviceSize,
                                             MlirStringCallback callback,
                                             void *userData);

#ifdef __cplusplus
}
#endif

#endif /* XLA_GPU_DIALECT_CAPI_H */
