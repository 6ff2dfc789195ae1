"""Whole JAX programs (tests/python/programs/) through the reference
interpreter: both the text JAX hands to XLA and XLA:CPU's optimized text
parse, evaluate and match jax's own outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from program_data import PROGRAMS_DIR, add_scaled, load_program, program_names
from xla_gpu.hlo import parse_file
from xla_gpu.hlo.interpreter import (evaluate, register_custom_call,
                                     registered_custom_calls,
                                     unregister_custom_call)

NAMES = program_names()
REQUIRED = {"mlp_train_step", "transformer_block", "scan_rnn",
            "kv_cache_update", "cond_switch", "sort_topk", "layer_norm_bf16",
            "cumsum_argmax", "small_conv", "softmax_xent", "adam_step",
            "ffi_call"}


@pytest.fixture
def ffi_handler():
    register_custom_call("xla_gpu_test_add_scaled", add_scaled)
    yield
    unregister_custom_call("xla_gpu_test_add_scaled")


def test_every_required_program_is_stored():
    assert REQUIRED <= set(NAMES), REQUIRED - set(NAMES)
    total = sum(f.stat().st_size for f in PROGRAMS_DIR.rglob("*")
                if f.is_file())
    assert total < 3 * 2**20, f"program data is {total} bytes"


@pytest.mark.parametrize("form", ["before", "after"])
@pytest.mark.parametrize("name", NAMES)
def test_program_matches_jax(name, form, ffi_handler):
    prog = load_program(name)
    path = prog.before_path if form == "before" else prog.after_path
    module = parse_file(path)
    results = evaluate(module, *prog.inputs)
    problems = prog.mismatches(results, module)
    assert not problems, f"{path}:\n" + "\n".join(problems)


def test_program_metadata_is_consistent():
    for name in NAMES:
        prog = load_program(name)
        meta = prog.meta
        assert meta["name"] == name
        assert meta["description"]
        module = parse_file(prog.before_path)
        params = module.entry.parameters
        assert len(params) == len(prog.inputs), name
        for p, arr in zip(params, prog.inputs):
            assert p.shape.dims == arr.shape, (name, p.name)
            assert p.shape.dtype == arr.dtype, (name, p.name)
        memory = json.loads((prog.folder / "xla_memory.json").read_text())
        assert memory["argument_size_in_bytes"] == sum(
            a.nbytes for a in prog.inputs), name


def test_optimized_texts_hold_what_the_interpreter_must_run():
    """XLA:CPU's forms the stored data covers: __ynn_fusion dot fusions, the
    TopK custom call, convolutions, while loops and conditionals."""
    seen = set()
    for name in NAMES:
        text = load_program(name).after_path.read_text()
        for marker in ('"__ynn_fusion"', 'custom_call_target="TopK"',
                       " convolution(", " while(", " conditional(",
                       " sort(", "API_VERSION_TYPED_FFI"):
            if marker in text:
                seen.add(marker)
    assert len(seen) == 7, seen


def test_ffi_program_without_a_handler_names_the_target():
    assert "xla_gpu_test_add_scaled" not in registered_custom_calls()
    prog = load_program("ffi_call")
    module = parse_file(prog.before_path)
    with pytest.raises(Exception, match="xla_gpu_test_add_scaled"):
        evaluate(module, *prog.inputs)


def test_ffi_program_detects_a_wrong_handler(ffi_handler):
    """The stored outputs really check the handler: one that ignores
    `scale` gives different results."""
    register_custom_call("xla_gpu_test_add_scaled",
                         lambda x, y, scale, mode: add_scaled(
                             x, y, scale=np.float32(1.0), mode=mode))
    prog = load_program("ffi_call")
    module = parse_file(prog.before_path)
    assert prog.mismatches(evaluate(module, *prog.inputs), module)


def test_a_perturbed_input_changes_the_result():
    """The comparison is not vacuous: a slightly different input fails."""
    prog = load_program("mlp_train_step")
    module = parse_file(prog.after_path)
    inputs = [a.copy() for a in prog.inputs]
    inputs[4] = inputs[4] + np.float32(1e-2)  # x
    assert prog.mismatches(evaluate(module, *inputs), module)
