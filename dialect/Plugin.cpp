//===- Plugin.cpp - xla_gpu as an mlir-opt dialect and pass plugin --------===//
//
//   mlir-opt --load-dialect-plugin=P --load-pass-plugin=P ...
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "llvm/Config/llvm-config.h"
#include "mlir/Tools/Plugins/DialectPlugin.h"
#include "mlir/Tools/Plugins/PassPlugin.h"

extern "C" LLVM_ATTRIBUTE_WEAK mlir::DialectPluginLibraryInfo
mlirGetDialectPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "XlaGpu", LLVM_VERSION_STRING,
          [](mlir::DialectRegistry *registry) {
            mlir::xla_gpu::registerXlaGpuDialect(*registry);
          }};
}

extern "C" LLVM_ATTRIBUTE_WEAK mlir::PassPluginLibraryInfo
mlirGetPassPluginInfo() {
  return {MLIR_PLUGIN_API_VERSION, "XlaGpuPasses", LLVM_VERSION_STRING,
          []() { mlir::xla_gpu::registerXlaGpuPasses(); }};
}
