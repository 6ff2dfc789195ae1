"""Placement arithmetic on tiled shardings: which devices hold which chunk,
shardings built from per-device chunk coordinates, dimensions dropped into
replication, and the device groups collectives run over.

Two shardings place a value the same way when every device holds the same
chunk under both (`same_placement`): the order of the replicas inside a
tile assignment does not matter to the data."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from .sharding import HloSharding

__all__ = ["normalize", "same_placement", "from_coords", "replicate_dims",
           "groups_along", "device_coords", "tile_count"]


def normalize(sharding: HloSharding | None, dims: Sequence[int],
              num_devices: int) -> HloSharding:
    """The sharding the partitioner uses for a value of `dims`: maximal and
    missing ones are replicated (every device computes the value), and a
    tiling that does not cover all `num_devices` devices is replicated too
    (never wrong, only slower). A tiling that does not divide the value
    evenly stays: its chunks are padded (see reshard)."""
    if sharding is None or sharding.kind in ("maximal", "replicated"):
        return HloSharding.replicated()
    if sharding.kind != "tiled":
        return sharding
    if sorted(sharding.devices) != list(range(num_devices)):
        return HloSharding.replicated()
    return sharding


def tile_count(sharding: HloSharding, rank: int) -> int:
    return math.prod(sharding.counts(rank))


def device_coords(sharding: HloSharding, rank: int, num_devices: int) -> list[tuple[int, ...]]:
    """Per device, the chunk index of each of the `rank` dims."""
    if sharding.kind != "tiled":
        return [(0,) * rank] * num_devices
    array = sharding.array()
    out: list[tuple[int, ...] | None] = [None] * num_devices
    for index in np.ndindex(array.shape):
        out[int(array[index])] = tuple(index[:rank])
    return out  # type: ignore[return-value]


def same_placement(a: HloSharding, b: HloSharding, rank: int, num_devices: int) -> bool:
    if a == b:
        return True
    if a.is_manual or b.is_manual or a.has_manual_subgroup or b.has_manual_subgroup:
        return False
    return a.counts(rank) == b.counts(rank) and \
        device_coords(a, rank, num_devices) == device_coords(b, rank, num_devices)


def from_coords(counts: Sequence[int], coords: Callable[[int], Sequence[int]],
                order: Sequence[int]) -> HloSharding | None:
    """The sharding in which device d holds chunk coords(d) of `counts`
    chunks; `order`: the devices, the replicas of a chunk kept in this
    order. None when the chunks are not held by equally many devices."""
    by_chunk: dict[tuple[int, ...], list[int]] = {}
    for d in order:
        by_chunk.setdefault(tuple(coords(d)), []).append(d)
    total = math.prod(counts)
    sizes = {len(v) for v in by_chunk.values()}
    if len(by_chunk) != total or len(sizes) != 1:
        return None
    replicas = sizes.pop()
    array = np.zeros(tuple(counts) + (replicas,), dtype=np.int64)
    for chunk, devices in by_chunk.items():
        array[chunk] = devices
    return HloSharding.tiled(array, ("replicated",))


def replicate_dims(sharding: HloSharding, rank: int, dims: Sequence[int],
                   keep: Sequence[int] | None = None) -> HloSharding:
    """The sharding with value dims `dims` no longer cut (their tiles
    become replicas). `keep` (default: the dims not in `dims`, in order)
    are the dims of the result: a dim of `dims` that is kept stays, uncut,
    and one not kept is dropped (a reduce's, or a broadcast's new dims)."""
    if sharding.kind != "tiled" or sharding.has_manual_subgroup:
        return sharding
    dims = set(dims)
    if keep is None:
        keep = [i for i in range(rank) if i not in dims]
    array = sharding.array()
    subgroup_axes = list(range(rank, array.ndim))
    stays = [k for k in keep if k not in dims]
    gone = [i for i in range(rank) if i not in stays]
    moved = array.transpose(stays + gone + subgroup_axes)
    shape = [1 if k in dims else array.shape[k] for k in keep]
    return HloSharding.tiled(moved.reshape(shape + [-1]), ("replicated",))


def groups_along(sharding: HloSharding, rank: int, dims: Sequence[int]) -> list[list[int]]:
    """The device groups of a collective over value dims `dims`: each group
    holds every chunk combination of those dims once (in chunk order,
    major dim first) and the same chunk of every other dim."""
    array = sharding.array()
    others = [i for i in range(array.ndim) if i not in dims]
    moved = array.transpose(others + list(dims))
    size = math.prod(array.shape[i] for i in dims)
    return [[int(d) for d in row] for row in moved.reshape(-1, size)]
