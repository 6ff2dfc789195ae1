// Seed 000's transpose listing through the cpu target: the shared-memory
// tile is a per-block buffer, the barrier splits each block into two loops
// over its threads; the index arithmetic both sides share is recomputed.
// RUN: xla-gpu-translate %S/../walkthrough/transpose.mlir --target=cpu --stop-after=xla-emulate-grid | FileCheck %s --check-prefix=GRID
// RUN: xla-gpu-translate %S/../walkthrough/transpose.mlir --target=cpu | FileCheck %s --check-prefix=HOST

// GRID-NOT: llvm.mlir.global
// GRID-LABEL: func.func @transpose_host_blocks(
// GRID: %[[TILE:.*]] = llvm.alloca %{{.*}} x !llvm.array<1056 x f32> {alignment = 16 : i64}
// GRID-NOT: llvm.alloca
// GRID: scf.for %[[B:.*]] = %arg2 to %arg3
// GRID-NEXT: scf.for %[[T0:.*]] = %[[C0:.*]] to %[[C128:.*]] step
// GRID: math.exp
// GRID: llvm.getelementptr inbounds %[[TILE]]
// GRID: llvm.store
// GRID: scf.for %[[T1:.*]] = %[[C0]] to %[[C128]] step
// GRID: arith.index_castui %[[T1]] : index to i32
// GRID: llvm.getelementptr inbounds %[[TILE]]
// GRID: math.absf
// GRID-NOT: gpu.barrier
// GRID-LABEL: func.func @transpose_host(
// GRID-SAME: xla.blocks = 960 : i64, xla.num_args = 2 : i64, xla.threads_per_block = 128 : i64

// HOST-NOT: addr_space = 3
// HOST-LABEL: llvm.func @transpose_host_blocks(
// HOST: llvm.alloca %{{.*}} x !llvm.array<1056 x f32>
// exp is arithmetic on the host (xla-approximate-host-math): a floor for
// the range reduction, no libm call.
// HOST-NOT: llvm.intr.exp
// HOST: llvm.intr.floor
// HOST-NOT: llvm.intr.exp
// HOST: llvm.intr.fabs
// HOST-NOT: nvvm
// HOST-NOT: gpu.
