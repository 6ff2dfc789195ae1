// xla-propagate-slice-indices and xla-merge-pointers: arguments that live in
// one buffer slice are passed once (the kernel ABI), and callee parameters
// learn the slices (and read-only-ness) of what they receive.
// RUN: xla-gpu-opt %s --split-input-file --xla-propagate-slice-indices | FileCheck %s --check-prefix=PROP
// RUN: xla-gpu-opt %s --split-input-file --xla-merge-pointers | FileCheck %s --check-prefix=MERGE
// RUN: xla-gpu-opt %s --split-input-file --xla-propagate-slice-indices --xla-lower-tensors | FileCheck %s --check-prefix=LOWER

// PROP-LABEL: func.func private @sub(
// PROP-SAME: %arg0: tensor<8xf32> {xla.invariant, xla.slice_index = 0 : i64}
// PROP-SAME: %arg1: index)
// LOWER-LABEL: func.func private @sub(
// LOWER: llvm.load %{{.*}} invariant
func.func private @sub(%t: tensor<8xf32>, %i: index) -> f32 {
  %e = tensor.extract %t[%i] : tensor<8xf32>
  return %e : f32
}
func.func @kernel(%in: tensor<8xf32> {xla.slice_index = 0 : i64, xla.invariant},
                  %out: tensor<8xf32> {xla.slice_index = 1 : i64}, %i: index) -> tensor<8xf32> {
  %0 = xla_gpu.pure_call @sub(%in, %i) : (tensor<8xf32>, index) -> f32
  %1 = xla_gpu.pure_call @sub(%in, %i) : (tensor<8xf32>, index) -> f32
  %s = arith.addf %0, %1 : f32
  %r = tensor.insert %s into %out[%i] : tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// MERGE-LABEL: func.func @in_place(
// MERGE-SAME: %[[A:.*]]: tensor<8xf32> {xla.slice_index = 0 : i64}, %[[I:.*]]: index) -> tensor<8xf32>
// MERGE: %[[E:.*]] = tensor.extract %[[A]][%[[I]]]
// MERGE: tensor.insert %{{.*}} into %[[A]][%[[I]]]
func.func @in_place(%in: tensor<8xf32> {xla.slice_index = 0 : i64},
                    %out: tensor<8xf32> {xla.slice_index = 0 : i64}, %i: index) -> tensor<8xf32> {
  %e = tensor.extract %in[%i] : tensor<8xf32>
  %n = arith.negf %e : f32
  %r = tensor.insert %n into %out[%i] : tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

// A callee keeps its signature even where two parameters share a slice
// (its callers pass both); a kernel whose slices all differ keeps every
// argument.
// MERGE-LABEL: func.func private @callee(
// MERGE-SAME: %{{.*}}: tensor<8xf32> {xla.slice_index = 0 : i64}, %{{.*}}: tensor<8xf32> {xla.slice_index = 0 : i64})
// MERGE-LABEL: func.func @distinct(
// MERGE-SAME: %{{.*}}: tensor<8xf32> {xla.slice_index = 0 : i64}, %{{.*}}: tensor<8xf32> {xla.slice_index = 1 : i64}) -> f32
func.func private @callee(%a: tensor<8xf32> {xla.slice_index = 0 : i64},
                          %b: tensor<8xf32> {xla.slice_index = 0 : i64}) -> f32 {
  %c0 = arith.constant 0 : index
  %e = tensor.extract %a[%c0] : tensor<8xf32>
  %f = tensor.extract %b[%c0] : tensor<8xf32>
  %s = arith.addf %e, %f : f32
  return %s : f32
}
func.func @distinct(%in: tensor<8xf32> {xla.slice_index = 0 : i64},
                    %out: tensor<8xf32> {xla.slice_index = 1 : i64}) -> f32 {
  %0 = xla_gpu.pure_call @callee(%in, %in) : (tensor<8xf32>, tensor<8xf32>) -> f32
  return %0 : f32
}
