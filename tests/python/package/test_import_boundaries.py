"""What importing a layer loads, checked in fresh processes: the runtime
(all a deployment that only runs compiled programs imports) loads neither
the compiler nor the reference interpreter nor MLIR; the interpreter loads
no FFI code (it imports xla_gpu.ffi.registry only when a custom call
runs); the compiler stays one attribute away (`xla_gpu.compile`)."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(statements: str) -> list[str]:
    script = f"import sys\n{statements}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _ours(modules: list[str], *words: str) -> list[str]:
    return [m for m in modules if m.startswith("mlir") or
            (m.startswith("xla_gpu") and any(w in m for w in words))]


def test_runtime_loads_no_compiler_interpreter_or_mlir():
    loaded = _modules_after("import xla_gpu.runtime")
    assert "xla_gpu.runtime" in loaded
    assert _ours(loaded, "compiler", "interpreter", "emitters", "pipeline") == []


def test_interpreter_loads_no_ffi_or_compiler():
    loaded = _modules_after("import xla_gpu.hlo.interpreter")
    assert "xla_gpu.hlo.interpreter.core" in loaded
    assert _ours(loaded, "ffi", "compiler", "emitters") == []


def test_the_compiler_is_loaded_when_first_asked_for():
    loaded = _modules_after("import xla_gpu\n"
                            "assert callable(xla_gpu.compile) and xla_gpu.Executable\n"
                            "assert callable(xla_gpu.compiler.clear_memory_cache)\n"
                            "from xla_gpu import compile, Executable")
    assert "xla_gpu.compiler" in loaded
