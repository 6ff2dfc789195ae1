"""GemmRewriter: the dots GemmFusion leaves to the library take a bias
vector, a full-shape addend (beta * C), ReLU and jax's tanh GELU into a
`__cublas$lt$matmul` epilogue; what cuBLASLt cannot run that way (a bias
along the rows, a value read twice, other types, GEMM fusions) stays as it
was. The rewritten modules keep their values (reference interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

from xla_gpu import hlo
from xla_gpu.hlo import module_to_text, parse_module
from xla_gpu.hlo.cublas import cublas_gemm
from xla_gpu.hlo.numerics import compare, random_inputs, tolerance_type
from xla_gpu.hlo.passes import GemmRewriter, optimize


def _module(body: str, params: str, t: str = "f32", m: int = 8, k: int = 16,
            n: int = 12, out_layout: str = "{1,0}") -> str:
    """A module with x: t[m,k], w: t[k,n], `params` and d = dot(x, w);
    `body` ends in the ROOT."""
    return (f"HloModule m\nENTRY e {{\n  x = {t}[{m},{k}] parameter(0)\n"
            f"  w = {t}[{k},{n}] parameter(1)\n{params}"
            f"  d = {t}[{m},{n}]{out_layout} dot(x, w), lhs_contracting_dims={{1}}, "
            f"rhs_contracting_dims={{0}}\n{body}}}\n")


BIAS = "  b = f32[12] parameter(2)\n"
BIAS_ADD = ("  bb = f32[8,12] broadcast(b), dimensions={1}\n"
            "  z = f32[8,12] add(d, bb)\n")


def _relu(x: str) -> str:
    return ("  zero = f32[] constant(0)\n"
            "  zz = f32[8,12] broadcast(zero), dimensions={}\n"
            f"  ROOT r = f32[8,12] maximum({x}, zz)\n")


def _gelu(x: str, t: str = "f32", shape: str = "[8,12]", c1: str = "0.797884583",
          c2: str = "0.044715") -> str:
    """jax.nn.gelu(approximate=True) of `x` as jax 0.10.2 lowers it."""
    s = f"{t}{shape}"
    return (f"  p2 = {s} multiply({x}, {x})\n"
            f"  p3 = {s} multiply(p2, {x})\n"
            f"  c2 = {t}[] constant({c2})\n  bc2 = {s} broadcast(c2), dimensions={{}}\n"
            f"  m1 = {s} multiply(p3, bc2)\n"
            f"  a1 = {s} add({x}, m1)\n"
            f"  c1 = {t}[] constant({c1})\n  bc1 = {s} broadcast(c1), dimensions={{}}\n"
            f"  m2 = {s} multiply(a1, bc1)\n"
            f"  th = {s} tanh(m2)\n"
            f"  one = {t}[] constant(1)\n  bone = {s} broadcast(one), dimensions={{}}\n"
            f"  a2 = {s} add(th, bone)\n"
            f"  half = {t}[] constant(0.5)\n  bhalf = {s} broadcast(half), dimensions={{}}\n"
            f"  m3 = {s} multiply(a2, bhalf)\n"
            f"  ROOT g = {s} multiply({x}, m3)\n")


def _rewrite(text: str):
    """(the original module, the rewritten one, the custom calls in it),
    the values checked against the original's."""
    module = parse_module(text)
    result = parse_module(text)
    GemmRewriter().run(result)
    reparsed = parse_module(module_to_text(result))   # prints and reads back
    _check_values(module, reparsed)
    calls = [i for i in reparsed.entry.instructions if i.opcode == "custom-call"]
    return module, reparsed, calls


def _check_values(module, result, seed: int = 0):
    args = random_inputs(module.entry, seed)
    want = hlo.evaluate(module, *args)
    got = hlo.evaluate(result, *args)
    leaves = module.entry.root.shape.leaves()
    for k, (g, w, s) in enumerate(zip(got, want, leaves)):
        mismatch = compare(np.asarray(g), np.asarray(w), s.element_type, k,
                           tolerance_type(module.entry, s.element_type), True)
        assert mismatch is None, str(mismatch)


def _only_call(calls):
    assert len(calls) == 1, calls
    (call,) = calls
    assert call.attrs["custom_call_target"] == "__cublas$lt$matmul"
    return call, cublas_gemm(call)


# -- what is absorbed ---------------------------------------------------------------------


def test_bias_vector_along_the_columns():
    _, result, calls = _rewrite(_module(BIAS_ADD.replace("  z =", "  ROOT z ="), BIAS))
    call, gemm = _only_call(calls)
    assert gemm.epilogue == "BIAS" and gemm.beta == 0
    assert [o.name for o in call.operands] == ["x", "w", "b"]
    assert result.entry.root is call
    assert not any(i.opcode in ("dot", "add", "broadcast") for i in result.entry.instructions)


def test_relu():
    _, _, calls = _rewrite(_module(_relu("d"), ""))
    _, gemm = _only_call(calls)
    assert gemm.epilogue == "RELU" and gemm.operand_count == 2


def test_bias_then_relu():
    _, result, calls = _rewrite(_module(BIAS_ADD + _relu("z"), BIAS))
    call, gemm = _only_call(calls)
    assert gemm.epilogue == "BIAS_RELU" and result.entry.root is call
    assert [i.opcode for i in result.entry.instructions].count("maximum") == 0


def test_gelu():
    _, result, calls = _rewrite(_module(_gelu("d"), ""))
    call, gemm = _only_call(calls)
    assert gemm.epilogue == "GELU" and result.entry.root is call
    assert {i.opcode for i in result.entry.instructions} == {"parameter", "custom-call"}


def test_bias_then_gelu():
    _, result, calls = _rewrite(_module(BIAS_ADD + _gelu("z"), BIAS))
    call, gemm = _only_call(calls)
    assert gemm.epilogue == "BIAS_GELU" and result.entry.root is call
    assert {i.opcode for i in result.entry.instructions} == {"parameter", "custom-call"}


def test_bf16_bias_gelu_with_constants_rounded_to_bf16():
    """jax writes the GELU constants in the computation's type (0.7969,
    0.04468 in bf16): still GELU; the values agree within bf16's
    tolerance (the epilogue rounds once, in f32)."""
    text = _module(BIAS_ADD.replace("f32", "bf16") + _gelu("z", "bf16", c1="0.7969",
                                                           c2="0.04468"),
                   BIAS.replace("f32", "bf16"), t="bf16")
    _, _, calls = _rewrite(text)
    _, gemm = _only_call(calls)
    assert gemm.epilogue == "BIAS_GELU"


def test_full_shape_addend_is_beta_c():
    """A computed addend read only by the add: C with beta 1, its buffer
    the output's (output_to_operand_aliasing); then the bias and relu."""
    params = BIAS + "  p = f32[8,12] parameter(3)\n  c = f32[8,12] exponential(p)\n"
    body = ("  y = f32[8,12] add(c, d)\n"
            "  bb = f32[8,12] broadcast(b), dimensions={1}\n"
            "  z = f32[8,12] add(y, bb)\n" + _relu("z"))
    _, _, calls = _rewrite(_module(body, params))
    call, gemm = _only_call(calls)
    assert gemm.beta == 1 and gemm.epilogue == "BIAS_RELU"
    assert [o.name for o in call.operands] == ["x", "w", "c", "b"]
    assert call.attrs["output_to_operand_aliasing"] == "{{}: (2, {})}"


def test_parameter_addend_is_not_aliased():
    params = "  p = f32[8,12] parameter(2)\n"
    _, _, calls = _rewrite(_module("  ROOT y = f32[8,12] add(d, p)\n", params))
    call, gemm = _only_call(calls)
    assert gemm.beta == 1 and gemm.epilogue == "DEFAULT"
    assert "output_to_operand_aliasing" not in call.attrs


def test_batched_dot_takes_a_bias_along_its_columns():
    text = """HloModule m
ENTRY e {
  x = f32[3,8,16] parameter(0)
  w = f32[3,16,12] parameter(1)
  b = f32[12] parameter(2)
  d = f32[3,8,12] dot(x, w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  bb = f32[3,8,12] broadcast(b), dimensions={2}
  z = f32[3,8,12] add(d, bb)
  zero = f32[] constant(0)
  zz = f32[3,8,12] broadcast(zero), dimensions={}
  ROOT r = f32[3,8,12] maximum(z, zz)
}
"""
    _, _, calls = _rewrite(text)
    _, gemm = _only_call(calls)
    assert gemm.epilogue == "BIAS_RELU" and gemm.lhs_batch == (0,)


def test_a_pre_activation_read_elsewhere_keeps_the_activation_out():
    """The GELU's input is also an output: the bias is absorbed (the call
    gives the pre-activation), the GELU stays elementwise (no GELU_AUX)."""
    body = BIAS_ADD + _gelu("z").replace("ROOT g =", "g =") + \
        "  ROOT t = (f32[8,12], f32[8,12]) tuple(g, z)\n"
    _, result, calls = _rewrite(_module(body, BIAS))
    call, gemm = _only_call(calls)
    assert gemm.epilogue == "BIAS"
    assert "tanh" in [i.opcode for i in result.entry.instructions]


# -- what stays as it was ---------------------------------------------------------------


def _unchanged(text: str) -> None:
    module = parse_module(text)
    before = module_to_text(module)
    assert not GemmRewriter().run(module)
    assert module_to_text(module) == before


def test_bias_along_the_rows_is_not_a_bias_epilogue():
    params = "  b = f32[8] parameter(2)\n"
    body = ("  bb = f32[8,12] broadcast(b), dimensions={0}\n"
            "  ROOT z = f32[8,12] add(d, bb)\n")
    _unchanged(_module(body, params))


def test_bias_along_a_column_major_output_is_refused():
    """cuBLASLt's bias needs the row-major result the runtime computes
    transposed; a column-major dot output has its rows contiguous."""
    body = ("  bb = f32[8,12]{0,1} broadcast(b), dimensions={1}\n"
            "  ROOT z = f32[8,12]{0,1} add(d, bb)\n")
    _unchanged(_module(body, BIAS, out_layout="{0,1}"))


def test_a_product_read_twice_stays_a_dot():
    body = BIAS_ADD + "  ROOT t = (f32[8,12], f32[8,12]) tuple(z, d)\n"
    _unchanged(_module(body, BIAS))


def test_a_sum_read_twice_keeps_the_relu_out():
    body = BIAS_ADD + _relu("z").replace("ROOT r =", "r =") + \
        "  ROOT t = (f32[8,12], f32[8,12]) tuple(r, z)\n"
    _, result, calls = _rewrite(_module(body, BIAS))
    _, gemm = _only_call(calls)
    assert gemm.epilogue == "BIAS"
    assert "maximum" in [i.opcode for i in result.entry.instructions]


def test_an_addend_read_elsewhere_is_not_c():
    params = "  p = f32[8,12] parameter(2)\n"
    body = ("  y = f32[8,12] add(d, p)\n"
            "  ROOT t = (f32[8,12], f32[8,12]) tuple(y, p)\n")
    _unchanged(_module(body, params))


@pytest.mark.parametrize("t", ["s32", "c64"])
def test_types_without_epilogues(t):
    body = (f"  bb = {t}[8,12] broadcast(b), dimensions={{1}}\n"
            f"  ROOT z = {t}[8,12] add(d, bb)\n")
    _unchanged(_module(body, f"  b = {t}[12] parameter(2)\n", t=t))


def test_an_add_after_a_convert_is_not_absorbed():
    """The bias is added in another type than the product's."""
    text = """HloModule m
ENTRY e {
  x = bf16[8,16] parameter(0)
  w = bf16[16,12] parameter(1)
  b = f32[12] parameter(2)
  d = bf16[8,12] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  f = f32[8,12] convert(d)
  bb = f32[8,12] broadcast(b), dimensions={1}
  ROOT z = f32[8,12] add(f, bb)
}
"""
    _unchanged(text)


def test_a_gelu_with_another_constant_is_not_gelu():
    _unchanged(_module(_gelu("d", c2="0.05"), ""))


def test_gemm_fusions_are_left_alone():
    """A dot GemmFusion made a __triton_gemm fusion (small, or on cuda any
    size) is the fusion's; the rewriter only sees the dots it left."""
    text = _module(BIAS_ADD + _relu("z"), BIAS)
    fused = optimize(parse_module(text))
    opcodes = [i.opcode for i in fused.entry.instructions]
    assert "custom-call" not in opcodes and "fusion" in opcodes
    assert "__triton_gemm" in module_to_text(fused)
    # The same module with GemmFusion bounded below the dot's size: the
    # gemm with its epilogue, nothing else.
    left = optimize(parse_module(text), gemm_fusion_max_multiply_adds=16)
    assert sorted(i.opcode for i in left.entry.instructions) == \
        ["custom-call", "parameter", "parameter", "parameter"]
    _check_values(parse_module(text), left)
