// xla-lower-to-host computes the i32 index arithmetic of the shared
// pipeline (xla-simplify-affine) in i64 for GEP indices and casts back to
// index: addresses as affine functions of the index values, no sign
// extension of i32 sums for LLVM to reason about. Arithmetic that may
// wrap, and zero extensions of values that may be negative, stay in i32.
// RUN: xla-gpu-opt %s --xla-lower-to-host | FileCheck %s

// CHECK-LABEL: llvm.func @address(
// CHECK-SAME: %[[P:[^:]*]]: !llvm.ptr, %[[I:[^:]*]]: i64, %[[J:[^:]*]]: i64)
// CHECK-DAG: %[[C4:.*]] = llvm.mlir.constant(4 : i64) : i64
// CHECK-DAG: %[[C8:.*]] = llvm.mlir.constant(8 : i64) : i64
// CHECK: %[[MUL:.*]] = llvm.mul %[[I]], %[[C4]] overflow<nsw, nuw> : i64
// CHECK: %[[ADD:.*]] = llvm.add %[[MUL]], %[[J]] overflow<nsw, nuw> : i64
// CHECK: %[[DIV:.*]] = llvm.udiv %[[ADD]], %[[C8]] : i64
// CHECK: %[[GEP:.*]] = llvm.getelementptr inbounds %[[P]][%[[DIV]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK: llvm.load %[[GEP]]
// CHECK: %[[REM:.*]] = llvm.urem %[[ADD]], %[[C8]] : i64
// CHECK: llvm.getelementptr inbounds %[[P]][%[[REM]]] : (!llvm.ptr, i64)
// A remainder by 96 stays i32 (x86 divides i64 vectors lane by lane), extended.
// CHECK: %[[R96:.*]] = llvm.urem %{{.*}}, %{{.*}} : i32
// CHECK: %[[R96W:.*]] = llvm.zext %[[R96]] : i32 to i64
// CHECK: %[[SUM:.*]] = llvm.add %[[R96W]], %[[REM]] overflow<nsw, nuw> : i64
// CHECK: llvm.getelementptr inbounds %[[P]][%[[SUM]]] : (!llvm.ptr, i64)
// CHECK: llvm.return
func.func @address(%p: !llvm.ptr, %i: index, %j: index) -> f32 {
  %c4 = arith.constant 4 : i32
  %c8 = arith.constant 8 : i32
  %i32 = arith.index_castui %i : index to i32
  %j32 = arith.index_castui %j : index to i32
  %mul = arith.muli %i32, %c4 overflow<nsw, nuw> : i32
  %add = arith.addi %mul, %j32 overflow<nsw, nuw> : i32
  %div = arith.divui %add, %c8 : i32
  %gep = llvm.getelementptr inbounds %p[%div] : (!llvm.ptr, i32) -> !llvm.ptr, f32
  %x = llvm.load %gep : !llvm.ptr -> f32
  %rem = arith.remui %add, %c8 : i32
  %remi = arith.index_castui %rem : i32 to index
  %rem64 = arith.index_castui %remi : index to i64
  %gep2 = llvm.getelementptr inbounds %p[%rem64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %y = llvm.load %gep2 : !llvm.ptr -> f32
  %c96 = arith.constant 96 : i32
  %r96 = arith.remui %add, %c96 : i32
  %sum = arith.addi %r96, %rem overflow<nsw, nuw> : i32
  %gep3 = llvm.getelementptr inbounds %p[%sum] : (!llvm.ptr, i32) -> !llvm.ptr, f32
  %z = llvm.load %gep3 : !llvm.ptr -> f32
  %s0 = arith.addf %x, %y : f32
  %s = arith.addf %s0, %z : f32
  return %s : f32
}

// A difference that may be negative is sign-extended in i64 (sext of the
// i32 value), but not zero-extended; a sum that may wrap stays i32.
// CHECK-LABEL: llvm.func @signed(
// CHECK-SAME: %[[P:[^:]*]]: !llvm.ptr, %[[I:[^:]*]]: i64, %[[J:[^:]*]]: i64)
// CHECK: %[[SUB32:.*]] = llvm.sub %{{.*}}, %{{.*}} overflow<nsw> : i32
// CHECK: %[[SUB:.*]] = llvm.sub %[[I]], %[[J]] overflow<nsw> : i64
// CHECK: llvm.getelementptr %[[P]][%[[SUB]]] : (!llvm.ptr, i64)
// CHECK: %[[ZEXT:.*]] = llvm.zext %[[SUB32]] : i32 to i64
// CHECK: llvm.getelementptr %[[P]][%[[ZEXT]]] : (!llvm.ptr, i64)
// CHECK: %[[WRAP:.*]] = llvm.add %{{.*}}, %{{.*}} : i32
// CHECK: llvm.getelementptr %[[P]][%[[WRAP]]] : (!llvm.ptr, i32)
func.func @signed(%p: !llvm.ptr, %i: index, %j: index) {
  %i32 = arith.index_cast %i : index to i32
  %j32 = arith.index_cast %j : index to i32
  %sub = arith.subi %i32, %j32 overflow<nsw> : i32
  %g1 = llvm.getelementptr %p[%sub] : (!llvm.ptr, i32) -> !llvm.ptr, f32
  %z = arith.index_castui %sub : i32 to index
  %z64 = arith.index_castui %z : index to i64
  %g2 = llvm.getelementptr %p[%z64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %wrap = arith.addi %i32, %j32 : i32
  %g3 = llvm.getelementptr %p[%wrap] : (!llvm.ptr, i32) -> !llvm.ptr, f32
  %f = arith.constant 0.0 : f32
  llvm.store %f, %g1 : f32, !llvm.ptr
  llvm.store %f, %g2 : f32, !llvm.ptr
  llvm.store %f, %g3 : f32, !llvm.ptr
  return
}
