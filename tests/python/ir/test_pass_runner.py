"""Pipelines run through MLIR's C API without the GIL (xla_gpu._pass_runner):
the same IR as the bindings' PassManager, errors as MLIRError with each
error diagnostic's location and message, bad pipelines refused, and the
pass managers kept per thread and context."""

from __future__ import annotations

import threading

import pytest
from mlir import ir as mlir_ir
from mlir.passmanager import PassManager

from xla_gpu import _pass_runner, ir, pipeline

pytestmark = pytest.mark.skipif(not _pass_runner.available(),
                                reason="the bindings' libMLIRPythonCAPI.so is not found")

KERNEL = """
func.func @kernel(%in: tensor<64xf32>, %out: tensor<64xf32>) -> tensor<64xf32> attributes {xla.entry} {
  %tid = gpu.thread_id x {xla.range = [0 : index, 63 : index]}
  %v = tensor.extract %in[%tid] : tensor<64xf32>
  %w = arith.addf %v, %v : f32
  %r = tensor.insert %w into %out[%tid] : tensor<64xf32>
  return %r : tensor<64xf32>
}
"""

HUGE = """
func.func @f(%t: tensor<4294967296x2147483648xf32>, %i: index, %j: index) -> f32 {
  %v = tensor.extract %t[%i, %j] : tensor<4294967296x2147483648xf32>
  return %v : f32
}
"""


def test_same_ir_as_the_bindings_pass_manager():
    context = ir.Context()
    text = pipeline.pipeline_string(target="cuda")
    ours = mlir_ir.Module.parse(KERNEL, context)
    _pass_runner.run_pipeline(ours, text)
    theirs = mlir_ir.Module.parse(KERNEL, context)
    PassManager.parse(text, context).run(theirs.operation)
    assert str(ours) == str(theirs)
    assert "llvm.func" in str(ours)


def test_a_failing_pass_raises_mlir_error_with_its_diagnostics():
    context = ir.Context()
    module = mlir_ir.Module.parse(HUGE, context)
    with pytest.raises(mlir_ir.MLIRError) as info:
        _pass_runner.run_pipeline(module, "builtin.module(xla-flatten-tensors)")
    (diagnostic,) = info.value.error_diagnostics
    assert "whose element count does not fit in int64" in diagnostic.message
    assert diagnostic.location.startswith("loc(")
    assert "element count does not fit" in str(info.value)
    # The context still works, and reports nothing twice.
    again = mlir_ir.Module.parse(HUGE, context)
    with pytest.raises(mlir_ir.MLIRError) as info:
        _pass_runner.run_pipeline(again, "builtin.module(xla-flatten-tensors)")
    assert len(info.value.error_diagnostics) == 1


@pytest.mark.parametrize("each_pass", ["0", "1"])
def test_invalid_ir_out_of_the_pipeline_is_an_mlir_error(monkeypatch, each_pass):
    # Verified after every pass (XLA_GPU_VERIFY_EACH_PASS=1, as the tests
    # run) or once after the last (the default): either way an invalid
    # result is an MLIRError naming the op, never a module handed on.
    monkeypatch.setenv("XLA_GPU_VERIFY_EACH_PASS", each_pass)
    context = ir.Context()
    # CSE merges the two constants (a pass that changes nothing is not
    # followed by a verification).
    module = mlir_ir.Module.parse("""
func.func @f(%a: f32) -> f32 {
  %c1 = arith.constant 1.0 : f32
  %c2 = arith.constant 1.0 : f32
  %s = arith.addf %c1, %c2 : f32
  return %s : f32
}""", context)
    func = module.body.operations[0]
    ret = func.regions[0].blocks[0].operations[3]
    with mlir_ir.InsertionPoint(ret), mlir_ir.Location.unknown(context):
        # Built without the verifier: arith.addi does not take floats.
        bad = mlir_ir.Operation.create("arith.addi", results=[mlir_ir.F32Type.get(context)],
                                       operands=[ret.operands[0], ret.operands[0]])
    ret.operands[0] = bad.result
    with pytest.raises(mlir_ir.MLIRError, match="arith.addi") as info:
        _pass_runner.run_pipeline(module, "builtin.module(cse)")
    if each_pass == "0":
        assert "produced invalid IR" in str(info.value)
    # Verified IR comes out of the same pass manager as before.
    good = mlir_ir.Module.parse(KERNEL, context)
    _pass_runner.run_pipeline(good, pipeline.pipeline_string(target="cuda"))
    assert "llvm.func" in str(good)


def test_an_invalid_pipeline_is_a_value_error():
    context = ir.Context()
    module = mlir_ir.Module.parse(KERNEL, context)
    with pytest.raises(ValueError, match="no-such-pass"):
        _pass_runner.run_pipeline(module, "builtin.module(no-such-pass)")


def test_threads_each_with_a_context_run_side_by_side():
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            context = ir.Context()
            for _ in range(3):
                module = mlir_ir.Module.parse(KERNEL, context)
                pipeline.run(module, target="cuda")
            results[n] = str(module)
        except BaseException as e:   # noqa: BLE001 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(results.values())) == 1


def _pipelines_of(context) -> list[str]:
    # This thread's pass managers of `context` (not of an earlier context
    # that had its id).
    return [key[1] for key, (owner, _) in _pass_runner._managers.by_key.items()
            if owner is context]


def test_launch_dimensions_get_a_pass_manager_of_their_own():
    # The cpu target's kernels differ in launch dimensions, which only
    # xla-emulate-grid takes: the passes around it are parsed and
    # initialized once per thread and context, not once per launch shape.
    context = ir.Context()
    for threads in (16, 32, 64):
        module = mlir_ir.Module.parse(KERNEL, context)
        pipeline.run(module, target="cpu", threads=threads, blocks=1)
        assert "llvm.func" in str(module)
    pipelines = _pipelines_of(context)
    launch = sorted(p for p in pipelines if "threads=" in p)
    assert launch == [f"builtin.module(xla-emulate-grid{{threads={t} blocks=1}})"
                      for t in (16, 32, 64)]
    # The passes before the grid emulation and those after it.
    assert len(pipelines) == len(launch) + 2


@pytest.mark.parametrize("each_pass", ["0", "1"])
def test_the_cpu_pipeline_in_parts_makes_the_same_ir_as_in_one(monkeypatch, each_pass):
    monkeypatch.setenv("XLA_GPU_VERIFY_EACH_PASS", each_pass)
    context = ir.Context()
    text = pipeline.pipeline_string(target="cpu", threads=64, blocks=1)
    ours = mlir_ir.Module.parse(KERNEL, context)
    pipeline.run(ours, target="cpu", threads=64, blocks=1)
    theirs = mlir_ir.Module.parse(KERNEL, context)
    PassManager.parse(text, context).run(theirs.operation)
    assert str(ours) == str(theirs)


def test_a_pipeline_in_parts_verifies_its_result_once(monkeypatch):
    # Only the last part verifies (the parts' pass managers run on one
    # module, like one pass manager's passes): invalid IR is still found.
    monkeypatch.setenv("XLA_GPU_VERIFY_EACH_PASS", "0")
    context = ir.Context()
    module = mlir_ir.Module.parse("""
func.func @f(%a: f32) -> f32 {
  %c1 = arith.constant 1.0 : f32
  %c2 = arith.constant 1.0 : f32
  %s = arith.addf %c1, %c2 : f32
  return %s : f32
}""", context)
    ret = module.body.operations[0].regions[0].blocks[0].operations[3]
    with mlir_ir.InsertionPoint(ret), mlir_ir.Location.unknown(context):
        bad = mlir_ir.Operation.create("arith.addi", results=[mlir_ir.F32Type.get(context)],
                                       operands=[ret.operands[0], ret.operands[0]])
    ret.operands[0] = bad.result
    _pass_runner.run_pipeline(module, "builtin.module(cse)", verify=False)
    with pytest.raises(mlir_ir.MLIRError, match="produced invalid IR"):
        _pass_runner.run_pipeline(module, "builtin.module(cse)")
