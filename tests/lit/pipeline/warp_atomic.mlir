// A kernel with the reduction and scatter emitters' ops through the cuda
// pipeline down to ptx. A row sum by warp shuffle (shuffle_reduce), written by
// lane 0 (predicated_insert), then scattered into bins with atomics: f32
// add (a hardware atomic), a bf16 product (a CAS loop on the aligned
// 32-bit word) and an i32 max. ptxas accepts the PTX.
// RUN: xla-gpu-translate %s --emit=mlir | FileCheck %s --check-prefix=LLVM
// RUN: xla-gpu-translate %s --emit=ptx -o %t.ptx && FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: %if ptxas %{ %ptxas -arch=sm_90 %t.ptx -o %t.cubin %}

// LLVM-LABEL: llvm.func @main(
// LLVM-SAME: attributes {nvvm.kernel, nvvm.maxntid = array<i32: 256, 1, 1>}
// LLVM-COUNT-5: nvvm.shfl.sync bfly
// LLVM: llvm.atomicrmw fadd %{{.*}} syncscope("device") monotonic : !llvm.ptr, f32
// LLVM: llvm.load %{{.*}} atomic syncscope("device") monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
// LLVM: llvm.cmpxchg %{{.*}} syncscope("device") monotonic monotonic : !llvm.ptr, i32
// LLVM: llvm.atomicrmw max %{{.*}} syncscope("device") monotonic : !llvm.ptr, i32
// LLVM-NOT: xla_gpu.
// LLVM-NOT: gpu.shuffle

// PTX: shfl.sync.bfly.b32 {{.*}}, 16, 31, -1;
// PTX: shfl.sync.bfly.b32 {{.*}}, 8, 31, -1;
// PTX: shfl.sync.bfly.b32 {{.*}}, 4, 31, -1;
// PTX: shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// PTX: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// PTX: atom.global.add.f32
// PTX: atom.{{.*}}gpu{{.*}}cas.b32
// PTX: atom.global.max.s32

func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}

func.func @main(%in: tensor<8x32xf32>, %bins: tensor<8xi32>,
                %sums: tensor<8xf32>, %hist: tensor<4xf32>,
                %prod: tensor<4xbf16>, %top: tensor<4xi32>)
    -> (tensor<8xf32>, tensor<4xf32>, tensor<4xbf16>, tensor<4xi32>)
    attributes {xla.entry} {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %tid = gpu.thread_id x {xla.range = [0 : index, 255 : index]}
  %row = arith.divui %tid, %c32 : index
  %lane = arith.remui %tid, %c32 : index
  %v = tensor.extract %in[%row, %lane] : tensor<8x32xf32>
  %sum = xla_gpu.shuffle_reduce(%v) to 16 combiner=@add : f32
  %first = arith.cmpi eq, %lane, %c0 : index
  %s = xla_gpu.predicated_insert %sum into %sums[%row] if %first : tensor<8xf32>
  %b32 = tensor.extract %bins[%row] : tensor<8xi32>
  %bin = arith.index_cast %b32 : i32 to index
  %r:3 = scf.if %first -> (tensor<4xf32>, tensor<4xbf16>, tensor<4xi32>) {
    %h = xla_gpu.atomic_rmw %hist[%bin] : tensor<4xf32> {
    ^bb0(%cur: f32):
      %n = arith.addf %cur, %sum : f32
      xla_gpu.yield %n : f32
    }
    %p = xla_gpu.atomic_rmw %prod[%bin] : tensor<4xbf16> {
    ^bb0(%cur: bf16):
      %sb = arith.truncf %sum : f32 to bf16
      %n = arith.mulf %cur, %sb : bf16
      xla_gpu.yield %n : bf16
    }
    %t = xla_gpu.atomic_rmw %top[%bin] : tensor<4xi32> {
    ^bb0(%cur: i32):
      %n = arith.maxsi %cur, %b32 : i32
      xla_gpu.yield %n : i32
    }
    scf.yield %h, %p, %t : tensor<4xf32>, tensor<4xbf16>, tensor<4xi32>
  } else {
    scf.yield %hist, %prod, %top : tensor<4xf32>, tensor<4xbf16>, tensor<4xi32>
  }
  return %s, %r#0, %r#1, %r#2 : tensor<8xf32>, tensor<4xf32>, tensor<4xbf16>, tensor<4xi32>
}
