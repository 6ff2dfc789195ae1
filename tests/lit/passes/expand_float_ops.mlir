// xla-expand-float-ops: math on bf16/f16 and any arithmetic on f8 goes
// through f32; bf16 arithmetic stays native.
// RUN: xla-gpu-opt %s --xla-expand-float-ops | FileCheck %s

// CHECK-LABEL: func.func @ops(
// CHECK: %[[M:.*]] = arith.mulf %arg0, %arg0 : bf16
// CHECK: %[[W:.*]] = arith.extf %[[M]] : bf16 to f32
// CHECK: %[[T:.*]] = math.tanh %[[W]] : f32
// CHECK: %[[N:.*]] = arith.truncf %[[T]] : f32 to bf16
// CHECK: %[[A:.*]] = arith.extf %arg1 : f8E4M3FN to f32
// CHECK: %[[B:.*]] = arith.extf %arg1 : f8E4M3FN to f32
// CHECK: %[[S:.*]] = arith.addf %[[A]], %[[B]] : f32
// CHECK: arith.truncf %[[S]] : f32 to f8E4M3FN
// CHECK: %[[VW:.*]] = arith.extf %arg2 : vector<4xf16> to vector<4xf32>
// CHECK: %[[VE:.*]] = math.exp %[[VW]] : vector<4xf32>
// CHECK: arith.truncf %[[VE]] : vector<4xf32> to vector<4xf16>
// CHECK: math.exp %arg3 : f32
func.func @ops(%a: bf16, %b: f8E4M3FN, %v: vector<4xf16>, %f: f32) -> (bf16, f8E4M3FN, vector<4xf16>, f32) {
  %m = arith.mulf %a, %a : bf16
  %t = math.tanh %m : bf16
  %s = arith.addf %b, %b : f8E4M3FN
  %e = math.exp %v : vector<4xf16>
  %g = math.exp %f : f32
  return %t, %s, %e, %g : bf16, f8E4M3FN, vector<4xf16>, f32
}
