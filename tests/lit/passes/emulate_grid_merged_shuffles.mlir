// xla-emulate-grid: shuffles that follow each other with nothing between
// and none of another's results run between the same two phases (no phase
// of their own that only copies the next one's operands), symmetric ones of
// one max_distance in one loop nest over the groups and distances; a phase
// whose only writes are under `lane == 0` (or `thread == 0`) runs one lane.
// RUN: xla-gpu-opt %s --split-input-file --xla-emulate-grid | FileCheck %s

// Two rows of a multi-output reduction: phase 0 stores both operands, one
// loop over the groups takes both combiners at every distance, and lane 0
// of each warp alone stores the results.
// CHECK-LABEL: func.func @two_rows_host_blocks(
// CHECK-DAG: %[[A:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32>
// CHECK-DAG: %[[B:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32>
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG: %[[C64:.*]] = arith.constant 64 : index
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C64]] step %[[C1]] {
// CHECK: llvm.store %{{.*}}, %{{.*}} {{.*}}: f32, !llvm.ptr
// CHECK: llvm.store %{{.*}}, %{{.*}} {{.*}}: f32, !llvm.ptr
// CHECK-NEXT: } {llvm.loop_annotation
// CHECK-NEXT: scf.for %{{.*}} = %[[C0]] to %[[C64]] step %[[C32]] {
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C16]] step %[[C1]] {
// CHECK: llvm.getelementptr inbounds %[[A]]
// CHECK: func.call @add(
// CHECK-NOT: llvm.loop_annotation
// CHECK: llvm.getelementptr inbounds %[[B]]
// CHECK-NOT: llvm.loop_annotation
// CHECK: func.call @max(
// CHECK: } {llvm.loop_annotation
// CHECK-COUNT-4: func.call @max(
// CHECK-NOT: to %[[C64]] step %[[C1]]
// CHECK: scf.for %[[W:.*]] = %[[C0]] to %[[C2]] step %[[C1]] {
// CHECK-NEXT: scf.for %{{.*}} = %[[C0]] to %[[C1]] step %[[C1]] {
// CHECK: scf.if
// CHECK-NOT: func.call
// CHECK-LABEL: func.func @two_rows_host(
func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func private @max(%a: f32, %b: f32) -> f32 {
  %m = arith.maximumf %a, %b : f32
  return %m : f32
}
func.func @two_rows(%x: !llvm.ptr, %y: !llvm.ptr, %out: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %t64 = arith.index_castui %tid : index to i64
  %px = llvm.getelementptr inbounds %x[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %vx = llvm.load %px : !llvm.ptr -> f32
  %py = llvm.getelementptr inbounds %y[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %vy = llvm.load %py : !llvm.ptr -> f32
  %s = xla_gpu.shuffle_reduce(%vx) to 16 combiner=@add : f32
  %m = xla_gpu.shuffle_reduce(%vy) to 16 combiner=@max : f32
  %lane = arith.remui %tid, %c32 : index
  %warp = arith.divui %tid, %c32 : index
  %first = arith.cmpi eq, %lane, %c0 : index
  scf.if %first {
    %w64 = arith.index_castui %warp : index to i64
    %ps = llvm.getelementptr inbounds %out[%w64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %s, %ps : f32, !llvm.ptr
    %pm = llvm.getelementptr inbounds %ps[2] : (!llvm.ptr) -> !llvm.ptr, f32
    llvm.store %m, %pm : f32, !llvm.ptr
  }
  return
}

// -----

// A shuffle of the one before's result waits for it: a phase between them
// stores the first one's result as the second one's operand. A phase that
// writes outside the `thread == 0` branch keeps all its threads.
// CHECK-LABEL: func.func @chained_host_blocks(
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C32]] step %[[C1]] {
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C32]] step %[[C32]] {
// CHECK-COUNT-5: func.call @add(
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C32]] step %[[C1]] {
// CHECK: llvm.store
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C32]] step %[[C32]] {
// CHECK-COUNT-5: func.call @add(
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C32]] step %[[C1]] {
// CHECK: scf.if
// CHECK: llvm.store
// CHECK: }
// CHECK: llvm.store
// CHECK-LABEL: func.func @chained_host(
func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @chained(%x: !llvm.ptr, %out: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  %t64 = arith.index_castui %tid : index to i64
  %px = llvm.getelementptr inbounds %x[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %v = llvm.load %px : !llvm.ptr -> f32
  %s = xla_gpu.shuffle_reduce(%v) to 16 combiner=@add : f32
  %t = xla_gpu.shuffle_reduce(%s) to 16 combiner=@add : f32
  %first = arith.cmpi eq, %tid, %c0 : index
  scf.if %first {
    llvm.store %t, %out : f32, !llvm.ptr
  }
  %pt = llvm.getelementptr inbounds %x[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  llvm.store %s, %pt : f32, !llvm.ptr
  return
}

// -----

// Thread 0 of a one-warp block stores the sum: its phase runs thread 0.
// CHECK-LABEL: func.func @one_warp_host_blocks(
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C32]] step %[[C1]] {
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C32]] step %[[C32]] {
// CHECK-COUNT-5: func.call @add(
// CHECK: scf.for %{{.*}} = %[[C0]] to %[[C1]] step %[[C1]] {
// CHECK: scf.if
// CHECK-LABEL: func.func @one_warp_host(
func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @one_warp(%x: !llvm.ptr, %out: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  %t64 = arith.index_castui %tid : index to i64
  %px = llvm.getelementptr inbounds %x[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %v = llvm.load %px : !llvm.ptr -> f32
  %s = xla_gpu.shuffle_reduce(%v) to 16 combiner=@add : f32
  %first = arith.cmpi eq, %tid, %c0 : index
  scf.if %first {
    llvm.store %s, %out : f32, !llvm.ptr
  }
  return
}
