// xla-lower-to-llvm: nvvm special registers, libdevice calls, kernels.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-to-llvm | FileCheck %s

// CHECK: llvm.func @__nv_tanhf(f32) -> f32
// CHECK-LABEL: llvm.func @kernel(%arg0: !llvm.ptr) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>}
// CHECK: nvvm.read.ptx.sreg.tid.x range <i32, 0, 128> : i32
// CHECK: nvvm.read.ptx.sreg.ctaid.y : i32
// CHECK: llvm.call @__nv_tanhf
// CHECK: nvvm.barrier
// CHECK-LABEL: llvm.func @helper(
// CHECK-NOT: nvvm.kernel
func.func @kernel(%p: !llvm.ptr) {
  %t = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %b = gpu.block_id y
  %s = arith.addi %t, %b : index
  %i = arith.index_castui %s : index to i64
  %q = llvm.getelementptr inbounds %p[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %x = llvm.load %q : !llvm.ptr -> f32
  %y = math.tanh %x : f32
  gpu.barrier
  llvm.store %y, %q : f32, !llvm.ptr
  return
}
func.func private @helper(%x: f32) -> f32 {
  return %x : f32
}

// -----

// Only functions marked xla.entry are kernels when any is marked.
// CHECK-LABEL: llvm.func @a()
// CHECK-NOT: nvvm.kernel
// CHECK-LABEL: llvm.func @b() attributes {nvvm.kernel}
func.func @a() {
  return
}
func.func @b() attributes {xla.entry} {
  return
}

// -----

// Signed floor division (xla-simplify-affine emits it when a dividend may
// be negative) is expanded, not left illegal.
// CHECK-LABEL: llvm.func @floordiv(
// CHECK-NOT: arith.floordivsi
// CHECK: llvm.sdiv
func.func @floordiv(%p: !llvm.ptr, %a: i32) attributes {xla.entry} {
  %c32 = arith.constant 32 : i32
  %q = arith.floordivsi %a, %c32 : i32
  llvm.store %q, %p : i32, !llvm.ptr
  return
}
