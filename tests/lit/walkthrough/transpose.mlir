// The reference walkthrough, stage "Transpose emitter": read coalesced into a padded shared tile, sync_threads, write coalesced. The reference walkthrough's '(%thread_id_x %block_id_x)' (no comma) is accepted; the elided indexing computations are filled in.
// RUN: xla-gpu-opt %s > %t.1.mlir
// RUN: xla-gpu-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: xla-gpu-opt %s --mlir-print-op-generic | xla-gpu-opt > %t.3.mlir
// RUN: diff %t.1.mlir %t.3.mlir
// RUN: FileCheck %s < %t.1.mlir

// CHECK: #[[READ:.*]] = #xla_gpu.indexing_map<"(th_x, bl_x)[i, j] -> (
// CHECK-LABEL: func.func @transpose(
// CHECK: %shmem = xla_gpu.allocate_shared : tensor<32x1x33xf32>
// CHECK: %xla_loop = xla_gpu.loop (%thread_id_x, %block_id_x)[%{{.*}}, %{{.*}}] -> (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) in #[[READ]] iter_args(%{{.*}} = %shmem) -> (tensor<32x1x33xf32>)
// CHECK: math.exp
// CHECK: %synced_tensor = xla_gpu.sync_threads %xla_loop : tensor<32x1x33xf32>
// CHECK: %xla_loop_0 = xla_gpu.loop (%thread_id_x, %block_id_x)
// CHECK: tensor.extract %synced_tensor[
// CHECK: math.absf

// Tiles of 32 (dim 0) x 1 (dim 1) x 32 (dim 2) of the input: 1 x 160 x 6 =
// 960 blocks; 128 threads = 4 rows of 32 lanes, each thread i in [0, 7] rows.
#map = #xla_gpu.indexing_map<"(th_x, bl_x)[i, j] -> ("
  "th_x floordiv 32 + i * 4, bl_x floordiv 6, (bl_x mod 6) * 32 + th_x mod 32,"
  "th_x floordiv 32 + i * 4, 0, th_x mod 32),"
  "domain: th_x in [0, 127], bl_x in [0, 959], i in [0, 7], j in [0, 0],"
  "th_x floordiv 32 + i * 4 in [0, 19], (bl_x mod 6) * 32 + th_x mod 32 in [0, 169]">
#map1 = #xla_gpu.indexing_map<"(th_x, bl_x)[i, j] -> ("
  "(bl_x mod 6) * 32 + th_x floordiv 32 + i * 4, bl_x floordiv 6, th_x mod 32),"
  "domain: th_x in [0, 127], bl_x in [0, 959], i in [0, 7], j in [0, 0],"
  "(bl_x mod 6) * 32 + th_x floordiv 32 + i * 4 in [0, 169], th_x mod 32 in [0, 19]">
#map2 = #xla_gpu.indexing_map<"(d0) -> (d0 mod 32), domain: d0 in [0, 169]">

func.func @transpose(%arg0: tensor<20x160x170xf32>, %arg1: tensor<170x160x20xf32>) -> tensor<170x160x20xf32> {
  %c0 = arith.constant 0 : index
  %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
  %block_id_x = gpu.block_id  x {xla.range = [0 : index, 959 : index]}

  %shmem = xla_gpu.allocate_shared : tensor<32x1x33xf32>
  %xla_loop = xla_gpu.loop (%thread_id_x, %block_id_x)[%i, %j]
      -> (%input_dim0, %input_dim1, %input_dim2, %shmem_dim0, %shmem_dim1, %shmem_dim2)
      in #map iter_args(%iter = %shmem) -> (tensor<32x1x33xf32>) {
    %extracted = tensor.extract %arg0[%input_dim0, %input_dim1, %input_dim2] : tensor<20x160x170xf32>
    %0 = math.exp %extracted : f32
    %inserted = tensor.insert %0 into %iter[%shmem_dim0, %shmem_dim1, %shmem_dim2] : tensor<32x1x33xf32>
    xla_gpu.yield %inserted : tensor<32x1x33xf32>
  }

  %synced_tensor = xla_gpu.sync_threads %xla_loop : tensor<32x1x33xf32>

  %xla_loop_0 = xla_gpu.loop (%thread_id_x %block_id_x)[%i, %j] -> (%dim0, %dim1, %dim2)
      in #map1 iter_args(%iter = %arg1) -> (tensor<170x160x20xf32>) {
    // indexing computations
    %0 = xla_gpu.apply_indexing #map2(%dim0)
    %1 = arith.addi %dim2, %c0 : index
    %3 = arith.addi %dim0, %c0 : index
    %4 = arith.addi %dim1, %c0 : index
    %extracted = tensor.extract %synced_tensor[%1, %c0, %0] : tensor<32x1x33xf32>
    %2 = math.absf %extracted : f32
    %inserted = tensor.insert %2 into %iter[%3, %4, %dim2] : tensor<170x160x20xf32>
    xla_gpu.yield %inserted : tensor<170x160x20xf32>
  }
  return %xla_loop_0 : tensor<170x160x20xf32>
}
