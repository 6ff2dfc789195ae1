// An atomic update of a complex element other than an addition has no
// lowering: it is refused at the op.
// RUN: xla-gpu-opt %s --xla-lower-tensors --verify-diagnostics

func.func @atomic_multiply(%out: tensor<8xcomplex<f32>>, %i: index, %x: complex<f32>) -> tensor<8xcomplex<f32>> {
  // expected-error @+1 {{the only atomic update of complex elements is an addition}}
  %r = xla_gpu.atomic_rmw %out[%i] : tensor<8xcomplex<f32>> {
  ^bb0(%current: complex<f32>):
    %s = complex.mul %current, %x : complex<f32>
    xla_gpu.yield %s : complex<f32>
  }
  return %r : tensor<8xcomplex<f32>>
}
