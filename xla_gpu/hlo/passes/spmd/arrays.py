"""Global arrays <-> per-device chunks under a sharding (jax.jit's view of
a partitioned program's arguments and results)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .placement import device_coords
from .sharding import HloSharding

__all__ = ["split", "assemble"]


def _chunk_slices(s: HloSharding, dims: Sequence[int], coords) -> tuple[slice, ...]:
    return tuple(slice(i * size, min(n, (i + 1) * size))
                 for n, size, i in zip(dims, s.local_dims(dims), coords))


def split(array: np.ndarray, s: HloSharding, num_devices: int) -> list[np.ndarray]:
    """Each device's chunk of `array` (evenly cut shardings)."""
    if s.kind != "tiled":
        return [array] * num_devices
    coords = device_coords(s, array.ndim, num_devices)
    return [np.ascontiguousarray(array[_chunk_slices(s, array.shape, coords[d])])
            for d in range(num_devices)]


def assemble(chunks: Sequence[np.ndarray], s: HloSharding, dims: Sequence[int],
             dtype) -> np.ndarray:
    """The global array from each device's chunk (the first device holding
    a chunk gives it)."""
    if s.kind != "tiled":
        return np.asarray(chunks[0])
    out = np.empty(tuple(dims), dtype=np.asarray(chunks[0]).dtype)
    coords = device_coords(s, len(dims), len(chunks))
    done = set()
    for d, chunk in enumerate(chunks):
        if coords[d] in done:
            continue
        done.add(coords[d])
        out[_chunk_slices(s, dims, coords[d])] = chunk
    return out
