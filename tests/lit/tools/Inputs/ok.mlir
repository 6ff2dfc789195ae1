func.func @f(%a: index) -> index {
  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(d0) -> (d0 * 2), domain: d0 in [0, 7]">(%a)
  return %0 : index
}
