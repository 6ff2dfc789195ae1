//===- xla_gpu_opt.cpp - the opt-like driver of xla_gpu -------------------===//
//
// mlir-opt with the xla_gpu dialect and passes: MLIR's own MlirOptMain over
// every upstream dialect, extension and pass plus ours, so every mlir-opt
// flag works (--pass-pipeline, --split-input-file, --verify-diagnostics,
// --mlir-print-ir-*, --mlir-timing, --mlir-pass-statistics, ...).
//
// It runs on a thread with a large stack: MLIR's parser, verifier and
// walkers recurse once per nested region, and deeply nested input must get
// through (or fail with a diagnostic) rather than overflow the main
// thread's stack.
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "llvm/Support/thread.h"
#include <optional>
#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

namespace {

// Virtual address space only: pages are committed as the recursion uses
// them.
constexpr unsigned kStackBytes = 1024u << 20;

} // namespace

int main(int argc, char **argv) {
  // MlirOptMain initializes LLVM (InitLLVM) itself, on the worker thread.
  mlir::registerAllPasses();
  mlir::xla_gpu::registerXlaGpuPasses();
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::xla_gpu::registerXlaGpuDialect(registry);

  int status = 1;
  llvm::thread worker(std::optional<unsigned>(kStackBytes), [&] {
    status = mlir::asMainReturnCode(mlir::MlirOptMain(
        argc, argv,
        "xla_gpu optimizer driver (mlir-opt with the xla_gpu dialect and "
        "passes)\n",
        registry));
  });
  worker.join();
  return status;
}
