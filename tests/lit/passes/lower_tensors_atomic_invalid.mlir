// Element types xla-lower-tensors cannot update atomically.
// RUN: xla-gpu-opt %s --xla-lower-tensors --verify-diagnostics

func.func @i4(%t: tensor<64xi4>, %j: index, %v: i4) -> tensor<64xi4> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op xla-lower-tensors: no atomic update of 'i4' elements (8, 16, 32 or 64 bits)}}
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xi4> {
  ^bb0(%c: i4):
    xla_gpu.yield %v : i4
  }
  return %r : tensor<64xi4>
}
