"""Time-bounded coverage-guided fuzzing (atheris) of the HLO parser and of
the dialect and passes, plus every crasher found so far kept as a
regression input (tests/fuzz/regressions/).

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

ROOT = Path(__file__).resolve().parents[2]
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


def _fuzz(script: str, corpus: Path, tmp: Path, max_len: int) -> None:
    artifacts = tmp / "artifacts"
    artifacts.mkdir()
    result = subprocess.run(
        [sys.executable, str(FUZZ / script), str(corpus), "-seed=1",
         f"-max_total_time={SECONDS}", "-runs=200000", f"-max_len={max_len}",
         "-timeout=20", "-rss_limit_mb=4096", f"-artifact_prefix={artifacts}/"],
        capture_output=True, text=True, cwd=tmp, timeout=SECONDS * 4 + 120)
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


def _replay(function: str, path: Path) -> subprocess.CompletedProcess:
    # In a subprocess: a regression that crashes must fail, not kill pytest.
    code = (f"import sys; sys.path.insert(0, {str(FUZZ)!r}); import targets; "
            f"targets.{function}(open({str(path)!r}, 'rb').read())")
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
