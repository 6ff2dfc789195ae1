"""Coverage-guided fuzzing of the saved-artifact loader (atheris / libFuzzer).

    python tests/fuzz/fuzz_artifact_loader.py CORPUS_DIR [libFuzzer flags...]

See artifact_targets.py for what an input is and what counts as a crash.
tests/python/api/test_fuzz.py seeds it and bounds the run.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
with atheris.instrument_imports():
    import xla_gpu.runtime.artifact  # noqa: F401  (instrumented for coverage)
    import xla_gpu.runtime.program  # noqa: F401
    import xla_gpu.runtime.thunks  # noqa: F401
    import artifact_targets


if __name__ == "__main__":
    atheris.Setup(sys.argv, artifact_targets.load_artifact)
    atheris.Fuzz()
