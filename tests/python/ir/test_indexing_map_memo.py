"""IndexingMap keeps what the C API answered per attribute (parts read,
built, simplified): what a caller gets stays its own to change."""

from __future__ import annotations

import pytest
from mlir import ir as mlir_ir

from xla_gpu import ir


@pytest.fixture
def ctx():
    context = ir.Context()
    with context, mlir_ir.Location.unknown():
        yield context


TEXT = "(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 7], s0 in [0, 3]"


def test_views_of_one_attribute_have_parts_of_their_own(ctx):
    attr = ir.IndexingMap.parse(TEXT).to_attr()
    first, second = ir.IndexingMap.from_attr(attr), ir.IndexingMap.from_attr(attr)
    assert first.dims[0].upper == 7
    first.dims[0] = ir.Variable("d0", 0, 3)
    first.symbols.append(ir.Variable("s1", 0, 1))
    assert second.dims == [ir.Variable("d0", 0, 7)]
    assert second.symbols == [ir.Variable("s0", 0, 3)]
    assert second.to_attr() == attr
    first.symbols.pop()
    assert "d0 in [0, 3]" in str(first)
    assert str(ir.IndexingMap.from_attr(attr)) == TEXT


def test_changed_parts_build_the_attribute_of_the_parts_now(ctx):
    d0, s0 = mlir_ir.AffineDimExpr.get(0), mlir_ir.AffineSymbolExpr.get(0)

    def build(upper):
        return ir.IndexingMap.from_exprs([ir.Variable("d0", 0, upper)],
                                         [ir.Variable("s0", 0, 3)], [d0 * 4 + s0])

    m = build(7)
    original = m.to_attr()
    assert build(7).to_attr() == original
    m.dims[0] = ir.Variable("d0", 0, 5)
    assert m.to_attr() != original
    assert "d0 in [0, 5]" in str(m)
    m.dims[0] = ir.Variable("d0", 0, 7)
    assert m.to_attr() == original


def test_a_simplified_view_can_be_changed_without_changing_the_next(ctx):
    m = ir.IndexingMap.parse("(d0) -> (d0 mod 16), domain: d0 in [0, 7]")
    first = m.simplified()
    first.dims[0] = ir.Variable("d0", 0, 3)
    second = m.simplified()
    assert str(second) == "(d0) -> (d0), domain: d0 in [0, 7]"
    assert str(first) == "(d0) -> (d0), domain: d0 in [0, 3]"
