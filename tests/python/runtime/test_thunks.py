"""Every thunk kind of a whole program on the cpu target, from small
handwritten modules: kernel, copy, memset, gemm, while, conditional (pred
and index), custom_call, command_buffer; thunk serialization, argument and
memory errors, ops without a thunk."""

from __future__ import annotations

import json

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.runtime import program as program_module
from xla_gpu.runtime.program import ProgramExecutable
from xla_gpu.runtime.thunks import thunk_from_dict, walk

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""

KERNEL_COPY_MEMSET = """HloModule m
zeros {
  c = f32[] constant(0)
  ROOT b = f32[16] broadcast(c), dimensions={}
}
scaled {
  x = f32[16] parameter(0)
  two = f32[] constant(2)
  t = f32[16] broadcast(two), dimensions={}
  ROOT m = f32[16] multiply(x, t)
}
ENTRY e {
  p = f32[16] parameter(0)
  z = f32[16] fusion(), kind=kLoop, calls=zeros
  s = f32[16] fusion(p), kind=kLoop, calls=scaled
  c = f32[16] copy(s)
  ROOT t = (f32[16], f32[16], f32[16]) tuple(z, s, c)
}
"""


def _kinds(exe) -> list[str]:
    return [t.kind for t in walk(exe.thunks)]


def _check(text: str, *args, **options):
    exe = xla_gpu.compile(text, target="cpu", **options)
    assert isinstance(exe, ProgramExecutable)
    got = exe.run(*args)
    want = hlo.evaluate(hlo.parse_module(text), *args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=1e-5, atol=1e-5)
    return exe, got


def test_kernel_copy_and_memset_thunks():
    x = np.arange(16, dtype=np.float32)
    exe, (z, s, c) = _check(KERNEL_COPY_MEMSET, x)
    kinds = _kinds(exe)
    assert {"kernel", "copy", "memset"} <= set(kinds)
    memset = next(t for t in walk(exe.thunks) if t.kind == "memset")
    assert memset.width == 4 and memset.count == 16 and memset.pattern == 0
    np.testing.assert_array_equal(c, 2 * x)
    # The caller's array is never written.
    np.testing.assert_array_equal(x, np.arange(16, dtype=np.float32))


WHILE = """HloModule m
cond {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
step {
  i = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT j = s32[] add(i, one)
}
update {
  v = f32[8] parameter(0)
  h = f32[] constant(1.5)
  b = f32[8] broadcast(h), dimensions={}
  m = f32[8] multiply(v, b)
  ROOT a = f32[8] add(m, b)
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[8] get-tuple-element(s), index=1
  j = s32[] fusion(i), kind=kLoop, calls=step
  w = f32[8] fusion(v), kind=kLoop, calls=update
  ROOT t = (s32[], f32[8]) tuple(j, w)
}
ENTRY e {
  v = f32[8] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, v)
  ROOT w = (s32[], f32[8]) while(init), condition=cond, body=body, backend_config={"known_trip_count":{"n":"5"}}
}
"""


def test_while_thunk_runs_condition_then_body():
    x = np.linspace(-1, 1, 8).astype(np.float32)
    exe, (count, value) = _check(WHILE, x)
    assert count == 5
    loops = [t for t in walk(exe.thunks) if t.kind == "while"]
    assert len(loops) == 1 and loops[0].trip_count == 5
    assert loops[0].condition and loops[0].body
    assert loops[0].predicate.element_type == "pred"
    assert exe.stats["while_iterations"] == 5
    # 5 bodies of 2 kernels; the known trip count leaves the condition out.
    assert exe.kernel_launches() == 2 * 5


# Branch bodies of the conditionals below: one fusion each.
BRANCH_FUSIONS = """HloModule m
neg {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}
exp {
  x = f32[4] parameter(0)
  ROOT n = f32[4] exponential(x)
}
"""

COND_PRED = BRANCH_FUSIONS + """on_true {
  x = f32[4] parameter(0)
  ROOT r = f32[4] fusion(x), kind=kLoop, calls=neg
}
on_false {
  x = f32[4] parameter(0)
  ROOT r = f32[4] fusion(x), kind=kLoop, calls=exp
}
ENTRY e {
  p = pred[] parameter(0)
  x = f32[4] parameter(1)
  ROOT c = f32[4] conditional(p, x, x), true_computation=on_true, false_computation=on_false
}
"""

COND_INDEX = BRANCH_FUSIONS + """b0 {
  x = f32[4] parameter(0)
  ROOT r = f32[4] fusion(x), kind=kLoop, calls=neg
}
b1 {
  x = f32[4] parameter(0)
  ROOT r = f32[4] fusion(x), kind=kLoop, calls=exp
}
b2 {
  ROOT x = f32[4] parameter(0)
}
ENTRY e {
  i = s32[] parameter(0)
  x = f32[4] parameter(1)
  ROOT c = f32[4] conditional(i, x, x, x), branch_computations={b0, b1, b2}
}
"""


def test_conditional_on_a_predicate():
    x = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    exe, (r,) = _check(COND_PRED, np.array(True), x)
    np.testing.assert_array_equal(r, -x)
    (r,) = exe.run(np.array(False), x)
    np.testing.assert_allclose(r, np.exp(x), rtol=1e-6)
    cond = next(t for t in walk(exe.thunks) if t.kind == "conditional")
    assert len(cond.branches) == 2 and cond.selector.element_type == "pred"


@pytest.mark.parametrize("index,expected", [(0, "neg"), (1, "exp"), (2, "id"),
                                            (7, "id"), (-3, "id")])
def test_conditional_on_an_index_clamps_out_of_range_to_the_last_branch(index, expected):
    x = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    exe, (r,) = _check(COND_INDEX, np.array(index, np.int32), x)
    want = {"neg": -x, "exp": np.exp(x), "id": x}[expected]
    np.testing.assert_allclose(r, want, rtol=1e-6)


GEMM = """HloModule m
relu {
  x = f32[2,3,5] parameter(0)
  z = f32[] constant(0)
  b = f32[2,3,5] broadcast(z), dimensions={}
  ROOT r = f32[2,3,5] maximum(x, b)
}
ENTRY e {
  a = f32[2,4,3] parameter(0)
  b = f32[5,4,2] parameter(1)
  d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={2}, lhs_contracting_dims={1}, rhs_contracting_dims={1}
  h = bf16[2,3] parameter(2)
  g = bf16[3,2] parameter(3)
  e = f32[2,2] dot(h, g), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r = f32[2,3,5] fusion(d), kind=kLoop, calls=relu
  ROOT t = (f32[2,3,5], f32[2,2]) tuple(r, e)
}
"""


def test_gemm_thunks_with_batch_dims_transposed_operands_and_bf16():
    import ml_dtypes
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 4, 3)).astype(np.float32)
    b = rng.standard_normal((5, 4, 2)).astype(np.float32)
    h = rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16)
    g = rng.standard_normal((3, 2)).astype(ml_dtypes.bfloat16)
    exe, (r, e) = _check(GEMM, a, b, h, g)
    gemms = [t for t in walk(exe.thunks) if t.kind == "gemm"]
    assert len(gemms) == 2
    assert gemms[0].config.bmnk == (2, 3, 5, 4) or gemms[1].config.bmnk == (2, 3, 5, 4)
    np.testing.assert_allclose(r, np.maximum(np.einsum("bkm,nkb->bmn", a, b), 0), rtol=1e-5)
    np.testing.assert_allclose(e, h.astype(np.float32) @ g.astype(np.float32), rtol=1e-6)


def test_command_buffers_on_and_off_give_identical_results():
    x = np.linspace(-1, 1, 8).astype(np.float32)
    on = xla_gpu.compile(WHILE, target="cpu")
    off = xla_gpu.compile(WHILE, target="cpu", command_buffers=False)
    assert "command_buffer" in _kinds(on) and "command_buffer" not in _kinds(off)
    for a, b in zip(on.run(x), off.run(x)):
        np.testing.assert_array_equal(a, b)
    exe = xla_gpu.compile(KERNEL_COPY_MEMSET, target="cpu")
    top = [t.kind for t in exe.thunks]
    assert top == ["command_buffer"]
    assert {t.kind for t in exe.thunks[0].thunks} <= {"kernel", "copy", "memset"}
    off = xla_gpu.compile(KERNEL_COPY_MEMSET, target="cpu", command_buffers=False)
    y = np.arange(16, dtype=np.float32)
    for a, b in zip(exe.run(y), off.run(y)):
        np.testing.assert_array_equal(a, b)


def test_counted_loops_join_command_buffers_unrolled(monkeypatch):
    """A loop of known trip count whose body is device commands alone is
    recorded into the surrounding command buffer, unrolled (one graph
    launch for the whole loop on cuda); over the unroll limit, or of
    unknown count, it stays a loop around its body's command buffer."""
    from xla_gpu.runtime import command_buffer
    x = np.linspace(-1, 1, 8).astype(np.float32)
    off = xla_gpu.compile(WHILE, target="cpu", command_buffers=False)
    want = off.run(x)
    on = xla_gpu.compile(WHILE, target="cpu", cache=False)
    assert [t.kind for t in on.thunks] == ["command_buffer"]
    (loop,) = [t for t in on.thunks[0].thunks if t.kind == "while"]
    assert loop.trip_count == 5 and command_buffer.unrolled_size(loop) == 10
    assert {t.kind for t in loop.body} == {"kernel"}          # not a nested buffer
    for a, b in zip(on.run(x), want):
        np.testing.assert_array_equal(a, b)
    assert on.stats["while_iterations"] == off.stats["while_iterations"] == 5
    assert on.kernel_launches() == off.kernel_launches()

    monkeypatch.setattr(command_buffer, "UNROLL_LIMIT", 9)
    over = xla_gpu.compile(WHILE, target="cpu", cache=False)
    (loop,) = [t for t in over.thunks if t.kind == "while"]
    assert [t.kind for t in loop.body] == ["command_buffer"]
    uncounted = WHILE.replace(', backend_config={"known_trip_count":{"n":"5"}}', "") \
        .replace("zero = s32[] constant(0)", "zero = s32[] parameter(1)")
    exe = xla_gpu.compile(uncounted, target="cpu", cache=False)
    assert any(t.kind == "while" for t in exe.thunks)


CUSTOM = """HloModule m
ENTRY e {
  x = f32[4,8] parameter(0)
  y = f32[4,8] parameter(1)
  ROOT c = f32[4,8] custom-call(x, y), custom_call_target="xla_gpu_test_thunk_axpy", api_version=API_VERSION_TYPED_FFI, backend_config={scale = 3.0 : f32}
}
"""


def test_custom_call_thunk_calls_the_registered_handler():
    from xla_gpu.hlo import interpreter
    calls = []

    def axpy(x, y, scale):
        calls.append(float(scale))
        return scale * x + y
    interpreter.register_custom_call("xla_gpu_test_thunk_axpy", axpy)
    try:
        x = np.ones((4, 8), np.float32)
        y = np.arange(32, dtype=np.float32).reshape(4, 8)
        exe, (r,) = _check(CUSTOM, x, y)
        np.testing.assert_array_equal(r, 3 * x + y)
        assert calls[-1] == 3.0 and _kinds(exe) == ["custom_call"]
    finally:
        interpreter.unregister_custom_call("xla_gpu_test_thunk_axpy")
    # The program keeps the handler it was compiled with; one compiled now
    # has none.
    np.testing.assert_array_equal(exe.run(x, y)[0], 3 * x + y)
    with pytest.raises(xla_gpu.XlaGpuError, match="no handler registered for target "
                       "'xla_gpu_test_thunk_axpy'"):
        xla_gpu.compile(CUSTOM, target="cpu").run(x, y)


def test_custom_call_handler_errors_name_the_target():
    from xla_gpu.hlo import interpreter

    def broken(x, y, scale):
        raise RuntimeError("boom")
    interpreter.register_custom_call("xla_gpu_test_thunk_axpy", broken)
    try:
        exe = xla_gpu.compile(CUSTOM, target="cpu")
        x = np.ones((4, 8), np.float32)
        with pytest.raises(xla_gpu.XlaGpuError, match="xla_gpu_test_thunk_axpy.*boom"):
            exe.run(x, x)
    finally:
        interpreter.unregister_custom_call("xla_gpu_test_thunk_axpy")


def test_every_thunk_kind_round_trips_through_json():
    exes = [xla_gpu.compile(t, target="cpu") for t in
            (KERNEL_COPY_MEMSET, WHILE, COND_INDEX, GEMM, CUSTOM)]
    seen = set()
    for exe in exes:
        for thunk in exe.thunks:
            data = json.loads(json.dumps(thunk.to_dict()))
            back = thunk_from_dict(data)
            assert back.to_dict() == thunk.to_dict()
            seen.update(t.kind for t in walk([thunk]))
    assert {"kernel", "copy", "memset", "gemm", "while", "conditional", "custom_call",
            "command_buffer"} <= seen
    with pytest.raises(xla_gpu.ArtifactError, match="unknown thunk kind 'teleport'"):
        thunk_from_dict({"kind": "teleport", "name": "x"})


def test_thunk_sequence_text_nests_loops_and_branches():
    text = xla_gpu.compile(WHILE, target="cpu", command_buffers=False).thunk_sequence_text()
    lines = text.splitlines()
    assert any(line.startswith("0") and " while w " in f" {line} " for line in lines)
    assert "  condition:" in lines and "  body:" in lines
    text = xla_gpu.compile(COND_INDEX, target="cpu", command_buffers=False) \
        .thunk_sequence_text()
    assert "  branch 0:" in text and "  branch 2:" in text


def test_wrong_arguments_are_clear_errors():
    exe = xla_gpu.compile(COND_PRED, target="cpu")
    x = np.zeros(4, np.float32)
    with pytest.raises(xla_gpu.ArgumentError, match="takes 2 arguments"):
        exe.run(x)
    with pytest.raises(xla_gpu.ArgumentError, match=r"argument 1: expected shape \[4\]"):
        exe.run(np.array(True), np.zeros(5, np.float32))
    with pytest.raises(xla_gpu.ArgumentError, match="argument 1: expected dtype f32"):
        exe.run(np.array(True), np.zeros(4, np.float64))


def test_a_program_larger_than_host_memory_is_refused_before_allocating(monkeypatch):
    exe = xla_gpu.compile(KERNEL_COPY_MEMSET, target="cpu")
    need = exe.required_bytes()
    assert need >= 3 * 64
    monkeypatch.setattr(program_module, "host_memory_bytes", lambda: need - 1)
    allocations = []
    monkeypatch.setattr(program_module, "aligned_zeros",
                        lambda shape, dtype, alignment: allocations.append(shape) or
                        np.zeros(shape, dtype))
    monkeypatch.setattr(program_module.HostBufferPool, "take",
                        lambda self, index, size, typed=None: allocations.append(size) or
                        (np.zeros(size, np.uint8), 0, None))
    with pytest.raises(xla_gpu.ResourceError, match=f"needs {need} bytes"):
        exe.run(np.zeros(16, np.float32))
    assert allocations == []


def test_an_op_without_a_thunk_is_an_error_naming_it_and_its_line():
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT r = f32[4] rng(x, x), distribution=rng_uniform
}
"""
    with pytest.raises(xla_gpu.XlaGpuError, match="line 4.*'r'"):
        xla_gpu.compile(text, target="cpu")


CONV = """HloModule m
ENTRY e {
  x = f32[2,4,7,6]{3,2,1,0} parameter(0)
  k = f32[4,2,3,2]{3,2,1,0} parameter(1)
  ROOT c = f32[2,4,4,5]{3,2,1,0} convolution(x, k), window={size=3x2 stride=2x1 pad=1_1x0_1 rhs_dilate=1x2}, dim_labels=bf01_oi01->bf01, feature_group_count=2
}
"""


# Filter gradients: a window larger than the output (patches gathered per
# output position), the input stored batch-minor (f01b, patches in its own
# order on the cpu target) or not, with strides, one-sided padding, rhs
# dilation and reversal, feature groups; last, a batch-minor input with a
# small window (patches per window position) and lhs dilation.
CONV_FILTER_GRADIENTS = ["""HloModule m
ENTRY e {
  x = f32[3,6,7,4]{3,2,1,0} parameter(0)
  g = f32[3,5,6,5]{3,2,1,0} parameter(1)
  ROOT c = f32[2,3,4,5]{3,2,1,0} convolution(x, g), window={size=5x6 stride=2x1 pad=1_1x0_1 rhs_reversal=1x1}, dim_labels=f01b_i01o->01bf
}
""", """HloModule m
ENTRY e {
  x = f32[3,6,7,4]{3,2,1,0} parameter(0)
  k = f32[3,2,3,5]{3,2,1,0} parameter(1)
  ROOT c = f32[4,3,13,5]{3,2,1,0} convolution(x, k), window={size=2x3 stride=2x1 pad=1_0x0_2 lhs_dilate=1x2 rhs_dilate=2x1 rhs_reversal=1x1}, dim_labels=f01b_i01o->b01f
}
""", """HloModule m
ENTRY e {
  x = f32[4,6,7,3]{3,2,1,0} parameter(0)
  g = f32[4,6,7,5]{3,2,1,0} parameter(1)
  ROOT c = f32[3,3,3,5]{3,2,1,0} convolution(x, g), window={size=6x7 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf
}
""", """HloModule m
ENTRY e {
  x = f32[2,7,6,4]{3,2,1,0} parameter(0)
  k = f32[3,4,2,6]{3,2,1,0} parameter(1)
  ROOT c = f32[2,2,4,6]{3,2,1,0} convolution(x, k), window={size=3x4 stride=2x1 pad=0_1x1_0 rhs_dilate=2x1 rhs_reversal=1x1}, dim_labels=b01f_01io->b01f, feature_group_count=2
}
"""]


@pytest.mark.parametrize("text", [
    CONV, *CONV_FILTER_GRADIENTS,
    CONV.replace("f32[4,2,3,2]", "f32[4,4,3,2]").replace(", feature_group_count=2", ""),
    # batch groups (a filter gradient) with lhs dilation and window reversal
    """HloModule m
ENTRY e {
  x = f32[4,5,5,2]{3,2,1,0} parameter(0)
  k = f32[3,3,2,6]{3,2,1,0} parameter(1)
  ROOT c = f32[2,9,9,6]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2 rhs_reversal=1x0}, dim_labels=b01f_01io->b01f, batch_group_count=2
}
""",
])
@pytest.mark.parametrize("large", [True, False], ids=["im2col+gemm", "direct"])
def test_convolution_thunk(text, large, monkeypatch):
    """A large convolution is im2col + gemm (here: any, by lowering the
    threshold), a small one one direct kernel with no temporaries."""
    from xla_gpu.hlo.passes import convolution_lowering
    monkeypatch.setattr(convolution_lowering, "HOST_DIRECT_CONVOLUTION_MACS",
                        0 if large else 1 << 62)
    module = hlo.parse_module(text)
    rng = np.random.default_rng(6)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    # No cache: the compiler's identity cannot see a patched threshold.
    exe, _ = _check(text, *args, cache=False)
    convs = [t for t in walk(exe.thunks) if t.kind == "convolution"]
    assert len(convs) == 1 and convs[0].name == "c"
    inner = [t.kind for t in convs[0].thunks]
    if large:
        assert inner.count("gemm") == 1 and "kernel" in inner
    else:
        assert inner == ["kernel"] and exe.memory_analysis().temp_size_in_bytes == 0


_GEMM_CONFIG = ('"gemm_backend_config":{{"alpha_real":{alpha},"alpha_imag":0,"beta":{beta},'
                '"dot_dimension_numbers":{{"lhs_contracting_dimensions":["1"],'
                '"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],'
                '"rhs_batch_dimensions":[]}},"epilogue":"{epilogue}"}}')

CUBLAS_LT = """HloModule m
ENTRY e {{
  a = f32[8,16]{{1,0}} parameter(0)
  b = f32[16,4]{{1,0}} parameter(1)
  bias = f32[4]{{0}} parameter(2)
  g = (f32[8,4]{{1,0}}, s8[4194304]{{0}}) custom-call(a, b, bias), custom_call_target="__cublas$lt$matmul", backend_config={{{config}}}
  ROOT r = f32[8,4]{{1,0}} get-tuple-element(g), index=0
}}
""".format(config=_GEMM_CONFIG.format(alpha=2, beta=0, epilogue="BIAS_RELU"))

CUBLAS_BETA = """HloModule m
neg {{
  x = f32[8,4] parameter(0)
  ROOT n = f32[8,4] negate(x)
}}
ENTRY e {{
  a = f32[8,16]{{1,0}} parameter(0)
  b = f32[16,4]{{1,0}} parameter(1)
  p = f32[8,4]{{1,0}} parameter(2)
  c = f32[8,4]{{1,0}} fusion(p), kind=kLoop, calls=neg
  g = (f32[8,4]{{1,0}}, s8[1024]{{0}}) custom-call(a, b, c), custom_call_target="__cublas$gemm", output_to_operand_aliasing={{{{0}}: (2, {{}})}}, backend_config={{{config}}}
  ROOT r = f32[8,4]{{1,0}} get-tuple-element(g), index=0
}}
""".format(config=_GEMM_CONFIG.format(alpha=1, beta=0.5, epilogue="DEFAULT"))

TRITON_GEMM = """HloModule m
triton_gemm_r {
  p0 = f32[8,16]{1,0} parameter(0)
  p1 = f32[16,4]{1,0} parameter(1)
  d = f32[8,4]{1,0} dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f32[] constant(0)
  bz = f32[8,4]{1,0} broadcast(z), dimensions={}
  ROOT r = f32[8,4]{1,0} maximum(d, bz)
}
ENTRY e {
  a = f32[8,16]{1,0} parameter(0)
  b = f32[16,4]{1,0} parameter(1)
  ROOT f = f32[8,4]{1,0} fusion(a, b), kind=kCustom, calls=triton_gemm_r, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"16","block_n":"16","block_k":"16","split_k":"1","num_stages":"1","num_warps":"4","num_ctas":"1"}}}
}
"""


def test_xla_gpu_library_calls_become_gemm_thunks():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    exe, (r,) = _check(CUBLAS_LT, a, b, bias)
    (gemm,) = [t for t in walk(exe.thunks) if t.kind == "gemm"]
    assert gemm.config.epilogue == "BIAS_RELU" and gemm.config.alpha == 2
    np.testing.assert_allclose(r, np.maximum(2 * (a @ b) + bias, 0), rtol=1e-5, atol=1e-5)
    p = rng.standard_normal((8, 4)).astype(np.float32)
    exe, (r,) = _check(CUBLAS_BETA, a, b, p)
    (gemm,) = [t for t in walk(exe.thunks) if t.kind == "gemm"]
    assert gemm.config.beta == 0.5 and gemm.config.c is not None
    np.testing.assert_allclose(r, a @ b - 0.5 * p, rtol=1e-5, atol=1e-5)
    # XLA:GPU's __triton_gemm fusion: one kernel of the GEMM emitter (the
    # dot and its fused max), with the fusion's tiling.
    exe, (r,) = _check(TRITON_GEMM, a, b)
    (kernel,) = [t for t in walk(exe.thunks) if t.kind in ("kernel", "gemm")]
    assert kernel.kind == "kernel" and exe.kernels[kernel.kernel].spec.emitter == "gemm"
    np.testing.assert_allclose(r, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


_EMPTY_SCATTER = """HloModule m
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] add(a, b)
}
ENTRY e {
  x = s32[4] parameter(0)
  c = s32[1] constant({5})
  i = s32[0,1] parameter(1)
  u = s32[0] parameter(2)
  s = s32[4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  t = s32[1] scatter(c, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  ROOT r = (s32[4], s32[1]) tuple(s, t)
}
"""


@pytest.mark.parametrize("optimize", [True, False])
def test_scatter_of_no_updates_is_a_copy_of_its_operand(optimize):
    """Unoptimized, each op its own fusion: a scatter with zero updates
    reaches the thunk emitter, which copies the operand instead of sizing a
    kernel by zero updates; optimized, the simplifier removed it."""
    args = (np.arange(4, dtype=np.int32), np.zeros((0, 1), np.int32), np.zeros((0,), np.int32))
    exe, got = _check(_EMPTY_SCATTER, *args, optimize=optimize)
    np.testing.assert_array_equal(got[1], [5])
    assert "kernel" not in _kinds(exe)
