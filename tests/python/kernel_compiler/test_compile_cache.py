"""The compile cache's disk side under attack and under failure: a signed
text index, writers that never follow a planted link, no temporary file
left by a full disk, and a compiler identity that is cheap (no MLIR) yet
changes with the compiler. Every test tampers with a cache of its own."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import xla_gpu
from xla_gpu import compile_cache

NEGATE = """HloModule m
fused {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}
"""

EXP = NEGATE.replace("negate", "exponential")

# A whole program (ops outside fusions): compiled by the program compiler
# and kept whole in the cache.
PROGRAM = """HloModule prog
ENTRY e {
  x = f32[64] parameter(0)
  n = f32[64] negate(x)
  y = f32[64] exponential(n)
  ROOT t = (f32[64], f32[64]) tuple(n, y)
}
"""

X = np.linspace(-1, 1, 64, dtype=np.float32)


def _clear_memory() -> None:
    xla_gpu.compiler.clear_memory_cache()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("XLA_GPU_CACHE_DIR", str(root))
    _clear_memory()
    yield root
    _clear_memory()


def _index(root: Path) -> dict[str, bytes]:
    raw = root / "raw"
    return {p.name: p.read_bytes() for p in raw.iterdir()} if raw.is_dir() else {}


def _leftovers(root: Path) -> list[str]:
    """Temporary files or directories (names starting with a dot, the key
    aside) anywhere in the cache."""
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*") if p.name != ".key")


def _compile_and_index(root: Path, text: str) -> tuple[str, bytes]:
    """Compiles `text` (cpu) and returns its index file (name, content)."""
    before = _index(root)
    xla_gpu.compile(text, target="cpu")
    added = {k: v for k, v in _index(root).items() if k not in before}
    assert len(added) == 1
    return next(iter(added.items()))


# -- the text index is signed ----------------------------------------------------

def test_swapped_index_entries_are_not_trusted(cache):
    name_a, content_a = _compile_and_index(cache, NEGATE)
    name_b, content_b = _compile_and_index(cache, EXP)
    (cache / "raw" / name_a).write_bytes(content_b)
    (cache / "raw" / name_b).write_bytes(content_a)
    _clear_memory()
    (y,) = xla_gpu.compile(NEGATE, target="cpu").run(X)
    np.testing.assert_array_equal(y, -X)          # not exp(X)
    (y,) = xla_gpu.compile(EXP, target="cpu").run(X)
    np.testing.assert_allclose(y, np.exp(X), rtol=1e-6)
    # Both were rewritten with their own keys.
    assert _index(cache) == {name_a: content_a, name_b: content_b}


def test_index_entries_verify_only_as_written(cache):
    name, content = _compile_and_index(cache, NEGATE)
    disk = compile_cache.DiskCache(cache)
    key, mac = content.decode().split()
    assert disk.lookup_text(name) == key
    index = cache / "raw" / name
    flipped = mac[:-1] + ("0" if mac[-1] != "0" else "1")
    for tampered in (f"{key} {flipped}\n", f"{key}\n", key, "", f"{key} {mac} extra\n"):
        index.write_text(tampered)
        assert compile_cache.DiskCache(cache).lookup_text(name) is None, tampered
    # A valid index file copied under another text's name names nothing.
    index.write_bytes(content)
    other = hashlib.sha256(b"another text").hexdigest()[:40]
    (cache / "raw" / other).write_bytes(content)
    assert compile_cache.DiskCache(cache).lookup_text(other) is None
    # Under another cache's key (another user's, a copied cache) neither.
    (cache / ".key").write_bytes(b"k" * 32)
    assert compile_cache.DiskCache(cache).lookup_text(name) is None
    # Ignored, then rewritten under the cache's key by the next compile.
    _clear_memory()
    (y,) = xla_gpu.compile(NEGATE, target="cpu").run(X)
    np.testing.assert_array_equal(y, -X)
    assert compile_cache.DiskCache(cache).lookup_text(name) is not None


# -- writers never follow a link ----------------------------------------------------

def test_a_planted_raw_link_is_replaced_not_followed(cache, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    cache.mkdir(mode=0o700)
    (cache / "raw").symlink_to(outside)
    (y,) = xla_gpu.compile(NEGATE, target="cpu").run(X)
    np.testing.assert_array_equal(y, -X)
    assert list(outside.iterdir()) == []
    raw = cache / "raw"
    assert not raw.is_symlink() and raw.is_dir() and len(list(raw.iterdir())) == 1
    # A file where the directory should be: replaced too.
    _clear_memory()
    for p in raw.iterdir():
        p.unlink()
    raw.rmdir()
    raw.write_text("not a directory")
    xla_gpu.compile(EXP, target="cpu")
    assert raw.is_dir() and len(list(raw.iterdir())) == 1


def test_a_planted_index_file_link_is_neither_read_nor_written_through(cache, tmp_path):
    name, content = _compile_and_index(cache, NEGATE)
    target = tmp_path / "elsewhere"
    target.write_bytes(content)                  # valid content, behind a link
    index = cache / "raw" / name
    index.unlink()
    index.symlink_to(target)
    assert compile_cache.DiskCache(cache).lookup_text(name) is None
    _clear_memory()
    xla_gpu.compile(NEGATE, target="cpu")
    assert not index.is_symlink() and index.read_bytes() == content
    assert target.read_bytes() == content        # untouched


def test_a_planted_key_link_is_replaced_not_followed(cache, tmp_path):
    outside = tmp_path / "their_key"
    outside.write_bytes(b"x" * 32)
    os.chmod(outside, 0o600)
    cache.mkdir(mode=0o700)
    (cache / ".key").symlink_to(outside)
    (y,) = xla_gpu.compile(NEGATE, target="cpu").run(X)
    np.testing.assert_array_equal(y, -X)
    key = cache / ".key"
    assert not key.is_symlink() and stat.S_IMODE(key.lstat().st_mode) == 0o600
    assert key.read_bytes() != b"x" * 32 and len(key.read_bytes()) == 32
    assert outside.read_bytes() == b"x" * 32
    # The entry was signed with the new key: a fresh process' view hits.
    _clear_memory()
    assert xla_gpu.compile(NEGATE, target="cpu").timings.get("total") is None


def test_a_planted_entry_link_is_not_loaded_and_is_replaced(cache, tmp_path):
    xla_gpu.compile(NEGATE, target="cpu")
    (entry,) = [p for p in cache.iterdir() if compile_cache.KEY_PATTERN.fullmatch(p.name)]
    moved = tmp_path / "moved_entry"
    entry.rename(moved)
    entry.symlink_to(moved)
    key = entry.name
    from xla_gpu.kernel_compiler import Executable
    assert compile_cache.DiskCache(cache).get(key, "cpu", Executable.load) is None
    _clear_memory()
    xla_gpu.compile(NEGATE, target="cpu")
    assert not entry.is_symlink() and entry.is_dir()
    assert moved.is_dir() and (moved / "signature").is_file()   # not removed through it


# -- a full disk leaves nothing behind ---------------------------------------------

def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_key_creation_on_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch, failing):
    root = tmp_path / "cache"
    disk = compile_cache.DiskCache(root)
    assert disk.usable()
    with monkeypatch.context() as patch:
        patch.setattr(os, failing, _enospc)
        assert disk._signing_key() is None
    assert sorted(p.name for p in root.iterdir()) == []
    # Once there is room again, the key is made.
    assert len(compile_cache.DiskCache(root)._signing_key()) == 32
    assert sorted(p.name for p in root.iterdir()) == [".key"]


def test_key_creation_under_a_file_size_limit_leaves_no_temporary_file(tmp_path):
    """The kernel refuses the write itself (RLIMIT_FSIZE 0: EFBIG, as a
    full disk's ENOSPC), in a child process."""
    root = tmp_path / "cache"
    script = textwrap.dedent(f"""
        import resource, signal
        from xla_gpu import compile_cache
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        disk = compile_cache.DiskCache({str(root)!r})
        assert disk.usable()
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(
            resource.RLIMIT_FSIZE)[1]))
        for _ in range(3):
            disk._key = None
            assert disk._signing_key() is None
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == ["ok"], done.stderr
    assert sorted(p.name for p in root.iterdir()) == []


def test_entry_and_index_writes_on_a_full_disk_leave_nothing_behind(cache, monkeypatch):
    exe = xla_gpu.compile(NEGATE, target="cpu", cache=False)
    disk = compile_cache.DiskCache(cache)
    assert disk.usable() and disk._signing_key()     # the key exists; then the disk fills
    key = "a" * 40
    raw_key = "b" * 40
    # Neither the entry nor the index is written, and no temporary is left.
    for failing in ("write", "fsync"):
        with monkeypatch.context() as patch:
            patch.setattr(os, failing, _enospc)
            disk.put(key, exe)
            disk.remember_text(raw_key, key)
        assert _leftovers(cache) == []
        if failing == "write":
            assert not (cache / key).exists() and _index(cache) == {}
    # With room again both are written, and verify.
    disk.put(key, exe)
    disk.remember_text(raw_key, key)
    assert disk.lookup_text(raw_key) == key
    assert _leftovers(cache) == []


# -- the compiler's identity: cheap, and it follows the compiler ---------------------

@pytest.fixture
def fresh_identity():
    for part in (compile_cache._package_identity, compile_cache._cuda_identity):
        part.cache_clear()
    yield
    for part in (compile_cache._package_identity, compile_cache._cuda_identity):
        part.cache_clear()


def _package_identity() -> str:
    compile_cache._package_identity.cache_clear()
    return compile_cache._package_identity()


def test_identity_follows_sources_native_libraries_and_bindings(tmp_path, monkeypatch,
                                                                fresh_identity):
    tree = tmp_path / "pkg"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.py").write_text("x = 1\n")
    (tree / "sub" / "b.py").write_text("y = 2\n")
    native = tmp_path / "native"
    (native / "lib").mkdir(parents=True)
    (native / "lib" / "libXlaGpu.so").write_bytes(b"\x7fELF one")
    bindings = tmp_path / "site" / "mlir"
    (bindings / "_mlir_libs").mkdir(parents=True)
    (bindings / "_mlir_libs" / "libMLIRPythonCAPI.so").write_bytes(b"mlir 22.1")
    record = tmp_path / "site" / "xtc_mlir_python_bindings-22.1.dist-info" / "RECORD"
    record.parent.mkdir()
    record.write_text("mlir/__init__.py,,\n")
    monkeypatch.setattr(compile_cache, "_PACKAGE_DIR", tree)
    monkeypatch.setattr(xla_gpu._paths, "native_dir", lambda: native)
    real_location = compile_cache._package_location
    monkeypatch.setattr(compile_cache, "_package_location",
                        lambda name: str(bindings) if name == "mlir" else real_location(name))

    seen = [_package_identity()]
    assert _package_identity() == seen[0]                  # stable while nothing changes

    def changed() -> bool:
        seen.append(_package_identity())
        return seen[-1] not in seen[:-1]

    (tree / "sub" / "b.py").write_text("y = 22\n")          # an edited source
    assert changed()
    info = (tree / "a.py").stat()
    (tree / "a.py").write_text("x = 2\n")                   # same size, mtime set back
    while (tree / "a.py").stat().st_ctime_ns == info.st_ctime_ns:
        (tree / "a.py").write_text("x = 2\n")               # (a coarse clock: next tick)
    os.utime(tree / "a.py", ns=(info.st_atime_ns, info.st_mtime_ns))
    assert changed()                                        # ctime still moved
    (tree / "c.py").write_text("")                          # a new module
    assert changed()
    (tree / "c.py").rename(tree / "d.py")
    assert changed()
    (native / "lib" / "libXlaGpu.so").write_bytes(b"\x7fELF two, rebuilt")
    assert changed()
    (bindings / "_mlir_libs" / "libMLIRPythonCAPI.so").write_bytes(b"mlir 22.2 upgrade")
    assert changed()
    record.write_text("mlir/__init__.py,,\nmlir/ir.py,,\n")  # bindings reinstalled
    assert changed()
    (tree / "sub" / "__pycache__").mkdir()                  # bytecode does not count
    (tree / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"pyc")
    assert not changed()


def test_cuda_identity_follows_ptxas_libdevice_and_nvjitlink(tmp_path, monkeypatch,
                                                            fresh_identity):
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "nvvm" / "libdevice").mkdir(parents=True)
    (cuda / "lib64").mkdir()
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))

    def identity() -> str:
        compile_cache._cuda_identity.cache_clear()
        return compile_cache.compiler_identity("cuda")

    seen = [identity()]
    for path, data in ((cuda / "bin" / "ptxas", b"ptxas 13.0"),
                       (cuda / "bin" / "ptxas", b"ptxas 13.1 update"),
                       (cuda / "nvvm" / "libdevice" / "libdevice.10.bc", b"bc"),
                       (cuda / "lib64" / "libnvJitLink.so.13", b"nvjitlink 13.0")):
        path.write_bytes(data)
        seen.append(identity())
        assert seen[-1] not in seen[:-1], path
    monkeypatch.setenv("XLA_GPU_CUBIN_COMPILER", "ptxas")
    assert identity() not in seen
    assert compile_cache.compiler_identity("cpu") not in seen


def test_identity_and_a_cache_hit_import_no_mlir(tmp_path):
    """In a fresh process: the identity (cpu and cuda) asks no library and
    imports no MLIR; a disk-cache hit of a whole program and of one fusion
    loads neither MLIR, the program compiler, the HLO parser, the
    interpreter nor ml_dtypes (f32 kernels), and runs."""
    env = dict(os.environ, XLA_GPU_CACHE_DIR=str(tmp_path / "cache"))
    program, fusion = tmp_path / "program.hlo", tmp_path / "fusion.hlo"
    program.write_text(PROGRAM)
    fusion.write_text(NEGATE)
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import xla_gpu
        from xla_gpu import compile_cache
        x = np.linspace(-1, 1, 64, dtype=np.float32)
        print(compile_cache.compiler_identity("cpu"))
        compile_cache.compiler_identity("cuda")
        print(" ".join(sorted(m for m in ("mlir", "cuda.bindings.nvjitlink", "ml_dtypes",
                                          "xla_gpu.hlo.interpreter") if m in sys.modules))
              or "nothing")
        n, y = xla_gpu.compile(open(sys.argv[1]).read(), target="cpu").run(x)
        assert np.array_equal(n, -x) and np.allclose(y, np.exp(-x))
        (n,) = xla_gpu.compile(open(sys.argv[2]).read(), target="cpu").run(x)
        assert np.array_equal(n, -x)
        print(" ".join(sorted(m for m in ("mlir", "ml_dtypes", "xla_gpu.program_compiler",
                                          "xla_gpu.program", "xla_gpu.op_kernels",
                                          "xla_gpu.hlo.interpreter", "xla_gpu.hlo.passes",
                                          "xla_gpu.hlo.parser", "xla_gpu.emitters")
                         if m in sys.modules))
              or "nothing")
    """)
    run = [sys.executable, "-c", script, str(program), str(fusion)]
    first = subprocess.run(run, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[1] == "nothing"    # the identity imported nothing
    assert "mlir" in first.stdout.splitlines()[2]        # (a miss compiles)
    for _ in range(3):
        hit = subprocess.run(run, env=env, capture_output=True, text=True)
        assert hit.returncode == 0, hit.stderr
        # (Where the installed compiler is being changed meanwhile, its
        # identity changes with it: a miss; then the next run is a hit.)
        if hit.stdout.splitlines()[0] == first.stdout.splitlines()[0]:
            break
        first = hit
    assert hit.stdout.splitlines()[1:] == ["nothing", "nothing"]


def test_element_types_load_ml_dtypes_only_when_asked(tmp_path):
    script = textwrap.dedent("""
        import sys
        from xla_gpu.hlo.shape import ELEMENT_TYPES, bit_width
        import xla_gpu.runtime
        assert "f32" in ELEMENT_TYPES and "bf16" in ELEMENT_TYPES and len(ELEMENT_TYPES) > 20
        assert ELEMENT_TYPES["f32"].itemsize == 4 and bit_width("bf16") == 16
        assert bit_width("f8e4m3fn") == 8 and bit_width("s4") == 4
        before = "ml_dtypes" in sys.modules
        assert str(ELEMENT_TYPES["bf16"]) == "bfloat16"
        assert ELEMENT_TYPES.get("nope") is None
        from xla_gpu.hlo import parse_module, evaluate
        print(before, "ml_dtypes" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


SORT = """HloModule sorted
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[64] parameter(0)
  ROOT s = f32[64] sort(x), dimensions={0}, to_apply=less
}
"""


def test_clear_memory_cache_forgets_every_kernel(cache):
    # Single fusions, a program's fusions and a sort's kernels all go
    # through the kernel compiler's one memory cache: each is there after
    # its compile, and none is after clear_memory_cache().
    from xla_gpu import kernel_compiler
    fusion = xla_gpu.compile(NEGATE, target="cpu")
    assert xla_gpu.compile(NEGATE, target="cpu") is fusion
    programs = [xla_gpu.compile(text, target="cpu") for text in (PROGRAM, SORT)]
    keys = [key for program in programs for key in program.kernels]
    kinds = {program.kernels[key].spec.emitter for program in programs
             for key in program.kernels}
    assert {"loop", "sort"} <= kinds
    for key in [fusion.key, *keys]:
        assert kernel_compiler.cached_kernel(key, "cpu") is not None
    xla_gpu.compiler.clear_memory_cache()
    for key in [fusion.key, *keys]:
        assert kernel_compiler.cached_kernel(key, "cpu") is None
    again = xla_gpu.compile(NEGATE, target="cpu")      # from the disk cache
    assert again is not fusion and again.key == fusion.key
    np.testing.assert_array_equal(again.run(X)[0], -X)
