// xla-lower-tensors: a tensor returned through scf.index_switch is an
// in-place update when every region updates the same argument.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors | FileCheck %s

// CHECK-LABEL: func.func @switch(
// CHECK-SAME: %[[OUT:[a-z0-9]+]]: !llvm.ptr, %[[G:.*]]: index, %{{.*}}: f32)
// CHECK: scf.index_switch %[[G]]
// CHECK: llvm.store
// CHECK: llvm.store
// CHECK: return{{$}}
func.func @switch(%out: tensor<8xf32>, %g: index, %v: f32) -> tensor<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %r = scf.index_switch %g -> tensor<8xf32>
  case 1 {
    %a = tensor.insert %v into %out[%c1] : tensor<8xf32>
    scf.yield %a : tensor<8xf32>
  }
  default {
    %b = tensor.insert %v into %out[%c0] : tensor<8xf32>
    scf.yield %b : tensor<8xf32>
  }
  return %r : tensor<8xf32>
}
