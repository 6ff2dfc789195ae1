"""Random programs of dots, reductions, data movement and sharding
constraints under random shardings (1-D and 2-D tilings, partial
replication, permuted device orders), partitioned for 8 devices and run in
the reference interpreter, against the same program on one device."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from xla_gpu.hlo import evaluate, parse_module
from xla_gpu.hlo.passes.sharding_annotations import ShardingAnnotationRemover
from xla_gpu.hlo.passes.spmd import SpmdFallbackWarning
from spmd_cases import run_partitioned

SHARDINGS = [
    "{replicated}", "{devices=[8,1]<=[8]}", "{devices=[1,8]<=[8]}", "{devices=[2,4]<=[8]}",
    "{devices=[4,2]<=[2,4]T(1,0)}", "{devices=[2,1,4]<=[8] last_tile_dim_replicate}",
    "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}",
    "{devices=[8,1]7,6,5,4,3,2,1,0}",
    "{devices=[4,1,2]0,2,4,6,1,3,5,7 last_tile_dim_replicate}",
]


def _program(seed: int) -> str:
    r = random.Random(seed)
    lines = ["HloModule random", "add {", "  a = f32[] parameter(0)",
             "  b = f32[] parameter(1)", "  ROOT s = f32[] add(a, b)", "}", "ENTRY e {"]
    values = []
    for i in range(2):
        lines.append(f"  p{i} = f32[16,16] parameter({i}), sharding={r.choice(SHARDINGS)}")
        values.append(f"p{i}")
    for k in range(r.randint(3, 8)):
        op = r.choice(["add", "dot", "dot_t", "transpose", "reduce", "constraint", "negate",
                       "rows", "columns", "loop"])
        a, b, v = r.choice(values), r.choice(values), f"v{k}"
        if op == "add":
            lines.append(f"  {v} = f32[16,16] add({a}, {b})")
        elif op == "negate":
            lines.append(f"  {v} = f32[16,16] negate({a})")
        elif op in ("dot", "dot_t"):
            lc, rc = (1, 0) if op == "dot" else (0, 1)
            lines.append(f"  {v} = f32[16,16] dot({a}, {b}), lhs_contracting_dims={{{lc}}}, "
                         f"rhs_contracting_dims={{{rc}}}")
        elif op == "transpose":
            lines.append(f"  {v} = f32[16,16] transpose({a}), dimensions={{1,0}}")
        elif op == "constraint":
            lines.append(f"  {v} = f32[16,16] custom-call({a}), custom_call_target=\"Sharding\", "
                         f"sharding={r.choice(SHARDINGS)}")
        elif op == "rows":
            lines.append(f"  {v}s = f32[8,16] slice({a}), slice={{[4:12], [0:16]}}")
            lines.append(f"  {v} = f32[16,16] concatenate({v}s, {v}s), dimensions={{0}}")
        elif op == "columns":
            lines.append(f"  {v}s = f32[16,8] slice({a}), slice={{[0:16], [0:8]}}")
            lines.append(f"  {v} = f32[16,16] concatenate({v}s, {v}s), dimensions={{1}}")
        elif op == "reduce":
            lines.append(f"  z{k} = f32[] constant(0)")
            lines.append(f"  {v}r = f32[16] reduce({a}, z{k}), dimensions={{{r.randint(0, 1)}}}, "
                         "to_apply=add")
            lines.append(f"  {v} = f32[16,16] broadcast({v}r), dimensions={{{r.randint(0, 1)}}}")
        else:   # a loop that doubles its state twice
            lines[1:1] = [f"cond{k} {{", f"  p = (s32[], f32[16,16]) parameter(0)",
                          "  i = s32[] get-tuple-element(p), index=0",
                          "  n = s32[] constant(2)",
                          "  ROOT lt = pred[] compare(i, n), direction=LT", "}",
                          f"body{k} {{", "  p = (s32[], f32[16,16]) parameter(0)",
                          "  i = s32[] get-tuple-element(p), index=0",
                          "  one = s32[] constant(1)", "  j = s32[] add(i, one)",
                          "  c = f32[16,16] get-tuple-element(p), index=1",
                          "  d = f32[16,16] add(c, c)",
                          "  ROOT t = (s32[], f32[16,16]) tuple(j, d)", "}"]
            lines.append(f"  zero{k} = s32[] constant(0)")
            lines.append(f"  {v}i = (s32[], f32[16,16]) tuple(zero{k}, {a})")
            lines.append(f"  {v}w = (s32[], f32[16,16]) while({v}i), condition=cond{k}, "
                         f"body=body{k}")
            lines.append(f"  {v} = f32[16,16] get-tuple-element({v}w), index=1")
        values.append(v)
    lines.append(f"  ROOT out = (f32[16,16], f32[16,16]) tuple({values[-1]}, "
                 f"{r.choice(values)}), sharding={{{r.choice(SHARDINGS)}, "
                 f"{r.choice(SHARDINGS)}}}")
    lines.append("}")
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(100))
def test_random_program_matches_one_device(seed):
    text = _program(seed)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2)]
    single = parse_module(text)
    ShardingAnnotationRemover().run(single)
    want = evaluate(single, *args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpmdFallbackWarning)
        got, _ = run_partitioned(text, 8, args)
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, want[i], rtol=1e-3, atol=1e-3,
                                   err_msg=f"output {i} of\n{text}")
