// A loop whose symbol range is unbounded cannot become an scf.for.
// RUN: xla-gpu-opt %s --xla-lower-xla-loops-to-scf --verify-diagnostics

func.func @unbounded(%a: index) {
  // expected-error @+1 {{cannot be lowered to scf: a symbol's range reaches INT64_MAX}}
  xla_gpu.loop (%a)[%i] -> (%x) in #xla_gpu.indexing_map<"(d0)[s0] -> (d0 + s0), domain: d0 in [0, 9], s0 in [0, 9223372036854775807]"> {
  }
  return
}
