// warp_atomic.mlir beside this file through the cpu target: the shuffle is
// emulated between two phases (one loop over the threads per distance),
// the atomics stay LLVM atomics (blocks may run on several host threads).
// RUN: xla-gpu-translate %S/warp_atomic.mlir --target=cpu --stop-after=xla-emulate-grid | FileCheck %s --check-prefix=GRID
// RUN: xla-gpu-translate %S/warp_atomic.mlir --target=cpu | FileCheck %s --check-prefix=HOST

// GRID-LABEL: func.func @main_host_blocks(
// GRID: scf.for
// GRID: scf.for
// GRID: llvm.store
// GRID-COUNT-5: func.call @add
// GRID: scf.for
// GRID: llvm.atomicrmw fadd
// GRID: scf.while
// GRID: llvm.cmpxchg
// GRID: llvm.atomicrmw max
// GRID-NOT: xla_gpu.
// GRID-NOT: gpu.

// HOST-LABEL: llvm.func @main_host_blocks(
// HOST: llvm.atomicrmw fadd
// HOST: llvm.cmpxchg
// HOST: llvm.atomicrmw max
// HOST-NOT: nvvm
// HOST-NOT: gpu.
