"""A compiled program's devices spread over MPI ranks (`run_partitioned(...,
communicator="mpi")`, `xla_gpu.runtime.mpi`): each test runs a small script
under `mpiexec -n K` (MPICH from the registry, `pip install ".[mpi]"`) and
compares what each rank wrote with one process's run and jax's shards.

A hang is a failure here too: every mpiexec runs under a timeout far above
what the runs need, and the fault tests check that the rank's own error,
not that timeout, ended them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu.errors import ArgumentError
from xla_gpu.runtime import mpi

SPMD = Path(__file__).resolve().parent.parent / "data" / "spmd"
MPIEXEC = shutil.which("mpiexec")

needs_mpi = pytest.mark.skipif(
    not mpi.mpi_available() or MPIEXEC is None,
    reason=f'needs mpi4py and mpiexec: {mpi.INSTALL_HINT}')

# What no run here comes near; reaching it is a hang.
HANG_GUARD_S = 240


def spmd_case(name: str):
    data = np.load(SPMD / f"{name}.npz")
    n = int(data["num_replicas"]) * int(data["num_partitions"])
    inputs = sorted(k for k in data.files if k.startswith("in_") and "_dev" not in k)
    outputs = sorted(k for k in data.files if k.startswith("out_") and "_dev" not in k)
    args = [[data[f"{k}_dev{d}"] for k in inputs] for d in range(n)]
    expected = [[data[f"{k}_dev{d}"] for k in outputs] for d in range(n)]
    return data, args, expected


def mpiexec(ranks: int, script: str, *args: str, tmp_path: Path,
            cleanup: bool = True) -> subprocess.CompletedProcess:
    """Runs `script` on `ranks` ranks (its last argument: `tmp_path`).
    cleanup=False: hydra leaves the other ranks running when one exits
    early (they must report it)."""
    path = tmp_path / "rank_script.py"
    path.write_text(textwrap.dedent(_REPORT) + textwrap.dedent(script))
    command = [MPIEXEC] + ([] if cleanup else ["-disable-auto-cleanup"]) + \
        ["-n", str(ranks), sys.executable, str(path), *args, str(tmp_path)]
    try:
        return subprocess.run(command, capture_output=True, text=True,
                              timeout=HANG_GUARD_S, env=dict(os.environ))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mpiexec -n {ranks} hung ({HANG_GUARD_S} s): {e.stdout!r} {e.stderr!r}")


# Each rank reports in a file of its own: mpiexec interleaves the ranks'
# stdout.
_REPORT = """
    def report(text):
        import sys
        from pathlib import Path
        from mpi4py import MPI
        rank = MPI.COMM_WORLD.Get_rank()
        (Path(sys.argv[-1]) / f"rank{rank}.txt").write_text(text)
"""


def reports(tmp_path: Path, ranks: int) -> list[str]:
    return [(tmp_path / f"rank{r}.txt").read_text() for r in range(ranks)]


_RUN_CASE = """
    import sys, numpy as np, xla_gpu
    from pathlib import Path
    from mpi4py import MPI
    spmd, name, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[-1])
    data = np.load(spmd / f"{name}.npz")
    n = int(data["num_replicas"]) * int(data["num_partitions"])
    inputs = sorted(k for k in data.files if k.startswith("in_") and "_dev" not in k)
    exe = xla_gpu.compile((spmd / f"{name}.partitioned.hlo").read_text(), target="cpu")
    rank, ranks = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    mine = list(range(rank, n, ranks))
    # Every device's arguments the first time, this rank's the second:
    # the second run must meet only the second run's messages.
    first = exe.run_partitioned([[data[f"{k}_dev{d}"] for k in inputs] for d in range(n)],
                                communicator="mpi", timeout=60)
    second = exe.run_partitioned([[data[f"{k}_dev{d}"] for k in inputs] for d in mine],
                                 communicator="mpi", timeout=60)
    arrays = {}
    for d, a, b in zip(mine, first, second):
        for k, (x, y) in enumerate(zip(a, b)):
            arrays[f"first_dev{d}_{k}"] = x
            arrays[f"second_dev{d}_{k}"] = y
    np.savez(out / f"rank{rank}.npz", **arrays)
"""


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("name", ["dp_mlp_step", "all_to_all"])
def test_spmd_case_on_ranks_matches_one_process_and_jax(name, ranks, tmp_path):
    _, args, expected = spmd_case(name)
    exe = xla_gpu.compile((SPMD / f"{name}.partitioned.hlo").read_text(), target="cpu")
    single = exe.run_partitioned(args)
    done = mpiexec(ranks, _RUN_CASE, str(SPMD), name, tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    n = len(args)
    for rank in range(ranks):
        got = np.load(tmp_path / f"rank{rank}.npz")
        for d in range(rank, n, ranks):
            for k, (one_process, jax_shard) in enumerate(zip(single[d], expected[d])):
                for run in ("first", "second"):
                    value = got[f"{run}_dev{d}_{k}"]
                    # The same reduction order as one process: the same bits.
                    np.testing.assert_array_equal(value, one_process,
                                                  err_msg=f"{run} run, device {d}, output {k}")
                    np.testing.assert_allclose(value, jax_shard, rtol=1e-5, atol=1e-5)


# A large all-reduce (over PARALLEL_ALL_REDUCE_BYTES: computed slice by
# slice in one process) whose group spans ranks, and one whose groups lie
# on one rank each (devices {0,2} and {1,3}: rank 0 and rank 1 with 2 ranks).
_LARGE = """
    import sys, numpy as np, xla_gpu
    from mpi4py import MPI
    text = '''HloModule big, num_partitions=4
    add {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT c = f32[] add(a, b)
    }
    ENTRY e {
      x = f32[131072] parameter(0)
      a = f32[131072] all-reduce(x), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
      ROOT b = f32[131072] all-reduce(a), channel_id=2, replica_groups={{0,2},{1,3}}, use_global_device_ids=true, to_apply=add
    }'''
    exe = xla_gpu.compile(text, target="cpu")
    args = [[np.arange(131072, dtype=np.float32) * (d + 1) / 7] for d in range(4)]
    rank = MPI.COMM_WORLD.Get_rank()
    got = exe.run_partitioned(args, communicator="mpi", timeout=60)
    want = exe.run_partitioned(args)
    for (g,), d in zip(got, range(rank, 4, MPI.COMM_WORLD.Get_size())):
        assert np.array_equal(g, want[d][0]), d
    report("ok")
"""


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_large_all_reduce_across_ranks_and_groups_within_one(ranks, tmp_path):
    done = mpiexec(ranks, _LARGE, tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert reports(tmp_path, ranks) == ["ok"] * ranks


_RANK_1_EXITS = """
    import os, sys, time, numpy as np, xla_gpu
    from pathlib import Path
    from mpi4py import MPI
    spmd = Path(sys.argv[1])
    data = np.load(spmd / "dp_mlp_step.npz")
    inputs = sorted(k for k in data.files if k.startswith("in_") and "_dev" not in k)
    exe = xla_gpu.compile((spmd / "dp_mlp_step.partitioned.hlo").read_text(), target="cpu")
    if MPI.COMM_WORLD.Get_rank() == 1:
        os._exit(0)                      # dies before its first collective
    start = time.monotonic()
    try:
        exe.run_partitioned([[data[f"{k}_dev{d}"] for k in inputs] for d in range(8)],
                            communicator="mpi", timeout=3)
    except xla_gpu.errors.XlaGpuError as e:
        report(f"{type(e).__name__}: {e}\\n"
               f"instruction {e.instruction} missing {list(e.missing)}")
        raise
    report("no error")
"""


@needs_mpi
def test_a_rank_that_exits_early_fails_the_others_naming_it(tmp_path):
    done = mpiexec(2, _RANK_1_EXITS, str(SPMD), tmp_path=tmp_path, cleanup=False)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert not (tmp_path / "rank1.txt").exists()
    rank0 = (tmp_path / "rank0.txt").read_text()
    assert rank0.startswith("CollectiveTimeoutError: "), rank0
    assert "rank 1 (devices [1, 3, 5, 7]) did not arrive within 3 s" in rank0, rank0
    assert "instruction all-reduce.5 missing [1, 3, 5, 7]" in rank0, rank0
    # Python printed the uncaught error before MPI_Abort ended the process
    # (MPI_Finalize would wait for rank 1 forever).
    assert "Traceback" in done.stderr and \
        "CollectiveTimeoutError: program 'jit_step' on rank 0 of 2" in done.stderr, out


# Devices loop `trips` times around an all-reduce: rank 1 passes fewer
# trips and ends its run while rank 0's devices wait at the next one.
_RANK_1_ENDS_EARLY = """
    import sys, numpy as np, xla_gpu
    from mpi4py import MPI
    text = '''HloModule loop, num_partitions=4
    add {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT c = f32[] add(a, b)
    }
    body {
      s = (s32[], f32[2]) parameter(0)
      k = s32[] get-tuple-element(s), index=0
      v = f32[2] get-tuple-element(s), index=1
      one = s32[] constant(1)
      k1 = s32[] subtract(k, one)
      r = f32[2] all-reduce(v), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
      ROOT t = (s32[], f32[2]) tuple(k1, r)
    }
    cond {
      s = (s32[], f32[2]) parameter(0)
      k = s32[] get-tuple-element(s), index=0
      zero = s32[] constant(0)
      ROOT gt = pred[] compare(k, zero), direction=GT
    }
    ENTRY e {
      k = s32[] parameter(0)
      x = f32[2] parameter(1)
      t = (s32[], f32[2]) tuple(k, x)
      w = (s32[], f32[2]) while(t), condition=cond, body=body
      ROOT v = f32[2] get-tuple-element(w), index=1
    }'''
    exe = xla_gpu.compile(text, target="cpu")
    rank = MPI.COMM_WORLD.Get_rank()
    trips = 2 if rank == 0 else 1
    mine = [[np.array(trips, np.int32), np.ones(2, np.float32)] for _ in range(2)]
    try:
        exe.run_partitioned(mine, communicator="mpi", timeout=600)
    except xla_gpu.errors.XlaGpuError as e:
        report(f"{type(e).__name__}: {e}\\n"
               f"instruction {e.instruction} missing {list(e.missing)}")
        sys.exit(3)
    report("no error")
"""


@needs_mpi
def test_a_rank_that_ends_its_run_early_fails_the_others_at_once(tmp_path):
    """The wait is not the timeout (600 s, past the hang guard): rank 1
    says it ended."""
    done = mpiexec(2, _RANK_1_ENDS_EARLY, tmp_path=tmp_path, cleanup=False)
    first, second = reports(tmp_path, 2)
    assert second == "no error", done.stdout + done.stderr
    assert first.startswith("CollectiveError: "), first
    assert "instruction 'r' (all-reduce): rank 1 (devices [1, 3]) ended its run without " \
           "reaching it" in first, first
    assert "instruction r missing [1, 3]" in first, first


_BAD_RANKS = """
    import numpy as np, xla_gpu
    text = '''HloModule m, num_partitions=3
    ENTRY e {
      ROOT x = f32[2] parameter(0)
    }'''
    exe = xla_gpu.compile(text, target="cpu")
    try:
        exe.run_partitioned([[np.zeros(2, np.float32)]] * 3, communicator="mpi")
    except xla_gpu.errors.ArgumentError as e:
        report(f"ArgumentError: {e}")
"""


@needs_mpi
def test_a_rank_count_that_does_not_divide_the_devices_is_refused(tmp_path):
    done = mpiexec(2, _BAD_RANKS, tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for text in reports(tmp_path, 2):
        assert "which 2 MPI ranks cannot share evenly" in text, text


def test_an_unknown_communicator_is_refused():
    exe = xla_gpu.compile((SPMD / "psum.partitioned.hlo").read_text(), target="cpu")
    with pytest.raises(ArgumentError, match="communicator must be None .* or 'mpi', got 'nccl'"):
        exe.run_partitioned([[]] * exe.num_devices, communicator="nccl")
