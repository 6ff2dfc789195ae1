// pure_call and the inliner (the reference walkthrough's rule), CSE and LICM; shared memory
// and barriers are never merged or dropped.
// RUN: xla-gpu-opt %s --split-input-file --inline | FileCheck %s --check-prefix=INLINE
// RUN: xla-gpu-opt %s --split-input-file --cse | FileCheck %s --check-prefix=CSE
// RUN: xla-gpu-opt %s --split-input-file --loop-invariant-code-motion | FileCheck %s --check-prefix=LICM

// A callee with one call site is inlined and erased.
// INLINE-LABEL: func.func @single_site(
// INLINE-NOT: xla_gpu.pure_call
// INLINE: arith.mulf
// INLINE-NOT: func.func private @square
func.func private @square(%t: tensor<8xf32>, %i: index) -> f32 {
  %e = tensor.extract %t[%i] : tensor<8xf32>
  %m = arith.mulf %e, %e : f32
  return %m : f32
}
func.func @single_site(%t: tensor<8xf32>, %i: index) -> f32 {
  %0 = xla_gpu.pure_call @square(%t, %i) : (tensor<8xf32>, index) -> f32
  return %0 : f32
}

// -----

// A callee called from two sites stays outlined.
// INLINE-LABEL: func.func private @log(
// INLINE-LABEL: func.func @two_sites(
// INLINE: xla_gpu.pure_call @log(%arg0, %arg1)
// INLINE: xla_gpu.pure_call @log(%arg0, %arg2)
func.func private @log(%t: tensor<8xf32>, %i: index) -> f32 {
  %e = tensor.extract %t[%i] : tensor<8xf32>
  %l = math.log %e : f32
  return %l : f32
}
func.func @two_sites(%t: tensor<8xf32>, %i: index, %j: index) -> f32 {
  %0 = xla_gpu.pure_call @log(%t, %i) : (tensor<8xf32>, index) -> f32
  %1 = xla_gpu.pure_call @log(%t, %j) : (tensor<8xf32>, index) -> f32
  %2 = arith.addf %0, %1 : f32
  return %2 : f32
}

// -----

// CSE merges identical pure calls (they have no side effects) but never two
// shared allocations; unused pure calls die, sync_threads stays.
// CSE-LABEL: func.func @cse(
// CSE: %[[P:.*]] = xla_gpu.pure_call @g(%arg0)
// CSE-NOT: xla_gpu.pure_call
// CSE: arith.addf %[[P]], %[[P]]
// CSE: xla_gpu.allocate_shared
// CSE: xla_gpu.allocate_shared
// CSE: xla_gpu.sync_threads
func.func private @g(%i: index) -> f32
func.func @cse(%i: index) -> (f32, tensor<4xf32>, tensor<4xf32>) {
  %0 = xla_gpu.pure_call @g(%i) : (index) -> f32
  %1 = xla_gpu.pure_call @g(%i) : (index) -> f32
  %2 = arith.addf %0, %1 : f32
  %s0 = xla_gpu.allocate_shared : tensor<4xf32>
  %s1 = xla_gpu.allocate_shared : tensor<4xf32>
  %unused = xla_gpu.sync_threads %s0 : tensor<4xf32>
  return %2, %s0, %s1 : f32, tensor<4xf32>, tensor<4xf32>
}

// -----

// LICM hoists an invariant pure call out of a loop.
// LICM-LABEL: func.func @licm(
// LICM: xla_gpu.pure_call @h(%arg0)
// LICM: scf.for
func.func private @h(%i: index) -> f32
func.func @licm(%i: index, %init: f32) -> f32 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %r = scf.for %k = %c0 to %c8 step %c1 iter_args(%acc = %init) -> f32 {
    %v = xla_gpu.pure_call @h(%i) : (index) -> f32
    %s = arith.addf %acc, %v : f32
    scf.yield %s : f32
  }
  return %r : f32
}
