"""Custom calls get their buffers in the layouts they ask for.

A handler sees raw memory and logical dimensions only. XLA lays each
operand out as the call's `operand_layout_constraints` entry says (the
default row-major layout when there are none) and reads each result in the
layout of the call's result shape; the rest of the program keeps its own
layouts. The observer here is a legacy-ABI handler made with ctypes that
copies its operand's bytes into its result unchanged, so the result shows
the memory order the handler was given — through the compiled program (cpu
target) and the reference interpreter alike.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import xla_gpu
import xla_gpu.ffi as ffi
from xla_gpu import hlo
from xla_gpu.errors import XlaGpuError
from xla_gpu.hlo.passes import optimize

_LEGACY_CPU = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))
_keep = []   # the ctypes callbacks must outlive every program calling them


def _byte_copy(name: str, nbytes: int) -> str:
    """Registers `name`: a legacy cpu function copying `nbytes` from its
    first operand to its result, byte for byte."""
    def copy(out, ins):
        ctypes.memmove(out, ins[0], nbytes)

    fn = _LEGACY_CPU(copy)
    _keep.append(fn)
    ffi.unregister_ffi_target(name)
    ffi.register_ffi_target(name, fn, platform="cpu", api_version=0)
    return name


def _run(text: str, *args) -> list[tuple[str, np.ndarray]]:
    """The first output from the compiled program (with and without the
    pass pipeline) and from the interpreter."""
    out = []
    for optimize_flag in (None, False):
        exe = xla_gpu.compile(text, target="cpu", optimize=optimize_flag)
        out.append((f"compiled(optimize={optimize_flag})", np.asarray(exe.run(*args)[0])))
    ref = hlo.evaluate(hlo.parse_module(text), *args)
    out.append(("interpreter", np.asarray(ref[0] if isinstance(ref, tuple) else ref)))
    return out


X = np.arange(6, dtype=np.float32).reshape(2, 3)
COLUMN_MAJOR_BYTES = X.T.reshape(-1)          # X's elements in {0,1} memory order


def test_operand_is_given_in_the_constraint_layout():
    target = _byte_copy("xla_gpu_test_raw_copy_a", X.nbytes)
    text = f"""HloModule m
ENTRY e {{
  x = f32[2,3]{{1,0}} parameter(0)
  ROOT r = f32[6]{{0}} custom-call(x), custom_call_target="{target}", operand_layout_constraints={{f32[2,3]{{0,1}}}}
}}"""
    for where, got in _run(text, X):
        np.testing.assert_array_equal(got, COLUMN_MAJOR_BYTES, err_msg=where)


def test_result_is_read_in_its_shape_layout():
    """The handler writes the result in its shape's {0,1} layout; the
    program's users see its logical value."""
    target = _byte_copy("xla_gpu_test_raw_copy_b", X.nbytes)
    flat = np.arange(6, dtype=np.float32) * 10
    text = f"""HloModule m
ENTRY e {{
  x = f32[6]{{0}} parameter(0)
  r = f32[2,3]{{0,1}} custom-call(x), custom_call_target="{target}", operand_layout_constraints={{f32[6]{{0}}}}
  ROOT n = f32[2,3]{{1,0}} negate(r)
}}"""
    want = -flat.reshape(3, 2).T      # memory {0,1}: element (i, j) at j * 2 + i
    for where, got in _run(text, flat):
        np.testing.assert_array_equal(got, want, err_msg=where)


def test_tuple_result_leaves_keep_their_layouts():
    """As jax's LAPACK calls: a tuple result whose leaves have layouts of
    their own, the operand constrained to {0,1}. The handler copies the
    operand's bytes into both matrices: the {0,1} one reads back as the
    operand, the {1,0} one as its transpose."""
    n = 3
    a = np.arange(n * n, dtype=np.float32).reshape(n, n) + 1

    def copy(out, ins):   # out: a table of the result leaves' buffers
        table = ctypes.cast(out, ctypes.POINTER(ctypes.c_void_p))
        ctypes.memmove(table[0], ins[0], a.nbytes)
        ctypes.memmove(table[1], ins[0], a.nbytes)
        ctypes.memset(table[2], 0, 4)

    fn = _LEGACY_CPU(copy)
    _keep.append(fn)
    name = "xla_gpu_test_raw_copy_tuple"
    ffi.unregister_ffi_target(name)
    ffi.register_ffi_target(name, fn, platform="cpu", api_version=0)
    text = f"""HloModule m
ENTRY e {{
  x = f32[3,3]{{1,0}} parameter(0)
  t = (f32[3,3]{{0,1}}, f32[3,3]{{1,0}}, s32[]) custom-call(x), custom_call_target="{name}", operand_layout_constraints={{f32[3,3]{{0,1}}}}
  same = f32[3,3]{{0,1}} get-tuple-element(t), index=0
  transposed = f32[3,3]{{1,0}} get-tuple-element(t), index=1
  ten = f32[] constant(10)
  tens = f32[3,3]{{1,0}} broadcast(ten), dimensions={{}}
  scaled = f32[3,3]{{1,0}} multiply(transposed, tens)
  ROOT s = f32[3,3]{{1,0}} add(same, scaled)
}}"""
    for where, got in _run(text, a):
        np.testing.assert_array_equal(got, a + 10 * a.T, err_msg=where)


def test_unconstrained_operands_are_given_row_major():
    """Without constraints a handler reads its operands in the default
    layout, whatever layout the operand has in the program."""
    target = _byte_copy("xla_gpu_test_raw_copy_c", X.nbytes)
    text = f"""HloModule m
ENTRY e {{
  x = f32[2,3]{{1,0}} parameter(0)
  c = f32[2,3]{{0,1}} copy(x)
  ROOT r = f32[6]{{0}} custom-call(c), custom_call_target="{target}"
}}"""
    for where, got in _run(text, X):
        np.testing.assert_array_equal(got, X.reshape(-1), err_msg=where)


def test_the_pass_relayouts_operands_and_keeps_the_result_layout():
    module = hlo.parse_module("""HloModule m
ENTRY e {
  x = f32[4,5]{1,0} parameter(0)
  t = (f32[4,5]{0,1}, s32[]) custom-call(x), custom_call_target="some_handler", operand_layout_constraints={f32[4,5]{0,1}}
  ROOT g = f32[4,5]{0,1} get-tuple-element(t), index=0
}""")
    optimized = optimize(module)
    (call,) = [i for i in optimized.entry.instructions if i.opcode == "custom-call"]
    assert call.operands[0].shape.minor_to_major == (0, 1)
    assert call.shape.tuple_shapes[0].minor_to_major == (0, 1)
    # A module already in the required layouts is left as it is.
    again = optimize(optimized)
    (call2,) = [i for i in again.entry.instructions if i.opcode == "custom-call"]
    assert call2.operands[0].opcode == call.operands[0].opcode


def test_xla_internal_targets_are_left_alone():
    """TopK and the sharding annotations read logical values: no relayout."""
    text = """HloModule m
ENTRY e {
  x = f32[4,5]{0,1} parameter(0)
  ROOT s = f32[4,5]{0,1} custom-call(x), custom_call_target="Sharding"
}"""
    optimized = optimize(hlo.parse_module(text))
    # The annotation is gone before layouts are assigned (one device: it
    # is its operand); the only copy is the output's own, in x's layout.
    assert not any(i.opcode == "custom-call" for i in optimized.entry.instructions)
    assert all(i.shape.minor_to_major == i.operands[0].shape.minor_to_major
               for i in optimized.entry.instructions if i.opcode == "copy")
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    for where, got in _run(text, x):
        np.testing.assert_array_equal(got, x, err_msg=where)


@pytest.mark.parametrize("constraints, message", [
    ("{f32[2,3]{0,1}, f32[2,3]{0,1}}", "lists 2 shape(s) for 1 operand"),
    ("{f32[3,2]{0,1}}", "entry 0 is f32[3,2]{0,1}"),
    ("{s32[2,3]{0,1}}", "entry 0 is s32[2,3]{0,1}"),
    ("{f32[2,3]{0,1} junk}", "malformed operand_layout_constraints"),
    ("{q32[2,3]{0,1}}", "malformed operand_layout_constraints"),
])
def test_bad_constraints_are_errors(constraints, message):
    target = _byte_copy("xla_gpu_test_raw_copy_d", X.nbytes)
    text = f"""HloModule m
ENTRY e {{
  x = f32[2,3]{{1,0}} parameter(0)
  ROOT r = f32[6]{{0}} custom-call(x), custom_call_target="{target}", operand_layout_constraints={constraints}
}}"""
    module = hlo.parse_module(text)
    with pytest.raises(XlaGpuError, match=re.escape(message)):
        xla_gpu.compile(text, target="cpu").run(X)
    with pytest.raises(XlaGpuError, match=re.escape(message)):
        hlo.evaluate(module, X)
