"""The module verifier the pass pipeline runs after each pass in debug mode:
`xla_gpu.hlo.verifier.verify_module` (graph structure and the shape rules
every HLO reader shares)."""

from __future__ import annotations

from ..verifier import verify_module

__all__ = ["verify_module"]
