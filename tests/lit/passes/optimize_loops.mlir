// xla-gpu-optimize-loops unrolls small constant-trip loops fully (seed 000,
// "Loop unrolling").
// RUN: xla-gpu-opt %s --split-input-file --xla-gpu-optimize-loops --canonicalize | FileCheck %s
// RUN: xla-gpu-opt %s --split-input-file --xla-gpu-optimize-loops=max-trip-count=2 | FileCheck %s --check-prefix=LIMIT

// CHECK-LABEL: func.func @vector_loop(
// CHECK-NOT: scf.for
// CHECK: vector.extract %{{.*}}[0]
// CHECK: vector.extract %{{.*}}[1]
// CHECK: vector.extract %{{.*}}[2]
// CHECK: vector.extract %{{.*}}[3]
// LIMIT-LABEL: func.func @vector_loop(
// LIMIT: scf.for
func.func @vector_loop(%vec: vector<4xf32>) -> vector<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant dense<0.0> : vector<4xf32>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> vector<4xf32> {
    %e = vector.extract %vec[%i] : f32 from vector<4xf32>
    %t = math.exp %e : f32
    %n = vector.insert %t, %acc [%i] : f32 into vector<4xf32>
    scf.yield %n : vector<4xf32>
  }
  return %r : vector<4xf32>
}

// -----

// Too many iterations, or unknown bounds: kept.
// CHECK-LABEL: func.func @kept(
// CHECK: scf.for
// CHECK: scf.for
func.func @kept(%n: index, %init: f32) -> (f32, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c1000 = arith.constant 1000 : index
  %a = scf.for %i = %c0 to %c1000 step %c1 iter_args(%acc = %init) -> f32 {
    %s = arith.addf %acc, %acc : f32
    scf.yield %s : f32
  }
  %b = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> f32 {
    %s = arith.addf %acc, %acc : f32
    scf.yield %s : f32
  }
  return %a, %b : f32, f32
}
