"""xla_gpu's HLO optimization pipeline next to XLA:CPU's fusion decisions,
per program of tests/python/programs: kernels launched (fusions and library
calls of the program computations, each loop body counted once), bytes the
kernels move and the time the GPU cost model gives them (H200 figures),
and how long `optimize` takes. With --run, both forms also run whole on the
cpu target through xla_gpu.compile and their run times are compared
(geomean of ours / XLA's).

    python bench/hlo_passes.py [--run] [--repeat 5] [--json out.json] [PROGRAM...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
try:
    import xla_gpu  # noqa: F401  (the installed package)
except ImportError:   # a bare source tree
    sys.path.insert(0, str(REPO))

from xla_gpu.hlo import parse_file  # noqa: E402
from xla_gpu.hlo.passes import PassContext, node_cost, optimize  # noqa: E402
from xla_gpu.hlo.passes.util import program_computations  # noqa: E402

_NO_KERNEL = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
              "while", "conditional", "call", "after-all", "opt-barrier",
              "optimization-barrier", "partition-id", "replica-id"}


def static_costs(module) -> dict:
    kernels, moved, seconds = 0, 0.0, 0.0
    cache: dict = {}
    for comp in program_computations(module):
        for inst in comp.instructions:
            if inst.opcode in _NO_KERNEL:
                continue
            cost = node_cost(inst, cache)
            kernels += 1
            moved += cost.bytes_read + cost.bytes_written
            seconds += cost.time
    return {"kernels": kernels, "bytes": moved, "model_us": seconds * 1e6}


def run_time(path: Path, args, repeat: int) -> float | None:
    import xla_gpu
    try:
        exe = xla_gpu.compile(str(path), target="cpu")
        exe.run(*args)
        best = math.inf
        for _ in range(repeat):
            t = time.perf_counter()
            exe.run(*args)
            best = min(best, time.perf_counter() - t)
        return best
    except Exception as e:  # report and go on with the other programs
        print(f"  {path.parent.name}/{path.name}: {type(e).__name__}: {str(e)[:160]}")
        return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("programs", nargs="*")
    parser.add_argument("--run", action="store_true", help="also run both forms on the cpu target")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    root = REPO / "tests" / "python" / "programs"
    dirs = [root / p for p in args.programs] if args.programs else \
        sorted(p.parent for p in root.glob("*/before_optimizations.hlo"))
    rows = []
    header = f"{'program':22} {'kernels':>11} {'MB moved':>17} {'model us':>15} {'optimize':>9}"
    if args.run:
        header += f" {'run ms ours/xla':>18} {'ratio':>6}"
    print(header)
    ratios = []
    if args.run:   # ffi_call's handler, as bench/programs.py registers it
        from programs import _register_python_handlers
        _register_python_handlers()
    for d in dirs:
        before = parse_file(d / "before_optimizations.hlo")
        xla = parse_file(d / "after_optimizations_cpu.hlo")
        context = PassContext()
        t = time.perf_counter()
        ours = optimize(before, context=context)
        optimize_s = time.perf_counter() - t
        a, b = static_costs(ours), static_costs(xla)
        row = {"program": d.name, "ours": a, "xla_cpu": b, "optimize_s": optimize_s,
               "pass_seconds": context.seconds}
        line = (f"{d.name:22} {a['kernels']:>5}/{b['kernels']:<5} "
                f"{a['bytes'] / 1e6:>8.3f}/{b['bytes'] / 1e6:<8.3f} "
                f"{a['model_us']:>7.1f}/{b['model_us']:<7.1f} {optimize_s:>8.2f}s")
        if args.run:
            stored = np.load(d / "inputs.npz")
            params = before.entry.parameters
            inputs = []
            for k, p in zip(stored.files, params):
                x = stored[k]
                if x.dtype != p.shape.dtype and x.dtype.itemsize == p.shape.dtype.itemsize:
                    x = x.view(p.shape.dtype)
                inputs.append(x)
            ours_t = run_time(d / "before_optimizations.hlo", inputs, args.repeat)
            xla_t = run_time(d / "after_optimizations_cpu.hlo", inputs, args.repeat)
            row.update(run_ours_s=ours_t, run_xla_s=xla_t)
            if ours_t and xla_t:
                ratios.append(ours_t / xla_t)
                line += f" {ours_t * 1e3:>8.2f}/{xla_t * 1e3:<8.2f} {ours_t / xla_t:>6.2f}"
        print(line)
        rows.append(row)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"run time ours/XLA:CPU fusion: geomean {geo:.2f}, worst {max(ratios):.2f} "
              f"({len(ratios)} programs)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
