// GPU ops have no host lowering: xla-emulate-grid must run first.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-to-host --verify-diagnostics

func.func @thread_id() -> index {
  // expected-error @+1 {{'gpu.thread_id' op has no host lowering (run xla-emulate-grid first)}}
  %t = gpu.thread_id x
  return %t : index
}

// -----

func.func @nvvm() -> i32 {
  // expected-error @+1 {{'nvvm.read.ptx.sreg.tid.x' op has no host lowering}}
  %t = nvvm.read.ptx.sreg.tid.x : i32
  return %t : i32
}

// -----

func.func private @add(%a: f32, %b: f32) -> f32 {
  return %a : f32
}
func.func @shuffle(%x: f32) -> f32 {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op has no host lowering (run xla-emulate-grid first)}}
  %r = xla_gpu.shuffle_reduce(%x) to 16 combiner=@add : f32
  return %r : f32
}
