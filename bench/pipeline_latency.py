"""Compile latency, in process and warm:

1. the lowering pipeline on the GELU module (examples/gelu.mlir): parse, the pass
   pipeline (with a per-pass breakdown), PTX, cubin;
2. emission per kernel: fusion analysis + emitter (HLO -> xla_gpu MLIR) for
   one fusion of each emitter kind and row / multi-row / column reductions;
3. compile time against fusion size: `xla_gpu.compile(..., target="cpu",
   cache=False)` of an elementwise chain of N ops, a concatenate of N
   f32[64,32] parameters and a fusion of N outputs, with `exe.timings` per
   stage, next to XLA:CPU's jit compile of the same computation (through an
   interpreter that has jax: this one, or --xla-python).

    python bench/pipeline_latency.py [--repeat 20] [--module examples/gelu.mlir]
                                     [--only pipeline,emit,scaling]
                                     [--scaling-repeat 3] [--xla-python PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable

from mlir import ir as mlir_ir

from xla_gpu import ir, pipeline
from xla_gpu.backends.cuda import codegen

ROOT = Path(__file__).resolve().parents[1]

_ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def concatenate_hlo(operands: int, dims=(64, 32)) -> str:
    """A fusion concatenating `operands` f32[dims] parameters along dim 0."""
    shape = ",".join(map(str, dims))
    params = "\n".join(f"  p{i} = f32[{shape}] parameter({i})" for i in range(operands))
    out = ",".join(map(str, (dims[0] * operands, *dims[1:])))
    names = ", ".join(f"p{i}" for i in range(operands))
    return (f"HloModule concat_{operands}\nfused {{\n{params}\n"
            f"  ROOT c = f32[{out}] concatenate({names}), dimensions={{0}}\n}}\n")


def elementwise_chain_hlo(ops: int, dims=(1024,)) -> str:
    """A fusion of `ops` elementwise ops in one chain, over two parameters."""
    shape = f"f32[{','.join(map(str, dims))}]"
    lines = [f"  x0 = {shape} parameter(0)", f"  y = {shape} parameter(1)"]
    kinds = ["add(x{i}, y)", "multiply(x{i}, y)", "tanh(x{i})", "subtract(x{i}, y)",
             "exponential(x{i})", "maximum(x{i}, y)"]
    for i in range(ops):
        op = kinds[i % len(kinds)].format(i=i)
        root = "ROOT " if i == ops - 1 else ""
        lines.append(f"  {root}x{i + 1} = {shape} {op}")
    return f"HloModule chain_{ops}\nfused {{\n" + "\n".join(lines) + "\n}\n"


def reduction_hlo(dims, reduced, name="r") -> str:
    shape = ",".join(map(str, dims))
    out = ",".join(str(d) for i, d in enumerate(dims) if i not in reduced)
    red = ",".join(map(str, reduced))
    return (f"HloModule {name}\n{_ADD}fused {{\n  p = f32[{shape}] parameter(0)\n"
            f"  z = f32[] constant(0)\n  e = f32[{shape}] exponential(p)\n"
            f"  ROOT r = f32[{out}] reduce(e, z), dimensions={{{red}}}, to_apply=add\n}}\n")


def transpose_hlo(dims, perm, element="f32") -> str:
    shape = ",".join(map(str, dims))
    out = ",".join(str(dims[p]) for p in perm)
    return (f"HloModule t\nfused {{\n  p = {element}[{shape}] parameter(0)\n"
            f"  e = {element}[{shape}] negate(p)\n"
            f"  ROOT t = {element}[{out}] transpose(e), dimensions={{{','.join(map(str, perm))}}}\n}}\n")


EMIT_CASES: dict[str, str] = {
    "loop (gelu)": (ROOT / "examples" / "gelu.hlo").read_text(),
    "loop (chain of 100)": elementwise_chain_hlo(100),
    "transpose 021": transpose_hlo((4, 64, 96), (0, 2, 1)),
    "transpose 102 (bf16)": transpose_hlo((64, 48, 4), (1, 0, 2), "bf16"),
    "reduction row": reduction_hlo((1024, 512), [1]),
    "reduction multi-row": reduction_hlo((1024, 8), [1]),
    "reduction column": reduction_hlo((512, 1024), [0]),
    "concatenate (32 operands)": concatenate_hlo(32),
    "scatter": f"""HloModule s
{_ADD}fused {{
  x = f32[10,4] parameter(0)
  i = s32[6,1] parameter(1)
  u = f32[6,4] parameter(2)
  e = f32[6,4] exponential(u)
  ROOT s = f32[10,4] scatter(x, i, e), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
}}
""",
    "in-place dynamic-update-slice": """HloModule d
fused {
  p = f32[64,64] parameter(0)
  u = f32[4,8] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  e = f32[4,8] exponential(u)
  ROOT d = f32[64,64] dynamic-update-slice(p, e, i, j)
}
""",
    "input slices": """HloModule s
fused {
  p = f32[16,8] parameter(0)
  e = f32[16,8] exponential(p)
  a = f32[4,8] slice(e), slice={[0:4], [0:8]}
  b = f32[10,8] slice(e), slice={[6:16], [0:8]}
  ROOT t = (f32[4,8], f32[10,8]) tuple(a, b)
}
""",
}

def outputs_hlo(outputs: int, dims=(64,)) -> str:
    """A fusion of `outputs` outputs, each the negation of its own parameter."""
    shape = f"f32[{','.join(map(str, dims))}]"
    body = "\n".join(f"  p{i} = {shape} parameter({i})\n  n{i} = {shape} negate(p{i})"
                     for i in range(outputs))
    types = ", ".join([shape] * outputs)
    names = ", ".join(f"n{i}" for i in range(outputs))
    return f"HloModule outputs_{outputs}\nfused {{\n{body}\n  ROOT t = ({types}) tuple({names})\n}}\n"


# The same computations for XLA:CPU, as Python source that defines `fn` and
# `specs` for `jax.jit(fn).lower(*specs).compile()`.
_JAX_CHAIN = """
import jax, jax.numpy as jnp
ops = [jnp.add, jnp.multiply, lambda x, y: jnp.tanh(x), jnp.subtract,
       lambda x, y: jnp.exp(x), jnp.maximum]
def fn(x, y):
    for i in range({n}):
        x = ops[i % len(ops)](x, y)
    return x
specs = [jax.ShapeDtypeStruct((1024,), jnp.float32)] * 2
"""
_JAX_CONCAT = """
import jax, jax.numpy as jnp
def fn(*ps):
    return jnp.concatenate(ps, axis=0)
specs = [jax.ShapeDtypeStruct((64, 32), jnp.float32)] * {n}
"""
_JAX_OUTPUTS = """
import jax, jax.numpy as jnp
def fn(*ps):
    return tuple(-p for p in ps)
specs = [jax.ShapeDtypeStruct((64,), jnp.float32)] * {n}
"""

# (what grows, fusion, HLO text, the same for XLA:CPU)
SCALING_CASES: list[tuple[str, str, Callable[[], str], str]] = [
    ("ops", "elementwise chain of 100", lambda: elementwise_chain_hlo(100),
     _JAX_CHAIN.format(n=100)),
    ("ops", "elementwise chain of 400", lambda: elementwise_chain_hlo(400),
     _JAX_CHAIN.format(n=400)),
    ("ops", "elementwise chain of 1600", lambda: elementwise_chain_hlo(1600),
     _JAX_CHAIN.format(n=1600)),
    ("operands", "concatenate of 32 f32[64,32]", lambda: concatenate_hlo(32),
     _JAX_CONCAT.format(n=32)),
    ("operands", "concatenate of 300 f32[64,32]", lambda: concatenate_hlo(300),
     _JAX_CONCAT.format(n=300)),
    ("outputs", "100 outputs", lambda: outputs_hlo(100), _JAX_OUTPUTS.format(n=100)),
    ("outputs", "400 outputs", lambda: outputs_hlo(400), _JAX_OUTPUTS.format(n=400)),
]

# Runs in the interpreter given by --xla-python (one with jax): the median
# seconds of lower + compile of a fresh function after jax.clear_caches(),
# after one warm-up, as bench/run_cpu.py measures XLA:CPU.
_JAX_TIMER = """
import json, statistics, sys, time
source, repeat = sys.argv[1], int(sys.argv[2])
scope = {}
exec(source, scope)
import jax
jax.config.update("jax_platforms", "cpu")
times = []
for i in range(repeat + 1):
    jax.clear_caches()
    def fresh(*a, _fn=scope["fn"]):
        return _fn(*a)
    t0 = time.perf_counter()
    jax.jit(fresh).lower(*scope["specs"]).compile()
    if i:
        times.append(time.perf_counter() - t0)
print(json.dumps({"compile": statistics.median(times)}))
"""


def _xla_cpu_compile_seconds(python: str | None, source: str, repeat: int) -> float | None:
    """XLA:CPU's jit compile time of `source`'s function (None without jax)."""
    if not python:
        return None
    import json
    import subprocess
    done = subprocess.run([python, "-c", _JAX_TIMER, source, str(repeat)],
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        print(f"(XLA:CPU failed: {done.stderr.strip().splitlines()[-1:]})")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["compile"]


def _default_xla_python() -> str | None:
    """This interpreter when it has jax."""
    import importlib.util
    import sys
    return sys.executable if importlib.util.find_spec("jax") else None


def ms(xs) -> float:
    return 1e3 * statistics.median(xs)


def bench_pipeline(module_path: str, repeat: int) -> None:
    text = Path(module_path).read_text()
    ctx = ir.Context()
    stages: dict[str, list[float]] = {"parse": [], "pipeline": [], "ptx": [], "cubin": []}
    per_pass: dict[str, list[float]] = {}
    cubin = None
    for i in range(repeat + 1):  # the first round warms up
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

    print(f"## Lowering pipeline\n\nmodule: {module_path}, median of {repeat} warm runs\n")
    print("| stage | ms |\n| --- | ---: |")
    for name, xs in stages.items():
        if name == "cubin" and cubin is None:
            print("| cubin | (no ptxas) |")
            continue
        print(f"| {name} | {ms(xs):.1f} |")
    total = [a + b + c for a, b, c in zip(stages["parse"], stages["pipeline"], stages["ptx"])]
    print(f"| parse + pipeline + PTX | {ms(total):.1f} |")
    print("\nper pass (run one by one, so each pays its own pass-manager setup):\n")
    print("| pass | ms |\n| --- | ---: |")
    for name, xs in sorted(per_pass.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"| {name} | {ms(xs):.2f} |")


def _emit_once(module) -> tuple[float, float, str]:
    """(analysis seconds, emission seconds, emitter class) of the only
    fusion."""
    from xla_gpu.analysis.fusion import select_fusion
    from xla_gpu.emitters import emitter_for
    context = ir.Context()
    t0 = time.thread_time()
    fusion = select_fusion(module)
    t1 = time.thread_time()
    emitter = emitter_for(fusion)
    emitter.emit(context)
    t2 = time.thread_time()
    return t1 - t0, t2 - t1, type(emitter).__name__


def bench_emit(repeat: int) -> None:
    from xla_gpu import hlo
    print(f"\n## Emission per kernel\n\nfusion analysis and emitter (HLO graph -> "
          f"xla_gpu MLIR, no parsing, a fresh context each time), CPU time of the "
          f"thread (robust to a loaded machine), median of {repeat} warm runs\n")
    print("| fusion | emitter | analysis ms | emit ms |\n| --- | --- | ---: | ---: |")
    for name, text in EMIT_CASES.items():
        analysis, emission, emitter = [], [], ""
        for i in range(repeat + 1):
            module = hlo.parse_module(text)
            a, e, emitter = _emit_once(module)
            if i:
                analysis.append(a)
                emission.append(e)
        print(f"| {name} | {emitter} | {ms(analysis):.2f} | {ms(emission):.2f} |")


def bench_scaling(repeat: int, xla_python: str | None) -> None:
    import xla_gpu
    print(f"\n## Compile time against fusion size\n\n`xla_gpu.compile(text, "
          f"target=\"cpu\", cache=False)`, median of {repeat} runs after one warm-up, "
          "seconds per stage from `exe.timings` (emit: fusion analysis, emitter and "
          "verification; pipeline: the cpu pass pipeline; llvm: host code generation "
          "and the shared object); "
          "XLA:CPU: `jax.jit(fn).lower(*specs).compile()` of the same computation "
          f"({'with ' + xla_python if xla_python else 'no jax: --xla-python PATH'})\n")
    stages = ["emit", "pipeline", "llvm", "total"]
    print("| grows | fusion | emitter | " + " | ".join(f"{h} s" for h in stages) +
          " | XLA:CPU s | ours / XLA:CPU |")
    print("| --- | --- | --- |" + " ---: |" * (len(stages) + 2))
    for grows, name, make, jax_source in SCALING_CASES:
        text = make()
        rows: dict[str, list[float]] = {}
        emitter = ""
        for i in range(repeat + 1):
            exe = xla_gpu.compile(text, target="cpu", cache=False)
            emitter = exe.spec.emitter
            if i == 0:
                continue
            for stage, value in exe.timings.items():
                rows.setdefault(stage, []).append(value)
        cells = [statistics.median(rows[h]) if h in rows else None for h in stages]
        xla = _xla_cpu_compile_seconds(xla_python, jax_source, repeat)
        total = cells[-1]
        ratio = f"{total / xla:.1f}" if xla and total else "-"
        print(f"| {grows} | {name} | {emitter} | " +
              " | ".join("-" if c is None else f"{c:.3f}" for c in cells) +
              f" | {'-' if xla is None else f'{xla:.3f}'} | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--scaling-repeat", type=int, default=3)
    parser.add_argument("--module", default=str(ROOT / "examples" / "gelu.mlir"))
    parser.add_argument("--only", default="pipeline,emit,scaling",
                        help="comma-separated sections: pipeline, emit, scaling")
    parser.add_argument("--xla-python", default=_default_xla_python(),
                        help="a Python interpreter with jax, for XLA:CPU's compile time "
                             "(default: this one when it has jax)")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    if "pipeline" in sections:
        bench_pipeline(args.module, args.repeat)
    if "emit" in sections:
        bench_emit(args.repeat)
    if "scaling" in sections:
        bench_scaling(args.scaling_repeat, args.xla_python)


if __name__ == "__main__":
    main()
