"""The emitter a fusion instruction's body goes to, as the fusion analysis
decides it (`fusion.choose_emitter`): what the HLO graph dumps colour a
fusion cluster by (`xla_gpu.hlo.graphviz.build_graph(fusion_kind=...)`)."""

from __future__ import annotations

from ..errors import XlaGpuError
from ..hlo import HloComputation, HloInstruction
from .fusion import choose_emitter, fusion_roots

__all__ = ["fusion_emitter"]


def fusion_emitter(inst: HloInstruction) -> str | None:
    """"loop", "reduction", "transpose", ... for a fusion instruction;
    "custom" for XLA's custom fusions (a cuBLAS gemm, ...); None for any
    other instruction or a body the analysis cannot take."""
    body = inst.attrs.get("calls") if inst.opcode == "fusion" else None
    if not isinstance(body, HloComputation):
        return None
    if str(inst.attrs.get("kind", "")) == "kCustom":
        return "custom"
    try:
        kind = choose_emitter(fusion_roots(body)).kind
    except (XlaGpuError, KeyError, IndexError, ValueError):
        return None
    # A dot outside a GEMM fusion (kCustom, above) is the loop emitter's.
    return "loop" if kind == "gemm" else kind
