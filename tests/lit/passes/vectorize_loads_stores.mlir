// xla-vectorize-loads-stores (the reference walkthrough's "Vectorization").
// RUN: xla-gpu-opt %s --split-input-file --xla-vectorize-loads-stores --cse | FileCheck %s

// CHECK-LABEL: func.func @gelu(
// CHECK: %[[BASE:.*]] = xla_gpu.apply_indexing #map(%thread_id_x, %block_id_x, %c0)
// CHECK: %[[VEC:.*]] = vector.transfer_read %arg0[%[[BASE]]], %{{.*}} {in_bounds = [true]} : tensor<12582912xbf16>, vector<4xbf16>
// CHECK: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<4xbf16>
// CHECK: %[[LOOP:.*]]:2 = scf.for %[[V:[a-z0-9]+]] = %c0 to %c4 step %c1 iter_args(%[[T:.*]] = %arg1, %[[ACC:.*]] = %[[ZERO]]) -> (tensor<12582912xbf16>, vector<4xbf16>) {
// CHECK-NEXT: %[[E:.*]] = vector.extract %[[VEC]][%[[V]]] : bf16 from vector<4xbf16>
// CHECK-NEXT: %[[R:.*]] = math.tanh %[[E]]
// CHECK-NEXT: %[[INS:.*]] = vector.insert %[[R]], %[[ACC]] [%[[V]]] : bf16 into vector<4xbf16>
// CHECK-NEXT: scf.yield %[[T]], %[[INS]]
// CHECK: %[[W:.*]] = vector.transfer_write %[[LOOP]]#1, %arg1[%[[BASE]]] {in_bounds = [true]} : vector<4xbf16>, tensor<12582912xbf16>
// CHECK: return %[[W]]
#map = #xla_gpu.indexing_map<"(th_x, bl_x, vector_index) -> (th_x * 4 + bl_x * 512 + vector_index), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
func.func @gelu(%input: tensor<12582912xbf16>, %output: tensor<12582912xbf16>) -> tensor<12582912xbf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
  %block_id_x = gpu.block_id  x {xla.range = [0 : index, 24575 : index]}
  %r = scf.for %v = %c0 to %c4 step %c1 iter_args(%iter = %output) -> (tensor<12582912xbf16>) {
    %dim = xla_gpu.apply_indexing #map(%thread_id_x, %block_id_x, %v)
    %e = tensor.extract %input[%dim] : tensor<12582912xbf16>
    %t = math.tanh %e : bf16
    %n = tensor.insert %t into %iter[%dim] : tensor<12582912xbf16>
    scf.yield %n : tensor<12582912xbf16>
  }
  return %r : tensor<12582912xbf16>
}

// -----

// Not vectorized: the base is not a multiple of the vector size, the index
// strides by 2, the vector would exceed 128 bits, the index is not an
// apply_indexing.
// CHECK-LABEL: func.func @negative(
// CHECK-NOT: vector.
// CHECK: return
func.func @negative(%in: tensor<1024xf32>, %big: tensor<1024xf64>, %a: index) -> (f32, f32, f64, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %z32 = arith.constant 0.0 : f32
  %z64 = arith.constant 0.0 : f64
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %r:4 = scf.for %v = %c0 to %c4 step %c1 iter_args(%x = %z32, %y = %z32, %z = %z64, %w = %z32) -> (f32, f32, f64, f32) {
    %i0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0, d1) -> (d0 * 4 + d1 + 1), domain: d0 in [0, 127], d1 in [0, 3]">(%tid, %v)
    %e0 = tensor.extract %in[%i0] : tensor<1024xf32>
    %i1 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0, d1) -> (d0 * 8 + d1 * 2), domain: d0 in [0, 127], d1 in [0, 3]">(%tid, %v)
    %e1 = tensor.extract %in[%i1] : tensor<1024xf32>
    %i2 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0, d1) -> (d0 * 4 + d1), domain: d0 in [0, 127], d1 in [0, 3]">(%tid, %v)
    %e2 = tensor.extract %big[%i2] : tensor<1024xf64>
    %i3 = arith.addi %a, %v : index
    %e3 = tensor.extract %in[%i3] : tensor<1024xf32>
    scf.yield %e0, %e1, %e2, %e3 : f32, f32, f64, f32
  }
  return %r#0, %r#1, %r#2, %r#3 : f32, f32, f64, f32
}

// -----

// A constraint free of the induction variable holds for the whole vector
// or for none of it: the read is vectorized. One on the induction variable
// could cut the vector: that read stays per element.
// CHECK-LABEL: func.func @constraints(
// CHECK: vector.transfer_read %{{.*}} : tensor<1024xf32>, vector<4xf32>
// CHECK: scf.for
// CHECK: vector.extract
// CHECK: tensor.extract
func.func @constraints(%in: tensor<1024xf32>) -> (f32, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %z = arith.constant 0.0 : f32
  %tid = gpu.thread_id x {xla.range = [0 : index, 255 : index]}
  %r:2 = scf.for %v = %c0 to %c4 step %c1 iter_args(%x = %z, %y = %z) -> (f32, f32) {
    %i0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0, d1) -> (d0 * 4 + d1), domain: d0 in [0, 255], d1 in [0, 3], d0 floordiv 2 in [0, 100]">(%tid, %v)
    %e0 = tensor.extract %in[%i0] : tensor<1024xf32>
    %i1 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0, d1) -> (d0 * 4 + d1), domain: d0 in [0, 255], d1 in [0, 3], d0 * 4 + d1 in [0, 1000]">(%tid, %v)
    %e1 = tensor.extract %in[%i1] : tensor<1024xf32>
    scf.yield %e0, %e1 : f32, f32
  }
  return %r#0, %r#1 : f32, f32
}
