// xla-simplify-affine lowers apply_indexing to arith: i32 where every value
// fits, unsigned division of non-negative values, floor semantics otherwise.
// RUN: xla-gpu-opt %s --split-input-file --xla-simplify-affine --cse | FileCheck %s

// CHECK-LABEL: func.func @narrow(
// CHECK: %[[B:.*]] = arith.index_castui %block_id_x : index to i32
// CHECK: %[[BM:.*]] = arith.muli %[[B]], %c512_i32 overflow<nsw, nuw> : i32
// CHECK: %[[T:.*]] = arith.index_castui %thread_id_x : index to i32
// CHECK: %[[TM:.*]] = arith.muli %[[T]], %c4_i32 overflow<nsw, nuw> : i32
// CHECK: %[[S:.*]] = arith.addi %[[TM]], %[[BM]] overflow<nsw, nuw> : i32
// CHECK: %[[R:.*]] = arith.index_castui %[[S]] : i32 to index
// CHECK: return %[[R]]
func.func @narrow() -> index {
  %thread_id_x = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %block_id_x = gpu.block_id x {xla.range = [0 : index, 24575 : index]}
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(th_x, bl_x) -> (th_x * 4 + bl_x * 512), domain: th_x in [0, 127], bl_x in [0, 24575]">(%thread_id_x, %block_id_x)
  return %0 : index
}

// -----

// Non-negative operands: divui and remui; the range of the operand also
// simplifies the map (d0 mod 8 with d0 in [0, 7] is d0).
// CHECK-LABEL: func.func @unsigned(
// CHECK: arith.divui %{{.*}}, %c8_i32 : i32
// CHECK: arith.remui %{{.*}}, %c8_i32 : i32
// CHECK-NOT: arith.remui
// CHECK: return
func.func @unsigned(%a: index, %b: index) -> (index, index, index) {
  %0:2 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0) -> (d0 floordiv 8, d0 mod 8), domain: d0 in [0, 1000]">(%a)
  %tid = gpu.thread_id x {xla.range = [0 : index, 7 : index]}
  %1 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0) -> (d0 mod 8), domain: d0 in [0, 1000]">(%tid)
  return %0#0, %0#1, %1 : index, index, index
}

// -----

// Possibly negative: floor division and floor modulo; wide ranges stay in
// index.
// CHECK-LABEL: func.func @signed(
// CHECK: arith.floordivsi %{{.*}}, %c4 : index
// CHECK: %[[REM:.*]] = arith.remsi %{{.*}}, %c4 : index
// CHECK: %[[NEG:.*]] = arith.cmpi slt, %[[REM]], %c0 : index
// CHECK: %[[UP:.*]] = arith.addi %[[REM]], %c4 : index
// CHECK: arith.select %[[NEG]], %[[UP]], %[[REM]] : index
func.func @signed(%a: index) -> (index, index) {
  %0:2 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0) -> (d0 floordiv 4, d0 mod 4), domain: d0 in [-10000000000, 10000000000]">(%a)
  return %0#0, %0#1 : index, index
}
