"""`python -m xla_gpu.hlo.passes FILE [--dump-dir DIR] [--dump-regex RE]
[--verify] [--no-metadata]`: optimizes an HLO module and prints the result
(XLA's after_optimizations text). Exit status 2 with a one-line message on
bad input."""

from __future__ import annotations

import argparse
import sys

from ...errors import XlaGpuError
from ..parser import parse_file
from ..printer import module_to_text
from .optimize import optimize


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xla_gpu.hlo.passes",
                                     description="Run xla_gpu's HLO optimization pipeline.")
    parser.add_argument("file", help="HLO text file (as JAX prints it before optimizations)")
    parser.add_argument("--dump-dir", help="write before/after and per-pass dumps here")
    parser.add_argument("--dump-regex", default=".*", help="passes to dump (regex)")
    parser.add_argument("--verify", action="store_true", help="verify after every pass")
    parser.add_argument("--no-metadata", action="store_true", help="omit metadata={...}")
    args = parser.parse_args(argv)
    try:
        module = parse_file(args.file)
        result = optimize(module, args.dump_dir, args.dump_regex, args.verify)
    except (XlaGpuError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(module_to_text(result, metadata=not args.no_metadata))
    return 0


if __name__ == "__main__":
    sys.exit(main())
