// An op the pass does not know that carries an N-d tensor is an error at
// that op.
// RUN: xla-gpu-opt %s --xla-flatten-tensors --verify-diagnostics

func.func @unknown(%t: tensor<4x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{failed to legalize operation 'tensor.extract_slice'}}
  %0 = tensor.extract_slice %t[0, 0] [2, 4] [1, 1] : tensor<4x4xf32> to tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}
