"""xla_gpu.pipeline and xla_gpu.backends.cuda.codegen from Python: the whole pipeline,
per-stage dumps, PTX (and a cubin where ptxas exists), errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlir import ir as mlir_ir

from xla_gpu import pipeline
from xla_gpu.backends.cuda import codegen

ROOT = Path(__file__).resolve().parents[3]
GELU = (ROOT / "examples" / "gelu.mlir").read_text()


def test_pipeline_string_names_every_stage():
    text = pipeline.pipeline_string()
    # The inliner without its own canonicalizer runs; the canonicalizer
    # without region simplification, one sweep of its worklist.
    assert text.startswith("builtin.module(inline{default-pipeline=},")
    assert "canonicalize{region-simplify=disabled max-iterations=1}" in text
    for name in ["xla-lower-xla-to-scf", "xla-flatten-tensors", "xla-vectorize-loads-stores",
                 "xla-gpu-optimize-loops", "xla-lower-tensors", "xla-lower-to-llvm"]:
        assert name in text


def test_gelu_to_ptx(ctx):
    module = mlir_ir.Module.parse(GELU)
    pipeline.run(module)
    text = str(module)
    assert "llvm.func @main(%arg0: !llvm.ptr, %arg1: !llvm.ptr) attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>}" in text
    assert "tensor<" not in text
    ptx = codegen.to_ptx(module, "sm_90")
    assert ".target sm_90" in ptx and ".visible .entry main(" in ptx
    # libdevice's tanh is linked in: no call is left for ptxas to resolve.
    assert "__nv_tanhf" not in ptx or codegen.find_libdevice() is None
    if codegen.find_ptxas():
        assert codegen.to_cubin(ptx, "sm_90")[:4] == b"\x7fELF"
    # nvJitLink where its library is installed (the nvidia-nvjitlink wheel).
    through_jitlink = codegen.to_cubin(ptx, "sm_90", use_ptxas=False)
    if through_jitlink is not None:
        assert through_jitlink[:4] == b"\x7fELF"


def test_dump_dir_has_one_file_per_matching_stage(ctx, tmp_path):
    module = mlir_ir.Module.parse(GELU)
    timings: dict[str, float] = {}
    pipeline.run(module, dump_dir=tmp_path, dump_regex="flatten|vectorize", timings=timings)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0] == "00.input.mlir"
    assert any(n.endswith(".xla-flatten-tensors.mlir") for n in names)
    assert any(n.endswith(".xla-vectorize-loads-stores.mlir") for n in names)
    assert len(names) == 3
    flat = next(tmp_path.glob("*.xla-flatten-tensors.mlir")).read_text()
    assert "tensor<12582912xbf16>" in flat
    assert set(timings) >= {"inline", "xla-lower-tensors", "xla-lower-to-llvm"}


def test_pass_failure_is_an_mlir_error(ctx):
    module = mlir_ir.Module.parse("""
      func.func @f(%t: tensor<4x4xf32>) -> tensor<2x4xf32> {
        %0 = tensor.extract_slice %t[0, 0] [2, 4] [1, 1] : tensor<4x4xf32> to tensor<2x4xf32>
        return %0 : tensor<2x4xf32>
      }""")
    with pytest.raises(mlir_ir.MLIRError, match="failed to legalize operation 'tensor.extract_slice'"):
        pipeline.run(module)


def test_bad_arch_is_rejected(ctx):
    with pytest.raises(ValueError, match="sm_90"):
        codegen.to_ptx(mlir_ir.Module.parse(""), "gfx90a")


def test_translate_cli(tmp_path):
    def translate(*args, stdin=None):
        return subprocess.run([sys.executable, "-c", "from xla_gpu._cli import translate_main; translate_main()",
                               *args], capture_output=True, text=True, input=stdin)
    ok = translate(str(ROOT / "examples" / "gelu.mlir"), "--emit=ptx")
    assert ok.returncode == 0 and ".entry main(" in ok.stdout
    bad = translate("-", stdin="func.func @f() {\n  %x = xla_gpu.nope\n}\n")
    assert bad.returncode == 2
    assert bad.stderr.startswith("<stdin>:2:8: error: custom op 'xla_gpu.nope' is unknown")
    stop = translate(str(ROOT / "examples" / "gelu.mlir"), "--stop-after=no-such-pass")
    assert stop.returncode == 2 and "no pass named 'no-such-pass'" in stop.stderr


def test_bad_ptx_is_a_codegen_error():
    for use_ptxas in (True, False):
        if use_ptxas and not codegen.find_ptxas():
            continue
        try:
            codegen.to_cubin(".version 7.8\n.target sm_90\nnot ptx", "sm_90", use_ptxas=use_ptxas)
        except codegen.CodegenError as e:
            assert "failed" in str(e)
        else:  # nvJitLink absent: nothing was built, and nothing claimed
            assert not use_ptxas
