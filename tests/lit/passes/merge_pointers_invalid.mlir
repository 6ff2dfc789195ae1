// Two arguments in one slice must have one type.
// RUN: xla-gpu-opt %s --xla-merge-pointers --verify-diagnostics

// expected-error @+1 {{arguments #0 and #1 share slice 0 : i64 but have different types}}
func.func @kernel(%a: tensor<8xf32> {xla.slice_index = 0 : i64},
                  %b: tensor<4xf32> {xla.slice_index = 0 : i64}) {
  return
}
