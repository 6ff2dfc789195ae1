"""The reference semantics of XLA's collectives: which devices meet, and
what each of them receives. numpy only (no compiler, no threads: the
interpreter's `evaluate_devices` runs the devices and their rendezvous).

Devices. A program runs on num_replicas x num_partitions devices; device
`d` is (replica r, partition p) with the global id d = r * num_partitions
+ p (XLA's flattened id, and the order `evaluate_devices` lists them in).

Replica groups, as XLA prints them (`parse_replica_groups`):

    replica_groups={}                    every id in one group
    replica_groups={{0,1},{2,3}}         the groups, listed
    replica_groups=[2,4]<=[8]            iota(8) as 2 groups of 4
    replica_groups=[2,4]<=[4,2]T(1,0)    iota(8).reshape(4,2).transpose(1,0)
                                         .reshape(2,4): {{0,2,4,6},{1,3,5,7}}
    replica_groups=mesh['a'=2,'b'=4] {'b'}
                                         the groups along the mesh axes named
                                         (`mesh_axes_replica_groups`):
                                         {{0,1,2,3},{4,5,6,7}}

What the ids in a group are depends on the collective's mode
(`group_mode`, XLA's GetCollectiveOpGroupMode):

    no channel_id                        cross-replica: replica ids; the
                                         group meets in each partition
    channel_id, all-reduce / all-gather / reduce-scatter:
        use_global_device_ids=false      cross-replica-and-partition:
                                         replica ids; the group is those
                                         replicas in every partition
        use_global_device_ids=true       flattened ids (global device ids)
    channel_id, all-to-all / collective-permute / collective-broadcast
                                         cross-partition: partition ids;
                                         the group meets in each replica

`participating_devices` gives the global ids a device meets, in group order
(XLA's GetParticipatingDevices); `device_groups` every group at once.

The collectives (`all_reduce`, `all_gather`, `reduce_scatter`,
`all_to_all`, `all_to_all_tuple`, `collective_permute`,
`collective_broadcast`) take the participants' operands in group order and
return what each participant receives.
"""

from __future__ import annotations

import enum
import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import HloError, XlaGpuError

__all__ = ["CollectiveError", "CollectiveTimeoutError", "GroupMode", "COLLECTIVE_OPCODES",
           "ASYNC_COLLECTIVE_STARTS", "ASYNC_COLLECTIVE_DONES", "parse_replica_groups", "iota_replica_groups",
           "mesh_axes_replica_groups",
           "parse_source_target_pairs", "group_mode", "group_mode_for",
           "participating_devices", "device_groups", "group_size", "group_size_for",
           "instruction_groups",
           "channel_id", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
           "all_to_all_tuple", "collective_permute", "collective_broadcast"]


class CollectiveError(XlaGpuError, RuntimeError):
    """A collective could not complete on every device: a participant
    failed, finished its program without reaching it, or waits at another
    collective (a deadlock). `instruction` names the collective, `missing`
    the global ids of the devices that did not arrive, `device_errors` what
    each device that stopped raised (when several devices are involved)."""

    def __init__(self, message: str, instruction: str | None = None,
                 missing: Sequence[int] = (),
                 device_errors: dict[int, BaseException] | None = None):
        super().__init__(message)
        self.instruction = instruction
        self.missing = tuple(missing)
        self.device_errors = dict(device_errors or {})


class CollectiveTimeoutError(CollectiveError, TimeoutError):
    """A rendezvous was not complete within the `timeout=` it was given."""


# The collectives and their async pairs as XLA prints them.
COLLECTIVE_OPCODES = frozenset({
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
    "collective-broadcast", "all-reduce-start", "all-gather-start",
    "collective-permute-start", "ragged-all-to-all"})
ASYNC_COLLECTIVE_STARTS = {"all-reduce-start": "all-reduce", "all-gather-start": "all-gather",
                           "collective-permute-start": "collective-permute"}
# The done of each async start.
ASYNC_COLLECTIVE_DONES = {"all-reduce-start": "all-reduce-done",
                          "all-gather-start": "all-gather-done",
                          "collective-permute-start": "collective-permute-done"}
_USES_GLOBAL_DEVICE_IDS = frozenset({"all-reduce", "all-gather", "reduce-scatter",
                                     "all-reduce-start", "all-gather-start"})


class GroupMode(enum.Enum):
    CROSS_REPLICA = "cross-replica"
    CROSS_PARTITION = "cross-partition"
    CROSS_REPLICA_AND_PARTITION = "cross-replica-and-partition"
    FLATTENED_ID = "flattened-id"


# ------------------------------------------------------------ replica groups

_INT_LIST = r"\[\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\]"
_IOTA = re.compile(rf"^\s*{_INT_LIST}\s*<=\s*{_INT_LIST}\s*"
                   r"(?:T\s*\(\s*(\d+(?:\s*,\s*\d+)*)?\s*\))?\s*$")


# More device ids than any machine has: refused before an array of them is
# made (a typo'd size must not exhaust the memory).
_MAX_IDS = 1 << 20


def _check_total(total: int, text: str) -> None:
    if total > _MAX_IDS:
        raise HloError(f"{text}: {total} device ids, more than the {_MAX_IDS} supported")


def _ints(text: str | None) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",")) if text and text.strip() else ()


def iota_replica_groups(num_groups: int, group_size: int,
                        reshape_dims: Sequence[int] | None = None,
                        transpose_perm: Sequence[int] | None = None
                        ) -> tuple[tuple[int, ...], ...]:
    """XLA's IotaReplicaGroupList: iota(num_groups * group_size) reshaped to
    `reshape_dims`, transposed by `transpose_perm`, read row by row as
    num_groups groups of group_size ids."""
    total = num_groups * group_size
    dims = tuple(reshape_dims) if reshape_dims is not None else (total,)
    perm = tuple(transpose_perm) if transpose_perm is not None else tuple(range(len(dims)))
    if num_groups < 0 or group_size < 0 or any(d < 0 for d in dims):
        raise HloError(f"iota replica groups [{num_groups},{group_size}]<={list(dims)}: "
                       "negative size")
    if math.prod(dims) != total:
        raise HloError(f"iota replica groups [{num_groups},{group_size}]<={list(dims)}: "
                       f"the iota has {math.prod(dims)} ids, the groups {total}")
    _check_total(total, f"iota replica groups [{num_groups},{group_size}]")
    if sorted(perm) != list(range(len(dims))):
        raise HloError(f"iota replica groups: T{perm} is not a permutation of the "
                       f"{len(dims)} reshape dimensions")
    ids = np.arange(total, dtype=np.int64).reshape(dims).transpose(perm)
    return tuple(tuple(int(i) for i in row) for row in ids.reshape(num_groups, group_size))


def parse_replica_groups(text: Any) -> tuple[tuple[int, ...], ...]:
    """The groups of a `replica_groups=` value (the raw text the parser
    keeps, or groups already parsed); () for `{}` (every id in one group).
    HloError for text of neither form, an empty group or an id that is
    negative or appears twice."""
    if isinstance(text, (tuple, list)):
        groups = tuple(tuple(int(i) for i in g) for g in text)
    elif not isinstance(text, str):
        raise HloError(f"replica_groups: expected text, got {type(text).__name__}")
    elif text.strip().startswith("mesh"):
        groups = mesh_axes_replica_groups(text)
    elif text.strip().startswith("["):
        m = _IOTA.match(text)
        if m is None:
            raise HloError(f"replica_groups={text}: expected the iota form "
                           "[groups,size]<=[dims] or [groups,size]<=[dims]T(perm)")
        shape, dims, perm = _ints(m.group(1)), _ints(m.group(2)), m.group(3)
        if len(shape) != 2:
            raise HloError(f"replica_groups={text}: the iota form needs 2 dimensions "
                           f"[groups,size], got {list(shape)}")
        groups = iota_replica_groups(shape[0], shape[1], dims,
                                     _ints(perm) if perm is not None else None)
    else:
        groups = _parse_int_list_list(text, "replica_groups")
    seen: set[int] = set()
    for k, group in enumerate(groups):
        if not group:
            raise HloError(f"replica_groups={_text(text)}: group {k} is empty")
        for i in group:
            if i < 0:
                raise HloError(f"replica_groups={_text(text)}: negative id {i}")
            if i in seen:
                raise HloError(f"replica_groups={_text(text)}: id {i} appears in more "
                               "than one place")
            seen.add(i)
    return groups


def replica_groups_text(groups: Sequence[Sequence[int]]) -> str:
    """The explicit `{{0,1},{2,3}}` form of `groups` (parse_replica_groups
    reads it back)."""
    return "{" + ",".join("{" + ",".join(str(int(i)) for i in g) + "}" for g in groups) + "}"


class _MeshText:
    """A cursor over the mesh form's text, for error messages that quote it."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def fail(self, what: str):
        raise HloError(f"replica_groups={self.text}: expected {what} at "
                       f"'{self.text[self.pos:self.pos + 20]}'")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def accept(self, token: str) -> bool:
        self.skip()
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.accept(token):
            self.fail(f"'{token}'")

    def integer(self) -> int:
        self.skip()
        m = re.compile(r"-?\d+").match(self.text, self.pos)
        if m is None:
            self.fail("an integer")
        self.pos = m.end()
        return int(m.group())

    def name(self) -> str:
        self.skip()
        m = re.compile(r"'([^']*)'|([A-Za-z_][A-Za-z0-9_.\-]*)").match(self.text, self.pos)
        if m is None:
            self.fail("an axis name")
        self.pos = m.end()
        return m.group(1) if m.group(1) is not None else m.group(2)

    def ints(self, close: str) -> list[int]:
        out = [self.integer()]
        while self.accept(","):
            out.append(self.integer())
        self.expect(close)
        return out


def mesh_axes_replica_groups(text: str) -> tuple[tuple[int, ...], ...]:
    """XLA's MeshAxesReplicaGroupList, printed as

        mesh['a'=2,'b'=4] {'b'}                       the groups along axis b
        mesh['a'=8] {'a':(2)2}                        along a sub-axis of a: a
                                                      seen as [2, 2, 2], its
                                                      middle dimension
        mesh['x'=8], device_ids=([2,4]T(1,0)) {'x'}   the mesh's devices, an
                                                      iota (reshaped,
                                                      transposed) or a list

    The mesh's device array (axis sizes, row-major) is reshaped so that every
    named axis or sub-axis is a dimension of its own, the dimensions not named
    are moved first and the named ones last (in the order named), and the
    array is read as groups of the named dimensions' size (XLA's
    MeshAxesReplicaGroupList::flattened_replica_groups)."""
    cur = _MeshText(text)
    cur.expect("mesh")
    cur.expect("[")
    names: list[str] = []
    sizes: list[int] = []
    while True:
        names.append(cur.name())
        cur.expect("=")
        sizes.append(cur.integer())
        if cur.accept("]"):
            break
        cur.expect(",")
    if len(set(names)) != len(names) or any(n < 1 for n in sizes):
        raise HloError(f"replica_groups={text}: the mesh's axes must have distinct names "
                       "and positive sizes")
    total = math.prod(sizes)
    _check_total(total, f"replica_groups={text}")
    devices = np.arange(total, dtype=np.int64)
    if cur.accept(","):
        cur.expect("device_ids")
        cur.expect("=")
        cur.expect("(")
        cur.skip()
        if cur.accept("["):
            dims = cur.ints("]")
            perm = cur.ints(")") if cur.accept("T(") else list(range(len(dims)))
            if math.prod(dims) != total or sorted(perm) != list(range(len(dims))):
                raise HloError(f"replica_groups={text}: device_ids {dims} T{perm} does not "
                               f"describe the mesh's {total} devices")
            devices = np.arange(total, dtype=np.int64).reshape(dims).transpose(perm).reshape(-1)
            cur.expect(")")
        else:
            ids = cur.ints(")")
            if sorted(ids) != list(range(total)):
                raise HloError(f"replica_groups={text}: device_ids must be a permutation of "
                               f"0..{total - 1}")
            devices = np.array(ids, dtype=np.int64)
    cur.expect("{")
    refs: list[tuple[int, int | None, int]] = []   # (axis, pre-size or None, size)
    if not cur.accept("}"):
        while True:
            name = cur.name()
            if name not in names:
                raise HloError(f"replica_groups={text}: '{name}' is not an axis of the mesh")
            axis = names.index(name)
            if cur.accept(":"):
                cur.expect("(")
                pre = cur.integer()
                cur.expect(")")
                size = cur.integer()
                if pre < 1 or size < 2 or sizes[axis] % (pre * size) or size >= sizes[axis]:
                    raise HloError(f"replica_groups={text}: '{name}':({pre}){size} is not a "
                                   f"sub-axis of an axis of size {sizes[axis]}")
                refs.append((axis, pre, size))
            else:
                refs.append((axis, None, sizes[axis]))
            if cur.accept("}"):
                break
            cur.expect(",")
    cur.skip()
    if cur.pos != len(text):
        cur.fail("the end of the replica groups")
    group_size = math.prod(size for _, _, size in refs)
    if not refs or group_size < 2:
        raise HloError(f"replica_groups={text}: a mesh-axes group needs more than one device")
    # Each mesh axis becomes one or more dimensions; `named[k]` is the
    # dimension of refs[k].
    dims: list[int] = []
    named: list[int] = [0] * len(refs)
    for axis, full in enumerate(sizes):
        on_axis = [k for k, r in enumerate(refs) if r[0] == axis]
        if not on_axis:
            dims.append(full)
            continue
        if len(on_axis) == 1 and refs[on_axis[0]][1] is None:
            named[on_axis[0]] = len(dims)
            dims.append(full)
            continue
        if any(refs[k][1] is None for k in on_axis):
            raise HloError(f"replica_groups={text}: axis '{names[axis]}' is named whole and "
                           "by a sub-axis")
        covered = 1
        for k in sorted(on_axis, key=lambda k: refs[k][1]):
            pre, size = refs[k][1], refs[k][2]
            if pre % covered:
                raise HloError(f"replica_groups={text}: the sub-axes of '{names[axis]}' "
                               "overlap")
            if pre != covered:
                dims.append(pre // covered)
            named[k] = len(dims)
            dims.append(size)
            covered = pre * size
        if full % covered:
            raise HloError(f"replica_groups={text}: the sub-axes of '{names[axis]}' do not "
                           f"divide its size {full}")
        if covered != full:
            dims.append(full // covered)
    if len(set(named)) != len(named):
        raise HloError(f"replica_groups={text}: an axis is named twice")
    perm = [d for d in range(len(dims)) if d not in named] + named
    ids = devices.reshape(dims).transpose(perm).reshape(-1, group_size)
    return tuple(tuple(int(i) for i in row) for row in ids)


def parse_source_target_pairs(text: Any) -> tuple[tuple[int, int], ...]:
    """The (source, target) pairs of a `source_target_pairs=` value. HloError
    when an entry is not a pair, an id is negative, or a source or a target
    appears twice."""
    if isinstance(text, (tuple, list)):
        pairs = tuple(tuple(int(i) for i in p) for p in text)
    elif isinstance(text, str):
        pairs = _parse_int_list_list(text, "source_target_pairs")
    else:
        raise HloError(f"source_target_pairs: expected text, got {type(text).__name__}")
    sources: set[int] = set()
    targets: set[int] = set()
    for pair in pairs:
        if len(pair) != 2:
            raise HloError(f"source_target_pairs={_text(text)}: {{{','.join(map(str, pair))}}} "
                           "is not a {source,target} pair")
        s, t = pair
        if s < 0 or t < 0:
            raise HloError(f"source_target_pairs={_text(text)}: negative id in {{{s},{t}}}")
        if s in sources:
            raise HloError(f"source_target_pairs={_text(text)}: source {s} appears twice")
        if t in targets:
            raise HloError(f"source_target_pairs={_text(text)}: target {t} appears twice")
        sources.add(s)
        targets.add(t)
    return pairs  # type: ignore[return-value]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def _parse_int_list_list(text: str, what: str) -> tuple[tuple[int, ...], ...]:
    """`{{0,1},{2,3}}` (spaces allowed; `{}` is no lists)."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise HloError(f"{what}={text}: expected {{{{a,b,...}},...}}")
    inner = body[1:-1].strip()
    if not inner:
        return ()
    out: list[tuple[int, ...]] = []
    pos = 0
    item = re.compile(r"\s*\{\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*\}\s*(,|$)")
    while pos < len(inner):
        m = item.match(inner, pos)
        if m is None or (m.group(2) == "," and m.end() == len(inner)):
            raise HloError(f"{what}={text}: expected {{{{a,b,...}},...}}, found "
                           f"'{inner[pos:pos + 20]}'")
        out.append(_ints(m.group(1)))
        pos = m.end()
    return tuple(out)


# -------------------------------------------------------------------- modes

def collective_dimension(inst, opcode: str | None = None) -> int | None:
    """The one dimension an all-gather, reduce-scatter or array all-to-all
    works along (`dimensions={d}`; an all-gather may say
    `all_gather_dimension=d`), None when it names none or several.
    `opcode`: the collective's (an async start's wrapped one)."""
    opcode = opcode or _base_opcode(inst.opcode)
    dims = inst.attrs.get("dimensions")
    if dims is None and opcode == "all-gather":
        dims = inst.attrs.get("all_gather_dimension")
        dims = (dims,) if isinstance(dims, int) else dims
    if not isinstance(dims, tuple) or len(dims) != 1:
        return None
    return int(dims[0])


def channel_id(inst) -> int | None:
    """The instruction's channel_id, None without one."""
    raw = inst.attrs.get("channel_id")
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise inst.error(f"channel_id={raw} is not an integer") from None


def group_mode_for(opcode: str, has_channel_id: bool,
                   use_global_device_ids: bool | None) -> GroupMode:
    """XLA's GetCollectiveOpGroupMode: all-reduce, all-gather and
    reduce-scatter take use_global_device_ids (false when absent); all-to-all,
    collective-permute and collective-broadcast do not (None)."""
    if not has_channel_id:
        if use_global_device_ids:
            raise HloError(f"{opcode}: use_global_device_ids=true needs a channel_id")
        return GroupMode.CROSS_REPLICA
    if use_global_device_ids is None:
        return GroupMode.CROSS_PARTITION
    return GroupMode.FLATTENED_ID if use_global_device_ids else \
        GroupMode.CROSS_REPLICA_AND_PARTITION


def _base_opcode(opcode: str) -> str:
    return ASYNC_COLLECTIVE_STARTS.get(opcode, opcode)


def group_mode(inst) -> GroupMode:
    """The mode of a collective instruction (its async start included)."""
    opcode = _base_opcode(inst.opcode)
    if opcode in _USES_GLOBAL_DEVICE_IDS:
        ugdi: bool | None = bool(inst.attrs.get("use_global_device_ids", False))
    else:
        ugdi = None
    try:
        return group_mode_for(opcode, channel_id(inst) is not None, ugdi)
    except HloError as e:
        raise inst.error(str(e).split(": ", 1)[-1]) from None


def _full_groups(groups, mode: GroupMode, num_replicas: int, num_partitions: int):
    if groups:
        return groups
    if mode is GroupMode.FLATTENED_ID:
        raise HloError("replica groups cannot be empty with use_global_device_ids=true "
                       "(flattened ids)")
    count = num_partitions if mode is GroupMode.CROSS_PARTITION else num_replicas
    return (tuple(range(count)),)


def _check_counts(num_replicas: int, num_partitions: int) -> None:
    if not (isinstance(num_replicas, int) and isinstance(num_partitions, int)) or \
            num_replicas < 1 or num_partitions < 1:
        raise HloError(f"num_replicas={num_replicas!r} and num_partitions="
                       f"{num_partitions!r} must be positive integers")


def _check_id(value: int, limit: int, what: str) -> int:
    if not 0 <= value < limit:
        raise HloError(f"replica groups name {what} {value}, but there are only {limit}")
    return value


def device_groups(groups: Sequence[Sequence[int]], mode: GroupMode, num_replicas: int,
                  num_partitions: int) -> list[tuple[int, ...]]:
    """Every group of global device ids, each in group order (XLA's
    GetParticipatingDevicesGroups)."""
    _check_counts(num_replicas, num_partitions)
    groups = _full_groups(tuple(tuple(g) for g in groups), mode, num_replicas, num_partitions)
    R, P = num_replicas, num_partitions
    out: list[tuple[int, ...]] = []
    for group in groups:
        if mode is GroupMode.CROSS_REPLICA:
            for p in range(P):
                out.append(tuple(_check_id(r, R, "replica") * P + p for r in group))
        elif mode is GroupMode.CROSS_PARTITION:
            for r in range(R):
                out.append(tuple(r * P + _check_id(p, P, "partition") for p in group))
        elif mode is GroupMode.CROSS_REPLICA_AND_PARTITION:
            out.append(tuple(_check_id(r, R, "replica") * P + p
                             for r in group for p in range(P)))
        else:
            out.append(tuple(_check_id(d, R * P, "device") for d in group))
    return out


def participating_devices(groups: Sequence[Sequence[int]], mode: GroupMode, device: int,
                          num_replicas: int, num_partitions: int) -> tuple[int, ...]:
    """The global ids of the devices `device` meets (itself included), in
    group order (XLA's GetParticipatingDevices). HloError when the device's
    id is in no group or an id is out of range."""
    _check_counts(num_replicas, num_partitions)
    R, P = num_replicas, num_partitions
    if not 0 <= device < R * P:
        raise HloError(f"device {device} is not one of the {R * P} devices")
    replica, partition = divmod(device, P)
    groups = _full_groups(tuple(tuple(g) for g in groups), mode, R, P)
    own = {GroupMode.CROSS_REPLICA: replica, GroupMode.CROSS_PARTITION: partition,
           GroupMode.CROSS_REPLICA_AND_PARTITION: replica,
           GroupMode.FLATTENED_ID: device}[mode]
    found = [g for g in groups if own in g]
    if not found:
        kind = {GroupMode.CROSS_PARTITION: "partition", GroupMode.FLATTENED_ID: "device"
                }.get(mode, "replica")
        raise HloError(f"{kind} id {own} (device {device}) is in none of the replica "
                       f"groups {[list(g) for g in groups]} ({mode.value})")
    group = found[0]
    if mode is GroupMode.CROSS_REPLICA:
        return tuple(_check_id(r, R, "replica") * P + partition for r in group)
    if mode is GroupMode.CROSS_PARTITION:
        return tuple(replica * P + _check_id(p, P, "partition") for p in group)
    if mode is GroupMode.CROSS_REPLICA_AND_PARTITION:
        return tuple(_check_id(r, R, "replica") * P + p for r in group for p in range(P))
    return tuple(_check_id(d, R * P, "device") for d in group)


def instruction_groups(inst) -> tuple[tuple[int, ...], ...]:
    """The parsed replica_groups of a collective (() when absent or `{}`),
    HloError naming the instruction when they are malformed."""
    raw = inst.attrs.get("replica_groups")
    if raw is None:
        return ()
    try:
        return parse_replica_groups(raw)
    except HloError as e:
        raise inst.error(str(e)) from None


def group_size_for(groups: Sequence[Sequence[int]], mode: GroupMode,
                   num_replicas: int | None = None,
                   num_partitions: int | None = None) -> int | None:
    """How many devices each group has: None when that depends on counts not
    given, or when the groups differ in size. HloError for empty groups in
    flattened-id mode."""
    if not groups:
        if mode is GroupMode.FLATTENED_ID:
            raise HloError("replica groups cannot be empty with use_global_device_ids=true "
                           "(flattened ids)")
        if mode is GroupMode.CROSS_PARTITION:
            return num_partitions
        if mode is GroupMode.CROSS_REPLICA:
            return num_replicas
        if num_replicas is None or num_partitions is None:
            return None
        return num_replicas * num_partitions
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        return None
    size = sizes.pop()
    if mode is GroupMode.CROSS_REPLICA_AND_PARTITION:
        return None if num_partitions is None else size * num_partitions
    return size


def group_size(inst, num_replicas: int | None = None,
               num_partitions: int | None = None) -> int | None:
    """`group_size_for` of a collective instruction."""
    groups = instruction_groups(inst)
    try:
        return group_size_for(groups, group_mode(inst), num_replicas, num_partitions)
    except HloError as e:
        raise inst.error(str(e)) from None


# ---------------------------------------------------------------- semantics
#
# Each function takes one entry per participant, in group order, and returns
# one per participant. An entry is the list of the participant's operands
# (several for the tuple forms).

Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _same_shapes(values: Sequence[Sequence[np.ndarray]], what: str) -> None:
    first = [(np.asarray(v).shape, np.asarray(v).dtype) for v in values[0]]
    for k, entry in enumerate(values[1:], 1):
        if [(np.asarray(v).shape, np.asarray(v).dtype) for v in entry] != first:
            raise HloError(f"{what}: participant {k} has operands "
                           f"{[(np.asarray(v).dtype.name, np.asarray(v).shape) for v in entry]}"
                           f", participant 0 {[(d.name, s) for s, d in first]}")


def all_reduce(values: Sequence[Sequence[np.ndarray]],
               combine: Combine | Sequence[Combine]) -> list[list[np.ndarray]]:
    """Every participant receives, for each operand, the fold of the
    participants' values in group order: combine(...combine(x0, x1)..., xn-1).
    `combine` may be one function per operand."""
    _same_shapes(values, "all-reduce")
    count = len(values[0])
    combines = list(combine) if isinstance(combine, (list, tuple)) else [combine] * count
    reduced = []
    for k in range(count):
        acc = np.asarray(values[0][k])
        for entry in values[1:]:
            acc = np.asarray(combines[k](acc, np.asarray(entry[k])))
        reduced.append(acc)
    return [[np.array(r, copy=True) for r in reduced] for _ in values]


def all_gather(values: Sequence[Sequence[np.ndarray]], dimension: int) -> list[list[np.ndarray]]:
    """Every participant receives, for each operand, the participants'
    values concatenated along `dimension` in group order."""
    _same_shapes(values, "all-gather")
    gathered = [np.concatenate([np.asarray(entry[k]) for entry in values], axis=dimension)
                for k in range(len(values[0]))]
    return [[np.array(g, copy=True) for g in gathered] for _ in values]


def reduce_scatter(values: Sequence[Sequence[np.ndarray]], dimension: int,
                   combine: Combine | Sequence[Combine]) -> list[list[np.ndarray]]:
    """The all-reduce, split along `dimension` into one block per
    participant: participant i receives block i."""
    reduced = all_reduce(values, combine)[0]
    n = len(values)
    out: list[list[np.ndarray]] = [[] for _ in range(n)]
    for r in reduced:
        if r.shape[dimension] % n:
            raise HloError(f"reduce-scatter: dimension {dimension} of {r.shape} does not "
                           f"split into {n} blocks")
        for i, block in enumerate(np.split(r, n, axis=dimension)):
            out[i].append(np.array(block, copy=True))
    return out


def all_to_all(values: Sequence[np.ndarray], dimension: int) -> list[np.ndarray]:
    """The array form (dimensions={d}): each participant's operand is split
    along d into one block per participant; participant i receives block i
    of every participant, concatenated along d in group order."""
    _same_shapes([[v] for v in values], "all-to-all")
    n = len(values)
    shape = np.asarray(values[0]).shape
    if shape[dimension] % n:
        raise HloError(f"all-to-all: dimension {dimension} of {shape} does not split into "
                       f"{n} blocks")
    blocks = [np.split(np.asarray(v), n, axis=dimension) for v in values]
    return [np.concatenate([blocks[j][i] for j in range(n)], axis=dimension)
            for i in range(n)]


def all_to_all_tuple(values: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """The tuple form (no dimensions): each participant has one operand per
    participant; participant i receives operand i of every participant, in
    group order."""
    n = len(values)
    for k, entry in enumerate(values):
        if len(entry) != n:
            raise HloError(f"all-to-all: the tuple form needs one operand per participant "
                           f"({n}); participant {k} has {len(entry)}")
    for i in range(n):
        _same_shapes([[entry[i]] for entry in values], f"all-to-all operand {i}")
    return [[np.array(values[j][i], copy=True) for j in range(n)] for i in range(n)]


def collective_permute(values: Sequence[Sequence[np.ndarray]], ids: Sequence[int],
                       pairs: Sequence[tuple[int, int]]) -> list[list[np.ndarray]]:
    """Participant with id t receives the operands of the participant with
    id s for each pair (s, t); a participant that is no target receives
    zeros. `ids` are the participants' ids as the pairs name them."""
    index = {d: k for k, d in enumerate(ids)}
    for s, t in pairs:
        for which, d in (("source", s), ("target", t)):
            if d not in index:
                raise HloError(f"collective-permute: {which} {d} of the pair {{{s},{t}}} is "
                               f"not one of the ids {list(ids)}")
    source_of = {t: s for s, t in pairs}
    out = []
    for d, entry in zip(ids, values):
        src = source_of.get(d)
        if src is None:
            out.append([np.zeros_like(np.asarray(v)) for v in entry])
        else:
            out.append([np.array(v, copy=True) for v in values[index[src]]])
    return out


def collective_broadcast(values: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """Every participant receives the operands of the group's first member."""
    _same_shapes(values, "collective-broadcast")
    return [[np.array(v, copy=True) for v in values[0]] for _ in values]


# The operands of a ragged-all-to-all, in order.
RAGGED_OPERANDS = ("input", "output", "input_offsets", "send_sizes", "output_offsets",
                   "recv_sizes")


def ragged_all_to_all(values: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Each participant's entry is (input, output, input_offsets,
    send_sizes, output_offsets, recv_sizes); the offsets and sizes hold N
    numbers (any shape, read in row-major order), N a multiple of the
    group size n, so that numbers i of a participant are about its update
    i % (N/n) for participant i // (N/n). Participant s sends rows
    input[input_offsets[i]:][:send_sizes[i]] (leading dimension) to that
    participant, which writes them at output_offsets[i] of its output.
    Every participant receives its output with the rows sent to it written
    in; recv_sizes must state what it is sent (recv_sizes[s*N/n + j] of
    the receiver, for update j of sender s)."""
    n = len(values)
    entries = []
    for k, entry in enumerate(values):
        if len(entry) != len(RAGGED_OPERANDS):
            raise HloError(f"ragged-all-to-all: participant {k} has {len(entry)} operands, "
                           f"not {len(RAGGED_OPERANDS)} ({', '.join(RAGGED_OPERANDS)})")
        data = [np.asarray(entry[0]), np.asarray(entry[1])]
        numbers = [np.asarray(v).reshape(-1).astype(np.int64) for v in entry[2:]]
        if len({len(v) for v in numbers}) != 1:
            raise HloError(f"ragged-all-to-all: participant {k}'s offsets and sizes have "
                           f"{[len(v) for v in numbers]} numbers, not one count")
        entries.append((data, numbers))
    count = len(entries[0][1][0])
    for k, (_, numbers) in enumerate(entries):
        if len(numbers[0]) != count:
            raise HloError(f"ragged-all-to-all: participant {k} has {len(numbers[0])} "
                           f"updates, participant 0 {count}")
    if count % n:
        raise HloError(f"ragged-all-to-all: {count} updates do not split among {n} "
                       "participants")
    per_peer = count // n
    results = [np.array(data[1], copy=True) for data, _ in entries]
    for s, ((source, _), (input_offsets, send_sizes, output_offsets, _)) in \
            enumerate(entries):
        for i in range(count):
            d, j = divmod(i, per_peer)
            rows, start, at = int(send_sizes[i]), int(input_offsets[i]), int(output_offsets[i])
            expected = int(entries[d][1][3][s * per_peer + j])
            if rows != expected:
                raise HloError(f"ragged-all-to-all: participant {s} sends {rows} rows to "
                               f"participant {d} (update {j}), which expects {expected} "
                               "(recv_sizes)")
            if rows == 0:
                continue
            out = results[d]
            if rows < 0 or start < 0 or start + rows > source.shape[0] or at < 0 or \
                    at + rows > out.shape[0]:
                raise HloError(f"ragged-all-to-all: participant {s}'s update {i} moves rows "
                               f"[{start}, {start + rows}) of an input of {source.shape[0]} "
                               f"to rows [{at}, {at + rows}) of participant {d}'s output of "
                               f"{out.shape[0]}")
            if source.shape[1:] != out.shape[1:]:
                raise HloError(f"ragged-all-to-all: rows of {list(source.shape)} do not fit an "
                               f"output of {list(out.shape)}")
            out[at:at + rows] = source[start:start + rows]
    return results
