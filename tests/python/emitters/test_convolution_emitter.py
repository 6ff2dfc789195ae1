"""The direct-convolution emitter (xla_gpu.emitters.convolution): HLO
convolutions of the stored programs and XLA-style window configurations,
XLA:GPU's cuDNN convolution custom calls (alone and in whole programs),
layouts, integer and bf16 types, PTX for sm_90, and clear errors — all on
the cpu target against the reference interpreter."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo, op_kernels
from xla_gpu.hlo.passes.convolution_lowering import lower_convolution
from xla_gpu.errors import HloError, UnsupportedError
from xla_gpu.hlo import HloComputation, HloInstruction
from xla_gpu.runtime.thunks import walk


def _alone(inst: HloInstruction) -> HloComputation:
    """`inst` over parameters: a computation the interpreter evaluates."""
    params = [HloInstruction(f"p{k}", "parameter", o.shape, [], {}, None, k)
              for k, o in enumerate(inst.operands)]
    root = inst.clone_with(params)
    return HloComputation("alone", params + [root], root).link_instructions()


def _inputs(inst: HloInstruction, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for o in inst.operands:
        t = o.shape.element_type
        if t.startswith("s") or t.startswith("u"):
            out.append(rng.integers(-8, 8, o.shape.dims).astype(o.shape.dtype))
        else:
            out.append(rng.standard_normal(o.shape.dims).astype(o.shape.dtype))
    return out


def _check(inst: HloInstruction, rtol=2e-5, atol=2e-5):
    compiled = op_kernels.compile_convolution(inst, target="cpu")
    inputs = _inputs(inst)
    got = compiled.run(*inputs)
    expected = hlo.evaluate(_alone(inst), *inputs)[0]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol)
    return compiled


def _entry_inst(text: str, opcode: str = "convolution") -> HloInstruction:
    module = hlo.parse_module("HloModule m\n" + text)
    return next(i for i in module.entry.instructions if i.opcode == opcode)


# -- the stored programs' convolutions --------------------------------------------------


@pytest.mark.parametrize("name", ["small_conv", "conv_grouped_grad"])
@pytest.mark.parametrize("form", ["before", "after"])
def test_program_convolutions(name, form):
    from program_data import load_program
    prog = load_program(name)
    path = prog.before_path if form == "before" else prog.after_path
    module = hlo.parse_module(path.read_text())
    convs = [i for c in module.computations for i in c.instructions
             if i.opcode == "convolution"]
    assert convs
    for inst in convs:
        compiled = _check(inst)
        assert compiled.executable.spec.emitter == "convolution"


# -- XLA-style window configurations ----------------------------------------------------

_WINDOWS = [
    # (input, kernel, output, window, dim_labels, extra)
    ("f32[2,7,3]", "f32[3,3,4]", "f32[2,3,4]", "size=3 stride=2 pad=0_1", "b0f_0io->b0f", ""),
    ("f32[1,3,9]", "f32[4,3,2]", "f32[1,4,10]", "size=2 pad=1_1", "bf0_oi0->bf0", ""),
    # negative padding, rhs dilation, reversal
    ("f32[2,6,5,2]", "f32[2,2,2,3]", "f32[2,4,5,3]",
     "size=2x2 pad=-1_1x0_1 rhs_dilate=2x1 rhs_reversal=1x0", "b01f_01io->b01f", ""),
    # lhs (base) dilation: a transposed convolution
    ("f32[1,4,4,2]", "f32[3,3,2,2]", "f32[1,9,9,2]",
     "size=3x3 pad=2_2x2_2 lhs_dilate=2x2", "b01f_01io->b01f", ""),
    # feature groups (depthwise)
    ("f32[2,5,5,6]", "f32[3,3,1,6]", "f32[2,5,5,6]", "size=3x3 pad=1_1x1_1",
     "b01f_01io->b01f", ", feature_group_count=6"),
    # batch groups (a filter gradient)
    ("f32[4,5,3]", "f32[2,3,6]", "f32[2,4,6]", "size=2", "b0f_0io->b0f",
     ", batch_group_count=2"),
    # 3-D, strides and dilations everywhere, feature-major labels
    ("f32[1,2,5,6,4]", "f32[3,2,2,2,2]", "f32[1,3,2,3,2]",
     "size=2x2x2 stride=2x2x1 pad=0_0x1_0x0_0 rhs_dilate=1x1x2", "bf012_oi012->bf012", ""),
]


@pytest.mark.parametrize("lhs,rhs,out,window,labels,extra", _WINDOWS)
def test_window_configurations(lhs, rhs, out, window, labels, extra):
    _check(_entry_inst(f"""
ENTRY e {{
  x = {lhs} parameter(0)
  w = {rhs} parameter(1)
  ROOT c = {out} convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
}}"""))


def test_int8_with_s32_result_and_bf16():
    _check(_entry_inst("""
ENTRY e {
  x = s8[2,6,6,3] parameter(0)
  w = s8[3,3,3,4] parameter(1)
  ROOT c = s32[2,4,4,4] convolution(x, w), window={size=3x3}, dim_labels=b01f_01io->b01f
}"""))
    _check(_entry_inst("""
ENTRY e {
  x = bf16[1,8,8,4] parameter(0)
  w = bf16[3,3,4,2] parameter(1)
  ROOT c = bf16[1,8,8,2] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}"""), rtol=1e-2, atol=2e-2)


def test_layouts():
    # The buffers hold the physical order of each layout.
    _check(_entry_inst("""
ENTRY e {
  x = f32[2,3,6,5]{1,3,2,0} parameter(0)
  w = f32[4,3,2,2]{0,1,3,2} parameter(1)
  ROOT c = f32[2,4,5,4]{2,1,3,0} convolution(x, w), window={size=2x2}, dim_labels=bf01_oi01->bf01
}"""))


def _complex_inputs(inst: HloInstruction, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(o.shape.dims) + 1j * rng.standard_normal(o.shape.dims))
            .astype(o.shape.dtype) for o in inst.operands]


_COMPLEX_WINDOWS = [
    # (kernel, output, window, extra)
    ("4,5,3,6", "2,9,35,6", "size=4x5 pad=1_2x2_0 lhs_dilate=1x4", ", batch_group_count=2"),
    ("2,3,3,6", "4,4,8,6", "size=2x3 stride=2x1 rhs_dilate=2x1", ""),
    ("1,1,1,6", "4,9,10,6", "size=1x1", ", feature_group_count=3"),
]


@pytest.mark.parametrize("t", ["c64", "c128"])
@pytest.mark.parametrize("kernel,out,window,extra", _COMPLEX_WINDOWS)
def test_complex_convolutions_sum_complex_products(t, kernel, out, window, extra):
    """c64 / c128 convolutions (jax's of complex arrays) against the
    interpreter, and one output element against the window's complex
    products summed by hand."""
    inst = _entry_inst(f"""
ENTRY e {{
  x = {t}[4,9,10,3] parameter(0)
  w = {t}[{kernel}] parameter(1)
  ROOT c = {t}[{out}] convolution(x, w), window={{{window}}}, dim_labels=b01f_01io->b01f{extra}
}}""")
    compiled = op_kernels.compile_convolution(inst, target="cpu")
    inputs = _complex_inputs(inst)
    got = compiled.run(*inputs)
    want = hlo.evaluate(_alone(inst), *inputs)[0]
    assert got.dtype == want.dtype == hlo.numpy_dtype(t)
    assert np.abs(want.imag).max() > 1                  # truly complex
    tol = 1e-4 if t == "c64" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    if "rhs_dilate" in window:   # out[0, 0, 0, :]: rows 0 and 2, columns 0..2
        x, w = inputs
        direct = sum(x[0, 2 * i, j, c].astype(np.complex128) * w[i, j, c, :]
                     for i in range(2) for j in range(3) for c in range(3))
        np.testing.assert_allclose(got[0, 0, 0], direct, rtol=tol, atol=tol)


def test_complex_convolution_lowered_to_im2col_and_a_gemm(monkeypatch):
    """A large complex convolution becomes im2col + a complex gemm."""
    from xla_gpu.hlo.passes import convolution_lowering
    monkeypatch.setattr(convolution_lowering, "HOST_DIRECT_CONVOLUTION_MACS", 0)
    text = """HloModule m
ENTRY e {
  x = c64[2,6,6,3] parameter(0)
  w = c64[3,3,3,4] parameter(1)
  ROOT c = c64[2,4,4,4] convolution(x, w), window={size=3x3}, dim_labels=b01f_01io->b01f
}"""
    module = hlo.parse_module(text)
    inputs = _complex_inputs(module.entry.root)
    want = hlo.evaluate(module, *inputs)[0]
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert any(type(t).__name__ == "GemmThunk" for t in walk(exe.thunks))
    np.testing.assert_allclose(exe.run(*inputs)[0], want, rtol=1e-4, atol=1e-4)


# -- XLA:GPU's cuDNN custom calls ---------------------------------------------------------


def _cudnn(target: str, shapes, result, window: str, labels: str, extra: str = "",
           config: str = '{"cudnn_conv_backend_config":{"conv_result_scale":1,'
                         '"activation_mode":"kNone","side_input_scale":0}}') -> str:
    params = "\n".join(f"  p{i} = f32[{','.join(map(str, s))}] parameter({i})"
                       for i, s in enumerate(shapes))
    operands = ", ".join(f"p{i}" for i in range(len(shapes)))
    out = f"f32[{','.join(map(str, result))}]"
    return f"""HloModule m
ENTRY e {{
{params}
  c = ({out}, u8[0]) custom-call({operands}), window={{{window}}}, dim_labels={labels}{extra}, custom_call_target="{target}", backend_config={config}
  ROOT r = {out} get-tuple-element(c), index=0
}}
"""


_GRAD = dict(window="size=3x2 stride=2x1 pad=1_1x2_0 rhs_dilate=1x2",
             labels="bf01_oi01->bf01", extra=", feature_group_count=2")


@pytest.mark.parametrize("target,shapes,result", [
    ("__cudnn$convForward", [(2, 4, 7, 6), (6, 2, 3, 2)], (2, 6, 4, 6)),
    ("__cudnn$convBackwardInput", [(2, 6, 4, 6), (6, 2, 3, 2)], (2, 4, 7, 6)),
    ("__cudnn$convBackwardFilter", [(2, 4, 7, 6), (2, 6, 4, 6)], (6, 2, 3, 2)),
])
def test_cudnn_convolutions(target, shapes, result):
    text = _cudnn(target, shapes, result, **_GRAD)
    module = hlo.parse_module(text)
    call = next(i for i in module.entry.instructions if i.opcode == "custom-call")
    compiled = op_kernels.compile_convolution(call, target="cpu")
    inputs = _inputs(call, seed=3)
    (expected,) = hlo.evaluate(module, *inputs)
    np.testing.assert_allclose(compiled.run(*inputs), expected, rtol=2e-5, atol=2e-5)


def test_cudnn_backward_with_batch_groups_and_reversal():
    window = "size=2x3 stride=1x2 pad=0_1x1_0 lhs_dilate=1x2 rhs_dilate=2x1 rhs_reversal=0x1"
    extra = ", batch_group_count=2"
    labels = "b01f_01io->b01f"
    for target, shapes, result in (
            ("__cudnn$convBackwardInput", [(2, 4, 4, 6), (2, 3, 3, 6)], (4, 5, 5, 3)),
            ("__cudnn$convBackwardFilter", [(4, 5, 5, 3), (2, 4, 4, 6)], (2, 3, 3, 6))):
        module = hlo.parse_module(_cudnn(target, shapes, result, window, labels, extra))
        call = next(i for i in module.entry.instructions if i.opcode == "custom-call")
        inputs = _inputs(call, seed=5)
        got = op_kernels.compile_convolution(call, target="cpu").run(*inputs)
        (expected,) = hlo.evaluate(module, *inputs)
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("mode", ["kRelu", "kSigmoid", "kTanh", "kElu", "kLeakyRelu",
                                  "kGeluExact", "kRelu6"])
def test_cudnn_bias_activation_in_a_program(mode):
    config = ('{"cudnn_conv_backend_config":{"conv_result_scale":0.5,'
              f'"activation_mode":"{mode}","side_input_scale":2,"leakyrelu_alpha":0.1}}}}')
    text = _cudnn("__cudnn$convBiasActivationForward",
                  [(1, 5, 5, 2), (3, 3, 2, 4), (4,), (1, 5, 5, 4)], (1, 5, 5, 4),
                  "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", config=config)
    exe = xla_gpu.compile(text, target="cpu")
    thunks = list(walk(exe.thunks))
    conv = next(t for t in thunks if t.kind == "convolution")
    assert [t.kind for t in conv.thunks] == ["kernel"]
    module = hlo.parse_module(text)
    call = next(i for i in module.entry.instructions if i.opcode == "custom-call")
    inputs = _inputs(call, seed=9)
    (got,) = exe.run(*inputs)
    (expected,) = hlo.evaluate(module, *inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_cudnn_program_gradients_match_jax():
    """conv_grouped_grad's convolution and its gradients as XLA:GPU's cuDNN
    calls in one program, against jax's stored results."""
    from program_data import load_program
    prog = load_program("conv_grouped_grad")
    x, kernel = prog.inputs
    y, dx, dk = prog.outputs
    window = "size=3x2 stride=2x1 pad=1_1x2_0 rhs_dilate=1x2"
    common = 'dim_labels=bf01_oi01->bf01, feature_group_count=2, ' \
        'backend_config={"cudnn_conv_backend_config":{"conv_result_scale":1}}'
    text = f"""HloModule m
ENTRY e {{
  x = f32[2,4,7,6] parameter(0)
  k = f32[6,2,3,2] parameter(1)
  f = (f32[2,6,4,6], u8[0]) custom-call(x, k), window={{{window}}}, custom_call_target="__cudnn$convForward", {common}
  y = f32[2,6,4,6] get-tuple-element(f), index=0
  dy = f32[2,6,4,6] cosine(y)
  bi = (f32[2,4,7,6], u8[0]) custom-call(dy, k), window={{{window}}}, custom_call_target="__cudnn$convBackwardInput", {common}
  bf = (f32[6,2,3,2], u8[0]) custom-call(x, dy), window={{{window}}}, custom_call_target="__cudnn$convBackwardFilter", {common}
  gx = f32[2,4,7,6] get-tuple-element(bi), index=0
  gk = f32[6,2,3,2] get-tuple-element(bf), index=0
  ROOT r = (f32[2,6,4,6], f32[2,4,7,6], f32[6,2,3,2]) tuple(y, gx, gk)
}}
"""
    exe = xla_gpu.compile(text, target="cpu")
    assert sum(t.kind == "convolution" for t in walk(exe.thunks)) == 3
    got = exe.run(x, kernel)
    for g, e in zip(got, (y, dx, dk)):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


# -- single fusions, PTX, errors --------------------------------------------------------------


def test_convolution_fusion_compiles_alone():
    text = """HloModule m
fused {
  x = f32[1,6,6,2] parameter(0)
  w = f32[3,3,2,3] parameter(1)
  ROOT c = f32[1,4,4,3] convolution(x, w), window={size=3x3}, dim_labels=b01f_01io->b01f
}
"""
    exe = xla_gpu.compile(text, target="cpu", fusion="fused")
    assert exe.spec.emitter == "convolution"
    module = hlo.parse_module(text)
    inputs = _inputs(module.computations[-1].root)
    np.testing.assert_allclose(exe.run(*inputs)[0],
                               hlo.evaluate(module.computations[-1], *inputs)[0],
                               rtol=2e-5, atol=2e-5)


def test_convolution_compiles_to_ptx():
    inst = _entry_inst("""
ENTRY e {
  x = f32[2,6,5,2] parameter(0)
  w = f32[2,2,2,3] parameter(1)
  ROOT c = f32[2,4,5,3] convolution(x, w), window={size=2x2 pad=-1_1x0_1 rhs_dilate=2x1 rhs_reversal=1x0}, dim_labels=b01f_01io->b01f
}""")
    compiled = op_kernels.compile_convolution(inst, target="cuda")
    ptx = compiled.executable.ptx
    assert ".target sm_90" in ptx and ("fma.rn.f32" in ptx or "mul.rn.f32" in ptx)
    if shutil.which("ptxas"):
        assert compiled.executable.cubin


@pytest.mark.parametrize("attrs,message", [
    ("window={size=3x3}, dim_labels=b01f_01io->b01x", "dim_labels"),
    ("window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=4",
     "feature_group_count=4"),
    ("window={size=2x2}, dim_labels=b01f_01io->b01f", "kernel spatial dims"),
    ("window={size=3x3 stride=2x2}, dim_labels=b01f_01io->b01f", "window gives 2 outputs"),
    ("window={size=3x3 stride=0x1}, dim_labels=b01f_01io->b01f", "strides and dilations"),
    ("dim_labels=b01f_01io->b01f", "no size"),
])
def test_bad_convolutions_are_clear_errors(attrs, message):
    """The emitter, the reference interpreter and the im2col lowering of
    whole programs read a convolution through one checker: the same
    message, naming the instruction."""
    inst = _entry_inst(f"""
ENTRY e {{
  x = f32[1,6,6,2] parameter(0)
  w = f32[3,3,2,3] parameter(1)
  ROOT c = f32[1,4,4,3] convolution(x, w), {attrs}
}}""")
    with pytest.raises(HloError, match=message) as info:
        op_kernels.compile_convolution(inst, target="cpu")
    assert "instruction 'c'" in str(info.value)
    with pytest.raises(HloError) as interpreted:
        hlo.evaluate(_alone(inst), *_inputs(inst))
    assert str(interpreted.value) == str(info.value)
    with pytest.raises(HloError) as lowered:
        lower_convolution(inst, *inst.operands, unique=str, unique_comp=str)
    assert str(lowered.value) == str(info.value)


def test_unsupported_activation_is_named():
    text = _cudnn("__cudnn$convBiasActivationForward", [(1, 5, 5, 2), (3, 3, 2, 4), (4,)],
                  (1, 5, 5, 4), "size=3x3 pad=1_1x1_1", "b01f_01io->b01f",
                  config='{"cudnn_conv_backend_config":{"activation_mode":"kBandPass"}}')
    call = next(i for i in hlo.parse_module(text).entry.instructions
                if i.opcode == "custom-call")
    with pytest.raises(UnsupportedError, match="kBandPass"):
        op_kernels.compile_convolution(call, target="cpu")

