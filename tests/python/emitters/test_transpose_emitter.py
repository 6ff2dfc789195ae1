"""The tiled transpose emitter: which fusions it takes (and refuses), the
tiling it picks, PTX that ptxas accepts, and numerics against the reference
interpreter on the cpu target."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import xla_gpu
from xla_gpu import emitters, hlo, ir, pipeline
from xla_gpu.backends.cuda import codegen
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.analysis.transpose import transpose_refusal
from xla_gpu.emitters.transpose import TransposeEmitter
from xla_gpu.hlo.numerics import compare, random_inputs

PTXAS = codegen.find_ptxas()


def _fusion(body: str) -> str:
    return f"HloModule m\nfused {{\n{body}\n}}\n"


CASES = {
    # 021 with a batch dim; full tiles.
    "021": _fusion("""
  p = f32[4,64,96] parameter(0)
  ROOT t = f32[4,96,64] transpose(p), dimensions={0,2,1}"""),
    "210": _fusion("""
  p = f32[64,3,96] parameter(0)
  ROOT t = f32[96,3,64] transpose(p), dimensions={2,1,0}"""),
    "2d": _fusion("""
  p = f32[128,256] parameter(0)
  ROOT t = f32[256,128] transpose(p), dimensions={1,0}"""),
    # Partial tiles along both dims.
    "partial": _fusion("""
  p = f32[50,70] parameter(0)
  ROOT t = f32[70,50] transpose(p), dimensions={1,0}"""),
    # The reference walkthrough: exp prologue, abs epilogue, partial tiles on dims 0 and 2.
    "walkthrough": _fusion("""
  p = f32[20,160,170] parameter(0)
  e = f32[20,160,170] exponential(p)
  t = f32[170,160,20] transpose(e), dimensions={2,1,0}
  ROOT a = f32[170,160,20] abs(t)"""),
    "bf16_packed": _fusion("""
  p = bf16[128,192] parameter(0)
  ROOT t = bf16[192,128] transpose(p), dimensions={1,0}"""),
    # Packed with partial tiles at every edge (and the vector dims even).
    "bf16_packed_partial": _fusion("""
  p = bf16[100,66] parameter(0)
  ROOT t = bf16[66,100] transpose(p), dimensions={1,0}"""),
    # Odd dims: no packing (an f16 vector would straddle rows).
    "f16_odd": _fusion("""
  p = f16[33,47] parameter(0)
  ROOT t = f16[47,33] transpose(p), dimensions={1,0}"""),
    "s8_packed": _fusion("""
  p = s8[3,100,36] parameter(0)
  c = s8[3,100,36] negate(p)
  ROOT t = s8[3,36,100] transpose(c), dimensions={0,2,1}"""),
    "u8_packed": _fusion("""
  p = u8[2,300,260] parameter(0)
  ROOT t = u8[2,260,300] transpose(p), dimensions={0,2,1}"""),
    "pred": _fusion("""
  p = pred[20,36,17] parameter(0)
  n = pred[20,36,17] not(p)
  ROOT t = pred[17,36,20] transpose(n), dimensions={2,1,0}"""),
    "f64_prologue": _fusion("""
  p = f64[6,40,33] parameter(0)
  q = f64[6,40,33] parameter(1)
  m = f64[6,40,33] multiply(p, q)
  ROOT t = f64[33,6,40] transpose(m), dimensions={2,0,1}"""),
    "102": _fusion("""
  p = f32[40,70,2] parameter(0)
  ROOT t = f32[70,40,2] transpose(p), dimensions={1,0,2}"""),
    "102_bf16": _fusion("""
  p = bf16[3,64,48,4] parameter(0)
  n = bf16[3,64,48,4] negate(p)
  ROOT t = bf16[3,48,64,4] transpose(n), dimensions={0,2,1,3}"""),
    "102_s8_partial": _fusion("""
  p = s8[50,7,70,8] parameter(0)
  ROOT t = s8[70,7,50,8] transpose(p), dimensions={2,1,0,3}"""),
    "side_output": _fusion("""
  p = f32[64,96] parameter(0)
  e = f32[64,96] exponential(p)
  t = f32[96,64] transpose(e), dimensions={1,0}
  n = f32[96,64] negate(t)
  ROOT r = (f32[96,64], f32[64,96]) tuple(n, e)"""),
    # A side output of the input's element count in another shape, a
    # parameter converted, and one transpose written twice.
    "side_outputs_bitcast": _fusion("""
  p = f32[64,96] parameter(0)
  e = f32[64,96] exponential(p)
  t = f32[96,64] transpose(e), dimensions={1,0}
  f = f32[6144] reshape(e)
  c = f16[64,96] convert(p)
  ROOT r = (f32[96,64], f32[6144], f16[64,96], f32[96,64]) tuple(t, f, c, t)"""),
    "two_heroes": _fusion("""
  p = f32[64,96] parameter(0)
  q = f16[64,96] parameter(1)
  t1 = f32[96,64] transpose(p), dimensions={1,0}
  s = f16[64,96] sine(q)
  t2 = f16[96,64] transpose(s), dimensions={1,0}
  c = f32[96,64] convert(t2)
  ROOT r = (f32[96,64], f32[96,64]) tuple(t1, c)"""),
    "two_heroes_one_operand": _fusion("""
  p = f32[3,64,96] parameter(0)
  e = f32[3,64,96] exponential(p)
  t1 = f32[3,96,64] transpose(p), dimensions={0,2,1}
  t2 = f32[3,96,64] transpose(e), dimensions={0,2,1}
  s = f32[3,96,64] sqrt(t2)
  ROOT r = (f32[3,96,64], f32[3,96,64], f32[3,64,96]) tuple(t1, s, e)"""),
    "packed_two_heroes_side": _fusion("""
  p = bf16[100,66] parameter(0)
  q = f16[100,66] parameter(1)
  e = bf16[100,66] exponential(p)
  t1 = bf16[66,100] transpose(e), dimensions={1,0}
  t2 = f16[66,100] transpose(q), dimensions={1,0}
  a = f16[66,100] abs(t2)
  s = f16[100,66] negate(q)
  ROOT r = (bf16[66,100], f16[66,100], bf16[100,66], f16[100,66]) tuple(t1, a, e, s)"""),
    # Merged dims split in the real tensors (indices through warp and lane).
    "merged_input_minor": _fusion("""
  p = f32[40,6,24] parameter(0)
  ROOT t = f32[6,24,40] transpose(p), dimensions={1,2,0}"""),
    "merged_output_minor": _fusion("""
  p = bf16[6,20,34] parameter(0)
  ROOT t = bf16[34,6,20] transpose(p), dimensions={2,0,1}"""),
    "bitcast_epilogue": _fusion("""
  p = f32[1,64,2,48] parameter(0)
  t = f32[2,48,1,64] transpose(p), dimensions={2,3,0,1}
  b = f32[96,64] bitcast(t)
  ROOT a = f32[96,64] negate(b)"""),
    "reshape_epilogue": _fusion("""
  p = f32[64,96] parameter(0)
  t = f32[96,64] transpose(p), dimensions={1,0}
  b = f32[32,192] reshape(t)
  ROOT n = f32[32,192] negate(b)"""),
    "iota_prologue": _fusion("""
  i = s32[48,80] iota(), iota_dimension=1
  ROOT t = s32[80,48] transpose(i), dimensions={1,0}"""),
    # One minor dim of 10: tiled by XLA's second rule (8+ and 8192+ elements).
    "minor_10": _fusion("""
  p = f32[10,1024] parameter(0)
  ROOT t = f32[1024,10] transpose(p), dimensions={1,0}"""),
}

REFUSED = {
    "different_shapes": (_fusion("""
  p = f32[64,96] parameter(0)
  q = f32[32,96,40] parameter(1)
  t1 = f32[96,64] transpose(p), dimensions={1,0}
  t2 = f32[40,96,32] transpose(q), dimensions={2,1,0}
  ROOT r = (f32[96,64], f32[40,96,32]) tuple(t1, t2)"""), "different normalized shapes"),
    "shared_memory": (_fusion("\n".join(
        ["  p = f64[64,96] parameter(0)"] +
        [f"  e{k} = f64[64,96] add(p, p)\n  t{k} = f64[96,64] transpose(e{k}), dimensions={{1,0}}"
         for k in range(6)] +
        ["  ROOT r = (" + ", ".join(["f64[96,64]"] * 6) + ") tuple("
         + ", ".join(f"t{k}" for k in range(6)) + ")"])), "shared memory"),
    "side_output_shape": (_fusion("""
  p = f32[64,96] parameter(0)
  t = f32[96,64] transpose(p), dimensions={1,0}
  s = f32[64,48] slice(p), slice={[0:64], [0:48]}
  ROOT r = (f32[96,64], f32[64,48]) tuple(t, s)"""), "does not have the elements"),
}

NOT_TILED = {
    # The minor dims are too small for a tile: the loop emitter's kind.
    "small_minor": _fusion("""
  p = f32[3,40,5,36] parameter(0)
  ROOT t = f32[36,5,40,3] transpose(p), dimensions={3,2,1,0}"""),
    # 102 with a 16-byte minor dim: rows are already contiguous.
    "102_wide": _fusion("""
  p = f32[64,64,4] parameter(0)
  ROOT t = f32[64,64,4] transpose(p), dimensions={1,0,2}"""),
}


def _emit(text: str) -> emitters.EmittedKernel:
    kernel = emitters.emit(text, ir.Context())
    kernel.module.operation.verify()
    return kernel


# -- choice ----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_transpose_emitter_is_chosen(name):
    text = CASES[name]
    assert select_fusion(hlo.parse_module(text)).kind == "transpose"
    kernel = _emit(text)
    assert kernel.emitter == "transpose", kernel.notes
    assert kernel.launch.threads == 128 and kernel.launch.shared_bytes == 0
    module = str(kernel.module)
    assert "xla_gpu.allocate_shared" in module and "xla_gpu.sync_threads" in module
    assert module.count("xla_gpu.loop") == 2


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_fusions_fall_back_to_the_loop_emitter(name):
    text, reason = REFUSED[name]
    fusion = select_fusion(hlo.parse_module(text))
    # The analysis decides: the heroes call for the tiled transpose emitter,
    # which cannot take the fusion, so the loop emitter gets it.
    assert fusion.hero_kind == "transpose" and fusion.kind == "loop"
    assert re.search(reason, transpose_refusal(fusion.roots, fusion.heroes))
    kernel = _emit(text)
    assert kernel.emitter == "loop"
    assert any("loop emitter" in n and reason in n for n in kernel.notes), kernel.notes


@pytest.mark.parametrize("name", sorted(NOT_TILED))
def test_transposes_xla_does_not_tile(name):
    assert select_fusion(hlo.parse_module(NOT_TILED[name])).kind == "loop"
    assert _emit(NOT_TILED[name]).emitter == "loop"


# -- tiling ----------------------------------------------------------------

def _tiling(text):
    return TransposeEmitter(select_fusion(hlo.parse_module(text))).tiling


@pytest.mark.parametrize("name,vector,shmem,blocks", [
    ("walkthrough", 1, [32, 1, 33], 960),          # the reference walkthrough's tensor<32x1x33xf32>
    ("2d", 1, [32, 33], 32),
    ("021", 1, [1, 32, 33], 24),
    ("partial", 1, [32, 33], 6),
    ("bf16_packed", 2, [64, 65], 6),        # 2 x 16 bits per access
    ("f16_odd", 1, [32, 33], 4),            # 33 and 47 are odd: no packing
    ("u8_packed", 4, [1, 128, 129], 18),    # 4 x 8 bits per access
    ("pred", 1, [32, 1, 33], 36),           # 17 is not a multiple of 4
    ("two_heroes", 2, [64, 65], 2),         # the narrower (f16) decides
    ("102", 2, [32, 33, 2], 6),             # the kept minor dim is the vector
    ("102_s8_partial", 8, [32, 1, 33, 8], 42),
])
def test_tiling(name, vector, shmem, blocks):
    tiling = _tiling(CASES[name])
    assert tiling.vector == vector
    assert tiling.shmem_dims == shmem
    assert tiling.num_blocks == blocks
    # 128 threads cover the tile in `steps` steps of 4 rows.
    assert tiling.steps * 128 * tiling.vector == np.prod(tiling.block_sizes)


def test_walkthrough_listing_maps():
    module = str(_emit(CASES["walkthrough"]).module)
    assert ("(th_x, bl_x)[i, j] -> (th_x floordiv 32 + i * 4, bl_x floordiv 6, "
            "th_x mod 32 + (bl_x mod 6) * 32, th_x floordiv 32 + i * 4, 0, th_x mod 32), "
            "domain: th_x in [0, 127], bl_x in [0, 959], i in [0, 7], j in [0, 0], "
            "th_x floordiv 32 + i * 4 in [0, 19], th_x mod 32 + (bl_x mod 6) * 32 in [0, 169]"
            ) in module
    assert "xla_gpu.allocate_shared : tensor<32x1x33xf32>" in module
    # exp through the operand's function, abs with the tile's value injected.
    assert "xla_gpu.pure_call @fused_e(" in module
    assert "func.func private @fused_a(%arg0: tensor<20x160x170xf32>, %arg1: index, " \
           "%arg2: index, %arg3: index, %arg4: f32) -> f32" in module


def test_packed_bounds_check_leaves_out_the_vector_index():
    # 96 is a multiple of the vector (2): the check on the minor dim is per
    # vector, so the unrolled vector loop's checks merge into one.
    module = str(_emit(CASES["two_heroes"]).module)
    assert "(th_x mod 32) * 2 + bl_x * 64 in [0, 94]" in module


# -- PTX -------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_ptx_has_shared_memory_and_a_barrier(name, tmp_path):
    kernel = _emit(CASES[name])
    pipeline.run(kernel.module)
    ptx = codegen.to_ptx(kernel.module, "sm_90")
    assert f".entry {kernel.name}(" in ptx
    assert ".shared" in ptx and "bar.sync" in ptx
    if PTXAS:
        src = tmp_path / "k.ptx"
        src.write_text(ptx)
        run = subprocess.run([PTXAS, "-arch=sm_90", str(src), "-o", str(tmp_path / "k.cubin")],
                             capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stderr


def test_packed_global_accesses_are_32_bits_wide():
    kernel = _emit(CASES["bf16_packed"])
    pipeline.run(kernel.module)
    ptx = codegen.to_ptx(kernel.module, "sm_90")
    assert "ld.global.nc.b32" in ptx and "st.global.v2.b16" in ptx
    assert "ld.global.nc.b16" not in ptx and "st.global.b16" not in ptx


# -- numerics on the cpu target --------------------------------------------

def _cpu_compile_missing() -> str | None:
    """Why xla_gpu.compile(target="cpu") cannot run here, or None. Probed on
    a plain loop fusion so that a transpose bug is never taken for it."""
    text = _fusion("  p = f32[8] parameter(0)\n  ROOT n = f32[8] negate(p)")
    try:
        exe = xla_gpu.compile(text, target="cpu")
        (out,) = exe.run(np.arange(8, dtype=np.float32))
    except Exception as e:  # noqa: BLE001 - any failure means "not built yet"
        return f"the cpu backend of xla_gpu.compile is not available: {type(e).__name__}: {e}"
    if not np.array_equal(out, -np.arange(8, dtype=np.float32)):
        return "the cpu backend of xla_gpu.compile gives wrong results on a negate"
    return None


_CPU_MISSING = _cpu_compile_missing()


def _check_numerics(text: str, outputs) -> None:
    comp = select_fusion(hlo.parse_module(text)).computation
    inputs = random_inputs(comp, seed=1)
    expected = hlo.evaluate(comp, *inputs)
    shapes = [leaf for r in (comp.root.operands if comp.root.opcode == "tuple" else [comp.root])
              for leaf in r.shape.leaves()]
    actual = outputs(inputs)
    assert len(actual) == len(expected)
    for k, (a, e, s) in enumerate(zip(actual, expected, shapes)):
        mismatch = compare(np.asarray(a), e, s.element_type, k)
        assert mismatch is None, str(mismatch)


@pytest.mark.skipif(_CPU_MISSING is not None, reason=str(_CPU_MISSING))
@pytest.mark.parametrize("name", sorted(CASES))
def test_numerics_on_the_cpu_target(name):
    exe = xla_gpu.compile(CASES[name], target="cpu")
    assert exe.launch_dims["threads"] == 128
    _check_numerics(CASES[name], lambda inputs: exe.run(*inputs))


def _host_kernel_missing() -> str | None:
    try:
        from xla_gpu.backends import cpu
    except ImportError as e:
        return f"xla_gpu.backends.cpu is not available: {e}"
    if not hasattr(cpu, "compile_module"):
        return "xla_gpu.backends.cpu has no compile_module"
    return None


_HOST_MISSING = _host_kernel_missing()


@pytest.mark.skipif(_HOST_MISSING is not None, reason=str(_HOST_MISSING))
@pytest.mark.parametrize("name", sorted(CASES))
def test_numerics_of_the_emitted_kernel_on_the_host(name):
    # The emitted module itself, through the cpu pipeline (the grid
    # emulated, shared memory per block, the barrier splitting phases).
    from xla_gpu.backends import cpu
    kernel = _emit(CASES[name])
    host = cpu.compile_module(kernel.module, entry=kernel.name)
    assert (host.threads, host.blocks) == (kernel.launch.threads, kernel.launch.blocks)

    def run(inputs):
        outs = [np.zeros(s.dims, s.dtype) for s in kernel.fusion.output_shapes]
        host.run(list(inputs) + outs)
        return outs

    _check_numerics(CASES[name], run)
