"""Host offloading: a value jax places in host memory and brings back to
the device later (a remat policy's residuals go through a tuple and an
optimization barrier on the way) lives in memory space 5 in between: a
copy into host memory and one back, memcpy thunks, a host allocation of
its own, placed by the scheduler so the device holds it only when it is
read. Any other placement is the value itself. Values never change: every
program matches numpy."""

from __future__ import annotations

import numpy as np

import xla_gpu
from xla_gpu.hlo import parse_module
from xla_gpu.hlo.parser import parse_program_shape
from xla_gpu.hlo.passes import (HostOffloader, HostOffloadMarker, ShardingAnnotationRemover,
                                optimize)
from xla_gpu.hlo.shape import HOST_MEMORY_SPACE, Shape, same_shape
from xla_gpu.runtime.program import load_program


def _placement(name: str, operand: str, where: str, shape: str = "f32[64,64]{1,0}") -> str:
    return (f"  {name} = {shape} custom-call({operand}), "
            f'custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, '
            f'frontend_attributes={{_xla_buffer_placement="{where}"}}')


# A remat's shape: the residual goes to the host, through a tuple and an
# optimization barrier, while three dots run, and comes back for the last op.
REMAT = f"""
HloModule remat

ENTRY main {{
  x = f32[64,64]{{1,0}} parameter(0)
  y = f32[64,64]{{1,0}} parameter(1)
  s = f32[64,64]{{1,0}} sine(x)
{_placement("h", "s", "pinned_host")}
  t = (f32[64,64]{{1,0}}, f32[64,64]{{1,0}}) tuple(h, y)
  b = (f32[64,64]{{1,0}}, f32[64,64]{{1,0}}) opt-barrier(t)
  r = f32[64,64]{{1,0}} get-tuple-element(b), index=0
  w = f32[64,64]{{1,0}} get-tuple-element(b), index=1
  a1 = f32[64,64]{{1,0}} dot(s, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  t1 = f32[64,64]{{1,0}} tanh(a1)
  a2 = f32[64,64]{{1,0}} dot(t1, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  t2 = f32[64,64]{{1,0}} tanh(a2)
  a3 = f32[64,64]{{1,0}} dot(t2, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
{_placement("d", "r", "device")}
  ROOT out = f32[64,64]{{1,0}} add(d, a3)
}}
"""


def _reference(x, y):
    s = np.sin(x)
    t = np.tanh(np.tanh(s @ y) @ y) @ y
    return s + t


def _inputs():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((64, 64)).astype(np.float32) * 0.1,
            rng.standard_normal((64, 64)).astype(np.float32) * 0.1)


def test_memory_spaces_read_print_and_compare():
    params, result = parse_program_shape("{(f32[4]{0:S(5)}, f32[]{:S(5)}, s8[2,3]{0,1})->"
                                         "(f32[4]{0:T(8)S(5)}, f32[4]{0})}")
    assert [p.memory_space for p in params] == [5, 5, 0]
    assert [str(p) for p in params] == ["f32[4]{0:S(5)}", "f32[]{:S(5)}", "s8[2,3]{0,1}"]
    assert [r.memory_space for r in result.tuple_shapes] == [5, 0]
    host = Shape("f32", (4,), (0,)).in_memory_space(HOST_MEMORY_SPACE)
    assert not same_shape(host, Shape("f32", (4,), (0,)))
    assert same_shape(host, Shape("f32", (4,), (0,)), layouts=False)


def test_an_offload_through_a_barrier_becomes_copies_to_host_memory_and_back():
    module = optimize(parse_module(REMAT))
    copies = [i for i in module.entry.instructions if i.opcode == "copy"]
    spaces = sorted(i.shape.memory_space for i in copies)
    assert spaces == [0, HOST_MEMORY_SPACE], [str(i.shape) for i in copies]
    assert not any(i.opcode == "custom-call" for c in module.computations
                   for i in c.instructions)
    # Before the pipeline folds them away, the tuple, the barrier and the
    # element that pass the value on state where it is.
    module = parse_module(REMAT)
    ShardingAnnotationRemover().run(module)
    HostOffloadMarker().run(module)
    assert HostOffloader().run(module)
    by_name = {i.name.split(".")[0]: i for i in module.entry.instructions}
    assert by_name["t"].shape.tuple_shapes[0].memory_space == HOST_MEMORY_SPACE
    assert by_name["b"].shape.tuple_shapes[0].memory_space == HOST_MEMORY_SPACE
    assert by_name["r"].shape.memory_space == HOST_MEMORY_SPACE
    assert by_name["w"].shape.memory_space == 0
    assert by_name["d"].opcode == "copy" and by_name["d"].shape.memory_space == 0


def test_an_offloaded_program_runs_from_a_host_allocation_in_the_right_order():
    exe = xla_gpu.compile(REMAT, target="cpu", cache=False)
    x, y = _inputs()
    (got,) = exe.run(x, y)
    np.testing.assert_allclose(got, _reference(x, y), rtol=1e-5, atol=1e-5)
    host = [a for a in exe.allocations if a.memory_space == HOST_MEMORY_SPACE]
    assert len(host) == 1 and host[0].kind == "temp" and host[0].size >= 64 * 64 * 4
    analysis = exe.memory_analysis()
    assert analysis.host_temp_size_in_bytes == host[0].size
    assert "S(5)" in exe.as_text()
    # Moves are memcpys, never kernels; the one back comes after the dots
    # (the device holds the value only when it is read).
    order = []

    def walk(thunks):
        for t in thunks:
            order.append((type(t).__name__, t.name))
            walk(getattr(t, "thunks", None) or [])
    walk(exe.thunks)
    names = [n for _, n in order]
    kinds = dict((n, k) for k, n in order)
    moves = [n for n in names if n.startswith(("h", "d")) and kinds[n] == "CopyThunk"]
    assert len(moves) == 2, order
    back = next(n for n in moves if n.startswith("d"))
    last_dot = max(i for i, n in enumerate(names) if n.startswith("a3"))
    assert names.index(back) > last_dot, names


def test_a_saved_offloading_program_loads_with_its_host_allocation(tmp_path):
    exe = xla_gpu.compile(REMAT, target="cpu", cache=False)
    exe.save(tmp_path / "p")
    loaded = load_program(tmp_path / "p", expected_digest=exe.artifact_digest)
    assert [a.memory_space for a in loaded.allocations] == [a.memory_space
                                                             for a in exe.allocations]
    x, y = _inputs()
    np.testing.assert_allclose(loaded.run(x, y)[0], _reference(x, y), rtol=1e-5, atol=1e-5)


def test_placements_that_are_not_offloads_are_the_value_itself():
    # A value placed in host memory and read by a computation (or returned)
    # is not moved: only the caller places results.
    text = f"""
HloModule kept

ENTRY main {{
  x = f32[8]{{0}} parameter(0)
  s = f32[8]{{0}} sine(x)
{_placement("h", "s", "pinned_host", "f32[8]{0}")}
  e = f32[8]{{0}} exponential(h)
{_placement("k", "x", "pinned_host", "f32[8]{0}")}
  ROOT t = (f32[8]{{0}}, f32[8]{{0}}) tuple(e, k)
}}
"""
    module = parse_module(text)
    ShardingAnnotationRemover().run(module)
    HostOffloadMarker().run(module)
    HostOffloader().run(module)
    assert not any(i.opcode in ("custom-call", "copy") for i in module.entry.instructions)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    x = np.linspace(-1, 1, 8).astype(np.float32)
    e, k = exe.run(x)
    np.testing.assert_allclose(e, np.exp(np.sin(x)), rtol=1e-6)
    np.testing.assert_array_equal(k, x)
    assert exe.memory_analysis().host_temp_size_in_bytes == 0


def test_without_the_pipeline_offloads_still_run():
    exe = xla_gpu.compile(REMAT, target="cpu", cache=False, optimize=False)
    x, y = _inputs()
    np.testing.assert_allclose(exe.run(x, y)[0], _reference(x, y), rtol=1e-5, atol=1e-5)


def test_parameters_and_results_the_caller_keeps_in_host_memory():
    """A header stating host memory (jax's pinned_host parameters and
    results): the caller places them, the program reads and writes device
    memory, and the header keeps saying where the caller keeps them."""
    text = f"""
HloModule placed, entry_computation_layout={{(f32[4]{{0:S(5)}}, f32[4]{{0}})->(f32[4]{{0:S(5)}}, f32[4]{{0}})}}

ENTRY main {{
  x = f32[4]{{0}} parameter(0)
  y = f32[4]{{0}} parameter(1)
  a = f32[4]{{0}} add(x, y)
{_placement("h", "a", "pinned_host", "f32[4]{0}")}
  ROOT t = (f32[4]{{0}}, f32[4]{{0}}) tuple(h, a)
}}
"""
    module = optimize(parse_module(text), verify=True)
    assert not any(i.shape.memory_space for c in module.computations for i in c.instructions
                   if not i.shape.is_tuple)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert exe.as_text().startswith("HloModule placed, entry_computation_layout="
                                    "{(f32[4]{0:S(5)}, f32[4]{0})->")
    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    h, a = exe.run(x, y)
    np.testing.assert_array_equal(h, x + y)
    np.testing.assert_array_equal(a, x + y)


def test_an_offload_across_calls_is_marked_after_inlining():
    """jax puts a remat's forward and backward in calls of their own: the
    move to the host is in one, the move back in the other."""
    text = f"""
HloModule calls

forward {{
  x = f32[64,64]{{1,0}} parameter(0)
  s = f32[64,64]{{1,0}} sine(x)
{_placement("h", "s", "pinned_host")}
  ROOT t = (f32[64,64]{{1,0}}, f32[64,64]{{1,0}}) tuple(s, h)
}}

backward {{
  r = f32[64,64]{{1,0}} parameter(0)
  y = f32[64,64]{{1,0}} parameter(1)
{_placement("d", "r", "device")}
  ROOT m = f32[64,64]{{1,0}} multiply(d, y)
}}

ENTRY main {{
  x = f32[64,64]{{1,0}} parameter(0)
  y = f32[64,64]{{1,0}} parameter(1)
  f = (f32[64,64]{{1,0}}, f32[64,64]{{1,0}}) call(x), to_apply=forward
  s = f32[64,64]{{1,0}} get-tuple-element(f), index=0
  h = f32[64,64]{{1,0}} get-tuple-element(f), index=1
  a = f32[64,64]{{1,0}} dot(s, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  b = f32[64,64]{{1,0}} call(h, a), to_apply=backward
  ROOT o = f32[64,64]{{1,0}} add(b, a)
}}
"""
    module = optimize(parse_module(text), verify=True)
    spaces = sorted(i.shape.memory_space for i in module.entry.instructions
                    if i.opcode == "copy")
    assert spaces == [0, HOST_MEMORY_SPACE], spaces
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    x, y = _inputs()
    a = np.sin(x) @ y
    np.testing.assert_allclose(exe.run(x, y)[0], np.sin(x) * a + a, rtol=1e-5, atol=1e-5)
    assert exe.memory_analysis().host_temp_size_in_bytes > 0


def test_a_barrier_passes_on_a_relaid_value_in_its_new_layout():
    """A parameter the entry layout lays out column-major, through a tuple
    and a remat's barrier: the barrier states the new layout, so what reads
    it sees the values, not a transposition of them."""
    text = """
HloModule relaid, entry_computation_layout={(f32[3,4]{0,1}, f32[3,4]{1,0})->f32[3,4]{1,0}}

ENTRY main {
  p = f32[3,4]{1,0} parameter(0)
  q = f32[3,4]{1,0} parameter(1)
  t = (f32[3,4]{1,0}, f32[3,4]{1,0}) tuple(p, q)
  b = (f32[3,4]{1,0}, f32[3,4]{1,0}) opt-barrier(t)
  x = f32[3,4]{1,0} get-tuple-element(b), index=0
  y = f32[3,4]{1,0} get-tuple-element(b), index=1
  ROOT s = f32[3,4]{1,0} subtract(x, y)
}
"""
    optimize(parse_module(text), verify=True)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    p = np.arange(12, dtype=np.float32).reshape(3, 4)
    q = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(exe.run(p, q)[0], p - q)
