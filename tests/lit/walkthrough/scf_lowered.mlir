// The reference walkthrough, stage "xla_gpu to scf": the loop as scf.for + scf.if with one apply_indexing per result.
// RUN: xla-gpu-opt %s > %t.1.mlir
// RUN: xla-gpu-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: xla-gpu-opt %s --mlir-print-op-generic | xla-gpu-opt > %t.3.mlir
// RUN: diff %t.1.mlir %t.3.mlir
// RUN: FileCheck %s < %t.1.mlir

// CHECK-DAG: #[[MAP0:.*]] = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
// CHECK-DAG: #[[MAP2:.*]] = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x mod 8) * 512 + th_x * 4 + vector_index), domain:
// CHECK: scf.for %[[V:.*]] = %c0 to %c4 step %c1
// CHECK: scf.if
// CHECK: %[[DIM0:.*]] = xla_gpu.apply_indexing #[[MAP0]](%thread_id_x, %block_id_x)[%[[V]]]
// CHECK: %[[DIM2:.*]] = xla_gpu.apply_indexing #[[MAP2]](%thread_id_x, %block_id_x)[%[[V]]]
// CHECK: tensor.extract %arg0[%[[DIM0]], %{{.*}}, %[[DIM2]]]

#map = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
#map1 = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x floordiv 8) mod 512),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
#map2 = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x mod 8) * 512 + th_x * 4 + vector_index),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">

func.func @main(%input: tensor<6x512x4096xbf16>, %output: tensor<6x512x4096xbf16>) -> tensor<6x512x4096xbf16> {
 %c0 = arith.constant 0 : index
 %c1 = arith.constant 1 : index
 %c4 = arith.constant 4 : index
 %c127 = arith.constant 127 : index
 %c24575 = arith.constant 24575 : index
 %cst = arith.constant 5.000000e-01 : bf16
 %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
 %block_id_x = gpu.block_id  x {xla.range = [0 : index, 24575 : index]}
 %xla_loop = scf.for %vector_index = %c0 to %c4 step %c1 iter_args(%iter = %output) -> (tensor<6x512x4096xbf16>) {
   %2 = arith.cmpi sge, %thread_id_x, %c0 : index
   %3 = arith.cmpi sle, %thread_id_x, %c127 : index
   %4 = arith.andi %2, %3 : i1
   %5 = arith.cmpi sge, %block_id_x, %c0 : index
   %6 = arith.cmpi sle, %block_id_x, %c24575 : index
   %7 = arith.andi %5, %6 : i1
   %inbounds = arith.andi %4, %7 : i1
   %9 = scf.if %inbounds -> (tensor<6x512x4096xbf16>) {
     %dim0 = xla_gpu.apply_indexing #map(%thread_id_x,  %block_id_x)[%vector_index]
     %dim1 = xla_gpu.apply_indexing #map1(%thread_id_x, %block_id_x)[%vector_index]
     %dim2 = xla_gpu.apply_indexing #map2(%thread_id_x, %block_id_x)[%vector_index]
     %extracted = tensor.extract %input[%dim0, %dim1, %dim2] : tensor<6x512x4096xbf16>
     // ... more arithmetic operations
     %28 = arith.mulf %extracted, %cst : bf16
     %29 = arith.mulf %extracted, %28 : bf16
     %inserted = tensor.insert %29 into %iter[%dim0, %dim1, %dim2] : tensor<6x512x4096xbf16>
     scf.yield %inserted : tensor<6x512x4096xbf16>
   } else {
     scf.yield %iter : tensor<6x512x4096xbf16>
   }
   scf.yield %9 : tensor<6x512x4096xbf16>
 }
 return %xla_loop : tensor<6x512x4096xbf16>
}
