// xla-simplify-arith folds comparisons and min/max decided by ranges.
// RUN: xla-gpu-opt %s --split-input-file --xla-simplify-arith | FileCheck %s

// CHECK-LABEL: func.func @thread_bounds(
// CHECK-DAG: %[[T:.*]] = arith.constant true
// CHECK-DAG: %[[F:.*]] = arith.constant false
// CHECK: %[[U:.*]] = arith.cmpi slt, %{{.*}}, %c64
// CHECK: return %[[T]], %[[T]], %[[F]], %[[U]]
func.func @thread_bounds() -> (i1, i1, i1, i1) {
  %c0 = arith.constant 0 : index
  %c127 = arith.constant 127 : index
  %c64 = arith.constant 64 : index
  %c200 = arith.constant 200 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %0 = arith.cmpi sge, %tid, %c0 : index
  %1 = arith.cmpi sle, %tid, %c127 : index
  %2 = arith.cmpi sgt, %tid, %c200 : index
  %3 = arith.cmpi slt, %tid, %c64 : index
  return %0, %1, %2, %3 : i1, i1, i1, i1
}

// -----

// Induction variables and apply_indexing results have ranges too.
// CHECK-LABEL: func.func @loops_and_maps(
// CHECK: %[[T:.*]] = arith.constant true
// CHECK: scf.for
// CHECK: func.call @use(%[[T]], %[[T]])
func.func private @use(i1, i1)
func.func @loops_and_maps(%a: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c512 = arith.constant 512 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  scf.for %i = %c0 to %c4 step %c1 {
    %x = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 127], s0 in [0, 3]">(%tid)[%i]
    %lt = arith.cmpi slt, %x, %c512 : index
    %ge = arith.cmpi uge, %i, %c0 : index
    func.call @use(%lt, %ge) : (i1, i1) -> ()
  }
  return
}

// -----

// CHECK-LABEL: func.func @min_max(
// CHECK-NEXT: %[[C:.*]] = arith.constant 1000
// CHECK-NEXT: %[[T:.*]] = gpu.thread_id
// CHECK-NEXT: return %[[T]], %[[C]]
func.func @min_max() -> (index, index) {
  %c1000 = arith.constant 1000 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  %0 = arith.minsi %tid, %c1000 : index
  %1 = arith.maxsi %c1000, %tid : index
  return %0, %1 : index, index
}

// -----

// Unknown ranges stay as they are.
// CHECK-LABEL: func.func @unknown(
// CHECK: arith.cmpi slt, %arg0, %c4
func.func @unknown(%a: index) -> i1 {
  %c4 = arith.constant 4 : index
  %0 = arith.cmpi slt, %a, %c4 : index
  return %0 : i1
}
