"""jax's annotated SPMD programs (tests/python/data/spmd) compiled by
`xla_gpu.compile(text, num_partitions=8)` through xla_gpu's own SPMD
partitioner on the cpu target's emulated devices, run on global arrays
(jax.jit's semantics) and matched against jax's outputs."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu.errors import ArgumentError, HloError
from xla_gpu.program.spmd import PartitionedProgram
from spmd_cases import CASES, MODULE_WITH_ADD, ONE_ELEMENT_UPDATES, SPMD, global_arrays

@pytest.mark.parametrize("name", CASES)
def test_compiled_partitioned_program_matches_jax(name):
    npz = np.load(SPMD / f"{name}.npz")
    exe = xla_gpu.compile(str(SPMD / f"{name}.pre.hlo"), num_partitions=8, target="cpu")
    assert isinstance(exe, PartitionedProgram)
    assert exe.num_partitions == 8 and exe.partition_notes == []
    got = exe.run(*global_arrays(npz, "in"))
    want = global_arrays(npz, "out")
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"output {i}")


def test_per_device_runs_and_the_partitioned_text():
    npz = np.load(SPMD / "megatron_mlp.npz")
    exe = xla_gpu.compile(str(SPMD / "megatron_mlp.pre.hlo"), num_partitions=8,
                          target="cpu")
    assert "all-reduce(" in exe.partitioned_hlo
    per_device = exe.split_arguments(global_arrays(npz, "in"))
    assert [a.shape for a in per_device[3]] == [(4, 8), (8, 2), (2, 8)]
    outs = exe.run_partitioned(per_device)
    for d in range(8):   # the result is replicated: every device has all of it
        np.testing.assert_allclose(outs[d][0], npz["out_0"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ArgumentError, match="takes 3 arguments, got 1"):
        exe.run(npz["in_0"])
    with pytest.raises(ArgumentError, match=r"argument 1: expected global shape \(8, 16\)"):
        exe.run(npz["in_0"], npz["in_0"], npz["in_2"])


def test_shardings_for_more_devices_than_partitions_are_refused():
    with pytest.raises(HloError, match=r"instruction 'x\.1'.*outside 0\.\.3"):
        xla_gpu.compile(str(SPMD / "fsdp_mlp.pre.hlo"), num_partitions=4, target="cpu")
    with pytest.raises(ArgumentError, match="num_partitions only"):
        xla_gpu.compile(str(SPMD / "fsdp_mlp.pre.hlo"), num_partitions=8, num_replicas=2,
                        target="cpu")


def test_xla_partitioned_text_still_runs_per_device():
    npz = np.load(SPMD / "psum.npz")
    exe = xla_gpu.compile(str(SPMD / "psum.partitioned.hlo"), num_partitions=8,
                          target="cpu")
    assert not isinstance(exe, PartitionedProgram)
    outs = exe.run_partitioned([[npz[f"in_0_dev{d}"], npz[f"in_1_dev{d}"]]
                                for d in range(8)])
    np.testing.assert_allclose(outs[5][0], npz["out_0_dev5"], rtol=1e-5)


def test_reshards_and_loops_compiled():
    """A cut moving between dims (an all-to-all), a dot summed by a
    reduce-scatter, and a loop over a cut state, compiled for the cpu
    target's devices."""
    text = MODULE_WITH_ADD + """cond {
  p = (s32[], f32[16,32]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[16,32]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  c = f32[16,32] get-tuple-element(p), index=1
  e = f32[16,32] exponential(c)
  ROOT t = (s32[], f32[16,32]) tuple(j, e)
}
ENTRY e {
  x = f32[16,32] parameter(0), sharding={devices=[8,1]<=[8]}
  w = f32[32,16] parameter(1), sharding={devices=[8,1]<=[8]}
  n = f32[16,32] negate(x)
  moved = f32[16,32] custom-call(n), custom_call_target="Sharding", sharding={devices=[1,8]<=[8]}
  d = f32[16,16] dot(moved, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  dr = f32[16,16] custom-call(d), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
  zero = s32[] constant(0)
  init = (s32[], f32[16,32]) tuple(zero, x)
  loop = (s32[], f32[16,32]) while(init), condition=cond, body=body
  l = f32[16,32] get-tuple-element(loop), index=1
  ROOT out = (f32[16,32], f32[16,16], f32[16,32]) tuple(moved, dr, l)
}"""
    exe = xla_gpu.compile(text, num_partitions=8, target="cpu")
    for kind in ("all-to-all(", "reduce-scatter(", "while("):
        assert kind in exe.partitioned_hlo, kind
    assert "all-gather" not in exe.partitioned_hlo
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((16, 32)) * 0.1).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    moved, dr, looped = exe.run(x, w)
    np.testing.assert_array_equal(moved, -x)
    np.testing.assert_allclose(dr, -x @ w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(looped, np.exp(np.exp(x)), rtol=1e-5)


def test_uneven_cuts_compiled_on_padded_chunks():
    """A cut that does not divide its dim (10 rows over 4 devices: chunks
    of 3, the last one 1 row and 2 of padding) through a reduction and a
    dot contracting over it, compiled for the cpu target's devices."""
    text = MODULE_WITH_ADD + """ENTRY e {
  x = f32[10,8] parameter(0)
  w = f32[10,6] parameter(1)
  a = f32[10,8] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  b = f32[10,6] custom-call(w), custom_call_target="Sharding", sharding={devices=[4,1]<=[4]}
  e = f32[10,8] exponential(a)
  z = f32[] constant(0)
  s = f32[8] reduce(e, z), dimensions={0}, to_apply=add
  d = f32[8,6] dot(e, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT out = (f32[8], f32[8,6]) tuple(s, d)
}"""
    exe = xla_gpu.compile(text, num_partitions=4, target="cpu")
    assert exe.partition_notes == []
    for piece in ("f32[3,8]", "f32[3,6]", "all-reduce("):
        assert piece in exe.partitioned_hlo, piece
    assert "all-gather" not in exe.partitioned_hlo
    rng = np.random.default_rng(5)
    x = rng.standard_normal((10, 8)).astype(np.float32)
    w = rng.standard_normal((10, 6)).astype(np.float32)
    s, d = exe.run(x, w)
    np.testing.assert_allclose(s, np.exp(x).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(d, np.exp(x).T @ w, rtol=1e-4, atol=1e-4)


def test_updating_one_element_of_a_cut_vector_compiled():
    # jax's `x_ref[0] += 1; x_ref[1] += 5` on a ref cut over two devices.
    exe = xla_gpu.compile(ONE_ELEMENT_UPDATES, num_partitions=2, target="cpu", cache=False)
    x = np.arange(8, dtype=np.float32)
    (got,) = exe.run(x)
    want = x.copy()
    want[0] += 1
    want[1] += 5
    np.testing.assert_array_equal(got, want)

_PLACED = """HloModule placed
ENTRY e {
  x = f32[8,4] parameter(0), sharding={devices=[2,1]<=[2]}
  two = f32[] constant(2)
  b = f32[8,4] broadcast(two), dimensions={}
  m = f32[8,4] multiply(x, b)
  p = f32[8,4] custom-call(m), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="device"}
  ROOT n = f32[8,4] negate(p), sharding={devices=[2,1]<=[2]}
}"""


@pytest.mark.parametrize("partitions", [1, 2])
def test_memory_placement_annotations_are_the_value_itself(partitions):
    # jax's compute_on / memory kinds annotate values with the memory they
    # live in; xla_gpu keeps every value in device memory. No handler is
    # needed at run time, and the partitioner keeps the value cut.
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no "computed whole on every device"
        exe = xla_gpu.compile(_PLACED, num_partitions=partitions, target="cpu", cache=False)
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    (got,) = exe.run(x)
    np.testing.assert_array_equal(got, -2 * x)
