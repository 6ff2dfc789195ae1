"""The GEMM emitter and GEMM fusions (issue 31): a dot with its operand
prologue and elementwise epilogue compiled as ONE tiled kernel, from XLA's
own `__triton_gemm` dumps (their tiling honoured) and from jax's
pre-optimization text (the GemmFusion pass). Each case runs on the cpu
target on inputs made as XLA's harness makes them and is compared with the
reference interpreter; the cuda kernels are checked as PTX (ptxas)."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import emitters, hlo, ir
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.analysis.gemm import GemmTiling, plan_gemm, triton_gemm_tiling
from xla_gpu.errors import HloError, XlaGpuError
from xla_gpu.hlo.numerics import compare, random_inputs, tolerance_type
from xla_gpu.hlo.passes import optimize
from xla_gpu.runtime.thunks import walk

# The seed's example: jax.jit(lambda a, b: -((a @ b) * 0.125)).lower(a, b)
# .as_text(dialect="hlo") with a: s8[1024,512], b: bf16[512,2048] (jax 0.10.2).
SEED_PRE = (Path(__file__).resolve().parents[3] / "examples" / "seed_gemm.hlo").read_text()

# The seed document's post-optimization text (XLA:GPU's triton_gemm fusion).
SEED_POST = """HloModule jit_f, is_scheduled=true, entry_computation_layout={(s8[3,2]{1,0}, bf16[2,3]{1,0})->bf16[3,3]{1,0} }, allow_spmd_sharding_propagation_to_output={true}

%triton_gemm_dot.6_computation (parameter_0: s8[3,2], parameter_1: bf16[2,3]) -> bf16[3,3] {
  %parameter_0 = s8[3,2]{1,0} parameter(0)
  %convert.0 = bf16[3,2]{1,0} convert(s8[3,2]{1,0} %parameter_0)
  %parameter_1 = bf16[2,3]{1,0} parameter(1)
  %dot.0 = bf16[3,3]{1,0} dot(bf16[3,2]{1,0} %convert.0, bf16[2,3]{1,0} %parameter_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %convert.1 = f32[3,3]{1,0} convert(bf16[3,3]{1,0} %dot.0)
  %constant_0 = bf16[] constant(0.125)
  %broadcast.0 = bf16[3,3]{1,0} broadcast(bf16[] %constant_0), dimensions={}
  %convert.2 = f32[3,3]{1,0} convert(bf16[3,3]{1,0} %broadcast.0)
  %multiply.0 = f32[3,3]{1,0} multiply(f32[3,3]{1,0} %convert.1, f32[3,3]{1,0} %convert.2)
  %negate.0 = f32[3,3]{1,0} negate(f32[3,3]{1,0} %multiply.0)
  ROOT %convert.6 = bf16[3,3]{1,0} convert(f32[3,3]{1,0} %negate.0)
}

ENTRY %main.9 (Arg_0.1: s8[3,2], Arg_1.2: bf16[2,3]) -> bf16[3,3] {
  %Arg_1.2 = bf16[2,3]{1,0} parameter(1), sharding={replicated}
  %Arg_0.1 = s8[3,2]{1,0} parameter(0), sharding={replicated}
  ROOT %triton_gemm_dot.6 = bf16[3,3]{1,0} fusion(s8[3,2]{1,0} %Arg_0.1, bf16[2,3]{1,0} %Arg_1.2), kind=kCustom, calls=%triton_gemm_dot.6_computation, backend_config={"kind":"__triton_gemm","triton_gemm_config":{"block_m":"64","block_n":"64","block_k":"64","split_k":"1","num_stages":"2","num_warps":"4"} }
}
"""


def _config(bm, bn, bk, split_k=1, warps=4) -> str:
    return ('{"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":'
            f'{{"block_m":"{bm}","block_n":"{bn}","block_k":"{bk}","split_k":"{split_k}",'
            f'"num_stages":"1","num_warps":"{warps}"}}}}}}')


def _shape(t, dims) -> str:
    return f"{t}[{','.join(map(str, dims))}]"


def _gemm_module(lhs, rhs, out, dims_text, config, body_extra="", extra_params=(),
                 root_shape=None) -> str:
    """A module whose ENTRY calls one __triton_gemm fusion: `lhs`, `rhs`,
    `out` are (type, dims) of the dot `d`; `body_extra` (ending in the
    ROOT) is its epilogue, the dot is the root without one;
    `extra_params` (type, dims) are parameters p2, p3..."""
    params = [lhs, rhs, *extra_params]
    body = "\n".join(f"  p{k} = {_shape(*s)} parameter({k})" for k, s in enumerate(params))
    entry = "\n".join(f"  a{k} = {_shape(*s)} parameter({k})" for k, s in enumerate(params))
    args = ", ".join(f"a{k}" for k in range(len(params)))
    dot = f"d = {_shape(*out)} dot(p0, p1), {dims_text}"
    dot = f"  {dot}\n{body_extra}" if body_extra else f"  ROOT {dot}\n"
    return (f"HloModule m\n\ngemm {{\n{body}\n{dot}}}\n\n"
            f"ENTRY e {{\n{entry}\n  ROOT f = {root_shape or _shape(*out)} fusion({args}), "
            f"kind=kCustom, calls=gemm, backend_config={config}\n}}\n")


def _check(exe, text: str, seed: int = 0):
    """Runs `exe` on random inputs of `text` and compares every output
    with the interpreter (tolerances as the dot tests: relative to the
    outputs' scale for sums, the loosest float type's otherwise)."""
    module = hlo.parse_module(text)
    inputs = random_inputs(module.entry, seed)
    got = exe.run(*inputs)
    want = hlo.evaluate(module, *inputs)
    leaves = module.entry.root.shape.leaves()
    assert len(got) == len(want) == len(leaves)
    for k, (g, w, s) in enumerate(zip(got, want, leaves)):
        mismatch = compare(np.asarray(g), np.asarray(w), s.element_type, k,
                           tolerance_type(module.entry, s.element_type), True)
        assert mismatch is None, str(mismatch)


def _compile(text: str, **kwargs):
    kwargs.setdefault("target", "cpu")
    return xla_gpu.compile(text, **kwargs)


def _thunks(exe) -> list:
    return [t for t in walk(exe.thunks) if t.kind != "command_buffer"]


def _gemm_kernels(exe) -> list:
    return [t for t in _thunks(exe) if t.kind == "kernel"
            and exe.kernels[t.kernel].spec.emitter == "gemm"]


# -- the seed's example --------------------------------------------------------------


def test_seed_pre_optimization_text_is_one_gemm_kernel():
    # cuda: the GEMM fusion, ONE kernel and nothing else (as XLA:GPU).
    exe = _compile(SEED_PRE, target="cuda", cache=False)
    thunks = _thunks(exe)
    assert [t.kind for t in thunks] == ["kernel"], exe.thunk_sequence_text()
    (kernel,) = thunks
    assert exe.kernels[kernel.kernel].spec.emitter == "gemm"
    # The heuristic table's 64x64 tiles (a large output), 4 warps.
    assert kernel.blocks == (1024 // 64) * (2048 // 64) and kernel.threads == 128
    optimized = exe.as_text()
    assert '"kind":"__triton_gemm"' in optimized and "kind=kCustom" in optimized
    # cpu: a GEMM this large runs faster through BLAS (the emulated kernel
    # reaches ~21 GFLOP/s): a gemm thunk and the convert and epilogue kernels.
    host = _compile(SEED_PRE)
    assert "gemm" in [t.kind for t in _thunks(host)], host.thunk_sequence_text()
    _check(host, SEED_PRE)
    # The GEMM kernel itself, compiled on its own for the cpu target, matches too.
    fusion = next(line.split("=")[0].split()[-1].lstrip("%")
                  for line in optimized.splitlines() if "kind=kCustom" in line)
    module = hlo.parse_module(optimized)
    kernel_exe = xla_gpu.compile(optimized, target="cpu", fusion=fusion, cache=False)
    inputs = random_inputs(select_fusion(module, fusion).computation, 0)
    np.testing.assert_allclose(
        np.asarray(kernel_exe.run(*inputs)[0], np.float32),
        np.asarray(hlo.evaluate(select_fusion(module, fusion).computation, *inputs)[0],
                   np.float32), rtol=2e-2, atol=1e-2)


def test_seed_post_optimization_text_runs_as_one_kernel_with_its_tiling():
    exe = _compile(SEED_POST)
    (kernel,) = _thunks(exe)
    assert kernel.kind == "kernel" and exe.kernels[kernel.kernel].spec.emitter == "gemm"
    assert kernel.blocks == 1
    _check(exe, SEED_POST)
    # The fusion compiled on its own keeps the config of its instruction.
    fusion = select_fusion(hlo.parse_module(SEED_POST), "triton_gemm_dot.6")
    assert fusion.kind == "gemm"
    assert fusion.config == GemmTiling(64, 64, 64, 1, 2, 4)


def test_seed_post_optimization_form_at_full_size():
    text = SEED_POST.replace("s8[3,2]", "s8[300,200]").replace("bf16[2,3]", "bf16[200,500]") \
        .replace("bf16[3,2]", "bf16[300,200]").replace("bf16[3,3]", "bf16[300,500]") \
        .replace("f32[3,3]", "f32[300,500]")
    # cuda: one kernel with XLA's tiling.
    (kernel,) = _thunks(_compile(text, target="cuda", cache=False))
    assert kernel.blocks == math.ceil(300 / 64) * math.ceil(500 / 64)
    # cpu: 30M multiply-adds are past the emulated kernel's size limit; the
    # fusion alone (the emitter's direct-read form) and the whole program
    # (BLAS) both match the interpreter.
    _check(xla_gpu.compile(text, target="cpu", fusion="triton_gemm_dot.6", cache=False), text)
    _check(_compile(text), text)


# -- dots of every form, as __triton_gemm fusions ------------------------------------

DIMS = {
    "plain": "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
    "batch": "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
             "rhs_contracting_dims={1}",
    "lhs_t": "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
    "rhs_t": "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
}

CASES = {
    # name: (lhs, rhs, out, dims, (bm, bn, bk, warps))
    "f32_ragged": (("f32", (37, 29)), ("f32", (29, 45)), ("f32", (37, 45)), DIMS["plain"],
                   (16, 16, 16, 4)),
    "f32_batch": (("f32", (3, 20, 24)), ("f32", (3, 24, 36)), ("f32", (3, 20, 36)),
                  DIMS["batch"], (16, 32, 8, 2)),
    "bf16_lhs_transposed": (("bf16", (40, 33)), ("bf16", (40, 50)), ("f32", (33, 50)),
                            DIMS["lhs_t"], (32, 32, 16, 4)),
    "f16_rhs_transposed": (("f16", (33, 40)), ("f16", (50, 40)), ("f32", (33, 50)),
                           DIMS["rhs_t"], (32, 16, 32, 4)),
    "s8_s32": (("s8", (24, 64)), ("s8", (64, 40)), ("s32", (24, 40)), DIMS["plain"],
               (16, 32, 32, 4)),
    "bf16_out": (("bf16", (48, 96)), ("bf16", (96, 40)), ("bf16", (48, 40)), DIMS["plain"],
                 (32, 32, 32, 4)),
    "f64": (("f64", (17, 23)), ("f64", (23, 19)), ("f64", (17, 19)), DIMS["plain"],
            (16, 16, 16, 2)),
    "batch_not_leading": (("f32", (8, 3, 16)), ("f32", (5, 16, 3)), ("f32", (3, 8, 5)),
                          "lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={2}, "
                          "rhs_contracting_dims={1}", (16, 16, 16, 1)),
    "two_contracting": (("f32", (2, 3, 4, 6)), ("f32", (3, 6, 4, 2)), ("f32", (3, 2, 2)),
                        "lhs_batch_dims={1}, lhs_contracting_dims={2,3}, rhs_batch_dims={0}, "
                        "rhs_contracting_dims={2,1}", (16, 16, 8, 1)),
    "vector_matrix": (("f32", (24,)), ("f32", (24, 40)), ("f32", (40,)),
                      "lhs_contracting_dims={0}, rhs_contracting_dims={0}", (16, 16, 16, 4)),
    "dot_product": (("f32", (50,)), ("f32", (50,)), ("f32", ()),
                    "lhs_contracting_dims={0}, rhs_contracting_dims={0}", (16, 16, 16, 4)),
}


def _grid(dims_text, lhs, rhs, out, bm, bn):
    module = hlo.parse_module(_gemm_module(lhs, rhs, out, dims_text, _config(16, 16, 16)))
    dot = next(i for i in module.computation("gemm").instructions if i.opcode == "dot")
    from xla_gpu.analysis.gemm import dot_dims
    d = dot_dims(dot)
    return math.ceil(d.M / bm) * math.ceil(d.N / bn) * d.B


@pytest.mark.parametrize("name", sorted(CASES))
def test_dot_forms_as_one_kernel_with_the_configured_grid(name):
    lhs, rhs, out, dims_text, (bm, bn, bk, warps) = CASES[name]
    text = _gemm_module(lhs, rhs, out, dims_text, _config(bm, bn, bk, 1, warps))
    exe = _compile(text)
    (kernel,) = _thunks(exe)
    assert kernel.kind == "kernel" and exe.kernels[kernel.kernel].spec.emitter == "gemm"
    assert kernel.blocks == _grid(dims_text, lhs, rhs, out, bm, bn)
    assert kernel.threads <= warps * 32
    _check(exe, text)


def test_long_contracting_dimension_on_the_host_reads_operands_directly():
    """Beyond HOST_SHARED_MAX_K_STEPS steps of block_k the cpu target's
    kernel has each thread read its operands in a k loop of its own; the
    result is the same."""
    text = _gemm_module(("bf16", (20, 700)), ("f32", (700, 30)), ("f32", (20, 30)),
                        DIMS["plain"], _config(16, 16, 16))
    module = hlo.parse_module(text)
    dot = next(i for i in module.computation("gemm").instructions if i.opcode == "dot")
    assert plan_gemm(dot, GemmTiling(16, 16, 16), host=True).staging == "registers"
    assert plan_gemm(dot, GemmTiling(16, 16, 16), host=False).staging == "shared"
    _check(_compile(text), text)


@pytest.mark.parametrize("staging", ["shared", "registers"])
def test_both_stagings_match_the_interpreter(staging):
    """The GPU's shared-memory staging (its k loop around the phases of a
    step on the host)
    and the direct reads, each emitted for one fusion and run on the host."""
    from xla_gpu.analysis.device import HOST_EMULATION
    from xla_gpu.backends import cpu
    from xla_gpu.emitters.gemm import GemmEmitter
    text = _gemm_module(("s8", (40, 72)), ("bf16", (72, 33)), ("bf16", (40, 33)),
                        DIMS["plain"], _config(16, 16, 8))
    module = hlo.parse_module(text)
    fusion = select_fusion(module, "f", device=HOST_EMULATION)
    fusion.one_dimensional_grid = True
    emitter = GemmEmitter(fusion, staging=staging)
    assert emitter.plan.staging == staging
    kernel = emitter.emit(ir.Context())
    host = cpu.compile_module(kernel.module, entry=kernel.name,
                              threads=kernel.launch.threads, blocks=kernel.launch.blocks)
    inputs = random_inputs(module.entry, 1)
    (want,) = hlo.evaluate(module, *inputs)
    out = np.zeros_like(np.asarray(want))
    host.run([*inputs, out])
    assert compare(out, np.asarray(want), "bf16", 0, "bf16", True) is None


# -- prologues and epilogues ----------------------------------------------------------


def test_prologue_and_epilogue_fused_into_the_tiles():
    """s8 and s4 operands converted while loading, a transposed and a
    broadcast operand; bias, activation and convert on the accumulator."""
    text = """HloModule m

gemm {
  p0 = s4[48,40] parameter(0)
  p1 = s8[40,56] parameter(1)
  bias = f32[56] parameter(2)
  scale = f32[40] parameter(3)
  a = bf16[48,40] convert(p0)
  c1 = bf16[40,56] convert(p1)
  bs = bf16[56,40] transpose(c1), dimensions={1,0}
  cs = bf16[40] convert(scale)
  sc = bf16[56,40] broadcast(cs), dimensions={1}
  b = bf16[56,40] multiply(bs, sc)
  d = f32[48,56] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  bb = f32[48,56] broadcast(bias), dimensions={1}
  z = f32[48,56] add(d, bb)
  zero = f32[] constant(0)
  zb = f32[48,56] broadcast(zero), dimensions={}
  relu = f32[48,56] maximum(z, zb)
  ROOT out = bf16[48,56] convert(relu)
}

ENTRY e {
  a0 = s4[48,40] parameter(0)
  a1 = s8[40,56] parameter(1)
  a2 = f32[56] parameter(2)
  a3 = f32[40] parameter(3)
  ROOT f = bf16[48,56] fusion(a0, a1, a2, a3), kind=kCustom, calls=gemm,
    backend_config=""" + _config(32, 32, 16) + """
}
"""
    exe = _compile(text)
    (kernel,) = _thunks(exe)
    assert exe.kernels[kernel.kernel].spec.emitter == "gemm"
    _check(exe, text, seed=2)


def test_several_epilogue_outputs_from_one_kernel():
    """Three outputs of one dot: its value, a scaled negation and a bias +
    tanh activation reshaped; one kernel writes them all."""
    body = """  c = f32[] constant(0.5)
  cb = f32[24,40] broadcast(c), dimensions={}
  s = f32[24,40] multiply(d, cb)
  n = f32[24,40] negate(s)
  bb = f32[24,40] broadcast(p2), dimensions={1}
  ab = f32[24,40] add(d, bb)
  t = f32[24,40] tanh(ab)
  tr = f32[960] reshape(t)
  ROOT r = (f32[24,40], f32[24,40], f32[960]) tuple(d, n, tr)
"""
    text = _gemm_module(("f32", (24, 64)), ("f32", (64, 40)), ("f32", (24, 40)),
                        DIMS["plain"], _config(16, 16, 16), body_extra=body,
                        extra_params=[("f32", (40,))],
                        root_shape="(f32[24,40], f32[24,40], f32[960])")
    exe = _compile(text)
    kernels = _thunks(exe)
    assert [t.kind for t in kernels] == ["kernel"]
    assert exe.kernels[kernels[0].kernel].spec.emitter == "gemm"
    _check(exe, text)


# -- split_k ------------------------------------------------------------------------


@pytest.mark.parametrize("split_k", [1, 2, 4])
def test_split_k_partials_then_a_reduction_kernel(split_k):
    """split_k > 1: a GEMM kernel of ceil(m/bm) * ceil(n/bn) * batch *
    split_k blocks writing f32 partials, then a reduction kernel that sums
    them and applies the epilogue (negate, convert to bf16)."""
    body = "  n = f32[2,24,40] negate(d)\n  ROOT r = bf16[2,24,40] convert(n)\n"
    text = _gemm_module(("bf16", (2, 24, 64)), ("bf16", (2, 64, 40)), ("f32", (2, 24, 40)),
                        DIMS["batch"], _config(16, 16, 16, split_k), body_extra=body,
                        root_shape="bf16[2,24,40]")
    exe = _compile(text)
    thunks = _thunks(exe)
    gemm = _gemm_kernels(exe)
    assert len(gemm) == 1
    assert gemm[0].blocks == math.ceil(24 / 16) * math.ceil(40 / 16) * 2 * split_k
    assert len(thunks) == (1 if split_k == 1 else 2), exe.thunk_sequence_text()
    if split_k > 1:
        assert exe.kernels[thunks[1].kernel].spec.emitter == "reduction"
    _check(exe, text)


def test_gemm_fusion_pass_with_split_k():
    """GemmFusion given a split_k > 1 tiling: the GEMM fusion of partials
    and the reduction fusion with the epilogue, in the optimized module."""
    from xla_gpu.hlo import module_to_text
    from xla_gpu.hlo.passes import GemmFusion
    text = SEED_PRE.replace("1024", "48").replace("512", "64").replace("2048", "40")
    module = hlo.parse_module(text)
    assert GemmFusion(tiling=GemmTiling(16, 16, 16, split_k=4)).run(module)
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    assert sorted(str(f.attrs["kind"]) for f in fusions) == ["kCustom", "kInput"]
    exe = _compile(module_to_text(module))
    (gemm,) = _gemm_kernels(exe)
    assert gemm.blocks == math.ceil(48 / 16) * math.ceil(40 / 16) * 4
    _check(exe, text)


def test_a_dump_split_already_is_not_split_again():
    """XLA's dumps of split_k > 1 have the split as the dot's batch
    dimension (f32 partials) and the reduce outside: compiled as it is."""
    text = """HloModule m

gemm {
  p0 = f16[55,120] parameter(0)
  l = f16[55,3,40] reshape(p0)
  p1 = f16[120,20] parameter(1)
  r = f16[3,40,20] reshape(p1)
  ROOT d = f32[3,55,20] dot(l, r), lhs_batch_dims={1}, lhs_contracting_dims={2},
    rhs_batch_dims={0}, rhs_contracting_dims={1}
}

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

fused_reduce {
  q = f32[3,55,20] parameter(0)
  z = f32[] constant(0)
  red = f32[55,20] reduce(q, z), dimensions={0}, to_apply=add
  ROOT c = f16[55,20] convert(red)
}

ENTRY e {
  a = f16[55,120] parameter(0)
  b = f16[120,20] parameter(1)
  g = f32[3,55,20] fusion(a, b), kind=kCustom, calls=gemm,
    backend_config=""" + _config(16, 64, 32, 3, 2) + """
  ROOT o = f16[55,20] fusion(g), kind=kInput, calls=fused_reduce
}
"""
    exe = _compile(text)
    (gemm,) = _gemm_kernels(exe)
    assert gemm.blocks == math.ceil(55 / 16) * math.ceil(20 / 64) * 3
    assert len(_thunks(exe)) == 2
    _check(exe, text)


def test_nested_gemm_fusion_dump_is_one_kernel():
    """XLA's newer form: the outer fusion and the dot's operands are
    `__triton_nested_gemm_fusion`s with block-level tiles (the outer output
    tile is block_m x block_n, the lhs tile's contracting size block_k)."""
    def nested(sizes, warps=""):
        return ('{"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion",'
                f'"block_level_fusion_config":{{{warps}"output_tiles":[{{"sizes":'
                f'[{",".join(chr(34) + str(n) + chr(34) for n in sizes)}]}}]}}}}}}')
    text = f"""HloModule m

lhs_body {{
  x = s8[40,72] parameter(0)
  ROOT c = bf16[40,72] convert(x)
}}

rhs_body {{
  y = bf16[72,33] parameter(0)
  ROOT n = bf16[72,33] negate(y)
}}

gemm {{
  p0 = s8[40,72] parameter(0)
  p1 = bf16[72,33] parameter(1)
  l = bf16[40,72] fusion(p0), kind=kCustom, calls=lhs_body, backend_config={nested([16, 8])}
  r = bf16[72,33] fusion(p1), kind=kCustom, calls=rhs_body, backend_config={nested([8, 32])}
  ROOT d = f32[40,33] dot(l, r), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}

ENTRY e {{
  a = s8[40,72] parameter(0)
  b = bf16[72,33] parameter(1)
  ROOT f = f32[40,33] fusion(a, b), kind=kCustom, calls=gemm,
    backend_config={nested([16, 32], chr(34) + "num_warps" + chr(34) + ':"2",')}
}}
"""
    module = hlo.parse_module(text)
    assert triton_gemm_tiling(module.entry.root) == GemmTiling(16, 32, 8, 1, 1, 2)
    exe = _compile(text)
    (kernel,) = _thunks(exe)
    assert exe.kernels[kernel.kernel].spec.emitter == "gemm"
    assert kernel.blocks == math.ceil(40 / 16) * math.ceil(33 / 32) and kernel.threads == 64
    assert '"block_k":"8"' in exe.as_text()
    _check(exe, text)


# -- tilings --------------------------------------------------------------------------


@pytest.mark.parametrize("config", [(16, 16, 16, 1), (32, 64, 32, 4), (64, 32, 16, 2),
                                    (128, 64, 32, 8)])
def test_tile_configs_are_honoured(config):
    bm, bn, bk, warps = config
    text = _gemm_module(("bf16", (150, 96)), ("bf16", (96, 130)), ("f32", (150, 130)),
                        DIMS["plain"], _config(bm, bn, bk, 1, warps))
    exe = _compile(text)
    (kernel,) = _thunks(exe)
    assert kernel.blocks == math.ceil(150 / bm) * math.ceil(130 / bn)
    assert kernel.threads == min(warps * 32, bm * bn)
    _check(exe, text)


def test_bad_tile_configs_are_clear_errors():
    text = _gemm_module(("f32", (8, 8)), ("f32", (8, 8)), ("f32", (8, 8)), DIMS["plain"],
                        _config(16, 16, 16).replace('"block_k":"16"', '"block_k":"big"'))
    module = hlo.parse_module(text)
    fusion = module.entry.root
    with pytest.raises(HloError, match="fusion 'f'.*block_k"):
        triton_gemm_tiling(fusion)
    with pytest.raises(XlaGpuError, match="block_m.*power of two"):
        _compile(_gemm_module(("f32", (8, 8)), ("f32", (8, 8)), ("f32", (8, 8)),
                              DIMS["plain"], _config(24, 16, 16)), cache=False)


def test_heuristic_table_without_a_config():
    """A GEMM fusion whose backend config has no tiling: the heuristic
    table's tiles, shrunk to small dims."""
    module = hlo.parse_module("""HloModule m
f {
  p0 = f32[5,300] parameter(0)
  p1 = f32[300,1000] parameter(1)
  ROOT d = f32[5,1000] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY e {
  a = f32[5,300] parameter(0)
  b = f32[300,1000] parameter(1)
  ROOT g = f32[5,1000] fusion(a, b), kind=kCustom, calls=f,
    backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
}
""")
    kernel = emitters.emit(module, ir.Context())
    assert kernel.emitter == "gemm"
    # 32x32x32, m shrunk to 8: 1 x 32 blocks of 8 x 32 threads at most.
    assert kernel.launch.blocks == math.ceil(1000 / 32)
    assert kernel.launch.threads == 128


def test_a_dot_outside_a_gemm_fusion_keeps_the_loop_emitter():
    """XLA's loop fusions (and bare computations) with a dot: the loop
    emitter, each output element's dot product on its own, as XLA's."""
    module = hlo.parse_module("""HloModule m
f {
  p0 = f32[5,30] parameter(0)
  p1 = f32[30,10] parameter(1)
  d = f32[5,10] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT e = f32[5,10] exponential(d)
}
""")
    fusion = select_fusion(module)
    assert fusion.kind == "loop" and fusion.hero_kind == "gemm"
    assert "outside a GEMM fusion" in fusion.notes[0]


# -- what the emitter refuses ---------------------------------------------------------


def test_a_refused_gemm_fusion_is_opened_into_a_gemm_and_kernels():
    """An epilogue the emitter does not take (a transpose of the dot's
    result) goes the old way: a gemm thunk and kernels for the rest."""
    body = "  ROOT t = f32[40,24] transpose(d), dimensions={1,0}\n"
    text = _gemm_module(("f32", (24, 64)), ("f32", (64, 40)), ("f32", (24, 40)),
                        DIMS["plain"], _config(16, 16, 16), body_extra=body,
                        root_shape="f32[40,24]")
    exe = _compile(text)
    kinds = [t.kind for t in _thunks(exe)]
    assert "gemm" in kinds and not _gemm_kernels(exe)
    assert any("GEMM fusion 'f' runs as a gemm thunk" in n and "transpose 't'" in n
               for n in exe.notes), exe.notes
    _check(exe, text)


# -- jax's pre-optimization text: GemmFusion --------------------------------------------

DENSE_RELU = """HloModule dense
ENTRY main {
  x = f32[32,48] parameter(0)
  w = f32[48,40] parameter(1)
  b = f32[40] parameter(2)
  d = f32[32,40] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[32,40] broadcast(b), dimensions={1}
  z = f32[32,40] add(d, bb)
  zero = f32[] constant(0)
  zz = f32[32,40] broadcast(zero), dimensions={}
  ROOT r = f32[32,40] maximum(z, zz)
}
"""

PLAIN = """HloModule plain
ENTRY main {
  x = f32[64,96] parameter(0)
  w = f32[96,80] parameter(1)
  ROOT d = f32[64,80] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

BF16_BATCHED_TRANSPOSED = """HloModule attn
ENTRY main {
  q = bf16[2,16,8] parameter(0)
  k = bf16[2,16,8] parameter(1)
  s = f32[2,16,16] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  c = f32[] constant(0.35355)
  cb = f32[2,16,16] broadcast(c), dimensions={}
  ROOT r = f32[2,16,16] multiply(s, cb)
}
"""


@pytest.mark.parametrize("text", [DENSE_RELU, BF16_BATCHED_TRANSPOSED],
                         ids=["bias_relu", "scaled_scores"])
def test_gemm_fusion_pass_forms_one_kernel(text):
    exe = _compile(text)
    thunks = _thunks(exe)
    assert [t.kind for t in thunks] == ["kernel"], exe.thunk_sequence_text()
    assert exe.kernels[thunks[0].kernel].spec.emitter == "gemm"
    _check(exe, text, seed=4)


def test_plain_f32_dot_stays_a_gemm_thunk():
    result = optimize(hlo.parse_module(PLAIN))
    assert not any(i.opcode == "fusion" for i in result.entry.instructions)
    exe = _compile(PLAIN)
    assert [t.kind for t in _thunks(exe)] == ["gemm"]
    _check(exe, PLAIN)


def test_a_pure_matmul_around_reshapes_stays_a_gemm_thunk():
    """Two batch dimensions merged by DotCanonicalization's reshapes (and
    the result reshaped back): bitcasts only around the dot, no GEMM
    fusion (XLA's "pure matmul" rule)."""
    text = """HloModule bmm
ENTRY main {
  q = f32[2,2,4,8] parameter(0)
  k = f32[2,2,6,8] parameter(1)
  ROOT s = f32[2,2,4,6] dot(q, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
}
"""
    result = optimize(hlo.parse_module(text))
    assert not any(str(i.attrs.get("kind")) == "kCustom"
                   for i in result.entry.instructions if i.opcode == "fusion")
    exe = _compile(text)
    assert "gemm" in [t.kind for t in _thunks(exe)] and not _gemm_kernels(exe)
    _check(exe, text)


INT_DOT = """HloModule int_dot
ENTRY main {
  a = LHS parameter(0)
  b = RHS parameter(1)
  ROOT d = s32[M,N] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={RC}
}
"""


@pytest.mark.parametrize("lhs, rhs, rc, m, n, library", [
    ("s8[8,16]", "s8[12,16]", 1, 8, 12, True),    # IMMA's "TN": K minor on both sides
    ("s8[8,16]", "s8[16,12]", 0, 8, 12, False),   # the rhs's K is major
    ("s8[6,16]", "s8[5,16]", 1, 6, 5, False),     # M, N not multiples of 4
    ("s32[8,16]", "s32[12,16]", 1, 8, 12, False),  # no integer GEMM but s8 in cuBLASLt
    ("u8[8,16]", "u8[12,16]", 1, 8, 12, False),
])
def test_integer_dots_the_library_cannot_run_become_gemm_fusions(lhs, rhs, rc, m, n, library):
    """A pure integer dot stays a gemm thunk only in the form cuBLASLt's
    IMMA takes (it refused int8_matmul's 6x16x5 s8 dot on the GPU with
    CUBLAS_STATUS_NOT_SUPPORTED); any other is the GEMM emitter's."""
    text = INT_DOT.replace("LHS", lhs).replace("RHS", rhs).replace("RC", str(rc)) \
        .replace("M,N", f"{m},{n}")
    exe = _compile(text, target="cuda", cache=False)
    kinds = [t.kind for t in _thunks(exe)]
    assert kinds == (["gemm"] if library else ["kernel"]), exe.thunk_sequence_text()
    if not library:
        assert len(_gemm_kernels(exe)) == 1
        _check(_compile(text, cache=False), text)


def test_gemm_fusion_can_be_turned_off(monkeypatch):
    """XLA_GPU_GEMM_FUSION=0: the gemm thunk with separate convert and
    epilogue kernels (the path before GEMM fusions)."""
    monkeypatch.setenv("XLA_GPU_GEMM_FUSION", "0")
    exe = _compile(SEED_PRE, cache=False)
    kinds = [t.kind for t in _thunks(exe)]
    assert kinds == ["kernel", "gemm", "kernel"], exe.thunk_sequence_text()


def test_gemm_fusion_in_the_optimized_module():
    result = optimize(hlo.parse_module(SEED_PRE))
    (fusion,) = [i for i in result.entry.instructions if i.opcode == "fusion"]
    assert fusion.attrs["kind"] == "kCustom" and fusion.name.startswith("gemm_fusion_")
    tiling = triton_gemm_tiling(fusion)
    assert tiling == GemmTiling(64, 64, 32, 1, 1, 4)
    opcodes = sorted(i.opcode for i in fusion.attrs["calls"].instructions)
    assert opcodes.count("dot") == 1 and "convert" in opcodes and "negate" in opcodes


def test_programs_dots_keep_their_values():
    """The stored programs with dots (their GEMM fusions) against jax."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from program_data import load_program
    for name in ("half_precision", "int8_matmul", "transformer_block"):
        data = load_program(name)
        text = (data.folder / "before_optimizations.hlo").read_text()
        exe = _compile(text)
        assert _gemm_kernels(exe), name
        results = exe.run(*data.inputs)
        assert not data.mismatches(results, hlo.parse_module(text)), name


# -- cuda ------------------------------------------------------------------------------


def _ptxas(ptx: str, tmp_path) -> str:
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    result = subprocess.run([shutil.which("ptxas"), "-arch=sm_90", "-v", str(path), "-o",
                             str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
def test_seed_kernel_ptx_is_accepted_by_ptxas(tmp_path):
    exe = xla_gpu.compile(SEED_PRE, target="cuda")
    (kernel,) = _thunks(exe)
    ptx = exe.kernels[kernel.kernel].ptx
    # The s8 -> bf16 convert in the tile loads, the tile product on tensor
    # cores (tests/python/backends/test_gemm_tensor_cores.py checks more).
    assert "bar.sync" in ptx and "ld.shared" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    info = _ptxas(ptx, tmp_path)
    shared = int(re.search(r"(\d+) bytes smem", info).group(1))
    assert 0 < shared <= 48 * 1024
    assert "0 bytes spill stores" in info


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize("name", ["s8_s32", "f32_batch", "f64"])
def test_gemm_kernels_compile_for_cuda(name, tmp_path):
    lhs, rhs, out, dims_text, (bm, bn, bk, warps) = CASES[name]
    text = _gemm_module(lhs, rhs, out, dims_text, _config(bm, bn, bk, 1, warps))
    exe = xla_gpu.compile(text, target="cuda")
    (kernel,) = _thunks(exe)
    info = _ptxas(exe.kernels[kernel.kernel].ptx, tmp_path)
    shared = int(re.search(r"(\d+) bytes smem", info).group(1))
    assert 0 < shared <= 48 * 1024
