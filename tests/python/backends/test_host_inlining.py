"""The cpu target inlines a kernel's element functions (subgraphs with more
than one caller) into the emulated thread loops, and their loads and
stores join the loops' access groups, so that LLVM vectorizes the loops:
the host shared object then holds the grid's entry points only, and the
results still match the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir as mlir_ir

import xla_gpu
from xla_gpu import hlo, ir
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.backends import cpu
from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type

# A GroupNorm backward's column reduction whose input fuses an average
# pool's backward (pad + reduce-window + select): the selected window sum
# feeds both reductions, so it is a function with two callers.
POOL_GRAD_REDUCE = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  x = f32[8,16,16,32] parameter(0)
  g = f32[8,8,8,32] parameter(1)
  zero = f32[] constant(0)
  four = f32[] constant(4)
  fours = f32[8,8,8,32] broadcast(four), dimensions={}
  scaled = f32[8,8,8,32] divide(g, fours)
  padded = f32[8,17,17,32] pad(scaled, zero), padding=0_0x1_1_1x1_1_1x0_0
  window = f32[8,16,16,32] reduce-window(padded, zero), window={size=1x2x2x1}, to_apply=add
  zeros = f32[8,16,16,32] broadcast(zero), dimensions={}
  positive = pred[8,16,16,32] compare(x, zeros), direction=GT
  selected = f32[8,16,16,32] select(positive, window, zeros)
  product = f32[8,16,16,32] multiply(x, selected)
  rows = f32[8,256,32] bitcast(product)
  r0 = f32[8,32] reduce(rows, zero), dimensions={1}, to_apply=add
  negated = f32[8,16,16,32] negate(selected)
  rows1 = f32[8,256,32] bitcast(negated)
  r1 = f32[8,32] reduce(rows1, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[8,32], f32[8,32]) tuple(r0, r1)
}
ENTRY e {
  x = f32[8,16,16,32] parameter(0)
  g = f32[8,8,8,32] parameter(1)
  ROOT f = (f32[8,32], f32[8,32]) fusion(x, g), kind=kInput, calls=fused
}
"""

# An LSTM cell: the gates' pre-activation (a bias add) is sliced four ways,
# so it is a function with four callers; exp and tanh are the host's
# polynomial approximations.
LSTM_CELL = """HloModule m
fused {
  z = f32[16,512] parameter(0)
  b = f32[512] parameter(1)
  c = f32[16,128] parameter(2)
  bias = f32[16,512] broadcast(b), dimensions={1}
  pre = f32[16,512] add(z, bias)
  one = f32[] constant(1)
  ones = f32[16,128] broadcast(one), dimensions={}
  si = f32[16,128] slice(pre), slice={[0:16], [0:128]}
  sf = f32[16,128] slice(pre), slice={[0:16], [128:256]}
  sg = f32[16,128] slice(pre), slice={[0:16], [256:384]}
  so = f32[16,128] slice(pre), slice={[0:16], [384:512]}
  ni = f32[16,128] negate(si)
  ei = f32[16,128] exponential(ni)
  di = f32[16,128] add(ei, ones)
  i = f32[16,128] divide(ones, di)
  nf = f32[16,128] negate(sf)
  ef = f32[16,128] exponential(nf)
  df = f32[16,128] add(ef, ones)
  f = f32[16,128] divide(ones, df)
  g = f32[16,128] tanh(sg)
  no = f32[16,128] negate(so)
  eo = f32[16,128] exponential(no)
  do = f32[16,128] add(eo, ones)
  o = f32[16,128] divide(ones, do)
  fc = f32[16,128] multiply(f, c)
  ig = f32[16,128] multiply(i, g)
  c1 = f32[16,128] add(fc, ig)
  tc = f32[16,128] tanh(c1)
  h = f32[16,128] multiply(o, tc)
  ROOT t = (f32[16,128], f32[16,128]) tuple(c1, h)
}
ENTRY e {
  z = f32[16,512] parameter(0)
  b = f32[512] parameter(1)
  c = f32[16,128] parameter(2)
  ROOT f = (f32[16,128], f32[16,128]) fusion(z, b, c), kind=kLoop, calls=fused
}
"""


def _element_functions_left(exe, tmp_path) -> set[str]:
    """The kernel's element functions (the pipeline's private llvm.funcs)
    that its shared object still defines."""
    import ctypes
    import re
    entries = (f"{exe.spec.name}_host", f"{exe.spec.name}_host_blocks")
    names = {n for n in re.findall(r"llvm\.func (?:\w+ )*@([\w.$-]+)\(", exe.host_mlir)
             if n not in entries and not n.startswith("_mlir_ciface_")}
    assert names, "the kernel should have element functions to inline"
    path = tmp_path / f"{exe.spec.name}.so"
    path.write_bytes(exe.host_library)
    library = ctypes.CDLL(str(path))
    return {n for n in names if hasattr(library, n)}


@pytest.mark.parametrize("text", [POOL_GRAD_REDUCE, LSTM_CELL], ids=["pool_grad_reduce", "lstm_cell"])
def test_element_functions_are_inlined_and_match_the_interpreter(text, tmp_path):
    module = hlo.parse_module(text)
    spec = select_fusion(module, None)
    inputs = random_inputs(spec.computation, seed=3)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    if exe.host_library is None:
        pytest.skip("no linker: the kernel runs in the JIT")
    # Before, the subgraph with several callers stayed a function called
    # per element from the thread loop (which LLVM then left scalar).
    assert _element_functions_left(exe, tmp_path) == set()
    got = exe.run(*inputs)
    want = hlo.evaluate(spec.computation, *inputs)
    for k, (g, w, s) in enumerate(zip(got, want, spec.output_shapes)):
        mismatch = compare(np.asarray(g), np.asarray(w), s.element_type, k,
                           tolerance_type(spec.computation, s.element_type),
                           has_reduction(spec.computation))
        assert mismatch is None, mismatch


def test_past_the_budget_a_function_stays_a_call(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu, "HOST_INLINE_MAX_OPS", 1)
    exe = xla_gpu.compile(LSTM_CELL, target="cpu", cache=False)
    if exe.host_library is None:
        pytest.skip("no linker: the kernel runs in the JIT")
    assert _element_functions_left(exe, tmp_path)
    module = hlo.parse_module(LSTM_CELL)
    spec = select_fusion(module, None)
    inputs = random_inputs(spec.computation, seed=3)
    want = hlo.evaluate(spec.computation, *inputs)
    for k, (g, w, s) in enumerate(zip(exe.run(*inputs), want, spec.output_shapes)):
        assert compare(np.asarray(g), np.asarray(w), s.element_type, k,
                       tolerance_type(spec.computation, s.element_type)) is None


HOST_MODULE = """
#group = #llvm.access_group<id = distinct[0]<>>
#annotation = #llvm.loop_annotation<parallelAccesses = #group>
module {
  llvm.func @k_host_blocks(%in: !llvm.ptr, %out: !llvm.ptr, %n: i64) {
    %c0 = llvm.mlir.constant(0 : i64) : i64
    %c1 = llvm.mlir.constant(1 : i64) : i64
    llvm.br ^loop(%c0 : i64)
  ^loop(%i: i64):
    %more = llvm.icmp "slt" %i, %n : i64
    llvm.cond_br %more, ^body, ^exit
  ^body:
    %v = llvm.call @element(%in, %i) : (!llvm.ptr, i64) -> f32
    %p = llvm.getelementptr inbounds %out[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %v, %p {access_groups = [#group]} : f32, !llvm.ptr
    %next = llvm.add %i, %c1 : i64
    llvm.br ^loop(%next : i64) {loop_annotation = #annotation}
  ^exit:
    llvm.return
  }
  llvm.func @element(%in: !llvm.ptr, %i: i64) -> f32 attributes {sym_visibility = "private"} {
    %p = llvm.getelementptr inbounds %in[%i] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %v = llvm.load %p invariant : !llvm.ptr -> f32
    llvm.return %v : f32
  }
}
"""


def _functions(module) -> dict:
    return {mlir_ir.StringAttr(op.attributes["sym_name"]).value: op
            for op in module.body.operations if op.operation.name == "llvm.func"}


def test_inlined_loads_join_the_thread_loops_access_groups():
    module = mlir_ir.Module.parse(HOST_MODULE, ir.Context())
    cpu._inline_element_functions(module, "k")
    functions = _functions(module)
    element = functions["element"]
    assert "always_inline" in element.attributes
    assert "internal" in str(element.attributes["linkage"])
    assert "always_inline" not in functions["k_host_blocks"].attributes
    loads = []
    element.operation.walk(lambda op: (loads.append(op) if op.name == "llvm.load" else None)
                           or mlir_ir.WalkResult.ADVANCE)
    assert len(loads) == 1 and "access_groups" in loads[0].attributes
    store_group = str(mlir_ir.ArrayAttr(_stores(functions["k_host_blocks"])[0]
                                        .attributes["access_groups"])[0])
    assert [str(g) for g in mlir_ir.ArrayAttr(loads[0].attributes["access_groups"])] == \
        [store_group]


def _stores(func) -> list:
    stores = []
    func.operation.walk(lambda op: (stores.append(op) if op.name == "llvm.store" else None)
                        or mlir_ir.WalkResult.ADVANCE)
    return stores
