// Folds and canonicalizations of apply_indexing and loop.
// RUN: xla-gpu-opt %s --canonicalize --split-input-file | FileCheck %s

// Constant operands fold to constants.
// CHECK-LABEL: func.func @fold_constants(
// CHECK-NEXT: %[[C:.*]] = arith.constant 13 : index
// CHECK-NEXT: return %[[C]]
func.func @fold_constants() -> index {
  %c3 = arith.constant 3 : index
  %c1 = arith.constant 1 : index
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 31], s0 in [0, 3]">(%c3)[%c1]
  return %0 : index
}

// -----

// Some constant operands: substituted into the map and dropped.
// CHECK: #[[MAP:.*]] = #xla_gpu.indexing_map<"(d0) -> (d0 * 4 + 2), domain: d0 in [0, 31]">
// CHECK-LABEL: func.func @partial_constants(
// CHECK-NEXT: xla_gpu.apply_indexing #[[MAP]](%arg0)
func.func @partial_constants(%a: index) -> index {
  %c2 = arith.constant 2 : index
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 31], s0 in [0, 3]">(%a)[%c2]
  return %0 : index
}

// -----

// A value passed twice becomes one variable; ranges intersect.
// CHECK: #[[MAP:.*]] = #xla_gpu.indexing_map<"(a) -> (a * 3), domain: a in [2, 10]">
// CHECK-LABEL: func.func @duplicates(
// CHECK-NEXT: xla_gpu.apply_indexing #[[MAP]](%arg0)
func.func @duplicates(%a: index) -> index {
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(a, b) -> (a + b * 2), domain: a in [0, 10], b in [2, 20]">(%a, %a)
  return %0 : index
}

// -----

// Unused operands are dropped; names that stay keep their names.
// CHECK: #[[MAP:.*]] = #xla_gpu.indexing_map<"(b)[k] -> (b + k), domain: b in [0, 7], k in [0, 3]">
// CHECK-LABEL: func.func @unused(
// CHECK-NEXT: xla_gpu.apply_indexing #[[MAP]](%arg1)[%arg3]
func.func @unused(%a: index, %b: index, %c: index, %d: index) -> index {
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(a, b)[j, k] -> (b + k), domain: a in [0, 7], b in [0, 7], j in [0, 3], k in [0, 3]">(%a, %b)[%c, %d]
  return %0 : index
}

// -----

// An identity map folds away.
// CHECK-LABEL: func.func @identity(
// CHECK-NEXT: return %arg0, %arg1
func.func @identity(%a: index, %b: index) -> (index, index) {
  %0:2 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0, d1) -> (d0, d1), domain: d0 in [0, 7], d1 in [0, 9]">(%a, %b)
  return %0#0, %0#1 : index, index
}

// -----

// Constraints that reference a variable keep it alive.
// CHECK: #[[MAP:.*]] = #xla_gpu.indexing_map<"(d0, d1) -> (d0), domain: d0 in [0, 7], d1 in [0, 7], d0 + d1 in [0, 9]">
// CHECK-LABEL: func.func @kept_by_constraint(
// CHECK-NEXT: xla_gpu.apply_indexing #[[MAP]](%arg0, %arg1)
func.func @kept_by_constraint(%a: index, %b: index) -> index {
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0, d1) -> (d0), domain: d0 in [0, 7], d1 in [0, 7], d0 + d1 in [0, 9]">(%a, %b)
  return %0 : index
}

// -----

// A loop whose domain is empty (a range, or a constraint that cannot hold)
// is replaced by its inits.
// CHECK-LABEL: func.func @empty_loops(
// CHECK-NOT: xla_gpu.loop
// CHECK: return %arg1, %arg1
func.func @empty_loops(%a: index, %t: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %c = arith.constant 1.0 : f32
  %r0 = xla_gpu.loop (%a)[%i] -> (%x) in #xla_gpu.indexing_map<"(d0)[s0] -> (s0), domain: d0 in [0, 3], s0 in [2, 1]"> iter_args(%it = %t) -> (tensor<4xf32>) {
    %n = tensor.insert %c into %it[%x] : tensor<4xf32>
    xla_gpu.yield %n : tensor<4xf32>
  }
  %r1 = xla_gpu.loop (%a)[%i] -> (%x) in #xla_gpu.indexing_map<"(d0)[s0] -> (s0), domain: d0 in [0, 3], s0 in [0, 3], d0 * 4 + s0 in [100, 200]"> iter_args(%it = %t) -> (tensor<4xf32>) {
    %n = tensor.insert %c into %it[%x] : tensor<4xf32>
    xla_gpu.yield %n : tensor<4xf32>
  }
  return %r0, %r1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// A loop with a reachable domain stays.
// CHECK-LABEL: func.func @live_loop(
// CHECK: xla_gpu.loop
func.func @live_loop(%a: index, %t: tensor<4xf32>) -> tensor<4xf32> {
  %c = arith.constant 1.0 : f32
  %r = xla_gpu.loop (%a)[%i] -> (%x) in #xla_gpu.indexing_map<"(d0)[s0] -> (s0), domain: d0 in [0, 3], s0 in [0, 3], d0 * 4 + s0 in [0, 13]"> iter_args(%it = %t) -> (tensor<4xf32>) {
    %n = tensor.insert %c into %it[%x] : tensor<4xf32>
    xla_gpu.yield %n : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
