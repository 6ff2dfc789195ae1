"""rng-bit-generator: XLA's Philox4x32 and ThreeFry expansions, bit for bit;
rng (unspecified, refused)."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..module import HloError
from ..shape import bit_width


_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32(c: list[np.ndarray], key: tuple[int, int]) -> list:
    """Philox4x32-10 on 32-bit words held in uint64 arrays."""
    k0 = np.uint64(key[0])
    k1 = np.uint64(key[1])
    c0, c1, c2, c3 = c
    for _ in range(10):
        p0 = c0 * np.uint64(0xD2511F53)
        p1 = c2 * np.uint64(0xCD9E8D57)
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & _MASK32,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & _MASK32)
        k0 = (k0 + np.uint64(0x9E3779B9)) & _MASK32
        k1 = (k1 + np.uint64(0xBB67AE85)) & _MASK32
    return [c0, c1, c2, c3]


def _philox_words(count: int, key: int, low: int,
                  high: int) -> tuple[list[np.ndarray], int, int]:
    """At least `count` random 32-bit words, in ceil(count / 4) Philox
    blocks of the 128-bit counters (high:low) + 0, 1, ...; returns the four
    word arrays of the blocks (the caller interleaves them) and the counter
    after the last block, as (low, high)."""
    blocks = -(-count // 4)
    step = np.arange(blocks, dtype=np.uint64)
    lows = np.uint64(low) + step
    highs = np.where(lows < np.uint64(low), np.uint64((high + 1) % 2**64),
                     np.uint64(high))
    words = [lows & _MASK32, lows >> np.uint64(32), highs & _MASK32,
             highs >> np.uint64(32)]
    out = philox4x32(words, (key & 0xFFFFFFFF, key >> 32))
    new_low = (low + blocks) % 2**64
    new_high = (high + (1 if new_low < low else 0)) % 2**64
    return out, new_low, new_high


def _rotl32(v: np.ndarray, r: int) -> np.ndarray:
    return (v << np.uint32(r)) | (v >> np.uint32(32 - r))


def threefry2x32(x0: np.ndarray, x1: np.ndarray,
                 key: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Threefry2x32 with 20 rounds on uint32 arrays."""
    ks = [np.uint32(key[0]), np.uint32(key[1]),
          np.uint32(0x1BD11BDA ^ key[0] ^ key[1])]
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = x0 + x1
            x1 = _rotl32(x1, r) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _threefry_bits32(key: int, state: int, dims: tuple[int, ...]):
    """XLA's ThreeFry bits of u32 `dims`: the counters are the row-major
    indices of a half-size shape; the two output words fill the split
    dimension's even and odd positions."""
    if not dims:
        half, split = (1,), None
    else:
        split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
        if split is None:
            split = max(range(len(dims)), key=lambda i: (dims[i], -i))
        half = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]
    count = math.prod(half)
    counters = np.uint64(state) + np.arange(count, dtype=np.uint64)
    lo = (counters & _MASK32).astype(np.uint32)
    hi = (counters >> np.uint64(32)).astype(np.uint32)
    o0, o1 = threefry2x32(lo, hi, (key & 0xFFFFFFFF, key >> 32))
    new_state = (state + count) % 2**64
    if split is None:
        return o0.reshape(()), new_state
    o0, o1 = o0.reshape(half), o1.reshape(half)
    both = np.stack([o0, o1], axis=split + 1)
    merged = both.reshape(dims[:split] + (2 * half[split],) +
                          dims[split + 1:])
    return merged[tuple(slice(0, d) for d in dims)], new_state


def _h_rng_bit_generator(ev, inst, ops, batch):
    state = np.asarray(ops[0])
    leaves = inst.shape.leaves()
    if not inst.shape.is_tuple or len(leaves) != 2 or \
            state.dtype != np.uint64 or state.ndim != 1 or state.size < 2:
        raise HloError("rng-bit-generator takes a u64[n >= 2] state and "
                       "returns (state, bits)")
    algorithm = str(inst.attrs.get("algorithm", "rng_default")).lower()
    if algorithm == "rng_default":
        algorithm = "rng_philox"  # XLA:CPU's and XLA:GPU's default
    out_shape = leaves[1]
    etype, dims = out_shape.element_type, out_shape.dims
    bits = bit_width(etype)
    if etype == "pred" or etype in ("c64", "c128") or bits not in (
            8, 16, 32, 64):
        raise HloError(f"rng-bit-generator cannot produce {etype}")
    s = [int(v) for v in state]
    key = s[0]
    count = math.prod(dims)
    new_state = state.copy()
    if algorithm == "rng_philox":
        low, high = (s[1], s[2]) if state.size >= 3 else (s[1], s[0])
        per = 2 if bits == 64 else 1
        words, new_low, new_high = _philox_words(count * per, key, low, high)
        if bits == 64:
            pairs = [words[0] | (words[1] << np.uint64(32)),
                     words[2] | (words[3] << np.uint64(32))]
            flat = np.stack(pairs, axis=1).reshape(-1)[:count]
        else:
            flat = np.stack(words, axis=1).reshape(-1)[:count]
        new_state[1] = new_low
        if state.size >= 3:
            new_state[2] = new_high
        raw = flat.reshape(dims)
    elif algorithm == "rng_three_fry":
        if bits == 64:
            counters = np.uint64(s[1]) + np.arange(count, dtype=np.uint64)
            lo = (counters & _MASK32).astype(np.uint32)
            hi = (counters >> np.uint64(32)).astype(np.uint32)
            o0, o1 = threefry2x32(lo, hi, (key & 0xFFFFFFFF, key >> 32))
            raw = (o0.astype(np.uint64) |
                   (o1.astype(np.uint64) << np.uint64(32))).reshape(dims)
            new_state[1] = (s[1] + count) % 2**64
        else:
            raw, next_state = _threefry_bits32(key, s[1], dims)
            new_state[1] = next_state
    else:
        raise HloError(f"unknown rng algorithm '{algorithm}'")
    unsigned = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
    raw = np.asarray(raw).astype(np.uint64) if bits < 64 else np.asarray(raw)
    out = (raw & np.uint64((1 << bits) - 1)).astype(unsigned) \
        if bits < 64 else raw.astype(np.uint64)
    if out_shape.dtype != out.dtype:
        out = out.view(out_shape.dtype)
    return new_state, np.asarray(out).reshape(dims)


def _h_rng(ev, inst, ops, batch):
    raise HloError("'rng' draws from an unspecified generator: its results "
                   "cannot be reproduced (use rng-bit-generator)")


# The opcodes this module evaluates, by handler.
HANDLERS: dict[str, Callable] = {
    "rng-bit-generator": _h_rng_bit_generator,
    "rng": _h_rng,
}
