"""The elemental emitter computes each instruction once per index in a
function, however it is reached."""

from __future__ import annotations

from xla_gpu import emitters, ir

# `add` reads `e` directly and through `n` -> `r` (a reshape: not
# elementwise, so not on the chain emitted operands-first). Emitting the
# chain's first node `n` reaches `e` through the reshape at the same index,
# before the chain comes to `e` itself.
REACHED_MEANWHILE = """
HloModule m
fused {
  p = f32[64] parameter(0)
  e = f32[64] exponential(p)
  r = f32[64] reshape(e)
  n = f32[64] negate(r)
  ROOT a = f32[64] add(n, e)
}
"""


def test_an_operand_emitted_through_another_path_is_not_emitted_again():
    text = str(emitters.emit(REACHED_MEANWHILE, ir.Context()).module)
    assert text.count("func.func private") == 1
    assert text.count("math.exp") == 1
    assert text.count("arith.negf") == 1
