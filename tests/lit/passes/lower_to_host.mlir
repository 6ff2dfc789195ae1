// xla-lower-to-host: LLVM intrinsics or libm for math, bf16 computed in f32
// with one rounding per op (integer ops, no __truncsfbf2), bf16 values that
// are only moved carried as i16 (x86 has no bf16 registers), C interfaces.
// RUN: xla-gpu-opt %s --xla-lower-to-host | FileCheck %s

// CHECK-DAG: llvm.func @erff(f32) -> f32
// CHECK-LABEL: llvm.func @host(
// CHECK-SAME: %[[P:[^:]*]]: !llvm.ptr, %[[X:[^:]*]]: f32, %[[Y:[^:]*]]: i16)
// CHECK-SAME: attributes {llvm.emit_c_interface}
// bf16 -> f32 is a shift.
// CHECK: %[[Y32:.*]] = llvm.zext %[[Y]] : i16 to i32
// CHECK: %[[YSHL:.*]] = llvm.shl %[[Y32]]
// CHECK: %[[YF:.*]] = llvm.bitcast %[[YSHL]] : i32 to f32
// CHECK: %[[T:.*]] = llvm.intr.tanh(%[[X]]) : (f32) -> f32
// CHECK: llvm.call @erff(%[[T]]) : (f32) -> f32
// CHECK: llvm.intr.sqrt(%[[X]]) : (f32) -> f32
// The bf16 product, in f32, rounded to nearest even before the sum.
// CHECK: %[[PROD:.*]] = llvm.fmul %[[YF]], %[[YF]] : f32
// CHECK: llvm.fcmp "une" %[[PROD]], %[[PROD]] : f32
// NaN becomes the quiet NaN before the rounding.
// CHECK: %[[CANON:.*]] = llvm.select %{{.*}}, %{{.*}}, %[[PROD]] : i1, f32
// CHECK: llvm.bitcast %[[CANON]] : f32 to i32
// CHECK: llvm.lshr
// CHECK: llvm.fadd %{{.*}}, %[[YF]] : f32
// CHECK-NOT: : bf16 to f32
// CHECK-NOT: llvm.fptrunc
// CHECK: llvm.store %{{.*}}, %[[P]] : i16, !llvm.ptr
// CHECK-NOT: bf16
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

// A bf16 select and a bf16 value through a loop's phi: moved as i16.
// CHECK-LABEL: llvm.func @moves(
// CHECK-SAME: %[[C:[^:]*]]: i1, %[[A:[^:]*]]: i16, %[[B:[^:]*]]: i16,
// bf16 1.5 is 0x3fc0.
// CHECK: llvm.mlir.constant(dense<16320> : vector<2xi16>)
// CHECK: %[[S:.*]] = llvm.select %[[C]], %[[A]], %[[B]] : i1, i16
// CHECK: llvm.store %[[S]], %{{.*}} : i16, !llvm.ptr
// CHECK-NOT: bf16
func.func @moves(%c: i1, %a: bf16, %b: bf16, %p: !llvm.ptr) {
  %s = arith.select %c, %a, %b : bf16
  llvm.store %s, %p : bf16, !llvm.ptr
  %z = arith.constant dense<1.5> : vector<2xbf16>
  %q = llvm.getelementptr %p[1] : (!llvm.ptr) -> !llvm.ptr, bf16
  llvm.store %z, %q : vector<2xbf16>, !llvm.ptr
  return
}

// ReLU after a bf16 add: the sum is rounded to nearest even (+ 0x7fff and
// the low bit of the result), the max of two bf16 values is exact, so its
// conversion back only canonicalizes NaN and takes the high half.
// CHECK-LABEL: llvm.func @relu(
// CHECK: %[[SUM:.*]] = llvm.fadd %{{.*}}, %{{.*}} : f32
// CHECK: llvm.bitcast %{{.*}} : f32 to i32
// CHECK: llvm.add %{{.*}}, %{{.*}} : i32
// CHECK: llvm.add %{{.*}}, %{{.*}} : i32
// CHECK: %[[MAX:.*]] = llvm.intr.maximum(%{{.*}}, %{{.*}}) : (f32, f32) -> f32
// CHECK: %[[NAN:.*]] = llvm.fcmp "une" %[[MAX]], %[[MAX]] : f32
// CHECK: %[[CANON:.*]] = llvm.select %[[NAN]], %{{.*}}, %[[MAX]] : i1, f32
// CHECK: %[[BITS:.*]] = llvm.bitcast %[[CANON]] : f32 to i32
// CHECK-NOT: llvm.add
// CHECK: %[[HIGH:.*]] = llvm.lshr %[[BITS]], %{{.*}} : i32
// CHECK-NEXT: %[[H16:.*]] = llvm.trunc %[[HIGH]] : i32 to i16
// CHECK-NEXT: llvm.store %[[H16]], %{{.*}} : i16, !llvm.ptr
func.func @relu(%a: bf16, %b: bf16, %p: !llvm.ptr) {
  %s = arith.addf %a, %b : bf16
  %zero = arith.constant 0.0 : bf16
  %r = arith.maximumf %s, %zero : bf16
  llvm.store %r, %p : bf16, !llvm.ptr
  return
}
