// xla-lower-to-host reconciles the unrealized casts left after its
// conversion (the cpu pipeline runs no reconcile-unrealized-casts after
// it): a round trip through another type is the value itself.
// RUN: xla-gpu-opt %s --xla-lower-to-host | FileCheck %s

// CHECK-LABEL: llvm.func @round_trip(
// CHECK-SAME: %[[P:[^:]*]]: !llvm.ptr, %[[X:[^:]*]]: i32)
// CHECK-NOT: unrealized_conversion_cast
// CHECK: llvm.store %[[X]], %[[P]] : i32, !llvm.ptr
func.func @round_trip(%p: !llvm.ptr, %x: i32) {
  %f = builtin.unrealized_conversion_cast %x : i32 to f32
  %y = builtin.unrealized_conversion_cast %f : f32 to i32
  llvm.store %y, %p : i32, !llvm.ptr
  return
}
