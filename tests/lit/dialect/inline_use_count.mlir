// The single-call-site rule of pure_call inlining, where the inliner moves a
// body (its use list counts one use of a discardable callee) and where it
// would clone one (the dialect counts the callee's uses then).
// RUN: xla-gpu-opt %s --split-input-file --inline | FileCheck %s

// A public callee with one call site: the inliner keeps the callee (its
// uses are not all visible), so it clones the body; one use, inlined.
// CHECK-LABEL: func.func @square(
// CHECK-LABEL: func.func @public_callee(
// CHECK-NOT: xla_gpu.pure_call
// CHECK: arith.mulf
func.func @square(%t: tensor<8xf32>, %i: index) -> f32 {
  %e = tensor.extract %t[%i] : tensor<8xf32>
  %m = arith.mulf %e, %e : f32
  return %m : f32
}
func.func @public_callee(%t: tensor<8xf32>, %i: index) -> f32 {
  %0 = xla_gpu.pure_call @square(%t, %i) : (tensor<8xf32>, index) -> f32
  return %0 : f32
}

// -----

// @inner has one site, in @outer, which has two: @inner moves into @outer,
// and @outer stays outlined at both of its sites.
// CHECK-LABEL: func.func private @outer(
// CHECK-NOT: xla_gpu.pure_call
// CHECK: math.exp
// CHECK-LABEL: func.func @chain(
// CHECK: xla_gpu.pure_call @outer(%arg0, %arg1)
// CHECK: xla_gpu.pure_call @outer(%arg0, %arg2)
// CHECK-NOT: func.func private @inner
func.func private @inner(%x: f32) -> f32 {
  %e = math.exp %x : f32
  return %e : f32
}
func.func private @outer(%t: tensor<8xf32>, %i: index) -> f32 {
  %x = tensor.extract %t[%i] : tensor<8xf32>
  %0 = xla_gpu.pure_call @inner(%x) : (f32) -> f32
  return %0 : f32
}
func.func @chain(%t: tensor<8xf32>, %i: index, %j: index) -> f32 {
  %0 = xla_gpu.pure_call @outer(%t, %i) : (tensor<8xf32>, index) -> f32
  %1 = xla_gpu.pure_call @outer(%t, %j) : (tensor<8xf32>, index) -> f32
  %2 = arith.addf %0, %1 : f32
  return %2 : f32
}

// -----

// @twice, with one site, calls @leaf twice: @twice moves into @caller and
// @leaf, at two sites there, stays outlined.
// CHECK-LABEL: func.func private @leaf(
// CHECK-LABEL: func.func @two_leaf_sites(
// CHECK: xla_gpu.pure_call @leaf(%arg0)
// CHECK: xla_gpu.pure_call @leaf(%arg1)
// CHECK-NOT: func.func private @twice
func.func private @leaf(%x: f32) -> f32 {
  %l = math.log %x : f32
  return %l : f32
}
func.func private @twice(%x: f32, %y: f32) -> f32 {
  %0 = xla_gpu.pure_call @leaf(%x) : (f32) -> f32
  %1 = xla_gpu.pure_call @leaf(%y) : (f32) -> f32
  %2 = arith.addf %0, %1 : f32
  return %2 : f32
}
func.func @two_leaf_sites(%x: f32, %y: f32) -> f32 {
  %0 = xla_gpu.pure_call @twice(%x, %y) : (f32, f32) -> f32
  return %0 : f32
}
