"""bitcast-convert between element widths in the elemental emitter: the
narrow side has one more (minor) dimension holding a wide element's
pieces, lowest bits first. Each case runs inside a loop fusion on the cpu
target and is compared bit for bit with the reference interpreter; the
index map of the analysis is checked too."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import xla_gpu
from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.numerics import random_inputs


def _run(text: str, *args) -> np.ndarray:
    out = xla_gpu.compile(text, target="cpu").run(*args)
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)

CASES = [("u32[3,2]", "u64[3]"), ("u64[3]", "u16[3,4]"), ("f32[5]", "u8[5,4]"),
         ("s8[2,4]", "f32[2]"), ("bf16[6,2]", "s32[6]"), ("f64[2,3]", "f32[2,3,2]")]


@pytest.mark.parametrize("src,dst", CASES)
def test_matches_the_interpreter_bit_for_bit(src, dst):
    text = f"""
HloModule widths
fused {{
  p = {src} parameter(0)
  b = {dst} bitcast-convert(p)
  ROOT n = {dst} negate(b)
}}
ENTRY e {{
  p = {src} parameter(0)
  ROOT f = {dst} fusion(p), kind=kLoop, calls=fused
}}"""
    module = parse_module(text)
    args = random_inputs(module.entry, seed=0)
    want = evaluate(module, *args)[0]
    got = _run(text, *args)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def test_little_endian_pieces():
    text = """
HloModule split
ENTRY e {
  p = u32[2] parameter(0)
  ROOT b = u8[2,4] bitcast-convert(p)
}"""
    x = np.array([0x04030201, 0xDDCCBBAA], np.uint32)
    got = _run(text, x)
    np.testing.assert_array_equal(got, [[1, 2, 3, 4], [0xAA, 0xBB, 0xCC, 0xDD]])


SUB_BYTE_CASES = [("s4[3,2]", "s8[3]"), ("s4[2,4]", "f16[2]"), ("f32[3]", "u4[3,8]"),
                  ("u8[5]", "s4[5,2]"), ("s4[3,2]", "u2[3,2,2]"), ("u2[3,2]", "u4[3]"),
                  ("f4e2m1fn[3,2]", "u8[3]"), ("f8e4m3fn[4]", "s4[4,2]"),
                  ("u4[2,16]", "u64[2]")]


@pytest.mark.parametrize("src,dst", SUB_BYTE_CASES)
def test_sub_byte_widths_match_the_interpreter(src, dst):
    """4- and 2-bit types held in a byte: only their low bits are pieces."""
    text = f"""
HloModule narrow
ENTRY e {{
  p = {src} parameter(0)
  ROOT b = {dst} bitcast-convert(p)
}}"""
    module = parse_module(text)
    args = random_inputs(module.entry, seed=3)
    want = evaluate(module, *args)[0]
    got = _run(text, *args)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def test_nibbles_in_memory_order():
    """A byte's low nibble is the first s4 piece, its high nibble the
    second (the order packed 4-bit data has in memory)."""
    split = """
HloModule split
ENTRY e {
  p = u8[3] parameter(0)
  ROOT b = s4[3,2] bitcast-convert(p)
}"""
    x = np.array([0x21, 0xF7, 0x8E], np.uint8)
    want = np.array([[1, 2], [7, -1], [-2, -8]], np.int8)
    np.testing.assert_array_equal(_run(split, x).astype(np.int8), want)
    np.testing.assert_array_equal(evaluate(parse_module(split), x)[0].astype(np.int8), want)
    join = """
HloModule join
ENTRY e {
  p = u4[2,4] parameter(0)
  ROOT b = f16[2] bitcast-convert(p)
}"""
    nibbles = np.array([[0, 0, 0xC, 3], [0, 0, 0, 0xC]], ml_dtypes.uint4)
    # 0x3C00 is f16 1.0, 0xC000 is -2.0.
    np.testing.assert_array_equal(_run(join, nibbles), np.array([1.0, -2.0], np.float16))


def test_pred_widths_are_refused_clearly():
    text = """
HloModule narrow
ENTRY e {
  p = u8[3] parameter(0)
  ROOT b = pred[3,8] bitcast-convert(p)
}"""
    with pytest.raises(xla_gpu.XlaGpuError):
        xla_gpu.compile(text, target="cpu")
