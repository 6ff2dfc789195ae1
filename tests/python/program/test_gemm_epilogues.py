"""Whole programs whose dots stay library GEMMs run their bias / ReLU /
GELU / addend as the gemm thunk's cuBLASLt epilogue (GemmRewriter). On
cuda (GEMM fusion off, so that the dot is the library's) the compile
plans the epilogue on cuBLASLt: one gemm thunk. The cpu target leaves the
pass out by default (its compiled elementwise kernel is faster than numpy
in the thunk) but runs the module the pipeline makes with it: one gemm
thunk and no kernel, values against the reference interpreter on the
original program (f32 and bf16, inputs as XLA's harness makes them)."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.hlo.cublas import cublas_gemm
from xla_gpu.hlo.numerics import compare, random_inputs, tolerance_type
from xla_gpu.hlo.passes import optimize
from xla_gpu.program.prepare import HOST_GEMM_KERNEL_MAX_MACS
from xla_gpu.runtime.thunks import walk

M, K, N = 128, 256, 192   # 6.3M multiply-adds: past the cpu target's GEMM kernel bound


def _types(t: str) -> dict:
    return {"t": t, "M": M, "K": K, "N": N}


# jax.jit(lambda x, w, b: jax.nn.relu(x @ w + b)) as jax 0.10.2 prints it.
MLP = """HloModule jit_mlp, entry_computation_layout={{({t}[{M},{K}]{{1,0}}, {t}[{K},{N}]{{1,0}}, {t}[{N}]{{0}})->{t}[{M},{N}]{{1,0}}}}

relu.1 {{
  Arg_0.1 = {t}[{M},{N}]{{1,0}} parameter(0)
  constant.1 = {t}[] constant(0)
  max.2 = {t}[{M},{N}]{{1,0}} broadcast(constant.1), dimensions={{}}
  ROOT max.3 = {t}[{M},{N}]{{1,0}} maximum(Arg_0.1, max.2)
}}

ENTRY main.2 {{
  x.1 = {t}[{M},{K}]{{1,0}} parameter(0)
  w.1 = {t}[{K},{N}]{{1,0}} parameter(1)
  dot_general.1 = {t}[{M},{N}]{{1,0}} dot(x.1, w.1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  b.1 = {t}[{N}]{{0}} parameter(2)
  broadcast_in_dim.1 = {t}[1,{N}]{{1,0}} reshape(b.1)
  add.4 = {t}[1,{N}]{{1,0}} broadcast(broadcast_in_dim.1), dimensions={{0,1}}
  add.5 = {t}[{N}]{{0}} reshape(add.4)
  add.6 = {t}[{M},{N}]{{1,0}} broadcast(add.5), dimensions={{1}}
  add.7 = {t}[{M},{N}]{{1,0}} add(dot_general.1, add.6)
  ROOT jit_relu_.1 = {t}[{M},{N}]{{1,0}} call(add.7), to_apply=relu.1
}}
"""

# jax.jit(lambda x, w, b: jax.nn.gelu(x @ w + b)) (approximate=True).
GELU = """HloModule jit_gelu, entry_computation_layout={{({t}[{M},{K}]{{1,0}}, {t}[{K},{N}]{{1,0}}, {t}[{N}]{{0}})->{t}[{M},{N}]{{1,0}}}}

ENTRY main.1 {{
  x.1 = {t}[{M},{K}]{{1,0}} parameter(0)
  w.1 = {t}[{K},{N}]{{1,0}} parameter(1)
  dot_general.1 = {t}[{M},{N}]{{1,0}} dot(x.1, w.1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  b.1 = {t}[{N}]{{0}} parameter(2)
  broadcast_in_dim.1 = {t}[1,{N}]{{1,0}} reshape(b.1)
  add.8 = {t}[1,{N}]{{1,0}} broadcast(broadcast_in_dim.1), dimensions={{0,1}}
  add.9 = {t}[{N}]{{0}} reshape(add.8)
  add.10 = {t}[{M},{N}]{{1,0}} broadcast(add.9), dimensions={{1}}
  add.11 = {t}[{M},{N}]{{1,0}} add(dot_general.1, add.10)
  integer_pow.2 = {t}[{M},{N}]{{1,0}} multiply(add.11, add.11)
  integer_pow.3 = {t}[{M},{N}]{{1,0}} multiply(integer_pow.2, add.11)
  constant.7 = {t}[] constant({c2})
  mul.9 = {t}[{M},{N}]{{1,0}} broadcast(constant.7), dimensions={{}}
  mul.10 = {t}[{M},{N}]{{1,0}} multiply(integer_pow.3, mul.9)
  add.12 = {t}[{M},{N}]{{1,0}} add(add.11, mul.10)
  constant.6 = {t}[] constant({c1})
  mul.8 = {t}[{M},{N}]{{1,0}} broadcast(constant.6), dimensions={{}}
  mul.11 = {t}[{M},{N}]{{1,0}} multiply(add.12, mul.8)
  tanh.1 = {t}[{M},{N}]{{1,0}} tanh(mul.11)
  constant.5 = {t}[] constant(1)
  add.7 = {t}[{M},{N}]{{1,0}} broadcast(constant.5), dimensions={{}}
  add.13 = {t}[{M},{N}]{{1,0}} add(tanh.1, add.7)
  constant.4 = {t}[] constant(0.5)
  mul.7 = {t}[{M},{N}]{{1,0}} broadcast(constant.4), dimensions={{}}
  mul.12 = {t}[{M},{N}]{{1,0}} multiply(add.13, mul.7)
  ROOT mul.13 = {t}[{M},{N}]{{1,0}} multiply(add.11, mul.12)
}}
"""

# jax.jit(lambda x, w, c: x @ w + jnp.exp(c)): a computed full-shape addend.
ADDEND = """HloModule jit_addend

ENTRY main.1 {{
  x.1 = {t}[{M},{K}]{{1,0}} parameter(0)
  w.1 = {t}[{K},{N}]{{1,0}} parameter(1)
  dot_general.1 = {t}[{M},{N}]{{1,0}} dot(x.1, w.1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  c.1 = {t}[{M},{N}]{{1,0}} parameter(2)
  exp.1 = {t}[{M},{N}]{{1,0}} exponential(c.1)
  ROOT add.1 = {t}[{M},{N}]{{1,0}} add(dot_general.1, exp.1)
}}
"""

# jax's GELU constants in each type.
_GELU_CONSTANTS = {"f32": {"c1": "0.797884583", "c2": "0.044715"},
                   "bf16": {"c1": "0.7969", "c2": "0.04468"}}

# (template, epilogue, beta, the thunks: the addend's exp is a kernel of
# its own, written where the gemm then reads C and writes its result).
CASES = {"bias_relu": (MLP, "BIAS_RELU", 0, ["gemm"]),
         "bias_gelu": (GELU, "BIAS_GELU", 0, ["gemm"]),
         "addend": (ADDEND, "DEFAULT", 1, ["kernel", "gemm"])}


def _text(case: str, t: str) -> str:
    template = CASES[case][0]
    return template.format(**_types(t), **_GELU_CONSTANTS[t])


def _gemms(exe) -> list:
    return [t for t in walk(exe.thunks) if t.kind == "gemm"]


def _kinds(exe) -> list[str]:
    return [t.kind for t in walk(exe.thunks) if t.kind != "command_buffer"]


def _check(exe, text: str, seed: int = 0) -> None:
    module = hlo.parse_module(text)
    args = random_inputs(module.entry, seed)
    (got,) = exe.run(*args)
    (want,) = hlo.evaluate(module, *args)
    t = module.entry.root.shape.element_type
    mismatch = compare(np.asarray(got), np.asarray(want), t, 0,
                       tolerance_type(module.entry, t), True)
    assert mismatch is None, str(mismatch)


@pytest.mark.parametrize("t", ["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_epilogue_runs_in_the_gemm_thunk(case, t):
    text = _text(case, t)
    module = optimize(hlo.parse_module(text),
                      gemm_fusion_max_multiply_adds=HOST_GEMM_KERNEL_MAX_MACS)
    exe = xla_gpu.compile(hlo.module_to_text(module), target="cpu", cache=False)
    _, epilogue, beta, kinds = CASES[case]
    assert _kinds(exe) == kinds, exe.thunk_sequence_text()
    (gemm,) = _gemms(exe)
    assert gemm.config.epilogue == epilogue and gemm.config.beta == beta
    if beta:   # C's buffer is the output's (output_to_operand_aliasing)
        assert gemm.config.c.slice == gemm.config.out.slice
    assert "__cublas$lt$matmul" in exe.as_text()
    _check(exe, text)
    _check(exe, text, seed=3)


@pytest.mark.parametrize("t", ["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_compile_plans_the_epilogue_on_cublaslt(case, t, monkeypatch):
    """With GEMM fusion off every dot is the library's on cuda too: one
    gemm thunk whose cuBLASLt plan (built at compile time, no GPU needed)
    takes the epilogue."""
    monkeypatch.setenv("XLA_GPU_GEMM_FUSION", "0")
    exe = xla_gpu.compile(_text(case, t), target="cuda", cache=False)
    assert _kinds(exe) == CASES[case][3], exe.thunk_sequence_text()
    (gemm,) = _gemms(exe)
    assert gemm.config.epilogue == CASES[case][1]


def test_the_cpu_target_keeps_its_epilogue_kernel():
    """By default the cpu target compiles the dot's epilogue as a kernel
    after the BLAS product."""
    text = _text("bias_relu", "f32")
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert _kinds(exe) == ["gemm", "kernel"], exe.thunk_sequence_text()
    assert "__cublas$lt$matmul" not in exe.as_text()
    _check(exe, text)


# A product accumulated into loop state (C a get-tuple-element of the
# body's parameter), then once more after the loop.
ACCUMULATE = """HloModule loop

body {
  p = (s32[], f32[128,256], f32[256,192], f32[128,192]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[128,256] get-tuple-element(p), index=1
  w = f32[256,192] get-tuple-element(p), index=2
  acc = f32[128,192] get-tuple-element(p), index=3
  d = f32[128,192] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[128,192] add(d, acc)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[128,256], f32[256,192], f32[128,192]) tuple(j, x, w, s)
}

cond {
  p = (s32[], f32[128,256], f32[256,192], f32[128,192]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY e {
  x = f32[128,256] parameter(0)
  w = f32[256,192] parameter(1)
  c = f32[128,192] parameter(2)
  e = f32[128,192] exponential(c)
  zero = s32[] constant(0)
  init = (s32[], f32[128,256], f32[256,192], f32[128,192]) tuple(zero, x, w, e)
  l = (s32[], f32[128,256], f32[256,192], f32[128,192]) while(init), condition=cond, body=body
  r = f32[128,192] get-tuple-element(l), index=3
  d2 = f32[128,192] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = f32[128,192] add(d2, r)
}
"""


def test_an_accumulator_in_loop_state_is_c_and_read_only():
    module = optimize(hlo.parse_module(ACCUMULATE),
                      gemm_fusion_max_multiply_adds=HOST_GEMM_KERNEL_MAX_MACS)
    text = hlo.module_to_text(module)
    calls = [i for c in module.computations for i in c.instructions
             if i.opcode == "custom-call"]
    assert len(calls) == 2 and all(cublas_gemm(i).beta == 1 for i in calls)
    # Loop state and a loop result are not written over by the call.
    assert not any("output_to_operand_aliasing" in i.attrs for i in calls)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert [t.kind for t in _gemms(exe)] == ["gemm", "gemm"]
    _check(exe, ACCUMULATE)
    _check(exe, ACCUMULATE, seed=5)
    xla_gpu.compile(text, target="cuda", cache=False)
