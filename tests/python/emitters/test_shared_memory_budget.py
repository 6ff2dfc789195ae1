"""Shared-memory budgets: every fusion the passes form compiles for cuda
within the 48 KiB of static shared memory a block has, the emitters choose
smaller tiles when their preferred ones would not fit (and stay correct:
checked against the interpreter on the cpu target, which runs the same
configurations), and the fusion passes do not form multi-output
reductions or transposes whose preferred tiles exceed the budget.

The reproducer is a real training step (`hlo_inputs/models`, written with
flax nnx + optax): its layer-norm gradients, six column reductions, were
merged into one kernel whose tiles took 49920 bytes, which ptxas refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu.analysis import shared_memory
from xla_gpu.analysis.device import H200
from xla_gpu.analysis.fusion import choose_emitter, fusion_roots, select_fusion
from xla_gpu.analysis.reduction import reduction_shared_bytes
from xla_gpu.analysis.shared_memory import (ColumnTiles, RowTiles, column_tiles, row_tiles,
                                            small_column_tiles)
from xla_gpu.emitters import emitter_for
from xla_gpu.emitters.packed_transpose import PackedTransposeEmitter
from xla_gpu.emitters.reduction import (ColumnReductionEmitter, RowReductionEmitter,
                                        SmallColumnReductionEmitter)
from xla_gpu.emitters.transpose import TransposeEmitter
from xla_gpu.hlo.numerics import random_inputs
from xla_gpu.hlo.passes import optimize
from xla_gpu.hlo.passes.fusion_utils import body_acceptable

MODELS = Path(__file__).resolve().parents[1] / "hlo_inputs" / "models"
BUDGET = 48 * 1024


@pytest.fixture
def budget(monkeypatch):
    """Sets the static shared-memory budget the emitters and passes read."""
    def set_budget(nbytes: int) -> None:
        monkeypatch.setattr(shared_memory, "STATIC_SHARED_BUDGET", nbytes)
    return set_budget


def _codegen():
    return pytest.importorskip("xla_gpu.backends.cuda.codegen")


def _static_shared(ptx: str) -> dict[str, int]:
    """Static shared memory per kernel, as ptxas reports it."""
    resources = _codegen().kernel_resources(ptx, "sm_90")
    if resources is None:
        pytest.skip("no ptxas or nvJitLink to compile PTX")
    return {name: r.shared_bytes for name, r in resources.items()}


def _reductions(n: int, shape: list[int], dims: list[int], t: str = "f32") -> str:
    """A module whose ENTRY holds one fusion of `n` reductions of `shape`
    over `dims` (each of its own parameter)."""
    out = [d for i, d in enumerate(shape) if i not in dims]

    def s(dims_):
        return f"{t}[{','.join(map(str, dims_))}]"

    outs = ", ".join([s(out)] * n)
    body = "\n".join(f"  p{i} = {s(shape)} parameter({i})" for i in range(n))
    reduces = "\n".join(f"  r{i} = {s(out)} reduce(p{i}, z), dimensions="
                        f"{{{','.join(map(str, dims))}}}, to_apply=add" for i in range(n))
    names = ", ".join(f"r{i}" for i in range(n))
    params = ", ".join(f"p{i}" for i in range(n))
    return f"""HloModule m
add {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] add(a, b)
}}
fused {{
{body}
  z = {t}[] constant(0)
{reduces}
  ROOT t = ({outs}) tuple({names})
}}
ENTRY e {{
{body}
  ROOT f = ({outs}) fusion({params}), kind=kInput, calls=fused
}}"""


def _transposes(n: int, t: str = "bf16", a: int = 256, b: int = 256) -> str:
    body = "\n".join(f"  p{i} = {t}[{a},{b}] parameter({i})" for i in range(n))
    transposes = "\n".join(f"  t{i} = {t}[{b},{a}] transpose(p{i}), dimensions={{1,0}}"
                           for i in range(n))
    outs = ", ".join([f"{t}[{b},{a}]"] * n)
    params = ", ".join(f"p{i}" for i in range(n))
    names = ", ".join(f"t{i}" for i in range(n))
    return f"""HloModule m
fused {{
{body}
{transposes}
  ROOT r = ({outs}) tuple({names})
}}
ENTRY e {{
{body}
  ROOT f = ({outs}) fusion({params}), kind=kInput, calls=fused
}}"""


def _emitter(text: str, device=None):
    return emitter_for(select_fusion(hlo.parse_module(text), None, device=device))


def _matches_interpreter(text: str, device=None, rtol: float = 2e-5) -> None:
    module = hlo.parse_module(text)
    inputs = random_inputs(select_fusion(module, None).computation, seed=3)
    got = xla_gpu.compile(text, target="cpu", cache=False, device=device).run(*inputs)
    want = hlo.evaluate(module, *inputs)
    for g, w in zip(got, want):
        scale = max(float(np.max(np.abs(w))), 1.0)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale)


# -------------------------------------------------- the reproducer, whole


def test_gpt_step_compiles_for_cuda_with_every_kernel_within_the_budget():
    exe = xla_gpu.compile(MODELS / "gpt_adamw_1layer.hlo", target="cuda", cache=False)
    ptx_modules = {id(k.ptx): k.ptx for k in exe.kernels.values() if k.ptx is not None}
    assert ptx_modules
    shared: dict[str, int] = {}
    for ptx in ptx_modules.values():
        shared.update(_static_shared(ptx))
    for image in exe.kernels.values():
        spec = image.spec
        static = shared.get(spec.name, 0)
        # Static tiles only: no kernel is launched with dynamic bytes.
        assert spec.shared_bytes == 0, spec.name
        assert static + spec.shared_bytes <= BUDGET, (spec.name, static)
        assert image.cubin is not None, spec.name
    # The layer-norm gradients still share kernels (more than one 32 x 65
    # f32 tile in one of them).
    assert max(shared.values()) > 32 * 65 * 4


def test_passes_split_the_layer_norm_gradients_within_the_budget():
    module = optimize(hlo.parse_file(MODELS / "gpt_adamw_1layer.hlo"))
    per_fusion = []
    for inst in module.entry.instructions:
        if inst.opcode != "fusion":
            continue
        body = inst.attrs["calls"]
        choice = choose_emitter(fusion_roots(body))
        if choice.kind != "reduction":
            continue
        parameters = [p.shape.element_type for p in body.parameters if not p.shape.is_tuple]
        need = reduction_shared_bytes(choice.roots, choice.heroes, parameters)
        assert need <= BUDGET, (inst.name, need)
        # The gradients of the layer norms' scales and offsets (and of the
        # biases): column reductions of [512, 256] (tokens x features).
        per_fusion.append(sum(i.opcode == "reduce" and tuple(i.attrs["dimensions"]) == (0,)
                              and tuple(i.operands[0].shape.dims) == (512, 256)
                              for i in body.instructions))
    # Still several per kernel (each reads its inputs once), five at most.
    assert sum(per_fusion) >= 6 and 1 < max(per_fusion) <= 5


def test_sibling_fusion_keeps_column_reductions_within_the_budget():
    # Eight column reductions of one input: XLA's sibling multi-output
    # fusion would read it once, but eight f32 tiles of 32 x 65 (vectors of
    # two) take 66560 bytes: the passes form kernels of at most five.
    n = 8
    lines = ["HloModule m", "add {", "  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
             "  ROOT s = f32[] add(a, b)", "}", "ENTRY e {", "  x = f32[64,512] parameter(0)",
             "  z = f32[] constant(0)"]
    for i in range(n):
        lines += [f"  c{i} = f32[] constant({i + 1})",
                  f"  b{i} = f32[64,512] broadcast(c{i}), dimensions={{}}",
                  f"  m{i} = f32[64,512] multiply(x, b{i})",
                  f"  e{i} = f32[64,512] exponential(m{i})",
                  f"  r{i} = f32[512] reduce(e{i}, z), dimensions={{0}}, to_apply=add"]
    lines += [f"  ROOT t = ({', '.join(['f32[512]'] * n)}) tuple("
              f"{', '.join(f'r{i}' for i in range(n))})", "}"]
    module = optimize(hlo.parse_module("\n".join(lines)))
    counts = [sum(i.opcode == "reduce" for i in f.attrs["calls"].instructions)
              for f in module.entry.instructions if f.opcode == "fusion"]
    assert sum(counts) == n
    assert 1 < len(counts) and max(counts) <= 5
    for f in module.entry.instructions:
        if f.opcode == "fusion":
            assert body_acceptable(f.attrs["calls"]).ok


# --------------------------------------- the fusion that overflowed, alone


def test_layer_norm_grads_fusion_takes_narrower_vectors_and_matches():
    # As the passes formed it before: six f32 column reductions of
    # [512, 256], 6 x 32 x 65 x 4 = 49920 bytes with XLA's vectors of two;
    # one lane per thread halves the tiles.
    text = (MODELS / "gpt_layer_norm_grads.hlo").read_text()
    emitter = _emitter(text, device=H200)
    assert isinstance(emitter, ColumnReductionEmitter)
    assert (emitter.lanes, emitter.warps, emitter.threads) == (1, 32, 1024)
    # The GPU's configuration on the host (device=H200), against numpy.
    _matches_interpreter(text, device=H200, rtol=1e-4)
    exe = xla_gpu.compile(text, target="cuda", cache=False)
    assert _static_shared(exe.ptx)[exe.spec.name] == 6 * 32 * 33 * 4


# ----------------------------------------------------- column reductions


def test_column_tiles_narrow_the_vectors_then_the_warps():
    f32x8 = [4] * 8
    assert column_tiles(f32x8, 2) == ColumnTiles(1, 32)            # 66560 -> 33792
    assert ColumnTiles(2, 32).bytes(f32x8) == 66560
    assert column_tiles([4] * 5, 2) == ColumnTiles(2, 32)          # 41600 fits
    assert column_tiles(f32x8, 2, budget=4096) == ColumnTiles(1, 4)
    assert ColumnTiles(1, 4).bytes(f32x8) == 8 * 32 * 4 * 4
    assert column_tiles(f32x8, 2, budget=8 * 32 * 4 - 1) is None


@pytest.mark.parametrize("n,shape,budget_bytes,config", [
    (8, [64, 512], BUDGET, (1, 32)),        # the reproducer's overflow, cpu-sized
    (8, [64, 512], 4096, (1, 4)),
    (3, [70, 100], 2000, (1, 4)),           # rows not a multiple of the warps
    (2, [33, 96], 600, (1, 2)),
])
def test_column_reduction_under_a_small_budget(budget, n, shape, budget_bytes, config):
    budget(budget_bytes)
    text = _reductions(n, shape, [0])
    emitter = _emitter(text)
    assert isinstance(emitter, ColumnReductionEmitter)
    assert (emitter.lanes, emitter.warps) == config
    assert emitter.threads == 32 * config[1]
    _matches_interpreter(text)


def test_column_reduction_tiles_are_what_ptxas_counts(budget):
    budget(4096)
    text = _reductions(8, [64, 512], [0])
    exe = xla_gpu.compile(text, target="cuda", cache=False)
    assert exe.launch_dims["threads"] == 128
    assert _static_shared(exe.ptx)[exe.spec.name] == ColumnTiles(1, 4).bytes([4] * 8)


# ----------------------------------------------- small column reductions


def test_small_column_tiles_take_fewer_lanes_then_fewer_threads():
    f32x8 = [4] * 8
    preferred = small_column_tiles(f32x8, 8, 2, budget=1 << 30)
    assert (preferred.lanes, preferred.threads, preferred.rows) == (2, 128, 32)
    smaller = small_column_tiles(f32x8, 8, 2, budget=2048)
    assert (smaller.lanes, smaller.threads, smaller.rows) == (1, 32, 4)
    assert smaller.bytes(f32x8, 8) <= 2048
    assert small_column_tiles(f32x8, 8, 2, budget=600) is None


def test_small_column_reduction_under_a_small_budget(budget):
    budget(2048)
    text = _reductions(8, [4, 256, 8], [1])
    emitter = _emitter(text)
    assert isinstance(emitter, SmallColumnReductionEmitter)
    assert (emitter.lanes, emitter.threads, emitter.shared_rows) == (1, 32, 4)
    _matches_interpreter(text, rtol=1e-4)


def test_a_reduction_that_cannot_fit_goes_to_the_loop_emitter(budget):
    # Even one lane, one warp and 32 threads need 4 x 9 x 4 bytes per value.
    budget(600)
    text = _reductions(8, [4, 256, 8], [1])
    fusion = select_fusion(hlo.parse_module(text), None)
    assert fusion.kind == "loop" and fusion.hero_kind == "reduction"
    assert "shared memory" in fusion.notes[0]
    _matches_interpreter(text, rtol=1e-4)


# --------------------------------------------------------- row reductions


def test_row_tiles_take_fewer_threads_per_row():
    f32x4 = [4] * 4
    assert row_tiles(f32x4, 16, 16384) == RowTiles(1024, 1)        # 32 warps: 512 bytes
    assert row_tiles(f32x4, 16, 16384, budget=256) == RowTiles(512, 1)
    assert row_tiles(f32x4, 16, 16384, budget=0) == RowTiles(32, 8)
    assert RowTiles(32, 8).bytes(f32x4) == 0


def test_row_reduction_under_a_small_budget(budget):
    budget(256)
    text = _reductions(4, [16, 16384], [1])
    emitter = _emitter(text, device=H200)
    assert isinstance(emitter, RowReductionEmitter)
    assert (emitter.threads_per_row, emitter.rows_per_block) == (512, 1)
    _matches_interpreter(text, device=H200, rtol=1e-4)


# ------------------------------------------------------------- transposes


def test_packed_transposes_over_the_budget_take_the_padded_tile():
    # Six bf16 packed tiles of 64 x 64 take exactly 48 KiB; a seventh would
    # not fit, so the padded 32 x 33 tile (one element per thread) is used.
    assert isinstance(_emitter(_transposes(6)), PackedTransposeEmitter)
    text = _transposes(7)
    emitter = _emitter(text)
    assert isinstance(emitter, TransposeEmitter)
    assert (emitter.tiling.shmem_dims, emitter.tiling.vector) == ([32, 33], 1)
    _matches_interpreter(text, rtol=0)
    exe = xla_gpu.compile(text, target="cuda", cache=False)
    assert _static_shared(exe.ptx)[exe.spec.name] == 7 * 32 * 33 * 2


def test_padded_transposes_narrow_their_vectors_under_a_small_budget(budget):
    # Two bf16 transposes that XLA does not pack (too short to): vectors of
    # two (a 64 x 65 tile each) unless the budget says otherwise.
    text = _transposes(2, a=16, b=256)
    assert _emitter(text).tiling.vector == 2
    budget(2 * 32 * 33 * 2)
    emitter = _emitter(text)
    assert (emitter.tiling.shmem_dims, emitter.tiling.vector) == ([32, 33], 1)
    _matches_interpreter(text, rtol=0)
    budget(100)
    fusion = select_fusion(hlo.parse_module(text), None)
    assert fusion.kind == "loop" and "shared memory" in fusion.notes[0]
    _matches_interpreter(text, rtol=0)


def test_passes_do_not_form_transposes_over_the_budget():
    body = hlo.parse_module(_transposes(7)).computation("fused")
    info = body_acceptable(body)
    assert not info.ok and "shared memory" in info.reason
    assert body_acceptable(hlo.parse_module(_transposes(6)).computation("fused")).ok


def test_passes_do_not_form_reductions_over_the_budget():
    body = hlo.parse_module(_reductions(6, [64, 512], [0])).computation("fused")
    info = body_acceptable(body)
    assert not info.ok and "49920 bytes of shared memory" in info.reason
    assert body_acceptable(hlo.parse_module(_reductions(5, [64, 512], [0]))
                           .computation("fused")).ok


# ------------------------------------------------------------------ sorts


def test_sort_tiles_halve_under_the_budget(budget):
    from xla_gpu.analysis.sort import choose_tile
    # 2048 elements of 8 bytes (f32 keys and s32 indices): 16 KiB.
    assert choose_tile(2048, 8) == 2048
    budget(4096)
    assert choose_tile(2048, 8) == 512
    budget(8)
    assert choose_tile(2048, 8) == 0        # no tile: every step global
