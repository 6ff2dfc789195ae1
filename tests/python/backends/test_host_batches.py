"""A cpu program's kernels have their host code compiled in batches: several
kernels translated into one LLVM module, optimized and compiled by one LLVM
run (`backends.cpu.HostBatcher`), instead of one run per kernel, whose fixed
cost is most of a small kernel's LLVM time. Checked here: the batched
program computes the same bits as one compiled kernel by kernel; a compile
thread with no build left compiles the batches open then; kernels named
alike stay apart; a batch's object, cached for each of its kernels,
is linked once by a program that loads several of them, and serves a
different program and a single fusion's compile; saved programs; an LLVM
failure names the kernel; without a linker the JIT still runs the
kernels."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import kernel_compiler
from xla_gpu.backends import cpu
from xla_gpu.errors import CompileError
from xla_gpu.program import kernels as program_kernels
from xla_gpu.runtime.program import load_program
from host_programs import FUSED_TANH_NEGATE, THREE

pytestmark = pytest.mark.skipif(cpu._linker() is None or not cpu.HostBatcher.available(),
                                reason="no linker or no LLVM module linker: no batches")


# THREE's tanh-negate kernel, and a maximum instead of its sum.
SHARES_ONE = """HloModule shares_one
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  t = f32[64] tanh(x)
  n = f32[64] negate(t)
  z = f32[] constant(-inf)
  r = f32[] reduce(y, z), dimensions={0}, to_apply=max
  ROOT o = (f32[64], f32[]) tuple(n, r)
}
"""

# Two fusions whose kernels get one name (k.1 and k_1 sanitize alike).
NAMED_ALIKE = """HloModule named_alike
fa {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
fb {
  p = f32[64] parameter(0)
  ROOT e = f32[64] exponential(p)
}
ENTRY e {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  k.1 = f32[64] fusion(x), kind=kLoop, calls=fa
  k_1 = f32[64] fusion(y), kind=kLoop, calls=fb
  ROOT o = (f32[64], f32[64]) tuple(k.1, k_1)
}
"""

X = np.linspace(-1, 1, 64, dtype=np.float32)
Y = (np.arange(64, dtype=np.float32) / 7).astype(np.float32)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_GPU_CACHE_DIR", str(tmp_path / "cache"))
    kernel_compiler.clear_memory_cache()
    yield tmp_path / "cache"
    kernel_compiler.clear_memory_cache()


@pytest.fixture
def llvm_runs(monkeypatch):
    """The LLVM runs (optimization and code generation of one module), as
    they happen: the number of kernels in each module."""
    runs: list[int] = []
    emit = cpu._emit_object

    def counted(api, module, *args, **kwargs):
        runs.append(module)
        return emit(api, module, *args, **kwargs)

    monkeypatch.setattr(cpu, "_emit_object", counted)
    return runs


@pytest.fixture
def one_compile_thread(monkeypatch):
    """Kernels built one after another on the calling thread, so that which
    kernels share a batch is fixed (on compile threads, one that runs out
    of builds compiles the batches open at that moment)."""
    monkeypatch.setattr(program_kernels, "PREFETCH_THREADS", 1)


def _check_three(results) -> None:
    n, rb = results
    np.testing.assert_allclose(n, -np.tanh(X), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rb, np.full(64, Y.sum(), np.float32), rtol=1e-6)


def _objects_in(command: list[str]) -> int:
    return sum(1 for word in command if word.endswith(".o") and "/kernel" in word)


def test_kernels_compile_in_one_llvm_run_with_the_same_bits(one_compile_thread, llvm_runs, monkeypatch):
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    assert len(exe.kernels) == 3
    # All three are cold kernels (one pipeline) and small: one batch.
    assert len(llvm_runs) == 1
    batched = exe.run(X, Y)
    _check_three(batched)
    assert exe.timings["llvm"] > 0
    llvm_runs.clear()
    monkeypatch.setattr(cpu, "HOST_BATCHES", False)
    kernel_compiler.clear_memory_cache()
    alone = xla_gpu.compile(THREE, target="cpu", cache=False)
    assert len(llvm_runs) == 3
    for got, want in zip(batched, alone.run(X, Y)):
        assert got.tobytes() == want.tobytes()


def test_a_full_batch_is_compiled_by_the_worker_that_filled_it(llvm_runs, monkeypatch):
    # One line per batch: every kernel fills one and is compiled at once.
    monkeypatch.setattr(cpu, "HOST_BATCH_LINES", 1)
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    assert len(llvm_runs) == 3
    _check_three(exe.run(X, Y))


def test_a_long_kernel_is_compiled_alone_at_once(llvm_runs, monkeypatch):
    # Every kernel over the limit: none waits in a batch, none is batched.
    monkeypatch.setattr(cpu, "HOST_BATCH_KERNEL_LINES", 1)
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    assert len(llvm_runs) == 3
    _check_three(exe.run(X, Y))


def test_a_thread_out_of_builds_compiles_the_open_batches(llvm_runs, monkeypatch):
    # Three small kernels on two compile threads: a thread that finds no
    # build left takes the batches open then (instead of leaving them to
    # the link); the batches the last builds open still compile at the link.
    monkeypatch.setattr(program_kernels, "PREFETCH_THREADS", 2)
    monkeypatch.setattr(program_kernels.os, "cpu_count", lambda: 2)
    taken = []
    compile_next = cpu.HostBatcher.compile_next

    def spy(self):
        compiled = compile_next(self)
        taken.append(compiled)
        return compiled

    monkeypatch.setattr(cpu.HostBatcher, "compile_next", spy)
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    # Each of the two threads asked until no batch was left open.
    assert taken.count(False) == 2, taken
    assert 1 <= len(llvm_runs) <= 3
    _check_three(exe.run(X, Y))


# Eight fusions, eight distinct kernels.
_UNARY = ["negate", "exponential", "tanh", "sine", "cosine", "floor", "ceil", "abs"]
EIGHT = "HloModule eight\n" + "".join(
    f"f{k} {{\n  p = f32[64] parameter(0)\n  ROOT r = f32[64] {op}(p)\n}}\n"
    for k, op in enumerate(_UNARY)) + "ENTRY e {\n  x = f32[64] parameter(0)\n" + "".join(
    f"  k{k} = f32[64] fusion(x), kind=kLoop, calls=f{k}\n" for k in range(8)) + \
    "  ROOT o = (" + ", ".join(["f32[64]"] * 8) + ") tuple(" + \
    ", ".join(f"k{k}" for k in range(8)) + ")\n}\n"


def test_a_batch_holds_its_share_of_a_small_programs_kernels(monkeypatch):
    # Eight small kernels on two compile threads: at most four in a batch,
    # so that both threads compile host code (one batch of eight would leave
    # one thread waiting for the other's LLVM run).
    monkeypatch.setattr(program_kernels, "PREFETCH_THREADS", 2)
    monkeypatch.setattr(program_kernels.os, "cpu_count", lambda: 2)
    sizes, batchers = [], []
    compile_batch, make = cpu.HostBatcher.compile, cpu.HostBatcher.__init__

    def spy(self, batch):
        sizes.append(len(batch.members))
        return compile_batch(self, batch)

    def made(self, *args, **kwargs):
        make(self, *args, **kwargs)
        batchers.append(self)

    monkeypatch.setattr(cpu.HostBatcher, "compile", spy)
    monkeypatch.setattr(cpu.HostBatcher, "__init__", made)
    exe = xla_gpu.compile(EIGHT, target="cpu", cache=False)
    assert [b.max_members for b in batchers] == [4]
    assert sum(sizes) == 8 and max(sizes) <= 4, sizes
    got = exe.run(X)
    for k, op in enumerate([np.negative, np.exp, np.tanh, np.sin, np.cos, np.floor,
                            np.ceil, np.abs]):
        np.testing.assert_allclose(got[k], op(X), rtol=2e-6, atol=1e-6)


def test_kernels_named_alike_go_to_different_batches(llvm_runs, linker_runs):
    exe = xla_gpu.compile(NAMED_ALIKE, target="cpu", cache=False)
    names = [image.spec.name for image in exe.kernels.values()]
    assert len(names) == 2 and names[0] == names[1]
    # Their entries would clash in one module and in one library.
    assert len(llvm_runs) == 2 and len(linker_runs) == 2
    a, b = exe.run(X, Y)
    np.testing.assert_array_equal(a, -X)
    np.testing.assert_allclose(b, np.exp(Y), rtol=1e-6)


def test_batch_objects_are_cached_per_kernel_and_linked_once(one_compile_thread, cache, llvm_runs, linker_runs):
    exe = xla_gpu.compile(THREE, target="cpu")
    first = exe.run(X, Y)
    _check_three(first)
    assert len(llvm_runs) == 1
    # On disk, each kernel has the batch's object.
    kernel_compiler.clear_memory_cache()
    disk = xla_gpu.compile_cache.DiskCache()
    objects = {kernel_compiler.cached_kernel(key, "cpu", disk).host_object
               for key in exe.kernels}
    assert len(objects) == 1 and None not in objects
    # A program of the same kernels (its outputs the other way round, so
    # that the program itself is not a cache hit), all three from the
    # cache: their object goes into the library once.
    kernel_compiler.clear_memory_cache()
    llvm_runs.clear()
    linker_runs.clear()
    again = xla_gpu.compile(THREE.replace("tuple(n, rb)", "tuple(rb, n)").replace(
        "(f32[64], f32[64]) tuple", "(f32[64], f32[64]) tuple"), target="cpu")
    assert "3 from the cache" in " ".join(again.notes), again.notes
    assert llvm_runs == [] and len(linker_runs) == 1
    assert _objects_in(linker_runs[0]) == 1
    for got, want in zip(again.run(X, Y), reversed(first)):
        assert got.tobytes() == want.tobytes()
    # Another program with one of those kernels and one of its own.
    llvm_runs.clear()
    other = xla_gpu.compile(SHARES_ONE, target="cpu")
    assert "1 from the cache" in " ".join(other.notes)
    assert len(llvm_runs) == 1
    n, r = other.run(X, Y)
    assert n.tobytes() == first[0].tobytes()
    assert r == Y.max()


def test_a_batched_kernel_compiles_alone_and_saves(one_compile_thread, cache, tmp_path):
    exe = xla_gpu.compile(THREE, target="cpu")
    want = exe.run(X, Y)
    # Each kernel is cached with the batch's object, which defines all three.
    entries = {f"{image.spec.name}_host".encode() for image in exe.kernels.values()}
    for key in exe.kernels:
        code = kernel_compiler.cached_kernel(key, "cpu").host_object
        assert entries <= cpu.HostObject.of("k", code).symbols
    # A single fusion's compile finds the kernel cached with its batch's
    # object and links a shared object of its own from it.
    single = xla_gpu.compile(FUSED_TANH_NEGATE, target="cpu", fusion="f")
    (got,) = single.run(X)
    assert got.tobytes() == want[0].tobytes()
    # A saved program loads and runs the same.
    exe.save(tmp_path / "saved")
    loaded = load_program(tmp_path / "saved", expected_digest=exe.artifact_digest)
    for got, expected in zip(loaded.run(X, Y), want):
        assert got.tobytes() == expected.tobytes()


def test_an_llvm_failure_names_its_kernel(monkeypatch):
    # The reduction's host code goes through a pipeline LLVM refuses
    # ("default<O9>"): its batch fails, and the error names its fusion.
    choose = cpu.host_pipeline

    def failing(emitter="", host_lines=0, work=None):
        if emitter == "reduction":
            return cpu.HostPipeline(9, False, False)
        return choose(emitter, host_lines, work)

    monkeypatch.setattr(cpu, "host_pipeline", failing)
    kernel_compiler.clear_memory_cache()
    with pytest.raises(CompileError) as info:
        xla_gpu.compile(THREE, target="cpu", cache=False)
    text = str(info.value)
    assert text.startswith("fusion '") and "reduce" in text.split("'")[1], text
    assert "invalid optimization level 'O9'" in text, text


def test_a_failing_batch_is_compiled_kernel_by_kernel(one_compile_thread, monkeypatch):
    # Every kernel in one batch through a refused pipeline: the batch fails,
    # then each kernel alone; the error names the batch's kernels.
    monkeypatch.setattr(cpu, "host_pipeline",
                        lambda emitter="", host_lines=0, work=None: cpu.HostPipeline(9))
    kernel_compiler.clear_memory_cache()
    with pytest.raises(CompileError) as info:
        xla_gpu.compile(THREE, target="cpu", cache=False)
    text = str(info.value)
    assert "alone, after the batch of kernels" in text, text
    batch = text.split("batch of kernels ")[1].split(" failed")[0].split(", ")
    assert len(batch) == 3 and text.split("'")[1] in batch, text


def test_without_a_linker_the_jit_runs_the_kernels(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert cpu._linker() is None
    kernel_compiler.clear_memory_cache()
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    _check_three(exe.run(X, Y))
