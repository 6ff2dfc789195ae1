// xla-emulate-grid: a top-level scf.for with constant bounds (the same trip
// count in every thread) is lifted around its own phase, so that the
// thread loop is innermost (what LLVM vectorizes): a block-level loop over
// the rows, inside it the loop over the threads, the loop-carried vector
// split per element (one buffer of one slot per thread each, the initial
// value on the first iteration), the results read from the buffers after.
// A loop whose trip count is not a constant stays inside the thread loop.
// RUN: xla-gpu-opt %s --xla-emulate-grid | FileCheck %s

// CHECK-LABEL: func.func @column_sums_host_blocks(
// CHECK-DAG: %[[ACC0:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32>
// CHECK-DAG: %[[ACC1:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32>
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C64:.*]] = arith.constant 64 : index
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK: scf.for %[[BLOCK:.*]] =
// Phase 0: what comes before the lifted loop.
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C64]]
// CHECK: } {llvm.loop_annotation
// The lifted loop around its thread loop.
// CHECK-NEXT: scf.for %[[ROW:.*]] = %[[C0]] to %[[C16]] step
// CHECK-NEXT: scf.for %[[T:.*]] = %[[C0]] to %[[C64]] step
// CHECK: %[[T64:.*]] = arith.index_castui %[[T]] : index to i64
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[ROW]], %[[C0]] : index
// CHECK: %[[S0:.*]] = llvm.getelementptr inbounds %[[ACC0]][%[[T64]]]
// CHECK: %[[SAVED0:.*]] = llvm.load %[[S0]]
// CHECK: %[[CUR0:.*]] = arith.select %[[FIRST]], %{{.*}}, %[[SAVED0]] : f32
// CHECK: %[[S1:.*]] = llvm.getelementptr inbounds %[[ACC1]][%[[T64]]]
// CHECK: %[[SAVED1:.*]] = llvm.load %[[S1]]
// CHECK: %[[CUR1:.*]] = arith.select %[[FIRST]], %{{.*}}, %[[SAVED1]] : f32
// CHECK: vector.from_elements %[[CUR0]], %[[CUR1]] : vector<2xf32>
// CHECK: arith.muli %[[ROW]], %{{.*}} : index
// CHECK: arith.addf
// CHECK: llvm.store %{{.*}}, %{{.*}} {access_groups = [#{{.*}}]} : f32, !llvm.ptr
// CHECK: llvm.store %{{.*}}, %{{.*}} {access_groups = [#{{.*}}]} : f32, !llvm.ptr
// CHECK-NEXT: } {llvm.loop_annotation
// CHECK-NEXT: }
// The phase after: the sums from the buffers; the other loop in place.
// CHECK-NEXT: scf.for %[[T2:.*]] = %[[C0]] to %[[C64]] step
// CHECK: %[[T264:.*]] = arith.index_castui %[[T2]] : index to i64
// CHECK: llvm.getelementptr inbounds %[[ACC0]][%[[T264]]]
// CHECK: llvm.getelementptr inbounds %[[ACC1]][%[[T264]]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(
// CHECK: } {llvm.loop_annotation
func.func @column_sums(%in: !llvm.ptr, %out: !llvm.ptr, %count: !llvm.ptr) {
  %n64 = llvm.load %count : !llvm.ptr -> i64
  %n = arith.index_cast %n64 : i64 to index
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %zero = arith.constant dense<0.0> : vector<2xf32>
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %sum = scf.for %row = %c0 to %c16 step %c1 iter_args(%acc = %zero) -> (vector<2xf32>) {
    %base = arith.muli %row, %c16 : index
    %i = arith.addi %base, %tid : index
    %i64 = arith.index_castui %i : index to i64
    %src = llvm.getelementptr inbounds %in[%i64] : (!llvm.ptr, i64) -> !llvm.ptr, vector<2xf32>
    %v = llvm.load %src : !llvm.ptr -> vector<2xf32>
    %next = arith.addf %acc, %v : vector<2xf32>
    scf.yield %next : vector<2xf32>
  }
  %t64 = arith.index_castui %tid : index to i64
  %dst = llvm.getelementptr inbounds %out[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, vector<2xf32>
  llvm.store %sum, %dst : vector<2xf32>, !llvm.ptr
  %k = scf.for %j = %c0 to %n step %c1 iter_args(%a = %c0) -> (index) {
    %b = arith.addi %a, %tid : index
    scf.yield %b : index
  }
  %k64 = arith.index_castui %k : index to i64
  llvm.store %k64, %out : i64, !llvm.ptr
  return
}
