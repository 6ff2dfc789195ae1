// xla-lower-shuffle-reduce (the cuda target): a butterfly of gpu.shuffle xor
// by max_distance, ..., 2, 1, 32-bit pieces, and a call of the combiner
// with the lane's values first.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-shuffle-reduce | FileCheck %s

func.func private @argmax(%v: f32, %i: i32, %w: f32, %j: i32) -> (f32, i32) {
  %gt = arith.cmpf ogt, %w, %v : f32
  %m = arith.select %gt, %w, %v : f32
  %k = arith.select %gt, %j, %i : i32
  return %m, %k : f32, i32
}

// 32-bit values are shuffled as they are; distance 4, 2, 1.
// CHECK-LABEL: func.func @argmax_to_4(
// CHECK-SAME: %[[V:[^:]*]]: f32, %[[I:[^:]*]]: i32)
// CHECK-DAG: %[[W:.*]] = arith.constant 32 : i32
// CHECK-DAG: %[[D4:.*]] = arith.constant 4 : i32
// CHECK: %[[V4:.*]], %{{.*}} = gpu.shuffle xor %[[V]], %[[D4]], %[[W]] : f32
// CHECK: %[[I4:.*]], %{{.*}} = gpu.shuffle xor %[[I]], %{{.*}}, %{{.*}} : i32
// CHECK: %[[R4:.*]]:2 = call @argmax(%[[V]], %[[I]], %[[V4]], %[[I4]]) : (f32, i32, f32, i32) -> (f32, i32)
// CHECK: %[[D2:.*]] = arith.constant 2 : i32
// CHECK: %[[V2:.*]], %{{.*}} = gpu.shuffle xor %[[R4]]#0, %[[D2]], %{{.*}} : f32
// CHECK: %[[I2:.*]], %{{.*}} = gpu.shuffle xor %[[R4]]#1, %{{.*}}, %{{.*}} : i32
// CHECK: %[[R2:.*]]:2 = call @argmax(%[[R4]]#0, %[[R4]]#1, %[[V2]], %[[I2]])
// CHECK: %[[D1:.*]] = arith.constant 1 : i32
// CHECK: gpu.shuffle xor %[[R2]]#0, %[[D1]]
// CHECK: gpu.shuffle xor %[[R2]]#1
// CHECK: %[[R1:.*]]:2 = call @argmax(%[[R2]]#0, %[[R2]]#1,
// CHECK-NOT: gpu.shuffle
// CHECK: return %[[R1]]#0, %[[R1]]#1
// CHECK-NOT: xla_gpu.shuffle_reduce
func.func @argmax_to_4(%v: f32, %i: i32) -> (f32, i32) {
  %r:2 = xla_gpu.shuffle_reduce(%v, %i) to 4 combiner=@argmax : f32, i32
  return %r#0, %r#1 : f32, i32
}

// -----

func.func private @add(%a: f64, %b: f64) -> f64 {
  %s = arith.addf %a, %b : f64
  return %s : f64
}

// 64 bits: two 32-bit halves, joined again.
// CHECK-LABEL: func.func @f64(
// CHECK-SAME: %[[V:[^:]*]]: f64)
// CHECK: %[[BITS:.*]] = arith.bitcast %[[V]] : f64 to i64
// CHECK: %[[LO:.*]] = arith.trunci %[[BITS]] : i64 to i32
// CHECK: %[[HI64:.*]] = arith.shrui %[[BITS]], %{{.*}} : i64
// CHECK: %[[HI:.*]] = arith.trunci %[[HI64]] : i64 to i32
// CHECK: %[[LO2:.*]], %{{.*}} = gpu.shuffle xor %[[LO]], %{{.*}}, %{{.*}} : i32
// CHECK: %[[LO64:.*]] = arith.extui %[[LO2]] : i32 to i64
// CHECK: %[[HI2:.*]], %{{.*}} = gpu.shuffle xor %[[HI]], %{{.*}}, %{{.*}} : i32
// CHECK: %[[HI64B:.*]] = arith.extui %[[HI2]] : i32 to i64
// CHECK: %[[HISH:.*]] = arith.shli %[[HI64B]], %{{.*}} : i64
// CHECK: %[[JOIN:.*]] = arith.ori %[[LO64]], %[[HISH]] : i64
// CHECK: %[[OTHER:.*]] = arith.bitcast %[[JOIN]] : i64 to f64
// CHECK: %[[R:.*]] = call @add(%[[V]], %[[OTHER]]) : (f64, f64) -> f64
// CHECK-NOT: gpu.shuffle
// CHECK: return %[[R]]
func.func @f64(%v: f64) -> f64 {
  %r = xla_gpu.shuffle_reduce(%v) to 1 combiner=@add : f64
  return %r : f64
}

// -----

func.func private @pick(%a: bf16, %b: i1, %c: index, %d: bf16, %e: i1, %f: index) -> (bf16, i1, index) {
  return %d, %b, %c : bf16, i1, index
}

// Narrower values are widened to i32 (floats through their bits), index
// goes through i64.
// CHECK-LABEL: func.func @narrow(
// CHECK-SAME: %[[B:[^:]*]]: bf16, %[[P:[^:]*]]: i1, %[[X:[^:]*]]: index)
// CHECK: %[[BB:.*]] = arith.bitcast %[[B]] : bf16 to i16
// CHECK: %[[BW:.*]] = arith.extui %[[BB]] : i16 to i32
// CHECK: %[[BS:.*]], %{{.*}} = gpu.shuffle xor %[[BW]], %{{.*}}, %{{.*}} : i32
// CHECK: %[[BT:.*]] = arith.trunci %[[BS]] : i32 to i16
// CHECK: %[[BO:.*]] = arith.bitcast %[[BT]] : i16 to bf16
// CHECK: %[[PW:.*]] = arith.extui %[[P]] : i1 to i32
// CHECK: %[[PS:.*]], %{{.*}} = gpu.shuffle xor %[[PW]]
// CHECK: %[[PO:.*]] = arith.trunci %[[PS]] : i32 to i1
// CHECK: %[[XI:.*]] = arith.index_cast %[[X]] : index to i64
// CHECK: gpu.shuffle xor
// CHECK: gpu.shuffle xor
// CHECK: %[[XO:.*]] = arith.index_cast %{{.*}} : i64 to index
// CHECK: call @pick(%[[B]], %[[P]], %[[X]], %[[BO]], %[[PO]], %[[XO]])
func.func @narrow(%b: bf16, %p: i1, %x: index) -> (bf16, i1, index) {
  %r:3 = xla_gpu.shuffle_reduce(%b, %p, %x) to 1 combiner=@pick : bf16, i1, index
  return %r#0, %r#1, %r#2 : bf16, i1, index
}
