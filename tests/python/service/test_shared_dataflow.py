"""Buffer assignment reusing the schedule's dataflow analysis (what the
driver does): the same assignment as with an analysis of its own, and the
analysis rebuilt where reusing it would be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_gpu.errors import HloError
from xla_gpu.hlo import parse_file, parse_module
from xla_gpu.service import assign_buffers, schedule_module

HERE = Path(__file__).resolve().parents[1]
POST_MODULES = sorted(HERE.glob("hlo_inputs/*.post.hlo"))[:6] + \
    sorted(HERE.glob("programs/*/after_optimizations_cpu.hlo"))[:6]


@pytest.mark.parametrize("path", POST_MODULES, ids=lambda p: p.stem)
def test_schedule_dataflow_gives_the_same_assignment(path):
    module = parse_file(path)
    schedule = schedule_module(module)
    assert schedule.dataflow is not None and schedule.dataflow.module is module
    reused = assign_buffers(module, schedule, dataflow=schedule.dataflow)
    fresh = assign_buffers(module, schedule)
    assert reused.to_text() == fresh.to_text()


_SHARED_CALLS = """
HloModule m
f {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}
ENTRY e {
  p = f32[4] parameter(0)
  a = f32[4] call(p), to_apply=f
  b = f32[4] call(a), to_apply=f
  ROOT r = f32[4] add(a, b)
}
"""


def test_shared_calls_are_refused_with_the_schedule_analysis_too():
    # The schedule's analysis allows a computation run by two calls; the
    # assignment's must not, so it is built anew and refuses the module.
    module = parse_module(_SHARED_CALLS)
    schedule = schedule_module(module)
    assert schedule.dataflow._shared
    with pytest.raises(HloError, match="one caller"):
        assign_buffers(module, schedule)
    with pytest.raises(HloError, match="one caller"):
        assign_buffers(module, schedule, dataflow=schedule.dataflow)


def test_another_modules_analysis_is_not_used():
    text = """
HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}
"""
    module = parse_module(text)
    other = parse_module(text.replace("ROOT n = f32[4] negate(p)",
                                      "e = f32[4] exponential(p)\n  ROOT n = f32[4] negate(e)"))
    schedule = schedule_module(module)
    foreign = schedule_module(other).dataflow
    assert assign_buffers(module, schedule, dataflow=foreign).to_text() == \
        assign_buffers(module, schedule).to_text()
