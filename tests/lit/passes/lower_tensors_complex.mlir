// xla-lower-tensors on complex elements: a complex<T> element is stored as
// a struct of its two parts; loads take the parts out (complex.create),
// stores put them in; a complex add on an element is two float atomics, any
// other complex update a CAS loop on the whole element;
// complex constants become arrays of interleaved parts.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors | FileCheck %s

// CHECK-LABEL: func.func @copy_negated(
// CHECK-SAME: %[[IN:[a-z0-9]+]]: !llvm.ptr, %[[OUT:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index)
// CHECK: %[[P:.*]] = llvm.getelementptr inbounds %[[IN]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.struct<(f32, f32)>
// CHECK: %[[S:.*]] = llvm.load %[[P]] invariant : !llvm.ptr -> !llvm.struct<(f32, f32)>
// CHECK: %[[RE:.*]] = llvm.extractvalue %[[S]][0] : !llvm.struct<(f32, f32)>
// CHECK: %[[IM:.*]] = llvm.extractvalue %[[S]][1] : !llvm.struct<(f32, f32)>
// CHECK: %[[C:.*]] = complex.create %[[RE]], %[[IM]] : complex<f32>
// CHECK: %[[N:.*]] = complex.neg %[[C]] : complex<f32>
// CHECK: %[[Q:.*]] = llvm.getelementptr inbounds %[[OUT]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.struct<(f32, f32)>
// CHECK: %[[NRE:.*]] = complex.re %[[N]] : complex<f32>
// CHECK: %[[W0:.*]] = llvm.insertvalue %[[NRE]], %{{.*}}[0] : !llvm.struct<(f32, f32)>
// CHECK: %[[NIM:.*]] = complex.im %[[N]] : complex<f32>
// CHECK: %[[W1:.*]] = llvm.insertvalue %[[NIM]], %[[W0]][1] : !llvm.struct<(f32, f32)>
// CHECK: llvm.store %[[W1]], %[[Q]] : !llvm.struct<(f32, f32)>, !llvm.ptr
func.func @copy_negated(%in: tensor<16xcomplex<f32>>, %out: tensor<16xcomplex<f32>>, %i: index) -> tensor<16xcomplex<f32>> {
  %v = tensor.extract %in[%i] : tensor<16xcomplex<f32>>
  %n = complex.neg %v : complex<f32>
  %r = tensor.insert %n into %out[%i] : tensor<16xcomplex<f32>>
  return %r : tensor<16xcomplex<f32>>
}

// -----

// CHECK: llvm.mlir.global private constant @constant_0(dense<[1.000000e+00, 2.000000e+00, 0.000000e+00, -3.000000e+00]> : tensor<4xf64>) {addr_space = 0 : i32, alignment = 16 : i64} : !llvm.array<4 x f64>
// CHECK-LABEL: func.func @constant(
// CHECK: %[[G:.*]] = llvm.mlir.addressof @constant_0 : !llvm.ptr
// CHECK: llvm.getelementptr inbounds %[[G]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.struct<(f64, f64)>
func.func @constant(%out: tensor<2xcomplex<f64>>, %i: index) -> tensor<2xcomplex<f64>> {
  %c = arith.constant dense<[(1.0, 2.0), (0.0, -3.0)]> : tensor<2xcomplex<f64>>
  %v = tensor.extract %c[%i] : tensor<2xcomplex<f64>>
  %r = tensor.insert %v into %out[%i] : tensor<2xcomplex<f64>>
  return %r : tensor<2xcomplex<f64>>
}

// -----

// CHECK-LABEL: func.func @atomic_add(
// CHECK-SAME: %[[OUT:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index, %[[X:.*]]: complex<f32>)
// CHECK: %[[E:.*]] = llvm.getelementptr inbounds %[[OUT]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.struct<(f32, f32)>
// CHECK-DAG: %[[RE:.*]] = complex.re %[[X]] : complex<f32>
// CHECK-DAG: %[[IM:.*]] = complex.im %[[X]] : complex<f32>
// CHECK: %[[P0:.*]] = llvm.getelementptr inbounds %[[E]][0] : (!llvm.ptr) -> !llvm.ptr, f32
// CHECK: llvm.atomicrmw fadd %[[P0]], %[[RE]] monotonic : !llvm.ptr, f32
// CHECK: %[[P1:.*]] = llvm.getelementptr inbounds %[[E]][1] : (!llvm.ptr) -> !llvm.ptr, f32
// CHECK: llvm.atomicrmw fadd %[[P1]], %[[IM]] monotonic : !llvm.ptr, f32
func.func @atomic_add(%out: tensor<8xcomplex<f32>>, %i: index, %x: complex<f32>) -> tensor<8xcomplex<f32>> {
  %r = xla_gpu.atomic_rmw %out[%i] : tensor<8xcomplex<f32>> {
  ^bb0(%current: complex<f32>):
    %s = complex.add %current, %x : complex<f32>
    xla_gpu.yield %s : complex<f32>
  }
  return %r : tensor<8xcomplex<f32>>
}

// -----

// Any other complex update is a CAS loop on the element as one integer
// twice the part's width, the real part in the low half.
// CHECK-LABEL: func.func @atomic_multiply(
// CHECK-SAME: %[[OUT:[a-z0-9]+]]: !llvm.ptr, %{{.*}}: index, %[[X:.*]]: complex<f32>)
// CHECK: %[[E:.*]] = llvm.getelementptr inbounds %[[OUT]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.struct<(f32, f32)>
// CHECK: %[[INIT:.*]] = llvm.load %[[E]] atomic monotonic {alignment = 8 : i64} : !llvm.ptr -> i64
// CHECK: scf.while (%[[OLD:.*]] = %[[INIT]]) : (i64) -> i64 {
// CHECK: %[[HI:.*]] = arith.shrui %[[OLD]], %{{.*}} : i64
// CHECK: %[[RE:.*]] = arith.bitcast %{{.*}} : i32 to f32
// CHECK: %[[IM:.*]] = arith.bitcast %{{.*}} : i32 to f32
// CHECK: %[[CUR:.*]] = complex.create %[[RE]], %[[IM]] : complex<f32>
// CHECK: %[[MUL:.*]] = complex.mul %[[CUR]], %[[X]] : complex<f32>
// CHECK: %[[NEW:.*]] = arith.ori %{{.*}}, %{{.*}} : i64
// CHECK: llvm.cmpxchg %[[E]], %[[OLD]], %[[NEW]] monotonic monotonic : !llvm.ptr, i64
// CHECK-NOT: llvm.atomicrmw
// CHECK: return{{$}}
func.func @atomic_multiply(%out: tensor<8xcomplex<f32>>, %i: index, %x: complex<f32>) -> tensor<8xcomplex<f32>> {
  %r = xla_gpu.atomic_rmw %out[%i] : tensor<8xcomplex<f32>> {
  ^bb0(%current: complex<f32>):
    %s = complex.mul %current, %x : complex<f32>
    xla_gpu.yield %s : complex<f32>
  }
  return %r : tensor<8xcomplex<f32>>
}

// -----

// complex<f64>: a 128-bit CAS; its first guess is a plain load (a torn
// guess only fails the CAS).
// CHECK-LABEL: func.func @atomic_replace_c128(
// CHECK: %[[INIT:.*]] = llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr -> i128
// CHECK: scf.while (%[[OLD:.*]] = %[[INIT]]) : (i128) -> i128 {
// CHECK: llvm.cmpxchg %{{.*}}, %[[OLD]], %{{.*}} monotonic monotonic : !llvm.ptr, i128
// CHECK: return{{$}}
func.func @atomic_replace_c128(%out: tensor<8xcomplex<f64>>, %i: index, %x: complex<f64>) -> tensor<8xcomplex<f64>> {
  %r = xla_gpu.atomic_rmw %out[%i] : tensor<8xcomplex<f64>> {
  ^bb0(%current: complex<f64>):
    xla_gpu.yield %x : complex<f64>
  }
  return %r : tensor<8xcomplex<f64>>
}
