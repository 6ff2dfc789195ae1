"""GEMMs with XLA's dot semantics (xla_gpu.runtime.gemm): the numpy path the
cpu target runs, checked against the reference interpreter's dot and plain
numpy; the cuBLASLt plan (layouts, ops, operand swap) checked without a
GPU, and run against numpy where a GPU and cuBLASLt are present."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from xla_gpu import hlo
from xla_gpu.errors import UnsupportedError
from xla_gpu.runtime import gemm
from xla_gpu.runtime.buffers import BufferSlice
from xla_gpu.runtime.gemm import CublasPlanError, GemmConfig, cublas_plan
from xla_gpu.runtime.thunks import ArrayRef, ExecutionContext, GemmThunk


def _layout_of(order):
    """minor-to-major layout from a major-to-minor order."""
    return tuple(reversed(order))


class _Host:
    """Arrays packed into one host allocation, as a program's buffers."""

    def __init__(self):
        self.chunks: list[np.ndarray] = []
        self.size = 0

    def add(self, logical: np.ndarray, element_type: str, layout=None) -> ArrayRef:
        offset = self.size
        dims = tuple(logical.shape)
        ref = ArrayRef(BufferSlice(0, offset, 0), element_type, dims, layout)
        nbytes = ref.nbytes
        ref = ArrayRef(BufferSlice(0, offset, nbytes), element_type, dims, layout)
        physical = np.ascontiguousarray(ref.physical_from_logical(
            logical.astype(ref.storage_dtype)))
        self.chunks.append((offset, physical.reshape(-1).view(np.uint8)))
        self.size += (nbytes + 63) // 64 * 64
        return ref

    def output(self, dims, element_type: str, layout=None) -> ArrayRef:
        return self.add(np.zeros(dims, hlo.numpy_dtype(element_type)), element_type, layout)

    def context(self) -> ExecutionContext:
        buffer = np.zeros(max(self.size, 1), np.uint8)
        for offset, data in self.chunks:
            buffer[offset:offset + data.size] = data
        return ExecutionContext("cpu", [buffer], {})


def _dot_text(lt, rt, ot, ls, rs, os_, dims):
    return (f"HloModule m\nENTRY e {{\n  a = {lt}[{','.join(map(str, ls))}] parameter(0)\n"
            f"  b = {rt}[{','.join(map(str, rs))}] parameter(1)\n"
            f"  ROOT d = {ot}[{','.join(map(str, os_))}] dot(a, b), {dims}\n}}\n")


def _run(config: GemmConfig, host: _Host) -> np.ndarray:
    ctx = host.context()
    GemmThunk("dot", config).execute(ctx)
    return np.array(ctx.array(config.out))


@pytest.mark.parametrize("case", [
    # (lhs dims, rhs dims, lb, rb, lc, rc)
    ((8, 16), (16, 4), (), (), (1,), (0,)),
    ((16, 8), (16, 4), (), (), (0,), (0,)),           # transposed lhs
    ((8, 16), (4, 16), (), (), (1,), (1,)),           # transposed rhs
    ((3, 8, 16), (3, 16, 5), (0,), (0,), (2,), (1,)),  # batch
    ((8, 3, 16), (5, 16, 3), (1,), (2,), (2,), (1,)),  # batch dims not leading
    ((2, 3, 4, 6), (3, 6, 4, 2), (1,), (0,), (2, 3), (2, 1)),  # two contracting dims
    ((7,), (7,), (), (), (0,), (0,)),                  # vector dot
])
def test_dot_general_matches_the_interpreter(case):
    ls, rs, lb, rb, lc, rc = case
    rng = np.random.default_rng(1)
    a = rng.standard_normal(ls).astype(np.float32)
    b = rng.standard_normal(rs).astype(np.float32)
    free_l = [d for d in range(len(ls)) if d not in lb + lc]
    free_r = [d for d in range(len(rs)) if d not in rb + rc]
    out_dims = [ls[d] for d in lb] + [ls[d] for d in free_l] + [rs[d] for d in free_r]
    fmt = lambda v: "{" + ",".join(map(str, v)) + "}"  # noqa: E731
    dims = (f"lhs_batch_dims={fmt(lb)}, rhs_batch_dims={fmt(rb)}, "
            f"lhs_contracting_dims={fmt(lc)}, rhs_contracting_dims={fmt(rc)}")
    (want,) = hlo.evaluate(hlo.parse_module(_dot_text("f32", "f32", "f32", ls, rs,
                                                      out_dims, dims)), a, b)
    host = _Host()
    config = GemmConfig(host.add(a, "f32"), host.add(b, "f32"),
                        host.output(out_dims, "f32"), lb, rb, lc, rc)
    np.testing.assert_allclose(_run(config, host), want, rtol=1e-5, atol=1e-5)


def test_operand_and_result_layouts_are_read_physically():
    """A {0,1} operand holds the transpose's bytes; the result written in a
    {0,1} layout reads back as the logical product."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 7)).astype(np.float32)
    host = _Host()
    ra = host.add(a, "f32", layout=(0, 1))
    rb = host.add(b, "f32", layout=(0, 1))
    out = host.output((6, 7), "f32", layout=(0, 1))
    ctx = host.context()
    # The bytes of a {0,1} array are its transpose, row-major.
    raw = ctx.bytes(ra.slice).view(np.float32).reshape(5, 6)
    np.testing.assert_array_equal(raw, a.T)
    GemmThunk("dot", GemmConfig(ra, rb, out, (), (), (1,), (0,))).execute(ctx)
    np.testing.assert_allclose(ctx.array(out), a @ b, rtol=1e-5)
    np.testing.assert_allclose(ctx.bytes(out.slice).view(np.float32).reshape(7, 6),
                               (a @ b).T, rtol=1e-5)


def test_bf16_accumulates_in_f32_and_rounds_once():
    """A sum that bf16 accumulation would lose: 1 + 256 * 2^-9 in f32 is 1.5,
    a bf16 running sum stays at 1."""
    k = 257
    a = np.ones((1, k), ml_dtypes.bfloat16)
    b = np.full((k, 1), 2.0 ** -9, ml_dtypes.bfloat16)
    b[0, 0] = 1.0
    host = _Host()
    config = GemmConfig(host.add(a, "bf16"), host.add(b, "bf16"), host.output((1, 1), "bf16"),
                        (), (), (1,), (0,))
    got = _run(config, host)
    assert got.dtype == ml_dtypes.bfloat16 and float(got[0, 0]) == 1.5
    # bf16 operands, f32 result (preferred_element_type=f32).
    host = _Host()
    config = GemmConfig(host.add(a, "bf16"), host.add(b, "bf16"), host.output((1, 1), "f32"),
                        (), (), (1,), (0,))
    assert float(_run(config, host)[0, 0]) == 1.5


def test_integer_dot_wraps_to_the_result_width():
    a = np.full((2, 4), 127, np.int8)
    b = np.full((4, 3), 127, np.int8)
    host = _Host()
    config = GemmConfig(host.add(a, "s8"), host.add(b, "s8"), host.output((2, 3), "s32"),
                        (), (), (1,), (0,))
    np.testing.assert_array_equal(_run(config, host), np.full((2, 3), 4 * 127 * 127))
    big = np.full((1, 2), 2 ** 30, np.int32)
    host = _Host()
    config = GemmConfig(host.add(big, "s32"), host.add(np.full((2, 1), 4, np.int32), "s32"),
                        host.output((1, 1), "s32"), (), (), (1,), (0,))
    assert _run(config, host)[0, 0] == 0          # 2^33 wrapped to 32 bits


def test_complex_and_f64_dots():
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np.complex64)
    b = (rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))).astype(np.complex64)
    host = _Host()
    config = GemmConfig(host.add(a, "c64"), host.add(b, "c64"), host.output((3, 2), "c64"),
                        (), (), (1,), (0,))
    np.testing.assert_allclose(_run(config, host), a @ b, rtol=1e-5)
    x = rng.standard_normal((5, 6))
    y = rng.standard_normal((6, 2))
    host = _Host()
    config = GemmConfig(host.add(x, "f64"), host.add(y, "f64"), host.output((5, 2), "f64"),
                        (), (), (1,), (0,))
    np.testing.assert_allclose(_run(config, host), x @ y, rtol=1e-12)


@pytest.mark.parametrize("epilogue", ["DEFAULT", "BIAS", "RELU", "BIAS_RELU", "GELU",
                                      "BIAS_GELU", "SILU"])
def test_epilogues_alpha_and_beta(epilogue):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal((8, 6)).astype(np.float32)
    c = rng.standard_normal((4, 6)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    host = _Host()
    config = GemmConfig(host.add(a, "f32"), host.add(b, "f32"), host.output((4, 6), "f32"),
                        (), (), (1,), (0,), alpha=0.5, beta=2.0, c=host.add(c, "f32"),
                        bias=host.add(bias, "f32") if "BIAS" in epilogue else None,
                        epilogue=epilogue)
    x = 0.5 * (a @ b) + 2.0 * c
    if "BIAS" in epilogue:
        x = x + bias
    if epilogue.endswith("RELU"):
        x = np.maximum(x, 0)
    elif epilogue.endswith("GELU"):
        x = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    elif epilogue.endswith("SILU"):
        x = x / (1 + np.exp(-x))
    np.testing.assert_allclose(_run(config, host), x, rtol=1e-5, atol=1e-5)


def test_c_operand_may_be_the_output_buffer():
    """XLA's beta != 0 gemm writes into its C operand's buffer."""
    a = np.eye(3, dtype=np.float32)
    b = np.arange(9, dtype=np.float32).reshape(3, 3)
    host = _Host()
    ra, rb = host.add(a, "f32"), host.add(b, "f32")
    c = host.add(np.ones((3, 3), np.float32), "f32")
    config = GemmConfig(ra, rb, c, (), (), (1,), (0,), beta=1.0, c=c)
    np.testing.assert_array_equal(_run(config, host), b + 1)


def test_bad_configs_are_clear_errors():
    ref = ArrayRef(BufferSlice(0, 0, 64), "f32", (4, 4))
    with pytest.raises(hlo.HloError, match="epilogue 'GELU_AUX' is not supported"):
        GemmConfig(ref, ref, ref, (), (), (1,), (0,), epilogue="GELU_AUX")
    with pytest.raises(hlo.HloError, match="do not pair up"):
        GemmConfig(ref, ref, ref, (0,), (), (1,), (0,))


def _cublas_call(backend_config: str, operands: int = 2):
    extra = "".join(f", c{k}" for k in range(operands - 2))
    params = "".join(f"\n  c{k} = f32[4,5] parameter({k + 2})" for k in range(operands - 2))
    module = hlo.parse_module(f"""HloModule m
ENTRY e {{
  a = f32[4,6] parameter(0)
  b = f32[6,5] parameter(1){params}
  ROOT g = f32[4,5] custom-call(a, b{extra}), custom_call_target="__cublas$gemm", backend_config={backend_config}
}}""")
    return module.entry.root


def test_cublas_custom_calls_are_read_once_for_interpreter_and_compiler():
    """xla_gpu.hlo.cublas reads the gemm_backend_config that both the
    interpreter and the program compiler run; the numpy gemm's activations
    are the interpreter's."""
    from xla_gpu.hlo.cublas import EPILOGUES, activation, cublas_gemm
    call = _cublas_call('{"gemm_backend_config":{"alpha_real":2,"beta":1,'
                        '"epilogue":"BIAS_RELU","dot_dimension_numbers":{'
                        '"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],'
                        '"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},'
                        '"precision_config":{"operand_precision":["HIGHEST","DEFAULT"]}}}', 4)
    spec = cublas_gemm(call)
    assert (spec.lhs_contracting, spec.rhs_contracting) == ((1,), (0,))
    assert spec.alpha == 2 and spec.beta == 1 and spec.highest_precision
    assert spec.epilogue_kind.bias and spec.epilogue_kind.activation == "relu"
    assert spec.operand_count == 4
    assert set(gemm.EPILOGUES) == {n for n, e in EPILOGUES.items() if not e.aux}
    x = np.linspace(-3, 3, 13)
    lhs = ArrayRef(BufferSlice(0, 0, 8 * 13), "f64", (13, 1))
    rhs = ArrayRef(BufferSlice(1, 0, 8), "f64", (1, 1))
    # cuBLASLt's activations (GELU: the tanh approximation), through the
    # numpy gemm's epilogues.
    expected = {"relu": np.maximum(x, 0), None: x, "silu": x / (1 + np.exp(-x)),
                "gelu": 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))}
    for name, want in expected.items():
        np.testing.assert_allclose(activation(x, name), want, rtol=1e-12)
        epilogue = next(n for n, e in EPILOGUES.items()
                        if e.activation == name and not e.bias and not e.aux)
        config = GemmConfig(lhs, rhs, lhs, (), (), (1,), (0,), epilogue=epilogue)
        out = gemm.gemm_reference(config, x.reshape(13, 1), np.ones((1, 1)))
        np.testing.assert_allclose(out[:, 0], want, rtol=1e-12)
    with pytest.raises(hlo.HloError, match="instruction 'g'.*not JSON"):
        cublas_gemm(_cublas_call('{"gemm_backend_config": {beta: 1}}'))
    with pytest.raises(hlo.HloError, match="instruction 'g'.*dot_dimension_numbers"):
        cublas_gemm(_cublas_call('{"gemm_backend_config":{"beta":0}}'))
    with pytest.raises(UnsupportedError, match="instruction 'g'.*unsupported epilogue 'NOPE'"):
        cublas_gemm(_cublas_call('{"gemm_backend_config":{"epilogue":"NOPE",'
                                 '"dot_dimension_numbers":{}}}'))


def test_config_round_trips_through_json():
    import json
    ref = lambda i, dims, t="f32", layout=None: ArrayRef(  # noqa: E731
        BufferSlice(i, 64 * i, 4 * int(np.prod(dims))), t, dims, layout)
    config = GemmConfig(ref(0, (2, 3, 4), "bf16"), ref(1, (2, 4, 5), "bf16", (1, 2, 0)),
                        ref(2, (2, 3, 5)), (0,), (0,), (2,), (1,), alpha=complex(0.5, 0),
                        beta=1.0, c=ref(2, (2, 3, 5)), bias=ref(3, (5,)), epilogue="BIAS_RELU",
                        precision="HIGHEST", workspace=BufferSlice(4, 0, 1024))
    back = GemmConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert back == config


# -- cuBLASLt plans (no GPU needed) ------------------------------------------------


def _ref(dims, layout=None, t="f32"):
    return ArrayRef(BufferSlice(0, 0, 4 * int(np.prod(dims))), t, tuple(dims), layout)


def test_row_major_result_is_computed_transposed_with_swapped_operands():
    # D[m,n] = A[m,k] B[k,n], all row-major: cuBLASLt computes D^T = B^T A^T.
    config = GemmConfig(_ref((8, 16)), _ref((16, 4)), _ref((8, 4)), (), (), (1,), (0,))
    first, second, result, swapped = cublas_plan(config)
    assert swapped
    assert (first.op, first.rows, first.cols, first.ld) == (gemm._OP_N, 4, 16, 4)
    assert (second.op, second.rows, second.cols, second.ld) == (gemm._OP_N, 16, 8, 16)
    assert (result.rows, result.cols, result.ld) == (4, 8, 4)


def test_transposed_operands_become_ops():
    # lhs [k, m] contracting dim 0: A = lhs^T. rhs [n, k]: B = rhs^T.
    config = GemmConfig(_ref((16, 8)), _ref((4, 16)), _ref((8, 4)), (), (), (0,), (1,))
    first, second, result, swapped = cublas_plan(config)
    assert swapped and first.op == gemm._OP_T and second.op == gemm._OP_T
    assert (first.rows, first.cols, first.ld) == (16, 4, 16)
    assert (second.rows, second.cols, second.ld) == (8, 16, 8)


def test_batched_plan_strides():
    config = GemmConfig(_ref((3, 8, 16)), _ref((3, 16, 5)), _ref((3, 8, 5)),
                        (0,), (0,), (2,), (1,))
    first, second, result, _ = cublas_plan(config)
    assert (first.batch_stride, second.batch_stride, result.batch_stride) == (80, 128, 40)


def test_column_major_result_keeps_operand_order():
    config = GemmConfig(_ref((8, 16)), _ref((16, 4)), _ref((8, 4), layout=(0, 1)),
                        (), (), (1,), (0,))
    first, second, result, swapped = cublas_plan(config)
    assert not swapped and first.op == gemm._OP_T and second.op == gemm._OP_T
    assert (result.rows, result.cols, result.ld) == (8, 4, 8)


def test_layouts_that_are_not_strided_matrices_are_refused():
    # Two contracting dimensions that are not adjacent in memory.
    with pytest.raises(CublasPlanError):
        cublas_plan(GemmConfig(_ref((2, 3, 4, 5), layout=(1, 3, 0, 2)), _ref((3, 5, 6)),
                               _ref((2, 4, 6)), (), (), (1, 3), (0, 1)))
    with pytest.raises(CublasPlanError, match="no s4 GEMM"):
        cublas_plan(GemmConfig(_ref((2, 2), t="s4"), _ref((2, 2), t="s4"), _ref((2, 2)),
                               (), (), (1,), (0,)))


def test_cublaslt_is_searched_in_wheels_toolkits_and_the_loader_path():
    names = [str(p) for p in gemm._candidate_libraries()]
    assert names[-1].startswith("libcublasLt.so")       # the loader's own search last
    assert any("libcublasLt.so.12" in n for n in names)


def _gpu_with_cublaslt() -> bool:
    from xla_gpu import runtime
    if not runtime.cuda_available():
        return False
    try:
        gemm.cublaslt_library()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _gpu_with_cublaslt(), reason="needs a GPU and cuBLASLt")
def test_cublaslt_matches_numpy():
    from xla_gpu.runtime.cuda import DeviceArray
    rng = np.random.default_rng(5)
    for lhs_layout, (lc, rc) in [(None, ((1,), (0,))), ((0, 1), ((1,), (0,)))]:
        a = rng.standard_normal((3, 64, 32)).astype(np.float32)
        b = rng.standard_normal((3, 32, 48)).astype(np.float32)
        host = _Host()
        ra = host.add(a, "f32")
        rb = host.add(b, "f32")
        out = host.output((3, 64, 48), "f32")
        ctx_host = host.context()
        device = DeviceArray.from_host(ctx_host.buffers[0])
        ctx = ExecutionContext("cuda", [device.ptr], {})
        config = GemmConfig(ra, rb, out, (0,), (0,), (2,), (1,), precision="HIGHEST")
        GemmThunk("dot", config).execute(ctx)
        back = device.to_host()
        got = back[out.slice.offset:out.slice.offset + out.nbytes].view(np.float32)
        np.testing.assert_allclose(got.reshape(3, 64, 48), a @ b, rtol=1e-4, atol=1e-4)
