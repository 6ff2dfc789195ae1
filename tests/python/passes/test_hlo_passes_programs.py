"""`optimize` on whole programs: every stored pre-optimization module
(tests/python/hlo_inputs, bench/corpus, the JAX programs of
tests/python/programs) optimizes, keeps its values (reference interpreter),
leaves only fusions, library calls and control flow in its program
computations, and gives every fusion an emitter that accepts it — checked
MLIR-free, and with the real emitters when MLIR is installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from xla_gpu.analysis.fusion import analyze
from xla_gpu.hlo import evaluate, module_to_text, parse_file, parse_module
from xla_gpu.hlo.numerics import compare, random_inputs
from xla_gpu.hlo.passes import optimize
from xla_gpu.hlo.passes.fusion_utils import body_acceptable
from xla_gpu.hlo.passes.util import program_computations

REPO = Path(__file__).resolve().parents[3]
SMALL = sorted([*(REPO / "tests/python/hlo_inputs").glob("*.pre.hlo"),
                *(REPO / "bench/corpus").glob("*.cpu.hlo")])
LARGE = sorted(p for p in (REPO / "bench/corpus").glob("*.hlo") if not p.name.endswith(".cpu.hlo"))
PROGRAMS = sorted(p.parent for p in (REPO / "tests/python/programs").glob("*/before_optimizations.hlo"))

ALLOWED = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "fusion",
           "dot", "custom-call", "while", "conditional", "sort", "copy", "convolution",
           "topk", "rng-bit-generator", "rng", "rng-get-and-update-state", "after-all",
           "opt-barrier", "optimization-barrier", "fft", "select-and-scatter",
           "infeed", "outfeed", "send", "recv", "send-done", "recv-done", "all-reduce",
           "partition-id", "replica-id", "cholesky", "triangular-solve"}

def check_structure(module) -> None:
    """Asserts the optimized module's shape."""
    text = module_to_text(module)
    assert module_to_text(parse_module(text)) == text
    for comp in program_computations(module):
        for inst in comp.instructions:
            assert inst.opcode in ALLOWED, f"{comp.name}: unfused {inst.opcode} '{inst.name}'"
            if inst.opcode != "fusion":
                continue
            body = inst.attrs["calls"]
            info = body_acceptable(body)
            assert info.ok, f"{inst.name}: {info.reason}"
            fusion = analyze(body, inst.name, module)
            assert fusion.kind == info.kind, inst.name
            if info.kind == "gemm":   # GemmFusion's __triton_gemm fusions
                assert inst.attrs["kind"] == "kCustom"
                assert inst.name.startswith("gemm_fusion_")
                assert "__triton_gemm" in inst.attrs["backend_config"]
                continue
            expected_kind = "kInput" if info.kind in ("reduction", "transpose", "scatter") \
                else "kLoop"
            assert inst.attrs["kind"] == expected_kind
            if inst.name.startswith("wrapped_"):
                assert body.name.startswith(inst.name.split(".")[0] + "_computation")
            else:
                prefix = "input" if expected_kind == "kInput" else "loop"
                assert inst.name.startswith(prefix + "_") and "_fusion" in inst.name
                assert body.name.startswith("fused_")


def check_values(module, result, args):
    expected = evaluate(module, *args)
    actual = evaluate(result, *args)
    leaves = module.entry.root.shape.leaves()
    assert len(expected) == len(actual)
    for k, (e, a) in enumerate(zip(expected, actual)):
        mismatch = compare(a, e, leaves[k].element_type, k, scale_relative=True)
        assert mismatch is None, str(mismatch)


@pytest.mark.parametrize("path", SMALL, ids=[p.name for p in SMALL])
def test_small_modules_keep_their_values(path):
    module = parse_file(path)
    result = optimize(module, verify=True)
    assert module_to_text(module) == module_to_text(parse_file(path))  # input untouched
    assert not check_structure(result)
    check_values(module, result, random_inputs(module.entry, seed=3))


@pytest.mark.parametrize("path", LARGE, ids=[p.name for p in LARGE])
def test_large_modules_optimize(path):
    result = optimize(parse_file(path), verify=True)
    assert not check_structure(result)


def _program_inputs(directory: Path, module):
    stored = np.load(directory / "inputs.npz")
    args = [stored[k] for k in stored.files]
    params = module.entry.parameters
    out = []
    for a, p in zip(args, params):
        dtype = p.shape.dtype
        if a.dtype != dtype and a.dtype.itemsize == dtype.itemsize:
            a = a.view(dtype)  # bf16 / f8 stored as raw bits
        out.append(a)
    return out


@pytest.mark.parametrize("directory", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_programs(directory):
    module = parse_file(directory / "before_optimizations.hlo")
    result = optimize(module, verify=True)
    check_structure(result)
    custom_calls = [i for c in module.computations for i in c.instructions
                    if i.opcode == "custom-call"]
    if not any(i.attrs.get("custom_call_target") not in ("Sharding", "SPMDFullToShardShape",
                                                         "SPMDShardToFullShape")
               for i in custom_calls):
        check_values(module, result, _program_inputs(directory, module))


@pytest.mark.parametrize("directory", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_programs_fusions_accepted_by_the_emitters(directory):
    pytest.importorskip("mlir")
    from xla_gpu.emitters import emitter_for
    result = optimize(parse_file(directory / "before_optimizations.hlo"))
    for comp in program_computations(result):
        for inst in comp.instructions:
            if inst.opcode != "fusion":
                continue
            fusion = analyze(inst.attrs["calls"], inst.name, result)
            emitter_for(fusion)
            assert not fusion.notes, (inst.name, fusion.notes)


def test_dump_directory(tmp_path):
    path = REPO / "tests/python/hlo_inputs/softmax.pre.hlo"
    optimize(parse_file(path), dump_dir=tmp_path, dump_regex="fusion")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0].startswith("01.") and "priority-fusion" in names[0]
    assert {"before_optimizations.txt", "after_optimizations.txt"} <= set(names)
    assert all("fusion" in n for n in names if n[0].isdigit())
    after = parse_file(tmp_path / "after_optimizations.txt")
    assert any(i.opcode == "fusion" for i in after.entry.instructions)
    before = (tmp_path / "before_optimizations.txt").read_text()
    assert module_to_text(parse_file(path)) == before
