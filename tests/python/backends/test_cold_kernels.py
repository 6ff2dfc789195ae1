"""Cold kernels on the cpu target: a kernel that does little work
(`kernel_compiler.kernel_work`, from its fusion, not from its launch grid)
has its host code compiled by LLVM's cheaper pipeline
(`backends.cpu.host_pipeline`), a tiny one by a few passes and code
generation without optimization, a hot one by the O3 pipeline; all still
compute what the reference interpreter does."""

from __future__ import annotations

import numpy as np
import pytest
from mlir import ir as mlir_ir

import xla_gpu
from xla_gpu import hlo, kernel_compiler
from xla_gpu.analysis.fusion import select_fusion
from xla_gpu.backends import cpu
from xla_gpu.hlo.numerics import compare, random_inputs

# A threefry-like round over ten elements: one block of ten threads, the
# kind of kernel whose thread loop O3 unrolled and vectorized for a tenth
# of a second of LLVM time.
COLD = """HloModule m
fused {
  p = u32[10] parameter(0)
  q = u32[10] parameter(1)
  s = u32[10] add(p, q)
  c = u32[] constant(13)
  cb = u32[10] broadcast(c), dimensions={}
  l = u32[10] shift-left(q, cb)
  d = u32[] constant(19)
  db = u32[10] broadcast(d), dimensions={}
  r = u32[10] shift-right-logical(q, db)
  o = u32[10] or(l, r)
  ROOT x = u32[10] xor(s, o)
}
ENTRY e {
  p = u32[10] parameter(0)
  q = u32[10] parameter(1)
  ROOT f = u32[10] fusion(p, q), kind=kLoop, calls=fused
}
"""

# The same round over 1600 elements: cold, not tiny; over 256K: hot.
WARM = COLD.replace("u32[10]", "u32[40,40]")
HOT = COLD.replace("u32[10]", "u32[512,512]")

# Few threads, much work: an 8x8 output whose every element sums 4096
# products (one gemm tile), and two rows of 65536 elements reduced.
SMALL_GEMM_LONG_K = """HloModule m
fused {
  a = f32[8,4096] parameter(0)
  b = f32[4096,8] parameter(1)
  ROOT d = f32[8,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY e {
  a = f32[8,4096] parameter(0)
  b = f32[4096,8] parameter(1)
  ROOT f = f32[8,8] fusion(a, b), kind=kCustom, calls=fused, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"16","block_n":"16","block_k":"32","split_k":"1","num_stages":"1","num_warps":"4"}}}
}
"""

LONG_ROWS = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  x = f32[2,65536] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[2] reduce(x, z), dimensions={1}, to_apply=add
}
ENTRY e {
  x = f32[2,65536] parameter(0)
  ROOT f = f32[2] fusion(x), kind=kInput, calls=fused
}
"""


# A row sort of 60 elements: 21 compare-exchange steps over its elements.
ROW_SORT = """HloModule m
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
fused {
  p = f32[7,60] parameter(0)
  ROOT s = f32[7,60] sort(p), dimensions={1}, to_apply=lt
}
ENTRY e {
  p = f32[7,60] parameter(0)
  ROOT f = f32[7,60] fusion(p), kind=kLoop, calls=fused
}
"""


def _work(text: str) -> int:
    return kernel_compiler.kernel_work(select_fusion(hlo.parse_module(text)))


def _check_numerics(text: str, exe) -> None:
    module = hlo.parse_module(text)
    args = random_inputs(module.entry, 0)
    got = exe.run(*args)
    want = hlo.evaluate(module, *args)
    want = want if isinstance(want, (list, tuple)) else [want]
    types = [leaf.element_type for leaf in module.entry.root.shape.leaves()]
    for n, (g, w, t) in enumerate(zip(got, want, types)):
        mismatch = compare(np.asarray(g), np.asarray(w), t, n, scale_relative=True)
        assert mismatch is None, mismatch


def test_work_counts_what_a_kernel_computes_not_its_threads():
    assert _work(COLD) <= cpu.HOST_TINY_WORK < _work(WARM) <= cpu.HOST_COLD_WORK < _work(HOT)
    # Each instruction's elements: two parameters, five values and two
    # broadcasts of ten elements, two scalar constants.
    assert _work(COLD) == 9 * 10 + 2
    # A dot counts its multiply-adds: one tile of 8x8 outputs, 4096 deep.
    assert _work(SMALL_GEMM_LONG_K) >= 8 * 8 * 4096 > cpu.HOST_COLD_WORK
    # A reduction counts the elements it reads, however few it writes.
    assert _work(LONG_ROWS) >= 2 * 65536 > cpu.HOST_COLD_WORK
    # A sort counts its elements (parameter, result) and each once more per
    # step of its network (ceil(log2 60) = 6 stages, 21 steps), not every
    # element against every other: a small one is cold, a long one hot.
    assert _work(ROW_SORT) == 2 * 420 + 420 * 21 <= cpu.HOST_COLD_WORK
    long_sort = ROW_SORT.replace("f32[7,60]", "f32[1,4096]")
    assert _work(long_sort) == 2 * 4096 + 4096 * 78 > cpu.HOST_COLD_WORK


def test_the_pipeline_is_chosen_by_work_alone():
    cold = cpu.host_pipeline("loop", 100, cpu.HOST_COLD_WORK)
    assert cold.cold and cold == cpu.host_pipeline("gemm", 5000, cpu.HOST_TINY_WORK + 1)
    assert (cold.opt_level, cold.unroll_loops, cold.vectorize) == (
        cpu.HOST_COLD_OPT_LEVEL, cpu.HOST_COLD_UNROLL_LOOPS, cpu.HOST_COLD_VECTORIZE)
    assert cold.opt_level < 3 and not cold.vectorize
    assert cold.pass_pipeline == f"default<O{cpu.HOST_COLD_OPT_LEVEL}>"
    assert cold.codegen_level == 2
    # The least work: the tiny kernels' passes, code generation unoptimized.
    tiny = cpu.host_pipeline("loop", 100, cpu.HOST_TINY_WORK)
    assert tiny.cold and tiny == cpu.host_pipeline("gemm", 5000, 0)
    assert (tiny.pass_pipeline, tiny.codegen_level) == (cpu.HOST_TINY_PASSES,
                                                        cpu.HOST_TINY_CODEGEN_LEVEL)
    assert tiny != cold and "code generation at level 0" in tiny.describe()
    # Above the threshold, or not known: the emitter's O3 pipeline.
    for work in (cpu.HOST_COLD_WORK + 1, None):
        assert cpu.host_pipeline("loop", 100, work) == cpu.HostPipeline(3, True, True)
        assert cpu.host_pipeline("reduction", 100, work) == cpu.HostPipeline(3, False, True)


def _host_module(exe):
    from xla_gpu import ir, pipeline
    module = mlir_ir.Module.parse(exe.emitted_mlir, ir.Context())
    pipeline.run(module, target="cpu", threads=exe.spec.threads, blocks=exe.spec.blocks)
    return module


@pytest.mark.parametrize("text, cold", [(COLD, True), (WARM, True), (HOT, False),
                                        (LONG_ROWS, False)],
                         ids=["tiny", "cold", "hot", "long-rows"])
def test_cold_and_hot_kernels_get_their_pipelines(text, cold):
    exe = xla_gpu.compile(text, target="cpu", fusion="fused", cache=False)
    notes = [n for n in exe.notes if n.startswith("cold kernel")]
    assert bool(notes) == cold, exe.notes
    _check_numerics(text, exe)
    if exe.host_object is None or cpu._llvm_api() is None:
        pytest.skip("no linker or no LLVM C API: the code is the JIT's")
    module = _host_module(exe)
    name = exe.spec.name
    o3 = cpu.host_object(module, name, opt_level=3,
                         unroll_loops=cpu.unrolls_loops(exe.spec.emitter,
                                                        str(module).count("\n")))
    cheap = cpu.host_object(module, name, opt_level=cpu.HOST_COLD_OPT_LEVEL,
                            unroll_loops=cpu.HOST_COLD_UNROLL_LOOPS,
                            vectorize=cpu.HOST_COLD_VECTORIZE)
    tiny = cpu.host_object(module, name, pipeline=cpu.host_pipeline(work=0))
    # The three pipelines make different code of it.
    assert len({o3, cheap, tiny}) == 3
    work = _work(text)
    assert exe.host_object == (tiny if work <= cpu.HOST_TINY_WORK else
                               cheap if cold else o3)
