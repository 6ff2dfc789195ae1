"""HloDCE: removes instructions whose values nothing needs (no users, not
the root, no side effect) and computations nothing calls any more."""

from __future__ import annotations

from ..graph import reachable
from ..module import HloModule, callees
from .pipeline import HloPass
from .util import has_side_effect

__all__ = ["HloDCE"]


class HloDCE(HloPass):
    name = "dce"

    def __init__(self, remove_computations: bool = True):
        self.remove_computations = remove_computations

    def run(self, module: HloModule) -> bool:
        removed = 0
        for comp in module.computations:
            removed += comp.remove_dead(keep=has_side_effect)
        if self.remove_computations and _has_unreachable_computations(module):
            removed += module.remove_unreachable_computations()
        return removed > 0


def _has_unreachable_computations(module: HloModule) -> bool:
    """Whether `module.remove_unreachable_computations` would drop any
    computation: the same walk from the ENTRY, through a tighter reading of
    the called computations (most runs drop none, and the walk reads every
    instruction's attributes)."""
    comps = module.computations
    entry = next((c for c in comps if c.is_entry), None)
    if entry is None:
        return False
    seen = reachable([entry], callees)
    if len(seen) >= len(comps):
        ids = {id(c) for c in seen}
        return any(id(c) not in ids for c in comps)
    return True
