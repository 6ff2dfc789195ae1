"""Collectives on the cpu target's emulated devices (one thread and one set
of buffers per device, `ProgramExecutable.run_partitioned`):

    python bench/collectives.py                 # the tables below
    python bench/collectives.py --quick         # 1 and 16 MiB, fewer repeats
    python bench/collectives.py --json out.json
    python bench/collectives.py --mpi-only      # the MPI all-reduce table alone

1. all-reduce (sum) of 1, 16 and 64 MiB of f32 per device over 2, 4 and 8
   devices: seconds per all-reduce (best runs of a program of 1 + `--loop`
   chained all-reduces less those of a program of one, divided by
   `--loop`: the run's fixed cost taken out), its algorithm bandwidth
   (bytes of one device's buffer / time) and bus bandwidth (x 2(n-1)/n,
   NCCL's measure of what each device moves), against the host's memory
   copy bandwidth measured in the same run (numpy copy of the same bytes;
   on one host every device's bytes go through the same memory, so the
   last column compares with copying each device's buffer once).
   With `--mpi` (mpi4py and mpiexec: pip install ".[mpi]"): the same
   all-reduce (16 MiB, one device per rank) over 2 and 4 MPI ranks
   (`run_partitioned(..., communicator="mpi")` under mpiexec), against
   mpi4py's own `Allreduce` of the same buffer in the same run.
2. the data-parallel training step jax partitioned for 8 devices
   (tests/python/data/spmd/dp_mlp_step: an MLP's gradients all-reduced),
   recompiled with its device count set to 1, 2, 4 and 8 (the replica
   groups rewritten to match): seconds per step (run_partitioned,
   each device on its own shard of the batch).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SPMD = ROOT / "tests" / "python" / "data" / "spmd"

ALL_REDUCE_CHAIN = """HloModule all_reduce_chain, num_partitions={n}
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}}
ENTRY e {{
  r0 = f32[{elements}] parameter(0)
{chain}
}}
"""


def all_reduce_text(n: int, elements: int, count: int) -> str:
    """`count` all-reduces of f32[elements] over n devices, each reducing
    the one before (no copies between them: each writes a buffer of its
    own, which buffer assignment reuses two steps later)."""
    group = ",".join(map(str, range(n)))
    chain = "\n".join(
        f"  {'ROOT ' if k == count else ''}r{k} = f32[{elements}] all-reduce(r{k - 1}), "
        f"channel_id={k}, replica_groups={{{{{group}}}}}, use_global_device_ids=true, "
        "to_apply=add" for k in range(1, count + 1))
    return ALL_REDUCE_CHAIN.format(n=n, elements=elements, chain=chain)


def timed(fn, repeats: int) -> float:
    """The best seconds of `repeats` calls (after one warm-up call): the
    host is shared, the best run is the one least disturbed."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def memcpy_bandwidth(nbytes: int, repeats: int) -> float:
    """Bytes per second of numpy copying `nbytes` between two buffers."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    seconds = timed(lambda: np.copyto(dst, src), repeats)
    return nbytes / seconds


def bench_all_reduce(sizes_mib, device_counts, loop: int, repeats: int) -> list[dict]:
    import xla_gpu
    rows = []
    for mib in sizes_mib:
        nbytes = mib << 20
        elements = nbytes // 4
        copy = memcpy_bandwidth(nbytes, repeats)
        for n in device_counts:
            args = [[np.full(elements, d + 1, np.float32)] for d in range(n)]
            per_run = {}
            for count in (1, 1 + loop):
                exe = xla_gpu.compile(all_reduce_text(n, elements, count), target="cpu")
                out = exe.run_partitioned(args)
                expected = float(n * (n + 1) // 2) * n ** (count - 1)
                assert out[0][0][0] == expected, (out[0][0][0], expected)
                del out
                per_run[count] = timed(lambda: exe.run_partitioned(args), repeats)
            seconds = (per_run[1 + loop] - per_run[1]) / loop
            algbw = nbytes / seconds
            rows.append({"MiB": mib, "devices": n, "seconds": seconds,
                         "run_seconds": per_run[1], "algbw": algbw,
                         "busbw": algbw * 2 * (n - 1) / n, "memcpy": copy})
            print(f"all-reduce {mib:3d} MiB x {n} devices: {seconds * 1e3:8.2f} ms, "
                  f"algbw {algbw / 1e9:6.2f} GB/s, busbw {algbw * 2 * (n - 1) / n / 1e9:6.2f}"
                  f" GB/s, memcpy {copy / 1e9:6.2f} GB/s", flush=True)
    return rows


def dp_step_text(n: int) -> str:
    """dp_mlp_step's partitioned text for `n` devices: the header's count
    and the gradient all-reduce's group set to n devices (the program is
    the same on each device; the batch shard is each device's input)."""
    text = (SPMD / "dp_mlp_step.partitioned.hlo").read_text()
    text = re.sub(r"num_partitions=\d+", f"num_partitions={n}", text)
    group = "{{" + ",".join(map(str, range(n))) + "}}"
    text = re.sub(r"replica_groups=\{\{[0-9,]+\}\}", f"replica_groups={group}", text)
    # jax's mesh form names the data axis; one device is a group of one.
    text = re.sub(r"replica_groups=mesh\['axis_0'=8,'axis_1'=1\] \{'axis_0'\}",
                  f"replica_groups=mesh['axis_0'={n},'axis_1'=1] {{'axis_0'}}" if n > 1
                  else "replica_groups={{0}}", text)
    return text


def bench_dp_step(device_counts, repeats: int) -> list[dict]:
    import xla_gpu
    data = np.load(SPMD / "dp_mlp_step.npz")
    inputs = sorted(k for k in data.files if k.startswith("in_") and "_dev" not in k)
    rows = []
    for n in device_counts:
        exe = xla_gpu.compile(dp_step_text(n), target="cpu")
        args = [[data[f"{k}_dev{d}"] for k in inputs] for d in range(n)]
        seconds = timed(lambda: exe.run_partitioned(args), repeats)
        rows.append({"devices": n, "seconds": seconds,
                     "collectives": exe.stats.get("collectives", 0),
                     "kernels": exe.stats.get("kernels", 0)})
        print(f"dp_mlp_step on {n} devices: {seconds * 1e3:8.3f} ms per step", flush=True)
    return rows


def bench_mpi_rank(mib: int, loop: int, repeats: int) -> None:
    """One rank's side of the MPI all-reduce (run under mpiexec): rank 0
    prints the row as a JSON line after `MPI_ROW `."""
    from mpi4py import MPI
    import xla_gpu
    comm = MPI.COMM_WORLD
    ranks, rank = comm.Get_size(), comm.Get_rank()
    nbytes = mib << 20
    elements = nbytes // 4
    mine = [[np.full(elements, rank + 1, np.float32)]]
    per_run = {}
    for count in (1, 1 + loop):
        exe = xla_gpu.compile(all_reduce_text(ranks, elements, count), target="cpu")
        out = exe.run_partitioned(mine, communicator="mpi")
        expected = float(ranks * (ranks + 1) // 2) * ranks ** (count - 1)
        assert out[0][0][0] == expected, (out[0][0][0], expected)
        del out
        per_run[count] = timed(lambda: exe.run_partitioned(mine, communicator="mpi"),
                               repeats)
    ours = (per_run[1 + loop] - per_run[1]) / loop
    send, received = mine[0][0], np.empty(elements, np.float32)
    theirs = timed(lambda: comm.Allreduce(send, received, op=MPI.SUM), repeats)
    assert received[0] == ranks * (ranks + 1) // 2
    if rank == 0:
        print("MPI_ROW " + json.dumps({"MiB": mib, "ranks": ranks, "seconds": ours,
                                       "run_seconds": per_run[1], "mpi_seconds": theirs}),
              flush=True)


def bench_mpi(rank_counts, mib: int, loop: int, repeats: int) -> list[dict]:
    import shutil
    import subprocess
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit('--mpi needs mpiexec and mpi4py: pip install ".[mpi]"')
    rows = []
    for ranks in rank_counts:
        done = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, __file__,
                               "--mpi-rank", str(mib), "--loop", str(loop),
                               "--repeats", str(repeats)],
                              capture_output=True, text=True, timeout=900)
        lines = [line for line in done.stdout.splitlines() if line.startswith("MPI_ROW ")]
        if done.returncode or not lines:
            raise SystemExit(f"mpiexec -n {ranks} failed:\n{done.stdout}\n{done.stderr}")
        row = json.loads(lines[0][len("MPI_ROW "):])
        rows.append(row)
        print(f"MPI all-reduce {mib} MiB x {ranks} ranks: {row['seconds'] * 1e3:8.2f} ms, "
              f"mpi4py Allreduce {row['mpi_seconds'] * 1e3:8.2f} ms", flush=True)
    return rows


def mpi_markdown(rows: list[dict]) -> str:
    lines = ["| MPI all-reduce | ranks | ms (xla_gpu) | ms (mpi4py Allreduce) | ratio |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['MiB']} MiB f32 | {r['ranks']} | {r['seconds'] * 1e3:.2f} | "
                     f"{r['mpi_seconds'] * 1e3:.2f} | "
                     f"{r['seconds'] / r['mpi_seconds']:.1f}x |")
    return "\n".join(lines)


def markdown(all_reduce: list[dict], dp: list[dict]) -> str:
    # "n copies": the time numpy takes to copy every device's buffer once
    # (n x the bytes at the measured copy bandwidth) over the all-reduce's:
    # on one host the devices share its memory, so this is the bound.
    lines = ["| all-reduce | devices | ms | algbw GB/s | busbw GB/s | memcpy GB/s | "
             "n copies / all-reduce |", "|---|---|---|---|---|---|---|"]
    for r in all_reduce:
        copies = r["devices"] * (r["MiB"] << 20) / r["memcpy"]
        lines.append(f"| {r['MiB']} MiB f32 | {r['devices']} | {r['seconds'] * 1e3:.2f} | "
                     f"{r['algbw'] / 1e9:.2f} | {r['busbw'] / 1e9:.2f} | "
                     f"{r['memcpy'] / 1e9:.2f} | {copies / r['seconds']:.2f} |")
    lines += ["", "| dp_mlp_step | ms per step | vs 1 device |", "|---|---|---|"]
    base = next((r["seconds"] for r in dp if r["devices"] == 1), None)
    for r in dp:
        ratio = f"{r['seconds'] / base:.2f}x" if base else "-"
        lines.append(f"| {r['devices']} device{'s' if r['devices'] != 1 else ''} | "
                     f"{r['seconds'] * 1e3:.3f} | {ratio} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 and 16 MiB, 3 repeats")
    parser.add_argument("--loop", type=int, default=4,
                        help="chained all-reduces timed per run (default 4)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--mpi", action="store_true",
                        help="also the all-reduce over 2 and 4 MPI ranks (mpiexec)")
    parser.add_argument("--mpi-only", action="store_true",
                        help="only the MPI all-reduce table")
    parser.add_argument("--mpi-rank", type=int, metavar="MIB", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # A cache of its own: the bench compiles programs of its own sizes.
    os.environ.setdefault("XLA_GPU_CACHE_DIR", tempfile.mkdtemp(prefix="xla_gpu_bench_"))
    if args.mpi_rank is not None:
        bench_mpi_rank(args.mpi_rank, args.loop, args.repeats)
        return 0
    if args.mpi_only:
        print(mpi_markdown(bench_mpi((2, 4), 16, args.loop, 3 if args.quick else
                                    args.repeats)))
        return 0
    sizes = (1, 16) if args.quick else (1, 16, 64)
    repeats = 3 if args.quick else args.repeats
    all_reduce = bench_all_reduce(sizes, (2, 4, 8), args.loop, repeats)
    dp = bench_dp_step((1, 2, 4, 8), max(repeats, 5) * 4)
    mpi_rows = bench_mpi((2, 4), 16, args.loop, repeats) if args.mpi else []
    print()
    print(f"host: {os.cpu_count()} cpu cores")
    print(markdown(all_reduce, dp))
    if mpi_rows:
        print()
        print(mpi_markdown(mpi_rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"all_reduce": all_reduce, "dp_mlp_step": dp,
                                               "mpi_all_reduce": mpi_rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
