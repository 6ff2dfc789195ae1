//===- XlaGpuAttrs.td - xla_gpu attributes ---------------------*- tablegen -*-===//

#ifndef XLA_GPU_ATTRS_TD
#define XLA_GPU_ATTRS_TD

include "mlir/IR/AttrTypeBase.td"
include "XlaGpuDialect.td"

def XlaGpu_IndexingMapParameter
    : AttrParameter<"::mlir::xla_gpu::IndexingMap", "an indexing map",
                    "const ::mlir::xla_gpu::IndexingMap &"> {
  let cppStorageType = "::mlir::xla_gpu::IndexingMap";
}

def XlaGpu_IndexingMapAttr : AttrDef<XlaGpu_Dialect, "IndexingMap"> {
  let mnemonic = "indexing_map";
  let summary = "An affine map with named, bounded dimensions and symbols";
  let description = [{
    `#xla_gpu.indexing_map<"(th_x, bl_x)[s0] -> (bl_x floordiv 4, th_x * 4 + s0),
    domain: th_x in [0, 127], bl_x in [0, 1023], s0 in [0, 3],
    th_x * 4 + s0 in [0, 511]">`: every dimension and symbol has a closed
    range; constraints (`expr in [lo, hi]`) restrict the domain further. The
    text may be split into adjacent string literals; names print as given.
  }];
  let parameters = (ins XlaGpu_IndexingMapParameter:$indexing_map);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilderWithInferredContext<(ins "const ::mlir::xla_gpu::IndexingMap&":$map), [{
      return $_get(map.getAffineMap().getContext(), map);
    }]>
  ];
  let extraClassDeclaration = [{
    ::mlir::AffineMap getAffineMap() const {
      return getIndexingMap().getAffineMap();
    }
  }];
}

#endif  // XLA_GPU_ATTRS_TD
