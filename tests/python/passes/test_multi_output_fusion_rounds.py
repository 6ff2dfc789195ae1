"""MultiOutputFusion merges one pair per round, the first its scan finds,
and a round skips the consumers at the head of the order that the last
merge left as they were (the last round already found none of them
mergeable). These tests hold that to the plain rule, every round scanning
the whole computation: the same merges, in the same order, on a training
step with dozens of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from xla_gpu.hlo import module_to_text, parse_file
from xla_gpu.hlo.passes import optimize
from xla_gpu.hlo.passes import multi_output_fusion

DATA = Path(__file__).resolve().parents[1]
PROGRAMS = [
    DATA / "hlo_inputs" / "models" / "gpt_adamw_1layer.hlo",
    DATA / "programs" / "adam_step" / "before_optimizations.hlo",
    DATA / "programs" / "transformer_block" / "before_optimizations.hlo",
]

_MERGE = multi_output_fusion.MultiOutputFusion._merge


def _merges(monkeypatch, path: Path) -> tuple[str, list[tuple[str, str]]]:
    """The optimized module (the cpu target's GEMM bound, as the compiler
    runs it) and the merges in the order they happened."""
    merged: list[tuple[str, str]] = []
    merge = _MERGE

    def logged(self, first, second):
        merged.append((first.name, second.name))
        merge(self, first, second)

    monkeypatch.setattr(multi_output_fusion.MultiOutputFusion, "_merge", logged)
    result = optimize(parse_file(str(path)), gemm_fusion_max_multiply_adds=1 << 19)
    return module_to_text(result), merged


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.parent.name)
def test_skipping_settled_consumers_changes_no_merge(monkeypatch, path):
    text, merged = _merges(monkeypatch, path)
    with monkeypatch.context() as m:
        # Every round scans from the first instruction.
        m.setattr(multi_output_fusion, "_common_prefix", lambda before, after: 0)
        full_text, full_merged = _merges(m, path)
    assert merged == full_merged
    assert text == full_text
    if path.name == "gpt_adamw_1layer.hlo":
        assert len(merged) > 20   # the case the skipping is for
