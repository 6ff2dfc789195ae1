// xla-lower-to-host: LLVM intrinsics or libm for math, bf16 computed in f32
// with one rounding per op (integer ops, no __truncsfbf2), C interfaces.
// RUN: xla-gpu-opt %s --xla-lower-to-host | FileCheck %s

// CHECK-DAG: llvm.func @erff(f32) -> f32
// CHECK-LABEL: llvm.func @host(
// CHECK-SAME: %[[P:[^:]*]]: !llvm.ptr, %[[X:[^:]*]]: f32, %[[Y:[^:]*]]: bf16)
// CHECK-SAME: attributes {llvm.emit_c_interface}
// bf16 -> f32 is a shift.
// CHECK: %[[Y16:.*]] = llvm.bitcast %[[Y]] : bf16 to i16
// CHECK: %[[Y32:.*]] = llvm.zext %[[Y16]] : i16 to i32
// CHECK: %[[YSHL:.*]] = llvm.shl %[[Y32]]
// CHECK: %[[YF:.*]] = llvm.bitcast %[[YSHL]] : i32 to f32
// CHECK: %[[T:.*]] = llvm.intr.tanh(%[[X]]) : (f32) -> f32
// CHECK: llvm.call @erff(%[[T]]) : (f32) -> f32
// CHECK: llvm.intr.sqrt(%[[X]]) : (f32) -> f32
// The bf16 product, in f32, rounded to nearest even before the sum.
// CHECK: %[[PROD:.*]] = llvm.fmul %[[YF]], %[[YF]] : f32
// CHECK: llvm.fcmp "une" %[[PROD]], %[[PROD]] : f32
// CHECK: llvm.bitcast %[[PROD]] : f32 to i32
// CHECK: llvm.lshr
// CHECK: llvm.fadd %{{.*}}, %[[YF]] : f32
// CHECK-NOT: : bf16 to f32
// CHECK-NOT: llvm.fptrunc
// CHECK: llvm.store %{{.*}}, %[[P]] : bf16, !llvm.ptr
// CHECK-LABEL: llvm.func @_mlir_ciface_host(
// CHECK: llvm.call @host(
func.func @host(%p: !llvm.ptr, %x: f32, %y: bf16) attributes {llvm.emit_c_interface} {
  %t = math.tanh %x : f32
  %e = math.erf %t : f32
  %s = math.sqrt %x : f32
  %a = arith.mulf %y, %y : bf16
  %b = arith.addf %a, %y : bf16
  llvm.store %b, %p : bf16, !llvm.ptr
  %q = llvm.getelementptr %p[1] : (!llvm.ptr) -> !llvm.ptr, f32
  %es = arith.addf %e, %s : f32
  llvm.store %es, %q : f32, !llvm.ptr
  return
}
