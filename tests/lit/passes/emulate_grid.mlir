// xla-emulate-grid: the launch grid as loops, phases between barriers,
// shared memory as a per-block buffer, values kept across barriers.
// RUN: xla-gpu-opt %s --split-input-file --xla-emulate-grid | FileCheck %s
// RUN: xla-gpu-opt %s --split-input-file --xla-emulate-grid="threads=8 blocks=3" \
// RUN:   | FileCheck %s --check-prefix=OPTS

// A block reverses its slice of %in through shared memory: the loaded value
// is kept per thread across the barrier, the index arithmetic recomputed.
// Each thread loop is marked parallel (threads between barriers do not
// depend on each other): its loads and stores in one access group, the
// loop annotated with it, so that LLVM vectorizes without overlap checks.
// CHECK: #[[G0:.*]] = #llvm.access_group<id = distinct[{{[0-9]+}}]<>>
// CHECK: #[[G1:.*]] = #llvm.access_group<id = distinct[{{[0-9]+}}]<>>
// CHECK: #[[L0:.*]] = #llvm.loop_annotation<parallelAccesses = #[[G0]]>
// CHECK: #[[L1:.*]] = #llvm.loop_annotation<parallelAccesses = #[[G1]]>
// CHECK-NOT: llvm.mlir.global
// CHECK-LABEL: func.func @kernel_host_blocks(
// CHECK-SAME: %[[IN:[^:]*]]: !llvm.ptr, %[[OUT:[^:]*]]: !llvm.ptr, %[[FIRST:[^:]*]]: index, %[[END:[^:]*]]: index)
// CHECK-SAME: attributes {llvm.emit_c_interface}
// CHECK-DAG: %[[SHARED:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32> {alignment = 16 : i64}
// CHECK-DAG: %[[KEPT:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32> : (i64) -> !llvm.ptr
// CHECK: scf.for %[[B:.*]] = %[[FIRST]] to %[[END]] step
// CHECK: scf.for %[[T:.*]] = %[[C0:.*]] to %[[C64:.*]] step
// CHECK: %[[T64:.*]] = arith.index_castui %[[T]] : index to i64
// CHECK: arith.muli %[[B]]
// CHECK: %[[V:.*]] = llvm.load %{{.*}} {access_groups = [#[[G0]]]} : !llvm.ptr -> f32
// CHECK: llvm.getelementptr inbounds %[[SHARED]]
// CHECK: llvm.store %[[V]]
// CHECK: %[[SLOT:.*]] = llvm.getelementptr inbounds %[[KEPT]][%[[T64]]]
// CHECK: llvm.store %[[V]], %[[SLOT]] {access_groups = [#[[G0]]]} : f32, !llvm.ptr
// CHECK: } {llvm.loop_annotation = #[[L0]]}
// CHECK: scf.for %[[T1:.*]] = %[[C0]] to %[[C64]] step
// CHECK: %[[T164:.*]] = arith.index_castui %[[T1]] : index to i64
// CHECK: %[[RELOAD:.*]] = llvm.getelementptr inbounds %[[KEPT]][%[[T164]]]
// CHECK: %[[V1:.*]] = llvm.load %[[RELOAD]] {{.*}}: !llvm.ptr -> f32
// CHECK: arith.muli %[[B]]
// CHECK: arith.subi %{{.*}}, %[[T1]] : index
// CHECK: %[[W:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: arith.addf %[[V1]], %[[W]] : f32
// CHECK: } {llvm.loop_annotation = #[[L1]]}
// CHECK-NOT: gpu.
// The whole grid, the arguments packed: one pointer each.
// CHECK-LABEL: func.func @kernel_host(
// CHECK-SAME: %[[ARGS:[^:]*]]: !llvm.ptr) attributes {llvm.emit_c_interface, xla.blocks = 10 : i64, xla.num_args = 2 : i64, xla.threads_per_block = 64 : i64}
// CHECK: %[[S0:.*]] = llvm.getelementptr inbounds %[[ARGS]][0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[A0:.*]] = llvm.load %[[S0]] {{.*}}: !llvm.ptr -> !llvm.ptr
// CHECK: %[[S1:.*]] = llvm.getelementptr inbounds %[[ARGS]][1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[A1:.*]] = llvm.load %[[S1]] {{.*}}: !llvm.ptr -> !llvm.ptr
// CHECK: %[[Z:.*]] = arith.constant 0 : index
// CHECK: %[[N:.*]] = arith.constant 10 : index
// CHECK: call @kernel_host_blocks(%[[A0]], %[[A1]], %[[Z]], %[[N]])

// OPTS-LABEL: func.func @kernel_host_blocks(
// OPTS: llvm.alloca %{{.*}} x !llvm.array<64 x f32> {alignment = 16 : i64}
// OPTS: llvm.alloca %{{.*}} x !llvm.array<8 x f32> : (i64) -> !llvm.ptr
// OPTS-LABEL: func.func @kernel_host(
// OPTS-SAME: xla.blocks = 3 : i64, xla.num_args = {{[12]}} : i64, xla.threads_per_block = 8 : i64
llvm.mlir.global private @shared_0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<64 x f32>
func.func @kernel(%in: !llvm.ptr, %out: !llvm.ptr) {
  %c63 = arith.constant 63 : index
  %c64 = arith.constant 64 : index
  %shared3 = llvm.mlir.addressof @shared_0 : !llvm.ptr<3>
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %bid = gpu.block_id x {xla.range = [0 : index, 9 : index]}
  %shared = llvm.addrspacecast %shared3 : !llvm.ptr<3> to !llvm.ptr
  %base = arith.muli %bid, %c64 : index
  %i = arith.addi %base, %tid : index
  %i64 = arith.index_castui %i : index to i64
  %src = llvm.getelementptr inbounds %in[%i64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %v = llvm.load %src : !llvm.ptr -> f32
  %t64 = arith.index_castui %tid : index to i64
  %slot = llvm.getelementptr inbounds %shared[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  llvm.store %v, %slot : f32, !llvm.ptr
  gpu.barrier
  %r = arith.subi %c63, %tid : index
  %r64 = arith.index_castui %r : index to i64
  %other = llvm.getelementptr inbounds %shared[%r64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %w = llvm.load %other : !llvm.ptr -> f32
  %sum = arith.addf %v, %w : f32
  %dst = llvm.getelementptr inbounds %out[%i64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  llvm.store %sum, %dst : f32, !llvm.ptr
  return
}

// -----

// Grid queries: y/z ids are 0, the lane is the thread mod 32, block_dim and
// grid_dim are the launch; a kernel that never reads gpu.block_id has one
// block. Only the xla.entry function is a kernel; no barrier, one phase.
// CHECK-LABEL: func.func @helper(%{{.*}}: !llvm.ptr)
// CHECK-NEXT: return
// CHECK-LABEL: func.func @grid_host_blocks(
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C32:.*]] = arith.constant 32 : index
// CHECK: scf.for %[[B:.*]] = %{{.*}} to %{{.*}} step %[[C1]] {
// CHECK-NEXT: scf.for %[[T:.*]] = %[[C0]] to %[[C32]] step %[[C1]] {
// CHECK-DAG: %[[LANE:.*]] = arith.remui %[[T]], %[[C32]] : index
// CHECK-DAG: %[[S0:.*]] = arith.addi %[[T]], %[[C0]] : index
// CHECK: %[[S1:.*]] = arith.addi %[[S0]], %[[LANE]] : index
// CHECK: %[[S2:.*]] = arith.addi %[[S1]], %[[C32]] : index
// CHECK: arith.addi %[[S2]], %[[C1]] : index
// CHECK-NOT: scf.for
// CHECK-LABEL: func.func @grid_host(
// CHECK-SAME: xla.blocks = 1 : i64, xla.num_args = 1 : i64, xla.threads_per_block = 32 : i64
// OPTS-LABEL: func.func @grid_host_blocks(
// OPTS: arith.constant 3 : index
// OPTS-LABEL: func.func @grid_host(
// OPTS-SAME: xla.blocks = 3 : i64, xla.num_args = {{[12]}} : i64, xla.threads_per_block = 8 : i64
func.func @helper(%out: !llvm.ptr) {
  return
}
func.func @grid(%out: !llvm.ptr) attributes {xla.entry} {
  %t = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  %ty = gpu.thread_id y
  %lane = gpu.lane_id
  %bd = gpu.block_dim x
  %gd = gpu.grid_dim x
  %s0 = arith.addi %t, %ty : index
  %s1 = arith.addi %s0, %lane : index
  %s2 = arith.addi %s1, %bd : index
  %s3 = arith.addi %s2, %gd : index
  %i = arith.index_castui %t : index to i64
  %p = llvm.getelementptr inbounds %out[%i] : (!llvm.ptr, i64) -> !llvm.ptr, i64
  %v = arith.index_castui %s3 : index to i64
  llvm.store %v, %p : i64, !llvm.ptr
  return
}

// -----

// Values that must be kept across two barriers: an index, an i1 and a
// vector, all computed from a load. The empty phase between the two
// barriers has no loop; the thread id read inside the scf.if after them is
// that phase's loop counter.
// CHECK-LABEL: func.func @kept_host_blocks(
// CHECK-DAG: %[[KI:.*]] = llvm.alloca %{{.*}} x !llvm.array<8 x i64>
// CHECK-DAG: %[[KB:.*]] = llvm.alloca %{{.*}} x !llvm.array<8 x i1>
// CHECK-DAG: %[[KV:.*]] = llvm.alloca %{{.*}} x !llvm.array<8 x vector<2xi32>>
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[RAW:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i32
// CHECK: } {llvm.loop_annotation = #{{.*}}}
// CHECK-NEXT: scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step
// CHECK-DAG: llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK-DAG: llvm.load %{{.*}} : !llvm.ptr -> i1
// CHECK-DAG: llvm.load %{{.*}} : !llvm.ptr -> vector<2xi32>
// CHECK: scf.if
// CHECK-NEXT: scf.yield %[[T]] : index
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield
// CHECK-NEXT: }
// CHECK: llvm.store
// CHECK-NEXT: } {llvm.loop_annotation = #{{.*}}}
// CHECK-NEXT: }
// CHECK-NEXT: return
func.func @kept(%in: !llvm.ptr, %out: !llvm.ptr) {
  %zero = arith.constant 0 : i32
  %tid = gpu.thread_id x {xla.range = [0 : index, 7 : index]}
  %t64 = arith.index_castui %tid : index to i64
  %src = llvm.getelementptr inbounds %in[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, i32
  %raw = llvm.load %src : !llvm.ptr -> i32
  %k = arith.index_cast %raw : i32 to index
  %positive = arith.cmpi sgt, %raw, %zero : i32
  %vec = llvm.load %src : !llvm.ptr -> vector<2xi32>
  gpu.barrier
  gpu.barrier
  %sel = scf.if %positive -> index {
    %t = gpu.thread_id x {xla.range = [0 : index, 7 : index]}
    scf.yield %t : index
  } else {
    scf.yield %k : index
  }
  %e = vector.extract %vec[0] : i32 from vector<2xi32>
  %s64 = arith.index_castui %sel : index to i64
  %dst = llvm.getelementptr inbounds %out[%s64] : (!llvm.ptr, i64) -> !llvm.ptr, i32
  llvm.store %e, %dst : i32, !llvm.ptr
  return
}
