//===- Passes.td - xla_gpu passes ------------------------------*- tablegen -*-===//
//
// Passes are registered under XLA's names so that XLA-style RUN lines work.
// One C++ file per pass.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_PASSES_TD
#define XLA_GPU_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertPureCallOpsPass
    : Pass<"xla-convert-pure-call-ops", "mlir::func::FuncOp"> {
  let summary = "Turns xla_gpu.pure_call into func.call";
  let description = [{
    Run after inlining, before lowering to LLVM: the remaining pure calls
    (callees with several call sites) become ordinary `func.call`s, which the
    upstream func-to-LLVM conversion knows.
  }];
  let dependentDialects = ["mlir::func::FuncDialect"];
}

#endif  // XLA_GPU_PASSES_TD
