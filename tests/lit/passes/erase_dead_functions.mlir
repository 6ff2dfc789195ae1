// xla-erase-dead-functions keeps what public functions reach.
// RUN: xla-gpu-opt %s --xla-erase-dead-functions | FileCheck %s

// CHECK-NOT: @dead
// CHECK-DAG: func.func private @leaf
// CHECK-DAG: func.func private @called
// CHECK-DAG: func.func @main
// A shuffle_reduce names its combiner without calling it: it stays.
// CHECK-DAG: func.func private @combiner
// CHECK-DAG: func.func @warp
func.func private @dead(%x: f32) -> f32 {
  return %x : f32
}
func.func private @leaf(%x: f32) -> f32 {
  return %x : f32
}
func.func private @called(%x: f32) -> f32 {
  %0 = func.call @leaf(%x) : (f32) -> f32
  return %0 : f32
}
func.func @main(%x: f32) -> f32 {
  %0 = xla_gpu.pure_call @called(%x) : (f32) -> f32
  return %0 : f32
}
func.func private @combiner(%a: f32, %b: f32) -> f32 {
  %s = arith.addf %a, %b : f32
  return %s : f32
}
func.func @warp(%x: f32) -> f32 {
  %r = xla_gpu.shuffle_reduce(%x) to 16 combiner=@combiner : f32
  return %r : f32
}
