// xla-lower-tensors{native-16bit-float-add=true} (the cuda pipeline): f16
// and bf16 atomic adds are one llvm.atomicrmw fadd on the element (NVPTX's
// atom.add.noftz.f16 / .bf16); without the option (the host) they stay
// compare-and-swap loops on the containing 32-bit word. Other 16-bit
// combiners stay CAS loops either way.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors="native-16bit-float-add=true" | FileCheck %s --check-prefix=NATIVE
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors | FileCheck %s --check-prefix=HOST

// NATIVE-LABEL: func.func @add16(
// NATIVE-SAME: %[[H:[a-z0-9]+]]: !llvm.ptr, %[[B:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index, %[[X:[a-z0-9]+]]: f16, %[[Y:[a-z0-9]+]]: bf16)
// NATIVE: %[[PH:.*]] = llvm.getelementptr inbounds %[[H]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f16
// NATIVE: llvm.atomicrmw fadd %[[PH]], %[[X]] monotonic : !llvm.ptr, f16
// NATIVE: %[[PB:.*]] = llvm.getelementptr inbounds %[[B]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
// NATIVE: llvm.atomicrmw fadd %[[PB]], %[[Y]] monotonic : !llvm.ptr, bf16
// NATIVE-NOT: llvm.cmpxchg
// NATIVE: return{{$}}

// HOST-LABEL: func.func @add16(
// HOST-NOT: llvm.atomicrmw fadd
// HOST: llvm.cmpxchg {{.*}} : !llvm.ptr, i32
// HOST: llvm.cmpxchg {{.*}} : !llvm.ptr, i32
// HOST: return{{$}}
func.func @add16(%h: tensor<64xf16>, %b: tensor<64xbf16>, %j: index, %x: f16, %y: bf16)
    -> (tensor<64xf16>, tensor<64xbf16>) {
  %h1 = xla_gpu.atomic_rmw %h[%j] : tensor<64xf16> {
  ^bb0(%c: f16):
    %n = arith.addf %c, %x : f16
    xla_gpu.yield %n : f16
  }
  %b1 = xla_gpu.atomic_rmw %b[%j] : tensor<64xbf16> {
  ^bb0(%c: bf16):
    %n = arith.addf %y, %c : bf16
    xla_gpu.yield %n : bf16
  }
  return %h1, %b1 : tensor<64xf16>, tensor<64xbf16>
}

// -----

// A 16-bit float max has no native atomic here: a CAS loop on the word.
// NATIVE-LABEL: func.func @max16(
// NATIVE-NOT: llvm.atomicrmw
// NATIVE: llvm.cmpxchg {{.*}} : !llvm.ptr, i32
// HOST-LABEL: func.func @max16(
// HOST: llvm.cmpxchg {{.*}} : !llvm.ptr, i32
func.func @max16(%h: tensor<64xf16>, %j: index, %x: f16) -> tensor<64xf16> {
  %h1 = xla_gpu.atomic_rmw %h[%j] : tensor<64xf16> {
  ^bb0(%c: f16):
    %n = arith.maximumf %c, %x : f16
    xla_gpu.yield %n : f16
  }
  return %h1 : tensor<64xf16>
}
