"""libXlaGpu's PTX serializer (xlaGpuSerializeToPtx, used by
xla_gpu.backends.cuda.codegen) against MLIR's own gpu-module-to-binary{format=isa}: the
same PTX for kernels with and without libdevice calls, at O0 and O3, on
several threads at once; errors as diagnostics, never a crash."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from mlir import ir as mlir_ir

from xla_gpu import pipeline
from xla_gpu.backends.cuda import codegen

pytestmark = pytest.mark.skipif(not codegen._pass_runner.available(),
                                reason="the MLIR bindings' C API library is not reachable")

ROOT = Path(__file__).resolve().parents[3]

# A kernel with no external calls: libdevice is never read for it.
SCALE_KERNEL = """
llvm.func @scale(%in: !llvm.ptr, %out: !llvm.ptr) attributes {nvvm.kernel} {
  %tid = nvvm.read.ptx.sreg.tid.x : i32
  %src = llvm.getelementptr %in[%tid] : (!llvm.ptr, i32) -> !llvm.ptr, f32
  %x = llvm.load %src : !llvm.ptr -> f32
  %two = llvm.mlir.constant(2.5 : f32) : f32
  %y = llvm.fmul %x, %two : f32
  %dst = llvm.getelementptr %out[%tid] : (!llvm.ptr, i32) -> !llvm.ptr, f32
  llvm.store %y, %dst : f32, !llvm.ptr
  llvm.return
}
"""

# Calls libdevice (tanh, exp) and a function nobody defines.
LIBDEVICE_KERNEL = """
llvm.func @__nv_tanhf(f32) -> f32
llvm.func @__nv_expf(f32) -> f32
llvm.func @mystery(f32) -> f32
llvm.func @act(%in: !llvm.ptr, %out: !llvm.ptr) attributes {nvvm.kernel} {
  %tid = nvvm.read.ptx.sreg.tid.x : i32
  %src = llvm.getelementptr %in[%tid] : (!llvm.ptr, i32) -> !llvm.ptr, f32
  %x = llvm.load %src : !llvm.ptr -> f32
  %t = llvm.call @__nv_tanhf(%x) : (f32) -> f32
  %e = llvm.call @__nv_expf(%t) : (f32) -> f32
  %m = llvm.call @mystery(%e) : (f32) -> f32
  %dst = llvm.getelementptr %out[%tid] : (!llvm.ptr, i32) -> !llvm.ptr, f32
  llvm.store %m, %dst : f32, !llvm.ptr
  llvm.return
}
"""


def _gpu_module(body: str, context, opt_level: int = 3) -> mlir_ir.Module:
    calls_libdevice = not codegen.embedded_libdevice_size() and "@__nv_" in body
    return codegen._wrapped_module(body, context, "sm_90", opt_level, calls_libdevice)


def _ours(body: str, context, opt_level: int = 3) -> bytes:
    module = _gpu_module(body, context, opt_level)   # alive while its op is used
    return codegen._native_ptx(module.body.operations[0])


def _both(body: str, context, opt_level: int = 3) -> tuple[bytes, bytes]:
    return (_ours(body, context, opt_level),
            codegen._serialize_with_mlir(_gpu_module(body, context, opt_level), "isa"))


@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("body", [SCALE_KERNEL, LIBDEVICE_KERNEL], ids=["plain", "libdevice"])
def test_the_ptx_is_mlirs(ctx, body, opt_level):
    ours, mlirs = _both(body, ctx, opt_level)
    assert ours == mlirs
    ptx = ours.decode()
    assert ".target sm_90" in ptx and ".visible .entry" in ptx


def test_levels_interleaved_keep_the_ptx_mlirs(ctx):
    # Code generation at O0 changes its TargetMachine's options for good (it
    # turns on FastISel): a machine kept for later O3 modules gave them
    # other PTX. Each level has its own machine.
    for opt_level in (0, 3, 0, 2, 3):
        for body in (SCALE_KERNEL, LIBDEVICE_KERNEL):
            ours, mlirs = _both(body, ctx, opt_level)
            assert ours == mlirs, opt_level


def test_libdevice_is_linked_only_where_called(ctx):
    plain = _ours(SCALE_KERNEL, ctx).decode()
    assert "__nv_" not in plain
    called = _ours(LIBDEVICE_KERNEL, ctx).decode()
    if codegen.embedded_libdevice_size() or codegen.find_libdevice():
        # tanh and exp are inlined from libdevice; the unknown function
        # stays a call for ptxas to resolve.
        assert "__nv_tanhf" not in called and "__nv_expf" not in called
    assert ".extern .func  (.param .b32 func_retval0) mystery" in called


@pytest.mark.skipif(codegen.find_libdevice() is None, reason="no libdevice file here")
@pytest.mark.parametrize("embedded", [False, True], ids=["file", "file+embedded"])
def test_libdevice_from_the_targets_link_list(ctx, embedded):
    # Bindings that embed no libdevice: the gpu.module's target names the
    # file, which is read (lazily) only for a kernel that calls it. With
    # both, the file comes first, as in MLIR (the wheel's libdevice is not
    # the embedded one: their tanh differs, so the order shows).
    for body in (LIBDEVICE_KERNEL, SCALE_KERNEL):
        module = codegen._wrapped_module(body, ctx, "sm_90", 3, calls_libdevice=True)
        gpu_module = module.body.operations[0]   # the module stays alive with it
        assert "link = [" in str(gpu_module.attributes["targets"])
        ours = codegen._native_ptx(gpu_module, embedded_libdevice=embedded)
        # MLIR links the file, then its embedded copy (which then adds
        # nothing) where it has one.
        mlirs = codegen._serialize_with_mlir(
            codegen._wrapped_module(body, ctx, "sm_90", 3, calls_libdevice=True), "isa")
        assert ours == mlirs
        assert b"__nv_tanhf" not in ours


def test_a_lowered_kernel_gives_the_same_ptx(ctx):
    module = mlir_ir.Module.parse((ROOT / "examples" / "gelu.mlir").read_text())
    pipeline.run(module)
    body = "\n".join(str(op) for op in module.body.operations)
    ours, mlirs = _both(body, ctx)
    assert ours == mlirs


def test_threads_serialize_side_by_side():
    from xla_gpu import ir
    kernels = (("plain", SCALE_KERNEL), ("libdevice", LIBDEVICE_KERNEL))
    with ir.Context() as context:
        expected = {name: _ours(body, context) for name, body in kernels}

    def work(index: int) -> list[tuple[str, bytes]]:
        # One context per thread, as the compiler's threads have.
        with ir.Context() as context:
            return [(name, _ours(body, context))
                    for name, body in (kernels[(index + i) % 2] for i in range(6))]

    with ThreadPoolExecutor(4) as pool:
        results = [r for rs in pool.map(work, range(4)) for r in rs]
    assert len(results) == 24
    assert all(ptx == expected[name] for name, ptx in results)


def test_not_a_gpu_module_is_an_error(ctx):
    module = mlir_ir.Module.parse("llvm.func @f() { llvm.return }")
    with pytest.raises(codegen.CodegenError, match="expected a gpu.module, got builtin.module"):
        codegen._native_ptx(module.operation)


def test_a_gpu_module_without_an_nvvm_target_is_an_error(ctx):
    module = mlir_ir.Module.parse(
        "module attributes {gpu.container_module} {\n"
        "  gpu.module @kernels { llvm.func @f() { llvm.return } }\n}")
    with pytest.raises(codegen.CodegenError, match="exactly one #nvvm.target"):
        codegen._native_ptx(module.body.operations[0])


def test_ir_llvm_cannot_translate_is_an_error_naming_the_op(ctx):
    # func.func is not LLVM dialect: translation reports it.
    module = mlir_ir.Module.parse(
        'module attributes {gpu.container_module} {\n'
        '  gpu.module @kernels [#nvvm.target<O = 3, chip = "sm_90">] {\n'
        '    func.func @f() { return }\n  }\n}')
    with pytest.raises(codegen.CodegenError, match="NVPTX code generation failed"):
        codegen._native_ptx(module.body.operations[0])


# One 128-bit compare-and-swap (the CAS loop of a complex<f64> atomic update).
SWAP128_KERNEL = """
llvm.func @swap(%p: !llvm.ptr, %old: i128, %new: i128) attributes {nvvm.kernel} {
  %r = llvm.cmpxchg %p, %old, %new monotonic monotonic : !llvm.ptr, i128
  llvm.return
}
"""


def test_a_128_bit_cas_asks_for_ptx_8_3_on_sm_90_only_where_it_is(ctx):
    # NVPTX has atom.cas.b128 from PTX ISA 8.3 on: that kernel's PTX says
    # 8.3; a kernel without one keeps the target's 7.8.
    wide = _ours(SWAP128_KERNEL, ctx).decode()
    assert ".version 8.3" in wide and "cas.b128" in wide
    assert ".version 7.8" in _ours(SCALE_KERNEL, ctx).decode()


def test_a_128_bit_cas_before_sm_90_is_an_error_not_a_crash(ctx):
    # NVPTX aborts the process on a cmpxchg it cannot lower; the serializer
    # refuses the module first.
    module = codegen._wrapped_module(SWAP128_KERNEL, ctx, "sm_80", 3, False)
    with pytest.raises(codegen.CodegenError, match="128-bit compare-and-swap .* needs "
                       "sm_90 or newer, not sm_80"):
        codegen._native_ptx(module.body.operations[0])
