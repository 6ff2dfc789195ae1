// Element types xla-lower-tensors cannot update atomically.
// RUN: xla-gpu-opt %s --split-input-file --xla-lower-tensors --verify-diagnostics

func.func @i4(%t: tensor<64xi4>, %j: index, %v: i4) -> tensor<64xi4> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op xla-lower-tensors: no atomic update of 'i4' elements (8, 16, 32 or 64 bits, or complex<f64>)}}
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<64xi4> {
  ^bb0(%c: i4):
    xla_gpu.yield %v : i4
  }
  return %r : tensor<64xi4>
}

// -----

func.func @i128(%t: tensor<4xi128>, %j: index, %v: i128) -> tensor<4xi128> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op xla-lower-tensors: no atomic update of 'i128' elements (8, 16, 32 or 64 bits, or complex<f64>)}}
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<4xi128> {
  ^bb0(%c: i128):
    %s = arith.muli %c, %v : i128
    xla_gpu.yield %s : i128
  }
  return %r : tensor<4xi128>
}

// -----

// A vector region no hardware atomic does (a product): refused, not a CAS
// loop per lane.
func.func @lanes_product(%t: tensor<16xf32>, %j: index, %v: vector<4xf32>) -> tensor<16xf32> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op on a vector of elements needs a region that one hardware atomic does (an add, min, max, or, and, xor or exchange of 32- or 64-bit elements)}}
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<16xf32> {
  ^bb0(%c: vector<4xf32>):
    %n = arith.mulf %c, %v : vector<4xf32>
    xla_gpu.yield %n : vector<4xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Lanes of 16-bit elements: refused (no word-wide lanes).
func.func @lanes_f16(%t: tensor<16xf16>, %j: index, %v: vector<2xf16>) -> tensor<16xf16> {
  // expected-error @+1 {{'xla_gpu.atomic_rmw' op on a vector of elements needs a region that one hardware atomic does}}
  %r = xla_gpu.atomic_rmw %t[%j] : tensor<16xf16> {
  ^bb0(%c: vector<2xf16>):
    %n = arith.addf %c, %v : vector<2xf16>
    xla_gpu.yield %n : vector<2xf16>
  }
  return %r : tensor<16xf16>
}
