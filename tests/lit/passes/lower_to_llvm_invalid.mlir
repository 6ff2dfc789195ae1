// Left-over structured control flow and xla_gpu ops cannot be lowered here.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-to-llvm --verify-diagnostics

func.func @f(%c: i1) {
  // expected-error @+1 {{failed to legalize operation 'scf.if'}}
  scf.if %c {
  }
  return
}

// -----

func.func private @add(%a: f32, %b: f32) -> f32 {
  return %a : f32
}
func.func @shuffle(%x: f32) -> f32 {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op has no LLVM lowering (run xla-lower-shuffle-reduce first)}}
  %r = xla_gpu.shuffle_reduce(%x) to 16 combiner=@add : f32
  return %r : f32
}

// -----

func.func @atomic(%t: tensor<8xf32>, %i: index, %v: f32) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op has no LLVM lowering (run xla-lower-tensors first)}}
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%c: f32):
    xla_gpu.yield %v : f32
  }
  return %r : tensor<8xf32>
}
