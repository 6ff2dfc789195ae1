"""A run that never ends can be stopped: Ctrl-C (SIGINT) raises
KeyboardInterrupt and `run(timeout=)` raises DeadlineExceededError, on every
way a cpu-target program runs (the C run path, the native executor through
ctypes, the Python executor), and the executable runs again afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import xla_gpu

# Loops while i < limit; the body never changes i, so limit > 0 never ends
# and limit <= 0 ends at once.
ENDLESS = """HloModule endless
cond {
  s = (s32[], s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  limit = s32[] get-tuple-element(s), index=1
  ROOT lt = pred[] compare(i, limit), direction=LT
}
body {
  s = (s32[], s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  limit = s32[] get-tuple-element(s), index=1
  x = f32[8] get-tuple-element(s), index=2
  one = f32[] constant(1)
  ones = f32[8] broadcast(one), dimensions={}
  y = f32[8] add(x, ones)
  ROOT t = (s32[], s32[], f32[8]) tuple(i, limit, y)
}
ENTRY main {
  limit = s32[] parameter(0)
  x = f32[8] parameter(1)
  zero = s32[] constant(0)
  s = (s32[], s32[], f32[8]) tuple(zero, limit, x)
  w = (s32[], s32[], f32[8]) while(s), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=2
}
"""

# How each run path is reached: the C path takes contiguous numpy arrays;
# a strided one goes through Python to the native executor (ctypes);
# XLA_GPU_HOST_EXECUTOR=python runs every thunk from Python.
PATHS = {
    "c_run_path": ({}, False),
    "native_ctypes": ({}, True),
    "python_executor": ({"XLA_GPU_HOST_EXECUTOR": "python"}, False),
}


def _x(path: str, value: float = 0.0) -> np.ndarray:
    """f32[8] of `value`: a strided view where the path needs one."""
    if PATHS[path][1]:
        return np.full(16, value, np.float32)[::2]
    return np.full(8, value, np.float32)


@pytest.fixture(scope="module")
def endless():
    return xla_gpu.compile(ENDLESS, target="cpu")


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_timeout_stops_an_endless_loop_and_the_executable_runs_again(
        endless, path, monkeypatch):
    for name, value in PATHS[path][0].items():
        monkeypatch.setenv(name, value)
    x = _x(path)
    with pytest.raises(xla_gpu.DeadlineExceededError, match="deadline"):
        endless.run(np.array(1, np.int32), x, timeout=0.2)
    with pytest.raises(TimeoutError):   # the builtin a Python user expects
        endless.run(np.array(1, np.int32), x, timeout=0.05)
    (out,) = endless.run(np.array(0, np.int32), _x(path, 3.0), timeout=5)
    np.testing.assert_array_equal(out, np.full(8, 3.0, np.float32))


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "1", True])
def test_a_bad_timeout_is_an_argument_error(endless, timeout):
    with pytest.raises(xla_gpu.ArgumentError, match="timeout"):
        endless.run(np.array(0, np.int32), np.zeros(8, np.float32), timeout=timeout)


_CHILD = textwrap.dedent("""
    import sys, numpy as np, xla_gpu
    exe = xla_gpu.compile(open(sys.argv[1]).read(), target="cpu")
    def x(value):
        if {strided}:
            return np.full(16, value, np.float32)[::2]
        return np.full(8, value, np.float32)
    exe.run(np.array(0, np.int32), x(0))   # compiled and warm
    print("running", flush=True)
    try:
        exe.run(np.array(1, np.int32), x(0))
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    (out,) = exe.run(np.array(0, np.int32), x(2))
    print("again", float(out[0]), flush=True)
""")


@pytest.mark.parametrize("path", sorted(PATHS))
def test_ctrl_c_interrupts_an_endless_loop(path, tmp_path):
    program = tmp_path / "endless.hlo"
    program.write_text(ENDLESS)
    env = {**os.environ, **PATHS[path][0]}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(strided=PATHS[path][1]), str(program)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "running", child.stderr.read()
        time.sleep(0.5)                  # inside the endless loop by now
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert out.split("\n")[:2] == ["interrupted", "again 2.0"], (out, err)
