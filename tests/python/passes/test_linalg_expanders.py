"""TriangularSolveExpander and CholeskyExpander: `triangular-solve` and
`cholesky` as loops of dots and dynamic slices, checked against scipy /
numpy through the reference interpreter (every variant) and compiled for
target "cpu" (the pass pipeline runs them)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.linalg

import xla_gpu
from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes import verify_module
from xla_gpu.hlo.passes.linalg_expanders import CholeskyExpander, TriangularSolveExpander

_TYPES = {"f32": np.float32, "f64": np.float64, "c64": np.complex64}


def _dims(dims) -> str:
    return ",".join(map(str, dims))


def _solve_text(t, adims, bdims, left, lower, unit, mode) -> str:
    flag = lambda v: str(v).lower()  # noqa: E731
    return f"""HloModule solve
ENTRY main {{
  a = {t}[{_dims(adims)}] parameter(0)
  b = {t}[{_dims(bdims)}] parameter(1)
  ROOT x = {t}[{_dims(bdims)}] triangular-solve(a, b), left_side={flag(left)}, \
lower={flag(lower)}, unit_diagonal={flag(unit)}, transpose_a={mode}
}}
"""


def _cholesky_text(t, dims, lower) -> str:
    return f"""HloModule chol
ENTRY main {{
  a = {t}[{_dims(dims)}] parameter(0)
  ROOT l = {t}[{_dims(dims)}] cholesky(a), lower={str(lower).lower()}
}}
"""


def _solve_inputs(rng, t, adims, bdims):
    n = adims[-1]
    a = rng.standard_normal(adims) + 4 * np.eye(n)
    b = rng.standard_normal(bdims)
    if t.startswith("c"):
        a = a + 1j * rng.standard_normal(adims)
        b = b + 1j * rng.standard_normal(bdims)
    # The triangle not read holds garbage: the solve must ignore it.
    return a.astype(_TYPES[t]), b.astype(_TYPES[t])


def _solve_reference(a, b, left, lower, unit, mode):
    trans = {"NO_TRANSPOSE": 0, "TRANSPOSE": 1, "ADJOINT": 2}[mode]
    a = a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)
    b = b.astype(a.dtype)
    out = np.empty_like(b)
    for idx in np.ndindex(*a.shape[:-2]):
        if left:
            out[idx] = scipy.linalg.solve_triangular(a[idx], b[idx], trans=trans,
                                                     lower=lower, unit_diagonal=unit)
        else:
            # X op(a) = b  <=>  op(a)^T X^T = b^T; op(a)^T is a read with
            # the other transposition (conjugated for ADJOINT).
            m = a[idx]
            if mode == "ADJOINT":
                m, other = np.conj(m), 0
            else:
                other = 1 - trans
            out[idx] = scipy.linalg.solve_triangular(
                m, b[idx].T, trans=other, lower=lower, unit_diagonal=unit).T
    return out


def _one(result):
    return result[0] if isinstance(result, (tuple, list)) else result


def _expanded(text: str, expander):
    module = parse_module(text).link()
    assert expander.run(module)
    verify_module(module)
    opcodes = {i.opcode for c in module.computations for i in c.instructions}
    assert not opcodes & {"triangular-solve", "cholesky"}
    assert "while" in opcodes
    return module


@pytest.mark.parametrize("t", ["f32", "c64"])
@pytest.mark.parametrize("left, lower, unit, mode", list(itertools.product(
    [True, False], [True, False], [True, False], ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"])))
def test_triangular_solve_expansion_matches_scipy(t, left, lower, unit, mode):
    rng = np.random.default_rng(7)
    n, k = 4, 3
    adims = (2, n, n)
    bdims = (2, n, k) if left else (2, k, n)
    a, b = _solve_inputs(rng, t, adims, bdims)
    module = _expanded(_solve_text(t, adims, bdims, left, lower, unit, mode),
                       TriangularSolveExpander())
    got = _one(evaluate(module, a, b))
    np.testing.assert_allclose(got, _solve_reference(a, b, left, lower, unit, mode),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("t", ["f32", "f64", "c64"])
@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_expansion_matches_numpy(t, lower):
    rng = np.random.default_rng(3)
    n = 5
    x = rng.standard_normal((3, n, n))
    if t.startswith("c"):
        x = x + 1j * rng.standard_normal((3, n, n))
    a = (x @ np.conj(np.swapaxes(x, -1, -2)) + n * np.eye(n)).astype(_TYPES[t])
    module = _expanded(_cholesky_text(t, a.shape, lower), CholeskyExpander())
    got = _one(evaluate(module, a))
    want = np.linalg.cholesky(a.astype(np.complex128 if t.startswith("c") else np.float64))
    if not lower:
        want = np.conj(np.swapaxes(want, -1, -2))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cholesky_of_an_indefinite_matrix_gives_nan():
    a = np.array([[1.0, 2.0], [2.0, 1.0]], np.float32)
    module = _expanded(_cholesky_text("f32", a.shape, True), CholeskyExpander())
    assert np.isnan(_one(evaluate(module, a))[1, 1])


@pytest.mark.parametrize("left, lower, mode", [(True, True, "NO_TRANSPOSE"),
                                               (False, False, "TRANSPOSE")])
def test_triangular_solve_compiles_for_cpu(left, lower, mode):
    rng = np.random.default_rng(11)
    n, k = 5, 2
    adims = (n, n)   # no batch dimension
    bdims = (n, k) if left else (k, n)
    a, b = _solve_inputs(rng, "f32", adims, bdims)
    exe = xla_gpu.compile(_solve_text("f32", adims, bdims, left, lower, False, mode),
                          target="cpu", cache=False)
    got = _one(exe.run(a, b))
    np.testing.assert_allclose(got, _solve_reference(a, b, left, lower, False, mode),
                               rtol=1e-4, atol=1e-4)


def test_cholesky_compiles_for_cpu():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 6))
    a = x @ np.swapaxes(x, -1, -2) + 6 * np.eye(6)
    exe = xla_gpu.compile(_cholesky_text("f64", a.shape, True), target="cpu", cache=False)
    np.testing.assert_allclose(_one(exe.run(a)), np.linalg.cholesky(a), rtol=1e-10,
                               atol=1e-10)
