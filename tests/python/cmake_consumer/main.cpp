// Parses xla_gpu IR given on the command line, checks the indexing map
// through the C++ API, runs the canonicalizer and prints the result.
#include "xla_gpu/Passes.h"
#include "xla_gpu/XlaGpuDialect.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  mlir::DialectRegistry registry;
  mlir::xla_gpu::registerXlaGpuDialect(registry);
  mlir::MLIRContext context(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(argv[1], &context);
  if (!module) return 1;
  module->walk([](mlir::xla_gpu::ApplyIndexingOp op) {
    const auto &map = op.getIndexingMap();
    llvm::outs() << "dims=" << map.getNumDims() << " first="
                 << map.getDimName(0) << " range=[" << map.getDims()[0].bounds.lower
                 << ", " << map.getDims()[0].bounds.upper << "]\n";
  });
  mlir::PassManager pm(&context);
  pm.addPass(mlir::createCanonicalizerPass());
  if (mlir::failed(pm.run(*module))) return 1;
  module->print(llvm::outs());
  return 0;
}
