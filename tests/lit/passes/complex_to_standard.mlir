// xla-complex-to-standard: the upstream convert-complex-to-standard on a
// module with a complex value; a module without one is left as it is.
// RUN: xla-gpu-opt %s --split-input-file --xla-complex-to-standard | FileCheck %s

// complex.abs of a complex argument becomes arith/math on its parts.
// CHECK-LABEL: func.func @abs(
// CHECK-NOT: complex.abs
// CHECK: math.sqrt
func.func @abs(%a: complex<f32>) -> f32 {
  %r = complex.abs %a : complex<f32>
  return %r : f32
}

// -----

// A complex value made inside the function (no complex argument or result).
// CHECK-LABEL: func.func @exp_re(
// CHECK-NOT: complex.exp
// CHECK: math.exp
func.func @exp_re(%x: f32, %y: f32) -> f32 {
  %c = complex.create %x, %y : complex<f32>
  %e = complex.exp %c : complex<f32>
  %r = complex.re %e : complex<f32>
  return %r : f32
}

// -----

// No complex value: nothing changes, not even an unused op.
// CHECK-LABEL: func.func @real(
// CHECK: %[[S:.*]] = arith.addf %arg0, %arg0 : f32
// CHECK: %[[DEAD:.*]] = arith.mulf %arg0, %arg0 : f32
// CHECK: return %[[S]] : f32
func.func @real(%x: f32) -> f32 {
  %s = arith.addf %x, %x : f32
  %dead = arith.mulf %x, %x : f32
  return %s : f32
}
