"""`python -m xla_gpu.hlo.passes FILE [--dump-dir DIR] [--dump-regex RE]
[--verify] [--no-metadata] [--quiet] [--num-partitions N]`: optimizes an HLO module (a file, or
- for stdin, read with xla_gpu's input bounds) and prints the result (XLA's
after_optimizations text), with a summary line on stderr (pass runs, the
slowest passes, instructions before and after). Exit status 2 with a
one-line message on any error, 130 on Ctrl-C. With --num-partitions N it
instead partitions an annotated module (jax's text with shardings) for N
devices with xla_gpu's SPMD partitioner and prints the per-device module."""

from __future__ import annotations

import argparse
import sys
import time

from ..._cli import _check_regex, _error, _read_text, console
from ...errors import XlaGpuError
from ..parser import parse_module
from ..printer import module_to_text
from .optimize import optimize
from .pipeline import PassContext

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
    parser.add_argument("--quiet", action="store_true", help="no summary line on stderr")
    parser.add_argument("--num-partitions", type=int, default=None, metavar="N",
                        help="instead: partition the annotated module for N devices "
                             "(xla_gpu's SPMD partitioner) and print the per-device module")
    args = parser.parse_args(argv)
    try:
        _check_regex("--dump-regex", args.dump_regex)
        text, source = _read_text(args.file, hlo_text=True)
        module = parse_module(text, source=source)
        if args.num_partitions is not None:
            return _partition(module, args.num_partitions, not args.no_metadata, args.quiet)
        context, start = PassContext(), time.perf_counter()
        result = optimize(module, args.dump_dir, args.dump_regex, args.verify, context)
        seconds = time.perf_counter() - start
        if args.dump_dir is not None:
            _dump_graphs(module, result, args.dump_dir)
    except XlaGpuError as e:
        _error(f"error: {e}")
        return 2
    except OSError as e:  # the dumps
        _error(f"error: cannot write the dumps: {e}")
        return 2
    sys.stdout.write(module_to_text(result, metadata=not args.no_metadata))
    if not args.quiet:
        _error(f"{PROG}: {pass_summary(context, seconds, module, result)}")
    return 0


def _partition(module, num_partitions: int, metadata: bool, quiet: bool) -> int:
    """--num-partitions: the per-device module and its notes (what was
    computed whole on every device)."""
    from .spmd import partition_module
    if num_partitions < 1:
        _error(f"error: --num-partitions must be positive, got {num_partitions}")
        return 2
    result = partition_module(module, num_partitions)
    sys.stdout.write(module_to_text(result.module, metadata=metadata))
    if not quiet:
        for note in result.notes:
            _error(f"{PROG}: note: {note}")
    return 0


def _instructions(module) -> int:
    return sum(len(comp.instructions) for comp in module.computations)


def pass_summary(context: PassContext, seconds: float, before, after) -> str:
    """One line: the passes that changed the module, the slowest ones, and
    the module's size before and after."""
    slowest = sorted(context.seconds.items(), key=lambda item: -item[1])[:3]
    changed = sum(context.changes.values())
    return (f"optimized in {seconds:.2f} s: {len(context.seconds)} passes, "
            f"{changed} runs changed the module; slowest: " +
            ", ".join(f"{name} {s * 1e3:.0f} ms" for name, s in slowest) +
            f"; {_instructions(before)} -> {_instructions(after)} instructions")


if __name__ == "__main__":
    console(PROG, main)
