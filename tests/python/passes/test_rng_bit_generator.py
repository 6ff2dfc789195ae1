"""rng-bit-generator through RngBitGeneratorExpander: the expanded
elementwise HLO (the bits one loop fusion) gives the reference interpreter's bits (XLA's Philox and
Threefry, checked there against Random123's known answers) and state, for
each output width, state size and a counter that wraps; and the expanded
form runs on the cpu target with the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes import HloDCE, RngBitGeneratorExpander, TupleSimplifier
from xla_gpu.hlo.passes import HloPassPipeline, PassContext, verify_module


def _module(algorithm: str, out: str, words: int) -> str:
    return f"""
HloModule rng
ENTRY e {{
  s = u64[{words}] parameter(0)
  ROOT r = (u64[{words}], {out}) rng-bit-generator(s), algorithm={algorithm}
}}
"""


STATES = {
    2: [np.array([0x1234_5678_9ABC_DEF0, 42], np.uint64),
        np.array([7, 2**64 - 1], np.uint64)],             # the counter wraps
    3: [np.array([7, 2**64 - 2, 4], np.uint64)],           # ... into the high word
    4: [np.array([3, 5, 9, 11], np.uint64)],
}


@pytest.mark.parametrize("algorithm", ["rng_philox", "rng_three_fry", "rng_default"])
@pytest.mark.parametrize("out", ["u32[3,5]", "u64[7]", "u8[3,3]", "s16[5]", "u32[]",
                                 "s32[3,3]", "u64[2,3]"])
@pytest.mark.parametrize("words", [2, 3, 4])
def test_expanded_bits_and_state_match_the_interpreter(algorithm, out, words):
    module = parse_module(_module(algorithm, out, words)).link()
    expanded = module.clone()
    changed = HloPassPipeline("rng", [RngBitGeneratorExpander(), TupleSimplifier(),
                                      HloDCE()]).run(expanded, PassContext(verify=True))
    verify_module(expanded)
    assert changed
    opcodes = [i.opcode for i in expanded.entry.instructions]
    assert "rng-bit-generator" not in opcodes
    assert opcodes.count("fusion") == 1          # the bits: one loop fusion
    for state in STATES[words]:
        want = evaluate(module, state)
        got = evaluate(expanded, state)
        for w, g in zip(want, got):
            assert w.dtype == g.dtype
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("algorithm,out", [("rng_philox", "u32[64,33]"),
                                           ("rng_three_fry", "u32[5,7]"),
                                           ("rng_philox", "u64[9]")])
def test_runs_on_the_cpu_target(algorithm, out):
    text = _module(algorithm, out, 2)
    state = np.array([0xDEADBEEF_12345678, 2**64 - 3], np.uint64)
    want = evaluate(parse_module(text), state)
    got = xla_gpu.compile(text, target="cpu").run(state)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(np.asarray(g), w)


# jax's rng_bit_generator on a u32[4] key: the words joined into the u64[2]
# state, the advanced state split back into words.
_JAX_KEY = """
HloModule jax_rng
ENTRY e {
  key = u32[4] parameter(0)
  words = u32[2,2] reshape(key)
  state = u64[2] bitcast-convert(words)
  r = (u64[2], u32[5,7]) rng-bit-generator(state), algorithm=rng_default
  new = u64[2] get-tuple-element(r), index=0
  split = u32[2,2] bitcast-convert(new)
  out = u32[4] reshape(split)
  bits = u32[5,7] get-tuple-element(r), index=1
  ROOT t = (u32[4], u32[5,7]) tuple(out, bits)
}
"""


def test_a_u32_key_comes_back_advanced_as_xla_cpu_gives_it():
    """rng_default is Philox: 35 words take nine counter steps of four, so
    the counter word goes 3 -> 12 and the key words stay (XLA:CPU's values
    for this key: the state and the first row of bits)."""
    key = np.array([1, 2, 3, 4], np.uint32)
    new_key, bits = xla_gpu.compile(_JAX_KEY, target="cpu", cache=False).run(key)
    want_key, want_bits = evaluate(parse_module(_JAX_KEY), key)
    np.testing.assert_array_equal(new_key, [1, 2, 12, 4])
    np.testing.assert_array_equal(want_key, [1, 2, 12, 4])
    np.testing.assert_array_equal(bits[0], [512747620, 1298009047, 1267190206, 761827841,
                                            1383286907, 1639995030, 2756207988])
    np.testing.assert_array_equal(bits, want_bits)
