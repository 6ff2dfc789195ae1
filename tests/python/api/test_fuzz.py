"""Time-bounded coverage-guided fuzzing (atheris) of the HLO parser, of
the dialect and passes and of the command-line tools' input handling, plus
every crasher found so far kept as a regression input
(tests/fuzz/regressions/).

Each fuzz run is seeded (libFuzzer -seed) and bounded in time and runs;
a crash fails the test with the input that caused it (copy it into
tests/fuzz/regressions/ when fixing it)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FUZZ = ROOT / "tests" / "fuzz"
REGRESSIONS = FUZZ / "regressions"
SECONDS = int(os.environ.get("XLA_GPU_FUZZ_SECONDS", "25"))

needs_atheris = pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                                   reason="atheris is not installed")


def _seeds(tmp: Path, pattern: str, prefix: bytes = b"") -> Path:
    corpus = tmp / "corpus"
    corpus.mkdir()
    files = sorted(ROOT.glob(pattern))
    for i, path in enumerate(files):
        data = path.read_bytes()
        if len(data) <= 64 * 1024:
            (corpus / f"seed{i}").write_bytes(prefix + data)
    return corpus


def _fuzz(script: str, corpus: Path, tmp: Path, max_len: int,
          seconds: int = SECONDS) -> None:
    artifacts = tmp / "artifacts"
    artifacts.mkdir()
    result = subprocess.run(
        [sys.executable, str(FUZZ / script), str(corpus), "-seed=1",
         f"-max_total_time={seconds}", "-runs=200000", f"-max_len={max_len}",
         "-timeout=20", "-rss_limit_mb=4096", f"-artifact_prefix={artifacts}/"],
        capture_output=True, text=True, cwd=tmp, timeout=seconds * 4 + 120)
    crashes = sorted(artifacts.iterdir())
    detail = "\n".join(f"--- {c.name}:\n{c.read_bytes()[:2000]!r}" for c in crashes)
    assert result.returncode == 0 and not crashes, \
        f"fuzzer found a crash:\n{result.stderr[-4000:]}\n{detail}"
    assert "DONE" in result.stderr or "Done" in result.stderr, result.stderr[-2000:]


@needs_atheris
def test_fuzz_the_hlo_parser(tmp_path):
    corpus = _seeds(tmp_path, "**/*.hlo")
    _fuzz("fuzz_hlo_parser.py", corpus, tmp_path, max_len=16384)


@needs_atheris
def test_fuzz_the_dialect_and_passes(tmp_path):
    corpus = _seeds(tmp_path, "tests/lit/**/*.mlir", prefix=b"\x00")
    _fuzz("fuzz_mlir_passes.py", corpus, tmp_path, max_len=8192)


@needs_atheris
def test_fuzz_the_artifact_loader(tmp_path):
    sys.path.insert(0, str(FUZZ))
    try:
        import artifact_targets
    finally:
        sys.path.remove(str(FUZZ))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    artifact_targets.write_seeds(corpus)
    _fuzz("fuzz_artifact_loader.py", corpus, tmp_path, max_len=65536)


def _cli_seeds(tmp: Path, count: int = 6) -> Path:
    """A few small .hlo and .mlir files of the repository, each behind the
    bytes that pick the tools reading it (targets.CLI_TOOLS): every tool
    runs each seed once before the search starts, so the seeds stay few."""
    import random
    sys.path.insert(0, str(FUZZ))
    try:
        import targets
    finally:
        sys.path.remove(str(FUZZ))
    corpus = tmp / "corpus"
    corpus.mkdir()
    rng = random.Random(0)
    for suffix, reads_mlir in ((".hlo", False), (".mlir", True)):
        files = sorted(p for p in ROOT.glob(f"tests/**/*{suffix}")
                       if p.stat().st_size <= 2048 and "regressions" not in p.parts)
        picks = [k for k, (_, function, _) in enumerate(targets.CLI_TOOLS)
                 if (function == "translate") == reads_mlir]
        for i, path in enumerate(rng.sample(files, min(count, len(files)))):
            for k in picks:
                (corpus / f"{suffix[1:]}{i}_{k}").write_bytes(bytes([k]) + path.read_bytes())
    return corpus


@needs_atheris
def test_fuzz_the_command_line_tools(tmp_path):
    # Every tool in process on mutated files: exit status 0, or 2 with one
    # line, never an internal error. Shorter than the others (each input
    # runs a whole tool).
    _fuzz("fuzz_cli.py", _cli_seeds(tmp_path), tmp_path, max_len=4096,
          seconds=min(SECONDS, 20))


def _replay(function: str, path: Path, module: str = "targets") -> subprocess.CompletedProcess:
    # In a subprocess: a regression that crashes must fail, not kill pytest.
    code = (f"import sys; sys.path.insert(0, {str(FUZZ)!r}); import {module}; "
            f"{module}.{function}(open({str(path)!r}, 'rb').read())")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("hlo/*")), ids=lambda p: p.name)
def test_hlo_parser_regressions(path):
    result = _replay("parse_hlo", path)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("mlir/*")), ids=lambda p: p.name)
def test_dialect_and_pass_regressions(path):
    result = _replay("run_passes", path)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("artifact/*")), ids=lambda p: p.name)
def test_artifact_loader_regressions(path):
    result = _replay("load_artifact", path, module="artifact_targets")
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.parametrize("path", sorted(REGRESSIONS.glob("cli/*")), ids=lambda p: p.name)
def test_command_line_tool_regressions(path):
    result = _replay("run_cli", path)
    assert result.returncode == 0, result.stderr[-4000:]
