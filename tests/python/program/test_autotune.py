"""GEMM fusion autotuning (xla_gpu.program.autotune) on the cpu target:
the candidates, the deterministic default (XLA_GPU_AUTOTUNE unset or 0),
real timing of the compiled candidates, the winner written into the
fusion and kept in memory and in the compile cache, the results dump, and
a whole program compiled with autotuning that still matches the
interpreter. (cuda timing goes through the same code, wall clock; it
is not run here.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.analysis.gemm import default_tiling, dot_dims, triton_gemm_tiling
from xla_gpu.hlo.interpreter import evaluate
from xla_gpu.hlo.passes import optimize
from xla_gpu.hlo.printer import module_to_text
from xla_gpu.program import autotune

TEXT = """
HloModule g

ENTRY e {
  a = f32[16,64] parameter(0)
  b = f32[64,8] parameter(1)
  d = f32[16,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[16,8] tanh(d)
}
"""


def _gemm_fusions(module):
    return [i for c in module.computations for i in c.instructions
            if i.opcode == "fusion" and triton_gemm_tiling(i) is not None]


def _dot(module):
    (fusion,) = _gemm_fusions(module)
    return next(i for i in fusion.attrs["calls"].instructions if i.opcode == "dot")


@pytest.fixture(autouse=True)
def _fresh_results(monkeypatch, tmp_path):
    monkeypatch.setenv("XLA_GPU_CACHE_DIR", str(tmp_path / "cache"))
    autotune.clear_memory_results()
    yield
    autotune.clear_memory_results()


def test_candidates_start_with_the_heuristic_table_and_fit_the_dot():
    module = optimize(hlo.parse_module(TEXT))
    dot = _dot(module)
    candidates = autotune.candidate_tilings(dot, limit=20)
    assert candidates[0] == default_tiling(dot_dims(dot))
    assert len(set(candidates)) == len(candidates)
    for t in candidates:
        assert t.block_m <= 16 and t.block_n <= 8 and t.block_k <= 64
        # split_k only where each split keeps a whole block_k of K = 64.
        assert 64 % t.split_k == 0 and 64 // t.split_k >= t.block_k
    assert any(t.split_k == 2 for t in candidates)
    assert len(autotune.candidate_tilings(dot, limit=3)) == 3


def test_off_by_default_and_with_zero(monkeypatch):
    for value in (None, "0"):
        if value is None:
            monkeypatch.delenv("XLA_GPU_AUTOTUNE", raising=False)
        else:
            monkeypatch.setenv("XLA_GPU_AUTOTUNE", value)
        assert not autotune.autotune_enabled()
        module = optimize(hlo.parse_module(TEXT))
        before = [f.attrs["backend_config"] for f in _gemm_fusions(module)]
        assert autotune.autotune_gemm_fusions(module, "cpu") == []
        assert [f.attrs["backend_config"] for f in _gemm_fusions(module)] == before
    monkeypatch.setenv("XLA_GPU_AUTOTUNE", "1")
    assert autotune.autotune_enabled()


def test_tunes_caches_and_dumps(tmp_path):
    module = optimize(hlo.parse_module(TEXT))
    (fusion,) = _gemm_fusions(module)
    (result,) = autotune.autotune_gemm_fusions(module, "cpu", enabled=True, limit=3,
                                               dump_dir=tmp_path / "dump")
    assert result.source == "measured"
    # Three tilings, then the library (the gemm thunk's BLAS) on cpu.
    configs = [t for t, _ in result.candidates]
    assert len(configs) == 4 and configs[-1] is None and all(configs[:3])
    times = [s for _, s in result.candidates]
    assert all(s is not None and s > 0 for s in times), result.rejected
    assert result.seconds == min(times)
    assert result.tiling == configs[times.index(min(times))]
    assert fusion.attrs["backend_config"] == result.backend_config()
    dump = json.loads((tmp_path / "dump" / "autotune_results.json").read_text())
    assert dump["version"] == autotune.RESULTS_VERSION
    (entry,) = dump["results"]
    assert entry["hlo"] == result.key and entry["device"] == result.device
    assert entry["result"]["run_time"]["nanos"] == round(result.seconds * 1e9)
    if result.library:
        assert entry["result"]["gemm"] == {"algorithm": -1}
    else:
        assert entry["result"]["triton"]["block_m"] == result.tiling.block_m
    assert [("gemm" in c) for c in entry["candidates"]] == [False, False, False, True]
    # The same fusion again: this process' memory; then the disk cache.
    again = optimize(hlo.parse_module(TEXT))
    (cached,) = autotune.autotune_gemm_fusions(again, "cpu", enabled=True, limit=3)
    assert cached.source == "cache" and cached.tiling == result.tiling
    autotune.clear_memory_results()
    (from_disk,) = autotune.autotune_gemm_fusions(optimize(hlo.parse_module(TEXT)), "cpu",
                                                  enabled=True, limit=3)
    assert from_disk.source == "cache" and from_disk.tiling == result.tiling
    assert from_disk.key == result.key
    # Another candidate set is another question: measured again.
    (other,) = autotune.autotune_gemm_fusions(optimize(hlo.parse_module(TEXT)), "cpu",
                                              enabled=True, limit=2)
    assert other.source == "measured" and other.key != result.key


def test_program_compiled_with_autotuning_matches(monkeypatch, tmp_path):
    monkeypatch.delenv("XLA_GPU_AUTOTUNE", raising=False)
    untuned = xla_gpu.compile(TEXT, target="cpu")          # kept in the program cache
    assert not any("autotuned" in n for n in untuned.notes)
    monkeypatch.setenv("XLA_GPU_AUTOTUNE", "1")
    # Another question for the program cache: not the untuned program.
    assert any("autotuned 1 GEMM fusion" in n for n in xla_gpu.compile(TEXT, target="cpu").notes)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 64)).astype(np.float32)
    b = rng.standard_normal((64, 8)).astype(np.float32)
    exe = xla_gpu.compile(TEXT, target="cpu", dump_dir=str(tmp_path))
    assert any("autotuned 1 GEMM fusion" in n for n in exe.notes)
    results = exe.run(a, b)
    got = results[0] if isinstance(results, (tuple, list)) else results
    (want,) = evaluate(hlo.parse_module(TEXT), a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    dump = json.loads((tmp_path / "autotune_results.json").read_text())
    assert len(dump["results"]) == 1


def test_a_fusion_the_library_won_runs_as_a_gemm_thunk():
    module = optimize(hlo.parse_module(TEXT))
    (fusion,) = _gemm_fusions(module)
    fusion.attrs["backend_config"] = json.dumps(
        {"fusion_backend_config": {"kind": autotune.LIBRARY_KIND}})
    exe = xla_gpu.compile(module_to_text(module), target="cpu")
    kinds = [line.split()[1] for line in exe.thunk_sequence_text().splitlines()
             if line.strip()]
    assert "gemm" in kinds and "kernel" in kinds     # the thunk, then the epilogue
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 64)).astype(np.float32)
    b = rng.standard_normal((64, 8)).astype(np.float32)
    results = exe.run(a, b)
    got = results[0] if isinstance(results, (tuple, list)) else results
    (want,) = evaluate(hlo.parse_module(TEXT), a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_every_candidate_of_an_int8_gemm_with_a_constant_epilogue_is_timed():
    # s8 x s8 -> s32 times a constant: the constant stays outside the
    # kernels once the fusion is prepared (the library candidate too).
    text = """
HloModule g

ENTRY e {
  a = s8[16,64] parameter(0)
  b = s8[64,16] parameter(1)
  d = s32[16,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  two = s32[] constant(2)
  twos = s32[16,16] broadcast(two), dimensions={}
  ROOT r = s32[16,16] multiply(d, twos)
}
"""
    module = optimize(hlo.parse_module(text))
    (result,) = autotune.autotune_gemm_fusions(module, "cpu", enabled=True, limit=2,
                                               cache=False)
    assert not result.rejected
    assert [t is None for t, _ in result.candidates] == [False, False, True]
    assert all(s is not None for _, s in result.candidates)
