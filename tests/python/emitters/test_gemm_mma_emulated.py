"""The tensor-core GEMM kernel's fragment layouts, checked on the cpu
target: the emitter's mma path (free-major tiles, each lane's fragment
registers loaded and packed as for `mma.sync`) with every warp's mma
computed lane by lane from the registers the other lanes loaded, found
through the PTX ISA's documented layouts (`GemmEmitter(...,
tensor_cores=True)` on the host). A wrong row, column, k offset or
packing order in the fragment loads gives wrong sums here."""

from __future__ import annotations

import numpy as np
import pytest

from xla_gpu import hlo, ir
from xla_gpu.analysis.device import HOST_EMULATION
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.backends import cpu
from xla_gpu.emitters.gemm import GemmEmitter
from xla_gpu.hlo.numerics import compare, random_inputs, tolerance_type


def _module(lhs: str, rhs: str, out: str, dims: str, config: str, convert: str = "") -> str:
    """One __triton_gemm fusion `f`; `convert` (a type) converts the lhs
    parameter to the dot's lhs type first (the seed's s8 -> bf16)."""
    bm, bn, bk, warps = config.split(",")
    tiling = (f'"block_m":"{bm}","block_n":"{bn}","block_k":"{bk}","split_k":"1",'
              f'"num_stages":"1","num_warps":"{warps}"')
    lhs_param = lhs if not convert else convert + lhs[lhs.index("["):]
    body_lhs = (f"  p0 = {lhs} parameter(0)" if not convert else
                f"  q0 = {lhs_param} parameter(0)\n  p0 = {lhs} convert(q0)")
    return f"""HloModule m
gemm {{
{body_lhs}
  p1 = {rhs} parameter(1)
  ROOT d = {out} dot(p0, p1), {dims}
}}
ENTRY e {{
  a = {lhs_param} parameter(0)
  b = {rhs} parameter(1)
  ROOT f = {out} fusion(a, b), kind=kCustom, calls=gemm,
    backend_config={{"fusion_backend_config":{{"kind":"__triton_gemm",
      "triton_gemm_config":{{{tiling}}}}}}}
}}
"""


PLAIN = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
CASES = {
    # name: (lhs, rhs, out, dims, "bm,bn,bk,warps", convert)
    "bf16_one_warp": ("bf16[16,16]", "bf16[16,8]", "f32[16,8]", PLAIN, "16,8,16,1", ""),
    "bf16_odd_2x2_warps": ("bf16[45,40]", "bf16[40,37]", "f32[45,37]", PLAIN,
                           "32,32,32,4", ""),
    "bf16_warp_tiles_2x4": ("bf16[64,48]", "bf16[48,70]", "bf16[64,70]", PLAIN,
                            "64,64,16,4", ""),
    "f16_rhs_k_minor": ("f16[33,40]", "f16[24,40]", "f32[33,24]",
                        "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
                        "32,16,32,2", ""),
    "s8_s32": ("s8[40,96]", "s8[96,24]", "s32[40,24]", PLAIN, "32,16,64,2", ""),
    "seed_s8_to_bf16": ("bf16[48,40]", "bf16[40,64]", "bf16[48,64]", PLAIN, "32,32,32,4",
                        "s8"),
    # s8 read as bf16 by the tile loads (the dot's own mixed operands).
    "mixed_s8_bf16_dot": ("s8[40,48]", "bf16[48,24]", "bf16[40,24]", PLAIN, "32,16,16,2", ""),
    "s8_u8_into_f32": ("s8[24,64]", "u8[64,16]", "f32[24,16]", PLAIN, "16,16,32,1", ""),
    "batch_lhs_k_major": ("bf16[3,50,20]", "bf16[3,50,30]", "f32[3,20,30]",
                          "lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
                          "rhs_contracting_dims={1}", "16,32,32,2", ""),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_tensor_core_kernel_matches_the_interpreter(name):
    lhs, rhs, out, dims, config, convert = CASES[name]
    text = _module(lhs, rhs, out, dims, config, convert)
    module = hlo.parse_module(text)
    fusion = select_fusion(module, "f", device=HOST_EMULATION)
    fusion.one_dimensional_grid = True
    emitter = GemmEmitter(fusion, tensor_cores=True)
    assert emitter.plan.mma is not None and emitter.plan.staging == "shared"
    kernel = emitter.emit(ir.Context())
    host = cpu.compile_module(kernel.module, entry=kernel.name,
                              threads=kernel.launch.threads, blocks=kernel.launch.blocks)
    inputs = random_inputs(module.entry, 2)
    (want,) = hlo.evaluate(module, *inputs)
    got = np.zeros_like(np.asarray(want))
    host.run([*inputs, got])
    dtype = out.split("[")[0]
    mismatch = compare(got, np.asarray(want), dtype, 0, tolerance_type(module.entry, dtype),
                       True)
    assert mismatch is None, str(mismatch)


def test_without_tensor_cores_the_host_keeps_its_scalar_product():
    lhs, rhs, out, dims, config, _ = CASES["bf16_odd_2x2_warps"]
    module = hlo.parse_module(_module(lhs, rhs, out, dims, config))
    fusion = select_fusion(module, "f", device=HOST_EMULATION)
    assert GemmEmitter(fusion).plan.mma is None
