"""Coverage-guided fuzzing of the HLO parser (atheris / libFuzzer).

    python tests/fuzz/fuzz_hlo_parser.py CORPUS_DIR [libFuzzer flags...]

Any exception other than xla_gpu's HloError (HloParseError for malformed
text) is a crash: libFuzzer writes the input to `crash-*` and exits
non-zero. tests/python/api/test_fuzz.py seeds it with every .hlo file of the
repository and bounds the run.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
with atheris.instrument_imports():
    import xla_gpu.hlo.parser  # noqa: F401  (instrumented for coverage)
    import targets


if __name__ == "__main__":
    atheris.Setup(sys.argv, targets.parse_hlo)
    atheris.Fuzz()
