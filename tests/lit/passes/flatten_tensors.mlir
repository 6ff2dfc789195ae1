// xla-flatten-tensors: N-d tensors become 1-d everywhere; indices go through
// the linearization, which canonicalize composes (the reference walkthrough's "Flattening
// tensors").
// RUN: xla-gpu-opt %s --split-input-file --xla-flatten-tensors | FileCheck %s
// RUN: xla-gpu-opt %s --split-input-file --xla-flatten-tensors --canonicalize --cse | FileCheck %s --check-prefix=COMPOSED

// CHECK: #[[LIN:.*]] = #xla_gpu.indexing_map<"(d0, d1, d2) -> (d0 * 2097152 + d1 * 4096 + d2), domain: d0 in [0, 5], d1 in [0, 511], d2 in [0, 4095]">
// CHECK-LABEL: func.func @gelu(
// CHECK-SAME: %[[IN:.*]]: tensor<12582912xbf16>, %[[OUT:.*]]: tensor<12582912xbf16>) -> tensor<12582912xbf16>
// CHECK: scf.for {{.*}} iter_args(%[[ITER:.*]] = %[[OUT]]) -> (tensor<12582912xbf16>)
// CHECK: %[[I:.*]] = xla_gpu.apply_indexing #[[LIN]](%{{.*}}, %{{.*}}, %{{.*}})
// CHECK: tensor.extract %[[IN]][%[[I]]] : tensor<12582912xbf16>
// CHECK: %[[J:.*]] = xla_gpu.apply_indexing #[[LIN]]
// CHECK: tensor.insert %{{.*}} into %[[ITER]][%[[J]]] : tensor<12582912xbf16>

// COMPOSED: #[[MAP:.*]] = #xla_gpu.indexing_map<"(th_x, bl_x, vector_index) -> (th_x * 4 + bl_x * 512 + vector_index), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
// COMPOSED-LABEL: func.func @gelu(
// COMPOSED: scf.for %[[V:[a-z0-9_]+]] =
// COMPOSED-NEXT: %[[I:.*]] = xla_gpu.apply_indexing #[[MAP]](%thread_id_x, %block_id_x, %[[V]])
// COMPOSED-NEXT: tensor.extract %arg0[%[[I]]]
// COMPOSED: tensor.insert %{{.*}}[%[[I]]]
#map = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
#map1 = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x floordiv 8) mod 512), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
#map2 = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x mod 8) * 512 + th_x * 4 + vector_index), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
func.func @gelu(%input: tensor<6x512x4096xbf16>, %output: tensor<6x512x4096xbf16>) -> tensor<6x512x4096xbf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
  %block_id_x = gpu.block_id  x {xla.range = [0 : index, 24575 : index]}
  %r = scf.for %v = %c0 to %c4 step %c1 iter_args(%iter = %output) -> (tensor<6x512x4096xbf16>) {
    %dim0 = xla_gpu.apply_indexing #map(%thread_id_x, %block_id_x)[%v]
    %dim1 = xla_gpu.apply_indexing #map1(%thread_id_x, %block_id_x)[%v]
    %dim2 = xla_gpu.apply_indexing #map2(%thread_id_x, %block_id_x)[%v]
    %e = tensor.extract %input[%dim0, %dim1, %dim2] : tensor<6x512x4096xbf16>
    %t = math.tanh %e : bf16
    %n = tensor.insert %t into %iter[%dim0, %dim1, %dim2] : tensor<6x512x4096xbf16>
    scf.yield %n : tensor<6x512x4096xbf16>
  }
  return %r : tensor<6x512x4096xbf16>
}

// -----

// Shared tiles, barriers, scf.if results, calls, constants and rank 0.
// CHECK-LABEL: func.func private @sub(tensor<6xf32>, index) -> f32
// CHECK-LABEL: func.func @others(
// CHECK-SAME: %{{.*}}: tensor<6xf32>, %{{.*}}: tensor<1xf32>, %{{.*}}: i1) -> (tensor<1056xf32>, f32, f32)
// CHECK: %[[S:.*]] = xla_gpu.allocate_shared : tensor<1056xf32>
// CHECK: xla_gpu.sync_threads %[[S]] : tensor<1056xf32>
// CHECK: scf.if %{{.*}} -> (tensor<1056xf32>)
// CHECK: %[[CST:.*]] = arith.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00, 5.000000e+00, 6.000000e+00]> : tensor<6xf32>
// CHECK: xla_gpu.pure_call @sub(%[[CST]], %{{.*}}) : (tensor<6xf32>, index) -> f32
// CHECK: %[[Z:.*]] = arith.constant 0 : index
// CHECK: tensor.extract %{{.*}}[%[[Z]]] : tensor<1xf32>
func.func private @sub(%t: tensor<2x3xf32>, %i: index) -> f32
func.func @others(%t: tensor<2x3xf32>, %s: tensor<f32>, %c: i1) -> (tensor<32x1x33xf32>, f32, f32) {
  %c1 = arith.constant 1 : index
  %shmem = xla_gpu.allocate_shared : tensor<32x1x33xf32>
  %synced = xla_gpu.sync_threads %shmem : tensor<32x1x33xf32>
  %r = scf.if %c -> tensor<32x1x33xf32> {
    scf.yield %synced : tensor<32x1x33xf32>
  } else {
    scf.yield %shmem : tensor<32x1x33xf32>
  }
  %cst = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %p = xla_gpu.pure_call @sub(%cst, %c1) : (tensor<2x3xf32>, index) -> f32
  %e = tensor.extract %s[] : tensor<f32>
  return %r, %p, %e : tensor<32x1x33xf32>, f32, f32
}
