"""Latency of the lowering pipeline on seed 000's GELU module, in process and
warm: parse, the pass pipeline (with a per-pass breakdown), PTX, cubin.

    python bench/pipeline_latency.py [--repeat 20] [--module examples/gelu.mlir]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from mlir import ir as mlir_ir

from xla_gpu import codegen, ir, pipeline

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--module", default=str(ROOT / "examples" / "gelu.mlir"))
    args = parser.parse_args()
    text = Path(args.module).read_text()
    ctx = ir.Context()

    stages: dict[str, list[float]] = {"parse": [], "pipeline": [], "ptx": [], "cubin": []}
    per_pass: dict[str, list[float]] = {}
    for i in range(args.repeat + 1):  # the first round warms up
        t0 = time.perf_counter()
        module = mlir_ir.Module.parse(text, ctx)
        t1 = time.perf_counter()
        pipeline.run(module)
        t2 = time.perf_counter()
        ptx = codegen.to_ptx(module)
        t3 = time.perf_counter()
        cubin = codegen.to_cubin(ptx)
        t4 = time.perf_counter()
        if i == 0:
            continue
        for name, value in zip(stages, [t1 - t0, t2 - t1, t3 - t2, t4 - t3]):
            stages[name].append(value)
        timings: dict[str, float] = {}
        pipeline.run(mlir_ir.Module.parse(text, ctx), timings=timings)
        for name, value in timings.items():
            per_pass.setdefault(name, []).append(value)

    ms = lambda xs: 1e3 * statistics.median(xs)  # noqa: E731
    print(f"module: {args.module}, median of {args.repeat} warm runs")
    print("| stage | ms |\n| --- | ---: |")
    for name, xs in stages.items():
        if name == "cubin" and cubin is None:
            print("| cubin | (no ptxas) |")
            continue
        print(f"| {name} | {ms(xs):.1f} |")
    print(f"| parse + pipeline + PTX | {ms([a + b + c for a, b, c in zip(stages['parse'], stages['pipeline'], stages['ptx'])]):.1f} |")
    print("\nper pass (run one by one, so each pays its own pass-manager setup):")
    print("| pass | ms |\n| --- | ---: |")
    for name, xs in sorted(per_pass.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"| {name} | {ms(xs):.2f} |")


if __name__ == "__main__":
    main()
