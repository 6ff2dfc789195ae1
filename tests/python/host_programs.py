"""HLO programs the cpu target's host-code tests share (the linking of
kernels into libraries, their batching into LLVM modules)."""

# Three kernels: a loop fusion, a reduction and the broadcast of its result.
THREE = """HloModule three
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  t = f32[64] tanh(x)
  n = f32[64] negate(t)
  z = f32[] constant(0)
  r = f32[] reduce(y, z), dimensions={0}, to_apply=add
  rb = f32[64] broadcast(r), dimensions={}
  ROOT o = (f32[64], f32[64]) tuple(n, rb)
}
"""

# A tanh-negate kernel as a single fusion.
FUSED_TANH_NEGATE = """HloModule fused_tanh_negate
fused {
  p = f32[64] parameter(0)
  t = f32[64] tanh(p)
  ROOT n = f32[64] negate(t)
}
ENTRY e {
  p = f32[64] parameter(0)
  ROOT f = f32[64] fusion(p), kind=kLoop, calls=fused
}
"""
