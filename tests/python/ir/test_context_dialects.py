"""xla_gpu.ir.Context loads the dialects of kernels only (each greedy
rewrite and folder pays for every loaded dialect); the others stay
registered and load when parsed text uses them."""

from __future__ import annotations

from mlir import ir as mlir_ir

from xla_gpu import ir


def test_the_kernel_dialects_are_loaded_and_no_others():
    context = ir.Context()
    for op in ("xla_gpu.apply_indexing", "arith.addf", "tensor.extract", "gpu.thread_id",
               "scf.for", "llvm.func", "nvvm.read.ptx.sreg.tid.x", "complex.add"):
        assert context.is_registered_operation(op), op
    # (linalg comes with tensor, which loads it.)
    for op in ("tosa.add", "spirv.IAdd", "sparse_tensor.new", "shape.add", "rocdl.barrier"):
        assert not context.is_registered_operation(op), op


def test_text_of_another_dialect_still_parses():
    context = ir.Context()
    module = mlir_ir.Module.parse("""
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = tosa.add %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}""", context)
    assert module.operation.verify()
    assert context.is_registered_operation("tosa.add")
