// predicated_insert / predicated_extract with a constant condition: true is
// the plain tensor access, false the tensor / the fallback.
// RUN: xla-gpu-opt %s --canonicalize | FileCheck %s

// CHECK-LABEL: func.func @constant_conditions(
// CHECK-SAME: %[[T:[^:]*]]: tensor<4x8xf32>, %[[I:[^:]*]]: index, %[[J:[^:]*]]: index, %[[V:[^:]*]]: f32, %[[C:[^:]*]]: i1)
// CHECK-NEXT: %[[INS:.*]] = tensor.insert %[[V]] into %[[T]][%[[I]], %[[J]]] : tensor<4x8xf32>
// CHECK-NEXT: %[[EXT:.*]] = tensor.extract %[[INS]][%[[J]], %[[I]]] : tensor<4x8xf32>
// CHECK-NEXT: %[[P:.*]] = xla_gpu.predicated_insert %[[EXT]] into %[[INS]][%[[I]], %[[I]]] if %[[C]] : tensor<4x8xf32>
// CHECK-NEXT: %[[Q:.*]] = xla_gpu.predicated_extract %[[P]][%[[J]], %[[J]]] if %[[C]] else %[[V]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[P]], %[[EXT]], %[[V]], %[[Q]]
func.func @constant_conditions(%t: tensor<4x8xf32>, %i: index, %j: index, %v: f32, %c: i1)
    -> (tensor<4x8xf32>, f32, f32, f32) {
  %true = arith.constant true
  %false = arith.constant false
  %a = xla_gpu.predicated_insert %v into %t[%i, %j] if %true : tensor<4x8xf32>
  %b = xla_gpu.predicated_insert %v into %a[%j, %j] if %false : tensor<4x8xf32>
  %e = xla_gpu.predicated_extract %b[%j, %i] if %true else %v : tensor<4x8xf32>
  %f = xla_gpu.predicated_extract %b[%i, %j] if %false else %v : tensor<4x8xf32>
  %p = xla_gpu.predicated_insert %e into %b[%i, %i] if %c : tensor<4x8xf32>
  %q = xla_gpu.predicated_extract %p[%j, %j] if %c else %f : tensor<4x8xf32>
  return %p, %e, %f, %q : tensor<4x8xf32>, f32, f32, f32
}

// Unused, they disappear.
// CHECK-LABEL: func.func @dead(
// CHECK-NEXT: return
func.func @dead(%t: tensor<8xf32>, %i: index, %v: f32, %c: i1) {
  %a = xla_gpu.predicated_insert %v into %t[%i] if %c : tensor<8xf32>
  %b = xla_gpu.predicated_extract %t[%i] if %c else %v : tensor<8xf32>
  return
}
