"""The command-line tools and the Python entry points on hostile input:
endless or special files, huge stdin, Ctrl-C, control bytes, text that is
not UTF-8, bad flags and argument types. Every failure is exit status 2
with one line (130 for Ctrl-C) or an XlaGpuError, never a traceback, never
an unbounded read."""

from __future__ import annotations

import os
import platform
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo

ROOT = Path(__file__).resolve().parents[3]
OPT = str(xla_gpu.native_dir() / "bin" / "xla-gpu-opt")
GELU_MLIR = ROOT / "examples" / "gelu.mlir"

NEGATE = """HloModule m
ENTRY e {
  x = f32[16] parameter(0)
  ROOT y = f32[16] negate(x)
}
"""
PROGRAM = """HloModule p
ENTRY e {
  x = f32[16] parameter(0)
  a = f32[16] exponential(x)
  ROOT b = f32[16] negate(a)
}
"""


def _python_cli(function: str) -> list[str]:
    return [sys.executable, "-c", f"from xla_gpu._cli import {function}; {function}()"]


# name -> argv before the input; `mlir`: the tool reads MLIR, not HLO.
TOOLS = {
    "xla-gpu-run": (_python_cli("run_hlo_main") + ["--target=cpu", "--no-cache"], False),
    "xla-gpu-translate": (_python_cli("translate_main") + ["--target=cpu"], True),
    "xla-gpu-fusion-to-mlir": (_python_cli("fusion_to_mlir_main"), False),
    "python -m xla_gpu.hlo.passes": ([sys.executable, "-m", "xla_gpu.hlo.passes"], False),
    "xla-gpu-opt": ([OPT], True),
}
PYTHON_TOOLS = [name for name in TOOLS if name != "xla-gpu-opt"]


def _limit_memory():
    # Before the bounded reads, /dev/zero was read until memory ran out: a
    # regression must fail here, not take the machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _run(name: str, *args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    argv, _ = TOOLS[name]
    return subprocess.run([*argv, *args], capture_output=True, timeout=timeout,
                          preexec_fn=_limit_memory, **kwargs)


def _assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    err = result.stderr.decode("utf-8", errors="replace")
    assert result.returncode == 2, (result.returncode, err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.endswith("\n"), err
    assert b"\x1b" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in err, err
    return err


def _tool_input(name: str) -> Path:
    return GELU_MLIR if TOOLS[name][1] else ROOT / "examples" / "gelu.hlo"


# -- endless and special inputs: refused at once ------------------------------

@pytest.mark.parametrize("name", list(TOOLS))
def test_dev_zero_is_refused_not_read(name):
    result = _run(name, "/dev/zero", timeout=60)
    _assert_one_line_error(result, "/dev/zero", "not a regular file")


@pytest.mark.parametrize("name", list(TOOLS))
def test_a_fifo_without_writer_and_a_directory_are_refused(name, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # Opening a FIFO for reading waited for a writer: forever.
    _assert_one_line_error(_run(name, str(fifo), timeout=60), "not a regular file (a FIFO)")
    _assert_one_line_error(_run(name, str(tmp_path), timeout=60), "is a directory")


@pytest.mark.parametrize("name", list(TOOLS))
def test_stdin_and_files_are_read_up_to_the_limit(name, tmp_path):
    env = {**os.environ, "XLA_GPU_MAX_INPUT_BYTES": "65536"}
    with open("/dev/zero", "rb") as zero:
        result = _run(name, "-", stdin=zero, env=env, timeout=60)
    _assert_one_line_error(result, "<stdin>", "larger than the limit of 65536 bytes")
    big = tmp_path / "big.txt"
    big.write_bytes(b"// padding\n" * 10000)
    _assert_one_line_error(_run(name, str(big), env=env), "larger than the limit")
    bad = {**os.environ, "XLA_GPU_MAX_INPUT_BYTES": "lots"}
    _assert_one_line_error(_run(name, str(_tool_input(name)), env=bad),
                           "XLA_GPU_MAX_INPUT_BYTES must be a positive number")


def _blocked_reading_stdin(pid: int) -> bool:
    """Whether a thread of `pid` is in read(0, ...) (x86-64 and aarch64;
    elsewhere it waits a second and assumes so)."""
    number = {"x86_64": "0", "aarch64": "63"}.get(platform.machine())
    tasks = Path(f"/proc/{pid}/task")
    if number is None or not tasks.is_dir():
        time.sleep(1)
        return True
    for task in tasks.iterdir():
        try:
            fields = (task / "syscall").read_text().split()
        except OSError:
            continue
        if fields[:2] == [number, "0x0"]:
            return True
    return False


@pytest.mark.parametrize("name", list(TOOLS))
def test_ctrl_c_ends_every_tool_with_one_line(name):
    argv, _ = TOOLS[name]
    proc = subprocess.Popen([*argv, "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not _blocked_reading_stdin(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "never read stdin"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    prog = name.split()[-1] if name.startswith("python") else name
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.decode().endswith("interrupted\n") and err.count(b"\n") == 1, err
    assert prog in err.decode()


# -- what reaches the terminal ------------------------------------------------

def test_opt_escapes_control_bytes_in_diagnostics_and_exits_2(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_bytes(b"func.func @f() {\n  %x = arith.constant 1 : i32 \x1b[31mRED\xc2\x9b\xff\n}\n")
    result = _run("xla-gpu-opt", str(bad))
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert b"\x1b" not in result.stderr and b"\xc2\x9b" not in result.stderr
    # MLIR's diagnostic, its source line quoted with the bytes escaped.
    assert "bad.mlir:2:31: error: unexpected character" in err
    assert "i32 \\x1b[31mRED\\xc2\\x9b\\xff" in err


@pytest.mark.parametrize("name", PYTHON_TOOLS)
def test_control_bytes_in_messages_are_escaped(name, tmp_path):
    hostile = tmp_path / "evil\x1b[2J.txt"
    hostile.write_bytes(b"\x1b]0;title\x07 not HLO or MLIR\n")
    err = _assert_one_line_error(_run(name, str(hostile)))
    assert "\\x1b" in err
    missing = _run(name, str(tmp_path / "gone\x1b[31m.hlo"))
    _assert_one_line_error(missing, "No such file or directory", "gone\\x1b[31m.hlo")


@pytest.mark.parametrize("name", list(TOOLS))
def test_text_that_is_not_utf8_is_one_line_with_its_place(name, tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"// ok\n// caf\xe9\n")
    result = _run(name, str(bad))
    if name == "xla-gpu-opt":  # MLIR reads bytes; a comment may hold anything
        assert result.returncode == 0 and b"\xe9" not in result.stderr
        return
    _assert_one_line_error(result, "latin1.txt:2:7", "not UTF-8", "byte offset 12")


@pytest.mark.parametrize("name", ["xla-gpu-run", "xla-gpu-translate",
                                  "python -m xla_gpu.hlo.passes"])
def test_an_invalid_dump_regex_is_an_error(name, tmp_path):
    result = _run(name, str(_tool_input(name)), "--dump-dir", str(tmp_path),
                  "--dump-regex", "(")
    _assert_one_line_error(result, "--dump-regex", "invalid regular expression")
    # Also without --dump-dir (where it used to be ignored: exit 0).
    _assert_one_line_error(_run(name, str(_tool_input(name)), "--dump-regex", "("),
                           "invalid regular expression")


@pytest.mark.parametrize("name", ["xla-gpu-translate", "xla-gpu-fusion-to-mlir"])
def test_an_unwritable_output_is_an_error(name, tmp_path):
    source = str(_tool_input(name))
    _assert_one_line_error(_run(name, source, "-o", str(tmp_path / "no" / "out")),
                           "cannot write", "No such file or directory")
    _assert_one_line_error(_run(name, source, "-o", str(tmp_path)), "Is a directory")


@pytest.mark.parametrize("name", ["xla-gpu-run", "xla-gpu-translate"])
def test_an_unusable_dump_dir_is_an_error(name, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = _run(name, str(_tool_input(name)), "--dump-dir", str(blocker / "dumps"))
    _assert_one_line_error(result, "--dump-dir: cannot create", "Not a directory")
    with pytest.raises(xla_gpu.ArgumentError, match="dump_dir: cannot create"):
        xla_gpu.compile(NEGATE, target="cpu", dump_dir=blocker / "dumps")


def test_run_checks_its_numbers(tmp_path):
    path = tmp_path / "negate.hlo"
    path.write_text(NEGATE)
    _assert_one_line_error(_run("xla-gpu-run", str(path), "--seed=-1"),
                           "--seed must be a non-negative integer")
    _assert_one_line_error(_run("xla-gpu-run", str(path), "--iterations=0"),
                           "--iterations must be at least 1")


def test_opt_bad_flags_exit_2():
    result = _run("xla-gpu-opt", str(GELU_MLIR), "--no-such-flag")
    assert result.returncode == 2 and b"Unknown command line argument" in result.stderr


def test_valid_input_still_works(tmp_path):
    hlo_file = tmp_path / "negate.hlo"
    hlo_file.write_text(NEGATE)
    assert _run("xla-gpu-run", str(hlo_file)).returncode == 0
    with open(hlo_file, "rb") as f:
        result = _run("python -m xla_gpu.hlo.passes", "-", stdin=f)
    assert result.returncode == 0 and b"negate" in result.stdout
    with open(GELU_MLIR, "rb") as f:
        result = _run("xla-gpu-opt", "-", stdin=f)
    assert result.returncode == 0 and b"func.func" in result.stdout
    result = _run("xla-gpu-translate", str(GELU_MLIR), "--stop-after=xla-flatten-tensors")
    assert result.returncode == 0 and b"func.func" in result.stdout


# -- the Python entry points: every error an XlaGpuError -----------------------

@pytest.fixture(scope="module")
def kernel():
    return xla_gpu.compile(NEGATE, target="cpu")


@pytest.fixture(scope="module")
def program():
    return xla_gpu.compile(PROGRAM, target="cpu")


def test_unknown_keywords_are_argument_errors(kernel, program):
    x = np.ones(16, np.float32)
    with pytest.raises(xla_gpu.ArgumentError,
                       match="compile\\(\\) got an unexpected keyword argument 'tagret'"):
        xla_gpu.compile(NEGATE, tagret="cpu")
    for exe in (kernel, program):
        with pytest.raises(xla_gpu.ArgumentError,
                           match="run\\(\\) got an unexpected keyword argument 'strem'"):
            exe.run(x, strem=None)
    with pytest.raises(xla_gpu.ArgumentError, match="options of the cuda target"):
        kernel.run(x, device_outputs=True)
    np.testing.assert_array_equal(kernel.run(x, stream=None)[0], -x)


@pytest.mark.parametrize("options", [
    dict(memory_limit=-5), dict(memory_limit="1GB"), dict(memory_limit=1.5),
    dict(memory_limit=True), dict(target=5), dict(target=None), dict(target="gpu"),
    dict(fusion=5), dict(fusion=b"fusion"), dict(dump_regex="("), dict(dump_regex=None),
    dict(dump_dir=5), dict(cache="yes"), dict(command_buffers=None), dict(optimize="no"),
    dict(arch=90)], ids=repr)
def test_bad_compile_options_are_argument_errors(options):
    for text in (NEGATE, PROGRAM):
        with pytest.raises(xla_gpu.ArgumentError):
            xla_gpu.compile(text, **{"target": "cpu", **options})


def test_memory_limit_takes_numpy_integers():
    exe = xla_gpu.compile(PROGRAM, target="cpu", memory_limit=np.int64(1 << 20), cache=False)
    x = np.ones(16, np.float32)
    np.testing.assert_allclose(exe.run(x)[0], -np.exp(x), rtol=1e-6)


def test_a_lone_surrogate_is_a_parse_error_with_its_place():
    text = NEGATE.replace("ROOT y", "ROOT y\ud800")
    for parse in (lambda: hlo.parse_module(text),
                  lambda: xla_gpu.compile(text, target="cpu")):
        with pytest.raises(xla_gpu.HloParseError, match="<hlo>:4:9: lone surrogate U\\+D800"):
            parse()


def test_parse_file_refuses_what_is_not_a_small_utf8_file(tmp_path):
    latin1 = tmp_path / "latin1.hlo"
    latin1.write_bytes(NEGATE.encode().replace(b"ENTRY e", b"ENTRY \xe9"))
    with pytest.raises(xla_gpu.HloParseError) as info:
        hlo.parse_file(latin1)
    assert str(info.value).startswith(f"{latin1}:2:7: the input is not UTF-8 text: byte 0xe9 "
                                      "at byte offset 18")
    with pytest.raises(xla_gpu.HloParseError, match="latin1.hlo:2:7"):
        xla_gpu.compile(latin1, target="cpu")
    fifo = tmp_path / "fifo.hlo"
    os.mkfifo(fifo)
    for bad, message in [(None, "expected a file name"), (5, "expected a file name"),
                         (tmp_path, "is a directory"), (fifo, "a FIFO"),
                         ("/dev/zero", "a character device"),
                         (tmp_path / "missing.hlo", "No such file")]:
        with pytest.raises(xla_gpu.ArgumentError, match=message):
            hlo.parse_file(bad)
    with pytest.raises(xla_gpu.ArgumentError, match="a FIFO"):
        xla_gpu.compile(fifo, target="cpu")


def test_parse_file_and_compile_keep_to_the_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "negate.hlo"
    path.write_text(NEGATE)
    monkeypatch.setenv("XLA_GPU_MAX_INPUT_BYTES", "32")
    with pytest.raises(xla_gpu.ArgumentError, match="larger than the limit of 32 bytes"):
        hlo.parse_file(path)
    with pytest.raises(xla_gpu.ArgumentError, match="larger than the limit of 32 bytes"):
        xla_gpu.compile(str(path), target="cpu")
    monkeypatch.delenv("XLA_GPU_MAX_INPUT_BYTES")
    assert hlo.parse_file(path).entry.root.opcode == "negate"


def test_evaluate_argument_errors_are_argument_errors():
    module = hlo.parse_module(NEGATE)
    x = np.ones(16, np.float32)
    for args, message in [((), "takes 1 argument, got 0"), ((x, x), "got 2"),
                          ((np.ones(8, np.float32),), "expected shape"),
                          ((np.ones(16, np.int32),), "expected dtype"),
                          (([[1.0], [1.0, 2.0]],), "not an array")]:
        with pytest.raises(xla_gpu.ArgumentError, match=message):
            hlo.evaluate(module, *args)
    with pytest.raises(xla_gpu.ArgumentError, match="HloModule or HloComputation"):
        hlo.evaluate(NEGATE, x)
    with pytest.raises(xla_gpu.HloParseError):
        hlo.parse_module(NEGATE.encode())
