// REQUIRES: mlir-opt-plugin
// Diagnostics come through mlir-opt's own --verify-diagnostics.
// RUN: %mlir-opt-plugin %s --split-input-file --verify-diagnostics

// expected-error @+1 {{unknown identifier 'q'}}
func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (q), domain: a in [0, 1]">}

// -----

func.func @f(%a: index) -> f32 {
  // expected-error @+1 {{'nope' does not reference a func.func in scope}}
  %0 = xla_gpu.pure_call @nope(%a) : (index) -> f32
  return %0 : f32
}
