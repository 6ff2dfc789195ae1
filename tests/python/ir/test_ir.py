"""xla_gpu.ir: contexts, the indexing-map view, passes from Python."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mlir import ir as mlir_ir
from mlir.passmanager import PassManager

from xla_gpu import ir

SEED_MAP = ("(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, "
            "(bl_x floordiv 8) mod 512, (bl_x mod 8) * 512 + th_x * 4 + vector_index), "
            "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]")


def test_context_is_an_mlir_context_with_everything_loaded(ctx):
    assert isinstance(ctx, mlir_ir.Context)
    for name in ["xla_gpu", "func", "arith", "math", "tensor", "scf", "vector",
                 "gpu", "nvvm", "llvm"]:
        assert ctx.dialects[name] is not None


def test_register_into_a_users_context():
    context = mlir_ir.Context()
    ir.register_dialect(context)
    module = mlir_ir.Module.parse(
        'func.func private @f() attributes {m = #xla_gpu.indexing_map<"(d0) -> (d0), '
        'domain: d0 in [0, 3]">}', context)
    assert "xla_gpu.indexing_map" in str(module)


def test_parse_seed_map(ctx):
    m = ir.IndexingMap.parse(SEED_MAP)
    assert [v.name for v in m.dims] == ["th_x", "bl_x"]
    assert [(v.lower, v.upper) for v in m.dims] == [(0, 127), (0, 24575)]
    assert m.symbols == [ir.Variable("vector_index", 0, 3)]
    assert m.constraints == []
    assert m.affine_map.n_dims == 2 and m.affine_map.n_symbols == 1
    assert str(m.affine_map.results[0]) == "d1 floordiv 4096"
    assert str(m) == SEED_MAP


def test_constraints_and_default_names(ctx):
    m = ir.IndexingMap.parse("(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 127], "
                             "s0 in [0, 3], d0 * 4 + s0 in [0, 511]")
    assert m.dims == [ir.Variable("d0", 0, 127)]
    (c,) = m.constraints
    assert str(c.expr) == "d0 * 4 + s0" and (c.lower, c.upper) == (0, 511)
    assert not m.is_known_empty


def test_construct_from_parts(ctx):
    d0, d1 = mlir_ir.AffineDimExpr.get(0), mlir_ir.AffineDimExpr.get(1)
    s0 = mlir_ir.AffineSymbolExpr.get(0)
    amap = mlir_ir.AffineMap.get(2, 1, [d0 * 4 + s0, d1])
    m = ir.IndexingMap(amap, [ir.Variable("th_x", 0, 31), ir.Variable("", 0, 9)],
                       [ir.Variable("v", 0, 3)],
                       [ir.Constraint(d0 * 4 + s0, 0, 100)])
    attr = m.to_attr()
    assert str(attr) == ('#xla_gpu.indexing_map<"(th_x, d1)[v] -> (th_x * 4 + v, d1), '
                         'domain: th_x in [0, 31], d1 in [0, 9], v in [0, 3], '
                         'th_x * 4 + v in [0, 100]">')
    back = ir.IndexingMap.from_attr(attr)
    assert back.dims[1].name == "d1"
    assert back.to_attr() == attr
    assert mlir_ir.Attribute.parse(str(attr)) == attr


def test_known_empty(ctx):
    assert ir.IndexingMap.parse("(d0) -> (d0), domain: d0 in [3, 2]").is_known_empty
    assert ir.IndexingMap.parse(
        "(d0) -> (d0), domain: d0 in [0, 3], d0 * 2 in [7, 9]").is_known_empty


@pytest.mark.parametrize("dims,symbols,constraints,message", [
    ([ir.Variable("a", 0, 1)], [], [], "has 2 dims and 0 symbols, but 1 dim"),
    ([ir.Variable("a", 0, 1)] * 2, [], [], "duplicate variable name 'a'"),
    ([ir.Variable("1x", 0, 1), ir.Variable("b", 0, 1)], [], [], "invalid variable name '1x'"),
    ([ir.Variable("mod", 0, 1), ir.Variable("b", 0, 1)], [], [], "invalid variable name 'mod'"),
])
def test_invalid_parts_raise(ctx, dims, symbols, constraints, message):
    amap = mlir_ir.AffineMap.get(2, 0, [mlir_ir.AffineDimExpr.get(0)])
    with pytest.raises(ValueError, match=message):
        ir.IndexingMap(amap, dims, symbols, constraints).to_attr()


def test_non_affine_parts_raise(ctx):
    d0, d1 = mlir_ir.AffineDimExpr.get(0), mlir_ir.AffineDimExpr.get(1)
    amap = mlir_ir.AffineMap.get(2, 0, [mlir_ir.AffineMulExpr.get(d0, d1)])
    dims = [ir.Variable("", 0, 1), ir.Variable("", 0, 1)]
    with pytest.raises(ValueError, match="non-affine product"):
        ir.IndexingMap(amap, dims, []).to_attr()
    amap = mlir_ir.AffineMap.get(2, 0, [mlir_ir.AffineModExpr.get(d0, d1)])
    with pytest.raises(ValueError, match="positive constant"):
        ir.IndexingMap(amap, dims, []).to_attr()


def test_parse_errors_are_mlir_errors(ctx):
    with pytest.raises(mlir_ir.MLIRError, match="unknown identifier 'q'"):
        ir.IndexingMap.parse("(a) -> (q), domain: a in [0, 1]")
    with pytest.raises(mlir_ir.MLIRError, match="missing range for dimension 'b'"):
        ir.IndexingMap.parse("(a, b) -> (a), domain: a in [0, 1]")


def test_from_attr_rejects_other_attributes(ctx):
    with pytest.raises(TypeError, match="not an #xla_gpu.indexing_map"):
        ir.IndexingMap.from_attr(mlir_ir.Attribute.parse("affine_map<(d0) -> (d0)>"))


def test_passes_are_registered_for_python_pipelines(ctx):
    module = mlir_ir.Module.parse("""
      func.func private @g(%i: index) -> f32
      func.func @f(%i: index) -> f32 {
        %0 = xla_gpu.pure_call @g(%i) : (index) -> f32
        return %0 : f32
      }""")
    PassManager.parse("builtin.module(func.func(xla-convert-pure-call-ops))").run(
        module.operation)
    assert "call @g" in str(module) and "pure_call" not in str(module)


def test_importing_xla_gpu_does_not_import_mlir():
    code = "import sys, xla_gpu; assert 'mlir' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_copy_of_mlir_in_the_process():
    code = """
import xla_gpu.ir as ir
ctx = ir.Context()
maps = open('/proc/self/maps').read()
libs = {line.split()[-1] for line in maps.splitlines() if '/lib' in line}
names = sorted(p.rsplit('/', 1)[-1] for p in libs)
# The bindings' CAPI library is the MLIR; libXlaGpu uses it, no libMLIR.so.
assert names.count('libMLIRPythonCAPI.so') == 1, names
assert 'libMLIR.so' not in names and 'libXlaGpu.so' in names, names
"""
    subprocess.run([sys.executable, "-c", code], check=True)
