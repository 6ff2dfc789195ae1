"""Buffer assignment (xla_gpu.service): dataflow values, alias rules, live
ranges, the heap packing, allocations and memory analysis.

Two whole-module checks run on every post-optimization module stored in
the repository: a brute-force check that no two arrays live at the same
time share bytes, and an execution of the module instruction by
instruction over simulated memory laid out by the assignment (each result
written to its slice, each operand read from its slice), which must give
the reference interpreter's results: a buffer reused too early changes
them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from xla_gpu.errors import HloError, ResourceError
from xla_gpu.hlo import evaluate, parse_file, parse_module
from xla_gpu.hlo.interpreter import Evaluator
from xla_gpu.runtime.buffers import Allocation
from xla_gpu.service import assign_buffers, schedule_module
from xla_gpu.service.dataflow import DataflowAnalysis, array_leaves, sequential_callees

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
from program_data import add_scaled, load_program, program_names  # noqa: E402

POST_MODULES = sorted(HERE.glob("hlo_inputs/*.post.hlo")) + \
    sorted(HERE.glob("programs/*/after_optimizations_cpu.hlo"))


def assign(text: str, **kw):
    module = parse_module(text)
    schedule = schedule_module(module)
    return module, schedule, assign_buffers(module, schedule, **kw)


def inst(module, name):
    """The instruction `name`, looked up in the ENTRY first."""
    for comp in [module.entry] + module.computations:
        for i in comp.instructions:
            if i.name == name:
                return i
    raise KeyError(name)


# ------------------------------------------------------------ dataflow

def test_forwarding_instructions_define_no_values():
    m = parse_module("""HloModule m
ENTRY e {
  p = f32[4,4] parameter(0)
  b = f32[16] bitcast(p)
  n = f32[16] negate(b)
  t = (f32[16], f32[4,4]) tuple(n, p)
  g = f32[16] get-tuple-element(t), index=0
  ROOT r = (f32[16], (f32[16], f32[4,4])) tuple(g, t)
}""")
    df = DataflowAnalysis(m)
    p, b, n, t, g, r = (inst(m, x) for x in "p b n t g r".split())
    assert df.value_at(b) is df.value_at(p)
    assert df.value_at(g) is df.value_at(n)
    assert df.value_at(t, (0,)) is df.value_at(n)
    assert df.value_at(r, (1, 1)) is df.value_at(p)
    assert not df.has_value(t) and not df.has_value(r, (1,))
    assert len(df.values) == 2           # p and n
    # Uses are real reads: negate reads p's value; tuples are positions.
    assert [u.instruction.name for u in df.value_at(p).uses] == ["n"]
    assert {i.name for i, _ in df.value_at(n).positions} == {"n", "t", "g", "r"}


def test_sizes_pred_subbyte_and_int64_overflow():
    _, _, ba = assign("""HloModule m
ENTRY e {
  p = s4[10] parameter(0)
  q = pred[7] parameter(1)
  ROOT t = (s4[10], pred[7]) tuple(p, q)
}""")
    assert [a.size for a in ba.allocations if a.kind == "parameter"] == [10, 7]
    # Each array fits in int64 bytes; together they do not.
    with pytest.raises(ResourceError, match="int64"):
        assign("""HloModule m
ENTRY e {
  p = f32[1152921504606846976] parameter(0)
  q = f32[1152921504606846976] parameter(1)
  ROOT r = f32[1152921504606846976] add(p, q)
}""")


# --------------------------------------------------------- allocations

SIMPLE = """HloModule simple
ENTRY e {
  p0 = f32[256] parameter(0)
  p1 = f32[256] parameter(1)
  a = f32[256] exponential(p0)
  b = f32[256] log(p1)
  c = f32[256] multiply(a, b)
  d = f32[256] exponential(c)
  e = f32[256] sine(d)
  k = f32[] constant(2)
  kb = f32[256] broadcast(k), dimensions={}
  ROOT t = (f32[256], f32[256]) tuple(e, kb)
}"""


def test_allocation_kinds_slices_and_memory_analysis():
    m, s, ba = assign(SIMPLE)
    kinds = [a.kind for a in ba.allocations]
    assert kinds.count("parameter") == 2 and kinds.count("output") == 2
    assert kinds.count("constant") == 1 and kinds.count("temp") <= 1
    assert ba.slice(inst(m, "p0")).allocation == 0
    assert ba.allocations[ba.slice(inst(m, "p1")).allocation].parameter == 1
    out = ba.output_slices()
    assert [index for index, _ in out] == [(0,), (1,)]
    assert ba.allocations[out[0][1].allocation].output_index == (0,)
    assert ba.slice(inst(m, "t"), (1,)) == ba.slice(inst(m, "kb"))
    assert ba.allocations[ba.slice(inst(m, "k")).allocation].constant == "k"
    ma = ba.memory_analysis()
    assert ma.argument_size_in_bytes == 2048 and ma.output_size_in_bytes == 2048
    assert ma.alias_size_in_bytes == 0 and ma.generated_code_size_in_bytes == 0
    assert ma.temp_size_in_bytes == (ba.temp_allocation.size if ba.temp_allocation else 0)
    text = ba.to_text()
    assert "allocation 0: size 1024, parameter 0" in text
    assert "maybe-live-out" in text and "HloLiveRange" in text and "Used values:" in text


def test_slice_errors_name_the_instruction():
    m, _, ba = assign(SIMPLE)
    assert not ba.has_slice(inst(m, "t"))
    with pytest.raises(HloError, match="'t'.*not materialized"):
        ba.slice(inst(m, "t"))
    with pytest.raises(HloError, match="shape index"):
        ba.slice(inst(m, "a"), (3,))


def test_no_sharing_without_elementwise_option_keeps_temps_apart():
    m, _, ba = assign(SIMPLE, share_elementwise=False)
    a, b, c, d = (ba.slice(inst(m, x)) for x in "abcd")
    assert not a.overlaps(b)             # both live when c reads them
    assert not c.overlaps(d)             # c is read while d is written
    kinds = {ba.allocations[x.allocation].kind for x in (a, b, c, d)}
    assert kinds <= {"temp", "output"}   # temporaries may use an output's bytes


def test_elementwise_output_reuses_dying_operand():
    m, _, ba = assign(SIMPLE)
    # d = exp(c): c dies at d, same shape: one buffer.
    assert ba.slice(inst(m, "d")) == ba.slice(inst(m, "c"))
    # e is an output; d dies there: d (and the chain) lives in the output.
    assert ba.slice(inst(m, "e")) == ba.slice(inst(m, "d"))


def test_layout_change_or_copy_does_not_share():
    m, _, ba = assign("""HloModule m
ENTRY e {
  p = f32[16,8]{1,0} parameter(0)
  a = f32[16,8]{1,0} exponential(p)
  b = f32[16,8]{0,1} negate(a)
  c = f32[16,8]{0,1} copy(b)
  ROOT d = f32[16,8]{0,1} sine(c)
}""")
    assert ba.slice(inst(m, "a")) != ba.slice(inst(m, "b"))
    assert ba.slice(inst(m, "b")) != ba.slice(inst(m, "c"))


def test_heap_packs_disjoint_lifetimes_and_separates_overlapping():
    m, _, ba = assign("""HloModule m
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  p = f32[1024] parameter(0)
  z = f32[] constant(0)
  a = f32[1024] exponential(p)
  ra = f32[] reduce(a, z), dimensions={0}, to_apply=add
  b = f32[1024] log(p)
  rb = f32[] reduce(b, z), dimensions={0}, to_apply=add
  c = f32[1024] sine(p)
  d = f32[1024] cosine(p)
  cd = f32[1024] add(c, d)
  rc = f32[] reduce(cd, z), dimensions={0}, to_apply=add
  ROOT t = (f32[], f32[], f32[]) tuple(ra, rb, rc)
}""", share_elementwise=False)
    sa, sb, sc, sd = (ba.slice(inst(m, x)) for x in "abcd")
    temp = ba.temp_allocation.index
    assert {sa.allocation, sb.allocation, sc.allocation, sd.allocation} == {temp}
    assert sa.overlaps(sb) or sa.overlaps(sc) or sa.overlaps(sd)   # reuse
    assert not sc.overlaps(sd)        # both read by cd
    assert all(x.offset % 64 == 0 for x in (sa, sb, sc, sd))
    # a, b and the pair c/d never live together: the heap holds 3 arrays.
    assert ba.temp_allocation.size <= 3 * 4096 + 64


# -------------------------------------------------------------- while

WHILE = """HloModule w
cond {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[8] get-tuple-element(s), index=1
  x2 = f32[8] multiply(x, x)
  ROOT r = (s32[], f32[8]) tuple(i1, x2)
}
ENTRY e {
  p = f32[8] parameter(0)
  zero = s32[] constant(0)
  i0 = s32[] copy(zero)
  x0 = f32[8] copy(p)
  init = (s32[], f32[8]) tuple(i0, x0)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT out = f32[8] get-tuple-element(w), index=1
}"""


def test_while_state_is_one_buffer_per_leaf():
    m, s, ba = assign(WHILE)
    body, cond = m.computation("body"), m.computation("cond")
    for index in ((0,), (1,)):
        where = {ba.slice(inst(m, "init"), index), ba.slice(inst(m, "w"), index),
                 ba.slice(body.parameters[0], index), ba.slice(body.root, index),
                 ba.slice(cond.parameters[0], index)}
        assert len(where) == 1, index
    # The loop result is the entry output: the loop runs in the output.
    assert ba.allocations[ba.slice(inst(m, "out")).allocation].kind == "output"
    assert [i.name for i in s.sequence(body)][-1] == "r"
    assert s.sequence("cond")[-1].name == "lt"
    ba.check()


def test_while_writing_a_read_only_parameter_needs_a_copy():
    text = WHILE.replace("  x0 = f32[8] copy(p)\n", "").replace("tuple(i0, x0)", "tuple(i0, p)")
    with pytest.raises(HloError, match="parameter.*copy"):
        assign(text)


def _two_state_loop(body: str) -> str:
    """A while loop over two f32[8] state elements with this body (its
    parameter is `s`); the condition never runs the body."""
    return """HloModule w
cond {
  s = (f32[8], f32[8]) parameter(0)
  ROOT t = pred[] constant(false)
}
body {
  s = (f32[8], f32[8]) parameter(0)
""" + body + """}
ENTRY e {
  p = f32[8] parameter(0)
  x = f32[8] exponential(p)
  y = f32[8] log(p)
  init = (f32[8], f32[8]) tuple(x, y)
  ROOT w = (f32[8], f32[8]) while(init), condition=cond, body=body
}"""


def test_while_state_swap_needs_a_copy():
    text = _two_state_loop("""  a = f32[8] get-tuple-element(s), index=0
  b = f32[8] get-tuple-element(s), index=1
  ROOT r = (f32[8], f32[8]) tuple(b, a)
""")
    with pytest.raises(HloError, match="loop state element.*copy"):
        assign(text)


def test_while_state_read_after_rewrite_needs_a_copy():
    text = _two_state_loop("""  a = f32[8] get-tuple-element(s), index=0
  a2 = f32[8] exponential(a)
  b = f32[8] get-tuple-element(s), index=1
  ab = f32[8] add(a, b), control-predecessors={a2}
  ROOT r = (f32[8], f32[8]) tuple(a2, ab)
""")
    with pytest.raises(HloError, match="still\\s+read.*'ab'"):
        assign(text)


# -------------------------------------------------------- conditional

def test_conditional_branch_results_alias_the_output():
    m, _, ba = assign("""HloModule c
b0 {
  x = f32[8] parameter(0)
  ROOT y = f32[8] exponential(x)
}
b1 {
  x = f32[8] parameter(0)
  ROOT y = f32[8] negate(x)
}
ENTRY e {
  i = s32[] parameter(0)
  p = f32[8] parameter(1)
  q = f32[8] log(p)
  c = f32[8] conditional(i, q, q), branch_computations={b0, b1}
  ROOT r = f32[8] sine(c)
}""")
    c = ba.slice(inst(m, "c"))
    assert ba.slice(m.computation("b0").root) == c == ba.slice(m.computation("b1").root)
    # Branch parameters are the conditional's operands.
    assert ba.slice(m.computation("b0").parameters[0]) == ba.slice(inst(m, "q"))
    ba.check()


# ------------------------------------------------------------ in place

DUS = """HloModule d
fused_dus {
  p0 = f32[16,8] parameter(0)
  p1 = f32[2,8] parameter(1)
  p2 = s32[] parameter(2)
  z = s32[] constant(0)
  ROOT u = f32[16,8] dynamic-update-slice(p0, p1, p2, z)
}
ENTRY e {
  a = f32[16,8] parameter(0)
  upd = f32[2,8] parameter(1)
  i = s32[] parameter(2)
  buf = f32[16,8] exponential(a)
  f = f32[16,8] fusion(buf, upd, i), kind=kLoop, calls=fused_dus
  %READER%
}"""


def test_in_place_dus_fusion_shares_a_dying_operand():
    m, _, ba = assign(DUS.replace("%READER%", "ROOT out = f32[16,8] sine(f)"))
    f, buf = inst(m, "f"), inst(m, "buf")
    assert ba.slice(f) == ba.slice(buf)
    assert ba.in_place_operands(f) == [(0, (), (), True)]


def test_in_place_dus_does_not_share_an_operand_read_later():
    m, s, ba = assign(DUS.replace("%READER%", """later = f32[16,8] cosine(buf), control-predecessors={f}
  ROOT out = (f32[16,8], f32[16,8]) tuple(f, later)"""))
    f, buf = inst(m, "f"), inst(m, "buf")
    seq = [i.name for i in s.sequence(m.entry)]
    assert seq.index("later") > seq.index("f")
    assert not ba.slice(f).overlaps(ba.slice(buf))
    assert ba.in_place_operands(f) == [(0, (), (), False)]
    ba.check()


def test_in_place_dus_on_a_parameter_does_not_share():
    m, _, ba = assign(DUS.replace("buf = f32[16,8] exponential(a)", "")
                      .replace("fusion(buf,", "fusion(a,")
                      .replace("%READER%", "ROOT out = f32[16,8] sine(f)"))
    assert ba.in_place_operands(inst(m, "f")) == [(0, (), (), False)]
    assert ba.slice(inst(m, "f")).allocation != ba.slice(inst(m, "a")).allocation


def test_custom_call_output_to_operand_aliasing():
    text = """HloModule cc
ENTRY e {
  p = f32[32] parameter(0)
  x = f32[32] exponential(p)
  y = f32[32] custom-call(x), custom_call_target="inplace", output_to_operand_aliasing={{}: (0, {})}
  ROOT z = f32[32] negate(y)
}"""
    m, _, ba = assign(text)
    assert ba.slice(inst(m, "y")) == ba.slice(inst(m, "x"))
    assert ba.in_place_operands(inst(m, "y")) == [(0, (), (), True)]
    bad = text.replace("{{}: (0, {})}", "{{}: (3, {})}")
    with pytest.raises(HloError, match="operand 3"):
        assign(bad)


def test_donated_parameter_holds_its_output():
    m, _, ba = assign("""HloModule don, input_output_alias={ {0}: (0, {}, may-alias) }
ENTRY e {
  p = f32[64] parameter(0)
  g = f32[64] parameter(1)
  u = f32[64] subtract(p, g)
  ROOT t = (f32[64], f32[64]) tuple(u, g)
}""")
    a = ba.allocations[ba.slice(inst(m, "u")).allocation]
    assert a.kind == "parameter" and a.parameter == 0 and a.output_index == (0,)
    g = ba.allocations[ba.slice(inst(m, "g")).allocation]
    assert g.kind == "parameter" and g.output_index == (1,)   # forwarded
    ma = ba.memory_analysis()
    assert ma.alias_size_in_bytes == 512 and ma.temp_size_in_bytes == 0
    assert len(ba.donations) == 1


def test_donation_skipped_when_parameter_read_after_output_written():
    text = """HloModule don, input_output_alias={ {0}: (0, {}, %KIND%) }
ENTRY e {
  p = f32[64] parameter(0)
  u = f32[64] exponential(p)
  v = f32[64] log(p), control-predecessors={u}
  ROOT t = (f32[64], f32[64]) tuple(u, v)
}"""
    m, _, ba = assign(text.replace("%KIND%", "may-alias"))
    assert ba.allocations[ba.slice(inst(m, "u")).allocation].kind == "output"
    assert ba.donations == []
    with pytest.raises(HloError, match="must alias"):
        assign(text.replace("%KIND%", "must-alias"))


# --------------------------------------------- every stored module: checks

def _brute_force_no_overlap(ba) -> int:
    """No two values of different buffers share bytes while both live;
    touching live ranges only where the later one's writer reads the
    earlier (a legal write-over). Returns the pairs checked."""
    df, live = ba.dataflow, ba.live_ranges
    entries = []
    for value in df.values:
        s = ba.slice(value.positions[0][0], value.index)
        entries.append((value, s, live.range_of(value)))
    checked = 0
    for i, (va, sa, ra) in enumerate(entries):
        for vb, sb, rb in entries[i + 1:]:
            if ba.alias.same_buffer(va, vb) or sa.size == 0 or sb.size == 0 or \
                    not sa.overlaps(sb):
                continue
            checked += 1
            if ra.end < rb.start or rb.end < ra.start:
                continue
            first, second = (va, vb) if ra.start <= rb.start else (vb, va)
            r1, r2 = live.range_of(first), live.range_of(second)
            writer = second.instruction
            touching = r1.end == r2.start and live.flattened[r2.start] is writer
            reads = any(o is pos for o in writer.operands for pos, _ in first.positions)
            assert touching and reads, (
                f"{first.name()} [{r1.start},{r1.end}] and {second.name()} "
                f"[{r2.start},{r2.end}] overlap in bytes {sa} / {sb}")
    return checked


def _write(memory, s, array, shape):
    data = np.ascontiguousarray(_to_physical(np.asarray(array, dtype=shape.dtype), shape))
    raw = data.view(np.uint8).reshape(-1)
    assert raw.size == s.size
    memory[s.allocation][s.offset:s.offset + s.size] = raw


def _read(memory, s, shape):
    raw = memory[s.allocation][s.offset:s.offset + s.size].copy()
    return _from_physical(raw.view(shape.dtype), shape)


def _to_physical(x, shape):
    if shape.layout is None or shape.is_row_major:
        return x.reshape(-1)
    return np.transpose(x, tuple(reversed(shape.layout))).reshape(-1)


def _from_physical(buf, shape):
    if shape.layout is None or shape.is_row_major:
        return buf.reshape(shape.dims)
    major_to_minor = tuple(reversed(shape.layout))
    arr = buf.reshape([shape.dims[d] for d in major_to_minor])
    return np.transpose(arr, np.argsort(major_to_minor))


def _run_over_assignment(module, schedule, ba, args):
    """Executes the module instruction by instruction, every array in the
    bytes the assignment gives it."""
    memory = {a.index: np.zeros(a.size, np.uint8) for a in ba.allocations}
    ev = Evaluator()

    def value_of(operand):
        def build(index, shape):
            if shape.is_tuple:
                return tuple(build(index + (k,), sub) for k, sub in enumerate(shape.tuple_shapes))
            if shape.element_type == "token":
                return np.zeros((), np.bool_)
            return _read(memory, ba.slice(operand, index), shape)
        return build((), operand.shape)

    def store(inst, value):
        for index, shape in array_leaves(inst.shape):
            leaf = value
            for k in index:
                leaf = leaf[k]
            _write(memory, ba.slice(inst, index), leaf, shape)

    def run(comp):
        for inst in schedule.sequence(comp):
            op = inst.opcode
            if op in ("bitcast", "get-tuple-element", "tuple", "optimization-barrier",
                      "domain", "add-dependency"):
                continue
            if op == "parameter":
                if comp is module.entry:
                    store(inst, args[inst.parameter_number])
                continue
            if op == "while":
                callees = dict(sequential_callees(inst))
                for _ in range(100_000):  # a clobbered counter must not hang the test
                    run(callees["condition"])
                    if not bool(value_of(callees["condition"].root)):
                        break
                    run(callees["body"])
                else:
                    raise AssertionError(f"while '{inst.name}' does not terminate")
                continue
            if op == "conditional":
                branches = [c for _, c in sequential_callees(inst)]
                selector = value_of(inst.operands[0])
                if selector.dtype == np.bool_:
                    branch = branches[0] if bool(selector) else branches[1]
                else:
                    k = int(selector)
                    branch = branches[k if 0 <= k < len(branches) else -1]
                run(branch)
                continue
            if op == "call":
                run(sequential_callees(inst)[0][1])
                continue
            operands = [value_of(o) for o in inst.operands]
            store(inst, ev.eval_instruction(inst, operands, None))

    with np.errstate(all="ignore"):
        run(module.entry)
    return [_read(memory, s, leaf_shape) for (_, s), (_, leaf_shape)
            in zip(ba.output_slices(), array_leaves(module.entry.root.shape))]


def _inputs_for(path: Path, module):
    if path.parent.parent.name == "programs":
        return load_program(path.parent.name).inputs
    rng = np.random.default_rng(0)
    args = []
    for p in module.entry.parameters:
        s = p.shape
        if s.element_type.startswith(("s", "u")):
            args.append(rng.integers(0, 3, s.dims).astype(s.dtype))
        elif s.element_type == "pred":
            args.append(rng.integers(0, 2, s.dims).astype(bool))
        else:
            args.append(rng.standard_normal(s.dims).astype(s.dtype))
    return args


@pytest.fixture
def ffi_handler():
    """The ffi_call program's custom call, for the interpreter."""
    from xla_gpu.hlo import interpreter
    interpreter.register_custom_call("xla_gpu_test_add_scaled", add_scaled)
    yield
    interpreter.unregister_custom_call("xla_gpu_test_add_scaled")


@pytest.mark.parametrize("path", POST_MODULES,
                         ids=[f"{p.parent.name}/{p.name}" for p in POST_MODULES])
def test_stored_module_assignment_is_sound(path, ffi_handler):
    module = parse_file(str(path))
    schedule = schedule_module(module)
    ba = assign_buffers(module, schedule)
    _brute_force_no_overlap(ba)
    ba.check()
    for a in ba.allocations:
        assert Allocation.from_dict(a.to_dict()) == a
    args = _inputs_for(path, module)
    expected = evaluate(module, *args)
    actual = _run_over_assignment(module, schedule, ba, args)
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_array_equal(a, e, err_msg=f"output {k}")


def test_temp_memory_within_xla_on_stored_programs():
    """Our temp bytes next to XLA:CPU's for the same optimized module; the
    issue's goal is at most 1.25x. (XLA:CPU materializes tuples, so ours
    are often lower.)"""
    worse = []
    for name in program_names():
        prog = load_program(name)
        module = parse_file(str(prog.after_path))
        ba = assign_buffers(module, schedule_module(module))
        ours = ba.memory_analysis().temp_size_in_bytes
        xla = prog.xla_memory["temp_size_in_bytes"]
        if ours > 1.25 * xla:
            worse.append(f"{name}: {ours} > 1.25 x {xla}")
    assert not worse, worse


def test_forwarded_parameter_and_constant_outputs():
    m, _, ba = assign("""HloModule fwd
ENTRY e {
  p = f32[16] parameter(0)
  k = f32[3] constant({1, 2, 3})
  ROOT t = (f32[16], f32[16], f32[3]) tuple(p, p, k)
}""")
    out = dict(ba.output_slices())
    assert out[(0,)] == out[(1,)] == ba.slice(inst(m, "p"))
    param = ba.allocations[out[(0,)].allocation]
    assert param.kind == "parameter" and param.output_index == (0,)
    const = ba.allocations[out[(2,)].allocation]
    assert const.kind == "constant" and const.constant == "k" and const.output_index == (2,)
    assert ba.temp_allocation is None
    ma = ba.memory_analysis()
    assert ma.argument_size_in_bytes == 64 and ma.alias_size_in_bytes == 64


def test_unfused_dynamic_update_slice_and_scatter_write_in_place():
    m, _, ba = assign("""HloModule unfused
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  p = f32[8,4] parameter(0)
  u = f32[1,4] parameter(1)
  i = s32[] parameter(2)
  idx = s32[2,1] parameter(3)
  upd = f32[2,4] parameter(4)
  x = f32[8,4] exponential(p)
  z = s32[] constant(0)
  d = f32[8,4] dynamic-update-slice(x, u, i, z)
  s = f32[8,4] scatter(d, idx, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  ROOT r = f32[8,4] negate(s)
}""")
    assert ba.slice(inst(m, "d")) == ba.slice(inst(m, "x")) == ba.slice(inst(m, "s"))
    assert ba.in_place_operands(inst(m, "s")) == [(0, (), (), True)]


# A loop fusion with two outputs: `sn` does not read `t`, `o` does. The
# kernel loads its parameters as invariant memory, which the code generator
# may load after a store; were `sn` written over `t`'s buffer, `o` could read
# the sine instead of `t`.
TWO_OUTPUTS_ONE_READER = """HloModule two_outputs_one_reader

negate_it {
  q = f32[4] parameter(0)
  ROOT n = f32[4] negate(q)
}

two_outputs {
  x = f32[4] parameter(0)
  s = f32[] parameter(1)
  t = f32[4] parameter(2)
  cs = f32[] cosine(s)
  b = f32[4] broadcast(cs), dimensions={}
  m = f32[4] multiply(x, b)
  sn = f32[4] sine(m)
  c = f32[4] cosine(m)
  tb = f32[4] multiply(t, b)
  u = f32[4] multiply(tb, c)
  w = f32[4] multiply(t, sn)
  o = f32[4] subtract(u, w)
  ROOT r = (f32[4], f32[4]) tuple(sn, o)
}

ENTRY e {
  x = f32[4] parameter(0)
  s = f32[] parameter(1)
  y = f32[4] parameter(2)
  t = f32[4] fusion(y), kind=kLoop, calls=negate_it
  ROOT f = (f32[4], f32[4]) fusion(x, s, t), kind=kLoop, calls=two_outputs
}"""


def test_multi_output_fusion_shares_an_operand_only_with_its_sole_reader():
    m, _, ba = assign(TWO_OUTPUTS_ONE_READER)
    f, t = inst(m, "f"), inst(m, "t")
    # Output 0 never reads t: writing it over t would race output 1's read.
    assert not ba.slice(f, (0,)).overlaps(ba.slice(t))
    ba.check()


def test_multi_output_fusion_over_a_dying_operand_matches_the_interpreter():
    import xla_gpu
    rng = np.random.RandomState(3)
    args = (rng.randn(4).astype(np.float32), np.float32(0.7),
            rng.randn(4).astype(np.float32))
    want = evaluate(parse_module(TWO_OUTPUTS_ONE_READER), *args)
    got = xla_gpu.compile(TWO_OUTPUTS_ONE_READER, target="cpu", cache=False,
                          optimize=False).run(*args)
    for w, g in zip(want, got):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def _placements(ba) -> list:
    """Each buffer's values (by name and index) and where it is placed."""
    named: dict[int, list[str]] = {}
    for v in ba.dataflow.values:
        named.setdefault(ba.alias.find(v), []).append(f"{v.instruction.name}{tuple(v.index)}")
    return sorted((sorted(named[root]), place) for root, place in ba._placement.items())


def test_output_reuse_decided_without_asking_every_occupant(monkeypatch):
    """A temporary skips an output or donated allocation whose occupants it
    overlaps by more than a touch (`_Occupancy.touching`), without asking
    `_interferes` of each; the placements are those of asking every
    occupant it meets."""
    from xla_gpu.service import buffer_assignment as module_under_test
    occupancy = module_under_test._Occupancy

    def every_occupant(self, intervals):
        met = []
        for iv in intervals:
            for start, end, root in zip(self.starts, self.ends, self.roots):
                if start <= iv.end and iv.start <= end and root not in met:
                    met.append(root)
        return met

    reused = 0
    for path in POST_MODULES:
        module = parse_file(str(path))
        schedule = schedule_module(module)
        fast = assign_buffers(module, schedule)
        with monkeypatch.context() as m:
            m.setattr(occupancy, "touching", every_occupant)
            plain = assign_buffers(module, schedule)
        assert _placements(fast) == _placements(plain), path.name
        assert [a.to_dict() for a in fast.allocations] == \
            [a.to_dict() for a in plain.allocations], path.name
        outputs = {a.index for a in fast.allocations if a.kind in ("output", "parameter")}
        reused += sum(1 for allocation, _ in fast._placement.values()
                      if allocation in outputs) - len(outputs)
    assert reused > 0   # some temporaries did go to an output's allocation
