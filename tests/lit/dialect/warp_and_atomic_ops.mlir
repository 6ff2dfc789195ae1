// Round trip of the ops of the reduction and scatter emitters:
// shuffle_reduce, predicated_insert, predicated_extract, atomic_rmw.
// RUN: xla-gpu-opt %s | FileCheck %s
// RUN: xla-gpu-opt %s | xla-gpu-opt | FileCheck %s
// RUN: xla-gpu-opt %s --mlir-print-op-generic | xla-gpu-opt | FileCheck %s

func.func private @add(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func private @argmax(%v: f32, %i: i32, %w: f32, %j: i32) -> (f32, i32) {
  %gt = arith.cmpf ogt, %w, %v : f32
  %m = arith.select %gt, %w, %v : f32
  %k = arith.select %gt, %j, %i : i32
  return %m, %k : f32, i32
}

// CHECK-LABEL: func.func @shuffles(
// CHECK-SAME: %[[A:[^:]*]]: f32, %[[I:[^:]*]]: i32)
// CHECK: %[[S:.*]] = xla_gpu.shuffle_reduce(%[[A]]) to 16 combiner=@add : f32
// CHECK: %[[R:.*]]:2 = xla_gpu.shuffle_reduce(%[[S]], %[[I]]) to 4 combiner=@argmax {tag} : f32, i32
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @shuffles(%a: f32, %i: i32) -> (f32, i32) {
  %s = xla_gpu.shuffle_reduce(%a) to 16 combiner=@add : f32
  %r:2 = xla_gpu.shuffle_reduce (%s, %i) to 4 combiner = @argmax {tag} : f32, i32
  return %r#0, %r#1 : f32, i32
}

// CHECK-LABEL: func.func @predicated(
// CHECK-SAME: %[[T:[^:]*]]: tensor<4x8xf32>, %[[X:[^:]*]]: index, %[[Y:[^:]*]]: index, %[[C:[^:]*]]: i1, %[[V:[^:]*]]: f32,
// CHECK: %[[INS:.*]] = xla_gpu.predicated_insert %[[V]] into %[[T]][%[[X]], %[[Y]]] if %[[C]] : tensor<4x8xf32>
// CHECK: %[[EXT:.*]] = xla_gpu.predicated_extract %[[INS]][%[[X]], %[[Y]]] if %[[C]] else %[[V]] : tensor<4x8xf32>
// CHECK: xla_gpu.predicated_insert %{{.*}} into %{{.*}}[] if %[[C]] : tensor<i8>
func.func @predicated(%t: tensor<4x8xf32>, %x: index, %y: index, %c: i1, %v: f32, %s: tensor<i8>, %b: i8) -> (tensor<4x8xf32>, f32, tensor<i8>) {
  %r = xla_gpu.predicated_insert %v into %t[%x, %y] if %c : tensor<4x8xf32>
  %e = xla_gpu.predicated_extract %r[%x, %y] if %c else %v : tensor<4x8xf32>
  %r0 = xla_gpu.predicated_insert %b into %s[] if %c : tensor<i8>
  return %r, %e, %r0 : tensor<4x8xf32>, f32, tensor<i8>
}

// CHECK-LABEL: func.func @atomic(
// CHECK-SAME: %[[T:[^:]*]]: tensor<4x8xf32>, %[[X:[^:]*]]: index, %[[Y:[^:]*]]: index, %[[V:[^:]*]]: f32)
// CHECK: %[[R:.*]] = xla_gpu.atomic_rmw %[[T]][%[[X]], %[[Y]]] : tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[CUR:.*]]: f32):
// CHECK-NEXT: %[[N:.*]] = arith.addf %[[CUR]], %[[V]] : f32
// CHECK-NEXT: xla_gpu.yield %[[N]] : f32
// CHECK-NEXT: }
// CHECK: xla_gpu.atomic_rmw %[[R]][%[[Y]], %[[X]]] : tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%{{.*}}: f32):
// CHECK-NEXT: xla_gpu.yield %[[V]] : f32
// CHECK-NEXT: } {tag}
func.func @atomic(%t: tensor<4x8xf32>, %x: index, %y: index, %v: f32) -> tensor<4x8xf32> {
  %r = xla_gpu.atomic_rmw %t[%x, %y] : tensor<4x8xf32> {
  ^bb0(%current: f32):
    %n = arith.addf %current, %v : f32
    xla_gpu.yield %n : f32
  }
  %s = xla_gpu.atomic_rmw %r[%y, %x] : tensor<4x8xf32> {
  ^bb0(%current: f32):
    xla_gpu.yield %v : f32
  } {tag}
  return %s : tensor<4x8xf32>
}

// A vector region: 4 consecutive elements of the row from [%x, %y] on.
// CHECK-LABEL: func.func @atomic_lanes(
// CHECK-SAME: %[[T:[^:]*]]: tensor<4x8xf32>, %[[X:[^:]*]]: index, %[[Y:[^:]*]]: index, %[[V:[^:]*]]: vector<4xf32>)
// CHECK: xla_gpu.atomic_rmw %[[T]][%[[X]], %[[Y]]] : tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[CUR:.*]]: vector<4xf32>):
// CHECK-NEXT: %[[N:.*]] = arith.addf %[[CUR]], %[[V]] : vector<4xf32>
// CHECK-NEXT: xla_gpu.yield %[[N]] : vector<4xf32>
func.func @atomic_lanes(%t: tensor<4x8xf32>, %x: index, %y: index, %v: vector<4xf32>) -> tensor<4x8xf32> {
  %r = xla_gpu.atomic_rmw %t[%x, %y] : tensor<4x8xf32> {
  ^bb0(%current: vector<4xf32>):
    %n = arith.addf %current, %v : vector<4xf32>
    xla_gpu.yield %n : vector<4xf32>
  }
  return %r : tensor<4x8xf32>
}
