"""How the cpu target makes a kernel's host code: the grid's body compiled
once in the shared object, the linker run directly with the driver's own
command line (the same bytes as `cc -shared ... -lm`, but for libm's
calls, bound through an empty stand-in for libm), and a program's timings
split by kernel stage."""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess

import numpy as np
import pytest
from mlir import ir as mlir_ir

import xla_gpu
from xla_gpu.backends import cpu

TANH = """HloModule m
fused {
  p = f32[3,4] parameter(0)
  t = f32[3,4] tanh(p)
  c = f32[] constant(2)
  b = f32[3,4] broadcast(c), dimensions={}
  ROOT m = f32[3,4] multiply(t, b)
}
ENTRY e {
  p = f32[3,4] parameter(0)
  ROOT f = f32[3,4] fusion(p), kind=kLoop, calls=fused
}
"""


def _symbol_sizes(elf: bytes) -> dict[str, int]:
    """Name -> st_size of the symbols of an ELF64 file's symbol table."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sizes = {}
    for i in range(shnum):
        base = shoff + i * shentsize
        kind, = struct.unpack_from("<I", elf, base + 4)
        if kind not in (2, 11):                       # SHT_SYMTAB, SHT_DYNSYM
            continue
        offset, size, link = struct.unpack_from("<QQI", elf, base + 24)
        strings, = struct.unpack_from("<Q", elf, shoff + link * shentsize + 24)
        for j in range(1, size // 24):
            name, _, _, _, _, st_size = struct.unpack_from("<IBBHQQ", elf, offset + 24 * j)
            text = elf[strings + name:elf.index(b"\0", strings + name)].decode()
            sizes[text] = max(sizes.get(text, 0), st_size)
    return sizes


def test_the_grid_body_is_compiled_once(tmp_path):
    exe = xla_gpu.compile(TANH, target="cpu", fusion="fused", cache=False)
    if exe.host_library is None:
        pytest.skip("no linker: the kernel runs in the JIT")
    sizes = _symbol_sizes(exe.host_library)
    name = exe.spec.name
    # The whole-grid entry calls the block loop instead of holding an
    # inlined copy of it (a small body used to be compiled once per
    # entry and wrapper: eight times); the JIT's C-interface wrappers are
    # not in the shared object.
    assert sizes[f"{name}_host"] * 4 < sizes[f"{name}_host_blocks"], sizes
    assert not [s for s in sizes if s.startswith("_mlir_ciface_")], sorted(sizes)
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    (out,) = exe.run(x)
    np.testing.assert_allclose(out, np.tanh(x) * 2, rtol=2e-6, atol=1e-7)


def _function_bytes(obj: bytes) -> dict[str, bytes]:
    """Name -> machine code of the functions an ELF64 relocatable object
    defines."""
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)

    def section(i):
        return struct.unpack_from("<IQQQQI", obj, shoff + i * shentsize + 4)

    code = {}
    for i in range(shnum):
        kind, _, _, offset, size, link = section(i)
        if kind != 2:                                 # SHT_SYMTAB
            continue
        strings = section(link)[3]
        for j in range(1, size // 24):
            name, info, _, shndx, value, st_size = struct.unpack_from(
                "<IBBHQQ", obj, offset + 24 * j)
            if info & 0xF != 2 or shndx == 0:         # STT_FUNC, defined
                continue
            start = section(shndx)[3] + value
            text = obj[strings + name:obj.index(b"\0", strings + name)].decode()
            code[text] = obj[start:start + st_size]
    return code


SCATTER = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  x = f32[8,64] parameter(0)
  i = s32[100,1] parameter(1)
  u = f32[100,64] parameter(2)
  ROOT s = f32[8,64] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""

ROW_SUM = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  x = f32[16,300] parameter(0)
  e = f32[16,300] sine(x)
  z = f32[] constant(0)
  ROOT r = f32[16] reduce(e, z), dimensions={1}, to_apply=add
}
"""


@pytest.mark.parametrize("text", [TANH, SCATTER, ROW_SUM], ids=["tanh", "scatter", "row_sum"])
def test_llvm_makes_the_code_the_execution_engine_makes(text):
    # The shared object's code comes from LLVM's C API (no JIT session):
    # every function is the machine code MLIR's ExecutionEngine makes of
    # the same module, which is what the cpu target ran before.
    from xla_gpu import ir, pipeline
    if cpu._llvm_api() is None:
        pytest.skip("LLVM's C API is not in the bindings' library")
    exe = xla_gpu.compile(text, target="cpu", fusion="fused", cache=False)
    module = mlir_ir.Module.parse(exe.emitted_mlir, ir.Context())
    pipeline.run(module, target="cpu", threads=exe.spec.threads, blocks=exe.spec.blocks)
    copy = module.operation.clone()
    cpu._one_body(copy, exe.spec.name)
    ours = _function_bytes(cpu._llvm_object(copy, cpu.HostPipeline()))
    engine = _function_bytes(cpu._engine_object(copy, f"{exe.spec.name}_host", 3))
    assert {f"{exe.spec.name}_host", f"{exe.spec.name}_host_blocks"} <= set(ours)
    for name, code in ours.items():
        assert code == engine[name], name
    # The engine adds its packed wrappers, nothing else.
    assert all(name.startswith("_mlir_") for name in set(engine) - set(ours))


def _object(ctx, body: str, declarations: str = "") -> bytes:
    module = mlir_ir.Module.parse(f"""module {{
  {declarations}
  llvm.func @k_host(%p: !llvm.ptr) {{
    {body}
    llvm.return
  }}
}}""", ctx)
    return cpu._object_code(module.operation, "k_host", cpu.HostPipeline())


@pytest.mark.parametrize("kind", ["nothing outside", "libm", "libc"])
def test_the_linker_makes_what_the_driver_makes(ctx, tmp_path, kind):
    driver = cpu._linker()
    if driver is None or cpu._link_lines(driver) is None:
        pytest.skip("no C compiler driver whose link line can be read")
    declarations, body = {
        "nothing outside": ("", "%c = llvm.mlir.constant(1.5 : f32) : f32\n"
                                "    llvm.store %c, %p : f32, !llvm.ptr"),
        "libm": ("llvm.func @sinf(f32) -> f32",
                 "%x = llvm.load %p : !llvm.ptr -> f32\n"
                 "    %s = llvm.call @sinf(%x) : (f32) -> f32\n"
                 "    llvm.store %s, %p : f32, !llvm.ptr"),
        "libc": ("llvm.func @getpid() -> i32",
                 "%x = llvm.call @getpid() : () -> i32\n"
                 "    llvm.store %x, %p : i32, !llvm.ptr"),
    }[kind]
    obj = _object(ctx, body, declarations)
    outside = cpu._undefined_symbols(obj)
    assert outside == {"nothing outside": set(), "libm": {b"sinf"},
                       "libc": {b"getpid"}}[kind]
    (tmp_path / "k.o").write_bytes(obj)
    subprocess.run([driver, "-shared", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.o"),
                    "-lm"], check=True, capture_output=True)
    ours = cpu._link([obj], driver)
    stand_in = cpu._libm_stand_in(cpu._link_lines(driver)["bare"][0])
    if kind != "libm" or stand_in is None:
        assert ours == (tmp_path / "k.so").read_bytes()
        return
    # libm's calls: linked against the empty stand-in named libm.so.6, the
    # library depends on libm without the linker reading libm, and the
    # loader binds sinf in libm.
    assert ours != (tmp_path / "k.so").read_bytes() and b"libm.so.6" in ours
    (tmp_path / "ours.so").write_bytes(ours)
    library = ctypes.CDLL(str(tmp_path / "ours.so"))
    value = ctypes.c_float(0.5)
    library.k_host(ctypes.byref(value))
    assert value.value == np.sin(np.float32(0.5))


def test_what_decides_the_libraries_a_kernel_links_with():
    # Unreadable: every library the driver names; a symbol libm itself
    # defines: libm alone; libc's (found through libm's dependencies too)
    # or an unknown one: every library.
    assert cpu._undefined_symbols(b"not an object") is None
    if cpu._libm() is None:
        pytest.skip("no libm.so.6 to ask")
    assert cpu._in_libm(b"sinf")
    assert not cpu._in_libm(b"getpid") and not cpu._in_libm(b"no_such_symbol")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no cc")
def test_program_timings_split_by_kernel_stage():
    text = """HloModule split_{n}
ENTRY e {{
  x = f32[7] parameter(0)
  s = f32[7] sine(x)
  ROOT n = f32[7] negate(s)
}}
"""
    built = xla_gpu.compile(text.format(n="a"), target="cpu")
    for stage in ("emit", "pipeline", "llvm"):
        assert built.timings[stage] > 0, built.timings
    # The same kernel in another module comes from the cache: no stage
    # times of its own.
    cached = xla_gpu.compile(text.format(n="b"), target="cpu")
    assert "1 from the cache" in " ".join(cached.notes)
    assert not {"emit", "pipeline", "llvm"} & set(cached.timings), cached.timings


# (cheap elementwise work: LLVM's unrollers change this loop's code on every
# host; a tanh's long vector body stays as it is on AVX-512 hosts)
LOOP = """HloModule m
fused {
  p = f32[64,96] parameter(0)
  t = f32[64,96] add(p, p)
  ROOT m = f32[64,96] multiply(t, p)
}
ENTRY e {
  p = f32[64,96] parameter(0)
  ROOT f = f32[64,96] fusion(p), kind=kLoop, calls=fused
}
"""

DOT = """HloModule m
fused {
  a = f32[16,32] parameter(0)
  b = f32[32,24] parameter(1)
  d = f32[16,24] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[16,24] tanh(d)
}
ENTRY e {
  a = f32[16,32] parameter(0)
  b = f32[32,24] parameter(1)
  ROOT f = f32[16,24] fusion(a, b), kind=kCustom, calls=fused, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"16","block_n":"16","block_k":"16","split_k":"1","num_stages":"1","num_warps":"4"}}}
}
"""


@pytest.mark.parametrize("text, emitter, unrolled", [
    (ROW_SUM, "reduction", False), (LOOP, "loop", True), (DOT, "gemm", True)],
    ids=["reduction", "loop", "gemm"])
def test_llvm_unrolls_the_host_loops_by_emitter(text, emitter, unrolled, monkeypatch):
    # These kernels are small enough to be cold: the hot pipeline is under test.
    monkeypatch.setattr(cpu, "HOST_COLD_WORK", -1)
    # LLVM's unrollers on the grid emulation's small constant loops cost
    # more compile time than they bring at run time in reductions and
    # transposes, not in loop kernels or the tiled GEMM emitter's inner
    # products: a kernel's shared object holds the code of LLVM's
    # pipeline with or without them, by its emitter.
    from xla_gpu import ir, pipeline
    if cpu._llvm_api() is None:
        pytest.skip("LLVM's C API is not in the bindings' library")
    exe = xla_gpu.compile(text, target="cpu", fusion="fused", cache=False)
    if exe.host_library is None:
        pytest.skip("no linker: the kernel runs in the JIT")
    assert exe.spec.emitter == emitter
    module = mlir_ir.Module.parse(exe.emitted_mlir, ir.Context())
    pipeline.run(module, target="cpu", threads=exe.spec.threads, blocks=exe.spec.blocks)
    copy = module.operation.clone()
    cpu._one_body(copy, exe.spec.name)
    body = f"{exe.spec.name}_host_blocks"
    with_unrolling = len(_function_bytes(cpu._llvm_object(copy, cpu.HostPipeline()))[body])
    without = len(_function_bytes(cpu._llvm_object(copy, cpu.HostPipeline(unroll_loops=False)))[body])
    assert with_unrolling != without       # the unrollers change this kernel's code
    assert _symbol_sizes(exe.host_library)[body] == (with_unrolling if unrolled else without)


def test_a_gemm_kernel_too_large_to_unroll_is_not_unrolled(monkeypatch):
    monkeypatch.setattr(cpu, "HOST_COLD_WORK", -1)   # DOT is small enough to be cold
    # A GEMM kernel whose host module is over the size limit (a long fused
    # prologue or epilogue, which the unrollers would copy with the tile
    # loops) gets the code of the pipeline without the unrollers.
    from xla_gpu import ir, pipeline
    if cpu._llvm_api() is None:
        pytest.skip("LLVM's C API is not in the bindings' library")
    exe = xla_gpu.compile(DOT, target="cpu", fusion="fused", cache=False)
    if exe.host_library is None:
        pytest.skip("no linker: the kernel runs in the JIT")
    module = mlir_ir.Module.parse(exe.emitted_mlir, ir.Context())
    pipeline.run(module, target="cpu", threads=exe.spec.threads, blocks=exe.spec.blocks)
    lines = str(module).count("\n")
    assert cpu.unrolls_loops("gemm", lines)
    monkeypatch.setattr(cpu, "HOST_LOOP_UNROLLING_MAX_LINES", lines - 1)
    assert not cpu.unrolls_loops("gemm", lines)
    smaller = xla_gpu.compile(DOT, target="cpu", fusion="fused", cache=False)
    copy = module.operation.clone()
    cpu._one_body(copy, exe.spec.name)
    body = f"{exe.spec.name}_host_blocks"
    without = len(_function_bytes(cpu._llvm_object(copy, cpu.HostPipeline(unroll_loops=False)))[body])
    assert _symbol_sizes(smaller.host_library)[body] == without
    assert _symbol_sizes(exe.host_library)[body] != without
