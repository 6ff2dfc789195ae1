// xla_gpu.loop -> scf.for per symbol + scf.if domain check + one
// single-result apply_indexing per map result (the reference walkthrough's "xla_gpu to scf").
// The dimensions' ranges and the constraints free of symbols are checked
// once around the loop nest; constraints on symbols in the innermost body.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-xla-loops-to-scf | FileCheck %s
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-xla-to-scf | FileCheck %s

// CHECK-DAG: #[[M0:.*]] = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
// CHECK-DAG: #[[M1:.*]] = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x floordiv 8) mod 512), domain:
// CHECK-DAG: #[[M2:.*]] = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ((bl_x mod 8) * 512 + th_x * 4 + vector_index), domain:
// CHECK-LABEL: func.func @gelu(
// CHECK-SAME: %[[IN:.*]]: tensor<6x512x4096xbf16>, %[[OUT:.*]]: tensor<6x512x4096xbf16>
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[BID:.*]] = gpu.block_id x
// CHECK: arith.cmpi sge, %[[TID]], %{{.*}} : index
// CHECK: arith.cmpi sle, %[[TID]], %c127 : index
// CHECK: arith.cmpi sge, %[[BID]]
// CHECK: arith.cmpi sle, %[[BID]], %c24575 : index
// CHECK: %[[R:.*]] = scf.if %{{.*}} -> (tensor<6x512x4096xbf16>) {
// CHECK-NEXT: %[[LOOP:.*]] = scf.for %[[V:.*]] = %c0 to %c4 step %c1 iter_args(%[[ITER:.*]] = %[[OUT]]) -> (tensor<6x512x4096xbf16>) {
// CHECK-NEXT: %[[D0:.*]] = xla_gpu.apply_indexing #[[M0]](%[[TID]], %[[BID]])[%[[V]]]
// CHECK-NEXT: %[[D1:.*]] = xla_gpu.apply_indexing #[[M1]](%[[TID]], %[[BID]])[%[[V]]]
// CHECK-NEXT: %[[D2:.*]] = xla_gpu.apply_indexing #[[M2]](%[[TID]], %[[BID]])[%[[V]]]
// CHECK-NEXT: %[[E:.*]] = tensor.extract %[[IN]][%[[D0]], %[[D1]], %[[D2]]]
// CHECK-NEXT: %[[T:.*]] = math.tanh %[[E]] : bf16
// CHECK-NEXT: %[[INS:.*]] = tensor.insert %[[T]] into %[[ITER]][%[[D0]], %[[D1]], %[[D2]]]
// CHECK-NEXT: scf.yield %[[INS]]
// CHECK-NEXT: }
// CHECK-NEXT: scf.yield %[[LOOP]]
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield %[[OUT]]
// CHECK-NEXT: }
// CHECK: return %[[R]]
#map = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, (bl_x mod 8) * 512 + th_x * 4 + vector_index), domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">
func.func @gelu(%input: tensor<6x512x4096xbf16>, %output: tensor<6x512x4096xbf16>) -> tensor<6x512x4096xbf16> {
  %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
  %block_id_x = gpu.block_id  x {xla.range = [0 : index, 24575 : index]}
  %xla_loop = xla_gpu.loop (%thread_id_x, %block_id_x)[%vector_index] -> (%dim0, %dim1, %dim2)
      in #map iter_args(%iter = %output) -> (tensor<6x512x4096xbf16>) {
    %extracted = tensor.extract %input[%dim0, %dim1, %dim2] : tensor<6x512x4096xbf16>
    %t = math.tanh %extracted : bf16
    %inserted = tensor.insert %t into %iter[%dim0, %dim1, %dim2] : tensor<6x512x4096xbf16>
    xla_gpu.yield %inserted : tensor<6x512x4096xbf16>
  }
  return %xla_loop : tensor<6x512x4096xbf16>
}

// -----

// Two symbols: two nested loops, the first symbol outermost; constraints
// join the bounds check through their own apply_indexing.
// CHECK-DAG: #[[C:.*]] = #xla_gpu.indexing_map<"(d0)[s0, s1] -> (d0 * 8 + s0 * 2 + s1), domain: d0 in [0, 31], s0 in [0, 3], s1 in [0, 1]">
// CHECK-LABEL: func.func @nested(
// CHECK: scf.for %[[I:.*]] = %c0 to %c4 step %c1
// CHECK: scf.for %[[J:.*]] = %c0{{.*}} to %c2 step %c1
// CHECK: %[[CV:.*]] = xla_gpu.apply_indexing #[[C]](%arg0)[%[[I]], %[[J]]]
// CHECK: arith.cmpi sge, %[[CV]]
// CHECK: arith.cmpi sle, %[[CV]], %c99
// CHECK: scf.if
#map = #xla_gpu.indexing_map<"(d0)[s0, s1] -> (d0 * 8 + s0 * 2 + s1), domain: d0 in [0, 31], s0 in [0, 3], s1 in [0, 1], d0 * 8 + s0 * 2 + s1 in [0, 99]">
func.func @nested(%tid: index, %t: tensor<100xf32>) -> tensor<100xf32> {
  %c = arith.constant 1.0 : f32
  %r = xla_gpu.loop (%tid)[%i, %j] -> (%x) in #map iter_args(%it = %t) -> (tensor<100xf32>) {
    %n = tensor.insert %c into %it[%x] : tensor<100xf32>
    xla_gpu.yield %n : tensor<100xf32>
  }
  return %r : tensor<100xf32>
}

// -----

// No symbols, no iter_args: just the check and the body.
// CHECK-LABEL: func.func @no_symbols(
// CHECK-NOT: scf.for
// CHECK: scf.if %{{.*}} {
// CHECK-NEXT: %[[X:.*]] = xla_gpu.apply_indexing
// CHECK-NEXT: func.call @use(%[[X]])
// CHECK-NEXT: }
func.func private @use(index)
func.func @no_symbols(%a: index) {
  xla_gpu.loop (%a) -> (%x) in #xla_gpu.indexing_map<"(d0) -> (d0 * 2), domain: d0 in [0, 9]"> {
    func.call @use(%x) : (index) -> ()
  }
  return
}

// -----

// Loops nested in loops lower from the inside out.
// CHECK-LABEL: func.func @loop_in_loop(
// CHECK-NOT: xla_gpu.loop
// CHECK: scf.for
// CHECK: scf.for
func.func @loop_in_loop(%a: index, %t: tensor<64xf32>) -> tensor<64xf32> {
  %c = arith.constant 1.0 : f32
  %r = xla_gpu.loop (%a)[%i] -> (%x) in #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 8 + s0), domain: d0 in [0, 7], s0 in [0, 7]"> iter_args(%it = %t) -> (tensor<64xf32>) {
    %r2 = xla_gpu.loop (%x)[%k] -> (%y) in #xla_gpu.indexing_map<"(d0)[s0] -> (d0), domain: d0 in [0, 63], s0 in [0, 1]"> iter_args(%it2 = %it) -> (tensor<64xf32>) {
      %n = tensor.insert %c into %it2[%y] : tensor<64xf32>
      xla_gpu.yield %n : tensor<64xf32>
    }
    xla_gpu.yield %r2 : tensor<64xf32>
  }
  return %r : tensor<64xf32>
}

// -----

// A partial last block's check, free of the vector symbol, stays outside
// the vector loop (whose body is then straight-line); a constraint on the
// symbol is checked per element.
// CHECK-LABEL: func.func @partial_block(
// CHECK-SAME: %[[TID:[a-z0-9]+]]: index, %[[BID:[a-z0-9]+]]: index, %[[T:.*]]: tensor<1000xf32>
// CHECK: %[[LIN:.*]] = xla_gpu.apply_indexing #{{.*}}(%[[TID]], %[[BID]])[%c0]
// CHECK: arith.cmpi sle, %[[LIN]], %c249
// CHECK: scf.if %{{.*}} -> (tensor<1000xf32>) {
// CHECK-NEXT: scf.for %[[V:.*]] = %c0 to %c4 step %c1 iter_args(%[[IT:.*]] = %[[T]])
// CHECK-NEXT: %[[X:.*]] = xla_gpu.apply_indexing #{{.*}}(%[[TID]], %[[BID]])[%[[V]]]
// CHECK-NEXT: tensor.insert %{{.*}} into %[[IT]][%[[X]]]
// CHECK-NEXT: scf.yield
// CHECK-NEXT: }
// CHECK-LABEL: func.func @per_element(
// CHECK: scf.for %[[V:.*]] = %c0 to %c4
// CHECK: arith.cmpi sle, %{{.*}}, %c998
// CHECK: scf.if
#partial = #xla_gpu.indexing_map<"(d0, d1)[s0] -> ((d0 + d1 * 64) * 4 + s0), domain: d0 in [0, 63], d1 in [0, 3], s0 in [0, 3], d0 + d1 * 64 in [0, 249]">
func.func @partial_block(%tid: index, %bid: index, %t: tensor<1000xf32>) -> tensor<1000xf32> {
  %c = arith.constant 1.0 : f32
  %r = xla_gpu.loop (%tid, %bid)[%v] -> (%x) in #partial iter_args(%it = %t) -> (tensor<1000xf32>) {
    %n = tensor.insert %c into %it[%x] : tensor<1000xf32>
    xla_gpu.yield %n : tensor<1000xf32>
  }
  return %r : tensor<1000xf32>
}
#per_element = #xla_gpu.indexing_map<"(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 255], s0 in [0, 3], d0 * 4 + s0 in [0, 998]">
func.func @per_element(%tid: index, %t: tensor<1000xf32>) -> tensor<1000xf32> {
  %c = arith.constant 1.0 : f32
  %r = xla_gpu.loop (%tid)[%v] -> (%x) in #per_element iter_args(%it = %t) -> (tensor<1000xf32>) {
    %n = tensor.insert %c into %it[%x] : tensor<1000xf32>
    xla_gpu.yield %n : tensor<1000xf32>
  }
  return %r : tensor<1000xf32>
}
