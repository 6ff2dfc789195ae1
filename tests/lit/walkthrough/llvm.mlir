// The reference walkthrough, stage "Lowering to LLVM": the kernel after lower-tensors and lower-to-llvm (llvm + nvvm dialects; no xla_gpu op is left).
// RUN: xla-gpu-opt %s > %t.1.mlir
// RUN: xla-gpu-opt %t.1.mlir > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: xla-gpu-opt %s --mlir-print-op-generic | xla-gpu-opt > %t.3.mlir
// RUN: diff %t.1.mlir %t.3.mlir
// RUN: FileCheck %s < %t.1.mlir

// CHECK: llvm.func @__nv_tanhf(f32) -> f32
// CHECK: llvm.func @main(%arg0: !llvm.ptr, %arg1: !llvm.ptr)
// CHECK: nvvm.read.ptx.sreg.tid.x : i32
// CHECK: llvm.load %{{.*}} invariant : !llvm.ptr -> vector<4xbf16>
// CHECK: llvm.call @__nv_tanhf

module {
llvm.func @__nv_tanhf(f32) -> f32
llvm.func @main(%arg0: !llvm.ptr, %arg1: !llvm.ptr) {
  %0 = llvm.mlir.constant(512 : i32) : i32
  %1 = llvm.mlir.constant(4 : i32) : i32
  %2 = llvm.mlir.constant(0 : i32) : i32
  %4 = llvm.mlir.constant(4.467770e-02 : bf16) : bf16
  %5 = llvm.mlir.constant(7.968750e-01 : bf16) : bf16
  %6 = llvm.mlir.constant(1.000000e+00 : bf16) : bf16
  %7 = llvm.mlir.constant(5.000000e-01 : bf16) : bf16
  %8 = llvm.mlir.constant(dense<0.000000e+00> : vector<4xbf16>) : vector<4xbf16>
  %11 = nvvm.read.ptx.sreg.tid.x : i32
  %12 = nvvm.read.ptx.sreg.ctaid.x : i32
  %13 = llvm.mul %11, %1 : i32
  %14 = llvm.mul %12, %0 : i32
  %15 = llvm.add %13, %14 : i32
  %16 = llvm.getelementptr inbounds %arg0[%15] : (!llvm.ptr, i32) -> !llvm.ptr, bf16
  %17 = llvm.load %16 invariant : !llvm.ptr -> vector<4xbf16>
  %18 = llvm.extractelement %17[%2 : i32] : vector<4xbf16>
  %19 = llvm.fmul %18, %18  : bf16
  %20 = llvm.fmul %19, %18  : bf16
  %21 = llvm.fmul %20, %4  : bf16
  %22 = llvm.fadd %18, %21  : bf16
  %23 = llvm.fmul %22, %5  : bf16
  %24 = llvm.fpext %23 : bf16 to f32
  %25 = llvm.call @__nv_tanhf(%24) : (f32) -> f32
  %26 = llvm.fptrunc %25 : f32 to bf16
  %27 = llvm.fadd %26, %6  : bf16
  %28 = llvm.fmul %27, %7  : bf16
  %29 = llvm.fmul %18, %28  : bf16
  %30 = llvm.insertelement %29, %8[%2 : i32] : vector<4xbf16>
  %31 = llvm.getelementptr inbounds %arg1[%15] : (!llvm.ptr, i32) -> !llvm.ptr, bf16
  llvm.store %30, %31 : vector<4xbf16>, !llvm.ptr
  llvm.return
}
}
