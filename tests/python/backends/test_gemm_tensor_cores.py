"""The GEMM emitter's tile product on tensor cores for cuda (issue 31):
the PTX of 16- and 8-bit GEMM fusions for sm_90 uses `mma.sync` (f32
accumulators for f16/bf16, s32 for s8), and ptxas -v finds no spills and
the static shared memory within a block's 48 KiB. The numerics are
checked where a GPU is (bench/gpu_check.py, case `gemm`); the cpu target
runs the same fusions through its scalar path (tests/python/emitters)."""

from __future__ import annotations

from pathlib import Path

import pytest

import xla_gpu
from xla_gpu.backends.cuda import codegen
from xla_gpu.runtime.device import for_arch
from xla_gpu.runtime.thunks import walk

SEED = (Path(__file__).resolve().parents[3] / "examples" / "seed_gemm.hlo").read_text()

needs_ptxas = pytest.mark.skipif(codegen.find_ptxas() is None, reason="no ptxas installed")


def _gemm(lhs: str, rhs: str, out: str, config: str = "") -> str:
    """A module of one __triton_gemm fusion out = lhs @ rhs (shapes as HLO
    text); `config` "bm,bn,bk,warps" or the heuristic table."""
    tiling = ""
    if config:
        bm, bn, bk, warps = config.split(",")
        tiling = (f',"triton_gemm_config":{{"block_m":"{bm}","block_n":"{bn}",'
                  f'"block_k":"{bk}","split_k":"1","num_stages":"1","num_warps":"{warps}"}}')
    return f"""HloModule m
gemm {{
  p0 = {lhs} parameter(0)
  p1 = {rhs} parameter(1)
  ROOT d = {out} dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT f = {out} fusion(a, b), kind=kCustom, calls=gemm,
    backend_config={{"fusion_backend_config":{{"kind":"__triton_gemm"{tiling}}}}}
}}
"""


def _gemm_ptx(text: str, arch: str = "sm_90") -> str:
    """The PTX of the program's one GEMM kernel, compiled for `arch`."""
    exe = xla_gpu.compile(text, target="cuda", arch=arch, cache=False)
    kernels = [t for t in walk(exe.thunks) if t.kind == "kernel"]
    assert len(kernels) == 1, exe.thunk_sequence_text()
    kernel = exe.kernels[kernels[0].kernel]
    assert kernel.spec.emitter == "gemm"
    return kernel.ptx


# (module text, the mma instruction its PTX must hold)
CASES = {
    "seed_s8_x_bf16": (SEED, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
    "bf16_64x64x32": (_gemm("bf16[512,384]", "bf16[384,640]", "bf16[512,640]", "64,64,32,4"),
                      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
    "bf16_128x128_8_warps": (_gemm("bf16[300,260]", "bf16[260,270]", "f32[300,270]",
                                   "128,128,32,8"),
                             "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
    "f16_odd": (_gemm("f16[77,100]", "f16[100,45]", "f16[77,45]"),
                "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
    "s8_s32": (_gemm("s8[100,96]", "s8[96,72]", "s32[100,72]", "64,64,64,4"),
               "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
    # 8-bit integers into a float: converted to bf16 by the tile loads.
    "s8_u8_into_f32": (_gemm("s8[64,96]", "u8[96,40]", "f32[64,40]", "32,32,32,4"),
                       "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gemm_ptx_uses_tensor_cores(name):
    text, instruction = CASES[name]
    ptx = _gemm_ptx(text)
    assert instruction in ptx
    if ".f32." in instruction:   # the tile product has no scalar FMA left
        assert "fma.rn.f32" not in ptx


@needs_ptxas
@pytest.mark.parametrize("name", sorted(CASES))
def test_ptxas_finds_no_spills_and_shared_memory_within_limits(name):
    text, _ = CASES[name]
    resources = codegen.kernel_resources(_gemm_ptx(text), "sm_90", use_ptxas=True)
    (kernel,) = resources.values()
    assert kernel.spill_store_bytes == 0 and kernel.spill_load_bytes == 0, kernel
    assert kernel.stack_bytes == 0, kernel
    limits = for_arch("sm_90")
    assert 0 < kernel.shared_bytes <= min(48 * 1024, limits.shared_memory_per_block), kernel
    assert kernel.registers * kernel.block_size <= limits.registers_per_block_limit, kernel


def test_f32_and_f64_gemms_keep_the_scalar_product():
    # Tensor cores only where the scalar path's numerics are kept: f32
    # operands (no tf32 rounding, as XLA's default precision) stay FMAs.
    ptx = _gemm_ptx(_gemm("f32[64,48]", "f32[48,64]", "f32[64,64]"))
    assert "mma.sync" not in ptx and "fma.rn.f32" in ptx


def test_archs_before_ampere_keep_the_scalar_product():
    # mma.sync's m16n8k16 (f16, bf16) and m16n8k32 (s8) forms are sm_80's:
    # for sm_75 the same fusions compile to FMAs, and ptxas takes the PTX.
    for lhs, rhs, out in (("f16[64,48]", "f16[48,64]", "f16[64,64]"),
                          ("s8[64,64]", "s8[64,64]", "s32[64,64]")):
        ptx = _gemm_ptx(_gemm(lhs, rhs, out), arch="sm_75")
        assert "mma.sync" not in ptx
        assert ".target sm_75" in ptx
        if codegen.find_ptxas() is not None:
            assert codegen.kernel_resources(ptx, "sm_75", use_ptxas=True)


def test_ampere_gets_tensor_cores():
    ptx = _gemm_ptx(_gemm("bf16[64,48]", "bf16[48,64]", "bf16[64,64]"), arch="sm_80")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
