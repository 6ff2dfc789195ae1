// xla-approximate-host-math (cpu target): f32 exp, expm1, log, log1p, tanh
// and erf, scalar or vector, become arithmetic that LLVM vectorizes (no
// libm call); f64 and the other math functions are left to libm.
// RUN: xla-gpu-opt %s --xla-approximate-host-math | FileCheck %s

// exp: the Cody-Waite reduction (floor of x log2 e + 1/2), the series,
// 2^k built from the exponent bits in two steps.
// CHECK-LABEL: func.func @exp(
// CHECK-NOT: math.exp
// CHECK: math.floor
// CHECK: arith.fptosi %{{.*}} : f32 to i32
// CHECK: arith.shli
// CHECK: arith.bitcast %{{.*}} : i32 to f32
// CHECK: arith.mulf {{.*}} fastmath<contract>
// CHECK-NOT: math.exp
// CHECK: return
func.func @exp(%x: f32) -> f32 {
  %y = math.exp %x : f32
  return %y : f32
}

// Vectors keep their shape; constants are splats. tanh: |x| clamped to 9,
// x P(x^2) / Q(x^2), no reduction step.
// CHECK-LABEL: func.func @tanh_vector(
// CHECK-NOT: math.tanh
// CHECK: arith.constant dense<9.000000e+00> : vector<8xf32>
// CHECK-NOT: math.floor
// CHECK: arith.divf %{{.*}} : vector<8xf32>
// CHECK-NOT: math.floor
// CHECK: math.copysign %{{.*}} : vector<8xf32>
// CHECK-NOT: math.tanh
func.func @tanh_vector(%x: vector<8xf32>) -> vector<8xf32> {
  %y = math.tanh %x : vector<8xf32>
  return %y : vector<8xf32>
}

// log: subnormals scaled by 2^23, the mantissa and exponent from the bits,
// special cases selected at the end (+inf, 0 -> -inf, negative -> NaN).
// CHECK-LABEL: func.func @log(
// CHECK-NOT: math.log
// CHECK: arith.constant 0x4B000000 : f32
// CHECK: arith.andi %{{.*}} : i32
// CHECK: arith.divf
// CHECK: arith.constant 0x7F800000 : f32
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: arith.constant 0x7FC00000 : f32
// CHECK: arith.cmpf ult
// CHECK-NOT: math.log
func.func @log(%x: f32) -> f32 {
  %y = math.log %x : f32
  return %y : f32
}

// expm1 and log1p: no cancellation near 0 (no libm either).
// CHECK-LABEL: func.func @near_zero(
// CHECK-NOT: math.expm1
// CHECK-NOT: math.log1p
// CHECK-NOT: math.erf
// CHECK: return
func.func @near_zero(%x: f32) -> (f32, f32, f32) {
  %a = math.expm1 %x : f32
  %b = math.log1p %x : f32
  %c = math.erf %x : f32
  return %a, %b, %c : f32, f32, f32
}

// f64, and functions without an approximation here, stay as they are.
// CHECK-LABEL: func.func @untouched(
// CHECK: math.exp %{{.*}} : f64
// CHECK: math.tanh %{{.*}} : f64
// CHECK: math.sin %{{.*}} : f32
// CHECK: math.powf %{{.*}} : f32
func.func @untouched(%d: f64, %x: f32) -> (f64, f64, f32, f32) {
  %a = math.exp %d : f64
  %b = math.tanh %d : f64
  %c = math.sin %x : f32
  %e = math.powf %x, %x : f32
  return %a, %b, %c, %e : f64, f64, f32, f32
}
