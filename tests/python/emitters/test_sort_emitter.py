"""The sort and top-k kernels (xla_gpu.emitters.sort, planned by
xla_gpu.analysis.sort, compiled by xla_gpu.op_kernels): the bitonic
network, the kernel plans, numerics of the kernels on the cpu target
against the reference interpreter, sorts and top-k inside whole programs,
and PTX for sm_90 (the same kernels through the cuda pipeline).

Tiles are kept small (short rows, or MAX_TILE lowered) so that each kernel
compiles in about a second on the cpu target; the multi-kernel paths are
the same code with the real 2048-element tile."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo
from xla_gpu import op_kernels
from xla_gpu.analysis import sort as sort_plan
from xla_gpu.program.prepare import rewrite_for_op_kernels
from xla_gpu.errors import HloError, UnsupportedError
from xla_gpu.hlo import numerics


def comparator(name: str, direction: str, *types: str, compare_type: str = "") -> str:
    """The text of a comparator computation over (lhs, rhs) pairs of
    scalars of `types`, ordering by the first pair only."""
    params = []
    for k, t in enumerate(types):
        params += [f"  p{2 * k} = {t}[] parameter({2 * k})",
                   f"  p{2 * k + 1} = {t}[] parameter({2 * k + 1})"]
    extra = f", type={compare_type}" if compare_type else ""
    return (f"\n{name} {{\n" + "\n".join(params) +
            f"\n  ROOT r = pred[] compare(p0, p1), direction={direction}{extra}\n}}\n")


LT = comparator("less", "LT", "f32")


def _module(text: str):
    return hlo.parse_module("HloModule m\n" + text)


def _sort_inst(module):
    return next(i for i in module.entry.instructions if i.opcode == "sort")


def _check_sort(text: str, inputs=None, **kwargs):
    """Compiles the ENTRY's sort, runs its kernels on the cpu target and
    compares with the interpreter (exactly: a sort moves elements)."""
    module = _module(text)
    inst = _sort_inst(module)
    compiled = op_kernels.compile_sort(inst, target="cpu", **kwargs)
    if inputs is None:
        inputs = numerics.random_inputs(module.entry)
    got = compiled.run(*inputs)
    expected = hlo.evaluate(module, *inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    return compiled


# -- the network and the plans ----------------------------------------------------


def _network_sort(x: np.ndarray) -> np.ndarray:
    """The masked flip-bitonic network as the kernels run it (numpy)."""
    x = x.copy()
    n = x.size
    for mask in sort_plan.bitonic_masks(n):
        for i in range(n):
            j = i ^ mask
            if i < j < n and x[j] < x[i]:
                x[i], x[j] = x[j], x[i]
    return x


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 31, 32, 33, 70])
def test_masked_bitonic_network_sorts_any_size(n):
    rng = np.random.default_rng(n)
    for _ in range(3):
        x = rng.permutation(n)
        np.testing.assert_array_equal(_network_sort(x), np.sort(x))


def test_plan_groups_small_masks_into_tiled_kernels():
    plan = sort_plan.plan_sort((3, 5000), 1, ["f32"])
    assert plan.tile == 2048
    kinds = [(k.tiled, k.masks[0] if not k.tiled else len(k.masks)) for k in plan.kernels]
    # 11 stages in a 2048 tile (66 steps), then per stage above: the global
    # masks and a tiled kernel for the 11 masks below the tile.
    assert kinds == [(True, 66), (False, 0xfff), (True, 11), (False, 0x1fff),
                     (False, 0x800), (True, 11)]
    assert plan.kernels[0].reads_operands and not any(k.reads_operands
                                                      for k in plan.kernels[1:])
    assert plan.kernels[0].launch().threads == 1024
    assert plan.kernels[0].launch().blocks == 3 * 3
    assert sum(len(k.masks) for k in plan.kernels) == len(sort_plan.bitonic_masks(5000))


def test_plan_shrinks_tile_to_fit_shared_memory():
    # Eight f64 operands: 64 bytes an element; 48 KiB hold 768 -> tile 512.
    plan = sort_plan.plan_sort((4096,), 0, ["f64"] * 8)
    assert plan.tile == 512
    assert all(k.tile * 64 <= sort_plan.MAX_SHARED_BYTES for k in plan.kernels)


def test_plan_nothing_to_sort():
    assert sort_plan.plan_sort((7, 1), 1, ["f32"]).kernels == []
    assert sort_plan.plan_sort((0, 9), 1, ["f32"]).kernels == []


def test_stable_sort_of_several_kernels_needs_index_operand():
    with pytest.raises(UnsupportedError, match="expand_stable_sorts"):
        sort_plan.plan_sort((5000,), 0, ["f32"], stable=True)


# -- kernels on the cpu target ---------------------------------------------------------


def test_sort_1d_not_power_of_two():
    compiled = _check_sort(LT + """
ENTRY e {
  x = f32[37] parameter(0)
  ROOT s = f32[37] sort(x), dimensions={0}, to_apply=less
}""")
    (kernel,) = compiled.kernels
    assert kernel.config.tiled and kernel.reads_operands and kernel.config.tile == 64
    assert kernel.executable.spec.emitter == "sort"


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_sort_nd_along_any_dimension(dim):
    dims = [6, 5, 7]
    shape = "f32[" + ",".join(map(str, dims)) + "]"
    _check_sort(LT + f"""
ENTRY e {{
  x = {shape} parameter(0)
  ROOT s = {shape} sort(x), dimensions={{{dim}}}, to_apply=less
}}""")


def test_keys_and_values_descending():
    _check_sort(comparator("greater", "GT", "s32", "f32") + """
ENTRY e {
  k = s32[4,45] parameter(0)
  v = f32[4,45] parameter(1)
  ROOT s = (s32[4,45], f32[4,45]) sort(k, v), dimensions={1}, to_apply=greater
}""")


def test_argsort_with_iota_operand():
    text = comparator("less", "LT", "f32", "s32") + """
ENTRY e {
  x = f32[3,20] parameter(0)
  i = s32[3,20] parameter(1)
  ROOT s = (f32[3,20], s32[3,20]) sort(x, i), dimensions={1}, to_apply=less
}"""
    x = numerics.random_inputs(_module(text).entry)[0]
    iota = np.broadcast_to(np.arange(20, dtype=np.int32), (3, 20)).copy()
    compiled = _check_sort(text, [x, iota])
    _, order = compiled.run(x, iota)
    np.testing.assert_array_equal(order, np.argsort(x, axis=1))


def test_total_order_comparator_with_nans():
    # jax's comparator for floats: NaN last, -0.0 before 0.0 (total order).
    text = comparator("total", "LT", "f32", compare_type="TOTALORDER") + """
ENTRY e {
  x = f32[29] parameter(0)
  ROOT s = f32[29] sort(x), dimensions={0}, to_apply=total
}"""
    x = np.random.default_rng(3).standard_normal(29).astype(np.float32)
    x[[1, 7]] = np.nan
    x[3], x[4], x[5], x[6] = 0.0, -0.0, np.inf, -np.inf
    x[9] = -np.nan
    compiled = _check_sort(text, [x])
    (y,) = compiled.run(x)
    assert np.isnan(y[-2:]).all() and np.signbit(y[0]) and np.isnan(y[0])
    assert y[1] == -np.inf
    zero = np.flatnonzero(y == 0)
    assert np.signbit(y[zero[0]]) and not np.signbit(y[zero[1]])


def test_lexicographic_two_key_comparator():
    text = """
lex {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = f32[] parameter(3)
  lt1 = pred[] compare(a, b), direction=LT
  eq1 = pred[] compare(a, b), direction=EQ
  lt2 = pred[] compare(c, d), direction=LT
  tie = pred[] and(eq1, lt2)
  ROOT r = pred[] or(lt1, tie)
}
ENTRY e {
  k = s32[50] parameter(0)
  v = f32[50] parameter(1)
  ROOT s = (s32[50], f32[50]) sort(k, v), dimensions={0}, to_apply=lex
}"""
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 4, 50).astype(np.int32)   # many equal first keys
    values = rng.standard_normal(50).astype(np.float32)
    compiled = _check_sort(text, [keys, values])
    k, v = compiled.run(keys, values)
    order = np.lexsort((values, keys))
    np.testing.assert_array_equal(k, keys[order])
    np.testing.assert_array_equal(v, values[order])


def test_stable_sort_keeps_order_of_equal_keys():
    text = comparator("less", "LT", "f32", "s32") + """
ENTRY e {
  x = f32[2,40] parameter(0)
  p = s32[2,40] parameter(1)
  ROOT s = (f32[2,40], s32[2,40]) sort(x, p), dimensions={1}, is_stable=true, to_apply=less
}"""
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 3, (2, 40)).astype(np.float32)
    payload = np.broadcast_to(np.arange(40, dtype=np.int32), (2, 40)).copy()
    compiled = _check_sort(text, [keys, payload])
    assert compiled.kernels[0].config.tie_break
    _, order = compiled.run(keys, payload)
    np.testing.assert_array_equal(order, np.argsort(keys, axis=1, kind="stable"))


def test_sort_of_several_kernels(monkeypatch):
    # A 32-element tile: 100 elements take tiled and global kernels, both
    # reading the results in place after the first.
    monkeypatch.setattr(sort_plan, "MAX_TILE", 32)
    compiled = _check_sort(comparator("greater", "GT", "f32", "s32") + """
ENTRY e {
  x = f32[100,2] parameter(0)
  i = s32[100,2] parameter(1)
  ROOT s = (f32[100,2], s32[100,2]) sort(x, i), dimensions={0}, to_apply=greater
}""")
    configs = [k.config for k in compiled.kernels]
    assert any(c.tiled for c in configs) and any(not c.tiled for c in configs)
    assert configs[0].reads_operands and not compiled.copy_first
    assert all(k.executable.spec.aliases == {0: 0, 1: 1} for k in compiled.kernels[1:])


def test_first_kernel_global_copies_operands(monkeypatch):
    # Tiles too big for shared memory at any size: every step is global.
    monkeypatch.setattr(sort_plan, "MAX_SHARED_BYTES", 1)
    compiled = _check_sort(LT + """
ENTRY e {
  x = f32[3,5] parameter(0)
  ROOT s = f32[3,5] sort(x), dimensions={1}, to_apply=less
}""")
    assert compiled.copy_first and all(not k.config.tiled for k in compiled.kernels)
    assert len(compiled.kernels) == len(sort_plan.bitonic_masks(5)) == 6


def test_pred_and_narrow_operands():
    _check_sort(comparator("cmp", "LT", "bf16", "pred", "s8") + """
ENTRY e {
  x = bf16[21] parameter(0)
  y = pred[21] parameter(1)
  z = s8[21] parameter(2)
  ROOT s = (bf16[21], pred[21], s8[21]) sort(x, y, z), dimensions={0}, to_apply=cmp
}""")


def test_bad_sorts_are_clear_errors():
    module = _module(LT + """
ENTRY e {
  x = f32[8] parameter(0)
  y = f32[8] parameter(1)
  ROOT s = (f32[8], f32[8]) sort(x, y), dimensions={0}, to_apply=less
}""")
    with pytest.raises(HloError, match="comparator 'less' takes 2 parameters"):
        op_kernels.compile_sort(_sort_inst(module), target="cpu")


# -- top-k -------------------------------------------------------------------------------


def _topk_module(k: int, n: int, largest: bool = True, rows: int = 6):
    return _module(f"""
ENTRY e {{
  x = f32[{rows},{n}] parameter(0)
  ROOT t = (f32[{rows},{k}], s32[{rows},{k}]) topk(x), k={k}, largest={str(largest).lower()}
}}""")


@pytest.mark.parametrize("k,n,largest", [(3, 10, True), (17, 20, True), (4, 33, False),
                                         (1, 1, True)])
def test_topk_one_kernel(k, n, largest):
    module = _topk_module(k, n, largest)
    compiled = op_kernels.compile_topk(module.entry.root, target="cpu")
    (kernel,) = compiled.kernels
    assert kernel.config.top_k == k and kernel.config.tie_break
    x = numerics.random_inputs(module.entry)[0]
    if n > 5:
        x[0, :3] = x[0, 5]      # ties: lower index first
        x[1, 2] = np.nan
    values, indices = compiled.run(x)
    ref_values, ref_indices = hlo.evaluate(module, x)
    np.testing.assert_array_equal(values, ref_values)
    np.testing.assert_array_equal(indices, ref_indices)


def test_xla_cpu_topk_custom_call():
    # XLA:CPU's TopK with its comparator (a total order through bitcasts).
    from program_data import load_program
    prog = load_program("sort_topk")
    module = hlo.parse_module(prog.after_path.read_text())
    call = next(i for i in module.entry.instructions if i.opcode == "custom-call")
    compiled = op_kernels.compile_topk(call, target="cpu")
    values, indices = compiled.run(prog.inputs[0])
    np.testing.assert_array_equal(values, prog.outputs[2])
    np.testing.assert_array_equal(indices, prog.outputs[3])


@pytest.mark.parametrize("k,n,largest,max_tile", [
    (5, 40, True, 16),        # 2 threads of 8 slots, 4 pairs each in the tile
    (1, 37, False, 8),        # 4 threads of 2 slots
    (16, 3000, True, None),   # 8 threads of 16 slots
    (3, 2500, False, None),   # 32 threads of 4 slots
    (8, 70000, True, None),   # 256 threads of 8 slots (a 32nd of the row)
    # Rows that fit a tile, long against k: 128 candidates.
    (8, 1000, True, None),
    (2, 1024, False, None),
])
def test_topk_of_long_rows_selects_per_thread(monkeypatch, k, n, largest, max_tile):
    """A row longer than the tile (or long against k), k <=
    TOPK_SELECT_MAX_K: one kernel, one block a row; each thread keeps the
    best of its strided part, the tile sorts the candidates. Ties (lower
    index first) and NaNs included."""
    if max_tile is not None:
        monkeypatch.setattr(sort_plan, "MAX_TILE", max_tile)
    module = _topk_module(k, n, largest, rows=3)
    compiled = op_kernels.compile_topk(module.entry.root, target="cpu")
    (kernel,) = compiled.kernels
    config = kernel.config
    assert config.select >= max(k, 2) and config.select * config.launch().threads == \
        config.tile < n
    assert config.launch().blocks == 3
    x = numerics.random_inputs(module.entry)[0]
    x[0, ::3] = x[0, 1]              # a third of a row tied
    x[1, n // 2] = np.nan
    x[2, :] = np.round(x[2, :])      # few distinct values
    values, indices = compiled.run(x)
    ref_values, ref_indices = hlo.evaluate(module, x)
    np.testing.assert_array_equal(values, ref_values)
    np.testing.assert_array_equal(indices, ref_indices)


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f64", "s32", "u8"])
def test_topk_of_long_rows_in_other_types(dtype):
    """The selecting kernel's slots hold the element type (16-bit floats go
    through the tile as their bits); u8's few values tie often."""
    module = _module(f"""
ENTRY e {{
  x = {dtype}[3,3000] parameter(0)
  ROOT t = ({dtype}[3,6], s32[3,6]) topk(x), k=6, largest=false
}}""")
    compiled = op_kernels.compile_topk(module.entry.root, target="cpu")
    (kernel,) = compiled.kernels
    assert kernel.config.select == 8
    x = numerics.random_inputs(module.entry)[0]
    for got, want in zip(compiled.run(x), hlo.evaluate(module, x)):
        np.testing.assert_array_equal(got, want)


def test_topk_too_long_is_decomposed(monkeypatch):
    monkeypatch.setattr(sort_plan, "MAX_TILE", 16)
    monkeypatch.setattr(sort_plan, "TOPK_SELECT_MAX_K", 4)    # k = 5: a sort
    module = _topk_module(5, 40, rows=3)
    assert not sort_plan.fits_one_kernel(module.entry.root)
    rewritten, notes = rewrite_for_op_kernels(module)
    assert rewritten is not module and len(notes) == 2
    assert module.entry.root.opcode == "topk"          # the input is left alone
    sorts = [i for i in rewritten.entry.instructions if i.opcode == "sort"]
    assert len(sorts) == 1 and len(sorts[0].operands) == 2   # the iota is reused
    x = numerics.random_inputs(module.entry)[0]
    for a, b in zip(hlo.evaluate(rewritten, x), hlo.evaluate(module, x)):
        np.testing.assert_array_equal(a, b)


def test_xla_cpu_topk_too_long_is_decomposed(monkeypatch):
    # XLA:CPU's TopK (a comparator over (value, index) pairs) as sort +
    # slice: the iota it adds is the stable tie-break (reused, not added).
    monkeypatch.setattr(sort_plan, "MAX_TILE", 4)
    monkeypatch.setattr(sort_plan, "TOPK_SELECT_MAX_K", 0)
    from program_data import load_program
    prog = load_program("sort_topk")
    module = hlo.parse_module(prog.after_path.read_text())
    rewritten, notes = rewrite_for_op_kernels(module)
    assert not any(i.opcode == "custom-call" for i in rewritten.entry.instructions)
    sorts = {i.name: i for i in rewritten.entry.instructions if i.opcode == "sort"}
    assert len(sorts["custom-call.sort.stable"].operands) == 2   # values and the iota
    assert len(sorts["sort.4.stable"].operands) == 2             # argsort's own iota
    assert len(sorts["sort.31.stable"].operands) == 3            # keys, payload, iota
    assert not any(s.attrs["is_stable"] for s in sorts.values())
    results = hlo.evaluate(rewritten, *prog.inputs)
    assert not prog.mismatches(results, module)


# -- whole programs ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["argsort_stable"])   # sort_topk: test_program.py
def test_program_sorts_match_jax(name):
    from program_data import load_program
    prog = load_program(name)
    exe = xla_gpu.compile(str(prog.after_path), target="cpu")
    kinds = {t.kind for t in _walk(exe.thunks)}
    assert "sort" in kinds
    results = exe.run(*prog.inputs)
    assert not prog.mismatches(results, hlo.parse_module(prog.after_path.read_text()))


def _walk(thunks):
    from xla_gpu.runtime.thunks import walk
    return list(walk(thunks))


def test_program_stable_sort_of_several_kernels(monkeypatch):
    monkeypatch.setattr(sort_plan, "MAX_TILE", 32)
    text = "HloModule m\n" + comparator("less", "LT", "f32") + """
ENTRY e {
  x = f32[2,40] parameter(0)
  ROOT s = f32[2,40] sort(x), dimensions={1}, is_stable=true, to_apply=less
}"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    assert any("iota tie-break" in n for n in exe.notes)
    sort = next(t for t in _walk(exe.thunks) if t.kind == "sort")
    assert sum(t.kind == "kernel" for t in sort.thunks) > 2
    x = np.random.default_rng(1).integers(0, 5, (2, 40)).astype(np.float32)
    (y,) = exe.run(x)
    np.testing.assert_array_equal(y, np.sort(x, axis=1))


def test_program_sort_with_layout():
    text = "HloModule m\n" + comparator("less", "LT", "s32") + """
ENTRY e {
  x = s32[5,9]{0,1} parameter(0)
  ROOT s = s32[5,9]{0,1} sort(x), dimensions={1}, to_apply=less
}"""
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    x = np.random.default_rng(2).permutation(45).astype(np.int32).reshape(5, 9)
    (y,) = exe.run(x)
    np.testing.assert_array_equal(y, np.sort(x, axis=1))


# -- the cuda target: PTX that ptxas accepts --------------------------------------------


def test_sort_kernels_compile_to_ptx(monkeypatch):
    monkeypatch.setattr(sort_plan, "MAX_TILE", 32)
    module = _module(LT + """
ENTRY e {
  x = f32[4,100] parameter(0)
  ROOT s = f32[4,100] sort(x), dimensions={1}, to_apply=less
}""")
    compiled = op_kernels.compile_sort(_sort_inst(module), target="cuda")
    tiled = next(k for k in compiled.kernels if k.config.tiled)
    ptx = tiled.executable.ptx
    assert ".shared" in ptx and "bar.sync" in ptx
    assert ".target sm_90" in ptx
    if shutil.which("ptxas"):
        assert all(k.executable.cubin for k in compiled.kernels)
