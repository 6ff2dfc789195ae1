// xla-scalarize-vector-memory (cpu target): a thread's vector access becomes
// one scalar access per element, with the element offsets' alignments, so
// that the loop over threads has scalar values only; canonicalize then
// folds vector.extract / vector.from_elements away. Volatile accesses and
// i1 vectors (bit-packed in memory) stay.
// RUN: xla-gpu-opt %s --xla-scalarize-vector-memory --canonicalize | FileCheck %s

// CHECK-LABEL: func.func @thread_body(
// CHECK-SAME: %[[P:[^:]*]]: !llvm.ptr, %[[Q:[^:]*]]: !llvm.ptr, %[[B:[^:]*]]: !llvm.ptr)
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[E0:.*]] = llvm.load %[[P]] invariant {alignment = 16 : i64} : !llvm.ptr -> f32
// CHECK: %[[A3:.*]] = llvm.getelementptr inbounds %[[P]][3] : (!llvm.ptr) -> !llvm.ptr, f32
// CHECK: %[[E3:.*]] = llvm.load %[[A3]] invariant {alignment = 4 : i64} : !llvm.ptr -> f32
// CHECK: %[[S:.*]] = arith.addf %[[E0]], %[[E3]] : f32
// CHECK: llvm.store %[[S]], %[[Q]] {alignment = 16 : i64} : f32, !llvm.ptr
// CHECK: %[[Q1:.*]] = llvm.getelementptr inbounds %[[Q]][1]
// CHECK: llvm.store %[[E0]], %[[Q1]] {alignment = 4 : i64} : f32, !llvm.ptr
// CHECK: %[[Q2:.*]] = llvm.getelementptr inbounds %[[Q]][2]
// CHECK: llvm.store %[[E3]], %[[Q2]] {alignment = 8 : i64} : f32, !llvm.ptr
// CHECK: %[[Q3:.*]] = llvm.getelementptr inbounds %[[Q]][3]
// CHECK: llvm.store %[[S]], %[[Q3]] {alignment = 4 : i64} : f32, !llvm.ptr
// A constant vector: each element stored.
// CHECK: llvm.store %[[ONE]], %[[Q]] : f32, !llvm.ptr
// CHECK: llvm.store %[[ONE]], %{{.*}} : f32, !llvm.ptr
// CHECK: llvm.load %[[B]] : !llvm.ptr -> vector<8xi1>
// CHECK: llvm.store %{{.*}}, %[[B]] : vector<8xi1>, !llvm.ptr
// CHECK: llvm.load volatile %[[P]] {alignment = 16 : i64} : !llvm.ptr -> vector<4xf32>
// CHECK-NOT: vector.
func.func @thread_body(%p: !llvm.ptr, %q: !llvm.ptr, %b: !llvm.ptr) -> vector<4xf32> {
  %v = llvm.load %p invariant {alignment = 16 : i64} : !llvm.ptr -> vector<4xf32>
  %e0 = vector.extract %v[0] : f32 from vector<4xf32>
  %e3 = vector.extract %v[3] : f32 from vector<4xf32>
  %s = arith.addf %e0, %e3 : f32
  %w = vector.from_elements %s, %e0, %e3, %s : vector<4xf32>
  llvm.store %w, %q {alignment = 16 : i64} : vector<4xf32>, !llvm.ptr
  %c = arith.constant dense<1.0> : vector<2xf32>
  llvm.store %c, %q : vector<2xf32>, !llvm.ptr
  %m = llvm.load %b : !llvm.ptr -> vector<8xi1>
  llvm.store %m, %b : vector<8xi1>, !llvm.ptr
  %a = llvm.load volatile %p {alignment = 16 : i64} : !llvm.ptr -> vector<4xf32>
  return %a : vector<4xf32>
}

// A vector the thread keeps whole (a function result here) is rebuilt from
// the scalar loads.
// CHECK-LABEL: func.func @kept_whole(
// CHECK: %[[X0:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i8
// CHECK: %[[X1:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i8
// CHECK: %[[V:.*]] = vector.from_elements %[[X0]], %[[X1]] : vector<2xi8>
// CHECK: return %[[V]]
func.func @kept_whole(%p: !llvm.ptr) -> vector<2xi8> {
  %v = llvm.load %p : !llvm.ptr -> vector<2xi8>
  return %v : vector<2xi8>
}

// A vector of at most 64 bits only copied (loaded, then stored whole) moves
// as one integer, access groups kept; 128 bits are split.
// CHECK-LABEL: func.func @copies(
// CHECK-SAME: %[[S:[^:]*]]: !llvm.ptr, %[[D:[^:]*]]: !llvm.ptr)
// CHECK: %[[W:.*]] = llvm.load %[[S]] invariant {access_groups = [#{{.*}}], alignment = 8 : i64} : !llvm.ptr -> i64
// CHECK: llvm.store %[[W]], %[[D]] {access_groups = [#{{.*}}], alignment = 8 : i64} : i64, !llvm.ptr
// CHECK: %[[D2:.*]] = llvm.getelementptr %[[D]][8]
// CHECK: llvm.store %[[W]], %[[D2]] {{.*}}: i64, !llvm.ptr
// CHECK-COUNT-4: llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK-COUNT-4: llvm.store %{{.*}} : f32, !llvm.ptr
#group = #llvm.access_group<id = distinct[0]<>>
func.func @copies(%s: !llvm.ptr, %d: !llvm.ptr) {
  %v = llvm.load %s invariant {access_groups = [#group], alignment = 8 : i64} : !llvm.ptr -> vector<4xbf16>
  llvm.store %v, %d {access_groups = [#group], alignment = 8 : i64} : vector<4xbf16>, !llvm.ptr
  %d2 = llvm.getelementptr %d[8] : (!llvm.ptr) -> !llvm.ptr, bf16
  llvm.store %v, %d2 {access_groups = [#group], alignment = 8 : i64} : vector<4xbf16>, !llvm.ptr
  %w = llvm.load %s : !llvm.ptr -> vector<4xf32>
  llvm.store %w, %d : vector<4xf32>, !llvm.ptr
  return
}
