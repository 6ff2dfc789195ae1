"""WhileLoopTripCountAnnotator: the trip counts XLA's annotator finds, and
the runtime's loop that runs a known count without its condition."""

import re
import sys
from pathlib import Path
from string import Template

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.hlo.passes import optimize
from xla_gpu.hlo.passes.while_loop_trip_count import (WhileLoopTripCountAnnotator,
                                                      while_trip_count)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from program_data import load_program, program_names  # noqa: E402

LOOP = Template("""HloModule loop
cond {
  p = ($t[], f32[4]) parameter(0)
  i = $t[] get-tuple-element(p), index=0
  limit = $t[] constant($limit)
  ROOT c = pred[] compare($lhs, $rhs), direction=$direction
}
body {
  p = ($t[], f32[4]) parameter(0)
  i = $t[] get-tuple-element(p), index=0
  x = f32[4] get-tuple-element(p), index=1
  step = $t[] constant($step)
  next = $t[] add(i, step)
  y = f32[4] add(x, x)
  ROOT r = ($t[], f32[4]) tuple(next, y)
}
ENTRY e {
  x = f32[4] parameter(0)
  start = $t[] constant($start)
  init = ($t[], f32[4]) tuple(start, x)
  ROOT w = ($t[], f32[4]) while(init), condition=cond, body=body
}
""")


def _loop(start, step, direction, limit, t="s32", swap=False):
    lhs, rhs = ("limit", "i") if swap else ("i", "limit")
    return hlo.parse_module(LOOP.substitute(t=t, start=start, step=step, limit=limit,
                                            direction=direction, lhs=lhs, rhs=rhs))


def _count(module):
    (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
    found = while_trip_count(loop)
    return None if found is None else found[3]


@pytest.mark.parametrize("start, step, direction, limit, swap, expected", [
    (0, 1, "LT", 10, False, 10),      # fori_loop / scan
    (0, 3, "LT", 10, False, 4),       # 0 3 6 9
    (0, 1, "LE", 4, False, 5),
    (10, -1, "GT", 0, False, 10),
    (10, -2, "GE", 0, False, 6),      # 10 8 6 4 2 0
    (0, 2, "NE", 8, False, 4),
    (10, 1, "LT", 0, False, 0),       # never runs
    (0, 1, "GT", 10, True, 10),       # 10 > i: the constant on the left
    (0, -1, "LT", 10, False, None),   # moves away: does not stop
    (0, 2, "NE", 7, False, None),     # steps over the limit
    (0, 1, "NE", -3, False, None),
])
def test_trip_counts(start, step, direction, limit, swap, expected):
    assert _count(_loop(start, step, direction, limit, swap=swap)) == expected


def test_a_variable_that_would_wrap_around_gets_no_count():
    assert _count(_loop(0, 100, "LT", 127, t="s8")) is None     # 0 100 200: past s8
    assert _count(_loop(0, 10, "LT", 120, t="s8")) == 12     # 120 ends it, and fits
    assert _count(_loop(250, 1, "LT", 255, t="u8")) == 5


def test_loops_outside_the_pattern_get_no_count():
    text = LOOP.substitute(t="s32", start=0, step=1, limit=10, direction="LT", lhs="i",
                           rhs="limit")
    # a start that is no constant
    module = hlo.parse_module(text.replace("start = s32[] constant(0)",
                                           "start = s32[] parameter(1)"))
    assert _count(module) is None
    # the body writes the variable with something else than an add of a constant
    module = hlo.parse_module(text.replace("next = s32[] add(i, step)",
                                           "next = s32[] multiply(i, step)"))
    assert _count(module) is None
    # the condition compares with a state element, not a constant
    module = hlo.parse_module(text.replace("limit = s32[] constant(10)",
                                           "limit = s32[] get-tuple-element(p), index=0"))
    assert _count(module) is None


def test_the_annotation_is_xlas_backend_config():
    module = _loop(0, 1, "LT", 12)
    assert WhileLoopTripCountAnnotator().run(module)
    (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
    config = loop.backend_config()
    assert config["known_trip_count"] == {"n": "12"}
    assert config["known_induction_variable"] == {"tuple_index": "0"}
    assert config["known_init_step"] == {"init": "0", "step": "1"}
    assert not WhileLoopTripCountAnnotator().run(module)      # already known


def test_the_stored_programs_get_xlas_trip_counts():
    """jax's pre-optimization text through our passes against the counts
    XLA:CPU's annotator wrote into its optimized text (34 programs, 8
    loops with a count, one without)."""
    counted = 0
    for name in program_names():
        data = load_program(name)
        xla = sorted(re.findall(r'known_trip_count":\{"n":"(\d+)"',
                                (data.folder / "after_optimizations_cpu.hlo").read_text()))
        module = optimize(hlo.parse_module((data.folder / "before_optimizations.hlo")
                                           .read_text()))
        ours = sorted(i.backend_config().get("known_trip_count", {}).get("n")
                      for c in module.computations for i in c.instructions
                      if i.opcode == "while" and "known_trip_count" in i.backend_config())
        assert ours == xla, name
        counted += len(ours)
    assert counted >= 8


@pytest.mark.parametrize("name, iterations, loops", [("scan_rnn", 12, 1),
                                                     ("random_dropout", 15, 3)])
def test_a_known_count_runs_without_the_condition(tmp_path, name, iterations, loops):
    """Both executors (the native one and the thunks', a profiled run) skip
    the condition of a counted loop: one condition kernel fewer per
    iteration and one for each loop's final test than the same program with
    the counts forgotten, and the same results."""
    from xla_gpu.runtime.thunks import walk
    data = load_program(name)
    text = (data.folder / "before_optimizations.hlo").read_text()
    counted = xla_gpu.compile(text, target="cpu", cache=False)
    tested = xla_gpu.compile(text, target="cpu", cache=False)
    whiles = [t for t in walk(tested.thunks) if t.kind == "while"]
    assert len(whiles) == loops and all(t.trip_count for t in whiles)
    for t in whiles:
        t.trip_count = None
    want = tested.run(*data.inputs)
    kernels = tested.stats["kernels"]
    for run in (lambda: counted.run(*data.inputs),
                lambda: counted.run(*data.inputs, profile=tmp_path / "run.json")):
        got = run()
        assert counted.stats["while_iterations"] == iterations
        assert counted.stats["kernels"] == kernels - iterations - loops
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_random_loops_run_as_many_times_as_the_interpreter_runs_them():
    """Loops of random start, step, limit, direction and type that run (the
    step towards the limit), compiled (a counted loop runs its body the
    annotated number of times, its condition never) against the
    interpreter, which tests the condition every iteration: the counter and
    the doubled vector agree."""
    rng = np.random.default_rng(5)
    x = np.linspace(-1, 1, 4).astype(np.float32)
    directions = set()
    for _ in range(40):
        t = str(rng.choice(["s32", "s8", "u8", "s64"]))
        # (an unsigned counter only counts up: its step is positive)
        direction = str(rng.choice(["LT", "LE", "NE"] if t == "u8" else
                                   ["LT", "LE", "GT", "GE", "NE"]))
        magnitude = int(rng.integers(1, 6))
        low, high = sorted(int(v) for v in rng.integers(0 if t == "u8" else -20, 30, 2))
        if direction in ("LT", "LE") or (direction == "NE" and (t == "u8" or rng.random() < 0.5)):
            start, limit, step = low, high, magnitude
        else:
            start, limit, step = high, low, -magnitude
        if direction == "NE":   # a limit the steps land on
            limit = start + step * int(rng.integers(0, 9))
        count = _count(_loop(start, step, direction, limit, t=t))
        assert count is not None, (t, start, step, direction, limit)
        directions.add(direction)
        text = LOOP.substitute(t=t, start=start, step=step, limit=limit,
                               direction=direction, lhs="i", rhs="limit")
        want = hlo.evaluate(hlo.parse_module(text), x)
        got = xla_gpu.compile(text, target="cpu", cache=False).run(x)
        assert int(got[0]) == int(np.asarray(want[0])), (t, start, step, direction, limit)
        np.testing.assert_array_equal(got[1], np.asarray(want[1]))
        np.testing.assert_array_equal(got[1], x * np.float32(2.0) ** count)
    assert directions == {"LT", "LE", "GT", "GE", "NE"}
