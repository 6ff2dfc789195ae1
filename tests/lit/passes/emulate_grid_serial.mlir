// xla-emulate-grid: @k_host runs the whole grid on one host thread, so a
// kernel with atomics gets a private copy for it whose atomics are plain
// loads and stores (x86 has no atomic float add: each was a locked cmpxchg
// loop); @k_host_blocks, for block ranges that run side by side, keeps
// them. Thread loops with atomics are not marked parallel (the block
// loop's annotation only keeps LLVM from vectorizing across blocks).
// RUN: xla-gpu-opt %s --xla-emulate-grid | FileCheck %s

// CHECK: #[[NOVEC:.*]] = #llvm.loop_vectorize<disable = true>
// CHECK: #[[BLOCKS_ANNOTATION:.*]] = #llvm.loop_annotation<vectorize = #[[NOVEC]]>

// CHECK-LABEL: func.func @histogram_host_blocks(
// CHECK: scf.for
// CHECK: scf.for
// CHECK: llvm.atomicrmw fadd %{{.*}}, %{{.*}} monotonic : !llvm.ptr, f32
// CHECK: llvm.cmpxchg %{{.*}}, %{{.*}}, %{{.*}} monotonic monotonic : !llvm.ptr, i32
// CHECK: llvm.store
// CHECK-NEXT: }{{$}}
// CHECK-NEXT: } {llvm.loop_annotation = #[[BLOCKS_ANNOTATION]]}
// CHECK-NEXT: return
// CHECK: func.func private @histogram_host_serial_blocks(
// CHECK-SAME: %[[P:[^:]*]]: !llvm.ptr, %[[Q:[^:]*]]: !llvm.ptr,
// CHECK-NOT: llvm.atomicrmw
// CHECK-NOT: llvm.cmpxchg
// CHECK: %[[OLD:.*]] = llvm.load %[[P]] : !llvm.ptr -> f32
// CHECK: %[[SUM:.*]] = llvm.fadd %[[OLD]], %{{.*}} : f32
// CHECK: llvm.store %[[SUM]], %[[P]] : f32, !llvm.ptr
// CHECK: %[[WORD:.*]] = llvm.load %[[Q]] : !llvm.ptr -> i32
// CHECK: %[[MATCH:.*]] = llvm.icmp "eq" %[[WORD]], %{{.*}} : i32
// CHECK: %[[NEW:.*]] = llvm.select %[[MATCH]], %{{.*}}, %[[WORD]] : i1, i32
// CHECK: llvm.store %[[NEW]], %[[Q]] : i32, !llvm.ptr
// CHECK: llvm.insertvalue %[[WORD]], %{{.*}}[0] : !llvm.struct<(i32, i1)>
// CHECK: llvm.insertvalue %[[MATCH]], %{{.*}}[1] : !llvm.struct<(i32, i1)>
// CHECK-NOT: llvm.atomicrmw
// CHECK-NOT: llvm.cmpxchg
// CHECK: return
// CHECK-LABEL: func.func @histogram_host(
// CHECK: call @histogram_host_serial_blocks(
func.func @histogram(%bins: !llvm.ptr, %flags: !llvm.ptr, %in: !llvm.ptr) {
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %t64 = arith.index_castui %tid : index to i64
  %src = llvm.getelementptr inbounds %in[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %v = llvm.load %src : !llvm.ptr -> f32
  %old = llvm.atomicrmw fadd %bins, %v monotonic : !llvm.ptr, f32
  %zero = llvm.mlir.constant(0 : i32) : i32
  %one = llvm.mlir.constant(1 : i32) : i32
  %pair = llvm.cmpxchg %flags, %zero, %one monotonic monotonic : !llvm.ptr, i32
  %won = llvm.extractvalue %pair[1] : !llvm.struct<(i32, i1)>
  %w8 = llvm.zext %won : i1 to i8
  %dst = llvm.getelementptr inbounds %in[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, i8
  llvm.store %w8, %dst : i8, !llvm.ptr
  return
}
