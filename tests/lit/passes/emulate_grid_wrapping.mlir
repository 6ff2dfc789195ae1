// xla-emulate-grid: power-of-two remainders that wrap inside a thread loop
// (XLA's rotated shared-memory tiles: slot = (column + row) mod 32). LLVM's
// loop vectorizer takes the addresses built from such a remainder for
// consecutive ones when a value of an enclosing loop is added to them, so
// each is rewritten as `x < 2^k ? x : x - 2^k` where x < 2^(k+1), and a
// loop with one that cannot be bounded so is kept scalar.
// RUN: xla-gpu-opt %s --split-input-file --xla-emulate-grid | FileCheck %s

// A 32x32 transpose through a rotated tile, 4 warps of 32 lanes.
// The lifted loop over i runs around each phase's thread loops; in both,
// the remainder (lane + row, at most 62) becomes a select, and the loops
// stay vectorizable (no `vectorize` in their annotations: only the block
// loop's has it).
// CHECK-NOT: vectorize = #{{.*}}, parallelAccesses
// CHECK-LABEL: func.func @rotated_transpose_host_blocks(
// CHECK-NOT: arith.remui
// CHECK: %[[BELOW:.*]] = arith.cmpi ult, %[[SUM:.*]], %[[C32:.*]] : i32
// CHECK-NEXT: %[[WRAPPED:.*]] = arith.subi %[[SUM]], %[[C32]] : i32
// CHECK-NEXT: %[[SLOT:.*]] = arith.select %[[BELOW]], %[[SUM]], %[[WRAPPED]] : i32
// CHECK-NEXT: %[[DST:.*]] = arith.addi %{{.*}}, %[[SLOT]] overflow<nsw, nuw> : i32
// CHECK-NEXT: %[[Q:.*]] = llvm.getelementptr inbounds %{{.*}}[%[[DST]]]
// CHECK-NEXT: llvm.store %{{.*}}, %[[Q]] {access_groups = [#{{.*}}]}
// CHECK-NEXT: } {llvm.loop_annotation = #{{.*}}}
// CHECK: arith.cmpi ult
// CHECK-NEXT: arith.subi
// CHECK-NEXT: arith.select
// CHECK-NOT: arith.remui
// CHECK-LABEL: func.func @rotated_transpose_host(
llvm.mlir.global private @tile() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<1024 x i32>
func.func @rotated_transpose(%in: !llvm.ptr, %out: !llvm.ptr) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c4_i32 = arith.constant 4 : i32
  %c32_i32 = arith.constant 32 : i32
  %tile3 = llvm.mlir.addressof @tile : !llvm.ptr<3>
  %tile = llvm.addrspacecast %tile3 : !llvm.ptr<3> to !llvm.ptr
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %t = arith.index_castui %tid : index to i32
  %warp = arith.divui %t, %c32_i32 : i32
  %lane = arith.remui %t, %c32_i32 : i32
  scf.for %i = %c0 to %c8 step %c1 {
    %i32 = arith.index_castui %i : index to i32
    %r4 = arith.muli %i32, %c4_i32 overflow<nsw, nuw> : i32
    %row = arith.addi %r4, %warp overflow<nsw, nuw> : i32
    %rowbase = arith.muli %row, %c32_i32 overflow<nsw, nuw> : i32
    %src = arith.addi %rowbase, %lane overflow<nsw, nuw> : i32
    %p = llvm.getelementptr inbounds %in[%src] : (!llvm.ptr, i32) -> !llvm.ptr, i32
    %v = llvm.load %p : !llvm.ptr -> i32
    %sum = arith.addi %lane, %row overflow<nsw, nuw> : i32
    %slot = arith.remui %sum, %c32_i32 : i32
    %dst = arith.addi %rowbase, %slot overflow<nsw, nuw> : i32
    %q = llvm.getelementptr inbounds %tile[%dst] : (!llvm.ptr, i32) -> !llvm.ptr, i32
    llvm.store %v, %q : i32, !llvm.ptr
  }
  gpu.barrier
  scf.for %i = %c0 to %c8 step %c1 {
    %i32 = arith.index_castui %i : index to i32
    %r4 = arith.muli %i32, %c4_i32 overflow<nsw, nuw> : i32
    %row = arith.addi %r4, %warp overflow<nsw, nuw> : i32
    %colbase = arith.muli %lane, %c32_i32 overflow<nsw, nuw> : i32
    %sum = arith.addi %lane, %row overflow<nsw, nuw> : i32
    %slot = arith.remui %sum, %c32_i32 : i32
    %src = arith.addi %colbase, %slot overflow<nsw, nuw> : i32
    %p = llvm.getelementptr inbounds %tile[%src] : (!llvm.ptr, i32) -> !llvm.ptr, i32
    %v = llvm.load %p : !llvm.ptr -> i32
    %rowbase = arith.muli %row, %c32_i32 overflow<nsw, nuw> : i32
    %dst = arith.addi %rowbase, %lane overflow<nsw, nuw> : i32
    %q = llvm.getelementptr inbounds %out[%dst] : (!llvm.ptr, i32) -> !llvm.ptr, i32
    llvm.store %v, %q : i32, !llvm.ptr
  }
  return
}

// -----

// (3 lane + row) mod 32 reaches 124 before the remainder: not guarded, the
// write phase's loop is kept scalar; the read phase has no remainder.
// CHECK-DAG: #[[NOVEC:.*]] = #llvm.loop_vectorize<disable = true>
// CHECK-DAG: #[[SCALAR:.*]] = #llvm.loop_annotation<vectorize = #[[NOVEC]], parallelAccesses = #{{.*}}>
// CHECK-LABEL: func.func @scattered_host_blocks(
// CHECK: arith.remui %{{.*}}, %{{.*}} : i32
// CHECK: } {llvm.loop_annotation = #[[SCALAR]]}
// CHECK-NOT: vectorize
// CHECK-LABEL: func.func @scattered_host(
llvm.mlir.global private @tile() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<32 x i32>
func.func @scattered(%in: !llvm.ptr, %out: !llvm.ptr) {
  %c3_i32 = arith.constant 3 : i32
  %c32_i32 = arith.constant 32 : i32
  %tile3 = llvm.mlir.addressof @tile : !llvm.ptr<3>
  %tile = llvm.addrspacecast %tile3 : !llvm.ptr<3> to !llvm.ptr
  %tid = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  %lane = arith.index_castui %tid : index to i32
  %p = llvm.getelementptr inbounds %in[%lane] : (!llvm.ptr, i32) -> !llvm.ptr, i32
  %v = llvm.load %p : !llvm.ptr -> i32
  %l3 = arith.muli %lane, %c3_i32 overflow<nsw, nuw> : i32
  %slot = arith.remui %l3, %c32_i32 : i32
  %q = llvm.getelementptr inbounds %tile[%slot] : (!llvm.ptr, i32) -> !llvm.ptr, i32
  llvm.store %v, %q : i32, !llvm.ptr
  gpu.barrier
  %r = llvm.getelementptr inbounds %tile[%lane] : (!llvm.ptr, i32) -> !llvm.ptr, i32
  %w = llvm.load %r : !llvm.ptr -> i32
  %o = llvm.getelementptr inbounds %out[%lane] : (!llvm.ptr, i32) -> !llvm.ptr, i32
  llvm.store %w, %o : i32, !llvm.ptr
  return
}
