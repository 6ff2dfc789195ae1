func.func @f(%t: tensor<4294967296x2147483648xf32>, %i: index, %j: index) -> f32 {
  %v = tensor.extract %t[%i, %j] : tensor<4294967296x2147483648xf32>
  return %v : f32
}
