"""Bad input never crashes the process: mutated xla_gpu IR (seed listings,
dialect tests) run through xla-gpu-opt, which must end every chunk with IR or a
diagnostic, never a signal or an assertion. Deterministic (seeded)."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

import xla_gpu

LIT = Path(__file__).resolve().parents[1] / "lit"
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
    assert result.returncode in (0, 1), result.stderr[-4000:]
    assert "error:" in result.stderr  # the mutations did produce bad input
