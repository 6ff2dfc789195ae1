// xla-lower-xla-to-scf: predicated_insert / predicated_extract become an
// scf.if around the plain tensor access (both targets get them so).
// RUN: xla-gpu-opt %s --xla-lower-xla-to-scf | FileCheck %s

// CHECK-LABEL: func.func @predicated(
// CHECK-SAME: %[[T:[^:]*]]: tensor<4x8xf32>, %[[I:[^:]*]]: index, %[[J:[^:]*]]: index, %[[C:[^:]*]]: i1, %[[V:[^:]*]]: f32)
// CHECK: %[[INS:.*]] = scf.if %[[C]] -> (tensor<4x8xf32>) {
// CHECK-NEXT: %[[NEW:.*]] = tensor.insert %[[V]] into %[[T]][%[[I]], %[[J]]] : tensor<4x8xf32>
// CHECK-NEXT: scf.yield %[[NEW]] : tensor<4x8xf32>
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield %[[T]] : tensor<4x8xf32>
// CHECK-NEXT: }
// CHECK: %[[EXT:.*]] = scf.if %[[C]] -> (f32) {
// CHECK-NEXT: %[[E:.*]] = tensor.extract %[[INS]][%[[J]], %[[I]]] : tensor<4x8xf32>
// CHECK-NEXT: scf.yield %[[E]] : f32
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield %[[V]] : f32
// CHECK-NEXT: }
// CHECK: return %[[INS]], %[[EXT]]
// CHECK-NOT: xla_gpu.predicated
func.func @predicated(%t: tensor<4x8xf32>, %i: index, %j: index, %c: i1, %v: f32) -> (tensor<4x8xf32>, f32) {
  %r = xla_gpu.predicated_insert %v into %t[%i, %j] if %c : tensor<4x8xf32>
  %e = xla_gpu.predicated_extract %r[%j, %i] if %c else %v : tensor<4x8xf32>
  return %r, %e : tensor<4x8xf32>, f32
}

// Inside an xla_gpu.loop: the loop is lowered first (its domain checked
// around the symbol loop), then the ops in it.
// CHECK-LABEL: func.func @in_loop(
// CHECK: scf.if
// CHECK: scf.for
// CHECK: %[[LANE0:.*]] = arith.cmpi eq
// CHECK: scf.if %[[LANE0]] -> (tensor<16xf32>) {
// CHECK: tensor.insert
// CHECK-NOT: xla_gpu.predicated
#map = #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 3], s0 in [0, 3]">
func.func @in_loop(%t: tensor<16xf32>, %tid: index, %v: f32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : index
  %r = xla_gpu.loop (%tid)[%s] -> (%x) in #map iter_args(%it = %t) -> (tensor<16xf32>) {
    %first = arith.cmpi eq, %s, %c0 : index
    %n = xla_gpu.predicated_insert %v into %it[%x] if %first : tensor<16xf32>
    xla_gpu.yield %n : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}
