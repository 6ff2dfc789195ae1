"""One backend object per target (its stages, its compiler's identity in
the cache key, its default device), and one device description, launch
limits included, that the analysis, code generation and the runtime read."""

from __future__ import annotations

import numpy as np
import pytest

import xla_gpu
from xla_gpu import backends, compile_cache, kernel_compiler, pipeline
from xla_gpu.analysis import device as analysis_device
from xla_gpu.analysis.fusion import analyze
from xla_gpu.backends import identity
from xla_gpu.errors import ArgumentError, ResourceError
from xla_gpu.hlo import parse_module
from xla_gpu.runtime import cuda as runtime_cuda
from xla_gpu.runtime import device as runtime_device
from xla_gpu.runtime.device import H200, DeviceDescription, check_launch, for_arch

NEGATE = """
f {
  x = f32[256] parameter(0)
  ROOT n = f32[256] negate(x)
}
"""


# -- the backends ---------------------------------------------------------------------

def test_each_target_has_a_backend_with_the_stages_the_pipeline_runs():
    cpu, cuda = backends.get("cpu"), backends.get("cuda")
    assert (cpu.name, cuda.name) == ("cpu", "cuda")
    assert backends.TARGETS == pipeline.TARGETS == ("cuda", "cpu")
    for backend in (cpu, cuda):
        assert backend.stages() == pipeline.stages_for(backend.name)
        assert [s.name for s in backend.stages()][:3] == \
            ["optimization", "loop-transformation", "lowering"]
    assert cuda.stages()[-1].name == "cuda-lowering"
    assert "xla-lower-to-llvm" in cuda.stages()[-1].passes
    # The cpu stages emulate the grid of the launch they are given.
    last = cpu.stages(threads=128, blocks=960)[-1]
    assert last.name == "cpu-lowering"
    assert last.passes[0] == "xla-emulate-grid{threads=128 blocks=960}"
    with pytest.raises(ArgumentError, match="options of the cpu target only"):
        cuda.stages(threads=128)
    # What the compiler layers ask instead of comparing target names.
    assert (cpu.emulates_grid, cpu.links_kernels, cpu.calls_vendor_libraries) == \
        (True, True, False)
    assert (cuda.emulates_grid, cuda.links_kernels, cuda.calls_vendor_libraries) == \
        (False, True, True)


def test_a_cpu_kernel_goes_through_its_backends_stages(tmp_path):
    exe = xla_gpu.compile(NEGATE, target="cpu", dump_dir=tmp_path)
    stages = backends.get("cpu").stages()
    dumped = sorted(p.name for p in tmp_path.glob("stage.*.mlir"))
    assert dumped == sorted(f"stage.{s.name}.mlir" for s in stages)
    assert exe.host_mlir is not None and exe.ptx is None
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    np.testing.assert_array_equal(exe.run(x)[0], -x)


@pytest.mark.parametrize("target", ["rocm", "CPU", "", None, 3])
def test_an_unknown_target_is_refused(target):
    with pytest.raises(ArgumentError, match="unknown target"):
        backends.get(target)


def test_unknown_target_has_no_identity():
    with pytest.raises(ArgumentError, match="unknown target"):
        compile_cache.compiler_identity("rocm")


def test_getting_a_backend_and_its_identity_imports_no_mlir():
    import subprocess
    import sys
    script = ("import sys\n"
              "from xla_gpu import backends, compile_cache\n"
              "for t in backends.TARGETS:\n"
              "    backends.get(t).compiler_identity(); compile_cache.compiler_identity(t)\n"
              "    backends.get(t).default_device\n"
              "print('mlir' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.fixture
def fresh_cuda_identity():
    identity.cuda_identity.cache_clear()
    yield
    identity.cuda_identity.cache_clear()


def test_the_key_follows_the_backends_compiler(tmp_path, monkeypatch, fresh_cuda_identity):
    """A kernel's cache key holds its backend's compiler identity: a
    changed ptxas changes the cuda backend's identity and with it the keys
    of cuda kernels, not those of cpu kernels."""
    cuda_home = tmp_path / "cuda"
    (cuda_home / "bin").mkdir(parents=True)
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    comp = parse_module(NEGATE).entry

    def keys() -> tuple[str, str, str]:
        identity.cuda_identity.cache_clear()
        return (backends.get("cuda").compiler_identity(),
                kernel_compiler.kernel_key(comp, "cuda", "sm_90"),
                kernel_compiler.kernel_key(comp, "cpu", "sm_90"))

    before = keys()
    assert keys() == before                                  # stable
    (cuda_home / "bin" / "ptxas").write_bytes(b"ptxas 13.0")
    installed = keys()
    (cuda_home / "bin" / "ptxas").write_bytes(b"ptxas 13.1, another size")
    upgraded = keys()
    assert len({before[0], installed[0], upgraded[0]}) == 3  # the backend's identity
    assert len({before[1], installed[1], upgraded[1]}) == 3  # the cuda kernel's key
    assert before[2] == installed[2] == upgraded[2]          # the cpu kernel's key
    assert compile_cache.compiler_identity("cuda") != compile_cache.compiler_identity("cpu")


def test_a_kernel_is_configured_for_its_backends_default_device():
    assert backends.get("cuda").default_device is H200
    assert backends.get("cpu").default_device is runtime_device.HOST_EMULATION
    comp = parse_module(NEGATE).entry
    # The default device does not enter the key; another one does.
    assert kernel_compiler.kernel_key(comp, "cpu", "sm_90") == \
        kernel_compiler.kernel_key(comp, "cpu", "sm_90", device=runtime_device.HOST_EMULATION)
    assert kernel_compiler.kernel_key(comp, "cpu", "sm_90") != \
        kernel_compiler.kernel_key(comp, "cpu", "sm_90", device=H200)


# -- one device description -------------------------------------------------------------

def test_the_analysis_and_the_runtime_read_the_same_description():
    for name in ("DeviceDescription", "H200", "RTX_A6000", "HOST_EMULATION", "DEFAULT_DEVICE",
                 "device_named"):
        assert getattr(analysis_device, name) is getattr(runtime_device, name)
    assert runtime_cuda.check_launch is check_launch
    assert runtime_cuda.limits_for_arch("sm_90") is H200
    fusion = analyze(parse_module(NEGATE).entry, "n")
    assert fusion.device is H200          # the analysis' default
    assert H200.shared_memory_per_block == 48 * 1024
    assert H200.shared_memory_per_block_optin == 227 * 1024


def test_check_launch_holds_dynamic_shared_memory_to_the_descriptions_opt_in_limit():
    small = DeviceDescription("a GPU of 48 KiB per block", core_count=8,
                              threads_per_core_limit=2048,
                              shared_memory_per_block_optin=48 * 1024)
    with pytest.raises(ResourceError, match="at most 49152"):
        check_launch("k", 128, 1, 64 * 1024, limits=small)
    check_launch("k", 128, 1, 64 * 1024, limits=H200)
    check_launch("k", 128, 1, 64 * 1024)                     # the H200 by default
    with pytest.raises(ResourceError):
        check_launch("k", 128, 1, 228 * 1024, limits=H200)
    # An arch's description has the arch's opt-in limit (sm_72: 48 KiB).
    assert for_arch("sm_72").shared_memory_per_block_optin == 48 * 1024
    with pytest.raises(ResourceError):
        check_launch("k", 128, 1, 64 * 1024, limits=for_arch("sm_72"))


def test_codegen_checks_a_kernel_against_the_archs_description():
    codegen = pytest.importorskip("xla_gpu.backends.cuda.codegen")
    kernel = {"k": codegen.KernelResources("k", registers=32, shared_bytes=64 * 1024,
                                           block_size=128)}
    codegen.check_resources(kernel, "sm_90")
    with pytest.raises(codegen.LaunchLimitError, match="sm_72"):
        codegen.check_resources(kernel, "sm_72")


def test_a_description_is_checked_and_accepted_by_compile():
    with pytest.raises(ArgumentError, match="threads_per_core_limit"):
        DeviceDescription("bad", core_count=8, threads_per_core_limit=0)
    with pytest.raises(ArgumentError, match="opt-in"):
        DeviceDescription("bad", core_count=8, threads_per_core_limit=2048,
                          shared_memory_per_block_optin=16 * 1024)
    with pytest.raises(ArgumentError, match="unknown device"):
        runtime_device.device_named("NVIDIA H100")
    exe = xla_gpu.compile(NEGATE, target="cpu", cache=False, device=for_arch("sm_89"))
    x = np.arange(256, dtype=np.float32)
    np.testing.assert_array_equal(exe.run(x)[0], -x)
