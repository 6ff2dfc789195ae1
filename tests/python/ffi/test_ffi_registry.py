"""The FFI handler registry (xla_gpu.ffi): what a Python handler must
return, when a program binds its custom calls' handlers, that registering
never calls a handler, and that bad arguments are FfiRegistrationErrors.

Whole programs are compiled for the cpu target (`xla_gpu.compile(text,
target="cpu")`); the C handlers here are written against the runtime's own
declaration of XLA's FFI ABI (ffi/xla_gpu_ffi_abi.h), so these tests need a
C++ compiler but not jax.
"""

from __future__ import annotations

import ctypes
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
from xla_gpu.errors import HloError, XlaGpuError
from xla_gpu.runtime.thunks import ThunkError

ROOT = Path(__file__).resolve().parents[3]
ABI_HEADER = ROOT / "ffi" / "xla_gpu_ffi_abi.h"


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")


needs_compiler = pytest.mark.skipif(_compiler() is None or not ABI_HEADER.is_file(),
                                    reason="no C++ compiler or no ffi/ sources")


@pytest.fixture(autouse=True)
def _forget_targets():
    before = set(ffi.registered_targets())
    yield
    for name, platform in set(ffi.registered_targets()) - before:
        ffi.unregister_ffi_target(name, platform)


ONE_RESULT = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  s = f32[2,3] sine(x)
  ROOT r = f32[2,3] custom-call(s), custom_call_target="%s", api_version=API_VERSION_TYPED_FFI
}"""

TWO_RESULTS = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  s = f32[2,3] sine(x)
  ROOT r = (f32[2,3], s32[]) custom-call(s), custom_call_target="%s", api_version=API_VERSION_TYPED_FFI
}"""

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _refused_both_ways(text: str, name: str, message: str) -> None:
    """The compiled program and the interpreter refuse the call, naming the
    target and `message`."""
    with pytest.raises(ffi.FfiError, match=message) as info:
        xla_gpu.compile(text, target="cpu").run(X)
    assert f"target '{name}'" in str(info.value) and info.value.target == name
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(HloError, match=message):
        hlo.evaluate(hlo.parse_module(text), X)


# --- what a Python handler returns ---------------------------------------------------------


def test_handler_that_returns_nothing_is_an_error():
    # Takes only the operand, so it must return the result; it forgot to.
    def forgot_to_return(s):
        np.cos(s)

    ffi.register_ffi_target("xla_gpu_test_reg_none", forgot_to_return)
    _refused_both_ways(ONE_RESULT % "xla_gpu_test_reg_none", "xla_gpu_test_reg_none",
                       "returned None; the custom call has 1 result")

    def none_for_one_result(s):
        return np.cos(s), None

    ffi.register_ffi_target("xla_gpu_test_reg_none1", none_for_one_result)
    _refused_both_ways(TWO_RESULTS % "xla_gpu_test_reg_none1", "xla_gpu_test_reg_none1",
                       "returned None for result 1")


def test_handler_filling_its_results_in_place_returns_none():
    def in_place(s, out, count):
        np.cos(s, out=out)
        count[...] = 7

    ffi.register_ffi_target("xla_gpu_test_reg_inplace", in_place)
    text = TWO_RESULTS % "xla_gpu_test_reg_inplace"
    for got in (xla_gpu.compile(text, target="cpu").run(X),
                hlo.evaluate(hlo.parse_module(text), X)):
        np.testing.assert_allclose(got[0], np.cos(np.sin(X)), rtol=1e-6)
        assert int(got[1]) == 7


def test_returned_results_must_have_the_results_count_shape_and_dtype():
    cases = {
        # numpy float64 for an f32 result: numpy narrows it only with loss.
        "xla_gpu_test_reg_f64": (lambda s: (np.cos(s).astype(np.float64), np.int32(1)),
                                 "returned float64 for result 0"),
        # numpy int64 for an s32 result: the same.
        "xla_gpu_test_reg_i64": (lambda s: (np.cos(s), np.int64(1)),
                                 "returned int64 for result 1"),
        "xla_gpu_test_reg_float_for_int": (lambda s: (np.cos(s), np.float32(1.5)),
                                           "returned float32 for result 1"),
        "xla_gpu_test_reg_shape": (lambda s: (np.cos(s).T, np.int32(1)),
                                   r"returned shape \[3, 2\] for result 0"),
        "xla_gpu_test_reg_count": (lambda s: np.cos(s),
                                   r"returned 1 value\(s\); the custom call has 2"),
        "xla_gpu_test_reg_object": (lambda s: (np.cos(s), "one"),
                                    "for result 1"),
    }
    for name, (fn, message) in cases.items():
        ffi.register_ffi_target(name, fn)
        _refused_both_ways(TWO_RESULTS % name, name, message)


def test_returned_results_convert_when_nothing_is_lost():
    # A Python int takes the result's dtype; float16 widens to float32.
    ffi.register_ffi_target("xla_gpu_test_reg_widen",
                            lambda s: (np.cos(s).astype(np.float16), s.size))
    text = TWO_RESULTS % "xla_gpu_test_reg_widen"
    for got in (xla_gpu.compile(text, target="cpu").run(X),
                hlo.evaluate(hlo.parse_module(text), X)):
        assert got[0].dtype == np.float32 and got[1].dtype == np.int32
        np.testing.assert_allclose(got[0], np.cos(np.sin(X)), rtol=1e-3)
        assert int(got[1]) == 6


# --- binding: compile time and load time ---------------------------------------------------------


def test_compiled_program_keeps_the_python_handler_it_was_compiled_with():
    name = "xla_gpu_test_reg_bind_py"
    text = ONE_RESULT % name
    ffi.register_ffi_target(name, lambda s: s + 1)
    first = xla_gpu.compile(text, target="cpu")
    np.testing.assert_allclose(first.run(X)[0], np.sin(X) + 1, rtol=1e-6)
    assert ffi.unregister_ffi_target(name)
    np.testing.assert_allclose(first.run(X)[0], np.sin(X) + 1, rtol=1e-6)
    ffi.register_ffi_target(name, lambda s: s + 2)
    np.testing.assert_allclose(first.run(X)[0], np.sin(X) + 1, rtol=1e-6)
    # Compiled now (from the compile cache or not): the new handler.
    second = xla_gpu.compile(text, target="cpu")
    np.testing.assert_allclose(second.run(X)[0], np.sin(X) + 2, rtol=1e-6)
    np.testing.assert_allclose(first.run(X)[0], np.sin(X) + 1, rtol=1e-6)


def test_interpreter_registered_handler_is_bound_at_compile_time_too():
    from xla_gpu.hlo import interpreter
    name = "xla_gpu_test_reg_bind_interp"
    interpreter.register_custom_call(name, lambda s: s * 3)
    try:
        exe = xla_gpu.compile(ONE_RESULT % name, target="cpu")
        interpreter.register_custom_call(name, lambda s: s * 4)
        np.testing.assert_allclose(exe.run(X)[0], np.sin(X) * 3, rtol=1e-6)
    finally:
        interpreter.unregister_custom_call(name)
    np.testing.assert_allclose(exe.run(X)[0], np.sin(X) * 3, rtol=1e-6)


def test_program_compiled_without_a_handler_does_not_pick_up_a_later_one():
    name = "xla_gpu_test_reg_late"
    exe = xla_gpu.compile(ONE_RESULT % name, target="cpu")
    ffi.register_ffi_target(name, lambda s: s)
    with pytest.raises(ThunkError, match=f"no handler registered for target '{name}' on "
                                         "platform 'cpu' when the program was compiled"):
        exe.run(X)


def test_loaded_program_binds_its_handlers_when_loaded(tmp_path):
    from xla_gpu.runtime import load
    from xla_gpu.runtime.program import load_program
    name = "xla_gpu_test_reg_bind_load"
    ffi.register_ffi_target(name, lambda s: s + 1)
    exe = xla_gpu.compile(ONE_RESULT % name, target="cpu")
    exe.save(tmp_path / "program")
    digest = exe.artifact_digest
    ffi.unregister_ffi_target(name)
    ffi.register_ffi_target(name, lambda s: s + 5)
    loaded = load(tmp_path / "program", expected_digest=digest)
    ffi.unregister_ffi_target(name)
    np.testing.assert_allclose(loaded.run(X)[0], np.sin(X) + 5, rtol=1e-6)
    with pytest.raises(ThunkError, match="when the program was compiled or loaded"):
        load_program(tmp_path / "program", expected_digest=digest).run(X)


# --- C handlers ---------------------------------------------------------------------------------

HANDLERS = r"""
#include "xla_gpu_ffi_abi.h"
using namespace xla_gpu_ffi::abi;

static int calls = 0;

// Answers a metadata query with API version major.minor.
static bool AnswerMetadata(CallFrame* frame, int major, int minor) {
  ExtensionBase* ext = frame->extension_start;
  if (ext == nullptr || ext->type != kExtensionMetadata) return false;
  Metadata* metadata = reinterpret_cast<MetadataExtension*>(ext)->metadata;
  metadata->api_version.major_version = major;
  metadata->api_version.minor_version = minor;
  metadata->traits = 0;
  return true;
}

// Fills the f32 result with `value`.
static Error* Fill(CallFrame* frame, float value) {
  ++calls;
  if (AnswerMetadata(frame, 0, 3) || frame->stage != kExecute) return nullptr;
  Buffer* out = static_cast<Buffer*>(frame->rets.rets[0]);
  int64_t n = 1;
  for (int64_t i = 0; i < out->rank; ++i) n *= out->dims[i];
  float* data = static_cast<float*>(out->data);
  for (int64_t i = 0; i < n; ++i) data[i] = value;
  return nullptr;
}

extern "C" Error* XlaGpuTestRegFillOne(CallFrame* frame) { return Fill(frame, 1.0f); }
extern "C" Error* XlaGpuTestRegFillTwo(CallFrame* frame) { return Fill(frame, 2.0f); }
extern "C" Error* XlaGpuTestRegFuture(CallFrame* frame) {
  ++calls;
  AnswerMetadata(frame, 9, 0);
  return nullptr;
}
extern "C" int XlaGpuTestRegCalls() { return calls; }
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> ctypes.CDLL:
    if _compiler() is None or not ABI_HEADER.is_file():
        pytest.skip("no C++ compiler or no ffi/ sources")
    build = tmp_path_factory.mktemp("ffi_registry")
    source = build / "handlers.cc"
    source.write_text(HANDLERS)
    out = build / "libxla_gpu_test_registry.so"
    done = subprocess.run([_compiler(), "-std=c++17", "-O1", "-shared", "-fPIC",
                           f"-I{ABI_HEADER.parent}", str(source), "-o", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return ffi.load_library(out)


@needs_compiler
def test_registering_never_calls_the_handler(lib):
    before = lib.XlaGpuTestRegCalls()
    ffi.register_ffi_target("xla_gpu_test_reg_counted", ffi.pycapsule(lib.XlaGpuTestRegFillOne))
    ffi.register_ffi_target("xla_gpu_test_reg_counted", {
        "instantiate": None, "execute": ffi.pycapsule(lib.XlaGpuTestRegFillOne)},
        platform="cuda")
    assert lib.XlaGpuTestRegCalls() == before
    # Its API version is asked for right before the first call instead: a
    # handler built for one the runtime does not speak is refused then.
    ffi.register_ffi_target("xla_gpu_test_reg_future", ffi.pycapsule(lib.XlaGpuTestRegFuture))
    assert lib.XlaGpuTestRegCalls() == before
    text = ONE_RESULT % "xla_gpu_test_reg_future"
    with pytest.raises(ffi.FfiError, match=r"API version \(9\.0\) is incompatible") as info:
        xla_gpu.compile(text, target="cpu").run(X)
    assert info.value.target == "xla_gpu_test_reg_future"
    with pytest.raises(XlaGpuError, match=r"API version \(9\.0\)"):
        hlo.evaluate(hlo.parse_module(text), X)


def test_registering_a_function_that_is_no_handler_does_not_call_it():
    # libc's abs taken for an XLA_FFI_Handler: calling it with a call frame
    # would crash; registering must not call it (a subprocess, so that a
    # crash fails this test rather than the session).
    code = """
import ctypes
import xla_gpu.ffi as ffi
libc = ctypes.CDLL(None)
address = ctypes.cast(libc.abs, ctypes.c_void_p).value
ffi.register_ffi_target("xla_gpu_test_reg_abs", ffi.pycapsule(address))
ffi.register_ffi_target("xla_gpu_test_reg_abs", ffi.pycapsule(libc.abs), platform="cuda")
ffi.register_ffi_target("xla_gpu_test_reg_abs2", {"instantiate": ffi.pycapsule(libc.labs),
                                                  "execute": ffi.pycapsule(libc.labs)})
print(sorted(ffi.registered_targets()))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "('xla_gpu_test_reg_abs', 'cuda')" in done.stdout
    assert "('xla_gpu_test_reg_abs2', 'cpu')" in done.stdout


@needs_compiler
def test_compiled_program_keeps_the_c_handler_it_was_compiled_with(lib, tmp_path):
    name = "xla_gpu_test_reg_bind_c"
    text = ONE_RESULT % name
    ffi.register_ffi_target(name, ffi.pycapsule(lib.XlaGpuTestRegFillOne))
    first = xla_gpu.compile(text, target="cpu")
    first.save(tmp_path / "program")
    np.testing.assert_array_equal(first.run(X)[0], np.ones((2, 3), np.float32))
    assert ffi.unregister_ffi_target(name)
    np.testing.assert_array_equal(first.run(X)[0], np.ones((2, 3), np.float32))
    ffi.register_ffi_target(name, ffi.pycapsule(lib.XlaGpuTestRegFillTwo))
    np.testing.assert_array_equal(first.run(X)[0], np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(xla_gpu.compile(text, target="cpu").run(X)[0],
                                  np.full((2, 3), 2, np.float32))
    from xla_gpu.runtime import load
    loaded = load(tmp_path / "program", expected_digest=first.artifact_digest)
    ffi.unregister_ffi_target(name)
    np.testing.assert_array_equal(loaded.run(X)[0], np.full((2, 3), 2, np.float32))


# --- bad arguments ------------------------------------------------------------------------------


def test_bad_arguments_are_registration_errors(tmp_path):
    handler = ffi.pycapsule(ctypes.CDLL(None).abs)   # registered, never called
    type_id = ctypes.c_int64(0)
    type_id_capsule = ffi.pycapsule(ctypes.addressof(type_id))
    bad_calls = [
        (lambda: ffi.pycapsule(1.5), "pycapsule: expected a ctypes function"),
        (lambda: ffi.pycapsule("abs"), "pycapsule: expected a ctypes function"),
        (lambda: ffi.pycapsule(b"abs"), "pycapsule: expected a ctypes function"),
        (lambda: ffi.pycapsule(-8), r"pycapsule: -8 is out of range"),
        (lambda: ffi.pycapsule(1 << 64), "pycapsule: .* is out of range"),
        (lambda: ffi.pycapsule(ctypes.c_void_p()), "null function pointer"),
        (lambda: ffi.register_ffi_target("a\0b", handler), "contains a NUL"),
        (lambda: ffi.register_ffi_target("\udc80", handler), "not valid Unicode"),
        (lambda: ffi.register_ffi_target("t", handler, traits=1 << 32), "traits"),
        (lambda: ffi.register_ffi_target("t", handler, traits=1.0), "traits"),
        (lambda: ffi.register_ffi_target("t", handler, api_version=1.0), "api_version"),
        (lambda: ffi.unregister_ffi_target(None), "expected a non-empty str name"),
        (lambda: ffi.unregister_ffi_target(7), "expected a non-empty str name"),
        (lambda: ffi.type_id(None), "expected a non-empty str name"),
        (lambda: ffi.set_user_data(-1, None), r"type id: -1 is out of range"),
        (lambda: ffi.set_user_data(True, None), "expected an int, got bool"),
        (lambda: ffi.set_user_data(2.5, None), "expected an int, got float"),
        (lambda: ffi.set_user_data(1, 1.5), "set_user_data: data: expected a ctypes"),
        (lambda: ffi.set_user_data(1, -4), "set_user_data: data: -4 is out of range"),
        (lambda: ffi.register_ffi_type(None, {"type_id": handler}),
         "expected a non-empty str name"),
        (lambda: ffi.register_ffi_type("t", {"type_id": 1.5}), "type_id: expected a PyCapsule"),
        (lambda: ffi.register_ffi_type("t", {"type_id": type_id_capsule, "type_info": "x"}),
         "type_info: expected a PyCapsule"),
        (lambda: ffi.load_library(None), "load_library: expected a path"),
        (lambda: ffi.load_library(tmp_path / "missing.so"), "load_library: cannot load"),
        (lambda: ffi.register_from_spec(None), "expected a str"),
        (lambda: ffi.register_from_spec(f"t={tmp_path / 'x.so'}:Sym@rocm"), "unknown platform"),
        (lambda: ffi.lookup(None, "cpu"), "expected a non-empty str name"),
    ]
    for call, message in bad_calls:
        with pytest.raises(ffi.FfiRegistrationError, match=message):
            call()
    assert issubclass(ffi.FfiRegistrationError, ValueError)
    assert ffi.runtime_handler(None, "cpu") is None
    assert ffi.runtime_handler("xla_gpu_test_reg_nothing", "rocm") is None
    assert not any(name in ("t", "a\0b") for name, _ in ffi.registered_targets())


def test_python_handlers_live_in_one_registry_the_interpreter_and_runtime_share():
    """xla_gpu.ffi.registry holds the Python handlers: one registered there
    is what hlo.evaluate and a compiled cpu program run, and the
    interpreter's register_custom_call / unregister_custom_call act on it."""
    from xla_gpu.ffi import registry
    from xla_gpu.hlo import interpreter
    name = "xla_gpu_test_reg_one_registry"
    registry.register_custom_call(name, lambda s: s * 5)
    try:
        assert name in interpreter.registered_custom_calls()
        module = hlo.parse_module(ONE_RESULT % name)
        np.testing.assert_allclose(hlo.evaluate(module, X)[0], np.sin(X) * 5, rtol=1e-6)
        exe = xla_gpu.compile(ONE_RESULT % name, target="cpu")
        np.testing.assert_allclose(exe.run(X)[0], np.sin(X) * 5, rtol=1e-6)
        interpreter.register_custom_call(name, lambda s: s * 6)
        assert registry.custom_call_handler(name)(np.float32(1)) == 6
    finally:
        interpreter.unregister_custom_call(name)
    assert registry.custom_call_handler(name) is None
    assert name not in registry.registered_custom_calls()
