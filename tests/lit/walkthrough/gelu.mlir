// The reference walkthrough, stage "MLIR conversion": the GELU fusion as the loop emitter emits it,
// verbatim (the map split over adjacent strings, as the reference walkthrough writes it).
// It parses, verifies, and prints to text that parses to the same IR, both
// through the custom syntax and through the generic form.
// RUN: xla-gpu-opt %s > %t.1.mlir
// RUN: xla-gpu-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: xla-gpu-opt %s --mlir-print-op-generic | xla-gpu-opt > %t.3.mlir
// RUN: diff %t.1.mlir %t.3.mlir
// RUN: FileCheck %s < %t.1.mlir

// CHECK: #map = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, (bl_x mod 8) * 512 + th_x * 4 + vector_index), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
// CHECK-LABEL: func.func @main(
// CHECK: %[[TID:.*]] = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
// CHECK: %[[BID:.*]] = gpu.block_id x {xla.range = [0 : index, 24575 : index]}
// CHECK: %xla_loop = xla_gpu.loop (%[[TID]], %[[BID]])[%[[V:.*]]] -> (%[[D0:.*]], %[[D1:.*]], %[[D2:.*]]) in #map iter_args(%[[ITER:.*]] = %arg1) -> (tensor<6x512x4096xbf16>) {
// CHECK-NEXT: %pure_call = xla_gpu.pure_call @gelu(%arg0, %[[D0]], %[[D1]], %[[D2]]) : (tensor<6x512x4096xbf16>, index, index, index) -> bf16
// CHECK-NEXT: %inserted = tensor.insert %pure_call into %[[ITER]][%[[D0]], %[[D1]], %[[D2]]]
// CHECK-NEXT: xla_gpu.yield %inserted : tensor<6x512x4096xbf16>
// CHECK-NEXT: }
// CHECK-NEXT: return %xla_loop
// CHECK-LABEL: func.func private @gelu(
// CHECK: math.tanh

#map = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ("
 "bl_x floordiv 4096, (bl_x floordiv 8) mod 512, (bl_x mod 8) * 512 + th_x * 4 + vector_index),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">

func.func @main(%input: tensor<6x512x4096xbf16> , %output: tensor<6x512x4096xbf16>)
   -> tensor<6x512x4096xbf16> {
 %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
 %block_id_x = gpu.block_id  x {xla.range = [0 : index, 24575 : index]}

 %xla_loop = xla_gpu.loop (%thread_id_x, %block_id_x)[%vector_index] -> (%dim0, %dim1, %dim2)
     in #map iter_args(%iter = %output) -> (tensor<6x512x4096xbf16>) {
   %pure_call = xla_gpu.pure_call @gelu(%input, %dim0, %dim1, %dim2)
      : (tensor<6x512x4096xbf16>, index, index, index) -> bf16
   %inserted = tensor.insert %pure_call into %iter[%dim0, %dim1, %dim2] : tensor<6x512x4096xbf16>
   xla_gpu.yield %inserted : tensor<6x512x4096xbf16>
 }
 return %xla_loop : tensor<6x512x4096xbf16>
}

func.func private @gelu(%arg0: tensor<6x512x4096xbf16>, %i: index, %j: index, %k: index) -> bf16 {
  %cst = arith.constant 5.000000e-01 : bf16
  %cst_0 = arith.constant 1.000000e+00 : bf16
  %cst_1 = arith.constant 7.968750e-01 : bf16
  %cst_2 = arith.constant 4.467770e-02 : bf16
  %extracted = tensor.extract %arg0[%i, %j, %k] : tensor<6x512x4096xbf16>
  %0 = arith.mulf %extracted, %extracted : bf16
  %1 = arith.mulf %0, %extracted : bf16
  %2 = arith.mulf %1, %cst_2 : bf16
  %3 = arith.addf %extracted, %2 : bf16
  %4 = arith.mulf %3, %cst_1 : bf16
  %5 = math.tanh %4 : bf16
  %6 = arith.addf %5, %cst_0 : bf16
  %7 = arith.mulf %6, %cst : bf16
  %8 = arith.mulf %extracted, %7 : bf16
  return %8 : bf16
}
