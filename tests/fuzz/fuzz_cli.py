"""Coverage-guided fuzzing of the command-line tools' input handling
(atheris / libFuzzer), in process:

    python tests/fuzz/fuzz_cli.py CORPUS_DIR [libFuzzer flags...]

Each input's first byte picks a tool and its flags (targets.CLI_TOOLS), the
rest is the file it reads. Any outcome but exit status 0, or 2 with one
line on stderr (no traceback, no internal error, no raw escape character),
raises: libFuzzer writes the input to `crash-*`. tests/python/api/test_fuzz.py
seeds it with small .hlo and .mlir files of the repository and bounds the
run.
"""

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy  # noqa: F401,E402  (not instrumented: only xla_gpu guides the search)
import mlir.ir  # noqa: F401,E402

with atheris.instrument_imports(include=["xla_gpu"]):
    import xla_gpu._cli  # noqa: F401
    import xla_gpu._input  # noqa: F401
    import xla_gpu.hlo.passes.__main__  # noqa: F401
    import targets


if __name__ == "__main__":
    atheris.Setup(sys.argv, targets.run_cli)
    atheris.Fuzz()
