"""The HLO text parser (xla_gpu.hlo.parser): texts as JAX/XLA print them,
typed attributes, constants, error locations, a mutation fuzz test."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from xla_gpu.hlo import (ELEMENT_TYPES, HloComputation, HloParseError, Shape,
                         parse_file, parse_module)

INPUTS = Path(__file__).resolve().parents[1] / "hlo_inputs"
STORED = sorted(INPUTS.glob("*.hlo"))
REPO = Path(__file__).resolve().parents[3]


def check_graph(module):
    """Invariants every parsed module satisfies."""
    names = {c.name for c in module.computations}
    assert len(names) == len(module.computations)
    for comp in module.computations:
        assert comp.root in comp.instructions
        params = comp.parameters
        assert [p.parameter_number for p in params] == list(range(len(params)))
        for inst in comp.instructions:
            assert inst.parent is comp
            assert inst.location is not None and inst.location.line >= 1
            for op in inst.operands:
                assert op.parent is comp
                assert sum(u is inst for u in op.users) == 1
            for user in inst.users:
                assert any(o is inst for o in user.operands)
            for called in inst.called_computations:
                assert called in module.computations


# ------------------------------------------------------------ stored texts


@pytest.mark.parametrize("path", STORED, ids=[p.name for p in STORED])
def test_stored_texts_parse(path):
    module = parse_file(path)
    assert module.source == str(path)
    check_graph(module)
    entry = module.entry
    assert entry.root is not None and entry.is_entry
    assert sum(c.is_entry for c in module.computations) == 1
    if path.name != "seed_gelu.hlo":
        assert module.name.startswith("jit_")
        assert module.attrs["entry_computation_layout"].startswith("{(")


def test_post_optimization_text():
    module = parse_file(INPUTS / "gelu.post.hlo")
    assert module.attrs["is_scheduled"] == "true"
    assert module.attrs["allow_spmd_sharding_propagation_to_output"] == "{true}"
    assert set(module.sections) == {"FileNames", "FunctionNames",
                                    "FileLocations", "StackFrames"}
    assert "3 \"gelu\"" in module.sections["FunctionNames"]
    assert module.sections["FileLocations"][0].startswith("1 {file_name_id=1")
    entry = module.entry
    assert entry.name == "main.1"
    fusion = entry.root
    assert fusion.opcode == "fusion" and fusion.name == "multiply_multiply_fusion"
    assert fusion.attrs["kind"] == "kLoop"
    called = fusion.attrs["calls"]
    assert isinstance(called, HloComputation)
    assert called.name == "fused_computation"
    assert fusion.called_computations == [called]
    assert fusion.attrs["metadata"] == {"op_name": "jit(gelu)/mul",
                                        "stack_frame_id": 3}
    assert fusion.operands == [entry.parameters[0]]
    assert entry.parameters[0].users == [fusion]
    assert entry.parameters[0].attrs["metadata"] == {"op_name": "x"}
    assert [i.opcode for i in called.instructions].count("multiply") == 6
    tanh = called.find("tanh.0")
    assert tanh.shape == Shape("f32", (4, 8), (1, 0))
    assert tanh.users[0].name == "add.0"
    const = called.find("constant.2")
    assert const.literal.dtype == np.float32 and const.literal.shape == ()
    assert const.literal == np.float32(0.797884583)


def test_pre_optimization_text():
    module = parse_file(INPUTS / "softmax.pre.hlo")
    entry = module.entry
    assert entry.name == "main.3" and entry.is_entry
    reduce_max = entry.find("reduce_max.7")
    assert reduce_max.attrs["dimensions"] == (1,)
    assert reduce_max.attrs["to_apply"].name == "region_0.1"
    assert entry.find("constant.5").literal == -np.inf
    assert entry.find("sub.6").attrs["dimensions"] == (0,)
    assert entry.root.opcode == "divide"


def test_typed_and_untyped_operands_and_argmax():
    module = parse_file(INPUTS / "argmax.post.hlo")
    fused = module.computation("fused_computation")
    reduce = fused.root
    assert reduce.shape.is_tuple
    assert [s.element_type for s in reduce.shape.tuple_shapes] == ["f32", "s32"]
    assert [o.name for o in reduce.operands] == ["param_0", "iota.5",
                                                 "constant.5", "constant.4"]
    assert fused.find("iota.5").attrs["iota_dimension"] == 1
    gte = module.entry.root
    assert gte.opcode == "get-tuple-element" and gte.attrs["index"] == 1
    region = module.computation("region_0.1")
    assert region.find("gt.1").attrs["direction"] == "GT"


def test_scatter_gather_slice_pad_attributes():
    scatter = parse_file(INPUTS / "scatter_add.post.hlo").computation(
        "wrapped_scatter_computation").root
    assert scatter.attrs["update_window_dims"] == (1, 2)
    assert scatter.attrs["inserted_window_dims"] == ()
    assert scatter.attrs["scatter_dims_to_operand_dims"] == (0,)
    assert scatter.attrs["index_vector_dim"] == 1
    assert scatter.attrs["to_apply"].name == "region_0.1"
    gather = parse_file(INPUTS / "gather.pre.hlo").computation("_take.1").root
    assert gather.attrs["offset_dims"] == (1,)
    assert gather.attrs["collapsed_slice_dims"] == (0,)
    assert gather.attrs["start_index_map"] == (0,)
    assert gather.attrs["slice_sizes"] == (1, 3)
    fused = parse_file(INPUTS / "misc_int.post.hlo").computation(
        "fused_computation.1")
    assert fused.find("pad.2").attrs["padding"] == [(1, 0, 1), (0, 2, 0)]
    assert fused.find("slice.2").attrs["slice"] == [(0, 7, 1), (1, 5, 2)]
    assert fused.find("slice.3").attrs["slice"] == [(0, 7, 1), (0, 8, 1)]
    assert fused.find("rev.0").attrs["dimensions"] == (0,)
    window = parse_file(INPUTS / "rms_norm_bf16.post.hlo").computation(
        "wrapped_reduce-window_computation").root.attrs["window"]
    assert window == {"size": (1, 32), "stride": (1, 32)}


def test_seed_gelu_module():
    # The GELU reproducer of the emitter design document, verbatim
    # (including its `HloModule m:` header).
    module = parse_file(INPUTS / "seed_gelu.hlo")
    assert module.name == "m"
    assert [c.name for c in module.computations] == ["gelu", "main"]
    main = module.computation("main")
    assert main.is_entry and module.entry is main
    fusion = main.root
    assert fusion.name == "fusion" and fusion.attrs["calls"].name == "gelu"
    gelu = module.computation("gelu")
    # %param exists in both computations: names are per computation.
    assert gelu.find("param").shape == Shape("bf16", (6, 512, 4096))
    assert gelu.root.name == "multiply_0"
    assert gelu.find("constant_3").literal.dtype == ml_dtypes.bfloat16
    assert float(gelu.find("constant_2").literal) == float(
        ml_dtypes.bfloat16(0.79785))
    assert gelu.find("bcast_0").attrs["dimensions"] == ()


def test_bare_fusion_computation():
    text = """
// An emitter test: only computations, no header, no ENTRY.
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fusion {
  %p0 = f32[16,32]{1,0} parameter(0)
  %c = f32[] constant(0)
  ROOT %r = f32[16]{0} reduce(%p0, %c), dimensions={1}, to_apply=%add
}
"""
    module = parse_module(text, source="/tmp/reduce_test.hlo")
    assert module.name == "reduce_test"
    assert not any(c.is_entry for c in module.computations)
    assert module.entry.name == "fusion"
    assert module.entry.root.attrs["to_apply"] is module.computation("add")


def test_forward_references_and_no_root_keyword():
    module = parse_module("""
HloModule fwd
ENTRY e {
  p = f32[4] parameter(0)
  f = f32[4] fusion(p), kind=kLoop, calls=later
  n = f32[4] negate(q)
  q = f32[4] abs(f)
}
later {
  x = f32[4] parameter(0)
  ROOT y = f32[4] exponential(x)
}
""")
    entry = module.entry
    assert entry.root.name == "q"  # no ROOT: the last instruction
    assert entry.find("n").operands == [entry.find("q")]
    assert entry.find("f").attrs["calls"] is module.computation("later")


def test_comments_signature_and_tuple_shapes():
    module = parse_module("""
HloModule t, entry_computation_layout={((f32[2]{0}, (s32[], pred[])))->f32[2]{0}}

/* block
   comment */
ENTRY %main (p: (f32[2], (s32[], pred[]))) -> f32[2] {
  %p = (f32[2]{0}, (s32[], pred[])) parameter(0)  // line comment
  %inner = (s32[], pred[]) get-tuple-element((f32[2]{0}, (s32[], pred[])) %p), index=1
  %t = token[] after-all()
  ROOT %x = f32[2]{0} get-tuple-element(%p), index=0, /*index=5*/ sharding={replicated}
}
""")
    entry = module.entry
    p = entry.parameters[0]
    assert p.shape.is_tuple
    assert p.shape.tuple_shapes[1] == Shape("", (), None,
                                            (Shape("s32", (), None),
                                             Shape("pred", (), None)))
    assert [leaf.element_type for leaf in p.shape.leaves()] == ["f32", "s32",
                                                                "pred"]
    assert entry.find("t").shape == Shape("token", ())
    assert entry.root.attrs["sharding"] == "{replicated}"
    assert str(p.shape) == "(f32[2]{0}, (s32[], pred[]))"


def test_emitter_test_style_formatting():
    # Attributes continued on the next lines, spaces inside dimension lists,
    # element-size layouts, /*index=N*/ comments inside operand lists.
    module = parse_module("""
// RUN: some_tool %s | FileCheck %s
max {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT m = s32[] maximum(a, b)
}

fusion {
  %p0 = s4[16, 8]{1,0:E(4)} parameter(0)
  %c = s32[16, 8] convert(%p0)
  %z = s32[] constant(-8)
  %r = s32[16]{0} reduce(%c, %z),
      dimensions={1},
      to_apply=max
  ROOT %t = (s32[16], s32[16,8], s32[16]) tuple(%r, /*index=1*/%c,
      /*index=2*/ %r)
}
// CHECK: something
""")
    fusion = module.entry
    assert fusion.name == "fusion"
    assert fusion.find("p0").shape == Shape("s4", (16, 8), (1, 0))
    r = fusion.find("r")
    assert r.attrs == {"dimensions": (1,), "to_apply": module.computation("max")}
    assert [o.name for o in fusion.root.operands] == ["r", "c", "r"]
    assert fusion.find("r").users == [fusion.root]


def test_layouts():
    module = parse_module("""
ENTRY e {
  a = f32[8,128]{1,0:T(8,128)} parameter(0)
  b = f32[8,128]{0,1} parameter(1)
  c = f32[] parameter(2)
  ROOT d = f32[8,128] add(a, b)
}
""")
    entry = module.entry
    assert entry.find("a").shape.layout == (1, 0)
    assert entry.find("b").shape.layout == (0, 1)
    assert not entry.find("b").shape.is_row_major
    assert entry.find("c").shape.layout is None
    assert entry.root.shape.layout is None and entry.root.shape.is_row_major


@pytest.mark.parametrize("etype", sorted(ELEMENT_TYPES))
def test_every_element_type(etype):
    scalar = "(1, -2)" if etype in ("c64", "c128") else (
        "true" if etype == "pred" else "1")
    module = parse_module(f"""
ENTRY e {{
  p = {etype}[2,3]{{1,0}} parameter(0)
  c = {etype}[] constant({scalar})
  b = {etype}[2,3] broadcast(c), dimensions={{}}
  ROOT t = ({etype}[2,3], {etype}[2,3]) tuple(p, b)
}}
""")
    p = module.entry.parameters[0]
    assert p.shape == Shape(etype, (2, 3), (1, 0))
    assert p.shape.dtype == ELEMENT_TYPES[etype]
    literal = module.entry.find("c").literal
    assert literal.dtype == ELEMENT_TYPES[etype] and literal.shape == ()


def constant(text):
    module = parse_module(f"ENTRY e {{\n  ROOT c = {text}\n}}\n")
    return module.entry.root.literal


def test_constants():
    assert constant("f32[] constant(1)") == np.float32(1)
    assert constant("f32[] constant(-inf)") == -np.inf
    assert np.isnan(constant("f32[] constant(nan)"))
    neg_nan = constant("f32[] constant(-nan)")
    assert np.isnan(neg_nan) and np.signbit(neg_nan)
    assert np.isnan(constant("f32[] constant(nan(0x7fffff))"))
    assert constant("f32[] constant(1e-05)") == np.float32(1e-05)
    assert constant("f64[] constant(-2.5e+300)") == -2.5e300
    np.testing.assert_array_equal(constant("s32[3] constant({1, 2, -3})"),
                                  np.array([1, 2, -3], np.int32))
    nested = constant("f32[2,2]{1,0} constant({ { 1, 2 }, { 3.5, 4 } })")
    np.testing.assert_array_equal(nested, [[1, 2], [3.5, 4]])
    assert nested.dtype == np.float32
    np.testing.assert_array_equal(constant("s8[2,0] constant({ {}, {} })"),
                                  np.zeros((2, 0), np.int8))
    assert constant("pred[] constant(true)") == np.True_
    np.testing.assert_array_equal(constant("pred[3] constant({true, false, 1})"),
                                  [True, False, True])
    bf = constant("bf16[2] constant({0.79785, -3})")
    assert bf.dtype == ml_dtypes.bfloat16
    assert bf[0] == ml_dtypes.bfloat16(0.79785) and bf[1] == -3
    f8 = constant("f8e4m3fn[2] constant({0.3, 448})")
    assert f8.dtype == ml_dtypes.float8_e4m3fn
    assert f8[0] == ml_dtypes.float8_e4m3fn(0.3) and float(f8[1]) == 448
    c = constant("c64[2] constant({(1, 2), (-3.5, 0)})")
    assert c.dtype == np.complex64
    np.testing.assert_array_equal(c, [1 + 2j, -3.5])
    assert constant("c128[] constant((0, -1))") == -1j
    assert constant("u64[] constant(18446744073709551615)") == 2**64 - 1
    assert constant("s64[] constant(-9223372036854775808)") == -2**63
    assert constant("s4[2] constant({-8, 7})").tolist() == [-8, 7]
    assert constant("u8[] constant(0xff)") == 255
    assert constant("f16[2] constant(f16[2] {1, 2})").tolist() == [1, 2]
    assert constant("f32[100]{0} constant({...})") is None  # elided


def test_tuple_constant():
    lit = constant("(f32[], s32[2]) constant((1.5, {3, 4}))")
    assert isinstance(lit, tuple) and lit[0] == 1.5
    assert lit[1].tolist() == [3, 4]


def test_attributes_typed():
    module = parse_module(r"""
HloModule attrs
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
b0 {
  ROOT x = f32[] parameter(0)
}
b1 {
  x = f32[] parameter(0)
  ROOT n = f32[] negate(x)
}
ENTRY e {
  p = f32[8,6] parameter(0)
  i = s32[4,1] parameter(1)
  k = s32[] parameter(2)
  g = f32[4,6] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, operand_batching_dims={}, start_indices_batching_dims={}, index_vector_dim=1, slice_sizes={1,6}, indices_are_sorted=true
  s = f32[8,6] scatter(p, i, g), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, input_batching_dims={}, scatter_indices_batching_dims={}, index_vector_dim=1, indices_are_sorted=false, unique_indices=true, to_apply=add
  rp = f32[8,6] reduce-precision(p), exponent_bits=5, mantissa_bits=10
  ds = f32[1,4] dynamic-slice(p, k, k), dynamic_slice_sizes={1,4}
  c = pred[8,6] compare(p, p), direction=GT, type=TOTALORDER
  sc = f32[] constant(2)
  cond = f32[] conditional(k, sc, sc), branch_computations={%b0, %b1}
  pd = f32[9,3] pad(p, sc), padding=1_0x-2_-1_0, metadata={op_name="jit(f)/pad" source_file="x.py" source_line=3}
  cc = f32[8,6] custom-call(p), custom_call_target="my\"target", backend_config={"a": {"b": [1, 2]}, "c": "d,e"}, api_version=API_VERSION_TYPED_FFI
  bc = f32[8,6] negate(p), backend_config="{\"x\": 1}", frontend_attributes={_xla_stream="1",b="two"}, control-predecessors={%cc, ds}, origin={{"y", 0}}, result_accuracy={tolerance={atol=0,rtol=0,ulps=1}}
  ROOT t = (f32[4,6], f32[8,6], f32[8,6], f32[1,4], pred[8,6], f32[], f32[9,3], f32[8,6], f32[8,6]) tuple(g, s, rp, ds, c, cond, pd, cc, bc)
}
""")
    e = module.entry
    g = e.find("g").attrs
    assert g["offset_dims"] == (1,) and g["operand_batching_dims"] == ()
    assert g["index_vector_dim"] == 1 and g["slice_sizes"] == (1, 6)
    assert g["indices_are_sorted"] is True
    s = e.find("s").attrs
    assert s["update_window_dims"] == (1,) and s["inserted_window_dims"] == (0,)
    assert s["scatter_dims_to_operand_dims"] == (0,)
    assert s["input_batching_dims"] == () and s["scatter_indices_batching_dims"] == ()
    assert s["indices_are_sorted"] is False and s["unique_indices"] is True
    assert s["to_apply"] is module.computation("add")
    assert e.find("rp").attrs == {"exponent_bits": 5, "mantissa_bits": 10}
    assert e.find("ds").attrs["dynamic_slice_sizes"] == (1, 4)
    assert e.find("c").attrs == {"direction": "GT", "type": "TOTALORDER"}
    cond = e.find("cond")
    assert cond.attrs["branch_computations"] == [module.computation("b0"),
                                                 module.computation("b1")]
    assert cond.called_computations == cond.attrs["branch_computations"]
    pd = e.find("pd").attrs
    assert pd["padding"] == [(1, 0, 0), (-2, -1, 0)]
    assert pd["metadata"] == {"op_name": "jit(f)/pad", "source_file": "x.py",
                              "source_line": 3}
    cc = e.find("cc").attrs
    assert cc["custom_call_target"] == 'my"target'
    assert cc["backend_config"] == '{"a": {"b": [1, 2]}, "c": "d,e"}'
    assert cc["api_version"] == "API_VERSION_TYPED_FFI"  # unknown: raw
    bc = e.find("bc").attrs
    assert bc["backend_config"] == '{"x": 1}'
    assert bc["frontend_attributes"] == {"_xla_stream": "1", "b": "two"}
    assert bc["control-predecessors"] == ("cc", "ds")
    assert bc["origin"] == '{{"y", 0}}'
    assert bc["result_accuracy"] == "{tolerance={atol=0,rtol=0,ulps=1}}"


def test_unknown_attributes_kept_raw():
    module = parse_module("""
ENTRY e {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p), some_new_attr={a=[1,2] b="x,y"}, other=enum_VALUE, dim_labels=b01f_01io->b01f, replica_groups=[2,2]<=[4]
}
""")
    attrs = module.entry.root.attrs
    assert attrs["some_new_attr"] == '{a=[1,2] b="x,y"}'
    assert attrs["other"] == "enum_VALUE"
    assert attrs["dim_labels"] == "b01f_01io->b01f"
    assert attrs["replica_groups"] == "[2,2]<=[4]"


def test_computation_names_and_execution_thread():
    module = parse_module("""
HloModule m, entry_computation_layout={()->f32[]}
%c.1 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b)
}, execution_thread="main"
ENTRY %main.5 () -> f32[] {
  %x = f32[] constant(1)
  ROOT %y = f32[] call(%x, %x), to_apply=%c.1
}
""")
    assert module.entry.name == "main.5"
    assert module.entry.root.attrs["to_apply"].name == "c.1"


# ------------------------------------------------------------------ errors

ERROR_CASES = {
    "unknown_type": ("ENTRY e {\n  p = f31[2] parameter(0)\n"
                     "  ROOT n = f31[2] negate(p)\n}\n",
                     "unknown element type 'f31'", 2, 7, "p"),
    "bad_shape": ("ENTRY e {\n  p = f32[2,x] parameter(0)\n}\n",
                  "expected a dimension size", 2, 13, "p"),
    "undefined_operand": ("ENTRY e {\n  p = f32[2] parameter(0)\n"
                          "  ROOT a = f32[2] add(p, %q)\n}\n",
                          "use of undefined instruction '%q'", 3, 26, "a"),
    "duplicate_name": ("ENTRY e {\n  p = f32[2] parameter(0)\n"
                       "  p = f32[2] negate(p)\n}\n",
                       "duplicate instruction name 'p'", 3, 3, "p"),
    "unbalanced_braces": ("ENTRY e {\n  p = f32[2] parameter(0)\n"
                          "  ROOT n = f32[2] negate(p)\n",
                          "unbalanced braces", 1, 9, None),
    "unbalanced_attribute": ("ENTRY e {\n  p = f32[2] parameter(0)\n"
                             "  ROOT n = f32[2] negate(p), x={[1}\n}\n",
                             "unbalanced brackets", 3, 35, "n"),
    "unknown_computation": ("ENTRY e {\n  p = f32[2] parameter(0)\n  ROOT f = "
                            "f32[2] fusion(p), kind=kLoop, calls=%nowhere\n}\n",
                            "unknown computation '%nowhere'", 3, 48, "f"),
    "arity": ("ENTRY e {\n  p = f32[2] parameter(0)\n"
              "  ROOT a = f32[2] add(p)\n}\n",
              "'add' takes 2 operands, got 1", 3, 19, "a"),
    "empty_text": ("", "empty HLO text", 1, 1, None),
    "only_comments": ("// nothing\n/* here */\n",
                      "no computation", 3, 1, None),
    "garbage": ("HloModule m\n\n@@@ garbage\n",
                "expected a computation name", 3, 1, None),
    "shape_mismatch": ("ENTRY e {\n  p = f32[2] parameter(0)\n"
                       "  q = f32[3] parameter(1)\n"
                       "  ROOT a = f32[2] add(p, q)\n}\n",
                       "operand 1 '%q' has dimensions [3]", 4, 8, "a"),
    "type_mismatch": ("ENTRY e {\n  p = f32[2] parameter(0)\n"
                      "  q = s32[2] parameter(1)\n"
                      "  ROOT a = f32[2] add(p, q)\n}\n",
                      "operand 1 '%q' is s32", 4, 8, "a"),
    "dynamic_dim": ("ENTRY e {\n  p = f32[<=4] parameter(0)\n}\n",
                    "dynamic dimensions", 2, 11, "p"),
    "empty_computation": ("ENTRY e {\n}\n", "has no instructions", 1, 9, None),
    "literal_shape": ("ENTRY e {\n  ROOT c = f32[3] constant({1, 2})\n}\n",
                      "does not match the shape f32[3]", 2, 28, "c"),
    "literal_range": ("ENTRY e {\n  ROOT c = s8[] constant(300)\n}\n",
                      "out of range for s8", 2, 26, "c"),
    "bad_int_list": ("ENTRY e {\n  p = f32[2] parameter(0)\n  ROOT b = f32[2,3] "
                     "broadcast(p), dimensions={a}\n}\n",
                     "expected an integer", 3, 47, "b"),
    "two_entries": ("ENTRY a {\n  ROOT c = f32[] constant(1)\n}\n"
                    "ENTRY b {\n  ROOT c = f32[] constant(1)\n}\n",
                    "more than one ENTRY", 4, 7, None),
    "tuple_index": ("ENTRY e {\n  p = (f32[], s32[]) parameter(0)\n"
                    "  ROOT g = f32[] get-tuple-element(p), index=2\n}\n",
                    "bad tuple index 2", 3, 8, "g"),
    "cycle": ("ENTRY e {\n  a = f32[] negate(b)\n  ROOT b = f32[] negate(a)\n}\n",
              "cycle", 3, 8, "b"),
    "parameter_gap": ("ENTRY e {\n  a = f32[] parameter(0)\n"
                      "  ROOT b = f32[] parameter(2)\n}\n",
                      "parameter numbers must be 0..1", 3, 8, "b"),
    "signature": ("%f (p: f32[2]) -> f32[3] {\n  ROOT p = f32[2] parameter(0)\n}\n",
                  "returns f32[3]", 1, 1, None),
    "fusion_parameters": ("f {\n  a = f32[] parameter(0)\n  ROOT b = f32[] "
                          "parameter(1)\n}\nENTRY e {\n  p = f32[] parameter(0)\n"
                          "  ROOT x = f32[] fusion(p), kind=kLoop, calls=f\n}\n",
                          "'f' takes 2 parameters", 7, 8, "x"),
    "missing_equals": ("ENTRY e {\n  p f32[] parameter(0)\n}\n",
                       "expected '='", 2, 5, "p"),
    "bad_layout": ("ENTRY e {\n  ROOT p = f32[2,3]{0,0} parameter(0)\n}\n",
                   "not a permutation", 2, 20, "p"),
    "duplicate_attribute": ("ENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = "
                            "f32[2] reverse(p), dimensions={0}, dimensions={0}\n}\n",
                            "duplicate attribute 'dimensions'", 3, 47, "r"),
    "unterminated_string": ("ENTRY e {\n  p = f32[2] parameter(0), metadata="
                            "{op_name=\"x}\n}\n", "unterminated string", 2, 46, "p"),
}


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_parse_errors(name):
    text, message, line, column, instruction = ERROR_CASES[name]
    with pytest.raises(HloParseError) as info:
        parse_module(text, source="case.hlo")
    e = info.value
    assert message in e.message
    assert (e.line, e.column) == (line, column), e
    assert e.instruction == instruction
    assert e.source == "case.hlo"
    assert str(e).startswith(f"case.hlo:{line}:{column}: ")


def test_parse_error_is_hlo_error_and_value_error():
    from xla_gpu.hlo import HloError
    with pytest.raises(HloError):
        parse_module("nonsense")
    with pytest.raises(ValueError):
        parse_module("nonsense")


# -------------------------------------------------------------------- fuzz

_TOKEN = re.compile(r'\s+|[A-Za-z_%][\w.\-%]*|-?\d+(?:\.\d+)?(?:e-?\d+)?'
                    r'|"[^"\n]*"|.', re.S)
_CHARS = list('{}()[],=%:.-_0123456789 \n\tabxTR"/*<>?')


def _mutate(text: str, rng: random.Random) -> str:
    kind = rng.randrange(8)
    if kind < 3:
        p = rng.randrange(len(text))
        if kind == 0:
            return text[:p] + text[p + 1:]
        if kind == 1:
            return text[:p] + text[p] + text[p:]
        return text[:p] + rng.choice(_CHARS) + text[p + 1:]
    tokens = _TOKEN.findall(text)
    p = rng.randrange(len(tokens))
    if kind == 3:
        del tokens[p]
    elif kind == 4:
        tokens.insert(p, tokens[p])
    elif kind == 5:
        tokens[p] = rng.choice(tokens)
    elif kind == 6:
        q = rng.randrange(len(tokens))
        tokens[p], tokens[q] = tokens[q], tokens[p]
    else:
        del tokens[p:p + rng.randrange(1, 20)]
    return "".join(tokens)


def test_fuzz_mutations_raise_only_parse_errors():
    names = ["gelu.post.hlo", "argmax.post.hlo", "scatter_add.pre.hlo",
             "misc_int.post.hlo", "dynamic_update_slice.pre.hlo",
             "seed_gelu.hlo"]
    texts = [(INPUTS / n).read_text() for n in names]
    rng = random.Random(20240501)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(500):
        text = rng.choice(texts)
        for _ in range(rng.randrange(1, 3)):
            text = _mutate(text, rng)
        try:
            parse_module(text)
            outcomes["ok"] += 1
        except HloParseError as e:
            outcomes["error"] += 1
            assert "internal parser error" not in e.message, (e, text)
            assert e.line >= 1 and e.column >= 1
    assert outcomes["error"] > 100


def test_non_string_input():
    with pytest.raises(HloParseError):
        parse_module(b"ENTRY e { ROOT c = f32[] constant(1) }")


# ---------------------------------------------------------- import boundary


def test_import_does_not_load_mlir():
    code = ("import sys, xla_gpu.hlo as h; "
            "h.evaluate(h.parse_module('ENTRY e {\\n ROOT c = f32[] constant(1)\\n}'));"
            "bad = [m for m in sys.modules if m == 'mlir' or m.startswith('mlir.')"
            " or m == 'jax' or m.startswith('jax.')]; print(bad); "
            "sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hlo_modules_import_only_numpy_and_ml_dtypes():
    import ast
    allowed = {"numpy", "ml_dtypes"} | set(sys.stdlib_module_names)
    package = REPO / "xla_gpu" / "hlo"
    for name in sorted(p.relative_to(package) for p in package.rglob("*.py")):
        tree = ast.parse((package / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: inside xla_gpu.hlo
                    continue
                roots = [node.module.split(".")[0]]
            else:
                continue
            assert set(roots) <= allowed, (name, roots)


def test_operands_written_after_their_users_are_ordered_on_parse():
    """HLO text may name an operand before the line defining it; every walk
    (clone, passes, the printer) sees operands first."""
    from xla_gpu.hlo import module_to_text, parse_module
    from xla_gpu.hlo.passes import optimize
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] multiply(x, b)
  b = f32[4] broadcast(c), dimensions={}
  c = f32[] constant(2)
  ROOT r = f32[4] add(y, x)
}
"""
    module = parse_module(text)
    names = [i.name for i in module.entry.instructions]
    assert names.index("c") < names.index("b") < names.index("y")
    assert "multiply" in module_to_text(module.clone())
    optimize(module)
