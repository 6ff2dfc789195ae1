"""jax's linear algebra on the cpu target, out of the box.

On cpu, `jnp.linalg` and `jax.scipy.linalg` lower to typed-FFI custom calls
into jaxlib's LAPACK kernels (`lapack_spotrf_ffi`, `lapack_sgetrf_ffi`, ...),
which read and write column-major (`{0,1}`) buffers. xla_gpu registers
jaxlib's handlers itself when a program names such a target, and hands
them their buffers in the layouts the calls ask for. Each function is
lowered by jax twice — the HLO jax prints before optimizations and XLA:CPU's
own optimized module — compiled for the cpu target, run, and compared with
what jax computes; the reference interpreter must agree too. Decompositions
defined up to signs or phases (qr, svd, eig) are compared through their
reconstructions and invariants. Skipped where jax is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_platforms", "cpu")
jnp = pytest.importorskip("jax.numpy")
jsl = pytest.importorskip("jax.scipy.linalg")

import xla_gpu  # noqa: E402
from xla_gpu import hlo  # noqa: E402


def _spd(n: int, seed: int, dtype=np.float32, batch=()) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (n, n)).astype(dtype)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=dtype)).astype(dtype)


def _general(shape, seed: int, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype)


def _texts(f, *args) -> dict[str, str]:
    lowered = jax.jit(f).lower(*args)
    return {"jax-hlo": lowered.as_text("hlo"), "xla-optimized": lowered.compile().as_text()}


def _leaves(value) -> list[np.ndarray]:
    return [np.asarray(v) for v in jax.tree_util.tree_leaves(value)]


def _run_both(f, *args) -> tuple[list[np.ndarray], dict[str, list[np.ndarray]]]:
    """jax's outputs, and xla_gpu's for each form of the program: compiled
    on the cpu target and evaluated by the reference interpreter."""
    want = _leaves(jax.jit(f)(*args))
    got = {}
    for form, text in _texts(f, *args).items():
        assert "custom_call_target=\"lapack_" in text, \
            f"{form}: expected a LAPACK custom call in\n{text}"
        exe = xla_gpu.compile(text, target="cpu")
        got[form] = [np.asarray(o) for o in exe.run(*args)]
        ref = hlo.evaluate(hlo.parse_module(text), *args)
        got[f"interpreter({form})"] = _leaves(ref if isinstance(ref, (tuple, list)) else [ref])
    return want, got


def _close(got, want, rtol=2e-4, atol=2e-4, what=""):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} output {k}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what} output {k}")


def _check_same(f, *args, rtol=2e-4, atol=2e-4):
    """Functions with a unique answer: every output as jax's."""
    want, got = _run_both(f, *args)
    for form, outs in got.items():
        _close(outs, want, rtol, atol, form)


# -- functions with a unique answer ------------------------------------------------------


def test_cholesky():
    _check_same(jnp.linalg.cholesky, _spd(5, 0))


def test_cholesky_batched_float64():
    if not hasattr(jax, "enable_x64"):
        pytest.skip("this jax has no enable_x64 context")
    with jax.enable_x64(True):
        _check_same(jnp.linalg.cholesky, _spd(4, 1, np.float64, (3,)), rtol=1e-10,
                    atol=1e-10)


def test_solve():
    _check_same(jnp.linalg.solve, _general((4, 4), 2), _general((4, 3), 3))


def test_inv():
    _check_same(jnp.linalg.inv, _spd(4, 4))


def test_det_and_slogdet():
    a = _general((2, 4, 4), 5)
    _check_same(jnp.linalg.det, a)
    _check_same(lambda x: tuple(jnp.linalg.slogdet(x)), a)


def test_solve_triangular():
    a = np.tril(_general((5, 5), 6)) + 5 * np.eye(5, dtype=np.float32)
    b = _general((5, 2), 7)
    _check_same(lambda a, b: jsl.solve_triangular(a, b, lower=True), a, b)
    _check_same(lambda a, b: jsl.solve_triangular(a, b, lower=True, trans=1), a, b)


def test_lu():
    _check_same(jsl.lu, _general((4, 4), 8))
    _check_same(lambda x: jax.lax.linalg.lu(x), _general((3, 5), 9))


def test_eigenvalues_of_symmetric_matrices():
    _check_same(lambda x: jnp.linalg.eigvalsh(x), _spd(5, 10))


def test_singular_values_and_norms():
    a = _general((5, 3), 11)
    _check_same(lambda x: jnp.linalg.svd(x, compute_uv=False), a)
    _check_same(lambda x: jnp.linalg.norm(x, ord=2), a)
    _check_same(lambda x: jnp.linalg.matrix_rank(x), a)
    low_rank = _general((5, 2), 12) @ _general((2, 4), 13)
    _check_same(lambda x: jnp.linalg.matrix_rank(x), low_rank)


def test_pinv_and_lstsq():
    a = _general((6, 3), 14)
    b = _general((6, 2), 15)
    _check_same(jnp.linalg.pinv, a, rtol=1e-3, atol=1e-3)
    _check_same(lambda a, b: jnp.linalg.lstsq(a, b)[0], a, b, rtol=1e-3, atol=1e-3)


# -- decompositions up to signs and phases ---------------------------------------------


@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr(mode):
    a = _general((5, 3), 16)
    want, got = _run_both(lambda x: tuple(jnp.linalg.qr(x, mode=mode)), a)
    for form, (q, r) in got.items():
        assert q.shape == want[0].shape and r.shape == want[1].shape, form
        np.testing.assert_allclose(q @ r, a, rtol=1e-4, atol=1e-4, err_msg=form)
        np.testing.assert_allclose(q.T @ q, np.eye(q.shape[1]), atol=1e-4, err_msg=form)
        np.testing.assert_allclose(r, np.triu(r), atol=0, err_msg=form)
        # Householder QR is unique up to the signs of R's diagonal.
        np.testing.assert_allclose(np.abs(r), np.abs(want[1]), rtol=1e-4, atol=1e-4,
                                   err_msg=form)


@pytest.mark.parametrize("full", [False, True])
def test_svd(full):
    a = _general((4, 6), 17)
    want, got = _run_both(lambda x: tuple(jnp.linalg.svd(x, full_matrices=full)), a)
    for form, (u, s, vh) in got.items():
        assert [u.shape, s.shape, vh.shape] == [w.shape for w in want], form
        np.testing.assert_allclose(s, want[1], rtol=1e-4, atol=1e-4, err_msg=form)
        k = s.shape[0]
        np.testing.assert_allclose((u[:, :k] * s) @ vh[:k], a, rtol=1e-4, atol=1e-4,
                                   err_msg=form)
        np.testing.assert_allclose(u.T @ u, np.eye(u.shape[1]), atol=1e-4, err_msg=form)
        np.testing.assert_allclose(vh @ vh.T, np.eye(vh.shape[0]), atol=1e-4, err_msg=form)


def test_eigh():
    a = _spd(5, 18)
    want, got = _run_both(lambda x: tuple(jnp.linalg.eigh(x)), a)
    for form, (w, v) in got.items():
        np.testing.assert_allclose(w, want[0], rtol=1e-4, atol=1e-4, err_msg=form)
        np.testing.assert_allclose(a @ v, v * w, rtol=1e-3, atol=1e-3, err_msg=form)
        # Distinct eigenvalues: each eigenvector is jax's up to its sign.
        np.testing.assert_allclose(np.abs(v), np.abs(want[1]), rtol=1e-3, atol=1e-3,
                                   err_msg=form)


def test_eig():
    a = _general((4, 4), 19)
    want, got = _run_both(lambda x: tuple(jnp.linalg.eig(x)), a)
    order = np.lexsort((want[0].imag, want[0].real))
    for form, (w, v) in got.items():
        assert w.dtype == want[0].dtype and v.dtype == want[1].dtype, form
        mine = np.lexsort((w.imag, w.real))
        np.testing.assert_allclose(w[mine], want[0][order], rtol=1e-4, atol=1e-4,
                                   err_msg=form)
        np.testing.assert_allclose(a @ v, v * w, rtol=1e-3, atol=1e-3, err_msg=form)
        # Unit eigenvectors, equal to jax's up to a phase.
        np.testing.assert_allclose(np.abs(v[:, mine]), np.abs(want[1][:, order]),
                                   rtol=1e-3, atol=1e-3, err_msg=form)


# -- how the targets become available ----------------------------------------------------


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})


def _cholesky_text() -> str:
    return _texts(jnp.linalg.cholesky, _spd(3, 20))["jax-hlo"]


def test_jaxlib_is_imported_only_for_its_targets(tmp_path):
    """Importing xla_gpu and running programs without LAPACK calls imports
    neither jax nor jaxlib; a program naming one imports jaxlib (not jax)."""
    path = tmp_path / "cholesky.hlo"
    path.write_text(_cholesky_text())
    done = _python(f"""
        import sys
        import numpy as np
        import xla_gpu, xla_gpu.ffi, xla_gpu.hlo
        exe = xla_gpu.compile("HloModule m\\nENTRY e {{ x = f32[4] parameter(0)\\n"
                              "ROOT n = f32[4] negate(x) }}", target="cpu")
        exe.run(np.ones(4, np.float32))
        assert not any(m.split(".")[0] in ("jax", "jaxlib") for m in sys.modules), \\
            sorted(m for m in sys.modules if m.startswith("jax"))
        a = np.array([[4, 2, 0], [2, 5, 1], [0, 1, 3]], np.float32)
        (out,) = xla_gpu.compile(open({str(path)!r}).read(), target="cpu").run(a)
        np.testing.assert_allclose(out, np.linalg.cholesky(a), rtol=1e-5)
        assert "jaxlib" in sys.modules and "jax" not in sys.modules
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_without_jaxlib_the_error_says_how_to_get_the_targets(tmp_path):
    path = tmp_path / "cholesky.hlo"
    path.write_text(_cholesky_text())
    done = _python(f"""
        import sys
        sys.modules["jaxlib"] = None          # as if jax were not installed
        import numpy as np
        import xla_gpu
        from xla_gpu import hlo
        text = open({str(path)!r}).read()
        a = np.eye(3, dtype=np.float32)
        for run in (lambda: xla_gpu.compile(text, target="cpu").run(a),
                    lambda: hlo.evaluate(hlo.parse_module(text), a)):
            try:
                run()
            except xla_gpu.XlaGpuError as e:
                message = str(e)
                assert "lapack_spotrf_ffi" in message and "no handler" in message, message
                assert "pip install jax" in message, message
            else:
                raise AssertionError("ran without a handler")
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), \
        done.stdout[-2000:] + done.stderr[-3000:]


def test_an_explicit_registration_wins():
    """A handler registered under a jaxlib target name is the one that runs."""
    import xla_gpu.ffi as ffi
    name = "lapack_spotrf_ffi"
    a = _spd(3, 21)
    text = _texts(jnp.linalg.cholesky, a)["jax-hlo"]
    seen = []

    def fake(x, out, info, **attrs):
        seen.append(attrs)
        out[...] = np.eye(3, dtype=np.float32)
        info[...] = 0

    previous = ffi.unregister_ffi_target(name)
    try:
        ffi.register_ffi_target(name, fake, platform="cpu")
        (out,) = xla_gpu.compile(text, target="cpu").run(a)
        np.testing.assert_array_equal(out, np.eye(3, dtype=np.float32))
        assert seen and int(seen[0]["uplo"]) == ord("L")
    finally:
        ffi.unregister_ffi_target(name)
    if previous:   # jaxlib's comes back on the next lookup
        (out,) = xla_gpu.compile(text, target="cpu").run(a)
        np.testing.assert_allclose(out, np.linalg.cholesky(a), rtol=1e-4)


def test_a_lapack_call_on_several_devices_at_once():
    """A program run on 4 devices calls jaxlib's Cholesky kernel on all of
    them at once (a thread each): each device's call has its own argument
    tables and handler instance, so every device factors its own matrix
    (one shared set of tables let one device's buffers reach another's
    call: NaNs now and then)."""
    from xla_gpu.runtime.thunks import walk
    n = 96
    text = f"""HloModule m, num_partitions=4
ENTRY e {{
  x = f32[{n},{n}] parameter(0)
  c = (f32[{n},{n}]{{0,1}}, s32[]) custom-call(x), custom_call_target="lapack_spotrf_ffi", operand_layout_constraints={{f32[{n},{n}]{{0,1}}}}, output_to_operand_aliasing={{{{0}}: (0, {{}})}}, api_version=API_VERSION_TYPED_FFI, backend_config={{uplo = 76 : ui8}}
  ROOT l = f32[{n},{n}] get-tuple-element(c), index=0
}}"""
    exe = xla_gpu.compile(text, target="cpu")
    mats = [_spd(n, seed) for seed in range(4)]
    for _ in range(5):
        outs = exe.run_partitioned([[m] for m in mats])
        for m, (got,) in zip(mats, outs):
            np.testing.assert_allclose(np.tril(got), np.linalg.cholesky(m), rtol=1e-3,
                                       atol=1e-3)
    (thunk,) = [t for t in walk(exe.thunks) if t.kind == "custom_call"]
    assert sorted(thunk._xla_gpu_ffi_sites) == [0, 1, 2, 3]
