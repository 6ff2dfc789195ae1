"""Which type's tolerance applies to an output: the least precise float
type the computation computes in, and TF32 for a GPU's f32 dots and
convolutions below HIGHEST precision (as XLA:GPU computes them; the first
H200 run's five f32-dot programs differed from XLA:CPU by TF32's rounding)."""

import numpy as np
import pytest

from xla_gpu import hlo
from xla_gpu.hlo.numerics import TOLERANCES, compare, tolerance_type

DOT = """HloModule m
ENTRY e {
  a = TYPE[4,8] parameter(0)
  b = TYPE[8,3] parameter(1)
  ROOT d = TYPE[4,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}PRECISION
}
"""


def _entry(element_type: str, precision: str = ""):
    text = DOT.replace("TYPE", element_type).replace("PRECISION", precision)
    return hlo.parse_module(text).entry


def test_f32_dots_on_a_gpu_take_tf32s_tolerance():
    comp = _entry("f32")
    assert tolerance_type(comp, "f32") == "f32"
    assert tolerance_type(comp, "f32", tf32=True) == "tf32"
    assert TOLERANCES["tf32"][0] > TOLERANCES["f32"][0]


def test_highest_precision_keeps_f32():
    comp = _entry("f32", ", operand_precision={highest,highest}")
    assert tolerance_type(comp, "f32", tf32=True) == "f32"


@pytest.mark.parametrize("element_type, expected", [("bf16", "bf16"), ("f64", "f64")])
def test_other_types_keep_their_own(element_type, expected):
    assert tolerance_type(_entry(element_type), element_type, tf32=True) == expected


def test_tf32_rounding_passes_tf32s_tolerance_and_fails_f32s():
    rng = np.random.default_rng(0)
    a = rng.uniform(-2, 2, (64, 256)).astype(np.float32)
    b = rng.uniform(-2, 2, (256, 64)).astype(np.float32)

    def to_tf32(x):  # keep 10 of the 23 mantissa bits, rounding to nearest
        bits = x.view(np.uint32)
        return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)

    exact = a @ b
    gpu = to_tf32(a) @ to_tf32(b)
    assert compare(gpu, exact, "f32", tolerance_of="f32", scale_relative=True) is not None
    assert compare(gpu, exact, "f32", tolerance_of="tf32", scale_relative=True) is None
