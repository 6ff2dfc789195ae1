// The error must point at 'zz' (line 3, column 75).

func.func private @f() attributes {m = #xla_gpu.indexing_map<"(a) -> (a + zz), domain: a in [0, 1]">}
