"""Profiles: traces of compiles and runs in the Chrome trace-event format,
and the progress line of long compiles."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import _progress, _trace
from xla_gpu.errors import ArgumentError
from xla_gpu.runtime.thunks import walk

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mlp_train_step.hlo"

# A loop of three iterations around a conditional, then a reduction: the
# kinds of thunks that hold others.
LOOP_PROGRAM = """
HloModule loop_and_branch, entry_computation_layout={(f32[64]{0})->f32[]}

cond {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}

double {
  p = f32[64] parameter(0)
  ROOT d = f32[64] add(p, p)
}

negate {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}

body {
  s = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[64] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  two = s32[] constant(2)
  odd = s32[] remainder(i, two)
  zero = s32[] constant(0)
  even = pred[] compare(odd, zero), direction=EQ
  y = f32[64] conditional(even, x, x), true_computation=double, false_computation=negate
  e = f32[64] exponential(y)
  z = f32[64] multiply(e, x)
  ROOT t = (s32[], f32[64]) tuple(i1, z)
}

ENTRY main {
  x = f32[64] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[64]) tuple(zero, x)
  w = (s32[], f32[64]) while(init), condition=cond, body=body
  v = f32[64] get-tuple-element(w), index=1
  c = f32[] constant(0)
  ROOT s = f32[] reduce(v, c), dimensions={0}, to_apply=add
}
"""


def check_trace(data: dict) -> list[dict]:
    """The trace is what the trace-event format's viewers load: a
    traceEvents list of complete ("X") and metadata ("M") events with the
    fields each needs, every process and thread named, and the events of
    each thread properly nested (an event that starts inside another ends
    inside it). Returns the complete events."""
    assert isinstance(data, dict) and isinstance(data.get("traceEvents"), list)
    names = {}
    complete = []
    for event in data["traceEvents"]:
        assert event["ph"] in ("X", "M"), event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert isinstance(event["name"], str) and event["name"]
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name")
            names[(event["name"], event["pid"], event["tid"] if
                   event["name"] == "thread_name" else 0)] = event["args"]["name"]
            continue
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0
        assert isinstance(event.get("cat"), str)
        complete.append(event)
    by_thread = defaultdict(list)
    for event in complete:
        assert ("process_name", event["pid"], 0) in names, event
        assert ("thread_name", event["pid"], event["tid"]) in names, event
        by_thread[(event["pid"], event["tid"])].append(event)
    for events in by_thread.values():
        # In whole nanoseconds, as the trace writes them.
        spans = sorted((round(e["ts"] * 1000), -round(e["dur"] * 1000), e["name"])
                       for e in events)
        open_ends: list[int] = []
        for start, minus_length, name in spans:
            end = start - minus_length
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], \
                f"event {name!r} overlaps its parent without nesting"
            open_ends.append(end)
    return complete


def inside(child: dict, parent: dict) -> bool:
    return parent["ts"] <= child["ts"] and \
        child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 1e-3


def test_a_profiled_run_records_every_thunk_nested_as_they_run(tmp_path):
    exe = xla_gpu.compile(LOOP_PROGRAM, target="cpu")
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    expected = exe.run(x)
    path = tmp_path / "run.json"
    got = exe.run(x, profile=str(path))
    np.testing.assert_array_equal(got[0], expected[0])
    events = check_trace(json.loads(path.read_text()))
    assert {e["pid"] for e in events} == {_trace.RUN_PROCESS}
    (run,) = [e for e in events if e["cat"] == "run"]
    names = Counter(e["name"] for e in events)
    # Every thunk, nested ones included, ran at least once (but the
    # condition of the loop, whose trip count is known); the loop's three
    # iterations each appear, holding their branch.
    (counted,) = [t for t in walk(exe.thunks) if t.kind == "while"]
    assert counted.trip_count == 3
    skipped = {t.name for t in walk(counted.condition)}
    for thunk in walk(exe.thunks):
        if thunk.name not in skipped:
            assert names[thunk.name] >= 1, f"thunk {thunk.name} ({thunk.kind}) not in the trace"
    assert not skipped & set(names)
    iterations = [e for e in events if e["cat"] == "while_iteration"]
    assert [e["args"]["iteration"] for e in iterations] == [0, 1, 2]
    (loop,) = [e for e in events if e["cat"] == "while"]
    assert all(inside(e, loop) for e in iterations)
    branches = [e for e in events if e["cat"] == "conditional"]
    assert len(branches) == 3 and all(any(inside(b, it) for it in iterations)
                                      for b in branches)
    # The top-level thunks lie within the run, one after another.
    top = sorted((e for e in events if e is not run and not any(
        inside(e, o) for o in events if o is not e and o is not run and o["dur"] > e["dur"])),
        key=lambda e: e["ts"])
    assert all(inside(e, run) for e in top)
    assert sum(e["dur"] for e in top) <= run["dur"] + 1e-3
    for a, b in zip(top, top[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert kernels and all("launch" in e["args"] and "bytes_read" in e["args"]
                           for e in kernels)


def test_a_profiled_compile_records_passes_and_kernel_stages_on_their_threads(tmp_path):
    path = tmp_path / "compile.json"
    text = EXAMPLE.read_text()
    exe = xla_gpu.compile(text, target="cpu", cache=False, profile=path)
    events = check_trace(json.loads(path.read_text()))
    assert {e["pid"] for e in events} == {_trace.COMPILE_PROCESS}
    (whole,) = [e for e in events if e["name"] == f"compile {exe.name}"]
    assert all(inside(e, whole) for e in events if e["tid"] == whole["tid"])
    cats = Counter(e["cat"] for e in events)
    assert cats["hlo-pass"] > 10 and cats["hlo-pipeline"] >= 1
    for stage in ("prepare (HLO passes)", "schedule", "buffer assignment",
                  "thunks and kernels"):
        assert sum(e["name"] == stage for e in events) == 1, stage
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert len(kernels) == exe.kernel_counts["compiled"] > 0
    stages = [e for e in events if e["cat"] == "kernel-stage"]
    # Each kernel's emit, MLIR pipeline and LLVM stages lie inside it, on its thread.
    for kernel in kernels:
        mine = [s for s in stages if s["tid"] == kernel["tid"] and inside(s, kernel)]
        assert {s["name"] for s in mine} >= {"emit", "MLIR pipeline", "LLVM host code"}
    if (os.cpu_count() or 1) >= 2:
        assert {e["tid"] for e in kernels} != {whole["tid"]}, \
            "kernels compiled side by side are recorded on their own threads"


def test_a_trace_block_records_compiles_and_runs_together(tmp_path):
    path = tmp_path / "both.json"
    with xla_gpu.trace(path) as trace:
        exe = xla_gpu.compile(LOOP_PROGRAM, target="cpu", cache=False)
        exe.run(np.ones(64, np.float32))
        exe.run(np.ones(64, np.float32))
    assert isinstance(trace, xla_gpu.Trace)
    events = check_trace(json.loads(path.read_text()))
    assert {e["pid"] for e in events} == {_trace.COMPILE_PROCESS, _trace.RUN_PROCESS}
    assert sum(e["cat"] == "run" for e in events) == 2
    # Outside the block nothing is recorded.
    exe.run(np.ones(64, np.float32))
    assert sum(e["cat"] == "run" for e in trace.events()) == 2


def test_without_a_profile_runs_take_the_native_path_and_record_nothing():
    exe = xla_gpu.compile(LOOP_PROGRAM, target="cpu")
    assert _trace.current() is None
    exe.run(np.ones(64, np.float32))
    with _trace.recording() as trace:
        exe.run(np.ones(64, np.float32))
    assert any(e["cat"] == "run" for e in trace.events())


@pytest.mark.parametrize("bad", ["directory", "missing folder", "link", 5])
def test_bad_profile_paths_are_refused_before_the_work(tmp_path, bad):
    exe = xla_gpu.compile(LOOP_PROGRAM, target="cpu")
    x = np.ones(64, np.float32)
    if bad == "directory":
        path = tmp_path
    elif bad == "missing folder":
        path = tmp_path / "no" / "t.json"
    elif bad == "link":
        victim = tmp_path / "victim.txt"
        victim.write_text("keep")
        path = tmp_path / "t.json"
        path.symlink_to(victim)
    else:
        path = bad
    with pytest.raises(ArgumentError, match="profile"):
        exe.run(x, profile=path)
    if bad == "link":
        assert (tmp_path / "victim.txt").read_text() == "keep"
    with pytest.raises(ArgumentError, match="profile"):
        xla_gpu.compile(LOOP_PROGRAM, target="cpu", profile=path)


def _cli(*args, env=None):
    return subprocess.run(["xla-gpu-run", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_cli_profile_and_dumps_of_the_example(tmp_path):
    trace_path, dumps = tmp_path / "t.json", tmp_path / "d"
    result = _cli(str(EXAMPLE), "--target", "cpu", "--profile", str(trace_path),
                  "--dump-dir", str(dumps), "--no-cache")
    assert result.returncode == 0, result.stderr
    events = check_trace(json.loads(trace_path.read_text()))
    assert {e["pid"] for e in events} == {_trace.COMPILE_PROCESS, _trace.RUN_PROCESS}
    assert sum(e["cat"] == "run" for e in events) == 1
    assert "<svg" in (tmp_path / "t.html").read_text()
    for name in ("before_optimizations.dot", "before_optimizations.html",
                 "after_optimizations.dot", "after_optimizations.html",
                 "memory-usage.html"):
        assert (dumps / name).is_file(), name
    # The summary line: kernels and seconds per stage.
    (summary,) = [line for line in result.stderr.splitlines() if "compiled in" in line]
    assert "kernels (" in summary and "HLO passes" in summary
    quiet = _cli(str(EXAMPLE), "--target", "cpu", "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_cli_refuses_a_profile_into_a_directory(tmp_path):
    result = _cli(str(EXAMPLE), "--target", "cpu", "--profile", str(tmp_path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "directory" in result.stderr and "Traceback" not in result.stderr


def test_the_environment_variable_records_the_whole_process(tmp_path):
    path = tmp_path / "env.json"
    code = ("import numpy as np, xla_gpu, sys; "
            "exe = xla_gpu.compile(sys.argv[1], target='cpu'); "
            "exe.run(np.ones(64, np.float32))")
    subprocess.run([sys.executable, "-c", code, LOOP_PROGRAM], check=True, timeout=600,
                   env={**os.environ, "XLA_GPU_PROFILE": str(path)})
    events = check_trace(json.loads(path.read_text()))
    assert any(e["cat"] == "run" for e in events) and any(e["cat"] == "compile"
                                                           for e in events)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_counts_kernels_on_a_terminal_and_clears_itself():
    terminal = _Terminal()
    progress = _progress.Progress(terminal)
    with _progress.reporting(progress):
        exe = xla_gpu.compile(EXAMPLE.read_text(), target="cpu", cache=False)
    shown = terminal.getvalue()
    built = exe.kernel_counts["compiled"]
    assert "HLO passes" in shown and "kernels and thunks" in shown
    assert f"kernels {built}/{built}" in shown or \
        f"kernels 0/{built}" in shown, shown   # drawn at most 10 times a second
    # Cleared at the end: the last thing written blanks the line.
    assert shown.endswith("\r") and shown.rsplit("\r", 2)[-2].strip() == ""


def test_no_progress_line_when_not_a_terminal():
    plain = io.StringIO()
    with _progress.reporting(_progress.Progress(plain)):
        xla_gpu.compile(LOOP_PROGRAM, target="cpu", cache=False)
    assert plain.getvalue() == ""


@pytest.mark.skipif(not xla_gpu.runtime.cuda_available(), reason="needs a GPU")
def test_cuda_profile_has_gpu_timings(tmp_path):
    exe = xla_gpu.compile(LOOP_PROGRAM, target="cuda")
    path = tmp_path / "gpu.json"
    exe.run(np.ones(64, np.float32), profile=path)
    events = check_trace(json.loads(path.read_text()))
    gpu = [e for e in events if e.get("args", {}).get("timing") == "gpu"]
    assert gpu and all(e["dur"] >= 0 for e in gpu)


def test_the_trace_picture_is_a_standalone_page(tmp_path):
    import re
    import xml.etree.ElementTree as ET

    from xla_gpu.runtime.trace_picture import trace_html, trace_svg
    with xla_gpu.trace() as trace:
        exe = xla_gpu.compile(LOOP_PROGRAM, target="cpu", cache=False)
        exe.run(np.ones(64, np.float32))
    data = trace.to_json()
    svg = ET.fromstring(trace_svg(data))
    bars = [g for g in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert len(bars) == sum(e["ph"] == "X" for e in data["traceEvents"])
    run_only = ET.fromstring(trace_svg(data, processes={_trace.RUN_PROCESS}))
    assert len(list(run_only.iter("{http://www.w3.org/2000/svg}title"))) == \
        sum(e["ph"] == "X" and e["pid"] == _trace.RUN_PROCESS for e in data["traceEvents"])
    page = trace_html(data)
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "<script" not in page
    few = ET.fromstring(trace_svg(data, max_events=5))
    assert len(list(few.iter("{http://www.w3.org/2000/svg}title"))) == 5
