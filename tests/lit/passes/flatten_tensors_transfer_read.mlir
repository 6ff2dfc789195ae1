// xla-flatten-tensors: an in-bounds vector.transfer_read along the
// innermost dimension of an N-d tensor reads the flat tensor at the
// row-major linearization of its indices; other reads are left alone.
// RUN: xla-gpu-opt %s --xla-flatten-tensors | FileCheck %s

// CHECK-LABEL: func.func @row(
// CHECK-SAME: %[[T:[^:]*]]: tensor<32xf32>, %[[I:[^:]*]]: index, %[[J:[^:]*]]: index)
// CHECK: %[[L:.*]] = xla_gpu.apply_indexing #{{.*}}(%[[I]], %[[J]])
// CHECK: %[[R:.*]] = vector.transfer_read %[[T]][%[[L]]], %{{.*}} {in_bounds = [true]} : tensor<32xf32>, vector<4xf32>
// CHECK: return %[[R]]
func.func @row(%t: tensor<4x8xf32>, %i: index, %j: index) -> vector<4xf32> {
  %pad = arith.constant 0.0 : f32
  %r = vector.transfer_read %t[%i, %j], %pad {in_bounds = [true]} : tensor<4x8xf32>, vector<4xf32>
  return %r : vector<4xf32>
}
