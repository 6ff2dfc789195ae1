func.func @ok() {
  return
}
// -----
func.func @bad(%a: index) -> f32 {
  %0 = xla_gpu.pure_call @nope(%a) : (index) -> f32
  return %0 : f32
}
