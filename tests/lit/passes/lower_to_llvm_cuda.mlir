// xla-lower-to-llvm, what the cuda target needs beyond the conversion:
// kernels get .maxntid from the threads their ids promise, id reads get
// upper bounds (range metadata), math.sqrt is LLVM's IEEE sqrt (sqrt.rn,
// not libdevice's sqrt.approx), and every atomic is at gpu (device) scope.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-to-llvm | FileCheck %s

// CHECK-NOT: llvm.func @__nv_sqrt
// CHECK-LABEL: llvm.func @kernel(
// CHECK-SAME: nvvm.kernel
// CHECK-SAME: nvvm.maxntid = array<i32: 256, 1, 1>
// CHECK: nvvm.read.ptx.sreg.tid.x range <i32, 0, 256> : i32
// CHECK: nvvm.read.ptx.sreg.ctaid.x range <i32, 0, 4096> : i32
// CHECK: llvm.intr.sqrt(%{{.*}}) : (f32) -> f32
// CHECK: llvm.intr.sqrt(%{{.*}}) : (f64) -> f64
// CHECK-NOT: __nv_sqrt
// CHECK: llvm.atomicrmw fadd %{{.*}}, %{{.*}} syncscope("device") monotonic : !llvm.ptr, f32
// CHECK: llvm.load %{{.*}} atomic syncscope("device") monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK: llvm.cmpxchg %{{.*}}, %{{.*}}, %{{.*}} syncscope("device") monotonic monotonic : !llvm.ptr, i32
// CHECK-NOT: syncscope("device") syncscope
func.func @kernel(%p: !llvm.ptr, %d: !llvm.ptr) attributes {xla.entry} {
  %t = gpu.thread_id x {xla.range = [0 : index, 255 : index]}
  %b = gpu.block_id x {xla.range = [0 : index, 4095 : index]}
  %s = arith.addi %t, %b : index
  %i = arith.index_castui %s : index to i64
  %q = llvm.getelementptr inbounds %p[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %x = llvm.load %q : !llvm.ptr -> f32
  %y = math.sqrt %x : f32
  %e = arith.extf %y : f32 to f64
  %z = math.sqrt %e : f64
  %w = math.tanh %y : f32
  %dq = llvm.getelementptr inbounds %d[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f64
  llvm.store %z, %dq : f64, !llvm.ptr
  %old = llvm.atomicrmw fadd %q, %w monotonic : !llvm.ptr, f32
  %word = llvm.load %q atomic monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
  %one = arith.constant 1 : i32
  %pair = llvm.cmpxchg %q, %word, %one monotonic monotonic : !llvm.ptr, i32
  return
}

// -----

// A kernel that never reads its thread id gets no .maxntid.
// CHECK-LABEL: llvm.func @no_threads(
// CHECK-NOT: nvvm.maxntid
// CHECK: llvm.return
func.func @no_threads(%p: !llvm.ptr) attributes {xla.entry} {
  return
}

