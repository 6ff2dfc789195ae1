// Malformed xla_gpu ops: arity and type errors, unknown callees, bad
// regions. Each case ends in a diagnostic at the op, never in a crash.
// RUN: xla-gpu-opt %s --split-input-file --verify-diagnostics

#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0 + s0), domain: d0 in [0, 3], s0 in [0, 1]">
func.func @f(%a: index) -> index {
  // expected-error @+1 {{expects 2 operands (1 dimensions + 1 symbols of the indexing map), got 1}}
  %0 = xla_gpu.apply_indexing #map(%a)
  return %0 : index
}

// -----

#map = #xla_gpu.indexing_map<"(d0) -> (d0), domain: d0 in [0, 3]">
func.func @f(%a: i32) {
  // expected-error @+2 {{use of value '%a' expects different type than prior uses: 'index' vs 'i32'}}
  // expected-note @-2 {{prior use here}}
  %0 = xla_gpu.apply_indexing #map(%a)
  return
}

// -----

func.func @f(%a: index) {
  // expected-error @+1 {{expected an #xla_gpu.indexing_map, got affine_map<(d0) -> (d0)>}}
  %0 = xla_gpu.apply_indexing affine_map<(d0) -> (d0)>(%a)
  return
}

// -----

func.func @f(%a: index) {
  // expected-error @+1 {{expects one result per indexing map result (1), got 2}}
  %0:2 = "xla_gpu.apply_indexing"(%a) <{indexing_map_attr = #xla_gpu.indexing_map<"(d0) -> (d0), domain: d0 in [0, 3]">}> : (index) -> (index, index)
  return
}

// -----

func.func @f(%a: i64) {
  // expected-error @+1 {{'xla_gpu.apply_indexing' op operand #0 must be variadic of index, but got 'i64'}}
  %0 = "xla_gpu.apply_indexing"(%a) <{indexing_map_attr = #xla_gpu.indexing_map<"(d0) -> (d0), domain: d0 in [0, 3]">}> : (i64) -> (index)
  return
}

// -----

#map = #xla_gpu.indexing_map<"(d0, d1)[s0] -> (d0), domain: d0 in [0, 3], d1 in [0, 3], s0 in [0, 1]">
func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expects 2 dimension operands (the indexing map's dimensions), got 1}}
  %r = xla_gpu.loop (%a)[%i] -> (%x) in #map iter_args(%it = %t) -> (tensor<4xf32>) {
    xla_gpu.yield %it : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

#map = #xla_gpu.indexing_map<"(d0)[s0, s1] -> (d0), domain: d0 in [0, 3], s0 in [0, 1], s1 in [0, 1]">
func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expects 2 induction variables (the map's symbols) and 1 map results (the map's results), got 2 values in total}}
  %r = xla_gpu.loop (%a)[%i] -> (%x) in #map iter_args(%it = %t) -> (tensor<4xf32>) {
    xla_gpu.yield %it : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0, s0), domain: d0 in [0, 3], s0 in [0, 1]">
func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expects 1 induction variables (the map's symbols) and 2 map results (the map's results), got 2 values in total}}
  %r = xla_gpu.loop (%a)[%i] -> (%x) in #map iter_args(%it = %t) -> (tensor<4xf32>) {
    xla_gpu.yield %it : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">
func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{expected 1 result types for 1 iter_args, got 2}}
  %r = xla_gpu.loop (%a)[%i] -> (%x) in #map iter_args(%it = %t) -> (tensor<4xf32>, f32) {
    xla_gpu.yield %it : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">
func.func @f(%a: index, %t: tensor<4xf32>, %f: f32) -> tensor<4xf32> {
  %r = xla_gpu.loop (%a)[%i] -> (%x) in #map iter_args(%it = %t) -> (tensor<4xf32>) {
    // expected-error @+1 {{'xla_gpu.yield' op yields ('f32') but the loop carries ('tensor<4xf32>')}}
    xla_gpu.yield %f : f32
  }
  return %r : tensor<4xf32>
}

// -----

#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">
func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+2 {{use of value '%t' expects different type than prior uses: 'tensor<8xf32>' vs 'tensor<4xf32>'}}
  // expected-note @-2 {{prior use here}}
  %r = xla_gpu.loop (%a)[%i] -> (%x) in #map iter_args(%it = %t) -> (tensor<8xf32>) {
    xla_gpu.yield %it : tensor<8xf32>
  }
  return %r : tensor<8xf32>
}

// -----

#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">
func.func @f(%a: index) {
  // expected-error @+1 {{expected 'in'}}
  xla_gpu.loop (%a)[%i] -> (%x) #map {
  }
  return
}

// -----

#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">
func.func @f() {
  // expected-error @+1 {{use of undeclared SSA value name}}
  xla_gpu.loop (%nope)[%i] -> (%x) in #map {
  }
  return
}

// -----

func.func @f(%t: tensor<4xf32>) {
  // expected-error @+1 {{'xla_gpu.yield' op expects parent op to be one of 'xla_gpu.loop, xla_gpu.atomic_rmw'}}
  xla_gpu.yield %t : tensor<4xf32>
}

// -----

func.func @f(%a: index) -> f32 {
  // expected-error @+1 {{'xla_gpu.pure_call' op 'nope' does not reference a func.func in scope}}
  %0 = xla_gpu.pure_call @nope(%a) : (index) -> f32
  return %0 : f32
}

// -----

llvm.func @g(%a: i64) -> f32
func.func @f(%a: i64) -> f32 {
  // expected-error @+1 {{'g' does not reference a func.func in scope}}
  %0 = xla_gpu.pure_call @g(%a) : (i64) -> f32
  return %0 : f32
}

// -----

func.func private @g(%a: index, %b: index) -> f32
func.func @f(%a: index) -> f32 {
  // expected-error @+1 {{passes 1 operands but @g takes 2}}
  %0 = xla_gpu.pure_call @g(%a) : (index) -> f32
  return %0 : f32
}

// -----

func.func private @g(%a: index) -> f32
func.func @f(%a: i32) -> f32 {
  // expected-error @+1 {{operand #0 has type 'i32' but @g expects 'index'}}
  %0 = xla_gpu.pure_call @g(%a) : (i32) -> f32
  return %0 : f32
}

// -----

func.func private @g(%a: index) -> f32
func.func @f(%a: index) -> f16 {
  // expected-error @+1 {{result #0 has type 'f16' but @g returns 'f32'}}
  %0 = xla_gpu.pure_call @g(%a) : (index) -> f16
  return %0 : f16
}

// -----

func.func private @g(%a: index) -> (f32, f32)
func.func @f(%a: index) -> f32 {
  // expected-error @+1 {{has 1 results but @g returns 2}}
  %0 = xla_gpu.pure_call @g(%a) : (index) -> f32
  return %0 : f32
}

// -----

func.func private @g(%a: index) -> f32
func.func @f(%a: index) -> f32 {
  // expected-error @+1 {{expected attribute value}}
  %0 = xla_gpu.pure_call g(%a) : (index) -> f32
  return %0 : f32
}

// -----

func.func @f() {
  // expected-error @+1 {{'xla_gpu.allocate_shared' op result #0 must be statically shaped tensor of any type values, but got 'tensor<?x4xf32>'}}
  %0 = xla_gpu.allocate_shared : tensor<?x4xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{invalid kind of type specified: expected builtin.tensor, but found 'memref<4xf32>'}}
  %0 = xla_gpu.allocate_shared : memref<4xf32>
  return
}

// -----

func.func @f(%a: index) {
  // expected-error @+1 {{'xla_gpu.sync_threads' op operand #0 must be variadic of ranked tensor of any type values, but got 'index'}}
  %0 = xla_gpu.sync_threads %a : index
  return
}

// -----

func.func @f(%t: tensor<4xf32>) {
  // expected-error @+2 {{'xla_gpu.sync_threads' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<8xf32>'}}
  // expected-error @+1 {{'xla_gpu.sync_threads' op failed to infer returned types}}
  %0 = "xla_gpu.sync_threads"(%t) : (tensor<4xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{custom op 'xla_gpu.no_such_op' is unknown}}
  xla_gpu.no_such_op
  return
}

// -----

// Generic forms that skip the custom parser still meet the verifiers.
func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'xla_gpu.loop' op requires attribute 'indexing_map_attr'}}
  %r = "xla_gpu.loop"(%a, %t) <{operandSegmentSizes = array<i32: 1, 1>}> ({
  ^bb0(%i: index, %x: index, %it: tensor<4xf32>):
    "xla_gpu.yield"(%it) : (tensor<4xf32>) -> ()
  }) : (index, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{Invalid attribute `indexing_map_attr` in property conversion: 5 : i32}}
  %r = "xla_gpu.loop"(%a, %t) <{indexing_map_attr = 5 : i32, operandSegmentSizes = array<i32: 1, 1>}> ({
  ^bb0(%i: index, %x: index, %it: tensor<4xf32>):
    "xla_gpu.yield"(%it) : (tensor<4xf32>) -> ()
  }) : (index, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'xla_gpu.loop' op region #0 ('region') failed to verify constraint: region with 1 blocks}}
  %r = "xla_gpu.loop"(%a, %t) <{indexing_map_attr = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">, operandSegmentSizes = array<i32: 1, 1>}> ({
  }) : (index, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  %r = "xla_gpu.loop"(%a, %t) <{indexing_map_attr = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">, operandSegmentSizes = array<i32: 1, 1>}> ({
  ^bb0(%i: index, %x: index, %it: tensor<4xf32>):
    // expected-error @+1 {{block with no terminator}}
    %c = arith.constant 0 : index
  }) : (index, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @f(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'xla_gpu.loop' op iter_arg #0 has type 'tensor<8xf32>' but its init has type 'tensor<4xf32>'}}
  %r = "xla_gpu.loop"(%a, %t) <{indexing_map_attr = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">, operandSegmentSizes = array<i32: 1, 1>}> ({
  ^bb0(%i: index, %x: index, %it: tensor<8xf32>):
    "xla_gpu.yield"(%t) : (tensor<4xf32>) -> ()
  }) : (index, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @f(%a: index, %t: tensor<4xf32>) {
  // expected-error @+1 {{'xla_gpu.loop' op induction variables and map results must be index}}
  "xla_gpu.loop"(%a) <{indexing_map_attr = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 3], s0 in [0, 1]">, operandSegmentSizes = array<i32: 1, 0>}> ({
  ^bb0(%i: i32, %x: index):
    "xla_gpu.yield"() : () -> ()
  }) : (index) -> ()
  return
}
