// xla-gpu-optimize-loops unrolls small constant-trip loops fully (the reference walkthrough's
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

// Too many iterations, or unknown bounds: kept (nothing to pipeline).
// CHECK-LABEL: func.func @kept(
// CHECK: scf.for
// CHECK-NOT: scf.if
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

// -----

// A loop too long to unroll: its load is software-pipelined. The first
// iteration's value is loaded before the loop, each iteration first loads
// the next one (guarded by the bound), then works on the carried value.
// CHECK-LABEL: func.func @pipelined(
// CHECK: %[[FIRST:.*]] = tensor.extract %arg0[%{{.*}}] : tensor<1024xf32>
// CHECK: scf.for %[[I:.*]] = %c0 to %c256 step %c1 iter_args(%[[ACC:.*]] = %arg1, %[[CUR:.*]] = %[[FIRST]]) -> (f32, f32) {
// CHECK-NEXT: %[[NEXT:.*]] = arith.addi %[[I]], %c1
// CHECK-NEXT: %[[IN:.*]] = arith.cmpi slt, %[[NEXT]], %c256
// CHECK-NEXT: %[[PRE:.*]] = scf.if %[[IN]] -> (f32) {
// CHECK-NEXT: %[[IDX:.*]] = xla_gpu.apply_indexing #{{.*}}(%[[NEXT]], %thread_id_x)
// CHECK-NEXT: %[[V:.*]] = tensor.extract %arg0[%[[IDX]]]
// CHECK-NEXT: scf.yield %[[V]]
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield %[[CUR]]
// CHECK: %[[S:.*]] = arith.addf %[[ACC]], %[[CUR]]
// CHECK-NEXT: scf.yield %[[S]], %[[PRE]]
func.func @pipelined(%in: tensor<1024xf32>, %init: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 3 : index]}
  %r = scf.for %i = %c0 to %c256 step %c1 iter_args(%acc = %init) -> f32 {
    %idx = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0, d1) -> (d0 * 4 + d1), domain: d0 in [0, 255], d1 in [0, 3]">(%i, %tid)
    %e = tensor.extract %in[%idx] : tensor<1024xf32>
    %s = arith.addf %acc, %e : f32
    scf.yield %s : f32
  }
  return %r : f32
}
