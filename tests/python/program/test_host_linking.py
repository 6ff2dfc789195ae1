"""A cpu program's kernels are linked into shared libraries: every kernel is
compiled to an object, and the objects go through the linker together, one
run per library (a run costs a process start and a pass over the system's
libraries however little it links), instead of one shared object per
kernel. Checked here: which kernels share a library and what it exports,
how many times the linker ran, kernels whose names clash, the cache (a
kernel's object is kept, a single fusion still gets a shared object of its
own), and saving and loading (each library stored once; programs saved
with one library per kernel still load)."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu.backends import cpu
from xla_gpu.program import kernels as program_kernels
from xla_gpu.runtime.program import PROGRAM_FORMAT, load_program
from host_programs import FUSED_TANH_NEGATE, THREE

pytestmark = pytest.mark.skipif(cpu._linker() is None, reason="no linker: kernels run in the JIT")


TANH_NEGATE = """HloModule tanh_negate
ENTRY e {
  x = f32[64] parameter(0)
  t = f32[64] tanh(x)
  ROOT n = f32[64] negate(t)
}
"""


# Two loop fusions the fusion passes name alike (loop_negate_fusion and
# loop_negate_fusion.1); the second is TANH_NEGATE's kernel, which keeps
# the name it was cached under.
TWO_NEGATES = """HloModule two_negates
ENTRY e {
  x = f32[64] parameter(0)
  y = f32[64] parameter(1)
  ex = f32[64] exponential(x)
  a = f32[64] negate(ex)
  th = f32[64] tanh(y)
  b = f32[64] negate(th)
  ROOT o = (f32[64], f32[64]) tuple(a, b)
}
"""

X = np.linspace(-1, 1, 64, dtype=np.float32)
Y = (np.arange(64, dtype=np.float32) / 7).astype(np.float32)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_GPU_CACHE_DIR", str(tmp_path / "cache"))
    xla_gpu.compiler.clear_memory_cache()
    yield tmp_path / "cache"
    xla_gpu.compiler.clear_memory_cache()


def _exported(library: bytes) -> set[str]:
    """The names an ELF64 shared object exports (defined, in .dynsym)."""
    shoff, = struct.unpack_from("<Q", library, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", library, 0x3A)
    names = set()
    for i in range(shnum):
        base = shoff + i * shentsize
        kind, = struct.unpack_from("<I", library, base + 4)
        if kind != 11:                                  # SHT_DYNSYM
            continue
        offset, size, link = struct.unpack_from("<QQI", library, base + 24)
        strings, = struct.unpack_from("<Q", library, shoff + link * shentsize + 24)
        for j in range(1, size // 24):
            name, _, _, shndx = struct.unpack_from("<IBBH", library, offset + 24 * j)
            if shndx != 0:
                names.add(library[strings + name:library.index(b"\0", strings + name)].decode())
    return names


def _libraries(exe) -> dict[int, list[str]]:
    """Kernel names per distinct shared object."""
    groups: dict[int, list[str]] = {}
    for image in exe.kernels.values():
        groups.setdefault(id(image.host_library), []).append(image.spec.name)
    return groups


def _check_three(results) -> None:
    n, rb = results
    np.testing.assert_allclose(n, -np.tanh(X), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rb, np.full(64, Y.sum(), np.float32), rtol=1e-6)


def test_a_programs_kernels_share_one_library_linked_once(linker_runs):
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    assert len(exe.kernels) == 3
    groups = _libraries(exe)
    assert len(groups) == 1
    assert len(linker_runs) == 1
    library = next(iter(exe.kernels.values())).host_library
    exported = _exported(library)
    for image in exe.kernels.values():
        assert {f"{image.spec.name}_host", f"{image.spec.name}_host_blocks"} <= exported
    _check_three(exe.run(X, Y))
    # Linked one library per kernel, the results are the same bits.
    linker_runs.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(program_kernels, "LINK_KERNELS", False)
        separate = xla_gpu.compile(THREE, target="cpu", cache=False)
    assert len(_libraries(separate)) == 3 and len(linker_runs) == 3
    for got, want in zip(exe.run(X, Y), separate.run(X, Y)):
        np.testing.assert_array_equal(got, want)
    # A shared library counts once in the generated code size.
    assert exe.memory_analysis().generated_code_size_in_bytes == len(library)


def test_more_libraries_one_linker_run_each(linker_runs, monkeypatch):
    # Split by size (here: every object over the limit) into up to one
    # library per compile thread, linked side by side.
    monkeypatch.setattr(cpu, "HOST_LINK_GROUP_BYTES", 1)
    # One kernel per host batch: three objects to split.
    monkeypatch.setattr(cpu, "HOST_BATCH_LINES", 1)
    monkeypatch.setattr(program_kernels, "PREFETCH_THREADS", 2)
    monkeypatch.setattr(program_kernels.os, "cpu_count", lambda: 2)
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    groups = _libraries(exe)
    assert len(groups) == 2
    assert sorted(map(len, groups.values())) == [1, 2]
    assert len(linker_runs) == 2
    for image in exe.kernels.values():
        assert f"{image.spec.name}_host" in _exported(image.host_library)
    _check_three(exe.run(X, Y))


def test_kernels_named_alike_go_to_different_libraries(cache, linker_runs):
    # The cached kernel of TANH_NEGATE keeps its name in TWO_NEGATES, where
    # another kernel has that name too: in one library their entries
    # would clash.
    xla_gpu.compile(TANH_NEGATE, target="cpu")
    linker_runs.clear()
    exe = xla_gpu.compile(TWO_NEGATES, target="cpu")
    assert "1 from the cache" in " ".join(exe.notes)
    names = [image.spec.name for image in exe.kernels.values()]
    assert len(names) == 2 and names[0] == names[1]
    assert len(_libraries(exe)) == 2 and len(linker_runs) == 2
    a, b = exe.run(X, Y)
    np.testing.assert_allclose(a, -np.exp(X), rtol=1e-6)
    np.testing.assert_allclose(b, -np.tanh(Y), rtol=1e-6, atol=1e-7)


def test_link_groups_keep_clashing_symbols_apart():
    obj = lambda name: cpu.HostObject(name, b"x" * 10, frozenset({f"{name}_host".encode()}))
    a, b, a2, c = obj("a"), obj("b"), obj("a"), obj("c")
    assert cpu.link_groups([a, b, c], 8) == [[a, b, c]]      # small: one library
    groups = cpu.link_groups([a, b, a2, c], 8)
    assert len(groups) == 2
    assert all(len({o.name for o in g}) == len(g) for g in groups)


def test_a_cached_kernel_keeps_its_object_and_links_with_the_others(cache, linker_runs):
    xla_gpu.compile(TANH_NEGATE, target="cpu")
    # From the disk: the object is stored with the kernel.
    xla_gpu.compiler.clear_memory_cache()
    linker_runs.clear()
    exe = xla_gpu.compile(THREE, target="cpu")
    assert "1 from the cache" in " ".join(exe.notes)
    assert len(_libraries(exe)) == 1 and len(linker_runs) == 1
    _check_three(exe.run(X, Y))
    # A single fusion's compile of a kernel a program built (from the
    # cache: it keeps the program's kernel name) gets a shared object of
    # its own, holding that kernel only.
    linker_runs.clear()
    alone = xla_gpu.compile(FUSED_TANH_NEGATE, target="cpu", fusion="fused")
    assert alone.spec.name == "loop_negate_fusion"
    assert alone.host_object is not None and len(linker_runs) == 1
    assert {n for n in _exported(alone.host_library) if n.endswith("_host")} == \
        {"loop_negate_fusion_host"}
    np.testing.assert_allclose(alone.run(X)[0], -np.tanh(X), rtol=1e-6, atol=1e-7)


def test_saved_program_stores_its_library_once(tmp_path):
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    path = exe.save(tmp_path / "prog")
    manifest = json.loads((path / "program.json").read_text())
    assert manifest["format"] == PROGRAM_FORMAT == 3
    assert set(manifest["binaries"]) == set(exe.kernels)
    assert sorted(p.name for p in (path / "binaries").iterdir()) == ["0.so"]
    assert not list(path.glob("kernels/*/kernel.so"))
    loaded = load_program(path, expected_digest=exe.artifact_digest)
    assert len(_libraries(loaded)) == 1
    for got, want in zip(loaded.run(X, Y), exe.run(X, Y)):
        np.testing.assert_array_equal(got, want)


def _rewrite(path: Path, name: str, data: bytes) -> None:
    (path / name).write_bytes(data)
    digests = json.loads((path / "digests.json").read_text())
    digests[name] = hashlib.sha256(data).hexdigest()
    (path / "digests.json").write_text(json.dumps(digests))


def test_programs_saved_with_a_library_per_kernel_still_load(tmp_path, monkeypatch):
    monkeypatch.setattr(program_kernels, "LINK_KERNELS", False)
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    path = exe.save(tmp_path / "prog")
    assert len(list(path.glob("kernels/*/kernel.so"))) == 3
    manifest = json.loads((path / "program.json").read_text())
    assert "binaries" not in manifest
    manifest["format"] = 2
    _rewrite(path, "program.json", json.dumps(manifest).encode())
    loaded = load_program(path, trusted=True)
    _check_three(loaded.run(X, Y))


def test_a_damaged_shared_library_is_an_artifact_error(tmp_path):
    exe = xla_gpu.compile(THREE, target="cpu", cache=False)
    path = exe.save(tmp_path / "prog")
    data = (path / "binaries" / "0.so").read_bytes()
    _rewrite(path, "binaries/0.so", data[:100])
    loaded = load_program(path, trusted=True)
    with pytest.raises(xla_gpu.ArtifactError, match="the host kernel does not load"):
        loaded.run(X, Y)
    manifest = json.loads((path / "program.json").read_text())
    manifest["binaries"] = {kid: 7 for kid in manifest["binaries"]}
    _rewrite(path, "program.json", json.dumps(manifest).encode())
    with pytest.raises(xla_gpu.ArtifactError, match="names binaries/7, which holds no"):
        load_program(path, trusted=True)
