// The reference walkthrough, stage "Loop unrolling": the vector loop is gone; four extract/compute/insert groups (the reference walkthrough elides the arithmetic, one op stands for it here).
// RUN: xla-gpu-opt %s > %t.1.mlir
// RUN: xla-gpu-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: xla-gpu-opt %s --mlir-print-op-generic | xla-gpu-opt > %t.3.mlir
// RUN: diff %t.1.mlir %t.3.mlir
// RUN: FileCheck %s < %t.1.mlir

// CHECK-NOT: scf.for
// CHECK: %[[DIM:.*]] = xla_gpu.apply_indexing #map(%thread_id_x, %block_id_x, %c0)
// CHECK: vector.transfer_read %arg0[%[[DIM]]]
// CHECK-COUNT-4: vector.insert
// CHECK: vector.transfer_write %{{.*}}, %arg1[%[[DIM]]]

#map = #xla_gpu.indexing_map<"(th_x, bl_x, vector_index) -> (th_x * 4 + bl_x * 512 + vector_index),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">

func.func @main(%input: tensor<12582912xbf16>, %arg1: tensor<12582912xbf16>) -> tensor<12582912xbf16> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %cst = arith.constant 0.000000e+00 : bf16
  %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
  %block_id_x = gpu.block_id  x {xla.range = [0 : index, 24575 : index]}

  %cst_0 = arith.constant dense<0.000000e+00> : vector<4xbf16>
  %dim = xla_gpu.apply_indexing #map(%thread_id_x, %block_id_x, %c0)
  %2 = vector.transfer_read %input[%dim], %cst {in_bounds = [true]} : tensor<12582912xbf16>, vector<4xbf16>
  %3 = vector.extract %2[%c0] : bf16 from vector<4xbf16>
  %4 = arith.mulf %3, %3 : bf16
  %5 = math.tanh %4 : bf16
  %6 = vector.insert %5, %cst_0 [%c0] : bf16 into vector<4xbf16>
  %7 = vector.extract %2[%c1] : bf16 from vector<4xbf16>
  %8 = arith.mulf %7, %7 : bf16
  %9 = math.tanh %8 : bf16
  %10 = vector.insert %9, %6 [%c1] : bf16 into vector<4xbf16>
  %11 = vector.extract %2[%c2] : bf16 from vector<4xbf16>
  %12 = arith.mulf %11, %11 : bf16
  %13 = math.tanh %12 : bf16
  %14 = vector.insert %13, %10 [%c2] : bf16 into vector<4xbf16>
  %15 = vector.extract %2[%c3] : bf16 from vector<4xbf16>
  %16 = arith.mulf %15, %15 : bf16
  %17 = math.tanh %16 : bf16
  %18 = vector.insert %17, %14 [%c3] : bf16 into vector<4xbf16>
  %19 = vector.transfer_write %18, %arg1[%dim] {in_bounds = [true]} : vector<4xbf16>, tensor<12582912xbf16>
  return %19 : tensor<12582912xbf16>
}
