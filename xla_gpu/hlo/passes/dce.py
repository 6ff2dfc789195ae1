"""HloDCE: removes instructions whose values nothing needs (no users, not
the root, no side effect) and computations nothing calls any more."""

from __future__ import annotations

from ..module import HloModule
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
        if self.remove_computations:
            removed += module.remove_unreachable_computations()
        return removed > 0
