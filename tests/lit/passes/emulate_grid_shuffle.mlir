// xla-emulate-grid: a warp shuffle cuts the kernel into phases; the phase
// before keeps each thread's operands, between the phases one loop over
// the block's threads per distance computes lane t's butterfly step
// combiner(cur[t], cur[t xor d]) into the other buffer, and the phase
// after reads its thread's slot of the last one.
// RUN: xla-gpu-opt %s --split-input-file --xla-emulate-grid | FileCheck %s

// CHECK-LABEL: func.func @kernel_host_blocks(
// CHECK-SAME: %[[IN:[^:]*]]: !llvm.ptr, %[[OUT:[^:]*]]: !llvm.ptr, %[[FIRST:[^:]*]]: index, %[[END:[^:]*]]: index)
// CHECK-DAG: %[[A:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32> : (i64) -> !llvm.ptr
// CHECK-DAG: %[[B:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x f32> : (i64) -> !llvm.ptr
// CHECK: scf.for %[[BLOCK:.*]] = %[[FIRST]] to %[[END]] step
// Phase 0: each thread's operand into %A.
// CHECK: scf.for %[[T:.*]] = %[[C0:.*]] to %[[C64:.*]] step
// CHECK: %[[T64:.*]] = arith.index_castui %[[T]] : index to i64
// CHECK: %[[V:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: %[[SLOT:.*]] = llvm.getelementptr inbounds %[[A]][%[[T64]]]
// CHECK: llvm.store %[[V]], %[[SLOT]] {{.*}}: f32, !llvm.ptr
// CHECK: }
// Distance 4: A -> B (@sub is not symmetric: every lane's step).
// CHECK: scf.for %[[L:.*]] = %[[C0]] to %[[C64]] step
// CHECK: %[[L64:.*]] = arith.index_castui %[[L]] : index to i64
// CHECK: %[[D4:.*]] = arith.constant 4 : i64
// CHECK: %[[O4:.*]] = arith.xori %[[L64]], %[[D4]] : i64
// CHECK: %[[MINE:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: llvm.getelementptr inbounds %[[A]][%[[O4]]]
// CHECK: %[[THEIRS:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: %[[R:.*]] = func.call @sub(%[[MINE]], %[[THEIRS]]) : (f32, f32) -> f32
// CHECK: %[[DST:.*]] = llvm.getelementptr inbounds %[[B]][%[[L64]]]
// CHECK: llvm.store %[[R]], %[[DST]]
// CHECK: }
// Distance 2: B -> A; distance 1: A -> B.
// CHECK: scf.for
// CHECK: arith.constant 2 : i64
// CHECK: llvm.getelementptr inbounds %[[B]]
// CHECK: func.call @sub
// CHECK: llvm.getelementptr inbounds %[[A]]
// CHECK: scf.for
// CHECK: arith.constant 1 : i64
// CHECK: llvm.getelementptr inbounds %[[A]]
// CHECK: func.call @sub
// CHECK: llvm.getelementptr inbounds %[[B]]
// Phase 1 reads its slot of B.
// CHECK: scf.for %[[T1:.*]] = %[[C0]] to %[[C64]] step
// CHECK: %[[T164:.*]] = arith.index_castui %[[T1]] : index to i64
// CHECK: %[[RS:.*]] = llvm.getelementptr inbounds %[[B]][%[[T164]]]
// CHECK: %[[RV:.*]] = llvm.load %[[RS]] {{.*}}: !llvm.ptr -> f32
// CHECK: llvm.store %[[RV]]
// CHECK-NOT: xla_gpu.shuffle_reduce
// CHECK-LABEL: func.func @kernel_host(
// CHECK-SAME: xla.threads_per_block = 64 : i64
func.func private @sub(%a: f32, %b: f32) -> f32 {
  %d = arith.subf %a, %b : f32
  return %d : f32
}
func.func @kernel(%in: !llvm.ptr, %out: !llvm.ptr) {
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %t64 = arith.index_castui %tid : index to i64
  %src = llvm.getelementptr inbounds %in[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  %v = llvm.load %src : !llvm.ptr -> f32
  %r = xla_gpu.shuffle_reduce(%v) to 4 combiner=@sub : f32
  %dst = llvm.getelementptr inbounds %out[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, f32
  llvm.store %r, %dst : f32, !llvm.ptr
  return
}

// -----

// Two values (one an index, kept as i64), a shuffle right at the start
// (its phase has nothing else to do), and a second shuffle of the first's
// result after a barrier.
// CHECK-LABEL: func.func @two_values_host_blocks(
// CHECK-DAG: llvm.alloca %{{.*}} x !llvm.array<32 x f32>
// CHECK-DAG: llvm.alloca %{{.*}} x !llvm.array<32 x i64>
// CHECK: scf.for
// Phase 0 only stores the operands.
// CHECK: scf.for %[[T:.*]] =
// CHECK: %[[X:.*]] = llvm.load %{{.*}} : !llvm.ptr -> f32
// CHECK: %[[I:.*]] = arith.index_cast %[[T]] : index to i64
// CHECK: llvm.store %[[I]]
// CHECK: }
// CHECK: scf.for
// CHECK: arith.constant 1 : i64
// CHECK: %[[MI:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK: %[[MII:.*]] = arith.index_cast %[[MI]] : i64 to index
// CHECK: %[[OI:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK: %[[OII:.*]] = arith.index_cast %[[OI]] : i64 to index
// CHECK: %[[R:.*]]:2 = func.call @argmax(%{{.*}}, %[[MII]], %{{.*}}, %[[OII]]) : (f32, index, f32, index) -> (f32, index)
// CHECK: arith.index_cast %[[R]]#1 : index to i64
// CHECK: }
// The second shuffle's operand: the first's result, in its phase.
// CHECK: scf.for
// CHECK: llvm.load
// CHECK: llvm.store
// CHECK: }
// CHECK: scf.for
// CHECK: arith.constant 16 : i64
// CHECK: func.call @argmax
// CHECK: arith.constant 8 : i64
// CHECK: arith.constant 4 : i64
// CHECK: arith.constant 2 : i64
// CHECK: arith.constant 1 : i64
// CHECK: func.call @argmax
// CHECK: scf.for
// CHECK: arith.index_cast %{{.*}} : i64 to index
// CHECK: arith.index_castui %{{.*}} : index to i64
// CHECK: llvm.store
// CHECK-NOT: gpu.barrier
func.func private @argmax(%v: f32, %i: index, %w: f32, %j: index) -> (f32, index) {
  %gt = arith.cmpf ogt, %w, %v : f32
  %m = arith.select %gt, %w, %v : f32
  %k = arith.select %gt, %j, %i : index
  return %m, %k : f32, index
}
func.func @two_values(%x: !llvm.ptr, %out: !llvm.ptr) {
  %tid = gpu.thread_id x {xla.range = [0 : index, 31 : index]}
  %v = llvm.load %x : !llvm.ptr -> f32
  %r:2 = xla_gpu.shuffle_reduce(%v, %tid) to 1 combiner=@argmax : f32, index
  gpu.barrier
  %s:2 = xla_gpu.shuffle_reduce(%r#0, %r#1) to 16 combiner=@argmax : f32, index
  %i64 = arith.index_castui %s#1 : index to i64
  llvm.store %i64, %out : i64, !llvm.ptr
  return
}

// -----

// A symmetric combiner (a bf16 sum through f32: the same expression with
// the arguments swapped) leaves every lane of a group of 2 * 8 lanes with
// the group's first lane's value: per group, distance d runs lanes j < d
// in place (15 calls, not 64), and a thread reads its group's first slot.
// CHECK-LABEL: func.func @row_sums_host_blocks(
// CHECK-DAG: %[[BUF:.*]] = llvm.alloca %{{.*}} x !llvm.array<64 x bf16>
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK-NOT: llvm.alloca
// CHECK: scf.for
// CHECK: llvm.store %{{.*}}, %{{.*}} : bf16, !llvm.ptr
// CHECK: scf.for %[[G:.*]] = %{{.*}} to %{{.*}} step %[[C16]] {
// CHECK: %[[G64:.*]] = arith.index_castui %[[G]] : index to i64
// CHECK: scf.for %[[J:.*]] = %{{.*}} to %[[C8]] step
// CHECK: %[[MINE:.*]] = arith.addi %[[G64]], %{{.*}} overflow<nsw, nuw> : i64
// CHECK: %[[OTHER:.*]] = arith.addi %[[MINE]], %{{.*}} overflow<nsw, nuw> : i64
// CHECK: llvm.getelementptr inbounds %[[BUF]][%[[MINE]]]
// CHECK: llvm.getelementptr inbounds %[[BUF]][%[[OTHER]]]
// CHECK: %[[SUM:.*]] = func.call @add(
// CHECK: llvm.store %[[SUM]], %{{.*}} : bf16, !llvm.ptr
// CHECK: }
// CHECK: scf.for
// CHECK: func.call @add(
// CHECK: scf.for
// CHECK: func.call @add(
// CHECK: scf.for
// CHECK: func.call @add(
// CHECK-NOT: func.call @add(
// The phase after: thread & ~15.
// CHECK: %[[MASK:.*]] = arith.constant -16 : i64
// CHECK: %[[FIRST:.*]] = arith.andi %{{.*}}, %[[MASK]] : i64
// CHECK: llvm.getelementptr inbounds %[[BUF]][%[[FIRST]]]
func.func private @add(%a: bf16, %b: bf16) -> bf16 {
  %x = arith.extf %a : bf16 to f32
  %y = arith.extf %b : bf16 to f32
  %s = arith.addf %y, %x : f32
  %r = arith.truncf %s : f32 to bf16
  return %r : bf16
}
func.func @row_sums(%in: !llvm.ptr, %out: !llvm.ptr) {
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %t64 = arith.index_castui %tid : index to i64
  %src = llvm.getelementptr inbounds %in[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  %v = llvm.load %src : !llvm.ptr -> bf16
  %r = xla_gpu.shuffle_reduce(%v) to 8 combiner=@add : bf16
  %dst = llvm.getelementptr inbounds %out[%t64] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
  llvm.store %r, %dst : bf16, !llvm.ptr
  return
}
