"""Building every xla_gpu op from Python with the generated builders."""

from __future__ import annotations

from mlir import ir as mlir_ir
from mlir.dialects import arith, func, tensor

from xla_gpu import ir
from xla_gpu.dialects import xla_gpu


def _roundtrip(module: mlir_ir.Module) -> str:
    assert module.operation.verify()
    text = str(module)
    assert str(mlir_ir.Module.parse(text)) == text
    return text


def test_build_every_op(ctx):
    with mlir_ir.Location.unknown():
        _build_every_op()


def _build_every_op():
    index = mlir_ir.IndexType.get()
    f32 = mlir_ir.F32Type.get()
    tile = mlir_ir.RankedTensorType.get([32, 1, 33], f32)
    vec = mlir_ir.RankedTensorType.get([4096], f32)
    map_attr = ir.IndexingMap.parse(
        "(th_x, bl_x)[i] -> (bl_x * 128 + th_x * 4 + i), "
        "domain: th_x in [0, 31], bl_x in [0, 31], i in [0, 3]").to_attr()
    with mlir_ir.Location.unknown():
        module = mlir_ir.Module.create()
        with mlir_ir.InsertionPoint(module.body):
            callee = func.FuncOp("elem", ([vec, index], [f32]), visibility="private")
            with mlir_ir.InsertionPoint(callee.add_entry_block()):
                value = tensor.ExtractOp(callee.arguments[0], [callee.arguments[1]])
                func.ReturnOp([value])

            main = func.FuncOp("main", ([vec, vec, index, index], [vec, tile]))
            with mlir_ir.InsertionPoint(main.add_entry_block()):
                inp, out, tid, bid = main.arguments
                shmem = xla_gpu.AllocateSharedOp(tile).result
                synced = xla_gpu.sync_threads([shmem])
                loop = xla_gpu.build_loop(map_attr, [tid, bid], [out])
                body = loop.region.blocks[0]
                i, linear, it = body.arguments
                with mlir_ir.InsertionPoint(body):
                    (again,) = xla_gpu.build_apply_indexing(map_attr, [tid, bid], [i])
                    call = xla_gpu.PureCallOp(
                        [f32], mlir_ir.FlatSymbolRefAttr.get("elem"), [inp, again])
                    inserted = tensor.InsertOp(call.results[0], it, [linear])
                    xla_gpu.YieldOp([inserted])
                func.ReturnOp([loop.results[0], synced])
    text = _roundtrip(module)
    for op in ["xla_gpu.allocate_shared", "xla_gpu.sync_threads", "xla_gpu.loop",
               "xla_gpu.apply_indexing", "xla_gpu.pure_call", "xla_gpu.yield"]:
        assert op in text, op
    assert "iter_args(%iter = %arg1)" in text


def test_apply_indexing_folds_from_python(ctx):
    from mlir.passmanager import PassManager
    index = mlir_ir.IndexType.get()
    map_attr = ir.IndexingMap.parse("(d0) -> (d0 * 3 + 1), domain: d0 in [0, 9]").to_attr()
    with mlir_ir.Location.unknown():
        module = mlir_ir.Module.create()
        with mlir_ir.InsertionPoint(module.body):
            f = func.FuncOp("f", ([], [index]))
            with mlir_ir.InsertionPoint(f.add_entry_block()):
                c = arith.ConstantOp(index, 4)
                (r,) = xla_gpu.build_apply_indexing(map_attr, [c.result])
                func.ReturnOp([r])
    PassManager.parse("builtin.module(canonicalize)").run(module.operation)
    assert "arith.constant 13 : index" in str(module)
