// Malformed shuffle_reduce, predicated_insert, predicated_extract and
// atomic_rmw: a diagnostic at the op, never a crash.
// RUN: xla-gpu-opt %s --split-input-file --verify-diagnostics

func.func private @add(%a: f32, %b: f32) -> f32 {
  return %a : f32
}
func.func @f(%a: f32) -> f32 {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op max_distance must be a power of two in [1, 16], got 32}}
  %r = xla_gpu.shuffle_reduce(%a) to 32 combiner=@add : f32
  return %r : f32
}

// -----

func.func private @add(%a: f32, %b: f32) -> f32 {
  return %a : f32
}
func.func @f(%a: f32) -> f32 {
  // expected-error @+1 {{max_distance must be a power of two in [1, 16], got 6}}
  %r = xla_gpu.shuffle_reduce(%a) to 6 combiner=@add : f32
  return %r : f32
}

// -----

func.func @f(%a: f32) -> f32 {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op combiner 'nope' does not reference a func.func in scope}}
  %r = xla_gpu.shuffle_reduce(%a) to 16 combiner=@nope : f32
  return %r : f32
}

// -----

// The combiner takes the lane's values, then the other lane's.
func.func private @argmax(%a: f32, %b: f32) -> (f32, i32) {
  %c = arith.constant 0 : i32
  return %a, %c : f32, i32
}
func.func @f(%a: f32, %i: i32) -> (f32, i32) {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op combiner @argmax has type '(f32, f32) -> (f32, i32)'; expected '(f32, i32, f32, i32) -> (f32, i32)' (the lane's values, then the other lane's)}}
  %r:2 = xla_gpu.shuffle_reduce(%a, %i) to 16 combiner=@argmax : f32, i32
  return %r#0, %r#1 : f32, i32
}

// -----

func.func private @add(%a: f32, %b: f32) -> f64 {
  %e = arith.extf %a : f32 to f64
  return %e : f64
}
func.func @f(%a: f32) -> f32 {
  // expected-error @+1 {{combiner @add has type '(f32, f32) -> f64'; expected '(f32, f32) -> f32'}}
  %r = xla_gpu.shuffle_reduce(%a) to 16 combiner=@add : f32
  return %r : f32
}

// -----

func.func private @cat(%a: vector<2xf32>, %b: vector<2xf32>) -> vector<2xf32> {
  return %a : vector<2xf32>
}
func.func @f(%a: vector<2xf32>) -> vector<2xf32> {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op operand #0 has type 'vector<2xf32>'; lanes exchange integers, floats or index of at most 64 bits}}
  %r = xla_gpu.shuffle_reduce(%a) to 16 combiner=@cat : vector<2xf32>
  return %r : vector<2xf32>
}

// -----

func.func private @add(%a: f32, %b: f32) -> f32 {
  return %a : f32
}
func.func @f(%a: f32) -> f64 {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op result types ('f64') must be the operand types ('f32')}}
  %r = "xla_gpu.shuffle_reduce"(%a) <{combiner = @add, max_distance = 16 : i64}> : (f32) -> f64
  return %r : f64
}

// -----

func.func @f() {
  // expected-error @+1 {{'xla_gpu.shuffle_reduce' op needs at least one operand}}
  "xla_gpu.shuffle_reduce"() <{combiner = @add, max_distance = 16 : i64}> : () -> ()
  return
}

// -----

func.func private @add(%a: f32, %b: f32) -> f32 {
  return %a : f32
}
func.func @f(%a: f32, %b: f32) -> f32 {
  // expected-error @+1 {{number of operands and types do not match: got 2 operands and 1 types}}
  %r = xla_gpu.shuffle_reduce(%a, %b) to 16 combiner=@add : f32
  return %r : f32
}

// -----

func.func @f(%t: tensor<4x8xf32>, %i: index, %c: i1, %v: f32) -> tensor<4x8xf32> {
  // expected-error @+1 {{'xla_gpu.predicated_insert' op expects 2 indices (the rank of 'tensor<4x8xf32>'), got 1}}
  %r = xla_gpu.predicated_insert %v into %t[%i] if %c : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %c: i1, %v: f16) -> tensor<8xf32> {
  // expected-error @+2 {{use of value '%v' expects different type than prior uses: 'f32' vs 'f16'}}
  // expected-note @-2 {{prior use here}}
  %r = xla_gpu.predicated_insert %v into %t[%i] if %c : tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %c: i1, %v: f16) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.predicated_insert' op failed to verify that the value's type is the element type of dest}}
  %r = "xla_gpu.predicated_insert"(%v, %t, %i, %c) : (f16, tensor<8xf32>, index, i1) -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %c: i32, %v: f32) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.predicated_insert' op operand #3 must be 1-bit signless integer, but got 'i32'}}
  %r = "xla_gpu.predicated_insert"(%v, %t, %i, %c) : (f32, tensor<8xf32>, index, i32) -> tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: memref<8xf32>, %i: index, %c: i1, %v: f32) {
  // expected-error @+1 {{invalid kind of type specified: expected builtin.tensor, but found 'memref<8xf32>'}}
  %r = xla_gpu.predicated_insert %v into %t[%i] if %c : memref<8xf32>
  return
}

// -----

func.func @f(%t: tensor<4x8xf32>, %i: index, %c: i1, %v: f32) -> f32 {
  // expected-error @+1 {{'xla_gpu.predicated_extract' op expects 2 indices (the rank of 'tensor<4x8xf32>'), got 3}}
  %r = xla_gpu.predicated_extract %t[%i, %i, %i] if %c else %v : tensor<4x8xf32>
  return %r : f32
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %c: i1, %v: f32) -> f16 {
  // expected-error @+1 {{'xla_gpu.predicated_extract' op failed to verify that the result's type is the element type of src}}
  %r = "xla_gpu.predicated_extract"(%t, %i, %c, %v) : (tensor<8xf32>, index, i1, f32) -> f16
  return %r : f16
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %c: i1, %v: f16) -> f32 {
  // expected-error @+1 {{'xla_gpu.predicated_extract' op failed to verify that the fallback's type is the element type of src}}
  %r = "xla_gpu.predicated_extract"(%t, %i, %c, %v) : (tensor<8xf32>, index, i1, f16) -> f32
  return %r : f32
}

// -----

func.func @f(%t: tensor<4x8xf32>, %i: index, %v: f32) -> tensor<4x8xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op expects 2 indices (the rank of 'tensor<4x8xf32>'), got 1}}
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<4x8xf32> {
  ^bb0(%current: f32):
    xla_gpu.yield %v : f32
  }
  return %r : tensor<4x8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: f16) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op the region takes one argument, the current value ('f32', or a vector of 2 or more 'f32' for consecutive elements)}}
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: f16):
    xla_gpu.yield %v : f16
  }
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: f32) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op the region takes one argument, the current value ('f32', or a vector of 2 or more 'f32' for consecutive elements)}}
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: f32, %extra: f32):
    xla_gpu.yield %v : f32
  }
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: f16) -> tensor<8xf32> {
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: f32):
    // expected-error @+1 {{'xla_gpu.yield' op yields ('f16') but the atomic_rmw needs one 'f32'}}
    xla_gpu.yield %v : f16
  }
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: f32) -> tensor<8xf32> {
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: f32):
    // expected-error @+1 {{'xla_gpu.yield' op yields ('f32', 'f32') but the atomic_rmw needs one 'f32'}}
    xla_gpu.yield %v, %current : f32, f32
  }
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: f32) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op the region must end in xla_gpu.yield}}
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: f32):
    llvm.unreachable
  }

  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: f32) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op region #0 ('computation') failed to verify constraint: region with 1 blocks}}
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: f32):
    cf.br ^bb1
  ^bb1:
    xla_gpu.yield %v : f32
  }
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: f32) -> tensor<4xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op failed to verify that all of {input, result} have same type}}
  %r = "xla_gpu.atomic_rmw"(%t, %i) ({
  ^bb0(%current: f32):
    xla_gpu.yield %v : f32
  }) : (tensor<8xf32>, index) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: vector<4xf16>) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op the region takes one argument, the current value ('f32', or a vector of 2 or more 'f32' for consecutive elements)}}
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: vector<4xf16>):
    xla_gpu.yield %v : vector<4xf16>
  }
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: vector<1xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op the region takes one argument}}
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: vector<1xf32>):
    xla_gpu.yield %v : vector<1xf32>
  }
  return %r : tensor<8xf32>
}

// -----

func.func @f(%t: tensor<4x2xf32>, %i: index, %j: index, %v: vector<4xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op updates 4 consecutive elements, more than the innermost dimension (2) holds}}
  %r = xla_gpu.atomic_rmw %t[%i, %j] : tensor<4x2xf32> {
  ^bb0(%current: vector<4xf32>):
    %n = arith.addf %current, %v : vector<4xf32>
    xla_gpu.yield %n : vector<4xf32>
  }
  return %r : tensor<4x2xf32>
}

// -----

func.func @f(%t: tensor<8xf32>, %i: index, %v: f32) -> tensor<8xf32> {
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<8xf32> {
  ^bb0(%current: vector<2xf32>):
    // expected-error @+1 {{'xla_gpu.yield' op yields ('f32') but the atomic_rmw needs one 'vector<2xf32>'}}
    xla_gpu.yield %v : f32
  }
  return %r : tensor<8xf32>
}
