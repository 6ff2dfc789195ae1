"""Scheduling (xla_gpu.service.schedule_module): valid orders, control
dependencies, the memory-minimizing choice, memory limits and
rematerialization."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xla_gpu.errors import HloError, ResourceError
from xla_gpu.hlo import evaluate, parse_file, parse_module
from xla_gpu.service import assign_buffers, schedule_module
from xla_gpu.service.dataflow import sequential_callees

HERE = Path(__file__).resolve().parents[1]
POST_MODULES = sorted(HERE.glob("hlo_inputs/*.post.hlo")) + \
    sorted(HERE.glob("programs/*/after_optimizations_cpu.hlo"))
PRE_MODULES = sorted(HERE.glob("programs/*/before_optimizations.hlo"))


def _check_valid(module, schedule):
    expected = [module.entry]
    k = 0
    while k < len(expected):
        for inst in expected[k].instructions:
            expected.extend(c for _, c in sequential_callees(inst))
        k += 1
    assert {c.name for c in schedule.computations} == {c.name for c in expected}
    for comp in expected:
        seq = schedule.sequence(comp)
        assert sorted(map(id, seq)) == sorted(map(id, comp.instructions)), comp.name
        position = {id(i): t for t, i in enumerate(seq)}
        by_name = {i.name: i for i in seq}
        for inst in seq:
            for op in inst.operands:
                assert position[id(op)] < position[id(inst)], (comp.name, inst.name)
            for name in inst.attrs.get("control-predecessors") or ():
                assert position[id(by_name[name])] < position[id(inst)], inst.name


@pytest.mark.parametrize("path", POST_MODULES + PRE_MODULES,
                         ids=[f"{p.parent.name}/{p.name}" for p in POST_MODULES + PRE_MODULES])
def test_schedule_is_valid_on_stored_modules(path):
    module = parse_file(str(path))
    schedule = schedule_module(module)
    _check_valid(module, schedule)
    assert schedule.peak_bytes > 0
    assert set(schedule.algorithms.values()) <= {"list", "dfs", "post-order", "module"}
    assert "peak" in schedule.to_text()


def test_fusion_bodies_are_not_scheduled():
    module = parse_file(str(HERE / "hlo_inputs" / "dynamic_update_slice.post.hlo"))
    schedule = schedule_module(module)
    with pytest.raises(KeyError, match="not scheduled"):
        schedule.sequence(module.computation("fused_computation"))
    with pytest.raises(KeyError, match="no sequential computation"):
        schedule.sequence("nope")


# Text order is the worst one: both large temporaries live at once.
TWO_CHAINS = """HloModule chains
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  p = f32[1024] parameter(0)
  z = f32[] constant(0)
  a = f32[1024] exponential(p)
  b = f32[1024] log(p)
  c = f32[1024] sine(p)
  ra = f32[] reduce(a, z), dimensions={0}, to_apply=add
  rb = f32[] reduce(b, z), dimensions={0}, to_apply=add
  rc = f32[] reduce(c, z), dimensions={0}, to_apply=add
  ROOT t = (f32[], f32[], f32[]) tuple(ra, rb, rc)
}"""


def test_memory_minimizing_order_beats_the_text_order():
    module = parse_module(TWO_CHAINS)
    schedule = schedule_module(module)
    seq = [i.name for i in schedule.sequence(module.entry)]
    # One 4 KiB temporary at a time: each reduce right after its producer.
    for producer, reducer in (("a", "ra"), ("b", "rb"), ("c", "rc")):
        assert seq.index(reducer) == seq.index(producer) + 1, seq
    # parameter + one temporary + the scalars
    assert schedule.peak_bytes <= 4096 + 4096 + 4 * 4
    assert schedule.algorithms[module.entry.name] != "module"


def test_control_predecessors_are_honored():
    text = TWO_CHAINS.replace("c = f32[1024] sine(p)",
                              "c = f32[1024] sine(p), control-predecessors={a, b}")
    module = parse_module(text)
    seq = [i.name for i in schedule_module(module).sequence(module.entry)]
    assert seq.index("c") > seq.index("a") and seq.index("c") > seq.index("b")


def test_control_cycle_is_an_error():
    text = TWO_CHAINS.replace("a = f32[1024] exponential(p)",
                              "a = f32[1024] exponential(p), control-predecessors={ra}")
    with pytest.raises(HloError, match="cycle"):
        schedule_module(parse_module(text))


def test_while_body_peak_counts_in_the_caller():
    module = parse_module("""HloModule w
cond {
  s = (s32[], f32[256]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[256]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[256] get-tuple-element(s), index=1
  big = f32[256,16] broadcast(x), dimensions={0}
  y = f32[256,16] reverse(big), dimensions={1}
  zero = f32[] constant(0)
  r = f32[256] reduce(y, zero), dimensions={1}, to_apply=add
  ROOT t = (s32[], f32[256]) tuple(i1, r)
}
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  p = f32[256] parameter(0)
  z = s32[] constant(0)
  i0 = s32[] copy(z)
  x0 = f32[256] copy(p)
  init = (s32[], f32[256]) tuple(i0, x0)
  w = (s32[], f32[256]) while(init), condition=cond, body=body
  ROOT o = f32[256] get-tuple-element(w), index=1
}""")
    schedule = schedule_module(module)
    assert schedule.peaks["body"] >= 2 * 256 * 16 * 4
    assert schedule.peak_bytes >= schedule.peaks["body"] + 2 * 1024


def test_long_chains_need_no_recursion():
    lines = ["HloModule long", "ENTRY e {", "  x0 = f32[8] parameter(0)"]
    n = 5000
    for k in range(1, n + 1):
        lines.append(f"  x{k} = f32[8] {'negate' if k % 2 else 'exponential'}(x{k - 1})")
    lines[-1] = lines[-1].replace(f"  x{n} =", f"  ROOT x{n} =")
    lines.append("}")
    module = parse_module("\n".join(lines))
    schedule = schedule_module(module)
    assert len(schedule.sequence(module.entry)) == n + 1
    assignment = assign_buffers(module, schedule)
    # Every link writes over the one before: no temporaries at all.
    assert assignment.memory_analysis().temp_size_in_bytes == 0


# ----------------------------------------------------- memory limit, remat

# `big` is read early (r1) and, by a control dependency, late (r3): it would
# live across the expensive middle (e1, m1) unless recomputed.
REMAT = """HloModule remat
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY e {
  p = f32[] parameter(0)
  x = f32[256] parameter(1)
  big = f32[256,64] broadcast(p), dimensions={}
  zero = f32[] constant(0)
  r1 = f32[256] reduce(big, zero), dimensions={1}, to_apply=add
  e1 = f32[256,64] broadcast(x), dimensions={0}, control-predecessors={r1}
  m1 = f32[256,64] multiply(e1, e1)
  r2 = f32[256] reduce(m1, zero), dimensions={1}, to_apply=add
  r3 = f32[256] reduce(big, zero), dimensions={1}, to_apply=add, control-predecessors={r2}
  s = f32[256] add(r2, r3)
  ROOT t = (f32[256], f32[256]) tuple(r1, s)
}"""


def test_memory_limit_refused_with_peak_and_limit():
    module = parse_module(REMAT)
    with pytest.raises(ResourceError) as err:
        schedule_module(module, memory_limit=1000)
    message = str(err.value)
    assert "1000" in message and "peak" in message and "remat" in message
    with pytest.raises(ValueError, match="memory_limit"):
        schedule_module(parse_module(REMAT), memory_limit=-5)


def test_rematerialization_fits_the_limit_and_keeps_results():
    reference = parse_module(REMAT)
    args = [np.float32(1.5), np.linspace(-1, 1, 256, dtype=np.float32)]
    expected = evaluate(reference, *args)
    unlimited = schedule_module(reference).peak_bytes

    module = parse_module(REMAT)
    limit = unlimited - 32 * 1024
    schedule = schedule_module(module, memory_limit=limit)
    assert schedule.peak_bytes <= limit < unlimited
    assert schedule.rematerialized == ["big.remat"]
    clone = next(i for i in module.entry.instructions if i.name == "big.remat")
    assert clone.opcode == "broadcast"
    assert [u.name for u in clone.users] == ["r3"]
    _check_valid(module, schedule)
    seq = [i.name for i in schedule.sequence(module.entry)]
    assert seq.index("r2") < seq.index("big.remat") < seq.index("r3")
    for got, want in zip(evaluate(module, *args), expected):
        np.testing.assert_array_equal(got, want)
    assignment = assign_buffers(module, schedule)
    assignment.check()


def test_no_limit_no_change():
    module = parse_module(REMAT)
    before = len(module.entry.instructions)
    schedule = schedule_module(module, memory_limit=10**9)
    assert schedule.rematerialized == [] and len(module.entry.instructions) == before


def test_service_imports_no_mlir():
    """Scheduling and buffer assignment run where no compiler is installed."""
    import subprocess
    import sys
    code = ("import sys, xla_gpu.service as s; from xla_gpu.hlo import parse_module\n"
            "m = parse_module('HloModule m\\nENTRY e { p = f32[4] parameter(0)\\n"
            " ROOT n = f32[4] negate(p) }')\n"
            "s.assign_buffers(m, s.schedule_module(m))\n"
            "print(any(k == 'mlir' or k.startswith('mlir.') for k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
