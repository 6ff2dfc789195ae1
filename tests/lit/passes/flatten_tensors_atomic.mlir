// xla-flatten-tensors: atomic_rmw indexes its flat tensor through the
// row-major linearization and keeps its region.
// RUN: xla-gpu-opt %s --xla-flatten-tensors | FileCheck %s

// CHECK-LABEL: func.func @atomic(
// CHECK-SAME: %[[T:[^:]*]]: tensor<32xf32>, %[[I:[^:]*]]: index, %[[J:[^:]*]]: index, %[[V:[^:]*]]: f32, %[[S:[^:]*]]: tensor<1xi32>, %[[K:[^:]*]]: i32) -> (tensor<32xf32>, tensor<1xi32>)
// CHECK: %[[L:.*]] = xla_gpu.apply_indexing #{{.*}}(%[[I]], %[[J]])
// CHECK: %[[R:.*]] = xla_gpu.atomic_rmw %[[T]][%[[L]]] : tensor<32xf32> {
// CHECK-NEXT: ^bb0(%[[C:.*]]: f32):
// CHECK-NEXT: %[[N:.*]] = arith.addf %[[C]], %[[V]] : f32
// CHECK-NEXT: xla_gpu.yield %[[N]] : f32
// CHECK-NEXT: } {tag}
// CHECK: %[[Z:.*]] = arith.constant 0 : index
// CHECK: xla_gpu.atomic_rmw %[[S]][%[[Z]]] : tensor<1xi32> {
// CHECK: return %[[R]], %{{.*}} : tensor<32xf32>, tensor<1xi32>
func.func @atomic(%t: tensor<4x8xf32>, %i: index, %j: index, %v: f32, %s: tensor<i32>, %k: i32) -> (tensor<4x8xf32>, tensor<i32>) {
  %r = xla_gpu.atomic_rmw %t[%i, %j] : tensor<4x8xf32> {
  ^bb0(%current: f32):
    %n = arith.addf %current, %v : f32
    xla_gpu.yield %n : f32
  } {tag}
  %u = xla_gpu.atomic_rmw %s[] : tensor<i32> {
  ^bb0(%current: i32):
    %n = arith.addi %current, %k : i32
    xla_gpu.yield %n : i32
  }
  return %r, %u : tensor<4x8xf32>, tensor<i32>
}
