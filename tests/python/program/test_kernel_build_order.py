"""The order a program's kernels are built in: on several compile threads,
the slowest builds (GEMM fusions, then reductions and transposes) start
first, so that none starts last and runs alone while the other threads
idle."""

from __future__ import annotations

import json
import os

import pytest

import xla_gpu
from xla_gpu.program import kernels

PROGRAM = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
scale {
  x = f32[64,48] parameter(0)
  c = f32[] constant(3)
  b = f32[64,48] broadcast(c), dimensions={}
  ROOT m = f32[64,48] multiply(x, b)
}
rows {
  x = f32[64,48] parameter(0)
  e = f32[64,48] exponential(x)
  z = f32[] constant(0)
  ROOT r = f32[64] reduce(e, z), dimensions={1}, to_apply=add
}
gemm {
  a = f32[64,48] parameter(0)
  b = f32[48,32] parameter(1)
  ROOT d = f32[64,32] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY e {
  x = f32[64,48] parameter(0)
  w = f32[48,32] parameter(1)
  s = f32[64,48] fusion(x), kind=kLoop, calls=scale
  r = f32[64] fusion(s), kind=kInput, calls=rows
  d = f32[64,32] fusion(s, w), kind=kCustom, calls=gemm, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"16","block_n":"16","block_k":"16","split_k":"1","num_stages":"1","num_warps":"4"}}}
  ROOT t = (f32[64], f32[64,32]) tuple(r, d)
}
"""


def test_the_slowest_kernels_are_built_first(tmp_path):
    workers = min(os.cpu_count() or 1, kernels.PREFETCH_THREADS)
    if workers < 2:
        pytest.skip("one compile thread: kernels are built in program order")
    trace = tmp_path / "trace.json"
    exe = xla_gpu.compile(PROGRAM, target="cpu", cache=False, profile=str(trace))
    builds = {e["name"].removeprefix("kernel "): e
              for e in json.loads(trace.read_text())["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") == "kernel"}
    emitters = {image.spec.fusion: image.spec.emitter for image in exe.kernels.values()}
    by_emitter = {emitters[name]: event for name, event in builds.items()}
    assert set(by_emitter) == {"gemm", "reduction", "loop"}
    gemm, reduction, loop = by_emitter["gemm"], by_emitter["reduction"], by_emitter["loop"]
    # The loop kernel comes first in the program but is submitted last: it
    # waits for a thread that the GEMM or the reduction kernel frees.
    assert loop["ts"] >= min(gemm["ts"] + gemm["dur"], reduction["ts"] + reduction["dur"])
    if workers == 2:
        assert max(gemm["ts"], reduction["ts"]) < loop["ts"]


def test_the_collector_is_paused_while_kernels_are_emitted(monkeypatch):
    # Emitting kernels allocates as much as the HLO passes: the cyclic
    # collector stays off for the whole compile (on the pool's threads
    # too), and is back on after it.
    import gc
    states = []
    build = kernels.ProgramKernels._build

    def spy(self, *args):
        states.append(gc.isenabled())
        return build(self, *args)

    monkeypatch.setattr(kernels.ProgramKernels, "_build", spy)
    assert gc.isenabled()
    exe = xla_gpu.compile("""HloModule m
ENTRY e {
  p = f32[64] parameter(0)
  e = f32[64] exponential(p)
  ROOT n = f32[64] negate(e)
}""", target="cpu", cache=False)
    assert states and not any(states)
    assert gc.isenabled()
    assert exe is not None
