"""Bad input never crashes the process: mutated xla_gpu IR (seed listings,
dialect tests) run through xla-gpu-opt, which must end every chunk with IR or a
diagnostic, never a signal or an assertion. Deterministic (seeded)."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

import xla_gpu

LIT = Path(__file__).resolve().parents[2] / "lit"
OPT = xla_gpu.native_dir() / "bin" / "xla-gpu-opt"
TOKENS = ["(", ")", "[", "]", ",", "->", "in", "domain:", "%", "#map", "0", "-1",
          "9223372036854775807", "floordiv", "mod", "*", "+", "-", '"', "<", ">",
          "{", "}", ":", "index", "tensor<4xf32>", "xla_gpu.yield", "iter_args",
          "xla_gpu.loop", "xla_gpu.apply_indexing", "@gelu", "s0", "d0", "th_x"]


def _sources() -> list[str]:
    files = sorted((LIT / "walkthrough").glob("*.mlir")) + [LIT / "dialect" / "ops.mlir",
                                                     LIT / "dialect" / "canonicalize.mlir"]
    out = []
    for f in files:
        text = "\n".join(l for l in f.read_text().splitlines()
                         if not l.lstrip().startswith("//"))
        out.extend(chunk for chunk in text.split("\n\n\n") if "xla_gpu" in chunk)
    return out


def _mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 3)):
        pos = rng.randrange(len(text))
        kind = rng.randrange(4)
        if kind == 0:  # delete a span
            text = text[:pos] + text[pos + rng.randint(1, 8):]
        elif kind == 1:  # insert a token
            text = text[:pos] + rng.choice(TOKENS) + text[pos:]
        elif kind == 2:  # duplicate a span
            text = text[:pos] + text[pos:pos + rng.randint(1, 30)] + text[pos:]
        else:  # change a digit
            digits = [i for i, c in enumerate(text) if c.isdigit()]
            if digits:
                i = rng.choice(digits)
                text = text[:i] + rng.choice("0123456789") + text[i + 1:]
    return text


def run_mutations(count: int, seed: int, passes: list[str]) -> subprocess.CompletedProcess:
    rng = random.Random(seed)
    sources = _sources()
    chunks = [_mutate(rng.choice(sources), rng).replace("// -----", "")
              for _ in range(count)]
    return subprocess.run([str(OPT), "--split-input-file", "-", *passes],
                          input="\n// -----\n".join(chunks), text=True,
                          capture_output=True, timeout=600)


@pytest.mark.parametrize("passes", [[], ["--canonicalize", "--cse", "--inline"]])
def test_mutated_ir_never_crashes(passes):
    result = run_mutations(400, seed=2026, passes=passes)
    # 2: a diagnostic (xla-gpu-opt exits 2 on any error); a signal or an
    # abort would be negative.
    assert result.returncode in (0, 2), result.stderr[-4000:]
    assert "error:" in result.stderr  # the mutations did produce bad input


# Dimension numbers the verifier refuses (the passes and emitters indexed
# with them: IndexError, an internal error, before). Found by fuzzing the CLIs.
_DOT = """HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,4] parameter(1)
  ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={DIMS}
}
"""
_SCATTER = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[10,4] parameter(0)
  i = s32[6,1] parameter(1)
  u = f32[6,4] parameter(2)
  ROOT s = f32[10,4] scatter(x, i, u), update_window_dims={DIMS}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""
_GATHER = """HloModule m
ENTRY e {
  x = f32[10,4] parameter(0)
  i = s32[6,1] parameter(1)
  ROOT g = f32[6,4] gather(x, i), offset_dims={DIMS}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
}
"""


@pytest.mark.parametrize("template, good, bad", [
    (_DOT, "0", ["1", "77777777777777777777", "-1", "0,0"]),
    (_SCATTER, "1", ["2", "0", "1,1", "-1"]),
    (_GATHER, "1", ["2", "0", "1,1", "9223372036854775807"]),
], ids=["dot", "scatter", "gather"])
def test_dimension_numbers_out_of_range_are_parse_errors(template, good, bad):
    from xla_gpu import hlo
    from xla_gpu.hlo.passes import optimize
    optimize(hlo.parse_module(template.replace("DIMS", good)))
    for dims in bad:
        with pytest.raises(xla_gpu.HloParseError) as info:
            hlo.parse_module(template.replace("DIMS", dims))
        assert "internal" not in str(info.value), str(info.value)


_LOOPS = """HloModule m
cond {
  c = (f32[4], s32[]) parameter(0)
  i = s32[] get-tuple-element(c), index=1
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  b = (f32[4], s32[]) parameter(0)
  v = f32[4] get-tuple-element(b), index=0
  i = s32[] get-tuple-element(b), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (f32[4], s32[]) tuple(v, j)
}
neg {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}
ENTRY e {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  s = (f32[4], s32[]) tuple(x, zero)
  w = (f32[4], s32[]) WHILE
  p = pred[] constant(true)
  ROOT c = f32[4] CONDITIONAL
}
"""


@pytest.mark.parametrize("loop, branch", [
    ("while(s)", "conditional(p, x, x), true_computation=neg, false_computation=cond"),
    ("while(s), condition=cond", "conditional(p, x), true_computation=neg, false_computation=neg"),
    ("while(s, s), condition=cond, body=body", "conditional(x, x, x), true_computation=neg, "
     "false_computation=neg"),
    ("while(s), condition=body, body=body", "conditional(p, x, x), branch_computations={neg}"),
    ("while(x), condition=cond, body=body", "conditional(p, x, x), true_computation=neg"),
])
def test_loops_and_branches_without_their_computations_are_parse_errors(loop, branch):
    from xla_gpu import hlo
    good = _LOOPS.replace("WHILE", "while(s), condition=cond, body=body").replace(
        "CONDITIONAL", "conditional(p, x, x), true_computation=neg, false_computation=neg")
    hlo.evaluate(hlo.parse_module(good), np.ones(4, np.float32))
    for text in (good.replace("while(s), condition=cond, body=body", loop),
                 good.replace("conditional(p, x, x), true_computation=neg, "
                              "false_computation=neg", branch)):
        with pytest.raises(xla_gpu.HloParseError) as info:
            hlo.parse_module(text)
        assert "internal" not in str(info.value), str(info.value)
