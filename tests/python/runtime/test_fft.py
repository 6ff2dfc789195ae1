"""The fft thunk: HLO `fft` (FFT / IFFT / RFFT / IRFFT over 1-3 minor
dimensions, single and double precision, batch dimensions) compiled by
xla_gpu.compile as whole programs and run on the cpu target against
numpy's transforms in double precision; layouts other than the default
relayouted by copies; saving and loading; bad input; the cuFFT library
lookup, and the cuFFT path itself where a GPU and cuFFT are present."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import HloError, hlo
from xla_gpu.errors import ArtifactError, CudaUnavailableError
from xla_gpu.runtime import fft as fft_runtime
from xla_gpu.runtime.buffers import BufferSlice
from xla_gpu.runtime.fft import FftConfig, cufft_layout_error, fft_reference
from xla_gpu.runtime.program import load_program
from xla_gpu.runtime.thunks import (ArrayRef, ExecutionContext, FftThunk, thunk_from_dict,
                                    walk)

_COMPLEX = {"f32": "c64", "f64": "c128"}
_REAL = {"c64": "f32", "c128": "f64"}
_NUMPY = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}


def _dims(dims) -> str:
    return ",".join(map(str, dims))


def _fft_program(fft_type: str, batch: tuple[int, ...], lengths: tuple[int, ...],
                 real_type: str) -> tuple[str, tuple[int, ...], str]:
    """An HLO module of one fft: its text, operand dims and type."""
    complex_type = _COMPLEX[real_type]
    half = lengths[:-1] + (lengths[-1] // 2 + 1,)
    in_type, in_last, out_type, out_last = {
        "FFT": (complex_type, lengths, complex_type, lengths),
        "IFFT": (complex_type, lengths, complex_type, lengths),
        "RFFT": (real_type, lengths, complex_type, half),
        "IRFFT": (complex_type, half, real_type, lengths)}[fft_type]
    in_dims, out_dims = batch + in_last, batch + out_last
    text = f"""HloModule fft_{fft_type.lower()}

ENTRY main {{
  x = {in_type}[{_dims(in_dims)}] parameter(0)
  ROOT f = {out_type}[{_dims(out_dims)}] fft(x), fft_type={fft_type}, fft_length={{{_dims(lengths)}}}
}}
"""
    return text, in_dims, in_type


def _random(dims, element_type: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if element_type in ("c64", "c128"):
        value = rng.standard_normal(dims) + 1j * rng.standard_normal(dims)
    else:
        value = rng.standard_normal(dims)
    return value.astype(_NUMPY[element_type])


def _expected(fft_type: str, x: np.ndarray, lengths: tuple[int, ...]) -> np.ndarray:
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    x = x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)
    return {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn,
            "IRFFT": np.fft.irfftn}[fft_type](x, s=lengths, axes=axes)


def _tolerance(real_type: str, lengths) -> float:
    return (5e-5 if real_type == "f32" else 1e-12) * max(1.0, np.log2(np.prod(lengths)))


CASES = [  # (batch dims, fft_length)
    ((5,), (16,)),          # 1-D, one batch dim
    ((), (12,)),            # 1-D, no batch, not a power of two
    ((2, 3), (6, 10)),      # 2-D, two batch dims
    ((2,), (4, 6, 8)),      # 3-D
]


@pytest.mark.parametrize("real_type", ["f32", "f64"])
@pytest.mark.parametrize("fft_type", ["FFT", "IFFT", "RFFT", "IRFFT"])
def test_fft_matches_numpy(fft_type, real_type, tmp_path):
    for k, (batch, lengths) in enumerate(CASES):
        text, in_dims, in_type = _fft_program(fft_type, batch, lengths, real_type)
        exe = xla_gpu.compile(text, target="cpu")
        assert [t.kind for t in exe.thunks] == ["fft"]
        assert exe.num_kernels == 0
        x = _random(in_dims, in_type, seed=k)
        if fft_type == "IRFFT":   # the spectrum of real data (Hermitian)
            x = np.fft.rfftn(_random(batch + lengths, real_type, k),
                             axes=tuple(range(len(batch), len(batch) + len(lengths))))
            x = x.astype(_NUMPY[in_type])
        (got,) = exe.run(x)
        want = _expected(fft_type, x, lengths)
        out_type = _REAL[in_type] if fft_type == "IRFFT" else \
            (_COMPLEX[in_type] if fft_type == "RFFT" else in_type)
        assert got.dtype == _NUMPY[out_type], (fft_type, lengths, got.dtype)
        assert got.shape == want.shape
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=0,
                                   atol=_tolerance(real_type, lengths) * scale,
                                   err_msg=f"{fft_type} {real_type} batch={batch} {lengths}")


def test_inverse_transforms_are_scaled_by_one_over_n(tmp_path):
    """IFFT(FFT(x)) == x and IRFFT(RFFT(x)) == x in one program (XLA
    divides inverse transforms by the product of fft_length), the RFFT's
    result also an output: the IRFFT leaves its operand intact."""
    text = """HloModule roundtrip

ENTRY main {
  z = c64[3,8,4] parameter(0)
  x = f32[2,6,10] parameter(1)
  f = c64[3,8,4] fft(z), fft_type=FFT, fft_length={8,4}
  back = c64[3,8,4] fft(f), fft_type=IFFT, fft_length={8,4}
  r = c64[2,6,6] fft(x), fft_type=RFFT, fft_length={6,10}
  real = f32[2,6,10] fft(r), fft_type=IRFFT, fft_length={6,10}
  ROOT t = (c64[3,8,4], f32[2,6,10], c64[2,6,6]) tuple(back, real, r)
}
"""
    exe = xla_gpu.compile(text, target="cpu")
    z, x = _random((3, 8, 4), "c64", 1), _random((2, 6, 10), "f32", 2)
    back, real, r = exe.run(z, x)
    np.testing.assert_allclose(back, z, atol=2e-6)
    np.testing.assert_allclose(real, x, atol=2e-6)
    np.testing.assert_allclose(r, np.fft.rfft2(x), atol=1e-4)
    assert exe.stats.get("ffts") == 4


def test_fft_inside_elementwise_work_is_never_fused():
    """A plain-op program (the optimization pipeline runs): the multiply
    before the ffts and the abs after them become kernels, each fft its own
    thunk in ENTRY."""
    text = """HloModule around

ENTRY main {
  x = f32[4,16] parameter(0)
  two = f32[] constant(2)
  twos = f32[4,16] broadcast(two), dimensions={}
  scaled = f32[4,16] multiply(x, twos)
  r = c64[4,9] fft(scaled), fft_type=RFFT, fft_length={16}
  back = f32[4,16] fft(r), fft_type=IRFFT, fft_length={16}
  ROOT a = f32[4,16] abs(back)
}
"""
    exe = xla_gpu.compile(text, target="cpu")
    kinds = [t.kind for t in walk(exe.thunks)]
    assert kinds.count("fft") == 2 and "kernel" in kinds
    optimized = hlo.parse_module(exe.as_text())
    ffts = [(comp.name, inst.name) for comp in optimized.computations
            for inst in comp.instructions if inst.opcode == "fft"]
    assert ffts == [(optimized.entry.name, "r"), (optimized.entry.name, "back")]
    assert any(inst.opcode == "fusion" for inst in optimized.entry.instructions)
    x = _random((4, 16), "f32", 3)
    (got,) = exe.run(x)
    np.testing.assert_allclose(got, np.abs(2 * x), rtol=1e-5, atol=1e-5)


def test_non_default_layouts_are_relayouted_by_copies():
    """cuFFT reads row-major batches: a column-major operand (the RFFT's)
    and result (the IRFFT's) get a copy kernel on their side of the fft."""
    text = """HloModule layouts, entry_computation_layout={(f32[8,6]{0,1})->(c64[8,4]{1,0}, f32[8,6]{0,1})}

ENTRY main {
  x = f32[8,6]{0,1} parameter(0)
  r = c64[8,4]{1,0} fft(x), fft_type=RFFT, fft_length={6}
  back = f32[8,6]{0,1} fft(r), fft_type=IRFFT, fft_length={6}
  ROOT t = (c64[8,4]{1,0}, f32[8,6]{0,1}) tuple(r, back)
}
"""
    exe = xla_gpu.compile(text, target="cpu", optimize=False)
    ffts = [t for t in walk(exe.thunks) if t.kind == "fft"]
    assert len(ffts) == 2
    for thunk in ffts:
        assert thunk.config.input.is_row_major and thunk.config.output.is_row_major
    assert sum(1 for t in walk(exe.thunks) if t.kind == "kernel") == 2
    x = _random((8, 6), "f32", 4)
    r, back = exe.run(x)
    np.testing.assert_allclose(r, np.fft.rfft(x.astype(np.float64), axis=-1), atol=1e-5)
    np.testing.assert_allclose(back, x, atol=1e-6)


def test_complex_work_around_a_column_major_fft():
    """Complex kernels on either side: a c64 multiply before, the FFT's
    column-major operand and result relayouted by c64 copies, abs after."""
    text = """HloModule complex_layouts, entry_computation_layout={(c64[8,6]{0,1})->(c64[8,6]{0,1}, f32[8,6]{1,0})}

ENTRY main {
  z = c64[8,6]{0,1} parameter(0)
  two = c64[] constant((0, 2))
  twos = c64[8,6]{0,1} broadcast(two), dimensions={}
  scaled = c64[8,6]{0,1} multiply(z, twos)
  f = c64[8,6]{0,1} fft(scaled), fft_type=FFT, fft_length={6}
  a = f32[8,6]{1,0} abs(f)
  ROOT t = (c64[8,6]{0,1}, f32[8,6]{1,0}) tuple(f, a)
}
"""
    z = _random((8, 6), "c64", 8)
    want = np.fft.fft(2j * z.astype(np.complex128), axis=-1)
    for optimize in (None, False):
        exe = xla_gpu.compile(text, target="cpu", optimize=optimize)
        ffts = [t for t in walk(exe.thunks) if t.kind == "fft"]
        assert len(ffts) == 1 and ffts[0].config.input.is_row_major and \
            ffts[0].config.output.is_row_major
        f, a = exe.run(z)
        np.testing.assert_allclose(f, want, atol=1e-5)
        np.testing.assert_allclose(a, np.abs(want), atol=1e-5)


def test_zero_sized_batches(tmp_path):
    text = """HloModule empty

ENTRY main {
  z = c64[0,8] parameter(0)
  ROOT f = c64[0,8] fft(z), fft_type=FFT, fft_length={8}
}
"""
    exe = xla_gpu.compile(text, target="cpu")
    (got,) = exe.run(np.zeros((0, 8), np.complex64))
    assert got.shape == (0, 8) and got.dtype == np.complex64


def test_save_and_load_a_program_with_an_fft_thunk(tmp_path):
    text, in_dims, in_type = _fft_program("RFFT", (3,), (4, 6), "f32")
    exe = xla_gpu.compile(text, target="cpu")
    sequence = exe.thunk_sequence_text()
    assert "fft f RFFT fft_length={4,6} f32[3,4,6] -> c64[3,4,4]" in sequence
    saved = exe.save(tmp_path / "program")
    manifest = json.loads((saved / "program.json").read_text())
    (thunk,) = manifest["thunks"]
    assert thunk["kind"] == "fft" and thunk["config"]["fft_length"] == [4, 6]
    loaded = load_program(saved, trusted=True)
    assert isinstance(loaded.thunks[0], FftThunk)
    assert loaded.thunk_sequence_text() == sequence
    x = _random(in_dims, in_type, 5)
    (got,) = loaded.run(x)
    np.testing.assert_allclose(got, np.fft.rfft2(x.astype(np.float64)), atol=1e-4)


def test_a_tampered_fft_thunk_is_refused_when_loaded(tmp_path):
    text, _, _ = _fft_program("FFT", (2,), (8,), "f32")
    exe = xla_gpu.compile(text, target="cpu")
    (data,) = [t.to_dict() for t in exe.thunks]
    assert isinstance(thunk_from_dict(data), FftThunk)
    bad = json.loads(json.dumps(data))
    bad["config"]["fft_length"] = [6]
    with pytest.raises(ArtifactError, match="fft_length"):
        thunk_from_dict(bad)
    bad = json.loads(json.dumps(data))
    bad["config"]["fft_type"] = "DCT"
    with pytest.raises(ArtifactError, match="unknown fft_type 'DCT'"):
        thunk_from_dict(bad)


@pytest.mark.parametrize("body,message", [
    ("ROOT f = c64[4,8] fft(z), fft_type=FFT, fft_length={6}", "fft_length"),
    ("ROOT f = c64[4,8] fft(z), fft_type=RFFT, fft_length={8}", "RFFT needs"),
    ("ROOT f = c64[4,8] fft(z), fft_type=HARTLEY, fft_length={8}", "HARTLEY"),
    ("ROOT f = c64[4,8] fft(z), fft_type=FFT, fft_length={1,1,4,8}", "1 to 3"),
])
def test_bad_ffts_are_clear_errors(body, message, tmp_path):
    text = f"HloModule bad\n\nENTRY main {{\n  z = c64[4,8] parameter(0)\n  {body}\n}}\n"
    with pytest.raises(HloError, match=message) as info:
        xla_gpu.compile(text, target="cpu")
    assert "line 5: instruction 'f' (fft)" in str(info.value)


def _ref(dims, element_type, offset=0, layout=None) -> ArrayRef:
    ref = ArrayRef(BufferSlice(0, offset, 0), element_type, dims, layout)
    return ArrayRef(BufferSlice(0, offset, ref.nbytes), element_type, dims, layout)


def test_cufft_layout_requirements():
    ok = FftConfig("FFT", (8,), _ref((4, 8), "c64"), _ref((4, 8), "c64", 256))
    assert cufft_layout_error(ok) is None
    column_major = FftConfig("FFT", (8,), _ref((4, 8), "c64", 0, (0, 1)),
                             _ref((4, 8), "c64", 256))
    assert "row-major" in cufft_layout_error(column_major)
    overlapping = FftConfig("FFT", (8,), _ref((4, 8), "c64"), _ref((4, 8), "c64", 128))
    assert "overlap" in cufft_layout_error(overlapping)
    assert ok.plan_key() == ("FFT", (8,), 4, "c64")
    np.testing.assert_array_equal(
        fft_reference(ok, np.ones((4, 8), np.complex64)),
        np.tile(np.eye(1, 8, dtype=np.complex64) * 8, (4, 1)))


def test_cufft_is_searched_in_wheels_toolkits_and_the_loader_path():
    names = [str(p) for p in fft_runtime._candidate_libraries(fft_runtime._CUFFT_NAMES,
                                                               "cufft")]
    assert names[-1].startswith("libcufft.so")     # the loader's own search last
    assert any(n == "libcufft.so.12" for n in names)   # CUDA 13's cuFFT
    assert any(n == "libcufft.so.11" for n in names)   # CUDA 12's


def test_missing_cufft_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(fft_runtime, "_libraries", {})
    monkeypatch.setattr(fft_runtime, "_candidate_libraries",
                        lambda names, wheel: [Path("/nonexistent") / n
                                              for n in names])
    with pytest.raises(CudaUnavailableError, match="cuFFT not found .*nvidia-cufft"):
        fft_runtime.cufft_library()
    with pytest.raises(CudaUnavailableError, match="cuBLAS not found"):
        fft_runtime.cublas_library()
    # An fft thunk run on cuda says which instruction needed cuFFT.
    monkeypatch.setattr(fft_runtime, "_cufft_instance", None)
    monkeypatch.setattr(fft_runtime, "_plans", {})
    config = FftConfig("FFT", (8,), _ref((4, 8), "c64"), _ref((4, 8), "c64", 256))
    ctx = ExecutionContext("cuda", [1 << 20], {})
    with pytest.raises(CudaUnavailableError, match="fft 'spectrum': cuFFT not found"):
        FftThunk("spectrum", config).execute(ctx)


def _gpu_with_cufft() -> bool:
    from xla_gpu import runtime
    if not runtime.cuda_available():
        return False
    try:
        fft_runtime.cufft_library()
        fft_runtime.cublas_library()
        return True
    except Exception:
        return False


@pytest.mark.skipif(not _gpu_with_cufft(), reason="needs a GPU, cuFFT and cuBLAS")
@pytest.mark.parametrize("real_type", ["f32", "f64"])
def test_cufft_matches_numpy(real_type, tmp_path):
    complex_type = _COMPLEX[real_type]
    text = f"""HloModule cufft

ENTRY main {{
  z = {complex_type}[3,8,12] parameter(0)
  x = {real_type}[5,16] parameter(1)
  f = {complex_type}[3,8,12] fft(z), fft_type=FFT, fft_length={{8,12}}
  i = {complex_type}[3,8,12] fft(z), fft_type=IFFT, fft_length={{12}}
  r = {complex_type}[5,9] fft(x), fft_type=RFFT, fft_length={{16}}
  b = {real_type}[5,16] fft(r), fft_type=IRFFT, fft_length={{16}}
  ROOT t = ({complex_type}[3,8,12], {complex_type}[3,8,12], {complex_type}[5,9], {real_type}[5,16]) tuple(f, i, r, b)
}}
"""
    exe = xla_gpu.compile(text, target="cuda")
    z, x = _random((3, 8, 12), complex_type, 6), _random((5, 16), real_type, 7)
    for _ in range(2):   # the second run reuses the cached plans
        f, i, r, b = exe.run(z, x)
        tol = _tolerance(real_type, (96,))
        np.testing.assert_allclose(f, np.fft.fft2(z.astype(np.complex128)), atol=tol * 50)
        np.testing.assert_allclose(i, np.fft.ifft(z.astype(np.complex128)), atol=tol)
        np.testing.assert_allclose(r, np.fft.rfft(x.astype(np.float64)), atol=tol * 20)
        np.testing.assert_allclose(b, x, atol=tol)   # IRFFT left r intact
