// An atomic_rmw on a vector of consecutive elements (a scatter-add of f32
// rows). With xla-lower-tensors{vector-float-add=true} (the cuda pipeline)
// 4 or 2 f32 adds are one sm_90 vector reduction, written as inline PTX;
// without it (the host), and for any other combiner or lane count, one
// atomicrmw per lane at consecutive addresses.
// RUN: xla-gpu-opt %s --split-input-file --xla-flatten-tensors --xla-lower-tensors="vector-float-add=true" | FileCheck %s --check-prefix=NVPTX
// RUN: xla-gpu-opt %s --split-input-file --xla-flatten-tensors --xla-lower-tensors | FileCheck %s --check-prefix=HOST

// NVPTX-LABEL: func.func @add4(
// NVPTX-SAME: %[[T:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index, %{{.*}}: index, %[[V:[a-z0-9]+]]: vector<4xf32>)
// NVPTX: %[[P:.*]] = llvm.getelementptr inbounds %[[T]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// NVPTX-COUNT-4: llvm.extractelement %[[V]]
// NVPTX: llvm.inline_asm has_side_effects asm_dialect = att "red.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f" %[[P]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (!llvm.ptr, f32, f32, f32, f32) -> ()
// NVPTX-NOT: llvm.atomicrmw
// NVPTX: return

// HOST-LABEL: func.func @add4(
// HOST: %[[P:.*]] = llvm.getelementptr inbounds %{{.*}}[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// HOST: %[[E0:.*]] = llvm.extractelement
// HOST: %[[E1:.*]] = llvm.extractelement
// HOST: %[[E2:.*]] = llvm.extractelement
// HOST: %[[E3:.*]] = llvm.extractelement
// HOST: llvm.atomicrmw fadd %[[P]], %[[E0]] monotonic : !llvm.ptr, f32
// HOST: %[[P1:.*]] = llvm.getelementptr inbounds %[[P]][1] : (!llvm.ptr) -> !llvm.ptr, f32
// HOST: llvm.atomicrmw fadd %[[P1]], %[[E1]] monotonic : !llvm.ptr, f32
// HOST: %[[P2:.*]] = llvm.getelementptr inbounds %[[P]][2] : (!llvm.ptr) -> !llvm.ptr, f32
// HOST: llvm.atomicrmw fadd %[[P2]], %[[E2]] monotonic : !llvm.ptr, f32
// HOST: %[[P3:.*]] = llvm.getelementptr inbounds %[[P]][3] : (!llvm.ptr) -> !llvm.ptr, f32
// HOST: llvm.atomicrmw fadd %[[P3]], %[[E3]] monotonic : !llvm.ptr, f32
// HOST-NOT: inline_asm
// HOST: return
func.func @add4(%t: tensor<8x8xf32>, %i: index, %j: index, %v: vector<4xf32>) -> tensor<8x8xf32> {
  %r = xla_gpu.atomic_rmw %t[%i, %j] : tensor<8x8xf32> {
  ^bb0(%c: vector<4xf32>):
    %n = arith.addf %c, %v : vector<4xf32>
    xla_gpu.yield %n : vector<4xf32>
  }
  return %r : tensor<8x8xf32>
}

// -----

// Two lanes: the v2 form.
// NVPTX-LABEL: func.func @add2(
// NVPTX: llvm.inline_asm has_side_effects asm_dialect = att "red.global.add.v2.f32 [$0], {$1, $2};", "l,f,f"
// HOST-LABEL: func.func @add2(
// HOST-COUNT-2: llvm.atomicrmw fadd
// HOST-NOT: llvm.atomicrmw
func.func @add2(%t: tensor<16xf32>, %i: index, %v: vector<2xf32>) -> tensor<16xf32> {
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<16xf32> {
  ^bb0(%c: vector<2xf32>):
    %n = arith.addf %v, %c : vector<2xf32>
    xla_gpu.yield %n : vector<2xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Lanes of another combiner (an integer max), or of more lanes than the
// vector reduction takes: one atomic per lane on either target.
// NVPTX-LABEL: func.func @lanes(
// NVPTX-NOT: inline_asm
// NVPTX-COUNT-3: llvm.atomicrmw max
// NVPTX-COUNT-8: llvm.atomicrmw fadd
// NVPTX-NOT: inline_asm
// HOST-LABEL: func.func @lanes(
// HOST-COUNT-3: llvm.atomicrmw max
// HOST-COUNT-8: llvm.atomicrmw fadd
func.func @lanes(%t: tensor<16xi32>, %f: tensor<16xf32>, %i: index, %v: vector<3xi32>, %w: vector<8xf32>) -> (tensor<16xi32>, tensor<16xf32>) {
  %r = xla_gpu.atomic_rmw %t[%i] : tensor<16xi32> {
  ^bb0(%c: vector<3xi32>):
    %n = arith.maxsi %c, %v : vector<3xi32>
    xla_gpu.yield %n : vector<3xi32>
  }
  %s = xla_gpu.atomic_rmw %f[%i] : tensor<16xf32> {
  ^bb0(%c: vector<8xf32>):
    %n = arith.addf %c, %w : vector<8xf32>
    xla_gpu.yield %n : vector<8xf32>
  }
  return %r, %s : tensor<16xi32>, tensor<16xf32>
}
