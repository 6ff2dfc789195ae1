"""Single-fusion kernels through xla_gpu.compile: the compile cache (memory
and disk hits, a corrupt entry rebuilt), saved kernel artifacts loaded with
xla_gpu.runtime, dumps; independent of whether this machine has a GPU."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import xla_gpu
from xla_gpu import hlo, runtime
from xla_gpu.hlo.fingerprint import fingerprint

HAS_GPU = runtime.cuda_available()

EXP = """HloModule m
fused {
  p = f32[256] parameter(0)
  ROOT e = f32[256] exponential(p)
}
"""

RENAMED = """HloModule other, is_scheduled=true

fused.7 {
  %x = f32[256]{0} parameter(0), metadata={op_name="jit(f)/exp"}
  ROOT %y = f32[256]{0} exponential(f32[256]{0} %x)
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_GPU_CACHE_DIR", str(tmp_path / "cache"))
    xla_gpu.compiler.clear_memory_cache()
    yield tmp_path / "cache"
    xla_gpu.compiler.clear_memory_cache()


def test_fingerprint_ignores_names_metadata_and_default_layouts():
    a = hlo.parse_module(EXP).entry
    b = hlo.parse_module(RENAMED).entry
    c = hlo.parse_module(EXP.replace("exponential", "negate")).entry
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)


def test_cuda_target_compiles_without_a_gpu(cache):
    exe = xla_gpu.compile(EXP, target="cuda", cache=False)
    assert exe.target == "cuda" and ".visible .entry fused(" in exe.ptx
    assert exe.launch_dims == {"threads": 128, "blocks": 2, "shared_bytes": 0}
    assert "xla_gpu.loop" in exe.mlir("emitted")
    assert "scf.for" in exe.mlir("xla-lower-xla-to-scf") or \
        "scf.if" in exe.mlir("xla-lower-xla-to-scf")
    with pytest.raises(ValueError, match="no stage 'nope'"):
        exe.mlir("nope")
    if not HAS_GPU:
        with pytest.raises(runtime.CudaUnavailableError):
            exe.run(np.zeros(256, np.float32))


def test_bad_arguments_name_the_argument(cache):
    exe = xla_gpu.compile(EXP, target="cuda", cache=False)
    with pytest.raises(ValueError, match=r"takes 1 arguments \(f32\[256\]\), got 2"):
        exe.run(np.zeros(256, np.float32), np.zeros(1))
    with pytest.raises(ValueError, match=r"argument 0: expected shape \[256\]"):
        exe.run(np.zeros(255, np.float32))
    with pytest.raises(ValueError, match="argument 0: expected dtype f32"):
        exe.run(np.zeros(256, np.float64))


def test_bad_options():
    with pytest.raises(ValueError, match="target must be one of"):
        xla_gpu.compile(EXP, target="tpu")
    with pytest.raises(ValueError, match="arch must look like sm_90"):
        xla_gpu.compile(EXP, arch="90")
    with pytest.raises(hlo.HloParseError):
        xla_gpu.compile("HloModule m\nf {\n ROOT x = f32[2] bogus(\n}\n")


def test_saved_cuda_kernel_loads_with_runtime_only(tmp_path, cache):
    exe = xla_gpu.compile(EXP, target="cuda", cache=False)
    exe.save(tmp_path / "k")
    assert (tmp_path / "k" / "kernel.ptx").exists()
    # A fresh process that imports only xla_gpu.runtime: no MLIR.
    script = (f"import sys; from xla_gpu import runtime; "
              f"k = runtime.load({str(tmp_path / 'k')!r}, trusted=True); "
              f"print(k.spec.name, k.launch_dims['blocks'], 'mlir' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["fused", "2", "False"]
    with pytest.raises(runtime.ArtifactError, match="no kernel.json"):
        runtime.load(tmp_path, trusted=True)


def test_cache_hit_miss_and_corrupt_entry(cache):
    first = xla_gpu.compile(EXP, target="cuda")
    assert xla_gpu.compile(EXP, target="cuda") is first          # memory hit
    xla_gpu.compiler.clear_memory_cache()
    again = xla_gpu.compile(RENAMED, target="cuda")              # disk hit, other text
    assert again.ptx == first.ptx
    entries = [p for p in cache.iterdir() if p.is_dir() and p.name != "raw"]
    assert len(entries) == 1
    (entries[0] / "kernel.ptx").write_text("garbage")            # corrupt it
    xla_gpu.compiler.clear_memory_cache()
    rebuilt = xla_gpu.compile(EXP, target="cuda")
    assert rebuilt.ptx == first.ptx
    assert (entries[0] / "kernel.ptx").read_text() == first.ptx  # rewritten


def test_memory_cache_hit_returns_the_same_executable(cache):
    # (How fast a hit is: bench/cache_hit.py.)
    first = xla_gpu.compile(EXP, target="cuda")
    assert all(xla_gpu.compile(EXP, target="cuda") is first for _ in range(3))


def test_dump_dir_writes_every_stage_and_the_ptx(tmp_path):
    exe = xla_gpu.compile(EXP, target="cuda", dump_dir=tmp_path / "dump",
                          dump_regex="flatten|lower-to-llvm")
    names = sorted(p.name for p in (tmp_path / "dump").iterdir())
    assert any("xla-flatten-tensors" in n for n in names)
    assert any("xla-lower-to-llvm" in n for n in names)
    assert f"{exe.spec.name}.ptx" in names


def test_argument_addresses_of_every_kind_of_array():
    # The fast address path (ctypes' buffer view) and its fallbacks give the
    # address numpy reports: plain, read-only, empty and 0-d arrays, and
    # ml_dtypes' (bf16, f8: no buffer export).
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from xla_gpu.runtime.spec import _address
    arrays = [np.arange(6, dtype=np.float32), np.zeros((2, 3), ml_dtypes.bfloat16),
              np.zeros((), ml_dtypes.bfloat16), np.zeros(4, ml_dtypes.float8_e4m3fn),
              np.zeros((0,), np.int32), np.zeros((0,), ml_dtypes.bfloat16)]
    frozen = np.ones(3, ml_dtypes.bfloat16)
    frozen.flags.writeable = False
    also_frozen = np.ones(3, np.float64)
    also_frozen.flags.writeable = False
    for array in [*arrays, frozen, also_frozen]:
        assert _address(array) == array.ctypes.data, array.dtype
