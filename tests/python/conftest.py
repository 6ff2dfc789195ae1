"""Shared fixtures of the Python tests."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

# The tests live in one folder per layer of the package (tests/python/<layer>/);
# the data they share (programs/, hlo_inputs/, data/, program_data.py) stays
# here. A few tests reuse another folder's HLO snippets by module name.
_HERE = os.path.dirname(os.path.abspath(__file__))
for _entry in sorted(os.listdir(_HERE)):
    _folder = os.path.join(_HERE, _entry)
    if os.path.isdir(_folder) and any(n.startswith("test_") for n in os.listdir(_folder)):
        if _folder not in sys.path:
            sys.path.append(_folder)
if _HERE not in sys.path:
    sys.path.append(_HERE)

# Hermetic: every test session compiles into a fresh cache of its own and
# never reads or writes the user's ~/.cache (set before xla_gpu is imported
# by any test module; subprocesses inherit it).
_SESSION_CACHE = tempfile.mkdtemp(prefix="xla_gpu_test_cache_")
os.environ["XLA_GPU_CACHE_DIR"] = _SESSION_CACHE
# Subprocesses (`python -c ...`) must import the installed package, not the
# source tree they may be started in (which lacks the built native part and
# generated op builders): no current directory on their sys.path.
os.environ["PYTHONSAFEPATH"] = "1"
# Whole programs' temp and output buffers start as garbage, not zeros: a
# kernel that reads memory nothing wrote fails here as it would on a GPU.
os.environ.setdefault("XLA_GPU_DEBUG_FILL", "0xA5")
# The pass managers verify the IR after every pass here (by default only
# after the last one): a pass that makes invalid IR is named.
os.environ.setdefault("XLA_GPU_VERIFY_EACH_PASS", "1")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


@pytest.fixture
def ctx():
    from xla_gpu import ir
    context = ir.Context()
    with context:
        yield context


@pytest.fixture
def linker_runs(monkeypatch):
    """The cpu target's linker command lines, as it runs them."""
    from xla_gpu.backends import cpu
    runs: list[list[str]] = []
    run = cpu._run_linker

    def counted(command):
        runs.append(command)
        return run(command)

    monkeypatch.setattr(cpu, "_run_linker", counted)
    return runs
