// REQUIRES: mlir-opt-plugin
// The plugin's passes run in mlir-opt through --pass-pipeline (plugin passes
// are registered after mlir-opt parses its flags), next to upstream ones; the
// dialect's folds and inliner rule work there too.
// RUN: %mlir-opt-plugin %s --pass-pipeline='builtin.module(inline, func.func(xla-convert-pure-call-ops), canonicalize)' | FileCheck %s

// CHECK-LABEL: func.func @main(
// CHECK: arith.constant 13 : index
// CHECK: call @twice
// CHECK: call @twice
func.func private @twice(%i: index) -> index
func.func @main() -> (index, index, index) {
  %c3 = arith.constant 3 : index
  %c1 = arith.constant 1 : index
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 31], s0 in [0, 3]">(%c3)[%c1]
  %1 = xla_gpu.pure_call @twice(%c1) : (index) -> index
  %2 = xla_gpu.pure_call @twice(%c3) : (index) -> index
  return %0, %1, %2 : index, index, index
}
