// The reference walkthrough's transpose listing through the pipeline: the tile lives in shared
// memory (address space 3) and a barrier separates the two loops.
// RUN: xla-gpu-translate %S/../walkthrough/transpose.mlir --emit=mlir | FileCheck %s --check-prefix=LLVM
// RUN: xla-gpu-translate %S/../walkthrough/transpose.mlir --emit=ptx -o %t.ptx && FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90 %t.ptx -o %t.cubin %}

// LLVM: llvm.mlir.global private @shared_0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<1056 x f32>
// LLVM: llvm.func @transpose(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>}
// LLVM: llvm.mlir.addressof @shared_0 : !llvm.ptr<3>
// LLVM: nvvm.barrier
// LLVM-NOT: tensor<

// PTX: .shared .align 16 .b8 shared_0[4224];
// PTX: st.shared.b32
// PTX: bar.sync 0;
// PTX: ld.shared.b32
