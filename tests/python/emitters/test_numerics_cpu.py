"""Every emitter's kernels, run on the cpu target (the same kernel, the
GPU grid emulated), against the numpy reference interpreter. On a machine
with a GPU the same fusions also run on the cuda target."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo, runtime
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type

HERE = Path(__file__).parents[1]
ROOT = HERE.parents[1]
SOURCES = sorted((HERE / "hlo_inputs").glob("*.hlo")) + sorted(
    p for p in (ROOT / "tests" / "lit" / "emitters").glob("*.hlo") if p.name != "invalid.hlo")
HAS_GPU = runtime.cuda_available()


def _cases():
    for path in SOURCES:
        module = hlo.parse_file(path)
        fusions = [i.name for i in module.entry.instructions if i.opcode == "fusion"] \
            if any(c.is_entry for c in module.computations) else []
        for name in fusions or [None]:
            yield pytest.param(path, name, id=f"{path.stem}-{name or 'entry'}")


def _check(path: Path, fusion: str | None, target: str) -> None:
    text = path.read_text()
    module = hlo.parse_module(text, source=str(path))
    spec = select_fusion(module, fusion)
    if spec.computation.root.shape.num_elements > (1 << 22) if not \
            spec.computation.root.shape.is_tuple else False:
        pytest.skip("too large for the interpreter in a unit test")
    inputs = random_inputs(spec.computation, seed=1)
    exe = xla_gpu.compile(text, target=target, fusion=fusion)
    got = exe.run(*inputs)
    want = hlo.evaluate(spec.computation, *inputs)
    assert len(got) == len(want)
    for k, (g, w, s) in enumerate(zip(got, want, spec.output_shapes)):
        mismatch = compare(np.asarray(g), np.asarray(w), s.element_type, k,
                           tolerance_type(spec.computation, s.element_type),
                           has_reduction(spec.computation))
        assert mismatch is None, f"{exe.spec.emitter} emitter: {mismatch}"


@pytest.mark.parametrize("path,fusion", list(_cases()))
def test_cpu_target_matches_the_interpreter(path, fusion):
    _check(path, fusion, "cpu")


@pytest.mark.skipif(not HAS_GPU, reason="no usable CUDA GPU on this machine")
@pytest.mark.parametrize("path,fusion", list(_cases()))
def test_cuda_target_matches_the_interpreter(path, fusion):
    _check(path, fusion, "cuda")


_DTYPE_SWEEP = """HloModule m
f {{
  p = {t}[1000] parameter(0)
  q = {t}[1000] parameter(1)
  a = {t}[1000] {op}(p, q)
  m = {t}[1000] maximum(a, p)
  c = f32[1000] convert(m)
  e = f32[1000] exponential(c)
  ROOT r = {t}[1000] convert(e)
}}
"""


@pytest.mark.parametrize("t", [
    "pred", "s2", "s4", "s8", "s16", "s32", "s64", "u2", "u4", "u8", "u16", "u32", "u64",
    "f16", "bf16", "f32", "f64",
    "f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz", "f8e4m3", "f8e3m4",
    "f8e8m0fnu",
])
def test_every_element_type_on_both_targets(t):
    text = _DTYPE_SWEEP.format(t=t, op="and" if t == "pred" else "add")
    comp = hlo.parse_module(text).entry
    inputs = random_inputs(comp, seed=3)
    assert ".entry f(" in xla_gpu.compile(text, target="cuda", cache=False).ptx
    (got,) = xla_gpu.compile(text, target="cpu", cache=False).run(*inputs)
    (want,) = hlo.evaluate(comp, *inputs)
    assert compare(got, want, t, 0, tolerance_type(comp, t)) is None


@pytest.mark.parametrize("t", ["f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz",
                               "f8e4m3fnuz", "f8e4m3", "f8e3m4", "f8e8m0fnu"])
def test_f8_conversions_are_exact(t):
    """f32 -> f8 -> f32 matches ml_dtypes bit for bit: every code, every
    midpoint between neighbours (ties to even), overflow, NaN, signed zeros."""
    import ml_dtypes
    dt = hlo.numpy_dtype(t)
    values = np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)
    finite = np.sort(values[np.isfinite(values)]).astype(np.float64)
    mids = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)
    top = float(ml_dtypes.finfo(dt).max)
    special = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, top * 1.5, -top * 1.5,
                        top * 1.0625, top * 1.03125, 1e-30, -1e-30,
                        # f32 subnormals around 1.5 * 2^-127 (f8e8m0fnu's rounding)
                        8.8e-39, 8.9e-39, 1e-40, 6e-39], np.float32)
    x = np.concatenate([values, mids, special,
                        np.random.default_rng(0).uniform(-top, top, 500).astype(np.float32)])
    text = (f"HloModule m\nf {{\n p = f32[{x.size}] parameter(0)\n"
            f" c = {t}[{x.size}] convert(p)\n ROOT r = f32[{x.size}] convert(c)\n}}\n")
    (got,) = xla_gpu.compile(text, target="cpu", cache=False).run(x)
    want = x.astype(dt).astype(np.float32)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])


_INT_OPS = """HloModule m
f {{
  a = {t}[512] parameter(0)
  b = {t}[512] parameter(1)
  d = {t}[512] divide(a, b)
  r = {t}[512] remainder(a, b)
  m = {t}[512] multiply(a, b)
  s = {t}[512] add(d, m)
  l = {t}[512] shift-left(a, b)
  sr = {t}[512] shift-right-logical(a, b)
  sa = {t}[512] shift-right-arithmetic(a, b)
  n = {t}[512] not(a)
  p = {t}[512] popcnt(a)
  z = {t}[512] count-leading-zeros(b)
  lt = pred[512] compare(a, b), direction=LT
  w = s32[512] convert(s)
  ROOT t = ({t}[512], {t}[512], {t}[512], {t}[512], {t}[512], {t}[512], {t}[512], {t}[512], pred[512], s32[512]) tuple(s, r, l, sr, sa, n, p, z, lt, w)
}}
"""


@pytest.mark.parametrize("t", ["s2", "s4", "u2", "u4", "s8", "u8", "s32", "u64"])
def test_integer_ops_wrap_at_their_width(t):
    """XLA semantics of integer ops (division by zero, shifts past the
    width, overflow) at every width, sub-byte ones held in a byte."""
    text = _INT_OPS.format(t=t)
    comp = hlo.parse_module(text).entry
    dt = hlo.numpy_dtype(t)
    rng = np.random.default_rng(5)
    bits = hlo.bit_width(t)
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if t.startswith("s") else (0, 1 << bits)
    lo, hi = max(lo, -1000), min(hi, 1000)
    a = rng.integers(lo, hi, 512).astype(dt)
    b = rng.integers(lo, hi, 512).astype(dt)
    b[:8] = 0                                   # division by zero
    got = xla_gpu.compile(text, target="cpu", cache=False).run(a, b)
    want = hlo.evaluate(comp, a, b)
    for k, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(np.asarray(g).astype(np.int64), np.asarray(w).astype(np.int64)), k


@pytest.mark.parametrize("t", ["s2", "u4", "s4", "s8", "u8", "s16", "u32", "s32",
                               "u64", "s64"])
def test_mulhi_matches_the_exact_product_at_every_width(t):
    """The high half of the full product: sub-byte operands held in a byte
    (other bits of the byte ignored), 64-bit ones through a 128-bit
    multiply."""
    text = (f"HloModule m\nf {{\n a = {t}[256] parameter(0)\n b = {t}[256] parameter(1)\n"
            f" ROOT r = {t}[256] mulhi(a, b)\n}}\n")
    bits = hlo.bit_width(t)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t[0] == "s" else (0, (1 << bits) - 1)
    edges = [lo, lo + 1, -1 if t[0] == "s" else 2, 0, 1, hi - 1, hi]
    rng = random.Random(7)   # Python integers: the u64 range included
    pairs = [(x, y) for x in edges for y in edges]
    pairs += [(rng.randint(lo, hi), rng.randint(lo, hi)) for _ in range(256 - len(pairs))]
    dt = hlo.numpy_dtype(t)
    a = np.array([x for x, _ in pairs], dtype=object).astype(dt)
    b = np.array([y for _, y in pairs], dtype=object).astype(dt)
    exact = [(x * y) >> bits for x, y in pairs]
    (got,) = xla_gpu.compile(text, target="cpu", cache=False).run(a, b)
    (want,) = hlo.evaluate(hlo.parse_module(text).entry, a, b)
    assert [int(v) for v in np.asarray(got)] == exact
    assert [int(v) for v in np.asarray(want)] == exact
