"""A compiled program's devices spread over MPI ranks (processes, maybe
on several hosts): `run_ranks(exe, device_args)`, which
`exe.run_partitioned(device_args, communicator="mpi")` calls, run under
`mpiexec -n K` (mpi4py and an MPI: `pip install ".[mpi]"`).

Rank r runs the devices d with d % K == r (K must divide the program's
device count), as threads with buffers of their own, as one process runs
all of them. A collective whose group lies on this rank meets in the
in-process rendezvous (`communicator.Communicator`). One whose group
spans ranks meets in two steps: the rank's members meet in the
rendezvous, and the last of them to arrive sends their contributions to
every other rank holding members of the group and receives theirs
(point-to-point messages, matched by the collective, its execution count
and its group, never by the order the ranks reach collectives in: ranks
run devices in disjoint groups at their own pace; the arrays go as raw
bytes from the devices' buffers, after a small pickled header); every
rank then computes its members' shares with the numpy semantics of
`xla_gpu.hlo.collectives`, in the same reduction order as one process:
the results are the same bits. A run ends when every rank ended it (each
rank's last message of a run says so), so that no message is left
unmatched when MPI finalizes.

Nothing hangs. A rank whose device fails tells the other ranks at once,
and a rank that ends its run says so: a collective waiting for one of
them fails with a CollectiveError naming the instruction, the rank and
its devices. A rank that dies says nothing: the ranks waiting for it fail
after `timeout` seconds with CollectiveTimeoutError naming them, and stop
their other devices. MPI cannot finalize a job with a lost rank
(MPI_Finalize would wait for it), so such a process ends with
MPI_Abort(1) at interpreter exit, after Python has printed the error.
mpiexec (MPICH's hydra) ends every rank as soon as one exits early unless
started with `-disable-auto-cleanup`; with it, the surviving ranks report
the lost one themselves.

Every rank must make the same sequence of runs (SPMD): a run's messages
carry its number on this rank, and messages of an earlier run are dropped.
Every MPI call is made on MPI_COMM_WORLD with this module's two tags, and
none is collective (a rank that died before its first run would hang one).
"""

from __future__ import annotations

import atexit
import collections
import math
import pickle
import sys
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ArgumentError
from ..hlo.collectives import CollectiveError, CollectiveTimeoutError
from ..hlo.interpreter.devices import _Failure
from .collective_thunks import AllReduceThunk
from .communicator import DEFAULT_TIMEOUT, Communicator, DeviceRun, describe_devices

__all__ = ["run_ranks", "MpiCommunicator", "mpi_available", "INSTALL_HINT"]

INSTALL_HINT = 'pip install ".[mpi]"'
# The tag of every message header of this module on MPI_COMM_WORLD (a
# user's own messages on other tags are left alone).
_TAG = 30_303
# The tag of the bytes of a message's arrays, which follow its header.
_DATA_TAG = 30_304


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ArgumentError(f"communicator='mpi' needs mpi4py and an MPI library "
                            f"({INSTALL_HINT}): {e}") from None
    return MPI


def mpi_available() -> bool:
    """Whether mpi4py is installed (found without importing mpi4py.MPI,
    which would initialize MPI in this process)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


class _PeerLost(Exception):
    """A rank the exchange waits for cannot (or did not) send its part."""

    def __init__(self, rank: int, reason: str, timeout: bool):
        super().__init__(reason)
        self.rank, self.reason, self.timeout = rank, reason, timeout


class _Transport:
    """This process's messages to and from the other ranks: one receiving
    thread files what arrives by run (contributions by their meeting's
    key, the devices that failed, the ranks that ended their run)."""

    def __init__(self, MPI):
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        # Every MPI call goes under this lock: correct whatever thread
        # level the library gives.
        self.mpi_lock = threading.Lock()
        self.cond = threading.Condition()
        self.run = 0                          # the run in progress (1, 2, ...)
        self.contributions: dict[tuple, dict[int, Any]] = {}
        self.failed: dict[tuple[int, int], dict[int, str]] = {}   # (run, rank) -> device: why
        self.ended: set[tuple[int, int]] = set()                  # (run, rank)
        self.sends: list = []                 # requests not known complete
        # source -> the messages whose array bytes are arriving, in order.
        self.incoming: dict[int, collections.deque] = {}
        self.lost_peers = False               # abort at exit: MPI_Finalize would hang
        self._stopping = False
        self._thread = threading.Thread(target=self._receive, daemon=True,
                                        name="xla_gpu-mpi-receive")
        self._thread.start()
        atexit.register(self._at_exit)

    # -- the receiving thread
    def _receive(self) -> None:
        idle = 0
        status = self.MPI.Status()
        while not self._stopping:
            ready = []
            try:
                with self.mpi_lock:
                    message = self.comm.improbe(self.MPI.ANY_SOURCE, _TAG, status)
                    if message is not None:
                        self._start_receiving(status.Get_source(), message.recv())
                    ready = self._received()
                    self._reap_sends()
            except self.MPI.Exception:
                # A peer's death can surface here; the waits time out.
                message = None
            for header, buffers in ready:
                self._deliver(pickle.loads(header, buffers=buffers))
            if message is None and not ready and not any(self.incoming.values()):
                idle += 1
                # Poll fast while messages flow, then back off to 1 ms.
                time.sleep(0 if idle < 64 else min(1e-3, 1e-5 * idle))
                continue
            idle = 0

    def _start_receiving(self, source: int, header_and_sizes) -> None:
        """Posts the receives of a message's array bytes (mpi lock held):
        they follow its header on the data tag, in the order sent, and
        land in aligned buffers that the unpickled arrays then use."""
        header, sizes = header_and_sizes
        buffers = [np.empty(size, np.uint8) for size in sizes]
        requests = [self.comm.Irecv([b, self.MPI.BYTE], source=source, tag=_DATA_TAG)
                    for b in buffers]
        self.incoming.setdefault(source, collections.deque()).append(
            (header, buffers, requests))

    def _received(self) -> list:
        """The messages whose bytes all arrived, each source's in the order
        it sent them (an "ended" is never seen before the contributions
        sent ahead of it). Mpi lock held."""
        ready = []
        for queue in self.incoming.values():
            while queue and all(r.Test() for r in queue[0][2]):
                header, buffers, _ = queue.popleft()
                ready.append((header, buffers))
        return ready

    def _deliver(self, payload) -> None:
        kind, run, rank = payload[0], payload[1], payload[2]
        with self.cond:
            if run < self.run:
                return                        # an earlier run's: nobody waits for it
            if kind == "contribution":
                key, entries = payload[3], payload[4]
                self.contributions.setdefault((run,) + key, {})[rank] = entries
            elif kind == "failed":
                self.failed.setdefault((run, rank), {})[payload[3]] = payload[4]
            elif kind == "ended":
                self.ended.add((run, rank))
            self.cond.notify_all()

    def _reap_sends(self) -> None:
        """Drops the completed send requests (mpi lock held)."""
        if self.sends:
            self.sends = [r for r in self.sends if not r.Test()]

    # -- sending
    def send(self, rank: int, payload) -> list:
        """Sends `payload` to `rank`: its pickle (protocol 5) with the
        bytes of its contiguous arrays out of band, each sent from where
        it lies (no copy). Returns the requests of those bytes: the arrays
        must not change until they complete."""
        arrays: list = []
        header = pickle.dumps(payload, protocol=5, buffer_callback=arrays.append)
        raws = [a.raw() for a in arrays]
        try:
            with self.mpi_lock:
                # Under one lock: the bytes follow their header in order.
                requests = [self.comm.isend((header, [r.nbytes for r in raws]), dest=rank,
                                            tag=_TAG)]
                data = [self.comm.Isend([r, self.MPI.BYTE], dest=rank, tag=_DATA_TAG)
                        for r in raws]
                self.sends.extend(requests + data)
        except self.MPI.Exception:
            self.lost_peers = True            # the wait for its answer reports it
            return []
        return data

    def send_all(self, payload) -> None:
        for rank in range(self.size):
            if rank != self.rank:
                self.send(rank, payload)

    # -- runs
    def begin_run(self) -> int:
        with self.cond:
            self.run += 1
            run = self.run
            self.contributions = {k: v for k, v in self.contributions.items() if k[0] >= run}
            self.failed = {k: v for k, v in self.failed.items() if k[0] >= run}
            self.ended = {k for k in self.ended if k[0] >= run}
        return run

    def end_run(self, run: int, timeout: float) -> list[int]:
        """Tells the other ranks this rank ended `run` and waits (up to
        `timeout` seconds) until every other rank ended it too and every
        send of this rank was taken: each rank's "ended" is the last of
        its messages of the run, so nothing of the run is left unmatched
        when MPI finalizes, and the next run starts on clean queues.
        Returns the ranks that did not end it in time (lost: this process
        then aborts at exit)."""
        self.send_all(("ended", run, self.rank))
        deadline = time.monotonic() + timeout
        others = [r for r in range(self.size) if r != self.rank]
        while True:
            try:
                with self.mpi_lock:
                    self._reap_sends()
                    sending = len(self.sends)
            except self.MPI.Exception:
                sending = -1
            with self.cond:
                late = [r for r in others if (run, r) not in self.ended]
                if not late and sending == 0:
                    return []
                # A rank lost already (a collective timed out waiting
                # for it) is not waited for again.
                if sending < 0 or self.lost_peers or time.monotonic() > deadline:
                    self.lost_peers = True
                    return late
                self.cond.wait(0.01)

    def exchange(self, run: int, key: tuple, peers: dict[int, list[int]],
                 mine: dict[int, Any], timeout: float,
                 stopped: Callable[[], bool]) -> dict[int, dict[int, Any]]:
        """Sends this rank's contributions (`mine`: device -> its
        contribution) of the meeting `key` to the ranks in `peers` (rank ->
        its devices in the group) and returns theirs (rank -> device ->
        contribution). _PeerLost when one failed or ended without sending,
        or did not within `timeout` seconds."""
        sending = []
        for rank in peers:
            sending += self.send(rank, ("contribution", run, self.rank, key, mine))
        full_key = (run,) + key
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = self.contributions.get(full_key, {})
                if all(rank in got for rank in peers):
                    del self.contributions[full_key]
                    break
                for rank, devices in peers.items():
                    if rank in got:
                        continue
                    failures = self.failed.get((run, rank), {})
                    dead = [d for d in devices if d in failures]
                    if dead:
                        raise _PeerLost(rank, f"failed before reaching it (device {dead[0]}: "
                                              f"{failures[dead[0]]})", False)
                    if (run, rank) in self.ended:
                        why = next(iter(failures.values()), None)
                        raise _PeerLost(rank, "ended its run without reaching it" +
                                        (f" (a device failed: {why})" if why else ""), False)
                if stopped():
                    raise _PeerLost(-1, "the run stopped", False)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    late = [rank for rank in peers if rank not in got]
                    self.lost_peers = True
                    raise _PeerLost(late[0], f"did not arrive within {timeout:g} s", True)
                # Wake now and then: the run's stop does not notify here.
                self.cond.wait(min(remaining, 0.05))
        # Every peer sent its part, so each takes ours: the bytes are sent
        # from the device's own buffers, which must not change before.
        while sending:
            with self.mpi_lock:
                sending = [r for r in sending if not r.Test()]
            if sending:
                if time.monotonic() > deadline:
                    self.lost_peers = True
                    raise _PeerLost(next(iter(peers)), f"did not take this rank's part within "
                                                       f"{timeout:g} s", True)
                time.sleep(0)
        return got

    def _at_exit(self) -> None:
        self._stopping = True
        self._thread.join(timeout=2.0)
        if self.lost_peers:
            # MPI_Finalize would wait for the lost rank forever; what went
            # wrong is printed by now.
            sys.stdout.flush()
            sys.stderr.flush()
            self.comm.Abort(1)


_transport: _Transport | None = None
_transport_lock = threading.Lock()


def _get_transport() -> _Transport:
    global _transport
    with _transport_lock:
        if _transport is None:
            _transport = _Transport(_mpi())
        return _transport


class MpiCommunicator(Communicator):
    """The rendezvous of one rank's devices in a run across ranks."""

    def __init__(self, num_replicas: int, num_partitions: int, timeout: float,
                 transport: _Transport, run: int):
        super().__init__(num_replicas, num_partitions, timeout)
        self.transport, self.run = transport, run
        self.rank, self.ranks = transport.rank, transport.size
        self.local = [d for d in range(self.num_devices) if d % self.ranks == self.rank]

    def rank_of(self, device: int) -> int:
        return device % self.ranks

    def where(self, device: int) -> str:
        return f"{super().where(device)} on rank {self.rank_of(device)}"

    # -- the collectives
    def meet(self, endpoint, thunk, group, contribution, compute):
        local = tuple(d for d in group if self.rank_of(d) == self.rank)
        if len(local) == len(group):
            return super().meet(endpoint, thunk, group, contribution, compute)
        if isinstance(thunk, AllReduceThunk):
            if contribution is None:
                # The slice-by-slice all-reduce's second meeting: across
                # ranks the first one wrote every result already.
                return None
            if isinstance(contribution, tuple):
                return self._all_reduce_in_place(endpoint, thunk, group, local, contribution)
        execution = endpoint.executions_of(thunk)
        return super().meet(endpoint, thunk, local, contribution,
                            lambda entries: self._across_ranks(thunk, group, local, execution,
                                                               entries, compute))

    def _all_reduce_in_place(self, endpoint, thunk, group, local, contribution):
        """The large all-reduce, whose participants hand over their
        operand and result buffers to write each other's results (which
        cannot cross processes): the operands are exchanged, the reduction
        written into every local result, and each participant is handed
        back the reduction with its own results, so that the slice it
        then copies is already there."""
        execution = endpoint.executions_of(thunk)

        def compute(entries):
            ins = [e[0] for e in entries]
            shares = self._across_ranks(thunk, group, local, execution, ins,
                                        lambda all_ins: thunk.compute(all_ins, group))
            for (_, outs), share in zip(entries, shares):
                for out, value in zip(outs, share):
                    np.copyto(out, value)
            return [[(share, outs)] for (_, outs), share in zip(entries, shares)]

        return super().meet(endpoint, thunk, local, contribution, compute)

    def _across_ranks(self, thunk, group, local, execution, entries, compute):
        peers: dict[int, list[int]] = {}
        for d in group:
            if self.rank_of(d) != self.rank:
                peers.setdefault(self.rank_of(d), []).append(d)
        try:
            received = self.transport.exchange(
                self.run, (thunk.name, execution, tuple(group)), peers,
                dict(zip(local, entries)), self.timeout, lambda: self.stop is not None)
        except _PeerLost as lost:
            raise self._lost_error(thunk, peers, lost) from None
        mine = dict(zip(local, entries))
        everyone = [mine[d] if d in mine else received[self.rank_of(d)][d] for d in group]
        shares = compute(everyone)
        position = {d: i for i, d in enumerate(group)}
        return [shares[position[d]] for d in local]

    def _lost_error(self, thunk, peers, lost: _PeerLost) -> CollectiveError:
        name = f"instruction '{thunk.name}' ({thunk.hlo_opcode or thunk.opcode})"
        if lost.rank < 0:
            with self.cond:
                stop = self.stop
            error = CollectiveError(f"{name} on rank {self.rank}: the run stopped: "
                                    f"{stop.message if stop else ''}", thunk.name, ())
            self._stop_errors.add(id(error))
            return error
        devices = peers[lost.rank]
        message = f"{name}: rank {lost.rank} (devices {devices}) {lost.reason}"
        failure = _Failure(message, thunk.name, devices, timeout=lost.timeout)
        with self.cond:
            if lost.timeout:
                # The lost rank may never come: every local device stops.
                self._stop_all(failure)
            elif self.first_failure is None:
                self.first_failure = failure
        error = failure.error_class(f"{message} (rank {self.rank} waited)", thunk.name,
                                    devices)
        self._stop_errors.add(id(error))
        return error

    def device_failed(self, device: int, error: BaseException) -> None:
        super().device_failed(device, error)
        self.transport.send_all(("failed", self.run, self.rank, device,
                                 f"{type(error).__name__}: {error}"))

    # -- running this rank's devices
    def run_local(self, run_device: Callable[[int], Any], what: str) -> list[Any]:
        """`run_device(d)` for each of this rank's devices, a thread each;
        their results in device order."""
        return self.run_devices(run_device, what, devices=self.local)


def run_ranks(exe, device_args: Sequence[Sequence[Any]], *,
              timeout: float | None = None) -> list[tuple]:
    """Runs this rank's devices of `exe` (a cpu-target ProgramExecutable
    for N devices) under mpiexec with K ranks: the devices d with d % K ==
    rank. `device_args`: the arguments of every device (N lists, as
    `run_partitioned` takes them; only this rank's are read) or of this
    rank's devices only (N / K lists, in device order). Returns this rank's
    devices' output leaves, in device order. `timeout` (seconds, default
    60): how long a collective waits for the other devices and ranks."""
    MPI = _mpi()
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not math.isfinite(timeout) or timeout <= 0:
        raise ArgumentError(f"run_partitioned: timeout must be a positive number of "
                            f"seconds, got {timeout!r}")
    if exe.target != "cpu":
        raise ArgumentError(f"run_partitioned(communicator='mpi') runs the cpu target's "
                            f"devices; program '{exe.name}' was compiled for {exe.target}")
    comm = MPI.COMM_WORLD
    ranks, rank = comm.Get_size(), comm.Get_rank()
    n = exe.num_devices
    devices = describe_devices(exe.num_replicas, exe.num_partitions)
    if n % ranks:
        raise ArgumentError(f"run_partitioned(communicator='mpi'): program '{exe.name}' runs "
                            f"on {devices}, which {ranks} MPI ranks cannot share evenly "
                            f"(the rank count must divide the device count)")
    local = list(range(rank, n, ranks))
    if isinstance(device_args, (str, bytes, np.ndarray)) or \
            not isinstance(device_args, Sequence) or len(device_args) not in (n, len(local)):
        got = len(device_args) if isinstance(device_args, Sequence) else \
            type(device_args).__name__
        raise ArgumentError(f"run_partitioned(communicator='mpi'): program '{exe.name}' runs "
                            f"on {devices}, {len(local)} of them (devices {local}) on rank "
                            f"{rank} of {ranks}: it takes {n} argument lists (one per "
                            f"device) or {len(local)} (this rank's), got {got}")
    mine = [device_args[d] for d in local] if len(device_args) == n else list(device_args)
    values: dict[int, list[Any]] = {}
    for d, args in zip(local, mine):
        if isinstance(args, (str, bytes, np.ndarray)) or not isinstance(args, Sequence):
            raise ArgumentError(f"run_partitioned: device {d}: expected a list of "
                                f"arguments, got {type(args).__name__}")
        try:
            values[d] = exe._checked_leaves(args)
        except ArgumentError as e:
            raise ArgumentError(f"device {d}: {e}") from None
    exe._check_memory_of(len(local))

    transport = _get_transport()
    run = transport.begin_run()
    communicator = MpiCommunicator(exe.num_replicas, exe.num_partitions, float(timeout),
                                   transport, run)
    runs = {d: DeviceRun(communicator, d, exe._pool_of_device(d)) for d in local}
    # Built once, before the devices' threads race to build them.
    exe._launcher_table()
    exe._native_program()
    start = time.perf_counter()
    try:
        results = communicator.run_local(
            lambda d: exe._run_cpu(values[d], None, None, runs[d]),
            f"program '{exe.name}' on rank {rank} of {ranks} (devices {local} of {n})")
    except BaseException:
        exe.timings["last_run"] = time.perf_counter() - start
        transport.end_run(run, timeout)   # the run's own error is what is raised
        raise
    exe.timings["last_run"] = time.perf_counter() - start
    late = transport.end_run(run, timeout)
    if late:
        raise CollectiveTimeoutError(
            f"program '{exe.name}' on rank {rank} of {ranks}: ranks {late} did not end the "
            f"run within {timeout:g} s of this rank", None,
            [d for d in range(n) if d % ranks in late])
    exe.stats = runs[local[0]].stats
    if exe._has_tokens:
        return [exe._with_tokens(r) for r in results]
    return list(results)
