// xla-expand-complex: the complex values left after
// convert-complex-to-standard become pairs of floats: function signatures,
// calls, loop-carried values, selects, create / re / im / constant.
// RUN: xla-gpu-opt %s --split-input-file --xla-expand-complex | FileCheck %s

// CHECK-LABEL: func.func private @add(
// CHECK-SAME: %[[A0:.*]]: f32, %[[A1:.*]]: f32, %[[B0:.*]]: f32, %[[B1:.*]]: f32) -> (f32, f32)
// CHECK: %[[S0:.*]] = arith.addf %[[A0]], %[[B0]] : f32
// CHECK: %[[S1:.*]] = arith.addf %[[A1]], %[[B1]] : f32
// CHECK: return %[[S0]], %[[S1]] : f32, f32
func.func private @add(%a: complex<f32>, %b: complex<f32>) -> complex<f32> {
  %ar = complex.re %a : complex<f32>
  %ai = complex.im %a : complex<f32>
  %br = complex.re %b : complex<f32>
  %bi = complex.im %b : complex<f32>
  %r = arith.addf %ar, %br : f32
  %i = arith.addf %ai, %bi : f32
  %c = complex.create %r, %i : complex<f32>
  return %c : complex<f32>
}

// CHECK-LABEL: func.func @sum(
// CHECK-SAME: %[[RE:.*]]: f32, %[[IM:.*]]: f32, %[[FLAG:.*]]: i1) -> (f32, f32)
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[LOOP:.*]]:2 = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC0:.*]] = %[[ZERO]], %[[ACC1:.*]] = %[[ONE]]) -> (f32, f32) {
// CHECK:   %[[NEXT:.*]]:2 = func.call @add(%[[ACC0]], %[[ACC1]], %[[RE]], %[[IM]]) : (f32, f32, f32, f32) -> (f32, f32)
// CHECK:   scf.yield %[[NEXT]]#0, %[[NEXT]]#1 : f32, f32
// CHECK: %[[P0:.*]] = arith.select %[[FLAG]], %[[LOOP]]#0, %[[RE]] : f32
// CHECK: %[[P1:.*]] = arith.select %[[FLAG]], %[[LOOP]]#1, %[[IM]] : f32
// CHECK: return %[[P0]], %[[P1]] : f32, f32
func.func @sum(%x: complex<f32>, %flag: i1) -> complex<f32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %init = complex.constant [0.0 : f32, 1.0 : f32] : complex<f32>
  %s = scf.for %k = %c0 to %c4 step %c1 iter_args(%acc = %init) -> complex<f32> {
    %n = func.call @add(%acc, %x) : (complex<f32>, complex<f32>) -> complex<f32>
    scf.yield %n : complex<f32>
  }
  %pick = arith.select %flag, %s, %x : complex<f32>
  return %pick : complex<f32>
}
