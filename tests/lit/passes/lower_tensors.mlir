// xla-lower-tensors: bare pointers, loads and stores (the reference walkthrough's "Lowering to
// LLVM").
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors | FileCheck %s

// Outputs are written in place and not returned; reads of arguments the
// function never writes are invariant; an i32 index feeds the GEP as is.
// CHECK-LABEL: func.func @kernel(
// CHECK-SAME: %[[IN:[a-z0-9]+]]: !llvm.ptr, %[[OUT:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: i32, %{{.*}}: index) {
// CHECK: %[[P:.*]] = llvm.getelementptr inbounds %[[IN]][%{{.*}}] : (!llvm.ptr, i32) -> !llvm.ptr, bf16
// CHECK: llvm.load %[[P]] invariant : !llvm.ptr -> vector<4xbf16>
// CHECK: %[[Q:.*]] = llvm.getelementptr inbounds %[[OUT]][%{{.*}}] : (!llvm.ptr, i32) -> !llvm.ptr, bf16
// CHECK: llvm.store %{{.*}}, %[[Q]] : vector<4xbf16>, !llvm.ptr
// CHECK: %[[R:.*]] = llvm.getelementptr inbounds %[[OUT]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
// CHECK: %[[OLD:.*]] = llvm.load %[[R]] : !llvm.ptr -> bf16
// CHECK: %[[R2:.*]] = llvm.getelementptr inbounds %[[OUT]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
// CHECK: llvm.store %[[OLD]], %[[R2]] : bf16, !llvm.ptr
// CHECK: return{{$}}
func.func @kernel(%in: tensor<1024xbf16>, %out: tensor<1024xbf16>, %i: i32, %j: index) -> tensor<1024xbf16> {
  %idx = arith.index_castui %i : i32 to index
  %pad = arith.constant 0.0 : bf16
  %v = vector.transfer_read %in[%idx], %pad {in_bounds = [true]} : tensor<1024xbf16>, vector<4xbf16>
  %w = vector.transfer_write %v, %out[%idx] {in_bounds = [true]} : vector<4xbf16>, tensor<1024xbf16>
  %old = tensor.extract %w[%j] : tensor<1024xbf16>
  %r = tensor.insert %old into %w[%j] : tensor<1024xbf16>
  return %r : tensor<1024xbf16>
}

// -----

// i1 takes a byte in memory.
// CHECK-LABEL: func.func @pred(
// CHECK: %[[B:.*]] = llvm.load %{{.*}} invariant : !llvm.ptr -> i8
// CHECK: %[[T:.*]] = arith.trunci %[[B]] : i8 to i1
// CHECK: %[[N:.*]] = arith.xori %[[T]]
// CHECK: %[[E:.*]] = arith.extui %[[N]] : i1 to i8
// CHECK: llvm.store %[[E]], %{{.*}} : i8, !llvm.ptr
func.func @pred(%in: tensor<8xi1>, %out: tensor<8xi1>, %i: index) -> tensor<8xi1> {
  %true = arith.constant true
  %e = tensor.extract %in[%i] : tensor<8xi1>
  %n = arith.xori %e, %true : i1
  %r = tensor.insert %n into %out[%i] : tensor<8xi1>
  return %r : tensor<8xi1>
}

// -----

// Shared memory is a global in address space 3, sync_threads a barrier;
// loop-carried tensors become pointers; constants become private globals.
// CHECK-DAG: llvm.mlir.global private @shared_0() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<1056 x f32>
// CHECK-DAG: llvm.mlir.global private constant @constant_0(dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>) {addr_space = 0 : i32, alignment = 16 : i64} : !llvm.array<2 x f32>
// CHECK-LABEL: func.func @shared(
// CHECK: %[[A:.*]] = llvm.mlir.addressof @shared_0 : !llvm.ptr<3>
// CHECK: %[[S:.*]] = llvm.addrspacecast %[[A]] : !llvm.ptr<3> to !llvm.ptr
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[S]]) -> (!llvm.ptr)
// CHECK: gpu.barrier
// CHECK: llvm.mlir.addressof @constant_0 : !llvm.ptr
func.func @shared(%out: tensor<2xf32>, %tid: index) -> tensor<2xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %x = arith.constant 3.0 : f32
  %shmem = xla_gpu.allocate_shared : tensor<1056xf32>
  %filled = scf.for %k = %c0 to %c4 step %c1 iter_args(%t = %shmem) -> tensor<1056xf32> {
    %n = tensor.insert %x into %t[%k] : tensor<1056xf32>
    scf.yield %n : tensor<1056xf32>
  }
  %synced = xla_gpu.sync_threads %filled : tensor<1056xf32>
  %e = tensor.extract %synced[%tid] : tensor<1056xf32>
  %cst = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %f = tensor.extract %cst[%c1] : tensor<2xf32>
  %s = arith.addf %e, %f : f32
  %r = tensor.insert %s into %out[%c0] : tensor<2xf32>
  return %r : tensor<2xf32>
}
