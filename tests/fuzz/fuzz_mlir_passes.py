"""Fuzzing xla_gpu's dialect and passes in process (atheris / libFuzzer):
what `xla-gpu-opt` does with a file, through the same MLIR library.

    python tests/fuzz/fuzz_mlir_passes.py CORPUS_DIR [libFuzzer flags...]

Each input is parsed with the xla_gpu dialect, verified, and run through a
pipeline its first byte picks (targets.PIPELINES). A diagnostic is the
expected answer to bad input; an abort (assertion) or a signal kills the
process and libFuzzer keeps the input as `crash-*`. Python-side coverage
guides the search (the native code is not instrumented); mutations start
from the repository's .mlir tests.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
with atheris.instrument_imports():
    import xla_gpu.ir  # noqa: F401  (instrumented for coverage)
    import targets


if __name__ == "__main__":
    atheris.Setup(sys.argv, targets.run_passes)
    atheris.Fuzz()
