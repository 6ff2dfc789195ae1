"""GEMM fusion autotuning on the cpu target: every candidate's time and the
choice, for a few GEMM fusions, beside the program's run time with the
heuristic table (XLA_GPU_AUTOTUNE=0) and with the tuned configuration.

    python bench/autotune.py
    python bench/autotune.py --limit 4 --runs 50

Each case is jax-like HLO text of a dot with an epilogue (and a prologue
for the s8 case); the pass pipeline makes it a __triton_gemm fusion, the
autotuner (xla_gpu.program.autotune, no cache) times the candidates, and
both programs are then run side by side (median of `--runs` runs each,
alternating, after warm-up) on the same inputs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

from benchlib import median_seconds

CASES = {
    "f32 64x128x32 + tanh": ("f32[64,128]", "f32[128,32]", "f32[64,32]", "tanh", None),
    "f32 128x256x128 + tanh": ("f32[128,256]", "f32[256,128]", "f32[128,128]", "tanh", None),
    "s8 x s8 -> s32 64x256x64, * 2": ("s8[64,256]", "s8[256,64]", "s32[64,64]", None, "s32"),
}


def _text(lhs: str, rhs: str, out: str, unary: str | None, int_scale: str | None) -> str:
    etype = out.split("[")[0]
    tail = f"  ROOT r = {out} {unary}(d)" if unary else \
        f"  two = {etype}[] constant(2)\n  b2 = {out} broadcast(two), dimensions={{}}\n" \
        f"  ROOT r = {out} multiply(d, b2)"
    return f"""HloModule bench

ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  d = {out} dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
{tail}
}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    os.environ.setdefault("XLA_GPU_CACHE_DIR", tempfile.mkdtemp(prefix="xla_gpu_bench_"))
    import xla_gpu
    from xla_gpu import hlo
    from xla_gpu.hlo.numerics import random_inputs
    from xla_gpu.hlo.passes import optimize
    from xla_gpu.program import autotune

    print("| case | candidate | us |")
    print("|---|---|---|")
    summary = []
    for name, spec in CASES.items():
        text = _text(*spec)
        module = optimize(hlo.parse_module(text))
        (result,) = autotune.autotune_gemm_fusions(module, "cpu", enabled=True, cache=False,
                                                   limit=args.limit)
        for tiling, seconds in result.candidates:
            label = "library (BLAS + kernels)" if tiling is None else \
                f"{tiling.block_m}x{tiling.block_n}x{tiling.block_k} split_k {tiling.split_k}"
            mark = " (chosen)" if tiling == result.tiling else ""
            value = "rejected" if seconds is None else f"{seconds * 1e6:.1f}"
            print(f"| {name} | {label}{mark} | {value} |")
        inputs = random_inputs(hlo.parse_module(text).entry)
        os.environ["XLA_GPU_AUTOTUNE"] = "0"
        plain = xla_gpu.compile(text, target="cpu", cache=False)
        os.environ["XLA_GPU_AUTOTUNE"] = "1"
        tuned = xla_gpu.compile(text, target="cpu", cache=False)
        os.environ.pop("XLA_GPU_AUTOTUNE")
        a, b = [], []
        for _ in range(3):   # alternate: the host is shared
            a.append(1e3 * median_seconds(lambda: plain.run(*inputs), args.runs // 3 or 1,
                                          warmup=3))
            b.append(1e3 * median_seconds(lambda: tuned.run(*inputs), args.runs // 3 or 1,
                                          warmup=3))
        summary.append((name, statistics.median(a), statistics.median(b)))
    print()
    print("| case | heuristic table ms | autotuned ms |")
    print("|---|---|---|")
    for name, plain_ms, tuned_ms in summary:
        print(f"| {name} | {plain_ms:.3f} | {tuned_ms:.3f} |")


if __name__ == "__main__":
    main()
