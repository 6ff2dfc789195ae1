"""xla_gpu's SPMD partitioner: jax's annotated programs (tests/python/data/
spmd, made by make_spmd_cases.py there) partitioned for 8 devices and run
by the reference interpreter against jax's outputs; XLA's choice of
collectives; reshards, reduce-scatter, fall-backs and refusals."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from xla_gpu.errors import HloError, UnsupportedError
from xla_gpu.hlo import parse_module
from xla_gpu.hlo.passes.__main__ import main as passes_main
from xla_gpu.hlo.passes.spmd import (SpmdFallbackWarning, needs_partitioning,
                                     partition_module, partition_text)
from xla_gpu.hlo.printer import module_to_text
from spmd_cases import CASES, MODULE_WITH_ADD, SPMD, global_arrays, run_partitioned

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "collective-permute")


def _collectives(module) -> Counter:
    out: Counter = Counter()
    for comp in module.computations:
        for inst in comp.instructions:
            kind = inst.opcode.removesuffix("-start")
            if kind in COLLECTIVES:
                # XLA combines all-reduces into one of a tuple: count values.
                out[kind] += len(inst.operands) if kind == "all-reduce" else 1
    return out


def test_all_stored_cases_are_here():
    assert len(CASES) == 15


@pytest.mark.parametrize("name", CASES)
def test_jax_program_partitioned_matches_jax(name):
    npz = np.load(SPMD / f"{name}.npz")
    assert int(npz["num_partitions"]) == 8
    got, result = run_partitioned((SPMD / f"{name}.pre.hlo").read_text(), 8,
                                   global_arrays(npz, "in"))
    want = global_arrays(npz, "out")
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {i}"
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"output {i}")
    assert result.notes == []      # nothing fell back to whole computation


@pytest.mark.parametrize("name", CASES)
def test_same_collectives_as_xla(name):
    ours = partition_module(parse_module((SPMD / f"{name}.pre.hlo").read_text()), 8)
    xla = parse_module((SPMD / f"{name}.partitioned.hlo").read_text())
    assert _collectives(ours.module) == _collectives(xla)


def test_per_device_shapes_and_parameter_shardings():
    result = partition_module(parse_module((SPMD / "fsdp_mlp.pre.hlo").read_text()), 8)
    params = sorted(result.module.entry.parameters, key=lambda p: p.parameter_number)
    assert [p.shape.dims for p in params] == [(1, 16), (2, 8), (2, 8)]
    assert result.module.num_partitions == 8
    assert [str(s) for s in result.parameter_shardings] == ["{devices=[8,1]<=[8]}"] * 3
    assert [s.dims for s in result.output_shapes] == [(16, 8)]


def test_needs_partitioning_only_before_the_partitioner():
    for name in CASES:
        assert needs_partitioning(parse_module((SPMD / f"{name}.pre.hlo").read_text()))
        assert not needs_partitioning(
            parse_module((SPMD / f"{name}.partitioned.hlo").read_text()))
    assert not needs_partitioning(parse_module(
        "HloModule m\nENTRY e {\n  ROOT p = f32[4] parameter(0)\n}"))


_MOVE_CUT = """
HloModule m
ENTRY e {
  x = f32[16,32] parameter(0), sharding={devices=[8,1]<=[8]}
  n = f32[16,32] negate(x)
  ROOT c = f32[16,32] custom-call(n), custom_call_target="Sharding", sharding={devices=[1,8]<=[8]}
}"""


def test_a_cut_moving_to_another_dim_is_one_all_to_all():
    x = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    (got,), result = run_partitioned(_MOVE_CUT, 8, [x])
    np.testing.assert_array_equal(got, -x)
    assert _collectives(result.module) == Counter({"all-to-all": 1})
    assert str(result.output_shardings[0]) == "{devices=[1,8]<=[8]}"


def test_a_cut_moving_over_other_devices_is_an_all_to_all_and_a_permute():
    """XLA's: the all-to-all moves the cut over the source's devices, a
    collective-permute then puts the chunks on the target's (nothing is
    gathered whole)."""
    text = _MOVE_CUT.replace("sharding={devices=[1,8]<=[8]}",
                             "sharding={devices=[1,8]7,6,5,4,3,2,1,0}")
    x = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    (got,), result = run_partitioned(text, 8, [x])
    np.testing.assert_array_equal(got, -x)
    assert _collectives(result.module) == Counter({"all-to-all": 1, "collective-permute": 1})


def test_an_uneven_cut_moving_over_other_devices():
    text = _MOVE_CUT.replace("f32[16,32]", "f32[10,7]").replace(
        "sharding={devices=[8,1]<=[8]}", "sharding={devices=[4,1]<=[4]}").replace(
        "sharding={devices=[1,8]<=[8]}", "sharding={devices=[1,4]3,1,0,2}")
    x = np.arange(70, dtype=np.float32).reshape(10, 7)
    with pytest.warns(SpmdFallbackWarning, match="returned whole"):
        (got,), result = run_partitioned(text, 4, [x])
    np.testing.assert_array_equal(got, -x)
    kinds = _collectives(result.module)
    # (the uneven result is gathered whole at the end, as jax takes it)
    assert kinds["all-to-all"] == 1 and kinds["collective-permute"] == 1


def test_contracting_cut_with_a_cut_result_is_a_reduce_scatter():
    text = """
HloModule m
ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[1,8]<=[8]}
  w = f32[16,8] parameter(1), sharding={devices=[8,1]<=[8]}
  d = f32[8,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT c = f32[8,8] custom-call(d), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
}"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    (got,), result = run_partitioned(text, 8, [x, w])
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-5)
    assert _collectives(result.module) == Counter({"reduce-scatter": 1})


@pytest.mark.parametrize("m, k, n, lhs, rhs, result, want", [
    # One operand cuts the contracting dim, the other is whole: partial
    # sums and an all-reduce, or the cut operand gathered, whichever moves
    # less (as XLA picks: made with jax 0.10.2's XLA:CPU for these sizes).
    (4, 16, 8, "{devices=[1,8]<=[8]}", "{replicated}", "{replicated}", {"all-reduce": 1}),
    (4, 16, 8, "{replicated}", "{devices=[8,1]<=[8]}", "{replicated}", {"all-reduce": 1}),
    (8, 64, 8, "{replicated}", "{devices=[8,1]<=[8]}", "{replicated}", {"all-reduce": 1}),
    (16, 16, 16, "{devices=[1,8]<=[8]}", "{replicated}", "{replicated}", {"all-gather": 1}),
    (64, 16, 8, "{replicated}", "{devices=[8,1]<=[8]}", "{replicated}", {"all-gather": 1}),
    # Rows and columns cut over the same devices: the operand whose cut
    # the result does not keep is gathered (never cut one way, then moved).
    (16, 4, 16, "{devices=[8,1]<=[8]}", "{devices=[1,8]<=[8]}", "{devices=[1,8]<=[8]}",
     {"all-gather": 1}),
    (16, 4, 16, "{devices=[8,1]<=[8]}", "{devices=[1,8]<=[8]}", "{devices=[8,1]<=[8]}",
     {"all-gather": 1}),
])
def test_dots_make_xlas_choice_of_collectives(m, k, n, lhs, rhs, result, want):
    text = f"""
HloModule m
ENTRY e {{
  x = f32[{m},{k}] parameter(0), sharding={lhs}
  w = f32[{k},{n}] parameter(1), sharding={rhs}
  ROOT d = f32[{m},{n}] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, sharding={result}
}}"""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    (got,), partitioned = run_partitioned(text, 8, [x, w])
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
    assert _collectives(partitioned.module) == Counter(want)


def test_a_batch_dot_keeps_its_batch_cut():
    text = """
HloModule m
ENTRY e {
  a = f32[8,4,6] parameter(0), sharding={devices=[4,1,1]<=[4]}
  b = f32[8,6,5] parameter(1), sharding={devices=[4,1,1]<=[4]}
  ROOT d = f32[8,4,5] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}, sharding={devices=[4,1,1]<=[4]}
}"""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 4, 6)).astype(np.float32)
    b = rng.standard_normal((8, 6, 5)).astype(np.float32)
    (got,), result = run_partitioned(text, 4, [a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert _collectives(result.module) == Counter()


def test_an_op_it_cannot_cut_runs_whole_with_a_note():
    text = """
HloModule m
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[4,16] parameter(0), sharding={devices=[1,4]<=[4]}
  ROOT s = f32[4,16] sort(x), dimensions={1}, to_apply=lt, sharding={devices=[1,4]<=[4]}
}"""
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    with pytest.warns(SpmdFallbackWarning, match="'s': sort is not partitioned"):
        (got,), result = run_partitioned(text, 4, [x])
    np.testing.assert_array_equal(got, np.sort(x, axis=1))
    assert any("'s'" in note and "sort" in note for note in result.notes)
    assert _collectives(result.module)["all-gather"] == 1



def test_argsort_along_whole_rows_keeps_the_rows_cut():
    # jnp.argsort(x, axis=1) on rows cut over 4 devices: a sort of (keys,
    # iota) with a tuple result. Each device sorts its own rows; nothing is
    # gathered, and the result stays cut as the rows are.
    text = """HloModule m
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT c = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  iota = s32[8,16] iota(), iota_dimension=1
  s = (f32[8,16], s32[8,16]) sort(x, iota), dimensions={1}, is_stable=true, to_apply=lt
  ROOT i = s32[8,16] get-tuple-element(s), index=1, sharding={devices=[4,1]<=[4]}
}"""
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpmdFallbackWarning)
        (got,), result = run_partitioned(text, 4, [x])
    np.testing.assert_array_equal(got, np.argsort(x, axis=1, kind="stable"))
    assert sum(_collectives(result.module).values()) == 0
    sort = next(i for c in result.module.computations for i in c.instructions
                if i.opcode == "sort")
    assert [t.dims for t in sort.shape.tuple_shapes] == [(2, 16), (2, 16)]

def test_an_unread_parameter_stays_in_the_signature():
    text = """
HloModule m
ENTRY e {
  x = f32[16,4] parameter(0), sharding={devices=[8,1]<=[8]}
  unread = f32[16,4] parameter(1), sharding={devices=[8,1]<=[8]}
  ROOT n = f32[16,4] negate(x)
}"""
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    (got,), result = run_partitioned(text, 8, [x, x])
    np.testing.assert_array_equal(got, -x)
    assert len(result.module.entry.parameters) == 2


def test_uneven_parameters_are_passed_whole_and_cut_padded():
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[6,5] parameter(0), sharding={devices=[4,1]<=[4]}
  z = f32[] constant(0)
  ROOT r = f32[5] reduce(x, z), dimensions={0}, to_apply=add
}"""
    x = np.arange(30, dtype=np.float32).reshape(6, 5)
    with pytest.warns(SpmdFallbackWarning, match="'x'.*does not cut f32.6,5. evenly"):
        (got,), result = run_partitioned(text, 4, [x])
    np.testing.assert_allclose(got, x.sum(axis=0))
    assert result.parameter_shardings[0].is_replicated
    # Inside, chunks of ceil(6 / 4) = 2 rows, summed by one all-reduce.
    assert "f32[2,5]" in module_to_text(result.module)
    assert _collectives(result.module) == Counter({"all-reduce": 1})


# Three iterations over (counter, f32[16,8]) state, and the ENTRY that runs
# them on x (XSHARDING: its placement).
_COND_3 = """cond {
  p = (s32[], f32[16,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
"""
_LOOP_ENTRY = """ENTRY e {
  x = f32[16,8] parameter(0)XSHARDING
  zero = s32[] constant(0)
  init = (s32[], f32[16,8]) tuple(zero, x)
  w = (s32[], f32[16,8]) while(init), condition=cond, body=body
  ROOT r = f32[16,8] get-tuple-element(w), index=1RSHARDING
}"""

_LOOP = MODULE_WITH_ADD + _COND_3 + """body {
  p = (s32[], f32[16,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  c = f32[16,8] get-tuple-element(p), index=1
  z = f32[] constant(0)
  s = f32[REDUCED] reduce(c, z), dimensions={DIM}, to_apply=add
  sb = f32[16,8] broadcast(s), dimensions={KEPT}
  h = f32[] constant(0.5)
  hb = f32[16,8] broadcast(h), dimensions={}
  c2 = f32[16,8] multiply(c, hb)
  c3 = f32[16,8] add(c2, sb)
  ROOT t = (s32[], f32[16,8]) tuple(j, c3)
}
""" + _LOOP_ENTRY.replace("XSHARDING", ", sharding={devices=[8,1]<=[8]}").replace(
    "RSHARDING", ", sharding={devices=[8,1]<=[8]}")


@pytest.mark.parametrize("dim", [0, 1])
def test_a_loop_keeps_its_state_cut(dim):
    text = _LOOP.replace("REDUCED", "8" if dim == 0 else "16").replace(
        "DIM", str(dim)).replace("KEPT", str(1 - dim))
    x = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    (got,), result = run_partitioned(text, 8, [x])
    want = x
    for _ in range(3):
        want = want * 0.5 + np.expand_dims(want.sum(axis=dim), dim)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert result.notes == []
    body = next(c for c in result.module.computations if c.name.startswith("body"))
    assert body.parameters[0].shape.tuple_shapes[1].dims == (2, 8)
    # Summing over the cut rows needs the other devices' rows: one
    # all-reduce per iteration; along the whole columns, none.
    assert _collectives(result.module) == (Counter({"all-reduce": 1}) if dim == 0
                                           else Counter())


def test_a_loop_takes_the_cut_its_body_constrains_its_carry_to():
    """A scan whose body constrains its carry (with_sharding_constraint in
    a scan over layers) and whose initial value nobody placed: the state
    is cut as the body says, as XLA's propagation gives it, so each
    iteration works on its chunk with no collective; the initial value is
    sliced once on the way in."""
    text = "HloModule m\n" + _COND_3 + """cut {
  p = f32[16,8] parameter(0)
  ROOT c = f32[16,8] custom-call(p), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
}
body {
  t = (s32[], f32[16,8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = f32[16,8] get-tuple-element(t), index=1
  half = f32[] constant(0.5)
  halves = f32[16,8] broadcast(half), dimensions={}
  y = f32[16,8] multiply(x, halves)
  z = f32[16,8] call(y), to_apply=cut
  ROOT r = (s32[], f32[16,8]) tuple(next, z)
}
""" + _LOOP_ENTRY.replace("XSHARDING", "").replace("RSHARDING", "")
    x = np.random.default_rng(5).standard_normal((16, 8)).astype(np.float32)
    (got,), result = run_partitioned(text, 8, [x])
    np.testing.assert_allclose(got, x * 0.125, rtol=1e-6)
    assert result.output_shardings[0].counts(2) == (8, 1)
    body = next(c for c in result.module.computations if c.name.startswith("body"))
    assert body.parameters[0].shape.tuple_shapes[1].dims == (2, 8)
    assert _collectives(result.module) == Counter()


@pytest.mark.parametrize("branch", [0, 1, 5])
def test_conditional_branches_are_partitioned(branch):
    text = """
HloModule m
double {
  p = f32[16,8] parameter(0)
  two = f32[] constant(2)
  b = f32[16,8] broadcast(two), dimensions={}
  ROOT m = f32[16,8] multiply(p, b)
}
flip {
  p = f32[16,8] parameter(0)
  ROOT r = f32[16,8] reverse(p), dimensions={0}
}
ENTRY e {
  x = f32[16,8] parameter(0), sharding={devices=[8,1]<=[8]}
  k = s32[] parameter(1), sharding={replicated}
  ROOT c = f32[16,8] conditional(k, x, x), branch_computations={double, flip}, sharding={devices=[8,1]<=[8]}
}"""
    x = np.arange(128, dtype=np.float32).reshape(16, 8)
    (got,), result = run_partitioned(text, 8, [x, np.int32(branch)])
    np.testing.assert_array_equal(got, 2 * x if branch == 0 else x[::-1])
    branches = [c for c in result.module.computations if c.name.endswith("_spmd")
                and not c.is_entry]
    assert sorted(c.parameters[0].shape.dims for c in branches) == [(2, 8), (2, 8)]
    # Reversing the cut rows takes the mirrored device's rows (one
    # collective-permute, as XLA's partitioner), then reverses them locally.
    assert _collectives(result.module) == Counter({"collective-permute": 1})


def test_gather_with_cut_indices_is_index_parallel():
    text = """
HloModule m
ENTRY e {
  t = f32[10,4] parameter(0), sharding={replicated}
  i = s32[8,2] parameter(1), sharding={devices=[8,1]<=[8]}
  r = s32[8,2,1] reshape(i)
  g = f32[8,2,4] gather(t, r), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=2, slice_sizes={1,4}
  two = f32[] constant(2)
  b = f32[8,2,4] broadcast(two), dimensions={}
  ROOT m = f32[8,2,4] multiply(g, b)
}"""
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    indices = (np.arange(16, dtype=np.int32).reshape(8, 2) * 3) % 10
    (got,), result = run_partitioned(text, 8, [table, indices])
    np.testing.assert_array_equal(got, table[indices] * 2)
    assert _collectives(result.module) == Counter() and result.notes == []
    assert str(result.output_shardings[0]) == "{devices=[8,1,1]<=[8]}"


def test_gather_keeps_the_cut_of_the_dims_its_slices_take_whole():
    """a[:, k, :] as jax lowers it (a gather picking one row of dim 1) on a
    value cut along all three dims: the result keeps the cuts of dims 0 and
    2 (XLA's passthrough dims), each device gathering from its own chunk;
    only the picked dim is gathered."""
    text = """
HloModule m
ENTRY e {
  a = s32[4,4,2] parameter(0), sharding={devices=[2,2,2]<=[8]}
  k = s32[1] parameter(1), sharding={replicated}
  ROOT g = s32[4,2] gather(a, k), offset_dims={0,1}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=0, slice_sizes={4,1,2}, indices_are_sorted=true
}"""
    a = np.arange(32, dtype=np.int32).reshape(4, 4, 2)
    (got,), result = run_partitioned(text, 8, [a, np.array([3], np.int32)])
    np.testing.assert_array_equal(got, a[:, 3, :])
    assert result.output_shardings[0].counts(2) == (2, 2)
    assert _collectives(result.module) == Counter({"all-gather": 1}) and result.notes == []


def test_convolution_with_a_cut_batch_is_batch_parallel():
    text = """
HloModule m
ENTRY e {
  a = f32[8,2,10] parameter(0), sharding={devices=[4,1,1]<=[4]}
  w = f32[3,2,3] parameter(1), sharding={replicated}
  ROOT c = f32[8,3,10] convolution(a, w), window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0
}"""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((8, 2, 10)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3)).astype(np.float32)
    (got,), result = run_partitioned(text, 4, [a, w])
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1)))
    want = np.stack([np.einsum("bik,oik->bo", padded[:, :, t:t + 3], w) for t in range(10)],
                    axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert _collectives(result.module) == Counter() and result.notes == []
    assert str(result.output_shardings[0]) == "{devices=[4,1,1]<=[4]}"


def test_gspmd_manual_region_is_kept_as_per_device_code():
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[16,4] parameter(0), sharding={devices=[8,1]<=[8]}
  s = f32[16,4] custom-call(x), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
  l = f32[2,4] custom-call(s), custom_call_target="SPMDFullToShardShape", sharding={manual}
  two = f32[] constant(2), sharding={manual}
  t = f32[2,4] broadcast(two), dimensions={}, sharding={manual}
  r = f32[2,4] all-reduce(l), replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, channel_id=1, to_apply=add
  p = f32[2,4] multiply(r, t), sharding={manual}
  m = f32[2,4] custom-call(p), custom_call_target="Sharding", sharding={manual}
  ROOT g = f32[16,4] custom-call(m), custom_call_target="SPMDShardToFullShape", sharding={devices=[8,1]<=[8]}
}"""
    x = np.arange(64, dtype=np.float32).reshape(16, 4)
    (got,), result = run_partitioned(text, 8, [x])
    np.testing.assert_array_equal(got, np.tile(2 * x.reshape(8, 2, 4).sum(axis=0), (8, 1)))
    assert _collectives(result.module) == Counter({"all-reduce": 1})
    assert "custom-call" not in module_to_text(result.module)
    assert needs_partitioning(parse_module(text))


def test_a_custom_call_on_one_device_runs_there_only():
    """`{maximal device=k}` on a custom call (jax places its Python
    callbacks so): a conditional on the partition id runs it on device k
    alone, the other devices make zeros, an all-reduce hands everyone the
    result; an effect with no result (jax.debug.print) is not all-reduced.
    Run by the interpreter and by the cpu runtime over 4 devices, counting
    the calls."""
    from xla_gpu.ffi.registry import register_custom_call, unregister_custom_call
    import xla_gpu
    text = """HloModule m
ENTRY e {
  x = f32[8] parameter(0), sharding={devices=[4]<=[4]}
  s = f32[] reduce(x, zero), dimensions={0}, to_apply=add
  zero = f32[] constant(0)
  shown = () custom-call(s), custom_call_target="count_calls", custom_call_has_side_effect=true, sharding={{maximal device=2}}
  twice = f32[8] custom-call(x), custom_call_target="count_calls", sharding={maximal device=0}
  ROOT r = f32[8] add(twice, x), sharding={devices=[4]<=[4]}
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}"""
    calls = []

    def count_calls(*operands):
        calls.append(operands[0].shape)
        return None if operands[0].shape == () else operands[0] * 2

    register_custom_call("count_calls", count_calls)
    try:
        x = np.arange(8, dtype=np.float32)
        (got,), result = run_partitioned(text, 4, [x])
        np.testing.assert_array_equal(got, 3 * x)
        assert sorted(calls) == [(), (8,)]
        assert _collectives(result.module) == Counter({"all-reduce": 2, "all-gather": 1})
        conditionals = [i for c in result.module.computations for i in c.instructions
                        if i.opcode == "conditional"]
        assert len(conditionals) == 2
        calls.clear()
        exe = xla_gpu.compile(module_to_text(result.module), target="cpu", num_partitions=4)
        outs = exe.run_partitioned([[x[2 * d:2 * d + 2]] for d in range(4)])
        np.testing.assert_array_equal(np.concatenate([o[0] for o in outs]), 3 * x)
        assert sorted(calls) == [(), (8,)]
    finally:
        unregister_custom_call("count_calls")


def test_open_dims_of_a_constraint_take_the_operands_cut():
    """Shardy's `{?}` leaves a dim to propagation (jax marks a result whose
    placement it leaves to the compiler so; its HLO form says replicated):
    the open dims take the operand's cut, `{}` dims stay whole, and a
    constraint that states a cut keeps it."""
    mesh = 'frontend_attributes={xla.sdy.meshes={empty_mesh = #sdy.mesh<[]>, mesh = #sdy.mesh<["x"=4, "y"=2]>}}'
    text = f"""HloModule m, {mesh}
ENTRY e {{
  p = f32[8,4] parameter(0), sharding={{devices=[4,2]<=[8]}}
  n = f32[8,4] negate(p)
  free = f32[8,4] custom-call(n), custom_call_target="Sharding", sharding={{replicated}}, frontend_attributes={{xla.sdy.sharding="#sdy.sharding_per_value<[<@empty_mesh, [{{?}}, {{}}]>]>"}}
  e = f32[8,4] exponential(p)
  kept = f32[8,4] custom-call(e), custom_call_target="Sharding", sharding={{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}}, frontend_attributes={{xla.sdy.sharding="#sdy.sharding_per_value<[<@mesh, [{{?}}, {{\\"y\\", ?}}]>]>"}}
  ROOT t = (f32[8,4], f32[8,4]) tuple(free, kept)
}}"""
    x = np.arange(32, dtype=np.float32).reshape(8, 4) / 8
    (neg, ex), result = run_partitioned(text, 8, [x])
    np.testing.assert_array_equal(neg, -x)
    np.testing.assert_allclose(ex, np.exp(x), rtol=1e-6)
    free, kept = result.output_shardings
    assert free.counts(2) == (4, 1)     # dim 0 cut as the operand, dim 1 closed
    assert kept.counts(2) == (4, 2)     # the stated y cut plus the operand's x
    assert _collectives(result.module) == Counter({"all-gather": 1})


def test_a_cut_iota_is_made_on_each_device_with_its_offset():
    text = """HloModule m
ENTRY e {
  i = u32[16,6] iota(), iota_dimension=0, sharding={devices=[4,2]<=[8]}
  j = f32[16,6] iota(), iota_dimension=1, sharding={devices=[4,2]<=[8]}
  ROOT t = (u32[16,6], f32[16,6]) tuple(i, j)
}"""
    (rows, cols), result = run_partitioned(text, 8, [])
    np.testing.assert_array_equal(rows, np.broadcast_to(np.arange(16, dtype=np.uint32)[:, None],
                                                        (16, 6)))
    np.testing.assert_array_equal(cols, np.broadcast_to(np.arange(6, dtype=np.float32), (16, 6)))
    iotas = [i.shape.dims for c in result.module.computations for i in c.instructions
             if i.opcode == "iota"]
    assert iotas and all(d == (4, 3) for d in iotas), iotas   # never the whole [16,6]
    assert not _collectives(result.module)


def test_partly_manual_shardings_are_refused_naming_the_instruction():
    text = """
HloModule m
ENTRY e {
  x = f32[8,4] parameter(0), sharding={devices=[2,1,4]<=[8] last_tile_dims={manual}}
  ROOT n = f32[8,4] negate(x)
}"""
    with pytest.raises(UnsupportedError, match="'x'.*partly manual"):
        partition_module(parse_module(text), 8)


def test_a_bad_sharding_in_a_module_names_the_instruction():
    text = """
HloModule m
ENTRY e {
  x = f32[8,4] parameter(0), sharding={devices=[2,2]0,1,2,3}
  ROOT n = f32[8,4] negate(x), sharding={devices=[4]<=[4]}
}"""
    with pytest.raises(HloError, match="instruction 'n'.*tiles 1 dimensions"):
        partition_module(parse_module(text), 4)


def test_partitioned_text_from_the_passes_cli(tmp_path, capsys):
    source = SPMD / "megatron_mlp.pre.hlo"
    assert passes_main([str(source), "--num-partitions", "8", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert printed == partition_text(source.read_text(), 8)
    assert "all-reduce(" in printed and "num_partitions=8" in printed
    assert passes_main([str(source), "--num-partitions", "0"]) == 2


def test_replicas_times_partitions_run_each_replica_on_its_own():
    """replica_count=2 with 4 partitions: the collectives with global
    device ids (reduce-scatter, all-gather) list each replica's devices in
    groups of their own (XLA's); the all-to-all and the halo's
    collective-permutes name partitions (within each replica). Each
    replica gets other inputs and must get its own results."""
    from xla_gpu.hlo import evaluate_devices
    from xla_gpu.hlo.passes.spmd import assemble, split
    text = MODULE_WITH_ADD.replace("HloModule m", "HloModule m, replica_count=2") + """
ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[1,4]<=[4]}
  w = f32[16,8] parameter(1), sharding={devices=[4,1]<=[4]}
  d = f32[8,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = f32[8,8] custom-call(d), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  z = f32[] constant(0)
  s = f32[8,8] reduce-window(c, z), window={size=3x1 pad=1_1x0_0}, to_apply=add
  m = f32[8,8] custom-call(s), custom_call_target="Sharding", sharding={devices=[1,4]<=[4]}
  g = f32[8,8] custom-call(m), custom_call_target="Sharding", sharding={replicated}
  ROOT t = (f32[8,8], f32[8,8]) tuple(m, g), sharding={{devices=[1,4]<=[4]}, {replicated}}
}"""
    result = partition_module(parse_module(text), 4)
    module = parse_module(module_to_text(result.module))
    assert _collectives(module) == Counter({"reduce-scatter": 1, "collective-permute": 2,
                                            "all-to-all": 1, "all-gather": 1})
    for inst in module.entry.instructions:
        if inst.opcode in ("reduce-scatter", "all-gather"):
            assert inst.attrs["replica_groups"].replace(" ", "") == "{{0,1,2,3},{4,5,6,7}}"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    per_device = []
    for r in range(2):
        xs = split(x * (r + 1), result.parameter_shardings[0], 4)
        ws = split(w, result.parameter_shardings[1], 4)
        per_device += [[xs[d], ws[d]] for d in range(4)]
    outs = evaluate_devices(module, per_device, num_replicas=2, num_partitions=4)
    for r in range(2):
        d = (x * (r + 1)) @ w
        want = d + np.pad(d, ((1, 0), (0, 0)))[:-1] + np.pad(d, ((0, 1), (0, 0)))[1:]
        got = assemble([outs[r * 4 + p][0] for p in range(4)], result.output_shardings[0],
                       (8, 8), None)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        for p in range(4):
            np.testing.assert_allclose(outs[r * 4 + p][1], want, rtol=1e-4, atol=1e-4)


def test_a_gather_with_batching_dims_runs_on_each_devices_rows():
    """take_along_axis as jax lowers it (operand and indices batching dims):
    cut along the batch, each device gathers its rows from its rows."""
    text = """
HloModule m
ENTRY e {
  x = f32[8,4,6] parameter(0), sharding={devices=[8,1,1]<=[8]}
  i = s32[8,4,1,1] parameter(1), sharding={devices=[8,1,1,1]<=[8]}
  ROOT g = f32[8,4,1] gather(x, i), offset_dims={}, collapsed_slice_dims={2}, start_index_map={2}, operand_batching_dims={0,1}, start_indices_batching_dims={0,1}, index_vector_dim=3, slice_sizes={1,1,1}
}"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 4, 6)).astype(np.float32)
    picks = rng.integers(0, 6, (8, 4, 1, 1)).astype(np.int32)
    (got,), result = run_partitioned(text, 8, [x, picks])
    np.testing.assert_array_equal(got, np.take_along_axis(x, picks[..., 0], axis=2))
    assert _collectives(result.module) == Counter() and result.notes == []
    assert result.output_shardings[0].counts(3) == (8, 1, 1)


SCATTER_ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""


def test_a_data_parallel_embedding_gradient_scatters_locally_and_sums():
    """The gradient of an embedding lookup with a batch-cut batch: each
    device scatter-adds its rows into zeros, one all-reduce sums them (XLA's
    way), not the whole scatter on every device."""
    text = "HloModule m\n" + SCATTER_ADD + """
ENTRY e {
  table = f32[10,4] parameter(0), sharding={replicated}
  ids = s32[8,3] parameter(1), sharding={devices=[8,1]<=[8]}
  grads = f32[8,3,4] parameter(2), sharding={devices=[8,1,1]<=[8]}
  ROOT s = f32[10,4] scatter(table, ids, grads), update_window_dims={2}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=2, to_apply=add
}"""
    rng = np.random.default_rng(4)
    table = rng.standard_normal((10, 4)).astype(np.float32)
    ids = rng.integers(0, 10, (8, 3)).astype(np.int32)
    grads = rng.standard_normal((8, 3, 4)).astype(np.float32)
    want = table.copy()
    np.add.at(want, ids, grads)
    (got,), result = run_partitioned(text, 8, [table, ids, grads])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert _collectives(result.module) == Counter({"all-reduce": 1}) and result.notes == []


def test_a_scatter_along_the_dims_it_keeps_runs_chunk_by_chunk():
    """Batching dims (take_along_axis's gradient) and window dims every
    update covers whole keep their cut: no collective."""
    text = "HloModule m\n" + SCATTER_ADD + """
ENTRY e {
  zero = f32[] constant(0)
  base = f32[8,4,6] broadcast(zero), dimensions={}
  i = s32[8,4,1,1] parameter(0), sharding={devices=[8,1,1,1]<=[8]}
  u = f32[8,4,1] parameter(1), sharding={devices=[8,1,1]<=[8]}
  s = f32[8,4,6] scatter(base, i, u), update_window_dims={}, inserted_window_dims={2}, scatter_dims_to_operand_dims={2}, input_batching_dims={0,1}, scatter_indices_batching_dims={0,1}, index_vector_dim=3, to_apply=add
  one = s32[1] parameter(2), sharding={replicated}
  w = f32[8,4] parameter(3), sharding={devices=[8,1]<=[8]}
  col = f32[8,4,6] scatter(s, one, w), update_window_dims={0,1}, inserted_window_dims={2}, scatter_dims_to_operand_dims={2}, index_vector_dim=0, to_apply=add
  ROOT r = f32[8,4,6] copy(col), sharding={devices=[8,1,1]<=[8]}
}"""
    rng = np.random.default_rng(5)
    picks = rng.integers(0, 6, (8, 4, 1, 1)).astype(np.int32)
    u = rng.standard_normal((8, 4, 1)).astype(np.float32)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    want = np.zeros((8, 4, 6), np.float32)
    np.put_along_axis(want, picks[..., 0], u, axis=2)
    want[:, :, 2] += w
    (got,), result = run_partitioned(text, 8, [picks, u, np.array([2], np.int32), w])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert _collectives(result.module) == Counter() and result.notes == []
