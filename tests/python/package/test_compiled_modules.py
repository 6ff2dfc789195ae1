"""The hottest modules of the HLO passes, compiled by Cython at install time
(cmake/CompiledPython.cmake), against their Python sources: an installed
package loads the compiled twins, XLA_GPU_PURE_PYTHON=1 loads the sources
instead, and both give the same optimized programs. Run in subprocesses,
which import the installed package (the tests' environment keeps the
source tree off their sys.path); where the install has no twins (an
editable install, a build without Cython) both sides are the sources."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def _hot_modules() -> list[str]:
    text = (REPO / "cmake" / "CompiledPython.cmake").read_text()
    listed = re.search(r"set\(XLA_GPU_HOT_MODULES\s+(.*?)\)", text, re.S).group(1)
    return ["xla_gpu." + m.replace("/", ".") for m in listed.split()]


# What the subprocess prints: where each hot module was loaded from, and a
# digest of each program as the pass pipeline leaves it (both settings of
# the cpu target's grid emulation: the GEMM fusion bounds differ).
_REPORT = """
import hashlib, importlib, json, sys
from xla_gpu.hlo import parse_module
from xla_gpu.hlo.printer import module_to_text
from xla_gpu.program.prepare import prepare_module
modules, paths = json.loads(sys.argv[1]), json.loads(sys.argv[2])
files = {m: importlib.import_module(m).__file__ for m in modules}
digests = {}
for path in paths:
    for grid in (True, False):
        prepared, _ = prepare_module(parse_module(open(path).read()), emulates_grid=grid)
        digests[f"{path}:{grid}"] = hashlib.sha256(module_to_text(prepared).encode()).hexdigest()
print(json.dumps({"files": files, "digests": digests}))
"""


def _python(script: str, *args: str, pure: bool = False,
            timeout: int = 600) -> subprocess.CompletedProcess:
    """`script` run by a fresh interpreter on the installed package, with
    or without XLA_GPU_PURE_PYTHON."""
    env = dict(os.environ)
    env.pop("XLA_GPU_PURE_PYTHON", None)
    if pure:
        env["XLA_GPU_PURE_PYTHON"] = "1"
    return subprocess.run([sys.executable, "-c", script, *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _report(pure: bool, programs: list[str]) -> dict:
    out = _python(_REPORT, json.dumps(_hot_modules()), json.dumps(programs), pure=pure)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_every_listed_module_has_a_source():
    for module in _hot_modules():
        assert (REPO / (module.replace(".", "/") + ".py")).is_file(), module


def test_compiled_twins_give_the_programs_the_sources_give():
    programs = [str(PROGRAMS / name / "before_optimizations.hlo")
                for name in ("transformer_block", "adam_step", "softmax_xent", "scan_rnn")]
    default, pure = _report(False, programs), _report(True, programs)
    # The switch loads every hot module from its source...
    assert all(f.endswith(".py") for f in pure["files"].values()), pure["files"]
    # ...and without it an installed twin is what runs.
    for module, loaded in default["files"].items():
        source = Path(pure["files"][module])
        twins = sorted(source.parent.glob(source.stem + ".cpython-*.so"))
        if twins:
            assert loaded.endswith(".so"), (module, loaded)
    assert default["digests"] == pure["digests"]


def test_ctrl_c_stops_a_compile_running_the_compiled_passes():
    # A compile spends most of its time in the compiled modules (priority
    # fusion above all); Ctrl-C must still end it at once: the twins call
    # back into interpreted code (the emitters' analyses, the other passes),
    # where the interpreter raises KeyboardInterrupt, and pass it up.
    model = PROGRAMS.parent / "hlo_inputs" / "models" / "gpt_adamw_1layer.hlo"
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, xla_gpu\n"
         "text = open(sys.argv[1]).read()\n"
         "print('compiling', flush=True)\n"
         "while True:\n"
         "    xla_gpu.compiler.clear_memory_cache()\n"
         "    xla_gpu.compile(text, target='cpu', cache=False)\n", str(model)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "compiling\n"
        time.sleep(1.5)
        child.send_signal(signal.SIGINT)
        start = time.monotonic()
        _, err = child.communicate(timeout=30)
        waited = time.monotonic() - start
    finally:
        child.kill()
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert waited < 3, waited


def test_a_deep_tuple_shape_is_walked_without_recursion():
    # Compiled code does not count its own recursion against Python's
    # limit: a recursive walk of a deep enough tuple overflows the C stack
    # (a crash) where the interpreter raises RecursionError. The compiled
    # modules' walks are loops; deeper than Python's limit, they still work.
    script = (
        "from xla_gpu.hlo.shape import Shape, same_shape\n"
        "def deep(n):\n"
        "    s = Shape('f32', (2,))\n"
        "    for _ in range(n):\n"
        "        s = Shape('', (), None, (s, Shape('s32', ())))\n"
        "    return s\n"
        "a, b = deep(200000), deep(200000)\n"
        "assert len(a.leaves()) == 200001 and a.leaves()[0] == Shape('f32', (2,))\n"
        "assert same_shape(a, b) and not same_shape(a, deep(199999))\n"
        "print('ok')\n")
    out = _python(script, timeout=300)
    assert out.returncode == 0 and out.stdout == "ok\n", (out.returncode, out.stderr[-2000:])
