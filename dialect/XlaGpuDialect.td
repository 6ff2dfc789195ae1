//===- XlaGpuDialect.td - the xla_gpu dialect ------------------*- tablegen -*-===//
//
// The dialect that XLA:GPU's fusion emitters produce: loops over indexing
// maps, outlined pure subgraph calls and shared-memory tiles, next to
// tensor/scf/vector/arith/math.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_DIALECT_TD
#define XLA_GPU_DIALECT_TD

include "mlir/IR/OpBase.td"

def XlaGpu_Dialect : Dialect {
  let name = "xla_gpu";
  let cppNamespace = "::mlir::xla_gpu";
  let summary = "Ops and attributes of XLA:GPU's MLIR fusion emitters";
  let description = [{
    `xla_gpu.loop` iterates over the domain of an `#xla_gpu.indexing_map`,
    `xla_gpu.apply_indexing` evaluates such a map, `xla_gpu.pure_call` calls an
    outlined side-effect-free subgraph function, and `xla_gpu.allocate_shared`
    / `xla_gpu.sync_threads` model shared-memory tiles and block barriers in
    value (tensor) semantics.
  }];
  let useDefaultAttributePrinterParser = 1;
  // Folded apply_indexing results become arith.constant.
  let hasConstantMaterializer = 1;
  // Canonicalizations create tensor.insert / tensor.extract.
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::tensor::TensorDialect"];
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class XlaGpu_Op<string mnemonic, list<Trait> traits = []>
    : Op<XlaGpu_Dialect, mnemonic, traits>;

#endif  // XLA_GPU_DIALECT_TD
