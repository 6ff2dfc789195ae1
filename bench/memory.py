"""Temp memory of xla_gpu's buffer assignment next to XLA's, per stored
whole program (tests/python/programs/NAME/):

    python bench/memory.py                 # every program
    python bench/memory.py mlp_train_step  # some
    python bench/memory.py --no-share      # without elementwise reuse
    python bench/memory.py --json out.json

For each program, the module XLA:CPU optimized (after_optimizations_cpu.hlo)
is scheduled and assigned by xla_gpu.service, and its memory analysis is
printed beside jax's `compiled.memory_analysis()` of the same program
(xla_memory.json, written by the program generator): temp, arguments,
outputs, the ratio of temps (the goal: at most 1.25), and our scheduler's
simulated peak and the time taken.

XLA:CPU materializes tuples (loop state, multi-output results: 8 bytes per
element pointer), which count in its temp and output sizes; xla_gpu does
not, so ours can be lower. jax is not needed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "python" / "programs"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="programs (default: all)")
    parser.add_argument("--no-share", action="store_true",
                        help="assign without elementwise buffer reuse")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)

    from xla_gpu.hlo import parse_file
    from xla_gpu.service import assign_buffers, schedule_module

    names = args.names or sorted(p.name for p in PROGRAMS.iterdir()
                                 if (p / "after_optimizations_cpu.hlo").is_file())
    rows = []
    header = (f"{'program':22s} {'temp':>8s} {'xla temp':>9s} {'ratio':>6s} "
              f"{'args':>8s} {'xla args':>9s} {'outputs':>8s} {'xla out':>8s} "
              f"{'peak':>9s} {'ms':>6s}")
    print(header)
    print("-" * len(header))
    for name in names:
        folder = PROGRAMS / name
        xla = json.loads((folder / "xla_memory.json").read_text())
        module = parse_file(str(folder / "after_optimizations_cpu.hlo"))
        start = time.perf_counter()
        schedule = schedule_module(module)
        assignment = assign_buffers(module, schedule, share_elementwise=not args.no_share)
        ms = (time.perf_counter() - start) * 1e3
        ours = assignment.memory_analysis()
        xla_temp = xla["temp_size_in_bytes"]
        ratio = ours.temp_size_in_bytes / xla_temp if xla_temp else \
            (1.0 if ours.temp_size_in_bytes == 0 else float("inf"))
        row = dict(program=name, temp=ours.temp_size_in_bytes, xla_temp=xla_temp,
                   ratio=ratio, arguments=ours.argument_size_in_bytes,
                   xla_arguments=xla["argument_size_in_bytes"],
                   outputs=ours.output_size_in_bytes,
                   xla_outputs=xla["output_size_in_bytes"],
                   peak=schedule.peak_bytes, ms=ms)
        rows.append(row)
        flag = "  > 1.25" if ratio > 1.25 else ""
        print(f"{name:22s} {row['temp']:8d} {xla_temp:9d} {ratio:6.2f} "
              f"{row['arguments']:8d} {row['xla_arguments']:9d} {row['outputs']:8d} "
              f"{row['xla_outputs']:8d} {row['peak']:9d} {ms:6.1f}{flag}")
    over = [r["program"] for r in rows if r["ratio"] > 1.25]
    total_ours = sum(r["temp"] for r in rows)
    total_xla = sum(r["xla_temp"] for r in rows)
    print("-" * len(header))
    print(f"{len(rows)} programs; temp total {total_ours} bytes vs XLA's {total_xla}; "
          f"worst ratio {max((r['ratio'] for r in rows), default=0):.2f}; "
          f"above 1.25: {', '.join(over) if over else 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
