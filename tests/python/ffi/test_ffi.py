"""Custom calls through XLA's FFI (xla_gpu.ffi + libXlaGpuFfi.so).

Handler libraries are built here with g++ against the FFI headers jaxlib
ships (tests/python/ffi_handlers/, and the stored ffi_call program's
handler), registered exactly as with jax (`register_ffi_target(name,
pycapsule(lib.Symbol), platform="cpu")`), and run from JAX-printed HLO
through the whole-program path (`xla_gpu.compile(...).run`, cpu target)
and the reference interpreter; results are compared with numpy and with
jax running the same library. Tests that need jax or a C++ compiler skip
cleanly without them; the Python-handler tests need neither.
"""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
import xla_gpu.ffi as ffi
from xla_gpu import hlo
from xla_gpu.errors import HloError, UnsupportedError, XlaGpuError
from xla_gpu.runtime.thunks import ThunkError

HERE = Path(__file__).resolve().parents[1]
HANDLERS = HERE / "ffi_handlers"
SOURCES = ["add_broadcast.cc", "attributes.cc", "variadic.cc", "errors.cc",
           "runtime_services.cc", "legacy.cc", "static_registration.cc"]
PROGRAM_HANDLER = HERE / "programs" / "ffi_call" / "handler.cc"
ROOT = HERE.parents[1]


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")


def _jax():
    try:
        import jax
        jax.config.update("jax_platforms", "cpu")
        return jax
    except Exception:  # pragma: no cover - jax is a test-time extra
        return None


needs_jax = pytest.mark.skipif(_jax() is None, reason="jax is not installed")
needs_compiler = pytest.mark.skipif(_compiler() is None, reason="no C++ compiler")


@pytest.fixture(scope="module")
def include_dir() -> str:
    jax = _jax()
    if jax is None:
        pytest.skip("jax is not installed (the FFI headers come from jaxlib)")
    if _compiler() is None:
        pytest.skip("no C++ compiler")
    return jax.ffi.include_dir()


@pytest.fixture(scope="module")
def lib(include_dir, tmp_path_factory) -> ctypes.CDLL:
    """Every test handler in one library (one translation unit: the FFI
    headers are parsed once)."""
    build = tmp_path_factory.mktemp("ffi_handlers")
    unity = build / "all_handlers.cc"
    unity.write_text("".join(f'#include "{HANDLERS / s}"\n' for s in SOURCES) +
                     f'#include "{PROGRAM_HANDLER}"\n')
    out = build / "libxla_gpu_test_handlers.so"
    done = subprocess.run([_compiler(), "-std=c++17", "-O1", "-shared", "-fPIC", "-w",
                           f"-I{include_dir}", str(unity), "-o", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # After the FFI runtime, which exports what legacy.cc links against.
    return ffi.load_library(out)


_JAX_REGISTERED: set[str] = set()


def _register(name: str, fn, *, jax_too: bool = True, platform: str = "cpu") -> None:
    """Registers `fn` under `name` with xla_gpu and, once, with jax."""
    ffi.register_ffi_target(name, fn, platform=platform)
    if jax_too and name not in _JAX_REGISTERED:
        _jax().ffi.register_ffi_target(name, fn, platform=platform)
        _JAX_REGISTERED.add(name)


# Registered by the handler library itself when it is loaded.
STATIC_TARGETS = {("xla_gpu_test_static_negate", "cpu")}


@pytest.fixture(autouse=True)
def _forget_targets():
    before = set(ffi.registered_targets())
    yield
    for name, platform in set(ffi.registered_targets()) - before - STATIC_TARGETS:
        ffi.unregister_ffi_target(name, platform)


def _jax_program(fn, *args) -> tuple[str, list[np.ndarray]]:
    """JAX's HLO text of `fn` (as printed before optimizations) and jax's
    results, flattened."""
    jax = _jax()
    jitted = jax.jit(fn)
    text = jitted.lower(*args).as_text(dialect="hlo")
    out = jitted(*args)
    leaves = jax.tree_util.tree_leaves(out)
    return text, [np.asarray(leaf) for leaf in leaves]


def _run_both(text: str, *args) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(compiled cpu program's results, interpreter's results)."""
    exe = xla_gpu.compile(text, target="cpu")
    compiled = [np.asarray(r) for r in exe.run(*args)]
    module = hlo.parse_module(text)
    interpreted = [np.asarray(v) for v in hlo.evaluate(module, *args)]
    return compiled, interpreted


# --- the ABI --------------------------------------------------------------------


@needs_compiler
def test_abi_declaration_matches_jaxlib_header(include_dir):
    done = subprocess.run([_compiler(), "-std=c++17", "-fsyntax-only", f"-I{include_dir}",
                           f"-I{ROOT / 'ffi'}", str(HANDLERS / "abi_check.cc")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_runtime_library_speaks_api_0_3():
    lib = ffi._native.lib()
    assert lib.XlaGpuFfiApiVersion() == 3   # major 0, minor 3
    assert lib.XlaGpuFfiGetApi()


# --- seed example: out[i] = in0[i % d0] + in1[i] ------------------------------------


@needs_jax
def test_add_broadcast_matches_numpy_and_jax(lib):
    jax = _jax()
    _register("xla_gpu_test_add_broadcast", ffi.pycapsule(lib.XlaGpuTestAddBroadcast))

    def program(a, b):
        call = jax.ffi.ffi_call("xla_gpu_test_add_broadcast",
                                jax.ShapeDtypeStruct(b.shape, b.dtype))
        return call(a, b * 2.0) + 1.0

    rng = np.random.default_rng(0)
    a = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    text, jax_out = _jax_program(program, a, b)
    assert "custom_call_target=\"xla_gpu_test_add_broadcast\"" in text
    expected = a[np.arange(256) % 16] + b * 2.0 + 1.0
    compiled, interpreted = _run_both(text, a, b)
    for got in (compiled[0], interpreted[0], jax_out[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_array_equal(compiled[0], jax_out[0])


@needs_jax
def test_binding_refuses_wrong_type_and_rank(lib):
    _register("xla_gpu_test_add_broadcast", ffi.pycapsule(lib.XlaGpuTestAddBroadcast),
              jax_too=False)
    wrong_type = """HloModule m
ENTRY e {
  a = s32[4] parameter(0)
  b = s32[8] parameter(1)
  ROOT c = s32[8] custom-call(a, b), custom_call_target="xla_gpu_test_add_broadcast", api_version=API_VERSION_TYPED_FFI
}"""
    wrong_rank = wrong_type.replace("s32[4]", "f32[2,2]").replace("s32[8]", "f32[8]")
    i4, i8 = np.arange(4, dtype=np.int32), np.arange(8, dtype=np.int32)
    with pytest.raises(ffi.FfiError, match="Wrong buffer dtype") as info:
        xla_gpu.compile(wrong_type, target="cpu").run(i4, i8)
    assert info.value.code == "INVALID_ARGUMENT"
    assert "xla_gpu_test_add_broadcast" in str(info.value)
    with pytest.raises(HloError, match="Wrong buffer dtype"):
        hlo.evaluate(hlo.parse_module(wrong_type), i4, i8)
    f22, f8 = np.ones((2, 2), np.float32), np.ones(8, np.float32)
    with pytest.raises(ffi.FfiError, match="Wrong buffer rank"):
        xla_gpu.compile(wrong_rank, target="cpu").run(f22, f8)
    with pytest.raises(HloError, match="Wrong buffer rank"):
        hlo.evaluate(hlo.parse_module(wrong_rank), f22, f8)


# --- attributes of every kind ---------------------------------------------------------


@needs_jax
def test_attributes_of_every_kind(lib):
    jax, jnp = _jax(), _jax().numpy
    _register("xla_gpu_test_attributes", ffi.pycapsule(lib.XlaGpuTestAttributes))
    attrs = dict(flag=True, i8=np.int8(-8), i16=np.int16(-1600), i32=np.int32(-320000),
                 i64=np.int64(-(1 << 40)), u8=np.uint8(200), u16=np.uint16(60000),
                 u32=np.uint32(4000000000), u64=np.uint64(1 << 60), f32=np.float32(1.5),
                 f64=0.1, name="héllo", dims=np.array([3, -1, 7], np.int64),
                 weights=np.array([0.5, -2.25], np.float32),
                 options={"a": np.int32(11), "tag": "abc"}, mode=np.int32(1),
                 range={"lo": np.int64(-5), "hi": np.int64(42)})

    def program(x):
        return jax.ffi.ffi_call("xla_gpu_test_attributes",
                                jax.ShapeDtypeStruct((40,), jnp.float64))(x, **attrs)

    jax.config.update("jax_enable_x64", True)
    try:
        x = np.array([3.0, 4.0], np.float32)
        text, jax_out = _jax_program(program, x)
    finally:
        jax.config.update("jax_enable_x64", False)
    assert "dense<[3, -1, 7]> : tensor<3xi64>" in text and "range = {" in text
    name = "héllo".encode()
    expected = [1, -8, -1600, -320000, -(1 << 40), 200, 60000, 4000000000, 1 << 60, 1.5,
                0.1, len(name), sum(name), 3, 3, -1, 7, 2, 0.5, -2.25, 11, 3, 1, -5, 42,
                6.0]
    expected = np.array(expected + [0] * (40 - len(expected)), np.float64)
    compiled, interpreted = _run_both(text, x)
    np.testing.assert_array_equal(compiled[0], expected)
    np.testing.assert_array_equal(interpreted[0], expected)
    np.testing.assert_array_equal(jax_out[0], expected)


def test_attribute_kinds_xla_refuses():
    from xla_gpu.ffi.attributes import encode_attributes
    from xla_gpu.hlo.interpreter import decode_ffi_attributes
    for text, what in [("{h = 1.0 : f16}", "f16"), ("{l = [1, 2]}", "list"),
                       ("{b = dense<[1.0, 2.0]> : tensor<2xf16>}", "f16")]:
        with pytest.raises(HloError, match="attribute '[hlb]'") as info:
            encode_attributes(decode_ffi_attributes(text))
        assert what in str(info.value)
    nested = encode_attributes(decode_ffi_attributes('{d = {z = 1 : i32, a = "s"}}'))
    assert nested.startswith(b"D\x01\x00\x00\x00")


# --- variadic arguments and results, tuples flattened ----------------------------------


@needs_jax
def test_variadic_arguments_and_results(lib):
    jax = _jax()
    _register("xla_gpu_test_variadic", ffi.pycapsule(lib.XlaGpuTestVariadic))

    def program(a, b, c):
        shape = jax.ShapeDtypeStruct(a.shape, a.dtype)
        return jax.ffi.ffi_call("xla_gpu_test_variadic", (shape, shape))(a, b, c)

    a, b, c = (np.arange(6, dtype=np.float32) * k for k in (1.0, 0.5, -2.0))
    text, jax_out = _jax_program(program, a, b, c)
    base = a + 2 * b + 3 * c
    compiled, interpreted = _run_both(text, a, b, c)
    for results in (compiled, interpreted, jax_out):
        assert len(results) == 2
        np.testing.assert_allclose(results[0], base, rtol=1e-6)
        np.testing.assert_allclose(results[1], base + 1, rtol=1e-6)


@needs_compiler
def test_tuple_operand_is_flattened(lib):
    _register("xla_gpu_test_variadic", ffi.pycapsule(lib.XlaGpuTestVariadic), jax_too=False)
    text = """HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  t = (f32[3], f32[3]) tuple(a, b)
  ROOT r = (f32[3], f32[3], f32[3]) custom-call(t, a), custom_call_target="xla_gpu_test_variadic", api_version=API_VERSION_TYPED_FFI
}"""
    a, b = np.array([1, 2, 3], np.float32), np.array([10, 20, 30], np.float32)
    base = a + 2 * b + 3 * a
    compiled, interpreted = _run_both(text, a, b)
    for results in (compiled, interpreted):
        assert len(results) == 3
        for j in range(3):
            np.testing.assert_allclose(results[j], base + j)


# --- errors -------------------------------------------------------------------------------


@needs_jax
def test_handler_error_reaches_the_caller(lib):
    jax = _jax()
    _register("xla_gpu_test_always_fails", ffi.pycapsule(lib.XlaGpuTestAlwaysFails))

    def program(x):
        return jax.ffi.ffi_call("xla_gpu_test_always_fails",
                                jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    x = np.ones(4, np.float32)
    text = _jax().jit(program).lower(x).as_text(dialect="hlo")
    with pytest.raises(Exception, match="this handler always fails"):
        jax.block_until_ready(jax.jit(program)(x))       # jax fails the same way
    with pytest.raises(ffi.FfiError) as info:
        xla_gpu.compile(text, target="cpu").run(x)
    error = info.value
    assert error.code == "FAILED_PRECONDITION" and error.stage == "execute"
    assert error.target == "xla_gpu_test_always_fails"
    assert "xla_gpu_test_always_fails: this handler always fails" in str(error)
    assert "target 'xla_gpu_test_always_fails'" in str(error)
    with pytest.raises(HloError, match="FAILED_PRECONDITION: xla_gpu_test_always_fails"):
        hlo.evaluate(hlo.parse_module(text), x)


@needs_compiler
def test_error_after_success_and_async_error(lib):
    _register("xla_gpu_test_fails_when_asked", ffi.pycapsule(lib.XlaGpuTestFailsWhenAsked),
              jax_too=False)
    _register("xla_gpu_test_async_fails", ffi.pycapsule(lib.XlaGpuTestAsyncFails),
              jax_too=False)
    text = """HloModule m
ENTRY e {
  x = s32[5] parameter(0)
  ok = s32[5] custom-call(x), custom_call_target="xla_gpu_test_fails_when_asked", api_version=API_VERSION_TYPED_FFI, backend_config={fail = false}
  ROOT bad = s32[5] custom-call(ok), custom_call_target="xla_gpu_test_fails_when_asked", api_version=API_VERSION_TYPED_FFI, backend_config={fail = true}
}"""
    x = np.arange(5, dtype=np.int32)
    with pytest.raises(ffi.FfiError, match="custom call 'bad'.*INTERNAL: .*asked to fail"):
        xla_gpu.compile(text, target="cpu").run(x)
    async_text = """HloModule m
ENTRY e {
  x = f32[5] parameter(0)
  ROOT r = f32[5] custom-call(x), custom_call_target="xla_gpu_test_async_fails", api_version=API_VERSION_TYPED_FFI
}"""
    with pytest.raises(ffi.FfiError, match="ABORTED: xla_gpu_test_async_fails"):
        xla_gpu.compile(async_text, target="cpu").run(x.astype(np.float32))


@needs_compiler
def test_bad_backend_config_is_a_clear_error(lib):
    _register("xla_gpu_test_add_broadcast", ffi.pycapsule(lib.XlaGpuTestAddBroadcast),
              jax_too=False)
    base = """HloModule m
ENTRY e {
  a = f32[2] parameter(0)
  b = f32[4] parameter(1)
  ROOT c = f32[4] custom-call(a, b), custom_call_target="xla_gpu_test_add_broadcast", api_version=API_VERSION_TYPED_FFI, backend_config=%s
}"""
    a, b = np.ones(2, np.float32), np.ones(4, np.float32)
    for config, message in [('{x = 1.0 : f16}', "attribute 'x'.*f16"),
                            ('{x = [1, 2]}', "attribute 'x'.*list"),
                            ('{x = 1 : i99}', "target 'xla_gpu_test_add_broadcast'.*i99")]:
        text = base % config
        with pytest.raises(HloError, match=message):
            xla_gpu.compile(text, target="cpu").run(a, b)
        with pytest.raises(HloError, match=message):
            hlo.evaluate(hlo.parse_module(text), a, b)
    # A handler that binds no attributes ignores them, as in XLA ...
    out = xla_gpu.compile(base % "{x = 1 : i32}", target="cpu").run(a, b)[0]
    np.testing.assert_array_equal(out, a[[0, 1, 0, 1]] + b)
    # ... one that binds some refuses a call with others.
    _register("xla_gpu_test_fails_when_asked", ffi.pycapsule(lib.XlaGpuTestFailsWhenAsked),
              jax_too=False)
    extra = """HloModule m
ENTRY e {
  x = s32[3] parameter(0)
  ROOT r = s32[3] custom-call(x), custom_call_target="xla_gpu_test_fails_when_asked", api_version=API_VERSION_TYPED_FFI, backend_config={fail = false, extra = 1 : i32}
}"""
    with pytest.raises(ffi.FfiError, match="Wrong number of attributes: expected 1 but got 2"):
        xla_gpu.compile(extra, target="cpu").run(np.arange(3, dtype=np.int32))
    with pytest.raises(ffi.FfiError, match="Wrong scalar data type"):
        xla_gpu.compile(extra.replace(", extra = 1 : i32", "").replace("false", "0 : i32"),
                        target="cpu").run(np.arange(3, dtype=np.int32))


def test_unregistered_target_is_a_clear_error():
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT r = f32[4] custom-call(x), custom_call_target="xla_gpu_test_nobody", api_version=API_VERSION_TYPED_FFI
}"""
    x = np.ones(4, np.float32)
    with pytest.raises(ThunkError, match="no handler registered for target "
                                          "'xla_gpu_test_nobody' on platform 'cpu'"):
        xla_gpu.compile(text, target="cpu").run(x)
    with pytest.raises(HloError, match="xla_gpu_test_nobody"):
        hlo.evaluate(hlo.parse_module(text), x)


_ONE_OPERAND = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT r = f32[4] custom-call(x), custom_call_target="%s", api_version=API_VERSION_TYPED_FFI
}"""


@needs_compiler
def test_registration_errors(lib):
    capsule = ffi.pycapsule(lib.XlaGpuTestAddBroadcast)
    with pytest.raises(ffi.FfiRegistrationError, match="unknown platform 'rocm'"):
        ffi.register_ffi_target("t", capsule, platform="rocm")
    with pytest.raises(ffi.FfiRegistrationError, match="'execute'"):
        ffi.register_ffi_target("t", {"prepare": capsule})
    with pytest.raises(ffi.FfiRegistrationError, match="unknown stage"):
        ffi.register_ffi_target("t", {"execute": capsule, "run": capsule})
    with pytest.raises(ffi.FfiRegistrationError, match="api_version must be"):
        ffi.register_ffi_target("t", capsule, api_version=4)
    with pytest.raises(ffi.FfiRegistrationError, match="not a dict"):
        ffi.register_ffi_target("t", {"execute": capsule}, api_version=0)
    with pytest.raises(ffi.FfiRegistrationError, match="expected a PyCapsule"):
        ffi.register_ffi_target("t", 42)
    lib.XlaGpuTestCounterTypeId.restype = ctypes.c_void_p
    data = ffi.pycapsule(lib.XlaGpuTestCounterTypeId())      # a type id, not code
    with pytest.raises(ffi.FfiRegistrationError, match="is not code"):
        ffi.register_ffi_target("t", data)
    with pytest.raises(ffi.FfiRegistrationError, match="is not code"):
        ffi.register_ffi_target("t", data, api_version=0)
    with pytest.raises(ffi.FfiRegistrationError, match="is not writable data"):
        ffi.register_ffi_type("t", {"type_id": ffi.pycapsule(lib.XlaGpuTestAddBroadcast)})
    # Registering never calls the handler: its API version is asked for (and
    # refused) right before its first call (test_ffi_registry.py).
    ffi.register_ffi_target("t_future", ffi.pycapsule(lib.XlaGpuTestFutureApiVersion))
    with pytest.raises(ffi.FfiError, match=r"API version \(9\.0\)"):
        xla_gpu.compile(_ONE_OPERAND % "t_future", target="cpu").run(np.ones(4, np.float32))
    ffi.register_ffi_target("t", capsule)
    ffi.register_ffi_target("t", capsule)   # the same handler again: harmless
    ffi.register_ffi_target("t", capsule, platform="Host")
    with pytest.raises(ffi.FfiRegistrationError, match="Duplicate"):
        ffi.register_ffi_target("t", ffi.pycapsule(lib.XlaGpuTestVariadic))
    with pytest.raises(ffi.FfiRegistrationError, match="Duplicate"):
        ffi.register_ffi_target("t", lambda x: x)
    assert ("t", "cpu") in ffi.registered_targets()
    assert ffi.unregister_ffi_target("t")
    assert ("t", "cpu") not in ffi.registered_targets("cpu")
    assert issubclass(ffi.FfiRegistrationError, XlaGpuError)


@needs_compiler
def test_register_from_a_command_line_spec(lib):
    target = ffi.register_from_spec(f"xla_gpu_test_spec={lib._name}:XlaGpuTestAddBroadcast")
    assert target == "xla_gpu_test_spec" and ("xla_gpu_test_spec", "cpu") in \
        ffi.registered_targets()
    ffi.register_from_spec(f"xla_gpu_test_spec={lib._name}:XlaGpuTestAddBroadcast@cuda")
    assert ("xla_gpu_test_spec", "cuda") in ffi.registered_targets("cuda")
    for bad, message in [("no_equals_sign", "TARGET=LIBRARY:SYMBOL"),
                         (f"t={lib._name}:NoSuchSymbol", "no symbol 'NoSuchSymbol'"),
                         ("t=/nonexistent/lib.so:X", "cannot load")]:
        with pytest.raises(ffi.FfiRegistrationError, match=message):
            ffi.register_from_spec(bad)


@needs_compiler
def test_legacy_custom_call_abi(lib):
    ffi.register_ffi_target("xla_gpu_test_legacy_add", ffi.pycapsule(lib.XlaGpuTestLegacyAdd),
                            api_version=0)
    ffi.register_ffi_target("xla_gpu_test_legacy_sum_diff",
                            ffi.pycapsule(lib.XlaGpuTestLegacySumDiff), api_version=0)
    ffi.register_ffi_target("xla_gpu_test_legacy_opaque", lib.XlaGpuTestLegacyOpaque,
                            api_version=0)
    text = """HloModule m
ENTRY e {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  s = f32[8] custom-call(a, b), custom_call_target="xla_gpu_test_legacy_add"
  a4 = f32[4] slice(s), slice={[0:4]}
  b4 = f32[4] slice(b), slice={[4:8]}
  t = (f32[4], f32[4]) custom-call(a4, b4), custom_call_target="xla_gpu_test_legacy_sum_diff", api_version=API_VERSION_STATUS_RETURNING
  t0 = f32[4] get-tuple-element(t), index=0
  o = f32[4] custom-call(t0), custom_call_target="xla_gpu_test_legacy_opaque", api_version=API_VERSION_STATUS_RETURNING_UNIFIED, backend_config="abc"
  t1 = f32[4] get-tuple-element(t), index=1
  ROOT r = (f32[4], f32[4]) tuple(o, t1)
}"""
    a, b = np.arange(8, dtype=np.float32), np.full(8, 2, np.float32)
    s = a + b
    want = [(s[:4] + b[4:]) * 3, s[:4] - b[4:]]
    compiled, interpreted = _run_both(text, a, b)
    for results in (compiled, interpreted):
        for got, expected in zip(results, want):
            np.testing.assert_array_equal(got, expected)
    with pytest.raises(ffi.FfiError, match="xla_gpu_test_legacy_sum_diff: negative input"):
        xla_gpu.compile(text, target="cpu").run(a - 100, b)
    with pytest.raises(HloError, match="negative input"):
        hlo.evaluate(hlo.parse_module(text), a - 100, b)
    # A typed-FFI call does not bind to a legacy function, nor the reverse.
    typed = text.replace('custom_call_target="xla_gpu_test_legacy_add"',
                         'custom_call_target="xla_gpu_test_legacy_add", '
                         'api_version=API_VERSION_TYPED_FFI')
    with pytest.raises(UnsupportedError, match="needs a typed-FFI handler"):
        xla_gpu.compile(typed, target="cpu").run(a, b)
    _register("xla_gpu_test_add_broadcast", ffi.pycapsule(lib.XlaGpuTestAddBroadcast),
              jax_too=False)
    legacy_call = """HloModule m
ENTRY e {
  a = f32[2] parameter(0)
  b = f32[4] parameter(1)
  ROOT c = f32[4] custom-call(a, b), custom_call_target="xla_gpu_test_add_broadcast"
}"""
    with pytest.raises(UnsupportedError, match="needs a legacy"):
        xla_gpu.compile(legacy_call, target="cpu").run(a[:2], b[:4])


@needs_compiler
def test_handler_registered_by_its_library(lib):
    assert ("xla_gpu_test_static_negate", "cpu") in ffi.registered_targets("cpu")
    text = """HloModule m
ENTRY e {
  x = f32[5] parameter(0)
  ROOT r = f32[5] custom-call(x), custom_call_target="xla_gpu_test_static_negate", api_version=API_VERSION_TYPED_FFI
}"""
    x = np.arange(5, dtype=np.float32)
    compiled, interpreted = _run_both(text, x)
    np.testing.assert_array_equal(compiled[0], -x)
    np.testing.assert_array_equal(interpreted[0], -x)


# --- runtime services: state, thread pool + futures, scratch, user data --------------------


@needs_compiler
def test_instantiate_state_lives_with_the_program(lib):
    for name, getter, info in [("xla_gpu_test_counter", lib.XlaGpuTestCounterTypeId,
                                lib.XlaGpuTestCounterTypeInfo)]:
        getter.restype = info.restype = ctypes.c_void_p
        type_id = ffi.register_ffi_type(name, {"type_id": ffi.pycapsule(getter()),
                                               "type_info": ffi.pycapsule(info())})
        assert type_id > 0 and ffi.type_id(name) == type_id
    ffi.register_ffi_target("xla_gpu_test_counter", {
        "instantiate": ffi.pycapsule(lib.XlaGpuTestCounterInstantiate),
        "execute": ffi.pycapsule(lib.XlaGpuTestCounterExecute)})
    text = """HloModule m
ENTRY e {
  ROOT c = s32[] custom-call(), custom_call_target="xla_gpu_test_counter", api_version=API_VERSION_TYPED_FFI, backend_config={start = 7 : i32}
}"""
    exe = xla_gpu.compile(text, target="cpu")
    assert [int(exe.run()[0]) for _ in range(3)] == [7, 8, 9]
    assert lib.XlaGpuTestCountersAlive() == 1
    del exe
    gc.collect()
    assert lib.XlaGpuTestCountersAlive() == 0   # the runtime ran the type's deleter
    module = hlo.parse_module(text)    # the interpreter: one instance per module
    assert [int(hlo.evaluate(module)[0]) for _ in range(2)] == [7, 8]
    assert int(hlo.evaluate(hlo.parse_module(text))[0]) == 7
    del module
    gc.collect()
    assert lib.XlaGpuTestCountersAlive() == 0


@needs_compiler
def test_thread_pool_and_future(lib):
    _register("xla_gpu_test_parallel_square", ffi.pycapsule(lib.XlaGpuTestParallelSquare),
              jax_too=False)
    text = """HloModule m
ENTRY e {
  x = f32[1001] parameter(0)
  ROOT r = f32[1001] custom-call(x), custom_call_target="xla_gpu_test_parallel_square", api_version=API_VERSION_TYPED_FFI
}"""
    x = np.linspace(-3, 3, 1001).astype(np.float32)
    compiled, interpreted = _run_both(text, x)
    np.testing.assert_array_equal(compiled[0], x * x)
    np.testing.assert_array_equal(interpreted[0], x * x)


@needs_compiler
def test_scratch_user_data_run_id_and_stream(lib):
    lib.XlaGpuTestOffsetTypeId.restype = ctypes.c_void_p
    lib.XlaGpuTestOffsetTypeInfo.restype = ctypes.c_void_p
    lib.XlaGpuTestOffsetObject.restype = ctypes.c_void_p
    lib.XlaGpuTestOffsetObject.argtypes = [ctypes.c_float]
    ffi.register_ffi_type("xla_gpu_test_offset", {
        "type_id": ffi.pycapsule(lib.XlaGpuTestOffsetTypeId()),
        "type_info": ffi.pycapsule(lib.XlaGpuTestOffsetTypeInfo())})
    _register("xla_gpu_test_scratch", ffi.pycapsule(lib.XlaGpuTestScratch), jax_too=False)
    text = """HloModule m
ENTRY e {
  x = f32[6] parameter(0)
  ROOT r = (f32[6], s64[2]) custom-call(x), custom_call_target="xla_gpu_test_scratch", api_version=API_VERSION_TYPED_FFI
}"""
    x = np.arange(6, dtype=np.float32)
    exe = xla_gpu.compile(text, target="cpu")
    with pytest.raises(ffi.FfiError, match="user data"):
        exe.run(x)
    ffi.set_user_data("xla_gpu_test_offset", lib.XlaGpuTestOffsetObject(0.5))
    try:
        out, ids = exe.run(x)
        np.testing.assert_array_equal(out, x[::-1] + 0.5)
        _, ids2 = exe.run(x)
        assert ids[1] == 0 and ids[0] > 0 and ids2[0] != ids[0]   # one run id per run
        out_i, _ = hlo.evaluate(hlo.parse_module(text), x)
        np.testing.assert_array_equal(out_i, x[::-1] + 0.5)
    finally:
        ffi.set_user_data("xla_gpu_test_offset", None)
    _register("xla_gpu_test_wants_stream", ffi.pycapsule(lib.XlaGpuTestWantsStream),
              jax_too=False)
    with pytest.raises(ffi.FfiError, match="GPU context is not available"):
        xla_gpu.compile(text.replace("xla_gpu_test_scratch", "xla_gpu_test_wants_stream")
                        .replace("(f32[6], s64[2])", "f32[6]"), target="cpu").run(x)


# --- the stored ffi_call program (JAX's HLO before and after XLA:CPU's passes) ----------------


@needs_compiler
def test_stored_ffi_call_program(lib):
    sys.path.insert(0, str(HERE))
    from program_data import load_program
    prog = load_program("ffi_call")
    _register("xla_gpu_test_add_scaled", ffi.pycapsule(lib.XlaGpuTestAddScaled),
              jax_too=False)
    module = hlo.parse_module(prog.before_path.read_text())
    value = hlo.evaluate(module, *prog.inputs)
    assert not prog.mismatches(list(value), module)
    for path in (prog.before_path, prog.after_path):
        exe = xla_gpu.compile(path.read_text(), target="cpu")
        assert not prog.mismatches(list(exe.run(*prog.inputs)), module), path.name
        assert exe.stats["custom_calls"] == 2


@needs_compiler
def test_xla_gpu_run_registers_handlers_from_the_command_line(lib):
    """xla-gpu-run --ffi TARGET=LIB:SYMBOL checks a program with custom calls
    against the interpreter, which calls the same handler."""
    sys.path.insert(0, str(HERE))
    from program_data import load_program
    path = load_program("ffi_call").before_path
    spec = f"xla_gpu_test_add_scaled={lib._name}:XlaGpuTestAddScaled"
    run = subprocess.run([sys.executable, "-c",
                          "from xla_gpu._cli import run_hlo_main; run_hlo_main()",
                          str(path), "--target=cpu", f"--ffi={spec}"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "OK" in run.stdout
    missing = subprocess.run([sys.executable, "-c",
                              "from xla_gpu._cli import run_hlo_main; run_hlo_main()",
                              str(path), "--target=cpu"],
                             capture_output=True, text=True, timeout=600)
    assert missing.returncode == 2 and "xla_gpu_test_add_scaled" in missing.stderr


@needs_compiler
def test_saved_program_binds_its_custom_calls_when_loaded(lib, tmp_path):
    from xla_gpu.runtime.program import load_program
    _register("xla_gpu_test_add_broadcast", ffi.pycapsule(lib.XlaGpuTestAddBroadcast),
              jax_too=False)
    text = """HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[6] parameter(1)
  ROOT c = f32[6] custom-call(a, b), custom_call_target="xla_gpu_test_add_broadcast", api_version=API_VERSION_TYPED_FFI
}"""
    xla_gpu.compile(text, target="cpu").save(tmp_path / "program")
    a, b = np.array([1, 2, 3], np.float32), np.arange(6, dtype=np.float32)
    loaded = load_program(tmp_path / "program", trusted=True)
    np.testing.assert_array_equal(loaded.run(a, b)[0], a[np.arange(6) % 3] + b)
    ffi.unregister_ffi_target("xla_gpu_test_add_broadcast")
    with pytest.raises(ThunkError, match="no handler registered"):
        load_program(tmp_path / "program", trusted=True).run(a, b)


# --- Python handlers --------------------------------------------------------------------------


_SCALED = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[2,3] parameter(1)
  s = f32[2,3] sine(x)
  ROOT r = (f32[2,3], s32[]) custom-call(s, y), custom_call_target="%s", api_version=API_VERSION_TYPED_FFI, backend_config={scale = 2.5 : f32, label = "z"}
}"""


def test_python_handler_returning_results():
    seen = {}

    def handler(x, y, scale, label):
        seen.update(scale=scale, label=label, writeable=x.flags.writeable)
        return x * scale + y, np.int32(x.size)

    ffi.register_ffi_target("xla_gpu_test_py_return", handler)
    text = _SCALED % "xla_gpu_test_py_return"
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    compiled, interpreted = _run_both(text, x, y)
    for results in (compiled, interpreted):
        np.testing.assert_allclose(results[0], np.sin(x) * 2.5 + y, rtol=1e-6)
        assert int(results[1]) == 6
    assert seen == {"scale": np.float32(2.5), "label": "z", "writeable": False}
    assert isinstance(seen["scale"], np.float32)


def test_python_handler_writing_results_in_place():
    def handler(x, y, out, count, *, scale, label):
        np.multiply(x, scale, out=out)
        out += y
        count[...] = 42

    ffi.register_ffi_target("xla_gpu_test_py_inplace", handler, platform="Host")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 3, np.float32)
    compiled, interpreted = _run_both(_SCALED % "xla_gpu_test_py_inplace", x, y)
    for results in (compiled, interpreted):
        np.testing.assert_allclose(results[0], np.sin(x) * 2.5 + y, rtol=1e-6)
        assert int(results[1]) == 42


def test_python_handler_errors():
    def raises(x, y, **attrs):
        raise ValueError("bad input")

    def wrong_shape(x, y, **attrs):
        return np.zeros(3, np.float32), np.int32(0)

    def wrong_arity(x):
        return x

    x = np.ones((2, 3), np.float32)
    for name, fn, message in [("xla_gpu_test_py_raises", raises, "raised ValueError: bad input"),
                              ("xla_gpu_test_py_shape", wrong_shape, r"shape \[3\]"),
                              ("xla_gpu_test_py_arity", wrong_arity, "takes neither")]:
        ffi.register_ffi_target(name, fn)
        text = _SCALED % name
        with pytest.raises(ffi.FfiError, match=message) as info:
            xla_gpu.compile(text, target="cpu").run(x, x)
        assert f"target '{name}'" in str(info.value)
        with pytest.raises(HloError, match=message):
            hlo.evaluate(hlo.parse_module(text), x, x)


def test_python_cuda_handler_is_not_a_cpu_handler():
    ffi.register_ffi_target("xla_gpu_test_py_cuda_only", lambda x, **kw: x, platform="cuda")
    assert ffi.runtime_handler("xla_gpu_test_py_cuda_only", "cuda") is not None
    assert ffi.runtime_handler("xla_gpu_test_py_cuda_only", "cpu") is None
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT r = f32[4] custom-call(x), custom_call_target="xla_gpu_test_py_cuda_only", api_version=API_VERSION_TYPED_FFI
}"""
    with pytest.raises(HloError, match="xla_gpu_test_py_cuda_only"):
        hlo.evaluate(hlo.parse_module(text), np.ones(4, np.float32))


def test_sub_byte_buffers_are_refused_for_c_handlers():
    from xla_gpu.ffi.calls import _dtype_code
    with pytest.raises(UnsupportedError, match="s4 buffers"):
        _dtype_code("s4", "here")
    assert _dtype_code("bf16", "here") == 16 and _dtype_code("pred", "here") == 1


# --- no MLIR on the way ------------------------------------------------------------------------


@needs_compiler
def test_ffi_runs_without_mlir(lib):
    code = f"""
import ctypes, sys
import numpy as np
import xla_gpu.ffi as ffi
from xla_gpu import hlo
lib = ffi.load_library({lib._name!r})
ffi.register_ffi_target("xla_gpu_test_add_broadcast", ffi.pycapsule(lib.XlaGpuTestAddBroadcast))
m = hlo.parse_module('''HloModule m
ENTRY e {{
  a = f32[2] parameter(0)
  b = f32[4] parameter(1)
  ROOT c = f32[4] custom-call(a, b), custom_call_target="xla_gpu_test_add_broadcast", api_version=API_VERSION_TYPED_FFI
}}''')
out, = hlo.evaluate(m, np.array([1, 2], np.float32), np.array([10, 20, 30, 40], np.float32))
assert out.tolist() == [11, 22, 31, 42], out
assert not any(k == "mlir" or k.startswith("mlir.") for k in sys.modules)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


# --- the cuda code path, driven with host memory ------------------------------------------------


@needs_compiler
def test_cuda_path_passes_stream_and_pointers(lib, monkeypatch):
    """No GPU here: a cuda ExecutionContext over host addresses runs the
    cuda branch of the custom_call thunk (device pointers, the stream, no
    host copies) with handlers that only read and write through the
    pointers they get. The GPU check (bench/ffi_gpu_check.py) runs real
    kernels."""
    import contextlib

    from xla_gpu.runtime import cuda
    from xla_gpu.runtime.buffers import BufferSlice
    from xla_gpu.runtime.thunks import ArrayRef, CustomCallThunk, ExecutionContext
    monkeypatch.setattr(cuda, "current_context", contextlib.nullcontext)
    ffi.register_ffi_target("xla_gpu_test_stream_value",
                            ffi.pycapsule(lib.XlaGpuTestStreamValue), platform="cuda")
    ffi.register_ffi_target("xla_gpu_test_add_broadcast",
                            ffi.pycapsule(lib.XlaGpuTestAddBroadcast), platform="CUDA")
    memory = np.zeros(64, np.uint8)
    a, b, out = (memory[0:8].view(np.float32), memory[8:24].view(np.float32),
                 memory[24:40].view(np.float32))
    a[:] = [1, 2]
    b[:] = [10, 20, 30, 40]
    ctx = ExecutionContext("cuda", [memory.ctypes.data], {}, stream=0x5eed,
                           custom_calls=lambda t: ffi.runtime_handler(t, "cuda"))
    add = CustomCallThunk("c", "xla_gpu_test_add_broadcast",
                          [ArrayRef(BufferSlice(0, 0, 8), "f32", (2,)),
                           ArrayRef(BufferSlice(0, 8, 16), "f32", (4,))],
                          [ArrayRef(BufferSlice(0, 24, 16), "f32", (4,))],
                          "", "API_VERSION_TYPED_FFI", [0, 0])
    add.execute(ctx)
    np.testing.assert_array_equal(out, [11, 22, 31, 42])
    stream = CustomCallThunk("s", "xla_gpu_test_stream_value", [],
                             [ArrayRef(BufferSlice(0, 40, 8), "s64", ())], "",
                             "API_VERSION_TYPED_FFI", [])
    stream.execute(ctx)
    assert int(memory[40:48].view(np.int64)[0]) == 0x5eed

    seen = {}

    def python_handler(x, y, out, *, stream):
        seen["stream"], seen["cai"] = stream, x.__cuda_array_interface__
        ctypes.memmove(out.ptr, y.ptr, out.nbytes)   # "device" to "device"

    ffi.register_ffi_target("xla_gpu_test_py_device", python_handler, platform="cuda")
    py = CustomCallThunk("p", "xla_gpu_test_py_device",
                         [ArrayRef(BufferSlice(0, 0, 8), "f32", (2,)),
                          ArrayRef(BufferSlice(0, 8, 16), "f32", (4,))],
                         [ArrayRef(BufferSlice(0, 24, 16), "f32", (4,))],
                         "", "API_VERSION_TYPED_FFI", [0, 0])
    py.execute(ctx)
    np.testing.assert_array_equal(out, b)
    assert seen["stream"] == 0x5eed
    cai = seen["cai"]
    assert cai["data"] == (memory.ctypes.data, True) and cai["shape"] == (2,)
    assert cai["typestr"] == "<f4" and cai["version"] == 3 and cai["stream"] == 0x5eed


@needs_compiler
def test_cpu_buffers_in_other_layouts_are_relaid(lib):
    """A thunk whose operand and result are column-major: the C handler gets
    the buffers as they lie (XLA's FFI passes no layout; the compiler puts
    them in the layouts the call requires, see test_custom_call_layouts),
    so an elementwise handler over same-layout buffers computes the
    logical result."""
    from xla_gpu.runtime.buffers import BufferSlice
    from xla_gpu.runtime.thunks import ArrayRef, CustomCallThunk, ExecutionContext
    ffi.register_ffi_target("xla_gpu_test_variadic", ffi.pycapsule(lib.XlaGpuTestVariadic))
    memory = np.zeros(72, np.uint8)
    a_ref = ArrayRef(BufferSlice(0, 0, 24), "f32", (2, 3), (0, 1))     # column-major
    b_ref = ArrayRef(BufferSlice(0, 24, 24), "f32", (2, 3))
    out_ref = ArrayRef(BufferSlice(0, 48, 24), "f32", (2, 3), (0, 1))
    ctx = ExecutionContext("cpu", [memory], {},
                           custom_calls=lambda t: ffi.runtime_handler(t, "cpu"))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ctx.array(a_ref)[...] = a
    ctx.array(b_ref)[...] = 10
    assert memory[0:24].view(np.float32).tolist() == [0, 3, 1, 4, 2, 5]
    CustomCallThunk("r", "xla_gpu_test_variadic", [a_ref, b_ref], [out_ref], "",
                    "API_VERSION_TYPED_FFI", [0, 0]).execute(ctx)
    np.testing.assert_array_equal(ctx.array(out_ref), a + 20)
    np.testing.assert_array_equal(memory[48:72].view(np.float32), (a + 20).T.reshape(-1))
