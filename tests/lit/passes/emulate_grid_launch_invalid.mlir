// Launch dimensions beyond the kernel's xla.range are refused.
// RUN: xla-gpu-opt %s --xla-emulate-grid="threads=256" --verify-diagnostics

// expected-error @+1 {{xla-emulate-grid: kernel @kernel: threads=256 exceeds the xla.range of the kernel's ids, which allows 128}}
func.func @kernel() {
  %t = gpu.thread_id x {xla.range = [0 : index, 127 : index]}
  return
}
