"""Splitting a program's kernels into groups that link into one binary
each (a cuda PTX module and cubin, a cpu shared library)."""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

__all__ = ["balanced_groups"]

T = TypeVar("T")


def balanced_groups(items: Sequence[T], parts: int, size: Callable[[T], int],
                    symbols: Callable[[T], set]) -> list[list[T]]:
    """`items` in `parts` groups (fewer when there are fewer items; more
    where their symbols clash: no group holds one symbol twice) of about
    the same total `size`, largest first, so that the groups link side by
    side in about the same time. Items keep their order within a group."""
    members: list[list[int]] = []
    names: list[set] = []
    sizes: list[int] = []
    for i in sorted(range(len(items)), key=lambda i: -size(items[i])):
        item = items[i]
        fits = [g for g in range(len(members)) if names[g].isdisjoint(symbols(item))]
        if len(members) < parts or not fits:
            members.append([])
            names.append(set())
            sizes.append(0)
            fits = [len(members) - 1]
        g = min(fits, key=sizes.__getitem__)
        members[g].append(i)
        names[g] |= symbols(item)
        sizes[g] += size(item)
    return [[items[i] for i in sorted(group)] for group in members]
