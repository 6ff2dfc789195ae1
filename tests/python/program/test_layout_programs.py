"""Programs whose entry layouts are not the default (tests/python/data/layout,
made by make_layout_cases.py with jax on XLA:CPU): compiled from the text jax
hands to XLA on the cpu target, they take and return buffers in the layouts
of entry_computation_layout, and their results match jax's and the
reference interpreter's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.hlo.interpreter import evaluate
from xla_gpu.hlo.passes.layout_assignment import entry_computation_layout
from xla_gpu.hlo.shape import default_layout

DATA = Path(__file__).parents[1] / "data" / "layout"
CASES = sorted(p.name.split(".")[0] for p in DATA.glob("*.pre.hlo"))


def _arrays(data, kind: str) -> list[np.ndarray]:
    out, i = [], 0
    while f"{kind}_{i}" in data:
        out.append(data[f"{kind}_{i}"])
        i += 1
    return out


def _layouts(refs) -> list[tuple[int, ...]]:
    """Each buffer's layout (minor-to-major), the default when it has none."""
    return [tuple(r.layout) if r.layout else default_layout(len(r.dims)) for r in refs]


@pytest.mark.parametrize("name", CASES)
def test_compiles_and_matches_jax(name):
    text = (DATA / f"{name}.pre.hlo").read_text()
    data = np.load(DATA / f"{name}.npz")
    inputs, expected = _arrays(data, "in"), _arrays(data, "out")
    exe = xla_gpu.compile(text, target="cpu")
    results = exe.run(*inputs)
    results = results if isinstance(results, (tuple, list)) else (results,)
    reference = evaluate(hlo.parse_module(text), *inputs)
    assert len(results) == len(expected) == len(reference)
    for got, want, ref in zip(results, expected, reference):
        assert got.dtype == want.dtype
        if np.issubdtype(want.dtype, np.integer):
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(got, ref)
        else:
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
            np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-6)
    # The executable's buffers are in the caller's layouts.
    params, result = entry_computation_layout(hlo.parse_module(text))
    for refs, shape in zip(exe.parameters, params):
        assert _layouts(refs) == [leaf.minor_to_major for leaf in shape.leaves()]
    assert _layouts(exe.outputs) == [leaf.minor_to_major for leaf in result.leaves()]
