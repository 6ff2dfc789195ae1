// Tensors whose element count overflows int64 get an error from the passes
// that compute it, never an assertion.
// RUN: not xla-gpu-opt --xla-flatten-tensors %s 2>&1 | FileCheck %s
// RUN: not xla-gpu-opt --xla-lower-tensors %s 2>&1 | FileCheck %s

// CHECK: error: 'func.func' op uses 'tensor<4294967296x2147483648xf32>', whose element count does not fit in int64
func.func @f(%t: tensor<4294967296x2147483648xf32>, %i: index, %j: index) -> f32 {
  %v = tensor.extract %t[%i, %j] : tensor<4294967296x2147483648xf32>
  return %v : f32
}
