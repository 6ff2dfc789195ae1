// xla-convert-pure-call-ops: what inlining left of pure_call becomes
// func.call, by flag, by pipeline string, and as a nested func pass.
// RUN: xla-gpu-opt %s --xla-convert-pure-call-ops | FileCheck %s
// RUN: xla-gpu-opt %s --pass-pipeline='builtin.module(func.func(xla-convert-pure-call-ops))' | FileCheck %s

// CHECK-LABEL: func.func @caller(
// CHECK-NOT: xla_gpu.pure_call
// CHECK: %[[A:.*]] = call @callee(%arg0, %arg1) : (tensor<8xf32>, index) -> f32
// CHECK: %[[B:.*]]:2 = call @pair(%arg1) : (index) -> (f32, f32)
func.func private @callee(%t: tensor<8xf32>, %i: index) -> f32
func.func private @pair(%i: index) -> (f32, f32)
func.func @caller(%t: tensor<8xf32>, %i: index) -> f32 {
  %0 = xla_gpu.pure_call @callee(%t, %i) : (tensor<8xf32>, index) -> f32
  %1:2 = xla_gpu.pure_call @pair(%i) : (index) -> (f32, f32)
  %2 = arith.addf %0, %1#1 : f32
  return %2 : f32
}
