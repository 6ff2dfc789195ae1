// xla-emulate-grid on a loop with barriers in its body (constant bounds:
// every thread reaches them as often): its body is cut into phases like the
// kernel's, and they run inside a block-level loop over its counter. The
// value carried from one iteration to the next is a buffer of one slot per
// thread: read where it is used (the initial value on the first
// iteration), written where the iteration's last ops run, read after the
// loop for its result. A value of one phase used in the next (the
// neighbour's element, loaded before the barrier) is kept per thread; the
// shared-memory address, of the prologue, is recomputed in each phase.
// RUN: xla-gpu-opt %s --xla-emulate-grid --canonicalize --cse | FileCheck %s

// CHECK-LABEL: func.func @steps_host_blocks(
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG: %[[C64:.*]] = arith.constant 64 : index
// CHECK: %[[SHARED:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32> {alignment = 16 : i64}
// CHECK: %[[ACC:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32> :
// CHECK: %[[KEPT:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32> :
// CHECK: scf.for %[[BLOCK:.*]] =
// Before the loop: every thread stores its element.
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C64]]
// CHECK: llvm.store
// CHECK: } {llvm.loop_annotation
// The kernel's loop, around one loop over the threads per phase.
// CHECK-NEXT: scf.for %[[I:.*]] = %[[C0]] to %[[C3]] step
// CHECK-NEXT: scf.for %[[T:.*]] = %[[C0]] to %[[C64]] step
// CHECK: %[[NEIGHBOUR:.*]] = llvm.load
// CHECK: llvm.store %[[NEIGHBOUR]], %{{.*}} {access_groups
// CHECK: } {llvm.loop_annotation
// CHECK-NEXT: scf.for %[[T2:.*]] = %[[C0]] to %[[C64]] step
// CHECK: %[[T64:.*]] = arith.index_castui %[[T2]] : index to i64
// CHECK: %[[VSLOT:.*]] = llvm.getelementptr inbounds %[[KEPT]][%[[T64]]]
// CHECK: %[[V:.*]] = llvm.load %[[VSLOT]]
// CHECK: %[[MINE:.*]] = llvm.getelementptr inbounds %[[SHARED]][%[[T64]]]
// CHECK: %[[SLOT:.*]] = llvm.getelementptr inbounds %[[ACC]][%[[T64]]]
// CHECK: %[[SAVED:.*]] = llvm.load %[[SLOT]]
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[I]], %[[C0]] : index
// CHECK: %[[CUR:.*]] = arith.select %[[FIRST]], %[[ZERO]], %[[SAVED]] : f32
// CHECK: llvm.store %{{.*}}, %[[MINE]]
// CHECK: %[[NEXT:.*]] = arith.addf %[[CUR]], %[[V]] : f32
// CHECK: llvm.store %[[NEXT]], %[[SLOT]]
// CHECK: } {llvm.loop_annotation
// CHECK-NEXT: }
// After the loop: the last iteration's value from the thread's slot.
// CHECK-NEXT: scf.for %[[T3:.*]] = %[[C0]] to %[[C64]] step
// CHECK: llvm.getelementptr inbounds %[[ACC]]
// CHECK: %[[SUM:.*]] = llvm.load
// CHECK: llvm.store %[[SUM]]
// CHECK-NOT: gpu.barrier
// CHECK-LABEL: func.func @steps_host(
llvm.mlir.global private @shared_0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<64 x f32>
func.func @steps(%out: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %g = llvm.mlir.addressof @shared_0 : !llvm.ptr<3>
  %s = llvm.addrspacecast %g : !llvm.ptr<3> to !llvm.ptr
  %t64 = arith.index_castui %tid : index to i64
  %mine = llvm.getelementptr inbounds %s[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  llvm.store %one, %mine : f32, !llvm.ptr
  gpu.barrier
  %sum = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %zero) -> (f32) {
    %other = arith.xori %tid, %c1 : index
    %o64 = arith.index_castui %other : index to i64
    %theirs = llvm.getelementptr inbounds %s[%o64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %v = llvm.load %theirs : !llvm.ptr -> f32
    gpu.barrier
    %i64 = arith.index_castui %i : index to i64
    %fi = arith.uitofp %i64 : i64 to f32
    %w = arith.addf %v, %fi : f32
    llvm.store %w, %mine : f32, !llvm.ptr
    %next = arith.addf %acc, %v : f32
    gpu.barrier
    scf.yield %next : f32
  }
  %dst = llvm.getelementptr inbounds %out[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  llvm.store %sum, %dst : f32, !llvm.ptr
  return
}
