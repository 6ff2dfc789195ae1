"""HLO -> emitted MLIR -> PTX for every fusion XLA forms for ordinary JAX
programs (the stored texts in hlo_inputs/, before and after XLA's passes),
plus the emitter choice and the emitted structure of small cases."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from xla_gpu import emitters, hlo, ir, pipeline
from xla_gpu.backends.cuda import codegen
from xla_gpu.analysis.fusion import select_fusion

ROOT = Path(__file__).resolve().parents[3]
INPUTS = sorted((Path(__file__).parents[1] / "hlo_inputs").glob("*.hlo"))
PTXAS = codegen.find_ptxas()


def _fusion_names(module: hlo.HloModule) -> list[str | None]:
    entry = module.entry
    names = [i.name for i in entry.instructions if i.opcode == "fusion"]
    return names or [None]


def _cases():
    for path in INPUTS:
        module = hlo.parse_file(path)
        for name in _fusion_names(module):
            yield pytest.param(path, name, id=f"{path.stem}-{name or 'entry'}")


def _compile(kernel: emitters.EmittedKernel, tmp_path: Path, name: str) -> str:
    kernel.module.operation.verify()
    pipeline.run(kernel.module)
    ptx = codegen.to_ptx(kernel.module, "sm_90")
    if PTXAS:
        out = tmp_path / f"{name}.cubin"
        src = tmp_path / f"{name}.ptx"
        src.write_text(ptx)
        run = subprocess.run([PTXAS, "-arch=sm_90", str(src), "-o", str(out)],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
    return ptx


@pytest.mark.parametrize("path,fusion", list(_cases()))
def test_jax_fusions_compile_to_ptx(path, fusion, tmp_path):
    module = hlo.parse_file(path)
    kernel = emitters.emit(module, ir.Context(), fusion=fusion)
    ptx = _compile(kernel, tmp_path, kernel.name)
    assert f".entry {kernel.name}(" in ptx


def test_gelu_matches_the_walkthrough_listing():
    kernel = emitters.emit((ROOT / "examples" / "gelu.hlo").read_text())
    text = str(kernel.module)
    assert kernel.emitter == "loop" and kernel.launch.threads == 128
    assert kernel.launch.blocks == 24576
    assert ("(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, "
            "(bl_x mod 8) * 512 + th_x * 4 + vector_index), domain: th_x in [0, 127], "
            "bl_x in [0, 24575], vector_index in [0, 3]") in text
    assert text.count("xla_gpu.pure_call @gelu(") == 1
    assert text.count("func.func private") == 1


def _emit(text: str, fusion=None) -> emitters.EmittedKernel:
    return emitters.emit(text, ir.Context(), fusion=fusion)


WALKTHROUGH_PARTITION = """
HloModule m
fused {
  p = f32[32,32] parameter(0)
  log = f32[32,32] log(p)
  t = f32[32,32] transpose(log), dimensions={1,0}
  ROOT add = f32[32,32] add(log, t)
}
"""


def test_partitioner_splits_differently_indexed_users():
    # The reference walkthrough: log is read at two different indices by add and transpose,
    # so it gets a function of its own; the transpose has one user and
    # stays with the add.
    text = str(_emit(WALKTHROUGH_PARTITION).module)
    assert text.count("func.func private") == 2
    assert text.count("xla_gpu.pure_call @fused_log(") == 2


SAME_INDEXING = """
HloModule m
fused {
  p = f32[128] parameter(0)
  e = f32[128] exponential(p)
  n = f32[128] negate(e)
  ROOT a = f32[128] add(e, n)
}
"""


def test_partitioner_shares_identically_indexed_users():
    text = str(_emit(SAME_INDEXING).module)
    assert text.count("func.func private") == 1
    assert text.count("math.exp") == 1


@pytest.mark.parametrize("text,kind", [
    ("HloModule m\nf {\n p = f32[8,64] parameter(0)\n ROOT c = f32[16,64] "
     "concatenate(p, p), dimensions={0}\n}\n", "concatenate"),
    ("HloModule m\nf {\n p = f32[64,64] parameter(0)\n u = f32[8,8] parameter(1)\n"
     " i = s32[] parameter(2)\n ROOT d = f32[64,64] dynamic-update-slice(p, u, i, i)\n}\n",
     "in_place_dynamic_update_slice"),
    ("HloModule m\nf {\n p = f32[64,64] parameter(0)\n e = f32[64,64] exponential(p)\n"
     " a = f32[32,64] slice(e), slice={[0:32], [0:64]}\n b = f32[32,64] slice(e), "
     "slice={[32:64], [0:64]}\n ROOT t = (f32[32,64], f32[32,64]) tuple(a, b)\n}\n",
     "input_slices"),
    ("HloModule m\nf {\n p = f32[64,128] parameter(0)\n ROOT t = f32[128,64] "
     "transpose(p), dimensions={1,0}\n}\n", "transpose"),
    ("HloModule m\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
     " ROOT s = f32[] add(a, b)\n}\nf {\n p = f32[64,128] parameter(0)\n"
     " z = f32[] constant(0)\n ROOT r = f32[64] reduce(p, z), dimensions={1}, to_apply=add\n}\n",
     "reduction"),
])
def test_emitter_choice(text, kind):
    assert select_fusion(hlo.parse_module(text)).kind == kind
    kernel = _emit(text)
    kernel.module.operation.verify()
    assert kernel.emitter == kind and not kernel.notes


def test_in_place_dus_shares_the_operand_buffer():
    text = ("HloModule m\nf {\n p = f32[64,64] parameter(0)\n u = f32[8,8] parameter(1)\n"
            " i = s32[] parameter(2)\n ROOT d = f32[64,64] dynamic-update-slice(p, u, i, i)\n}\n")
    kernel = _emit(text)
    assert kernel.aliases == {0: 0}
    assert kernel.launch.threads == 64 and kernel.launch.blocks == 1
    pipeline.run(kernel.module)
    # The operand and the output share one buffer: the kernel takes it once.
    text = str(kernel.module)
    assert "llvm.func @f(%arg0: !llvm.ptr" in text and "%arg2: !llvm.ptr" in text
    assert "%arg3: !llvm.ptr" not in text


def test_unsupported_op_is_a_clear_error():
    text = ("HloModule m\nlt {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
            " ROOT c = pred[] compare(a, b), direction=LT\n}\n"
            "f {\n p = f32[8] parameter(0)\n s = f32[8] sort(p), dimensions={0}, to_apply=lt\n"
            " ROOT n = f32[8] negate(s)\n}\n")
    # A sort at a fusion's root is the sort emitter's; inside a loop fusion
    # the elemental emitter names it.
    with pytest.raises(hlo.HloError, match=r"'s' \(sort\).*not supported"):
        _emit(text)


def test_several_fusions_need_a_name():
    text = """HloModule m
f1 {
  p = f32[8] parameter(0)
  ROOT e = f32[8] exponential(p)
}
f2 {
  p = f32[8] parameter(0)
  ROOT e = f32[8] negate(p)
}
ENTRY main {
  p = f32[8] parameter(0)
  a = f32[8] fusion(p), kind=kLoop, calls=f1
  ROOT b = f32[8] fusion(a), kind=kLoop, calls=f2
}
"""
    with pytest.raises(hlo.HloError, match="choose one with fusion=NAME"):
        _emit(text)
    assert "math.exp" in str(_emit(text, "a").module)
    assert "arith.negf" in str(_emit(text, "f2").module)


def _concatenate(sizes: list[int]) -> str:
    """A loop fusion concatenating f32[size, 3] parameters along dim 0,
    plus 1 (so that the concatenate is not the fusion's only op)."""
    params = "\n".join(f"  p{i} = f32[{n},3] parameter({i})" for i, n in enumerate(sizes))
    names = ", ".join(f"p{i}" for i in range(len(sizes)))
    total = sum(sizes)
    return (f"HloModule m\nfused {{\n{params}\n"
            f"  c = f32[{total},3] concatenate({names}), dimensions={{0}}\n"
            f"  one = f32[] constant(1)\n  b = f32[{total},3] broadcast(one), dimensions={{}}\n"
            f"  ROOT a = f32[{total},3] add(c, b)\n}}\n")


def _if_depth(op) -> int:
    """The deepest nesting of scf.if under `op`."""
    deepest = 0
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                depth = _if_depth(inner.operation) + (inner.operation.name == "scf.if")
                deepest = max(deepest, depth)
    return deepest


@pytest.mark.parametrize("count,depth", [(5, 4), (8, 7), (9, 4), (40, 6), (300, 9)])
def test_concatenate_finds_its_operand_by_chain_or_binary_search(count, depth):
    # Up to 8 operands: XLA's chain of comparisons (one nesting level per
    # operand); more: a binary search, log2 deep. MLIR's canonicalizer
    # re-queues every ancestor of an op it touches, which made a 300-deep
    # chain cost seconds.
    sizes = [1 + (7 * i) % 5 for i in range(count)]   # unequal slices
    kernel = _emit(_concatenate(sizes))
    assert _if_depth(kernel.module.operation) == depth


@pytest.mark.parametrize("count", [9, 37])
def test_a_concatenate_by_binary_search_matches_the_interpreter(count):
    import numpy as np
    import xla_gpu
    from xla_gpu.hlo.numerics import random_inputs
    sizes = [1 + (3 * i) % 7 for i in range(count)]
    text = _concatenate(sizes)
    module = hlo.parse_module(text)
    spec = select_fusion(module, None)
    inputs = random_inputs(spec.computation, seed=2)
    exe = xla_gpu.compile(text, target="cpu", cache=False)
    (got,) = exe.run(*inputs)
    (want,) = hlo.evaluate(spec.computation, *inputs)
    np.testing.assert_array_equal(got, want)
    # The cpu target keeps a thread loop (the loop whose iterations are
    # parallel) of more than 16 branches scalar (vectorized, every lane
    # would run all of them under masks); the block loop is never vectorized.
    thread_loops = [line for line in exe.host_mlir.splitlines()
                    if line.startswith("#loop_annotation") and "parallelAccesses" in line]
    assert thread_loops
    assert any("vectorize = " in line for line in thread_loops) == (count > 17)


def test_reduce_window_of_a_scalar_has_no_window_attribute():
    """A rank-0 reduce-window's window has no dimensions, so its HLO text
    has no window=: one element, reduced once with the init value."""
    import numpy as np
    import xla_gpu
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[] parameter(0)
  z = f32[] parameter(1)
  ROOT r = f32[] reduce-window(x, z), to_apply=add
}"""
    x, z = np.float32(1.5), np.float32(0.25)
    (got,) = xla_gpu.compile(text, target="cpu", cache=False).run(x, z)
    (want,) = hlo.evaluate(hlo.parse_module(text), x, z)
    assert float(got) == float(want) == 1.75


@pytest.mark.parametrize("t", ["c64", "c128"])
def test_complex_iota_is_real_with_a_zero_imaginary_part(t):
    """jax makes c64 iotas (transposes of complex dots): the index is
    converted to the complex type like any other real value."""
    import numpy as np
    import xla_gpu
    text = f"""HloModule m
ENTRY e {{
  i = {t}[2,3] iota(), iota_dimension=1
  p = {t}[2,3] parameter(0)
  s = {t}[2,3] add(i, p)
  ROOT r = ({t}[2,3], {t}[2,3]) tuple(i, s)
}}"""
    p = (np.arange(6).reshape(2, 3) * 1j).astype(hlo.numpy_dtype(t))
    got = xla_gpu.compile(text, target="cpu", cache=False).run(p)
    want = hlo.evaluate(hlo.parse_module(text), p)
    np.testing.assert_array_equal(got[0], np.array([[0, 1, 2], [0, 1, 2]], hlo.numpy_dtype(t)))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
