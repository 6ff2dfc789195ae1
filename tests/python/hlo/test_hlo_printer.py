"""The HLO printer (xla_gpu.hlo.printer) and the IR's mutation API
(xla_gpu.hlo.module): round trips of every stored text, literals of every
element type, typed attributes, and graph edits that keep users, order,
names and control dependencies valid."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from xla_gpu.hlo import (ELEMENT_TYPES, HloComputation, HloError, HloInstruction,
                         HloParseError, Shape, evaluate, parse_file, parse_module)
from xla_gpu.hlo.printer import literal_to_text, module_to_text, shape_to_text

REPO = Path(__file__).resolve().parents[3]
TEXTS = sorted(
    [*(REPO / "tests" / "python" / "hlo_inputs").glob("*.hlo"),
     *(REPO / "bench" / "corpus").glob("*.hlo"),
     *(p for p in (REPO / "tests" / "lit").rglob("*.hlo") if "Inputs" not in p.parts),
     *(REPO / "tests" / "python" / "programs").rglob("*.hlo")])


def check_graph(module):
    for comp in module.computations:
        names = [i.name for i in comp.instructions]
        assert len(names) == len(set(names))
        position = {id(i): k for k, i in enumerate(comp.instructions)}
        assert id(comp.root) in position
        for inst in comp.instructions:
            assert inst.parent is comp
            for op in inst.operands:
                assert position[id(op)] < position[id(inst)], (inst.name, op.name)
                assert sum(u is inst for u in op.users) == 1
            for user in inst.users:
                assert any(o is inst for o in user.operands)
                assert user.parent is comp
            for pred in inst.attrs.get("control-predecessors", ()):
                assert pred in names[:names.index(inst.name)]


@pytest.mark.parametrize("path", TEXTS, ids=[str(p.relative_to(REPO)) for p in TEXTS])
def test_round_trip(path):
    try:
        module = parse_file(path)
    except HloParseError:
        if "lit" in path.parts:
            pytest.skip("a lit test of RUN lines only")  # not HLO itself
        raise
    text = module_to_text(module)
    again = parse_module(text)
    assert module_to_text(again) == text
    assert sorted(c.name for c in again.computations) == \
        sorted(c.name for c in module.computations)
    # Same graph: instruction counts and the entry's root.
    assert sum(len(c.instructions) for c in again.computations) == \
        sum(len(c.instructions) for c in module.computations)
    assert again.entry.root.name == module.entry.root.name


def test_xla_syntax_of_a_module():
    module = parse_file(REPO / "tests" / "python" / "hlo_inputs" / "softmax.pre.hlo")
    text = module_to_text(module)
    assert text.startswith("HloModule jit_softmax, entry_computation_layout="
                           "{(f32[4,16]{1,0})->f32[4,16]{1,0}}\n")
    # Callees before callers, ENTRY with a signature without layouts.
    assert text.index("%region_0.1 (") < text.index("ENTRY %main.3 (x.1: f32[4,16]) -> f32[4,16] {")
    assert "  %reduce_max.7 = f32[4]{0} reduce(f32[4,16]{1,0} %x.1, f32[] %constant.5), " \
           "dimensions={1}, to_apply=%region_0.1\n" in text
    assert "  ROOT %div.7 = f32[4,16]{1,0} divide(f32[4,16]{1,0} %exp.1, " \
           "f32[4,16]{1,0} %div.6)\n" in text
    assert "%constant.5 = f32[] constant(-inf)" in text
    short = module_to_text(module, operand_shapes=False)
    assert "divide(%exp.1, %div.6)" in short


TYPED_ATTRS = """
HloModule typed, entry_computation_layout={(f32[8,8]{1,0}, s32[])->f32[4,2]{1,0}}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[8,8]{1,0} parameter(0), metadata={op_name="jit(f)/x" source_file="/a \\"b\\".py" source_line=3}
  i = s32[] parameter(1)
  z = f32[] constant(0)
  sl = f32[4,4]{1,0} slice(p), slice={[0:8:2], [1:5]}
  pd = f32[10,8]{1,0} pad(sl, z), padding=1_2_1x0_1_1
  rw = f32[5,4]{1,0} reduce-window(pd, z), window={size=2x3 stride=2x2 pad=0_0x0_1}, to_apply=add
  ds = f32[2,2]{1,0} dynamic-slice(rw, i, i), dynamic_slice_sizes={2,2}
  t = f32[2,2]{0,1} transpose(ds), dimensions={1,0}
  b = f32[2,2]{1,0} copy(t), frontend_attributes={_xla_stream="1"}
  c = f32[4,2]{1,0} concatenate(b, ds), dimensions={0}, control-predecessors={t}
  ROOT r = f32[4,2]{1,0} custom-call(c), custom_call_target="my\\"target", backend_config={"x": [1, 2]}
}
"""


def test_typed_attributes_print_back_in_xla_syntax():
    module = parse_module(TYPED_ATTRS)
    text = module_to_text(module)
    for piece in ["slice={[0:8:2], [1:5]}", "padding=1_2_1x0_1_1",
                  "window={size=2x3 stride=2x2 pad=0_0x0_1}", "to_apply=%add",
                  "dynamic_slice_sizes={2,2}", "f32[2,2]{0,1} transpose(",
                  "dimensions={1,0}", "control-predecessors={%t}",
                  'custom_call_target="my\\"target"', 'backend_config={"x": [1, 2]}',
                  'metadata={op_name="jit(f)/x" source_file="/a \\"b\\".py" source_line=3}',
                  'frontend_attributes={_xla_stream="1"}']:
        assert piece in text, piece
    again = parse_module(text)
    assert module_to_text(again) == text
    r = again.entry.root
    assert r.attrs["custom_call_target"] == 'my"target'
    assert again.entry.find("p").attrs["metadata"]["source_file"] == '/a "b".py'
    assert again.entry.find("sl").attrs["slice"] == [(0, 8, 2), (1, 5, 1)]
    assert module_to_text(module, metadata=False).count("metadata=") == 0


FLOAT_TYPES = [t for t in ELEMENT_TYPES if t.startswith(("f", "bf"))]


@pytest.mark.parametrize("etype", sorted(ELEMENT_TYPES))
def test_literals_of_every_element_type(etype):
    dtype = ELEMENT_TYPES[etype]
    if etype == "pred":
        values = np.array([True, False, True])
    elif etype.startswith("c"):
        values = np.array([1 - 0.5j, complex(math.inf, math.nan), 3.25j], dtype=dtype)
    elif etype.startswith(("s", "u")):
        info = np.iinfo(np.int64 if etype[0] == "s" else np.uint64)
        bits = {"s2": 2, "s4": 4, "u2": 2, "u4": 4}.get(etype, dtype.itemsize * 8)
        lo = -(1 << (bits - 1)) if etype[0] == "s" else 0
        hi = (1 << (bits - 1)) - 1 if etype[0] == "s" else (1 << bits) - 1
        assert info.min <= lo
        values = np.array([lo, 0, hi], dtype=np.int64 if etype[0] == "s" else np.uint64).astype(dtype)
    else:
        candidates = [-0.0, 0.1, 1e3, -2.5, float("inf"), float("nan")]
        values = np.array(candidates, dtype=np.float64).astype(dtype)
    shape = Shape(etype, (len(values),), (0,))
    text = ("HloModule m\n\nENTRY %e () -> " + shape_to_text(shape, layout=False) + " {\n  ROOT %c = "
            + shape_to_text(shape) + " constant(" + literal_to_text(values, shape) + ")\n}\n")
    module = parse_module(text)
    assert module_to_text(module) == text
    got = module.entry.root.literal
    if etype in FLOAT_TYPES:
        a, b = got.astype(np.float64), values.astype(np.float64)
        assert np.array_equal(np.isnan(a), np.isnan(b))
        ok = ~np.isnan(a)
        assert np.array_equal(a[ok], b[ok])
        assert np.array_equal(np.signbit(a[ok]), np.signbit(b[ok]))  # -0 survives
    elif etype.startswith("c"):
        np.testing.assert_array_equal(got, values)
    else:
        assert got.tolist() == values.tolist()


def test_float_literals_are_shortest_round_trip_text():
    f32 = Shape("f32", (), None)
    assert literal_to_text(np.float32(0.1), f32) == "0.1"
    assert literal_to_text(np.float32(1024), f32) == "1024"
    assert literal_to_text(np.float32(1e-5), f32) == "1e-05"
    assert literal_to_text(np.float32(-np.inf), f32) == "-inf"
    assert literal_to_text(np.float32(-0.0), f32) == "-0"
    bf16 = Shape("bf16", (2, 2), None)
    assert literal_to_text(np.array([[1, 2], [3, 0.1]], dtype=bf16.dtype), bf16) == \
        "{ {1, 2}, {3, 0.1} }"
    tup = Shape("", (), None, (f32, Shape("s32", (2,), None)))
    assert literal_to_text((np.float32(1), np.array([2, 3], np.int32)), tup) == "(1, {2, 3})"
    assert literal_to_text(None, Shape("f32", (1000,), None)) == "{...}"


# ------------------------------------------------------------ mutation API


SMALL = """
HloModule small

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  a = f32[4] add(x, y)
  m = f32[4] multiply(a, a)
  n = f32[4] negate(m), control-predecessors={a}
  ROOT t = (f32[4], f32[4]) tuple(m, n)
}
"""


def test_create_add_replace_and_remove_keep_the_graph_valid():
    module = parse_module(SMALL).link()
    entry = module.entry
    x, y, a, m, n = (entry.find(k) for k in "xyamn")
    # A new instruction gets a module-unique name and registers as a user.
    s = entry.add("subtract", x.shape, [x, y], name="a")
    assert s.name != "a" and s.name.startswith("a")
    assert s in x.users and s in y.users
    # a's users read s instead; a is dead and removed; n inherits nothing.
    a.replace_all_uses_with(s)
    assert m.operands == [s, s] and a.users == []
    assert [u.name for u in s.users] == [m.name]
    # `m` is now after `s` although `s` was appended at the end: the order
    # is restored on the next read.
    check_graph(module)
    entry.remove_instruction(a)
    assert "control-predecessors" not in n.attrs  # a had no predecessors
    check_graph(module)
    xs = np.arange(4, dtype=np.float32)
    out = evaluate(module, xs, xs + 1)
    np.testing.assert_allclose(out[0], 1.0)
    with pytest.raises(HloError, match="used by"):
        entry.remove_instruction(m)
    with pytest.raises(HloError, match="root"):
        entry.remove_instruction(entry.root)


def test_removal_moves_control_dependencies_to_successors():
    module = parse_module("""
HloModule c
ENTRY main {
  x = f32[] parameter(0)
  a = f32[] negate(x)
  b = f32[] exponential(x), control-predecessors={a}
  c = f32[] sqrt(x), control-predecessors={b}
  ROOT r = f32[] add(a, c)
}
""").link()
    entry = module.entry
    b = entry.find("b")
    assert [p.name for p in entry.find("c").control_predecessors()] == ["b"]
    assert [s.name for s in entry.find("a").control_successors()] == ["b"]
    entry.remove_instruction(b)
    assert entry.find("c").attrs["control-predecessors"] == ("a",)
    entry.rename(entry.find("a"), "neg")
    assert entry.find("c").attrs["control-predecessors"] == ("neg",)
    assert "control-predecessors={%neg}" in module_to_text(module)
    check_graph(module)


def test_replace_operand_set_root_and_remove_dead():
    module = parse_module(SMALL).link()
    entry = module.entry
    m, n, x = entry.find("m"), entry.find("n"), entry.find("x")
    n.replace_operand_with(0, x)
    assert n not in m.users and n in x.users
    entry.set_root(n)
    removed = entry.remove_dead()
    assert removed == 3  # t, m, a
    assert "control-predecessors" not in n.attrs
    assert [i.name for i in entry.instructions] == ["x", "y", "n"]
    check_graph(module)


def test_clone_computation_and_module():
    module = parse_file(REPO / "tests" / "python" / "hlo_inputs" / "softmax.pre.hlo")
    copy = module.clone()
    assert module_to_text(copy) == module_to_text(module)
    assert all(a is not b for a, b in zip(copy.computations, module.computations))
    reducer = copy.entry.find("reduce_max.7").attrs["to_apply"]
    assert reducer in copy.computations  # references point into the copy
    twin = copy.entry.clone(module=copy)
    copy.add_computation(twin, before=copy.entry)
    assert twin.name == "main.3.clone" and not twin.is_entry
    names = [i.name for c in copy.computations for i in c.instructions]
    assert len(names) == len(set(names))  # module-unique names
    text = module_to_text(copy)
    assert module_to_text(parse_module(text)) == text
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(twin, x)[0], evaluate(module, x)[0])
    assert len(module.computations) == 3  # the original is untouched
    assert copy.remove_unreachable_computations() == 1


def test_computations_print_callees_first():
    module = parse_module(SMALL).link()
    callee = HloComputation("helper")
    p = callee.add_instruction(HloInstruction.create_parameter(0, Shape("f32", (4,), None)))
    callee.set_root(callee.add("negate", p.shape, [p]))
    module.computations.append(callee)  # after its caller on purpose
    entry = module.entry
    call = entry.add("call", p.shape, [entry.find("x")], to_apply=callee)
    assert call.called_computations == [callee]
    text = module_to_text(module)
    assert text.index("%helper (") < text.index("ENTRY %main")
    assert module_to_text(parse_module(text)) == text
    with pytest.raises(HloError, match="still calls"):
        module.remove_computation(callee)


def test_name_uniquer_follows_xla():
    module = parse_module(SMALL).link()
    assert module.unique_name("fusion") == "fusion"
    assert module.unique_name("fusion") == "fusion.1"
    assert module.unique_name("fusion") == "fusion.2"
    assert module.unique_name("add.7") == "add.7"
    assert module.unique_name("add.7") == "add.8"
    assert module.unique_name("x") == "x.1"
    assert module.unique_computation_name("main") == "main.1"


def test_cycles_are_reported():
    module = parse_module(SMALL).link()
    entry = module.entry
    a, m = entry.find("a"), entry.find("m")
    a.replace_operand_with(0, m)
    with pytest.raises(HloError, match="cycle"):
        entry.instructions


def test_the_largest_finite_values_print_without_an_overflow_warning():
    import warnings

    import numpy as np

    from xla_gpu.hlo.printer import _float_text
    for dtype in (np.float16, np.float32):
        big = float(np.finfo(dtype).max)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            text = _float_text(big, np.dtype(dtype))
        assert np.array(float(text)).astype(dtype) == np.finfo(dtype).max
