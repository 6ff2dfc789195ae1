//===- ptx_serializer.cpp - gpu.module -> PTX with reused LLVM state ------===//
//
// The same steps as MLIR's NVVM target (gpu-module-to-binary{format=isa}):
// translate the gpu.module to LLVM IR, link the bitcode libraries, optimize
// at the target's O level with the TargetMachine's pipeline, emit PTX. Two
// fixed costs of that path are left out, and on a lone kernel they are a
// tenth of its whole compile:
//   * MLIR links the bitcode libraries (its embedded libdevice, 486 KB) into
//     every module. Even loaded lazily, reading the library's symbol table
//     and metadata costs about a millisecond and a half. Here the libraries
//     are read only when the module declares a function that one of them
//     could define; most loop, reduction and transpose kernels declare none.
//   * MLIR creates a TargetMachine for every module. Here each thread keeps
//     one per (triple, chip, features, O level): one level per machine,
//     because code generation changes its machine's options by level (at O0
//     it turns on FastISel for good), and an O3 module after an O0 one got
//     different PTX from a machine shared between the two. A machine also
//     numbers the call sequences it lowers across modules (PTX comments
//     `callseq N`), so one that has lowered a call is not kept.
// The PTX is the same as MLIR's (tests/python/test_ptx_serializer.py
// compares the two).
//
//===----------------------------------------------------------------------===//

#include "PtxSerializer.h"

#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVM/ModuleToObject.h"
#include "mlir/Target/LLVM/NVVM/Utils.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/InstrTypes.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/IPO/Internalize.h"

namespace mlir::xla_gpu {
namespace {

// A TargetMachine serves this many modules before it is made afresh, so that
// whatever it accumulates per module cannot grow without bound.
constexpr int kModulesPerTargetMachine = 512;

struct CachedTargetMachine {
  std::unique_ptr<llvm::TargetMachine> machine;
  int uses = 0;
};

using TargetKey = std::tuple<std::string, std::string, std::string, int>;

// This thread's TargetMachines: a TargetMachine is not shared between
// threads compiling at the same time.
thread_local std::map<TargetKey, CachedTargetMachine> threadTargetMachines;

// This thread's TargetMachine for `target`: one that has compiled only
// modules without calls (see the file comment), or a new one.
FailureOr<CachedTargetMachine *> targetMachineFor(gpu::GPUModuleOp module,
                                                  NVVM::NVVMTargetAttr target,
                                                  StringRef features) {
  TargetKey key{target.getTriple().str(), target.getChip().str(),
                features.str(), target.getO()};
  CachedTargetMachine &cached = threadTargetMachines[key];
  if (!cached.machine || cached.uses >= kModulesPerTargetMachine) {
    std::string error;
    llvm::Triple triple(std::get<0>(key));
    const llvm::Target *llvmTarget =
        llvm::TargetRegistry::lookupTarget(triple, error);
    if (!llvmTarget)
      return module.emitError() << "no LLVM target for triple '"
                                << std::get<0>(key) << "': " << error;
    cached.machine.reset(llvmTarget->createTargetMachine(
        triple, std::get<1>(key), std::get<2>(key), {}, {}));
    cached.uses = 0;
    if (!cached.machine)
      return module.emitError() << "LLVM cannot make a target machine for "
                                << std::get<1>(key);
    cached.machine->setOptLevel(
        static_cast<llvm::CodeGenOptLevel>(std::get<3>(key)));
  }
  ++cached.uses;
  return &cached;
}

// Whether code generation will lower a call in `module` (a call of anything
// but an intrinsic).
bool callsFunctions(const llvm::Module &module) {
  for (const llvm::Function &function : module)
    for (const llvm::BasicBlock &block : function)
      for (const llvm::Instruction &instruction : block)
        if (const auto *call = dyn_cast<llvm::CallBase>(&instruction)) {
          if (call->isInlineAsm()) continue;  // no call sequence
          const llvm::Function *callee = call->getCalledFunction();
          if (!callee || !callee->isIntrinsic())
            return true;
        }
  return false;
}

// What in `module` needs sm_90 and a newer PTX ISA than the target's: a
// 128-bit compare-and-swap (the CAS loop of an atomic update of a
// complex<f64> element other than an addition) or a vector reduction
// (`red.global.add.v4.f32`, inline PTX from xla-lower-tensors for
// scatter-adds of rows). One walk over the module.
struct Sm90Needs {
  bool swaps128Bits = false;
  bool reducesVectors = false;
};

Sm90Needs sm90Needs(const llvm::Module &module) {
  Sm90Needs needs;
  for (const llvm::Function &function : module)
    for (const llvm::BasicBlock &block : function)
      for (const llvm::Instruction &instruction : block) {
        if (const auto *cas = dyn_cast<llvm::AtomicCmpXchgInst>(&instruction)) {
          if (cas->getNewValOperand()->getType()->getPrimitiveSizeInBits() == 128)
            needs.swaps128Bits = true;
        } else if (const auto *call = dyn_cast<llvm::CallBase>(&instruction)) {
          if (const auto *assembly = dyn_cast<llvm::InlineAsm>(call->getCalledOperand()))
            if (StringRef(assembly->getAsmString()).starts_with("red.global.add.v"))
              needs.reducesVectors = true;
        }
        if (needs.swaps128Bits && needs.reducesVectors) return needs;
      }
  return needs;
}

// The target features a module is compiled with. NVPTX has a 128-bit CAS
// (atom.cas.b128) on sm_90 and later from PTX ISA 8.3 on, and vector
// reductions from 8.1 on; the PTX is otherwise the target's (7.8 for sm_90
// unless its features say), so only a module that needs one of them asks
// drivers for more. On an older chip NVPTX would abort the process (ptxas
// refuse the vector reduction): the module is refused here instead.
FailureOr<std::string> featuresFor(gpu::GPUModuleOp module,
                                   NVVM::NVVMTargetAttr target,
                                   const llvm::Module &llvmModule) {
  std::string features = target.getFeatures().str();
  Sm90Needs needs = sm90Needs(llvmModule);
  bool swaps = needs.swaps128Bits;
  if (!swaps && !needs.reducesVectors) return features;
  StringRef chip = target.getChip();
  unsigned version = 0;
  if (!chip.consume_front("sm_") || chip.take_while(llvm::isDigit).getAsInteger(10, version) ||
      version < 90)
    return module.emitError()
           << (swaps ? "a 128-bit compare-and-swap (an atomic update of "
                       "complex<f64> elements other than an addition)"
                     : "a vector reduction (red.global.add.v4.f32: a "
                       "scatter-add of f32 rows)")
           << " needs sm_90 or newer, not " << target.getChip();
  if (StringRef(features).contains("+ptx")) return features;  // chosen already
  std::string ptx = swaps ? "+ptx83" : "+ptx81";
  return features.empty() ? ptx : features + "," + ptx;
}

// Whether `module` declares a function it does not define (other than
// LLVM's intrinsics): only then can a bitcode library add anything, since
// the libraries are linked for the symbols the module needs.
bool declaresExternalFunctions(const llvm::Module &module) {
  for (const llvm::Function &function : module)
    if (function.isDeclaration() && !function.isIntrinsic())
      return true;
  return false;
}

// Links each library into `module` as MLIR's serializer does: only the
// symbols the module (or a library linked before) needs, internalized.
LogicalResult linkLibraries(gpu::GPUModuleOp module, llvm::Module &llvmModule,
                            ArrayRef<char> libdevice,
                            NVVM::NVVMTargetAttr target) {
  llvm::LLVMContext &context = llvmModule.getContext();
  SmallVector<std::unique_ptr<llvm::Module>> libraries;
  llvm::SMDiagnostic diagnostic;
  // The target's files first, then libdevice, in MLIR's order: the first
  // library to define a symbol provides it.
  if (ArrayAttr files = target.getLink()) {
    for (Attribute file : files) {
      auto path = dyn_cast<StringAttr>(file);
      if (!path)
        return module.emitError()
               << "the target's link list holds a non-path " << file;
      std::unique_ptr<llvm::Module> library =
          llvm::getLazyIRFileModule(path.getValue(), diagnostic, context);
      if (!library)
        return module.emitError() << "cannot read bitcode " << path << ": "
                                  << diagnostic.getMessage();
      libraries.push_back(std::move(library));
    }
  }
  if (!libdevice.empty()) {
    std::unique_ptr<llvm::Module> library = llvm::getLazyIRModule(
        llvm::MemoryBuffer::getMemBuffer(
            StringRef(libdevice.data(), libdevice.size()), "libdevice",
            /*RequiresNullTerminator=*/false),
        diagnostic, context);
    if (!library)
      return module.emitError() << "cannot read libdevice: "
                                << diagnostic.getMessage();
    libraries.push_back(std::move(library));
  }
  llvm::Linker linker(llvmModule);
  for (std::unique_ptr<llvm::Module> &library : libraries) {
    bool failedToLink = linker.linkInModule(
        std::move(library), llvm::Linker::Flags::LinkOnlyNeeded,
        [](llvm::Module &linked, const StringSet<> &imported) {
          llvm::internalizeModule(linked, [&](const llvm::GlobalValue &value) {
            return !value.hasName() || !imported.contains(value.getName());
          });
        });
    if (failedToLink)
      return module.emitError("linking a bitcode library failed");
  }
  return success();
}

}  // namespace

FailureOr<SmallString<0>> serializeToPtx(gpu::GPUModuleOp module,
                                         ArrayRef<char> libdevice) {
  ArrayAttr targets = module.getTargetsAttr();
  auto target = targets && targets.size() == 1
                    ? dyn_cast<NVVM::NVVMTargetAttr>(targets[0])
                    : NVVM::NVVMTargetAttr();
  if (!target)
    return module.emitError("expected a gpu.module with exactly one "
                            "#nvvm.target");
  int optLevel = target.getO();
  if (optLevel < 0 || optLevel > 3)
    return module.emitError() << "optimization level " << optLevel
                              << " is not 0-3";
  // MLIR's own once-only NVPTX initialization.
  NVVM::SerializeGPUModuleBase::init();

  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, context);
  if (!llvmModule)
    return module.emitError("translating the module to LLVM IR failed");
  FailureOr<std::string> features = featuresFor(module, target, *llvmModule);
  if (failed(features))
    return failure();
  FailureOr<CachedTargetMachine *> cached =
      targetMachineFor(module, target, *features);
  if (failed(cached))
    return failure();
  llvm::TargetMachine *machine = (*cached)->machine.get();
  llvmModule->setDataLayout(machine->createDataLayout());
  llvmModule->setTargetTriple(machine->getTargetTriple());

  if (declaresExternalFunctions(*llvmModule) &&
      failed(linkLibraries(module, *llvmModule, libdevice, target)))
    return failure();

  if (llvm::Error error = makeOptimizingTransformer(optLevel, /*sizeLevel=*/0,
                                                    machine)(llvmModule.get())) {
    InFlightDiagnostic diagnostic = module.emitError("optimizing LLVM IR failed: ");
    llvm::handleAllErrors(std::move(error), [&](const llvm::ErrorInfoBase &info) {
      diagnostic << info.message();
    });
    return diagnostic;
  }
  // The machine is dropped after a module with calls, so that the next
  // module's call sequences are numbered from 0 again, as MLIR's are.
  bool numbersCalls = callsFunctions(*llvmModule);
  FailureOr<SmallString<0>> ptx = LLVM::ModuleToObject::translateModuleToISA(
      *llvmModule, *machine, [&] { return module.emitError(); });
  if (numbersCalls || failed(ptx))
    (*cached)->machine.reset();
  return ptx;
}

}  // namespace mlir::xla_gpu
