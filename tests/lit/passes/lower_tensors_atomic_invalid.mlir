// Element types xla-lower-tensors cannot update atomically.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors --verify-diagnostics

func.func @i4(%t: tensor<64xi4>, %j: index, %v: i4) -> tensor<64xi4> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op xla-lower-tensors: no atomic update of 'i4' elements (8, 16, 32 or 64 bits, or complex<f64>)}}
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xi4> {
  ^bb0(%c: i4):
    xla_gpu.yield %v : i4
  }
  return %r : tensor<64xi4>
}

// -----

func.func @i128(%t: tensor<4xi128>, %j: index, %v: i128) -> tensor<4xi128> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op xla-lower-tensors: no atomic update of 'i128' elements (8, 16, 32 or 64 bits, or complex<f64>)}}
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<4xi128> {
  ^bb0(%c: i128):
    %s = arith.muli %c, %v : i128
    xla_gpu.yield %s : i128
  }
  return %r : tensor<4xi128>
}
