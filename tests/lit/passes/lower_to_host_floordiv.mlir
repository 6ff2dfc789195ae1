// xla-lower-to-host expands signed floor division as the cuda lowering does.
// RUN: xla-gpu-opt %s --xla-lower-to-host | FileCheck %s

// CHECK-LABEL: llvm.func @floordiv(
// CHECK-NOT: arith.floordivsi
// CHECK: llvm.sdiv
func.func @floordiv(%p: !llvm.ptr, %a: i32) {
  %c32 = arith.constant 32 : i32
  %q = arith.floordivsi %a, %c32 : i32
  llvm.store %q, %p : i32, !llvm.ptr
  return
}
