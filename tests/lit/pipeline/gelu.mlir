// The reference walkthrough's GELU fusion through the whole pipeline, one RUN line per stage
// of the reference walkthrough's walkthrough.
// RUN: xla-gpu-translate %s --stop-after=inline | FileCheck %s --check-prefix=INLINE
// RUN: xla-gpu-translate %s --stop-after=xla-lower-xla-to-scf | FileCheck %s --check-prefix=SCF
// RUN: xla-gpu-translate %s --stop-after=xla-flatten-tensors | FileCheck %s --check-prefix=FLAT
// RUN: xla-gpu-translate %s --stop-after=xla-vectorize-loads-stores | FileCheck %s --check-prefix=VEC
// RUN: xla-gpu-translate %s --stop-after=xla-gpu-optimize-loops | FileCheck %s --check-prefix=UNROLL
// RUN: xla-gpu-translate %s --emit=mlir | FileCheck %s --check-prefix=LLVM
// RUN: xla-gpu-translate %s --emit=ptx -o %t.ptx && FileCheck %s --check-prefix=PTX < %t.ptx

// INLINE-LABEL: func.func @main(
// INLINE-NOT: xla_gpu.pure_call
// INLINE: math.tanh
// INLINE-NOT: func.func private @gelu

// SCF: scf.if
// SCF: scf.for
// SCF: xla_gpu.apply_indexing
// SCF-NOT: xla_gpu.loop

// FLAT: func.func @main(%{{.*}}: tensor<12582912xbf16>, %{{.*}}: tensor<12582912xbf16>) -> tensor<12582912xbf16>

// VEC: vector.transfer_read %{{.*}} : tensor<12582912xbf16>, vector<4xbf16>
// VEC: scf.for
// VEC: vector.extract
// VEC: vector.transfer_write

// UNROLL-LABEL: func.func @main(
// UNROLL-NOT: scf.for
// UNROLL: vector.transfer_read
// UNROLL-NOT: scf.for

// LLVM: llvm.func @__nv_tanhf(f32) -> f32
// LLVM: llvm.func @main(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>}
// LLVM: nvvm.read.ptx.sreg.tid.x range <i32, 0, 128> : i32
// LLVM: llvm.getelementptr inbounds %arg0[%{{.*}}] : (!llvm.ptr, i32) -> !llvm.ptr, bf16
// LLVM: llvm.load %{{.*}} invariant : !llvm.ptr -> vector<4xbf16>
// LLVM: llvm.fpext %{{.*}} : bf16 to f32
// LLVM: llvm.call @__nv_tanhf
// LLVM: llvm.store %{{.*}} : vector<4xbf16>, !llvm.ptr
// LLVM-NOT: tensor

// PTX: .target sm_90
// PTX: .visible .entry main(
// PTX: mov.u32 {{.*}}%tid.x;
// PTX: ld.global.nc.v2.b32
// PTX: st.global.v2.b32

// A cubin where ptxas is available.
// RUN: %if ptxas %{ %ptxas -arch=sm_90 %t.ptx -o %t.cubin %}

#map = #xla_gpu.indexing_map<"(th_x, bl_x)[vector_index] -> ("
 "bl_x floordiv 4096, (bl_x floordiv 8) mod 512, (bl_x mod 8) * 512 + th_x * 4 + vector_index),"
 "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]">

func.func @main(%input: tensor<6x512x4096xbf16> , %output: tensor<6x512x4096xbf16>)
   -> tensor<6x512x4096xbf16> {
 %thread_id_x = gpu.thread_id  x {xla.range = [0 : index, 127 : index]}
 %block_id_x = gpu.block_id  x {xla.range = [0 : index, 24575 : index]}
 %xla_loop = xla_gpu.loop (%thread_id_x, %block_id_x)[%vector_index] -> (%dim0, %dim1, %dim2)
     in #map iter_args(%iter = %output) -> (tensor<6x512x4096xbf16>) {
   %pure_call = xla_gpu.pure_call @gelu(%input, %dim0, %dim1, %dim2)
      : (tensor<6x512x4096xbf16>, index, index, index) -> bf16
   %inserted = tensor.insert %pure_call into %iter[%dim0, %dim1, %dim2] : tensor<6x512x4096xbf16>
   xla_gpu.yield %inserted : tensor<6x512x4096xbf16>
 }
 return %xla_loop : tensor<6x512x4096xbf16>
}

func.func private @gelu(%arg0: tensor<6x512x4096xbf16>, %i: index, %j: index, %k: index) -> bf16 {
  %cst = arith.constant 5.000000e-01 : bf16
  %cst_0 = arith.constant 1.000000e+00 : bf16
  %cst_1 = arith.constant 7.968750e-01 : bf16
  %cst_2 = arith.constant 4.467770e-02 : bf16
  %extracted = tensor.extract %arg0[%i, %j, %k] : tensor<6x512x4096xbf16>
  %0 = arith.mulf %extracted, %extracted : bf16
  %1 = arith.mulf %0, %extracted : bf16
  %2 = arith.mulf %1, %cst_2 : bf16
  %3 = arith.addf %extracted, %2 : bf16
  %4 = arith.mulf %3, %cst_1 : bf16
  %5 = math.tanh %4 : bf16
  %6 = arith.addf %5, %cst_0 : bf16
  %7 = arith.mulf %6, %cst : bf16
  %8 = arith.mulf %extracted, %7 : bf16
  return %8 : bf16
}
