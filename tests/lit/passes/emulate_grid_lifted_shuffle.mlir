// xla-emulate-grid: a lifted loop whose result goes straight into a warp
// shuffle (a row reduction configured for the host: a thread accumulates
// its slice, the shuffle combines the warp). The shuffle's operand is read
// from the loop's carried buffer in the phase after the loop, and the loop
// goes once dissolved, although the shuffle still named its result (it
// aborted: "operation destroyed but still has uses").
// RUN: xla-gpu-opt %s --xla-emulate-grid | FileCheck %s

// CHECK-LABEL: func.func @row_sums_host_blocks(
// CHECK-DAG: %[[ACC:.*]] = llvm.alloca %{{.*}} x !llvm.array<32 x f32>
// CHECK-DAG: %[[SHUF:.*]] = llvm.alloca %{{.*}} x !llvm.array<32 x f32>
// CHECK: scf.for %[[BLOCK:.*]] =
// Phase 0: what comes before the loop.
// CHECK: scf.for
// CHECK: } {llvm.loop_annotation
// The lifted loop: per step, the thread loop accumulates into ACC.
// CHECK-NEXT: scf.for %[[STEP:.*]] =
// CHECK-NEXT: scf.for %[[T:.*]] =
// CHECK: llvm.getelementptr inbounds %[[ACC]]
// CHECK: arith.addf
// CHECK: llvm.store
// CHECK: }
// CHECK: }
// The phase after it stores each thread's accumulator for the shuffle.
// CHECK: scf.for
// CHECK: %[[SUM:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: llvm.getelementptr inbounds %[[SHUF]]
// CHECK: llvm.store %[[SUM]]
// CHECK: arith.constant 16 : i64
// CHECK: func.call @add
// CHECK: arith.constant 8 : i64
// CHECK-NOT: scf.for %{{.*}} iter_args
// CHECK-NOT: xla_gpu.shuffle_reduce
// CHECK-LABEL: func.func @row_sums_host(
func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @row_sums(%in: !llvm.ptr, %out: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  %tid = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  %bid = gpu.block_id x {xla.range = [0 : index, 3 : index]}
  %row = arith.muli %bid, %c8 : index
  %sum = scf.for %s = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> (f32) {
    %col = arith.muli %s, %c32 : index
    %at0 = arith.addi %col, %tid : index
    %at1 = arith.addi %at0, %row : index
    %at = arith.index_castui %at1 : index to i64
    %p = llvm.getelementptr inbounds %in[%at] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %v = llvm.load %p : !llvm.ptr -> f32
    %next = arith.addf %acc, %v : f32
    scf.yield %next : f32
  }
  %r = xla_gpu.shuffle_reduce(%sum) to 16 combiner=@add : f32
  %b64 = arith.index_castui %bid : index to i64
  %dst = llvm.getelementptr inbounds %out[%b64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  llvm.store %r, %dst : f32, !llvm.ptr
  return
}
