//===- PtxSerializer.h - gpu.module -> PTX ----------------------*- C++ -*-===//

#ifndef XLA_GPU_PASSES_PTXSERIALIZER_H
#define XLA_GPU_PASSES_PTXSERIALIZER_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallString.h"

namespace mlir::xla_gpu {

// PTX for `module` (llvm/nvvm operations under one #nvvm.target), as
// gpu-module-to-binary{format=isa} makes it. `libdevice` (LLVM bitcode; may
// be empty) and the bitcode files of the target's `link` list are linked in
// only when the module declares an external function. Errors are emitted at
// the module.
FailureOr<SmallString<0>> serializeToPtx(gpu::GPUModuleOp module,
                                         ArrayRef<char> libdevice);

}  // namespace mlir::xla_gpu

#endif  // XLA_GPU_PASSES_PTXSERIALIZER_H
