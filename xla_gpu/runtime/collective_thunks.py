"""Collective thunks: all-reduce, all-gather, reduce-scatter, all-to-all,
ragged-all-to-all, collective-permute and collective-broadcast (their async starts included:
the work is done at the start, the done is the start's result), and
replica-id / partition-id of a program run on many devices.

A collective thunk reads its operands from this device's buffers, hands
them to the run's rendezvous (`ExecutionContext.collectives`, a
`communicator.DeviceEndpoint`) with the devices it meets, and writes its
share into its results. Which devices meet, and what each receives, is
`xla_gpu.hlo.collectives` (the reference semantics the interpreter uses
too). On one device (`collectives` None) the group is the device itself.

On the cuda target a collective runs with NCCL (`runtime.nccl`) on the
execution's stream, over device buffers: `nccl_ops` says what this rank
does (all-reduce, reduce-scatter and all-gather of the flat buffers,
grouped sends and receives for all-to-all and collective-permute, a
broadcast from the group's first member), `nccl_refusal` what NCCL cannot
do with the buffers as laid out (or at all: a ragged all-to-all) (the thunk emitter refuses those at
compile time). replica-id / partition-id write the device's id with a
memset.

The thunks are plain data like the others (`to_dict` / `thunk_from_dict`;
this module registers their kinds). They are never recorded into command
buffers and run as Python callbacks of the native executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from ..hlo import collectives as C
from ..errors import HloError, UnsupportedError
from . import nccl
from .buffers import ArrayRef
from .nccl import NcclOp
from .thunks import ExecutionContext, Thunk, ThunkError, _register

__all__ = ["CollectiveThunk", "AllReduceThunk", "AllGatherThunk", "ReduceScatterThunk",
           "AllToAllThunk", "RaggedAllToAllThunk", "CollectivePermuteThunk", "CollectiveBroadcastThunk",
           "DeviceIdThunk", "REDUCTION_KINDS", "reduction_function", "COLLECTIVE_KINDS"]

# XLA's ReductionKind (sum, product, min, max) and the logical reducers
# jax's psum / pmax of booleans make (and, or).
REDUCTION_KINDS = ("sum", "product", "min", "max", "and", "or")
_SUB_BYTE_BITS = {"s2": 2, "s4": 4, "u2": 2, "u4": 4}


def reduction_function(kind: str, dtype: np.dtype) -> Callable[[np.ndarray, np.ndarray],
                                                                np.ndarray]:
    """The element-wise combination of two arrays of `dtype` a reducer of
    `kind` is (pred: and / or for every kind that is one of them)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return {"sum": np.logical_or, "max": np.logical_or, "or": np.logical_or,
                "product": np.logical_and, "min": np.logical_and,
                "and": np.logical_and}[kind]
    if kind in ("and", "or"):
        if dtype.kind not in "iu":
            raise ThunkError(f"a reducer '{kind}' over {dtype} (and / or take integers or "
                             "pred)")
        return np.bitwise_and if kind == "and" else np.bitwise_or
    return {"sum": np.add, "product": np.multiply, "max": np.maximum,
            "min": np.minimum}[kind]


def _wrap_sub_byte(value: np.ndarray, element_type: str) -> np.ndarray:
    """A sub-byte integer sum or product (computed in its byte) wrapped
    back into its bits, sign-extended as the kernels keep it."""
    bits = _SUB_BYTE_BITS.get(element_type)
    if bits is None:
        return value
    wide = value.astype(np.int64)
    if element_type[0] == "s":
        half = 1 << (bits - 1)
        wide = ((wide + half) & ((1 << bits) - 1)) - half
    else:
        wide = wide & ((1 << bits) - 1)
    return wide.astype(value.dtype)


def _groups_from(data) -> list[list[int]]:
    return [[int(i) for i in group] for group in data]


# -- the cuda target: what NCCL can do with the buffers as laid out


def _same_order(a: ArrayRef, b: ArrayRef, what: str) -> str | None:
    """Why NCCL, which moves elements in physical order, cannot turn
    operand `a` into result `b` (None: same element type and layout)."""
    if a.element_type != b.element_type:
        return f"{what} is {b.element_type}, its operand {a.element_type}"
    if a.major_to_minor != b.major_to_minor:
        return (f"{what}'s layout (major to minor {list(b.major_to_minor)}) differs from its "
                f"operand's ({list(a.major_to_minor)}); NCCL moves elements in memory order")
    return None


def _dimension_refusal(ref: ArrayRef, dim: int, what: str) -> str | None:
    if not 0 <= dim < len(ref.dims):
        return f"dimension {dim} is not one of {what}'s {len(ref.dims)}"
    return None


def _rows(ref: ArrayRef, dim: int) -> tuple[int, int]:
    """`ref`'s bytes as rows around `dim`: (the product of the dimensions
    more major than `dim` in its layout, the bytes of one row). One row:
    the blocks along `dim` are runs of memory, as NCCL gathers and
    scatters them; more: each block is a column of rows (copied through a
    scratch buffer)."""
    order = ref.major_to_minor
    rows = 1
    for d in order[:order.index(dim)]:
        rows *= ref.dims[d]
    return rows, (ref.nbytes // rows if rows else 0)


# Scratch pieces start this many bytes apart (NCCL's and the copies'
# alignment).
_SCRATCH_ALIGN = 256


def _aligned(n: int) -> int:
    return -(-n // _SCRATCH_ALIGN) * _SCRATCH_ALIGN


def _first(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r), None)


@dataclass
class CollectiveThunk(Thunk):
    """What every collective has: its operands (array leaves, in order), its
    results (this device's share, in order), its replica groups as parsed
    (empty: every device of the mode's kind) and group mode
    (`hlo.collectives.GroupMode` value), the instruction's channel_id and
    opcode (an async start keeps its own)."""
    kind: ClassVar[str] = ""
    opcode: ClassVar[str] = ""
    operands: list[ArrayRef] = field(default_factory=list)
    results: list[ArrayRef] = field(default_factory=list)
    replica_groups: list[list[int]] = field(default_factory=list)
    mode: str = C.GroupMode.CROSS_REPLICA.value
    channel_id: int | None = None
    hlo_opcode: str = ""
    # device -> (the global ids it meets in group order, the ids the
    # instruction names them by): worked out on the first run.
    _participants: dict = field(default_factory=dict, repr=False, compare=False)
    # cuda: device -> the scratch buffer (a DeviceArray) its NCCL steps use.
    _scratch: dict = field(default_factory=dict, repr=False, compare=False)

    # -- what the subclasses define
    def compute(self, entries: list[list[np.ndarray]], ids: tuple[int, ...]
                ) -> list[list[np.ndarray]]:
        """Every participant's result leaves (group order) from their
        operand leaves (group order); `ids` are the participants' ids as
        the instruction names them."""
        raise NotImplementedError

    def _kind_fields(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _kind_arguments(cls, d) -> dict[str, Any]:
        return {}

    def describe_kind(self) -> str:
        return ""

    # -- running
    def error(self, message: str) -> ThunkError:
        """An error about this collective (the rendezvous raises it)."""
        return ThunkError(f"collective '{self.name}' ({self.hlo_opcode or self.opcode}): "
                          f"{message}")

    def participants(self, endpoint) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(the global ids of the devices `endpoint`'s device meets, in
        group order; the ids the replica groups or pairs name them by)."""
        device = endpoint.device
        known = self._participants.get(device)
        if known is not None:
            return known
        R, P = endpoint.num_replicas, endpoint.num_partitions
        try:
            found = self._find_participants(device, R, P)
        except HloError as e:
            raise self.error(str(e)) from None
        self._participants[device] = found
        return found

    def _find_participants(self, device: int, R: int, P: int):
        group = C.participating_devices(self.replica_groups, C.GroupMode(self.mode), device,
                                        R, P)
        return group, group

    # -- the cuda target
    def nccl_refusal(self) -> str | None:
        """Why NCCL cannot run this collective over its buffers as laid out
        (None: it can); the thunk emitter refuses such a collective on cuda."""
        for k, (a, b) in enumerate(zip(self.operands, self.results)):
            reason = _same_order(a, b, f"result {k}")
            if reason:
                return reason
        return None

    def nccl_ops(self, pointer: Callable[[ArrayRef], int], rank: int, ranks: int,
                 ids: tuple[int, ...], scratch: int = 0) -> list[NcclOp]:
        """What rank `rank` of `ranks` does, in order (`pointer`: a ref's
        device address; `ids`: the participants' ids as the instruction
        names them, in group order; `scratch`: the address of
        `nccl_scratch_bytes(ranks)` bytes of device memory)."""
        raise NotImplementedError

    def nccl_scratch_bytes(self, ranks: int) -> int:
        """Device memory the NCCL steps need besides the buffers."""
        return 0

    def _check_sizes(self, ranks: int, operand_factor: int, result_factor: int) -> None:
        """Each operand's bytes x operand_factor equal its result's x
        result_factor (a gather's result holds `ranks` operands)."""
        for a, b in zip(self.operands, self.results):
            if a.nbytes * operand_factor != b.nbytes * result_factor:
                raise self.error(f"operand {a.describe()} and result {b.describe()} do not "
                                 f"fit a group of {ranks}")

    def execute_nccl(self, ctx: ExecutionContext) -> None:
        """The collective on the cuda target: NCCL over this device's
        buffers, on the context's stream (device d runs on GPU d)."""
        reason = self.nccl_refusal()
        if reason:
            raise self.error(f"NCCL cannot run it: {reason}")
        endpoint = getattr(ctx, "collectives", None)
        if endpoint is None:
            group, ids, device = (0,), (0,), 0
        else:
            (group, ids), device = self.participants(endpoint), endpoint.device
        rank = group.index(device)
        ops = self.nccl_ops(lambda ref: ctx.pointer(ref.slice), rank, len(group), ids,
                            self._scratch_for(device, self.nccl_scratch_bytes(len(group))))
        comm = nccl.communicator(group, rank)
        nccl.run_ops(comm, int(ctx.stream or 0), ops,
                     f"{self.hlo_opcode or self.opcode} '{self.name}'")
        ctx.stats["collectives"] += 1

    def _scratch_for(self, device: int, size: int) -> int:
        """The address of `size` bytes of scratch for `device`, kept with
        the thunk between runs (0 when none is needed)."""
        if size == 0:
            return 0
        held = self._scratch.get(device)
        if held is None or held.nbytes < size:
            from .cuda import DeviceArray
            held = self._scratch[device] = DeviceArray((size,), np.uint8)
        return held.ptr

    def execute(self, ctx: ExecutionContext) -> None:
        if ctx.target == "cuda":
            self.execute_nccl(ctx)
            return
        endpoint = getattr(ctx, "collectives", None)
        # Views of this device's operands: every participant waits at the
        # rendezvous until the shares are computed, so nothing writes them
        # while they are read.
        contribution = [ctx.array(ref) for ref in self.operands]
        with np.errstate(all="ignore"):
            if endpoint is None:
                share = self.compute([contribution], (0,))[0]
            else:
                group, ids = self.participants(endpoint)
                share = endpoint.meet(self, group, contribution,
                                      lambda entries: self._compute_checked(entries, ids))
        if len(share) != len(self.results):
            raise self.error(f"{len(share)} results for {len(self.results)} outputs")
        for ref, value in zip(self.results, share):
            out = ctx.array(ref)
            value = np.asarray(value)
            if value.shape != out.shape:
                raise self.error(f"a result of shape {list(value.shape)} for the output "
                                 f"{ref.describe()}")
            out[...] = value
        ctx.stats["collectives"] += 1

    def _compute_checked(self, entries, ids):
        try:
            return self.compute(entries, ids)
        except HloError as e:
            raise self.error(str(e)) from None

    def buffer_uses(self):
        return [(r.slice, False) for r in self.operands] + \
            [(r.slice, True) for r in self.results]

    # -- serializing
    def _fields(self):
        return {"operands": [r.to_dict() for r in self.operands],
                "results": [r.to_dict() for r in self.results],
                "replica_groups": [list(g) for g in self.replica_groups],
                "mode": self.mode, "channel_id": self.channel_id,
                "hlo_opcode": self.hlo_opcode, **self._kind_fields()}

    @classmethod
    def _from_dict(cls, d):
        mode = str(d["mode"])
        C.GroupMode(mode)   # ValueError (a malformed thunk) for another
        channel = d.get("channel_id")
        return cls(d["name"], operands=[ArrayRef.from_dict(r) for r in d["operands"]],
                   results=[ArrayRef.from_dict(r) for r in d["results"]],
                   replica_groups=_groups_from(d["replica_groups"]), mode=mode,
                   channel_id=None if channel is None else int(channel),
                   hlo_opcode=str(d.get("hlo_opcode", "")), **cls._kind_arguments(d))

    def describe(self) -> str:
        groups = C.replica_groups_text(self.replica_groups)
        extra = self.describe_kind()
        return (f"{self.kind} {self.name} ({', '.join(r.describe() for r in self.operands)})"
                f" -> ({', '.join(r.describe() for r in self.results)}) "
                f"replica_groups={groups} {self.mode}{', ' + extra if extra else ''}")


@dataclass
class _ReducingThunk(CollectiveThunk):
    reduction: str = "sum"

    def combines(self) -> list[Callable]:
        return [self._combine(ref) for ref in self.operands]

    def _combine(self, ref: ArrayRef) -> Callable:
        combine = reduction_function(self.reduction, ref.storage_dtype)
        if ref.element_type not in _SUB_BYTE_BITS:
            return combine
        return lambda a, b: _wrap_sub_byte(combine(a, b), ref.element_type)

    def _kind_fields(self):
        return {"reduction": self.reduction, **self._more_fields()}

    def _more_fields(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _kind_arguments(cls, d):
        reduction = str(d["reduction"])
        if reduction not in REDUCTION_KINDS:
            raise ValueError(f"reduction {reduction!r} is not one of {REDUCTION_KINDS}")
        return {"reduction": reduction, **cls._more_arguments(d)}

    @classmethod
    def _more_arguments(cls, d) -> dict[str, Any]:
        return {}

    def describe_kind(self) -> str:
        return f"reduction={self.reduction}"

    def _reduction_refusal(self) -> str | None:
        for ref in self.operands:
            try:
                nccl.reduction_call(ref.element_type, self.reduction)
            except UnsupportedError as e:
                return str(e)
        return None


# An all-reduce of at least this many bytes per device is computed by all
# its participants at once, each reducing a slice of it (below, the last
# participant to arrive computes it alone: one rendezvous instead of two).
PARALLEL_ALL_REDUCE_BYTES = 1 << 18


def _flat(ctx: ExecutionContext, ref: ArrayRef) -> np.ndarray:
    """The elements of `ref` in their physical order, as one writable
    vector of its storage dtype (a view of the buffer)."""
    return np.ndarray((ref.num_elements,), ref.storage_dtype,
                      buffer=ctx.buffers[ref.slice.allocation], offset=ref.slice.offset)


@_register
@dataclass
class AllReduceThunk(_ReducingThunk):
    """Every participant receives the reduction of the participants'
    operands, folded in group order. A large one is computed by every
    participant at once: after a first rendezvous (every device hands over
    its operand and result buffers), participant p reduces slice p of the
    elements (in group order, as the fold does) into its own result and
    copies it into the others' results; a second rendezvous waits until
    every slice is written, so that no operand is overwritten while a
    participant still reads it."""
    kind: ClassVar[str] = "all_reduce"
    opcode: ClassVar[str] = "all-reduce"

    def compute(self, entries, ids):
        return C.all_reduce(entries, self.combines())

    def nccl_refusal(self):
        return _first(self._reduction_refusal(), super().nccl_refusal())

    def nccl_ops(self, pointer, rank, ranks, ids, scratch=0):
        self._check_sizes(ranks, 1, 1)
        ops = []
        for a, b in zip(self.operands, self.results):
            dtype, op, per = nccl.reduction_call(a.element_type, self.reduction)
            ops.append(NcclOp("all_reduce", pointer(a), pointer(b), a.num_elements * per,
                              dtype, op))
        return ops

    def execute(self, ctx: ExecutionContext) -> None:
        if ctx.target == "cuda":
            self.execute_nccl(ctx)
            return
        endpoint = getattr(ctx, "collectives", None)
        if endpoint is None or not self._in_slices():
            super().execute(ctx)
            return
        group, _ = self.participants(endpoint)
        if len(group) == 1:
            super().execute(ctx)
            return
        ins = [_flat(ctx, ref) for ref in self.operands]
        outs = [_flat(ctx, ref) for ref in self.results]
        everyone = endpoint.meet(self, group, (ins, outs), lambda entries: [entries] * len(entries))
        position = group.index(endpoint.device)
        n = len(group)
        with np.errstate(all="ignore"):
            for k, ref in enumerate(self.results):
                size = ref.num_elements
                lo, hi = size * position // n, size * (position + 1) // n
                if lo == hi:
                    continue
                combine = reduction_function(self.reduction, ref.storage_dtype)
                mine = outs[k][lo:hi]
                np.copyto(mine, everyone[0][0][k][lo:hi])
                for operands, _ in everyone[1:]:
                    combine(mine, operands[k][lo:hi], out=mine)
                for q, (_, results) in enumerate(everyone):
                    if q != position:
                        np.copyto(results[k][lo:hi], mine)
        # Every slice written, every operand read.
        endpoint.meet(self, group, None, lambda entries: [None] * len(entries))
        ctx.stats["collectives"] += 1

    def _in_slices(self) -> bool:
        """Whether this all-reduce is computed slice by slice: large, every
        result in its operand's element type and layout (elements in the
        same physical order), no sub-byte type, and no result overlapping
        an operand (a participant writes others' results while they read
        their operands)."""
        if sum(ref.nbytes for ref in self.operands) < PARALLEL_ALL_REDUCE_BYTES:
            return False
        for a, b in zip(self.operands, self.results):
            if a.element_type != b.element_type or a.element_type in _SUB_BYTE_BITS or \
                    a.dims != b.dims or a.major_to_minor != b.major_to_minor:
                return False
        return not any(r.slice.overlaps(o.slice) for r in self.results for o in self.operands)


@_register
@dataclass
class ReduceScatterThunk(_ReducingThunk):
    """The all-reduce split along `dimension`: participant i receives
    block i."""
    kind: ClassVar[str] = "reduce_scatter"
    opcode: ClassVar[str] = "reduce-scatter"
    dimension: int = 0

    def compute(self, entries, ids):
        return C.reduce_scatter(entries, self.dimension, self.combines())

    def nccl_refusal(self):
        return _first(self._reduction_refusal(), super().nccl_refusal(),
                      *(_dimension_refusal(a, self.dimension, f"operand {k}")
                        for k, a in enumerate(self.operands)))

    def nccl_scratch_bytes(self, ranks):
        return sum(_aligned(a.nbytes) for a in self.operands if _rows(a, self.dimension)[0] > 1)

    def nccl_ops(self, pointer, rank, ranks, ids, scratch=0):
        self._check_sizes(ranks, 1, ranks)
        copies, calls = [], []
        for a, b in zip(self.operands, self.results):
            dtype, op, per = nccl.reduction_call(a.element_type, self.reduction)
            send = pointer(a)
            rows, row = _rows(a, self.dimension)
            if rows > 1 and a.nbytes:
                # rank r's block is a column of rows: made one run first
                copies += nccl.split_blocks(send, scratch, rows, row // ranks, ranks)
                send, scratch = scratch, scratch + _aligned(a.nbytes)
            calls.append(NcclOp("reduce_scatter", send, pointer(b), b.num_elements * per,
                                dtype, op))
        return copies + calls

    def _more_fields(self):
        return {"dimension": self.dimension}

    @classmethod
    def _more_arguments(cls, d):
        return {"dimension": int(d["dimension"])}

    def describe_kind(self) -> str:
        return f"reduction={self.reduction}, dimension={self.dimension}"


@_register
@dataclass
class AllGatherThunk(CollectiveThunk):
    """The participants' operands concatenated along `dimension`."""
    kind: ClassVar[str] = "all_gather"
    opcode: ClassVar[str] = "all-gather"
    dimension: int = 0

    def compute(self, entries, ids):
        return C.all_gather(entries, self.dimension)

    def nccl_refusal(self):
        return _first(super().nccl_refusal(),
                      *(_dimension_refusal(b, self.dimension, f"result {k}")
                        for k, b in enumerate(self.results)))

    def nccl_scratch_bytes(self, ranks):
        return sum(_aligned(b.nbytes) for b in self.results if _rows(b, self.dimension)[0] > 1)

    def nccl_ops(self, pointer, rank, ranks, ids, scratch=0):
        self._check_sizes(ranks, ranks, 1)
        calls, copies = [], []
        for a, b in zip(self.operands, self.results):
            recv = pointer(b)
            rows, row = _rows(b, self.dimension)
            if rows > 1 and b.nbytes:
                # gathered as runs, then each rank's run made a column of rows
                copies += nccl.gather_blocks(scratch, recv, rows, row // ranks, ranks)
                recv, scratch = scratch, scratch + _aligned(b.nbytes)
            calls.append(NcclOp("all_gather", pointer(a), recv, a.nbytes, nccl.movement_type()))
        return calls + copies

    def _kind_fields(self):
        return {"dimension": self.dimension}

    @classmethod
    def _kind_arguments(cls, d):
        return {"dimension": int(d["dimension"])}

    def describe_kind(self) -> str:
        return f"dimension={self.dimension}"


@_register
@dataclass
class AllToAllThunk(CollectiveThunk):
    """The array form (`dimension` set): the operand split along it, block
    i to participant i, received blocks concatenated in group order. The
    tuple form (`dimension` None): operand i to participant i."""
    kind: ClassVar[str] = "all_to_all"
    opcode: ClassVar[str] = "all-to-all"
    dimension: int | None = None

    def compute(self, entries, ids):
        if self.dimension is None:
            return C.all_to_all_tuple(entries)
        if any(len(e) != 1 for e in entries):
            raise HloError("all-to-all with dimensions={d} takes one operand")
        return [[r] for r in C.all_to_all([e[0] for e in entries], self.dimension)]

    def nccl_refusal(self):
        if self.dimension is None:
            return super().nccl_refusal()
        if len(self.operands) != 1 or len(self.results) != 1:
            return "an all-to-all with dimensions={d} takes one operand"
        return _first(super().nccl_refusal(),
                      _dimension_refusal(self.operands[0], self.dimension, "the operand"))

    def _array_rows(self) -> tuple[int, int]:
        return _rows(self.operands[0], self.dimension)

    def nccl_scratch_bytes(self, ranks):
        if self.dimension is None or self._array_rows()[0] <= 1:
            return 0
        return 2 * _aligned(self.operands[0].nbytes)

    def nccl_ops(self, pointer, rank, ranks, ids, scratch=0):
        byte = nccl.movement_type()
        before, after = [], []
        if self.dimension is None:
            # Operand i goes to participant i; result i comes from it.
            if len(self.operands) != ranks:
                raise self.error(f"the tuple all-to-all has {len(self.operands)} operands "
                                 f"for a group of {ranks}")
            pieces = [(pointer(a), pointer(b), a.nbytes, b.nbytes)
                      for a, b in zip(self.operands, self.results)]
        else:
            a, b = self.operands[0], self.results[0]
            self._check_sizes(ranks, 1, 1)
            rows, row = self._array_rows()
            if row % ranks:
                raise self.error(f"{a.describe()} does not split into {ranks} blocks")
            chunk = a.nbytes // ranks
            send, recv = pointer(a), pointer(b)
            if rows > 1 and a.nbytes:
                # Block p is a column of rows: sent from, received into scratch.
                send, recv = scratch, scratch + _aligned(a.nbytes)
                before = nccl.split_blocks(pointer(a), send, rows, row // ranks, ranks)
                after = nccl.gather_blocks(recv, pointer(b), rows, row // ranks, ranks)
            pieces = [(send + p * chunk, recv + p * chunk, chunk, chunk) for p in range(ranks)]
        # The block this rank keeps is copied before the one group of every
        # send and receive (a local step would split the group).
        own, calls = [], []
        for peer, (send, recv, out_bytes, in_bytes) in enumerate(pieces):
            if peer == rank:
                if out_bytes != in_bytes:
                    raise self.error(f"block {peer}: {out_bytes} bytes sent into "
                                     f"{in_bytes}")
                own.append(NcclOp("copy", send, recv, out_bytes))
                continue
            calls.append(NcclOp("send", send=send, count=out_bytes, datatype=byte, peer=peer))
            calls.append(NcclOp("recv", recv=recv, count=in_bytes, datatype=byte, peer=peer))
        return before + own + calls + after

    def _kind_fields(self):
        return {"dimension": self.dimension}

    @classmethod
    def _kind_arguments(cls, d):
        dim = d.get("dimension")
        return {"dimension": None if dim is None else int(dim)}

    def describe_kind(self) -> str:
        return "tuple form" if self.dimension is None else f"dimension={self.dimension}"


@_register
@dataclass
class RaggedAllToAllThunk(CollectiveThunk):
    """Rows of each participant's input to the others, at the offsets and
    in the sizes its operands hold (read when it runs): operands input,
    output, input_offsets, send_sizes, output_offsets, recv_sizes; the
    result is the output operand with the rows received written in."""
    kind: ClassVar[str] = "ragged_all_to_all"
    opcode: ClassVar[str] = "ragged-all-to-all"

    def compute(self, entries, ids):
        return [[r] for r in C.ragged_all_to_all(entries)]

    def nccl_refusal(self):
        # The sizes live in device memory: NCCL's sends and receives would
        # have to wait for a copy of them to the host.
        return "a ragged all-to-all over NCCL is not supported yet"


@_register
@dataclass
class CollectivePermuteThunk(CollectiveThunk):
    """Each (source, target) pair sends the source's operands to the
    target; a device that is no target receives zeros. The pairs name
    partitions (cross-partition: the permute runs in each replica) or
    replicas (cross-replica: in each partition)."""
    kind: ClassVar[str] = "collective_permute"
    opcode: ClassVar[str] = "collective-permute"
    pairs: list[tuple[int, int]] = field(default_factory=list)

    def _find_participants(self, device: int, R: int, P: int):
        replica, partition = divmod(device, P)
        if C.GroupMode(self.mode) is C.GroupMode.CROSS_PARTITION:
            return tuple(replica * P + p for p in range(P)), tuple(range(P))
        return tuple(r * P + partition for r in range(R)), tuple(range(R))

    def compute(self, entries, ids):
        return C.collective_permute(entries, ids, self.pairs)

    def nccl_ops(self, pointer, rank, ranks, ids, scratch=0):
        self._check_sizes(ranks, 1, 1)
        byte = nccl.movement_type()
        me = ids[rank]
        local, calls = [], []      # local steps first: one group of NCCL calls
        sources = [s for s, t in self.pairs if t == me]
        for _, target in ((s, t) for s, t in self.pairs if s == me):
            peer = ids.index(target)
            for a, b in zip(self.operands, self.results):
                if peer == rank:
                    local.append(NcclOp("copy", pointer(a), pointer(b), a.nbytes))
                else:
                    calls.append(NcclOp("send", send=pointer(a), count=a.nbytes,
                                        datatype=byte, peer=peer))
        if not sources:     # nobody sends here: zeros
            local += [NcclOp("zero", recv=pointer(b), count=b.nbytes) for b in self.results]
        for source in sources:
            peer = ids.index(source)
            if peer != rank:
                calls += [NcclOp("recv", recv=pointer(b), count=b.nbytes, datatype=byte,
                                 peer=peer) for b in self.results]
        return local + calls

    def _kind_fields(self):
        return {"pairs": [list(p) for p in self.pairs]}

    @classmethod
    def _kind_arguments(cls, d):
        pairs = [(int(s), int(t)) for s, t in d["pairs"]]
        try:
            C.parse_source_target_pairs(pairs)
        except HloError as e:
            raise ValueError(str(e)) from None
        return {"pairs": pairs}

    def describe_kind(self) -> str:
        return "pairs={" + ",".join(f"{{{s},{t}}}" for s, t in self.pairs) + "}"


@_register
@dataclass
class CollectiveBroadcastThunk(CollectiveThunk):
    """Every participant receives the operands of its group's first
    member."""
    kind: ClassVar[str] = "collective_broadcast"
    opcode: ClassVar[str] = "collective-broadcast"

    def compute(self, entries, ids):
        return C.collective_broadcast(entries)

    def nccl_ops(self, pointer, rank, ranks, ids, scratch=0):
        self._check_sizes(ranks, 1, 1)
        # The root is the group's first member (rank 0 of its clique).
        return [NcclOp("broadcast", pointer(a), pointer(b), a.nbytes, nccl.movement_type(),
                       peer=0) for a, b in zip(self.operands, self.results)]


@_register
@dataclass
class DeviceIdThunk(Thunk):
    """replica-id / partition-id: this device's id (0 on one device)."""
    kind: ClassVar[str] = "device_id"
    which: str = "partition"      # "replica" or "partition"
    result: ArrayRef = None

    def execute(self, ctx: ExecutionContext) -> None:
        endpoint = getattr(ctx, "collectives", None)
        value = 0 if endpoint is None else (
            endpoint.replica_id if self.which == "replica" else endpoint.partition_id)
        if ctx.target == "cuda":    # a u32 written on the stream
            ctx.memset(self.result.slice, int(value), 4, 1)
            return
        ctx.array(self.result)[...] = value

    def buffer_uses(self):
        return [(self.result.slice, True)]

    def _fields(self):
        return {"which": self.which, "result": self.result.to_dict()}

    @classmethod
    def _from_dict(cls, d):
        which = str(d["which"])
        if which not in ("replica", "partition"):
            raise ValueError(f"which must be 'replica' or 'partition', got {which!r}")
        return cls(d["name"], which, ArrayRef.from_dict(d["result"]))

    def describe(self) -> str:
        return f"device_id {self.name} {self.which}-id -> {self.result.describe()}"


COLLECTIVE_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                              "collective_permute", "collective_broadcast", "device_id"})
