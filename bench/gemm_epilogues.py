"""cuBLASLt epilogues on the cpu target: one dense layer, relu(x @ w + b)
(or GELU), compiled as the cpu target does by default (gemm thunk, then a
compiled elementwise kernel) and with GemmRewriter's epilogue (the bias and
activation applied by numpy in the gemm thunk, in place on each BLAS
panel; what a `__cublas$lt$matmul` call in XLA's own dumps runs as), run
alternately on the same arguments; median wall
time of each, and the median process CPU time (all threads; steadier than
wall time on a loaded machine).

    python bench/gemm_epilogues.py [--m 512 --k 1024 --n 1024] [--repeat 30]
                                   [--activation relu|gelu] [--type f32|bf16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import xla_gpu
from xla_gpu import hlo
from xla_gpu.hlo.numerics import random_inputs
from xla_gpu.hlo.passes import optimize
from xla_gpu.program.prepare import HOST_GEMM_KERNEL_MAX_MACS
from xla_gpu.runtime.thunks import walk


def _text(m: int, k: int, n: int, t: str, act: str) -> str:
    body = ("  zero = {t}[] constant(0)\n  zz = {t}[{m},{n}] broadcast(zero), dimensions={{}}\n"
            "  ROOT r = {t}[{m},{n}] maximum(z, zz)\n") if act == "relu" else (
        "  p2 = {t}[{m},{n}] multiply(z, z)\n  p3 = {t}[{m},{n}] multiply(p2, z)\n"
        "  c2 = {t}[] constant(0.044715)\n  b2 = {t}[{m},{n}] broadcast(c2), dimensions={{}}\n"
        "  m1 = {t}[{m},{n}] multiply(p3, b2)\n  a1 = {t}[{m},{n}] add(z, m1)\n"
        "  c1 = {t}[] constant(0.797884583)\n  b1 = {t}[{m},{n}] broadcast(c1), dimensions={{}}\n"
        "  m2 = {t}[{m},{n}] multiply(a1, b1)\n  th = {t}[{m},{n}] tanh(m2)\n"
        "  one = {t}[] constant(1)\n  bo = {t}[{m},{n}] broadcast(one), dimensions={{}}\n"
        "  a2 = {t}[{m},{n}] add(th, bo)\n  h = {t}[] constant(0.5)\n"
        "  bh = {t}[{m},{n}] broadcast(h), dimensions={{}}\n"
        "  m3 = {t}[{m},{n}] multiply(a2, bh)\n  ROOT g = {t}[{m},{n}] multiply(z, m3)\n")
    return ("HloModule dense\nENTRY main {{\n  x = {t}[{m},{k}] parameter(0)\n"
            "  w = {t}[{k},{n}] parameter(1)\n  b = {t}[{n}] parameter(2)\n"
            "  d = {t}[{m},{n}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n"
            "  bb = {t}[{m},{n}] broadcast(b), dimensions={{1}}\n"
            "  z = {t}[{m},{n}] add(d, bb)\n" + body + "}}\n").format(m=m, k=k, n=n, t=t)


def _compile(text: str, epilogues: bool):
    """The cpu target's program as it compiles by default (no GemmRewriter:
    gemm thunk and an elementwise kernel), or from the module the pipeline
    makes with GemmRewriter on (its `__cublas$lt$matmul` calls run their
    epilogue in the gemm thunk)."""
    if epilogues:
        module = optimize(hlo.parse_module(text),
                          gemm_fusion_max_multiply_adds=HOST_GEMM_KERNEL_MAX_MACS,
                          gemm_epilogues=True)
        text = hlo.module_to_text(module)
    return xla_gpu.compile(text, target="cpu", cache=False)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--m", type=int, default=512)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--type", default="f32")
    p.add_argument("--activation", default="relu", choices=["relu", "gelu"])
    p.add_argument("--repeat", type=int, default=30)
    a = p.parse_args()
    text = _text(a.m, a.k, a.n, a.type, a.activation)
    args = random_inputs(hlo.parse_module(text).entry, 0)
    exes = {"unfused": _compile(text, False), "epilogue": _compile(text, True)}
    for name, exe in exes.items():
        kinds = [t.kind for t in walk(exe.thunks) if t.kind != "command_buffer"]
        print(f"{name:9s} thunks: {kinds}")
    results = {name: exe.run(*args)[0] for name, exe in exes.items()}
    diff = np.max(np.abs(np.asarray(results["unfused"], np.float64) -
                         np.asarray(results["epilogue"], np.float64)))
    print(f"largest difference between the two: {diff:.3g}")
    times: dict[str, list[float]] = {name: [] for name in exes}
    cpu: dict[str, list[float]] = {name: [] for name in exes}
    for exe in exes.values():   # warm-up
        exe.run(*args)
    for _ in range(a.repeat):   # alternating: both see the same machine load
        for name, exe in exes.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            exe.run(*args)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    base = statistics.median(times["unfused"])
    base_cpu = statistics.median(cpu["unfused"])
    for name, ts in times.items():
        med, med_cpu = statistics.median(ts), statistics.median(cpu[name])
        print(f"{name:9s} median {med * 1e3:8.2f} ms  (min {min(ts) * 1e3:.2f})  "
              f"x{base / med:.2f}   cpu {med_cpu * 1e3:8.2f} ms  x{base_cpu / med_cpu:.2f}")


if __name__ == "__main__":
    main()
