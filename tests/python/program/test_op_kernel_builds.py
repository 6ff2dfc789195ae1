"""The kernels of a program's sorts, top-ks and convolutions are built on
the compile threads, each kernel a task of its own, and join the program
as the serial compile would have them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import xla_gpu
from xla_gpu import op_kernels
from xla_gpu._trace import Trace, recording
from xla_gpu.errors import XlaGpuError
from xla_gpu.hlo import parse_module
from xla_gpu.program import kernels as program_kernels

# A row of 16384 with its indices: longer than a sort tile, so several
# kernels (tiles, then merges across them).
LONG_SORT = """
HloModule long_sort

lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT c = pred[] compare(a, b), direction=LT
}

ENTRY e {
  x = f32[16384] parameter(0)
  n = s32[16384] iota(), iota_dimension=0
  ROOT s = (f32[16384], s32[16384]) sort(x, n), dimensions={0}, to_apply=lt
}
"""

# The same comparator, called with the wrong number of parameters.
BAD_SORT = """
HloModule bad_sort

less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}

ENTRY e {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  ROOT s = (f32[8], f32[8]) sort(x, y), dimensions={0}, to_apply=less
}
"""


def _sort_instruction(text: str):
    module = parse_module(text)
    return next(i for i in module.entry.instructions if i.opcode == "sort")


def test_op_kernel_fusions_are_what_compile_sort_builds():
    inst = _sort_instruction(LONG_SORT)
    fusions = op_kernels.op_kernel_fusions(inst)
    asked = []

    def build(fusion):
        asked.append(fusion.name)
        return op_kernels._default_build("cpu", "sm_90", False, False)(fusion)

    compiled = op_kernels.compile_sort(inst, build=build)
    assert len(fusions) > 2
    assert asked == [f.name for f in fusions]
    # Repeated steps reuse one build.
    assert len(compiled.kernels) > len(asked)


def test_op_kernel_fusions_of_other_ops_are_none():
    module = parse_module("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
                          "  ROOT n = f32[4] negate(x)\n}\n")
    assert op_kernels.op_kernel_fusions(module.entry.root) == []


def test_long_sort_kernels_build_on_the_compile_threads(monkeypatch):
    if program_kernels.PREFETCH_THREADS < 2:
        pytest.skip("no compile threads")
    monkeypatch.setattr(program_kernels.os, "cpu_count", lambda: 2)
    xla_gpu.compiler.clear_memory_cache()
    with recording(Trace()) as trace:
        exe = xla_gpu.compile(LONG_SORT, target="cpu", cache=False)
    me = threading.get_native_id()
    sort_kernels = [e for e in trace.events()
                    if e.get("ph") == "X" and e["name"].startswith("kernel s_")]
    assert len(sort_kernels) > 2
    assert all(e["tid"] != me for e in sort_kernels)
    x = np.random.default_rng(0).standard_normal(16384).astype(np.float32)
    values, indices = exe.run(x)
    np.testing.assert_array_equal(values, np.sort(x))
    np.testing.assert_array_equal(x[indices], np.sort(x))


def test_a_sort_the_emitter_refuses_fails_the_compile_clearly():
    xla_gpu.compiler.clear_memory_cache()
    with pytest.raises(XlaGpuError, match="comparator 'less' takes 2 parameters"):
        xla_gpu.compile(BAD_SORT, target="cpu", cache=False)
