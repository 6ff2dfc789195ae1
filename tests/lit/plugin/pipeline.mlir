// REQUIRES: mlir-opt-plugin
// The upstream mlir-opt runs the plugin's lowering passes next to its own:
// the reference walkthrough's GELU down to the LLVM and NVVM dialects.
// RUN: %mlir-opt-plugin %S/../../../examples/gelu.mlir --pass-pipeline='builtin.module(inline, func.func(xla-lower-xla-to-scf), canonicalize, func.func(xla-simplify-arith), canonicalize, xla-flatten-tensors, canonicalize, cse, func.func(xla-vectorize-loads-stores), func.func(xla-gpu-optimize-loops), canonicalize, cse, xla-simplify-affine, xla-lower-tensors, canonicalize, cse, xla-expand-float-ops, convert-scf-to-cf, xla-lower-to-llvm, reconcile-unrealized-casts)' | FileCheck %s

// CHECK: llvm.func @__nv_tanhf(f32) -> f32
// CHECK: llvm.func @main(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>}
// CHECK: llvm.load %{{.*}} invariant : !llvm.ptr -> vector<4xbf16>
