// The reference walkthrough, stage "Vectorization": one vector.transfer_read hoisted out of the vector loop, one transfer_write after it.
// RUN: xla-gpu-opt %s > %t.1.mlir
// RUN: xla-gpu-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: xla-gpu-opt %s --mlir-print-op-generic | xla-gpu-opt > %t.3.mlir
// RUN: diff %t.1.mlir %t.3.mlir
// RUN: FileCheck %s < %t.1.mlir

// CHECK: %[[IDX:.*]] = xla_gpu.apply_indexing #map(%thread_id_x, %block_id_x, %c0)
// CHECK: %[[VEC:.*]] = vector.transfer_read %arg0[%[[IDX]]], %{{.*}} {in_bounds = [true]} : tensor<12582912xbf16>, vector<4xbf16>
// CHECK: scf.for
// CHECK: vector.extract %[[VEC]][%{{.*}}] : bf16 from vector<4xbf16>
// CHECK: vector.transfer_write %{{.*}}#1, %arg1[%[[IDX]]] {in_bounds = [true]} : vector<4xbf16>, tensor<12582912xbf16>

#map = #xla_gpu.indexing_map<"(th_x, bl_x, vector_index) -> (th_x * 4 + bl_x * 512 + vector_index),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">

func.func @main(%input: tensor<12582912xbf16>, %output: tensor<12582912xbf16>) -> tensor<12582912xbf16> {
 %c0 = arith.constant 0 : index
 %c1 = arith.constant 1 : index
 %c4 = arith.constant 4 : index
 %cst = arith.constant 0.000000e+00 : bf16
 %cst_1 = arith.constant 5.000000e-01 : bf16
 %cst_2 = arith.constant 1.000000e+00 : bf16
 %cst_3 = arith.constant 7.968750e-01 : bf16
 %cst_4 = arith.constant 4.467770e-02 : bf16
 %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
 %block_id_x = gpu.block_id  x {xla.range = [0 : index, 24575 : index]}
 %vector_0 = arith.constant dense<0.000000e+00> : vector<4xbf16>
 %0 = xla_gpu.apply_indexing #map(%thread_id_x, %block_id_x, %c0)
 %2 = vector.transfer_read %input[%0], %cst {in_bounds = [true]} : tensor<12582912xbf16>, vector<4xbf16>
 %xla_loop:2 = scf.for %vector_index = %c0 to %c4 step %c1
     iter_args(%iter = %output, %iter_vector = %vector_0) -> (tensor<12582912xbf16>, vector<4xbf16>) {
   %5 = vector.extract %2[%vector_index] : bf16 from vector<4xbf16>
   %6 = arith.mulf %5, %5 : bf16
   %7 = arith.mulf %6, %5 : bf16
   %8 = arith.mulf %7, %cst_4 : bf16
   %9 = arith.addf %5, %8 : bf16
   %10 = arith.mulf %9, %cst_3 : bf16
   %11 = math.tanh %10 : bf16
   %12 = arith.addf %11, %cst_2 : bf16
   %13 = arith.mulf %12, %cst_1 : bf16
   %14 = arith.mulf %5, %13 : bf16
   %15 = vector.insert %14, %iter_vector [%vector_index] : bf16 into vector<4xbf16>
   scf.yield %iter, %15 : tensor<12582912xbf16>, vector<4xbf16>
 }
 %4 = vector.transfer_write %xla_loop#1, %output[%0] {in_bounds = [true]}
     : vector<4xbf16>, tensor<12582912xbf16>
 return %4 : tensor<12582912xbf16>
}
