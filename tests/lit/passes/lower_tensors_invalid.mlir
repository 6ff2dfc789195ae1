// What xla-lower-tensors cannot lower ends in a diagnostic at the op.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors --verify-diagnostics

func.func @not_flat(%t: tensor<4x4xf32>, %i: index) -> f32 {
  // expected-error @+1 {{xla-lower-tensors needs static 1-d tensors (run xla-flatten-tensors first), got 'tensor<4x4xf32>'}}
  %e = tensor.extract %t[%i, %i] : tensor<4x4xf32>
  return %e : f32
}

// -----

func.func @fresh_tensor(%x: f32) -> tensor<4xf32> {
  %s = xla_gpu.allocate_shared : tensor<4xf32>
  // expected-error @+1 {{returned tensor #0 is not an in-place update of a function argument}}
  return %s : tensor<4xf32>
}

// -----

func.func @integer_complex(%t: tensor<4xcomplex<i32>>, %i: index) -> complex<i32> {
  // expected-error @+1 {{xla-lower-tensors: element type 'complex<i32>' is not supported}}
  %e = tensor.extract %t[%i] : tensor<4xcomplex<i32>>
  return %e : complex<i32>
}

// -----

func.func @switch_of_two_arguments(%a: tensor<8xf32>, %b: tensor<8xf32>, %g: index) -> tensor<8xf32> {
  %r = scf.index_switch %g -> tensor<8xf32>
  case 1 {
    scf.yield %a : tensor<8xf32>
  }
  default {
    scf.yield %b : tensor<8xf32>
  }
  // expected-error @+1 {{returned tensor #0 is not an in-place update of a function argument}}
  return %r : tensor<8xf32>
}
