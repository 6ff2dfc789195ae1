"""What the cpu target runs a program's products and convolutions as:
BLAS (a gemm thunk) for products past the emulated GEMM kernel's bound,
im2col + gemm for all but tiny convolutions, BLAS on one thread with the
process's own setting given back, large products split into panels over
helper threads. Results against the reference interpreter and numpy."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.program.prepare import HOST_GEMM_KERNEL_MAX_MACS
from xla_gpu.runtime import host_blas
from xla_gpu.runtime.thunks import walk


def _dense(m: int, k: int, n: int) -> str:
    return f"""HloModule dense
ENTRY main {{
  x = f32[{m},{k}] parameter(0)
  w = f32[{k},{n}] parameter(1)
  b = f32[{n}] parameter(2)
  d = f32[{m},{n}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  bb = f32[{m},{n}] broadcast(b), dimensions={{1}}
  ROOT z = f32[{m},{n}] add(d, bb)
}}
"""


def _run_and_check(text: str):
    module = hlo.parse_module(text)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in module.entry.parameters]
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    (want,) = hlo.evaluate(module, *args)
    (got,) = exe.run(*args)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return [t.kind for t in walk(exe.thunks) if t.kind != "command_buffer"]


def test_a_product_past_the_bound_is_blas_and_a_smaller_one_a_gemm_kernel():
    # 256 x 128 x 128: 4M multiply-adds, 8x the bound.
    assert 256 * 128 * 128 > HOST_GEMM_KERNEL_MAX_MACS
    kinds = _run_and_check(_dense(256, 128, 128))
    assert "gemm" in kinds and "kernel" in kinds       # the bias add around it
    assert 16 * 32 * 24 <= HOST_GEMM_KERNEL_MAX_MACS
    assert _run_and_check(_dense(16, 32, 24)) == ["kernel"]


def test_a_small_convolution_is_im2col_and_a_gemm_on_the_host():
    # 4 * 8 * 8 * 8 outputs of a 3x3x4 window: 74K multiply-adds, 200x below
    # the GPU's direct-kernel bound; its filter gradient (f01b) too.
    forward = """HloModule m
ENTRY e {
  x = f32[4,8,8,4] parameter(0)
  k = f32[3,3,4,8] parameter(1)
  ROOT c = f32[4,8,8,8] convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
"""
    filter_gradient = """HloModule m
ENTRY e {
  x = f32[4,8,8,4] parameter(0)
  g = f32[4,8,8,8] parameter(1)
  ROOT c = f32[3,3,4,8] convolution(x, g), window={size=8x8 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf
}
"""
    for text in (forward, filter_gradient):
        kinds = _run_and_check(text)
        assert "gemm" in kinds, kinds


@pytest.fixture
def openblas():
    control = host_blas.openblas_threads()
    if control is None:
        pytest.skip("numpy's BLAS here is not OpenBLAS")
    return control


def test_products_run_blas_on_one_thread_and_give_the_setting_back(openblas):
    setter, getter = openblas
    before = getter()
    setter(2)
    try:
        assert host_blas.single_threaded_blas()
        assert getter() == 1
        # Products overlapping from several threads: the last one restores.
        assert host_blas.single_threaded_blas()
        host_blas.restore_blas_threads()
        assert getter() == 1
        host_blas.restore_blas_threads()
        assert getter() == 2
        # A program's gemm thunk leaves the setting as it found it.
        _run_and_check(_dense(256, 128, 128))
        assert getter() == 2
    finally:
        setter(before)


@pytest.mark.parametrize("batch,m,k,n", [(1, 1000, 130, 150), (37, 40, 50, 260), (3, 97, 211, 230)])
def test_large_products_split_into_panels_give_numpys_result(batch, m, k, n, monkeypatch):
    """Row panels (batch 1), batch panels, and a batch too small for batch
    panels (one product), each over the helper threads where there are
    any; the same sums as numpy's own product (panels change no summation
    order within a row)."""
    monkeypatch.setattr(host_blas, "HOST_BLAS_SPLIT_MACS", 1)
    rng = np.random.default_rng(9)
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    out = np.full((batch, m, n), np.nan, np.float32)
    for _ in range(3):       # helpers started on the first, reused after
        host_blas.blas_matmul(a, b, out)
        np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-4)
        out[...] = np.nan
    if host_blas.openblas_threads() is not None:
        assert len(host_blas._helper_queues()) == host_blas.helper_threads()


def test_a_failing_panel_is_raised_by_the_caller():
    """A panel that raises (here: a helper's, or the caller's own) comes
    out of the split product, after the helpers inside it finished."""
    def run_panel(p: int) -> None:
        if p == 5:
            raise ValueError("panel 5")
    split = host_blas._Split(run_panel, 8)
    for jobs in host_blas._helper_queues():
        jobs.put(split)
    with pytest.raises(ValueError, match="panel 5"):
        try:
            split.work()
        finally:
            split.finish()


def _needs_helpers():
    if host_blas.openblas_threads() is None or host_blas.helper_threads() == 0:
        pytest.skip("products split only under OpenBLAS with a helper thread")


@pytest.mark.parametrize("m,n,b_transposed,rows", [
    (300, 120, False, True),     # tall: row panels re-pack the smaller b
    (120, 300, False, False),    # wide: column panels re-pack the smaller a
    (200, 120, True, False),     # a transposed b counts twice: columns
    (300, 120, True, True),      # ... until the output is over twice as tall
])
def test_a_product_splits_across_its_longer_side(m, n, b_transposed, rows, monkeypatch):
    """Each panel's BLAS call packs the other side's operand again: a wide
    product splits into column panels, a tall one into row panels; the
    panels tile the output, and the `after` callback sees each one."""
    _needs_helpers()
    monkeypatch.setattr(host_blas, "HOST_BLAS_SPLIT_MACS", 1)
    rng = np.random.default_rng(4)
    k = 70
    a = rng.standard_normal((1, m, k)).astype(np.float32)
    b = rng.standard_normal((1, n, k) if b_transposed else (1, k, n)).astype(np.float32)
    if b_transposed:
        b = b.transpose(0, 2, 1)
    out = np.full((1, m, n), np.nan, np.float32)
    seen = np.zeros((m, n), np.int64)
    indices = []

    def after(index):
        indices.append(index)
        seen[index[1:]] += 1

    host_blas.blas_matmul(a, b, out, after=after)
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-4)
    assert (seen == 1).all()
    assert len(indices) > 1 and all(len(i) == (2 if rows else 3) for i in indices), indices


@pytest.mark.parametrize("lc,rc", [((1,), (0,)), ((0,), (0,)), ((1,), (1,)), ((0,), (1,))])
@pytest.mark.parametrize("m,n", [(96, 160), (160, 96)])
def test_split_products_with_an_epilogue_match_the_reference(lc, rc, m, n, monkeypatch):
    """Every form of a 2-d dot's operands (either transposed), split into
    row or column panels, each taking alpha, beta * C, the bias row and
    GELU on the thread that computed it: the reference's values."""
    from xla_gpu.runtime.buffers import BufferSlice
    from xla_gpu.runtime.gemm import GemmConfig, gemm_reference
    from xla_gpu.runtime.thunks import ArrayRef, ExecutionContext, GemmThunk
    _needs_helpers()
    monkeypatch.setattr(host_blas, "HOST_BLAS_SPLIT_MACS", 1)
    k = 80
    rng = np.random.default_rng(5)
    lhs = rng.standard_normal((m, k) if lc == (1,) else (k, m)).astype(np.float32)
    rhs = rng.standard_normal((k, n) if rc == (0,) else (n, k)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    bias = rng.standard_normal((n,)).astype(np.float32)
    arrays, refs, offset = [lhs, rhs, c, bias, np.zeros((m, n), np.float32)], [], 0
    for x in arrays:
        refs.append(ArrayRef(BufferSlice(0, offset, x.nbytes), "f32", x.shape))
        offset += x.nbytes
    buffer = np.concatenate([x.reshape(-1).view(np.uint8) for x in arrays])
    config = GemmConfig(refs[0], refs[1], refs[4], (), (), lc, rc, alpha=0.5, beta=2.0,
                        c=refs[2], bias=refs[3], epilogue="BIAS_GELU")
    ctx = ExecutionContext("cpu", [buffer], {})
    GemmThunk("dot", config).execute(ctx)
    want = gemm_reference(config, lhs, rhs, c, bias)
    np.testing.assert_allclose(ctx.array(config.out), want, rtol=2e-5, atol=2e-5)

