"""IndexingMap algebra: range-aware simplification (exact expected maps), its
soundness on random maps (brute force over the domain) and idempotence, and
linearization."""

from __future__ import annotations

import itertools
import random

import pytest
from mlir import ir as mlir_ir

from xla_gpu import ir


@pytest.mark.parametrize("before,after", [
    # The examples.
    ("(d0) -> (d0 mod 8), domain: d0 in [0, 7]",
     "(d0) -> (d0), domain: d0 in [0, 7]"),
    ("(d0)[s0] -> ((d0 * 4 + s0) floordiv 4), domain: d0 in [0, 7], s0 in [0, 3]",
     "(d0)[s0] -> (d0), domain: d0 in [0, 7], s0 in [0, 3]"),
    # Vectorized accesses: split by the vector width.
    ("(d0)[s0] -> ((d0 * 4 + s0) floordiv 8, (d0 * 4 + s0) mod 8), "
     "domain: d0 in [0, 31], s0 in [0, 3]",
     "(d0)[s0] -> (d0 floordiv 2, (d0 mod 2) * 4 + s0), domain: d0 in [0, 31], s0 in [0, 3]"),
    # Nested divisions and modulos.
    ("(d0) -> ((d0 floordiv 8) floordiv 4, (d0 mod 16) mod 8, d0 mod 16), domain: d0 in [0, 100]",
     "(d0) -> (d0 floordiv 32, d0 mod 8, d0 mod 16), domain: d0 in [0, 100]"),
    # A range inside one period.
    ("(d0) -> (d0 floordiv 10, d0 mod 10), domain: d0 in [20, 29]",
     "(d0) -> (2, d0 - 20), domain: d0 in [20, 29]"),
    # Constraints that always hold are dropped; others stay.
    ("(d0) -> (d0), domain: d0 in [0, 7], d0 * 2 in [0, 100]",
     "(d0) -> (d0), domain: d0 in [0, 7]"),
    ("(d0, d1) -> (d0), domain: d0 in [0, 7], d1 in [0, 7], d0 + d1 in [0, 9]",
     "(d0, d1) -> (d0), domain: d0 in [0, 7], d1 in [0, 7], d0 + d1 in [0, 9]"),
    # The reference walkthrough: the linearized GELU index recombines to th_x * 4 + bl_x * 512 + v.
    ("(th_x, bl_x)[v] -> ((bl_x floordiv 4096) * 2097152 + ((bl_x floordiv 8) mod 512) * 4096"
     " + (bl_x mod 8) * 512 + th_x * 4 + v), "
     "domain: th_x in [0, 127], bl_x in [0, 24575], v in [0, 3]",
     "(th_x, bl_x)[v] -> (th_x * 4 + bl_x * 512 + v), "
     "domain: th_x in [0, 127], bl_x in [0, 24575], v in [0, 3]"),
    # ... but a lone floordiv/mod pair is kept as written.
    ("(d0) -> ((d0 floordiv 8) mod 512), domain: d0 in [0, 24575]",
     "(d0) -> ((d0 floordiv 8) mod 512), domain: d0 in [0, 24575]"),
])
def test_simplify(ctx, before, after):
    assert str(ir.IndexingMap.parse(before).simplified()) == after


def test_linearization(ctx):
    assert str(ir.IndexingMap.linearization([6, 512, 4096])) == (
        "(d0, d1, d2) -> (d0 * 2097152 + d1 * 4096 + d2), "
        "domain: d0 in [0, 5], d1 in [0, 511], d2 in [0, 4095]")


_BINARY = [(mlir_ir.AffineAddExpr, lambda a, b: a + b),
           (mlir_ir.AffineMulExpr, lambda a, b: a * b),
           (mlir_ir.AffineFloorDivExpr, lambda a, b: a // b),
           (mlir_ir.AffineCeilDivExpr, lambda a, b: -(-a // b)),
           (mlir_ir.AffineModExpr, lambda a, b: a % b)]


def _evaluate(expr: mlir_ir.AffineExpr, dims, symbols) -> int:
    expr = expr.maybe_downcast()
    if isinstance(expr, mlir_ir.AffineConstantExpr):
        return expr.value
    if isinstance(expr, mlir_ir.AffineDimExpr):
        return dims[expr.position]
    if isinstance(expr, mlir_ir.AffineSymbolExpr):
        return symbols[expr.position]
    for cls, fn in _BINARY:
        if isinstance(expr, cls):
            return fn(_evaluate(expr.lhs, dims, symbols), _evaluate(expr.rhs, dims, symbols))
    raise AssertionError(f"unknown expression {expr}")


def _random_expr(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(["d0", "d1", "s0", str(rng.randint(-3, 9))])
    a = _random_expr(rng, depth - 1)
    op = rng.choice(["+", "-", "*", "floordiv", "ceildiv", "mod"])
    if op in ("+", "-"):
        return f"({a} {op} {_random_expr(rng, depth - 1)})"
    return f"({a} {op} {rng.choice([1, 2, 3, 4, 8, 16])})"


def test_simplification_is_sound_and_idempotent(ctx):
    rng = random.Random(7)
    ranges = [(0, 11), (2, 9), (0, 3)]
    domain = ", ".join(f"{n} in [{lo}, {hi}]" for n, (lo, hi) in zip(["d0", "d1", "s0"], ranges))
    points = list(itertools.product(*(range(lo, hi + 1) for lo, hi in ranges)))[::3]
    for _ in range(150):
        results = ", ".join(_random_expr(rng, 3) for _ in range(2))
        original = ir.IndexingMap.parse(f"(d0, d1)[s0] -> ({results}), domain: {domain}")
        simplified = original.simplified()
        assert str(simplified.simplified()) == str(simplified), str(original)
        for d0, d1, s0 in points:
            for a, b in zip(original.affine_map.results, simplified.affine_map.results):
                assert _evaluate(a, [d0, d1], [s0]) == _evaluate(b, [d0, d1], [s0]), (
                    f"{original} -> {simplified} at {(d0, d1, s0)}")


def test_compose(ctx):
    loop = ir.IndexingMap.parse(
        "(th_x, bl_x)[v] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, "
        "(bl_x mod 8) * 512 + th_x * 4 + v), "
        "domain: th_x in [0, 127], bl_x in [0, 24575], v in [0, 3]")
    # The reference walkthrough's flattening: ranges make the 6x512x4096 bounds redundant.
    assert str(loop.compose(ir.IndexingMap.linearization([6, 512, 4096]))) == (
        "(th_x, bl_x)[v] -> (th_x * 4 + bl_x * 512 + v), "
        "domain: th_x in [0, 127], bl_x in [0, 24575], v in [0, 3]")
    # Symbols append; a bound the ranges do not imply stays a constraint.
    first = ir.IndexingMap.parse("(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 15], s0 in [0, 3]")
    second = ir.IndexingMap.parse(
        "(d0)[s0] -> (d0 floordiv 2 + s0), domain: d0 in [0, 20], s0 in [0, 1]")
    assert str(first.compose(second)) == (
        "(d0)[s0, s1] -> (d0 * 2 + s0 floordiv 2 + s1), "
        "domain: d0 in [0, 15], s0 in [0, 3], s1 in [0, 1], d0 * 4 + s0 in [0, 20]")


def test_without_unused_symbols_and_ranges(ctx):
    m = ir.IndexingMap.parse(
        "(d0)[s0, s1] -> (d0 + s1), domain: d0 in [0, 15], s0 in [0, 3], s1 in [0, 7]")
    assert str(m.without_unused_symbols()) == "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 15], s0 in [0, 7]"
    assert m.evaluate_range(m.affine_map.results[0]) == (0, 22)
