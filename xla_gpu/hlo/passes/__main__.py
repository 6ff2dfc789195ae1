"""`python -m xla_gpu.hlo.passes FILE [--dump-dir DIR] [--dump-regex RE]
[--verify] [--no-metadata]`: optimizes an HLO module (a file, or - for
stdin, read with xla_gpu's input bounds) and prints the result (XLA's
after_optimizations text). Exit status 2 with a one-line message on any
error, 130 on Ctrl-C."""

from __future__ import annotations

import argparse
import sys

from ..._cli import _check_regex, _error, _read_text, console
from ...errors import XlaGpuError
from ..parser import parse_module
from ..printer import module_to_text
from .optimize import optimize

PROG = "python -m xla_gpu.hlo.passes"


def _dump_graphs(before, after, dump_dir: str) -> None:
    """The modules before and after the pipeline as .dot and .html graphs
    beside the text dumps."""
    from ...analysis.emitter_kind import fusion_emitter
    from ..graph_html import write_graph_dumps
    write_graph_dumps(before, dump_dir, "before_optimizations", fusion_kind=fusion_emitter)
    write_graph_dumps(after, dump_dir, "after_optimizations", fusion_kind=fusion_emitter)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG,
                                     description="Run xla_gpu's HLO optimization pipeline.")
    parser.add_argument("file", help="HLO text file (as JAX prints it before optimizations), "
                                     "or - for stdin")
    parser.add_argument("--dump-dir", help="write before/after and per-pass dumps here "
                                           "(text, and the graphs as .dot and .html)")
    parser.add_argument("--dump-regex", default=".*", help="passes to dump (regex)")
    parser.add_argument("--verify", action="store_true", help="verify after every pass")
    parser.add_argument("--no-metadata", action="store_true", help="omit metadata={...}")
    args = parser.parse_args(argv)
    try:
        _check_regex("--dump-regex", args.dump_regex)
        text, source = _read_text(args.file, hlo_text=True)
        module = parse_module(text, source=source)
        result = optimize(module, args.dump_dir, args.dump_regex, args.verify)
        if args.dump_dir is not None:
            _dump_graphs(module, result, args.dump_dir)
    except XlaGpuError as e:
        _error(f"error: {e}")
        return 2
    except OSError as e:  # the dumps
        _error(f"error: cannot write the dumps: {e}")
        return 2
    sys.stdout.write(module_to_text(result, metadata=not args.no_metadata))
    return 0


if __name__ == "__main__":
    console(PROG, main)
