// Seed 000's GELU fusion through the cpu target: the shared pipeline, then
// the grid as loops (xla-emulate-grid) and host LLVM (xla-lower-to-host).
// The kernel is the one in gelu.mlir beside this file.
// RUN: xla-gpu-translate %S/gelu.mlir --target=cpu --stop-after=xla-emulate-grid | FileCheck %s --check-prefix=GRID
// RUN: xla-gpu-translate %S/gelu.mlir --target=cpu | FileCheck %s --check-prefix=HOST
// RUN: xla-gpu-translate %S/gelu.mlir --target=cpu --threads=64 --blocks=100 | FileCheck %s --check-prefix=LAUNCH

// One block loop and one thread loop (no barrier): 24576 blocks of 128.
// GRID-LABEL: func.func @main_host_blocks(
// GRID-SAME: %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %[[FIRST:[^:]*]]: index, %[[END:[^:]*]]: index) attributes {llvm.emit_c_interface}
// GRID: %[[C128:.*]] = arith.constant 128 : index
// GRID: scf.for %[[B:.*]] = %[[FIRST]] to %[[END]]
// GRID-NEXT: scf.for %[[T:.*]] = %{{.*}} to %[[C128]]
// GRID: arith.index_castui %[[B]] : index to i32
// GRID: arith.index_castui %[[T]] : index to i32
// GRID: math.tanh
// GRID-NOT: gpu.
// GRID-LABEL: func.func @main_host(
// GRID-SAME: xla.blocks = 24576 : i64, xla.num_args = 2 : i64, xla.threads_per_block = 128 : i64
// GRID: %[[C0:.*]] = arith.constant 0 : index
// GRID: %[[NB:.*]] = arith.constant 24576 : index
// GRID: call @main_host_blocks(%{{.*}}, %{{.*}}, %[[C0]], %[[NB]])

// Host LLVM: no NVVM, no gpu ops, no libdevice; each thread's vector<4xbf16>
// access is four scalar ones (xla-scalarize-vector-memory: the thread loop
// has no vector values, so LLVM vectorizes it across threads), each in the
// thread loop's access group (LLVM takes a loop for parallel only when every
// access in it is in the group); tanh is
// arithmetic (xla-approximate-host-math: a rational function, no libm
// call); bf16 arithmetic in f32; the C-interface wrappers.
// The thread loop's latch carries the parallel-accesses annotation (the
// branch's own loop_annotation: `!llvm.loop` metadata in LLVM IR).
// HOST: #[[GROUP:.*]] = #llvm.access_group<id = distinct[0]<>>
// HOST: #[[LOOP:.*]] = #llvm.loop_annotation<parallelAccesses = #[[GROUP]]>
// HOST-NOT: nvvm
// HOST-NOT: __nv_
// HOST-LABEL: llvm.func @main_host_blocks(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, %arg3: i64) attributes {llvm.emit_c_interface}
// HOST-NOT: vector<4xbf16>
// HOST: llvm.load %{{.*}} invariant {access_groups = [#[[GROUP]]]} : !llvm.ptr -> i16
// HOST: llvm.load %{{.*}} invariant {access_groups = [#[[GROUP]]]} : !llvm.ptr -> i16
// HOST: llvm.load %{{.*}} invariant {access_groups = [#[[GROUP]]]} : !llvm.ptr -> i16
// HOST: llvm.load %{{.*}} invariant {access_groups = [#[[GROUP]]]} : !llvm.ptr -> i16
// HOST: llvm.fmul %{{.*}} : f32
// HOST-NOT: llvm.intr.tanh
// HOST-NOT: llvm.call
// HOST: llvm.fdiv %{{.*}} : f32
// HOST: llvm.intr.copysign(%{{.*}}) : (f32, f32) -> f32
// HOST: llvm.store %{{.*}} {access_groups = [#[[GROUP]]]} : i16, !llvm.ptr
// HOST: llvm.store %{{.*}} {access_groups = [#[[GROUP]]]} : i16, !llvm.ptr
// HOST: llvm.store %{{.*}} {access_groups = [#[[GROUP]]]} : i16, !llvm.ptr
// HOST: llvm.store %{{.*}} {access_groups = [#[[GROUP]]]} : i16, !llvm.ptr
// HOST-NOT: vector<4xbf16>
// HOST: llvm.br ^{{.*}} {loop_annotation = #[[LOOP]]}
// HOST-NOT: llvm.loop_annotation
// HOST-LABEL: llvm.func @_mlir_ciface_main_host_blocks(
// HOST-LABEL: llvm.func @main_host(%arg0: !llvm.ptr)
// HOST: llvm.call @main_host_blocks(
// HOST-LABEL: llvm.func @_mlir_ciface_main_host(%arg0: !llvm.ptr)
// HOST-NOT: gpu.
// HOST-NOT: nvvm
// HOST-NOT: func.func
// HOST-NOT: scf.
// HOST-NOT: fmul {{.*}} : bf16

// LAUNCH: llvm.mlir.constant(64 : index) : i64
// LAUNCH-LABEL: llvm.func @main_host(
// LAUNCH-SAME: xla.blocks = 100 : i64, xla.num_args = 2 : i64, xla.threads_per_block = 64 : i64
// LAUNCH: llvm.mlir.constant(100 : index) : i64
