// Round trip of every xla_gpu op in its variants.
// RUN: xla-gpu-opt %s | FileCheck %s
// RUN: xla-gpu-opt %s | xla-gpu-opt | FileCheck %s
// RUN: xla-gpu-opt %s --mlir-print-op-generic | xla-gpu-opt | FileCheck %s

#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 31], s0 in [0, 3]">
#map2 = #xla_gpu.indexing_map<"(d0, d1) -> (d0 + d1, d0 - d1), domain: d0 in [0, 31], d1 in [0, 31]">
#nodims = #xla_gpu.indexing_map<"()[s0, s1] -> (s0, s1), domain: s0 in [0, 1], s1 in [0, 7]">

// CHECK-LABEL: func.func @apply_indexing(
// CHECK: %[[A:.*]] = xla_gpu.apply_indexing #{{.*}}(%arg0)[%arg1]
// CHECK: %[[B:.*]]:2 = xla_gpu.apply_indexing #{{.*}}(%arg0, %arg1)
// CHECK: %[[C:.*]]:2 = xla_gpu.apply_indexing #{{.*}}()[%arg0, %arg1] {tag}
func.func @apply_indexing(%a: index, %b: index) -> (index, index, index) {
  %0 = xla_gpu.apply_indexing #map(%a)[%b]
  %1:2 = xla_gpu.apply_indexing #map2(%a, %b)
  %2:2 = xla_gpu.apply_indexing #nodims()[%a, %b] {tag}
  return %0, %1#1, %2#0 : index, index, index
}

// A loop without iter_args has no results and no printed terminator.
// CHECK-LABEL: func.func @loop_no_iter_args(
// CHECK: xla_gpu.loop (%arg0)[%s] -> (%dim) in #{{.*}} {
// CHECK-NEXT: func.call @use(%dim)
// CHECK-NEXT: }
func.func private @use(index)
func.func @loop_no_iter_args(%tid: index) {
  xla_gpu.loop (%tid)[%i] -> (%x) in #map {
    func.call @use(%x) : (index) -> ()
  }
  return
}

// Several iter_args, attributes, a map with no symbols.
// CHECK-LABEL: func.func @loop_iter_args(
// CHECK: %xla_loop:2 = xla_gpu.loop (%arg0, %arg1) -> (%dim, %dim_0) in #{{.*}} iter_args(%iter = %arg2, %iter_1 = %arg3) -> (tensor<64xf32>, tensor<64xi8>) attributes {unroll} {
// CHECK: xla_gpu.yield %{{.*}}, %iter_1 : tensor<64xf32>, tensor<64xi8>
func.func @loop_iter_args(%a: index, %b: index, %t: tensor<64xf32>, %u: tensor<64xi8>) -> (tensor<64xf32>, tensor<64xi8>) {
  %r:2 = xla_gpu.loop (%a, %b) -> (%x, %y) in #map2 iter_args(%it = %t, %iu = %u) -> (tensor<64xf32>, tensor<64xi8>) attributes {unroll} {
    %e = tensor.extract %it[%x] : tensor<64xf32>
    %n = tensor.insert %e into %it[%y] : tensor<64xf32>
    xla_gpu.yield %n, %iu : tensor<64xf32>, tensor<64xi8>
  }
  return %r#0, %r#1 : tensor<64xf32>, tensor<64xi8>
}

// CHECK-LABEL: func.func @shared(
// CHECK: %shmem = xla_gpu.allocate_shared : tensor<32x1x33xf32>
// CHECK: %shmem_0 = xla_gpu.allocate_shared : tensor<4xbf16>
// CHECK: %synced_tensor:2 = xla_gpu.sync_threads %shmem, %shmem_0 : tensor<32x1x33xf32>, tensor<4xbf16>
func.func @shared() -> (tensor<32x1x33xf32>, tensor<4xbf16>) {
  %s = xla_gpu.allocate_shared : tensor<32x1x33xf32>
  %t = xla_gpu.allocate_shared : tensor<4xbf16>
  %r:2 = xla_gpu.sync_threads %s, %t : tensor<32x1x33xf32>, tensor<4xbf16>
  return %r#0, %r#1 : tensor<32x1x33xf32>, tensor<4xbf16>
}

// CHECK-LABEL: func.func @calls(
// CHECK: %pure_call = xla_gpu.pure_call @callee(%arg0, %arg1) : (tensor<8xf32>, index) -> f32
// CHECK: %pure_call_0:2 = xla_gpu.pure_call @two(%arg1) : (index) -> (f32, i1)
func.func private @callee(%t: tensor<8xf32>, %i: index) -> f32
func.func private @two(%i: index) -> (f32, i1)
func.func @calls(%t: tensor<8xf32>, %i: index) -> (f32, f32) {
  %0 = xla_gpu.pure_call @callee(%t, %i) : (tensor<8xf32>, index) -> f32
  %1:2 = xla_gpu.pure_call @two(%i) : (index) -> (f32, i1)
  return %0, %1#0 : f32, f32
}

// gpu ids carry their ranges as `xla.range`.
// CHECK-LABEL: func.func @ids(
// CHECK: gpu.thread_id x {xla.range = [0 : index, 127 : index]}
// CHECK: gpu.block_id y {xla.range = [0 : index, 95 : index]}
func.func @ids() -> (index, index) {
  %t = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %b = gpu.block_id y {xla.range = [0 : index, 95 : index]}
  return %t, %b : index, index
}
