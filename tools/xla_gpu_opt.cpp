//===- xla_gpu_opt.cpp - the opt-like driver of xla_gpu -------------------===//
//
// mlir-opt with the xla_gpu dialect and passes, every upstream dialect and
// pass, linked against the same MLIR as the Python bindings. It follows
// mlir-opt's flags: one per registered pass, --pass-pipeline,
// --split-input-file, --verify-diagnostics, --mlir-print-ir-after-all,
// --allow-unregistered-dialect, --mlir-print-debuginfo and the other
// --mlir-print-* flags.
//
//===----------------------------------------------------------------------===//

#include "Passes.h"
#include "XlaGpuDialect.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::opt<std::string> inputFilename(cl::Positional,
                                          cl::desc("<input file>"),
                                          cl::init("-"));
static cl::opt<std::string> outputFilename("o", cl::desc("Output filename"),
                                           cl::value_desc("filename"),
                                           cl::init("-"));
static cl::opt<std::string> splitInputFile(
    "split-input-file", cl::ValueOptional,
    cl::callback([](const std::string &value) {
      if (value.empty()) splitInputFile = "// -----";
    }),
    cl::desc("Split the input into chunks at this marker (default "
             "'// -----') and process each chunk on its own"),
    cl::init(""));
static cl::opt<std::string> outputSplitMarker(
    "output-split-marker", cl::desc("Printed between the outputs of chunks"),
    cl::init("// -----"));
static cl::opt<bool> verifyDiagnostics(
    "verify-diagnostics",
    cl::desc("Check that emitted diagnostics match expected-* annotations"),
    cl::init(false));
static cl::opt<bool> allowUnregisteredDialects(
    "allow-unregistered-dialect",
    cl::desc("Allow operations of unregistered dialects"), cl::init(false));
static cl::opt<bool> printIRAfterAll(
    "mlir-print-ir-after-all", cl::desc("Print the IR after every pass"),
    cl::init(false));
static cl::opt<bool> printIRBeforeAll(
    "mlir-print-ir-before-all", cl::desc("Print the IR before every pass"),
    cl::init(false));
static cl::opt<bool> verifyPasses(
    "verify-each", cl::desc("Verify the IR after every pass"), cl::init(true));

namespace {

struct Chunk {
  llvm::StringRef text;
  unsigned firstLine;  // 0-based line of the chunk in the whole file
};

std::vector<Chunk> splitBuffer(llvm::StringRef buffer, llvm::StringRef marker) {
  if (marker.empty()) return {{buffer, 0}};
  std::vector<Chunk> chunks;
  size_t start = 0, lineStart = 0;
  unsigned line = 0, chunkLine = 0;
  while (lineStart <= buffer.size()) {
    size_t eol = buffer.find('\n', lineStart);
    llvm::StringRef lineText =
        buffer.slice(lineStart, eol == llvm::StringRef::npos ? buffer.size() : eol);
    if (lineText.trim().starts_with(marker)) {
      chunks.push_back({buffer.slice(start, lineStart), chunkLine});
      start = eol == llvm::StringRef::npos ? buffer.size() : eol + 1;
      chunkLine = line + 1;
    }
    if (eol == llvm::StringRef::npos) break;
    lineStart = eol + 1;
    ++line;
  }
  chunks.push_back({buffer.substr(start), chunkLine});
  return chunks;
}

LogicalResult runOnModule(MLIRContext &context, llvm::SourceMgr &sourceMgr,
                          const PassPipelineCLParser &pipeline,
                          llvm::raw_ostream &os) {
  ParserConfig config(&context);
  Block block;
  if (failed(parseSourceFile(sourceMgr, &block, config))) return failure();
  // Like mlir-opt: a file of several top-level ops is wrapped in a module.
  OwningOpRef<ModuleOp> module;
  if (llvm::hasSingleElement(block) && isa<ModuleOp>(block.front())) {
    module = cast<ModuleOp>(&block.front());
    module->getOperation()->remove();
  } else {
    module = ModuleOp::create(FileLineColLoc::get(
        StringAttr::get(&context, sourceMgr.getMemoryBuffer(
                                       sourceMgr.getMainFileID())
                                       ->getBufferIdentifier()),
        1, 1));
    module->getBody()->getOperations().splice(
        module->getBody()->begin(), block.getOperations());
  }
  if (failed(verify(*module))) return failure();

  PassManager pm(&context, ModuleOp::getOperationName(),
                 OpPassManager::Nesting::Implicit);
  pm.enableVerifier(verifyPasses);
  if (printIRAfterAll || printIRBeforeAll) {
    // Module-scope dumps need a single-threaded pass manager (else MLIR
    // aborts).
    context.disableMultithreading();
    pm.enableIRPrinting(
        [](Pass *, Operation *) { return printIRBeforeAll.getValue(); },
        [](Pass *, Operation *) { return printIRAfterAll.getValue(); },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
        /*printAfterOnlyOnFailure=*/false, llvm::errs());
  }
  auto errorHandler = [&](const llvm::Twine &msg) {
    return emitError(UnknownLoc::get(&context)) << msg;
  };
  if (failed(pipeline.addToPipeline(pm, errorHandler))) return failure();
  if (failed(pm.run(*module))) return failure();
  module->print(os, OpPrintingFlags());
  os << '\n';
  return success();
}

LogicalResult processChunk(DialectRegistry &registry, Chunk chunk,
                           llvm::StringRef bufferName,
                           const PassPipelineCLParser &pipeline,
                           llvm::raw_ostream &os) {
  MLIRContext context(registry);
  context.allowUnregisteredDialects(allowUnregisteredDialects);
  // As mlir-opt: expected-* annotations never list the op dumps.
  if (verifyDiagnostics) context.printOpOnDiagnostic(false);
  // Leading newlines keep the line numbers of the whole file in diagnostics.
  std::string text(chunk.firstLine, '\n');
  text += chunk.text;
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, bufferName), llvm::SMLoc());
  if (!verifyDiagnostics) {
    SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    return runOnModule(context, sourceMgr, pipeline, os);
  }
  SourceMgrDiagnosticVerifierHandler handler(sourceMgr, &context);
  (void)runOnModule(context, sourceMgr, pipeline, os);
  return handler.verify();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  DialectRegistry registry;
  registerAllDialects(registry);
  registerAllExtensions(registry);
  xla_gpu::registerXlaGpuDialect(registry);
  registerAllPasses();
  xla_gpu::registerXlaGpuPasses();

  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  PassPipelineCLParser pipeline("", "Compiler passes to run", "p");
  cl::ParseCommandLineOptions(argc, argv,
                              "xla_gpu optimizer driver (mlir-opt with the "
                              "xla_gpu dialect and passes)\n");

  std::string error;
  auto input = openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << "xla-gpu-opt: " << error << "\n";
    return 1;
  }
  auto output = openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << "xla-gpu-opt: " << error << "\n";
    return 1;
  }
  bool ok = true;
  auto chunks = splitBuffer(input->getBuffer(), splitInputFile);
  for (auto [i, chunk] : llvm::enumerate(chunks)) {
    if (i > 0) output->os() << outputSplitMarker << "\n";
    ok &= succeeded(processChunk(registry, chunk,
                                 input->getBufferIdentifier(), pipeline,
                                 output->os()));
  }
  if (!ok) return 1;
  output->keep();
  return 0;
}
