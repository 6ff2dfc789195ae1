// apply_indexing of apply_indexing composes, and the composed map is
// simplified with the ranges: linearizing the reference walkthrough's three GELU indices gives
// the flattened listing's single map.
// RUN: xla-gpu-opt %s --canonicalize --split-input-file | FileCheck %s

// CHECK: #[[MAP:.*]] = #xla_gpu.indexing_map<"(th_x, bl_x, vector_index) -> (th_x * 4 + bl_x * 512 + vector_index), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
// CHECK-LABEL: func.func @walkthrough_linearization(
// CHECK-NEXT: %[[I:.*]] = xla_gpu.apply_indexing #[[MAP]](%arg0, %arg1, %arg2)
// CHECK-NEXT: return %[[I]]
#map = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
#map1 = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x floordiv 8) mod 512),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
#map2 = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x mod 8) * 512 + th_x * 4 + vector_index),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
#linear = #xla_gpu.indexing_map<"(d0, d1, d2) -> (d0 * 2097152 + d1 * 4096 + d2),"
 "domain: d0 in [0, 5], d1 in [0, 511], d2 in [0, 4095]">
func.func @walkthrough_linearization(%tid: index, %bid: index, %v: index) -> index {
  %dim0 = xla_gpu.apply_indexing #map(%tid, %bid)[%v]
  %dim1 = xla_gpu.apply_indexing #map1(%tid, %bid)[%v]
  %dim2 = xla_gpu.apply_indexing #map2(%tid, %bid)[%v]
  %lin = xla_gpu.apply_indexing #linear(%dim0, %dim1, %dim2)
  return %lin : index
}

// -----

// The producer's domain is kept: here a constraint the consumer's range
// does not imply.
// CHECK: #[[MAP:.*]] = #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 2 + s0), domain: d0 in [0, 15], s0 in [0, 1], d0 * 4 in [0, 20]">
// CHECK-LABEL: func.func @keeps_domain(
// CHECK-NEXT: xla_gpu.apply_indexing #[[MAP]](%arg0)[%arg1]
func.func @keeps_domain(%a: index, %s: index) -> index {
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0) -> (d0 * 4), domain: d0 in [0, 15]">(%a)
  %1 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0)[s0] -> (d0 floordiv 2 + s0), domain: d0 in [0, 20], s0 in [0, 1]">(%0)[%s]
  return %1 : index
}

// -----

// Simplification inside a loop's map.
// CHECK: #[[MAP:.*]] = #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 7], s0 in [0, 3]">
// CHECK-LABEL: func.func @loop_map(
// CHECK: xla_gpu.loop (%arg0)[%s] -> (%dim) in #[[MAP]]
func.func private @use(index)
func.func @loop_map(%a: index) {
  xla_gpu.loop (%a)[%i] -> (%x) in #xla_gpu.indexing_map<"(d0)[s0] -> ((d0 * 4 + s0) floordiv 4), domain: d0 in [0, 7], s0 in [0, 3]"> {
    func.call @use(%x) : (index) -> ()
  }
  return
}
