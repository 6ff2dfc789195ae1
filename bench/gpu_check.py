"""The GPU check: compile here, run where the GPU is. First the cuda path
(the runtime's boundary with the caller and the driver), then every example
and test fusion against the reference interpreter.

    # on the compiler machine (MLIR installed): write the artifacts
    python bench/gpu_check.py prepare --out build/gpu_check
    # on the GPU machine (numpy + cuda-python + this source tree; no MLIR):
    python bench/gpu_check.py run build/gpu_check
    # the same here, on the cpu target (needs the compiler):
    python bench/gpu_check.py run build/gpu_check --target cpu

The cuda path section runs in a child process (a sticky CUDA error such as
a misaligned access ruins its context; the kernel table then still runs)
and prints one line per case:
  ptx             sqrt.rn.f32, native atom.add.noftz.f16/bf16, no .sys
                  atomics, .maxntid = the block size, PTX .version <= 7.8
  compile_limits  a grid over 2^31-1 blocks was a CompileError when prepared
  misaligned      device (and host) arrays 4 bytes off a 16-byte boundary
  threads         load, run, copy and free from other threads, concurrently
  stream          an input a non-blocking stream is still writing (CAI v3
                  `stream`), our own stream, timing on it
  dlpack          DLPack inputs: a hand-made CUDA producer and jax arrays
  cubin_fallback  a cubin for another GPU (and garbage): PTX JIT, warning
  sqrt            bit-exact with numpy (IEEE sqrt.rn)
  atomics16       f16/bf16 scatter-add with native atomics, exact sums
  launch_limits   block/grid/shared-memory limits before launch, the loaded
                  function's MAX_THREADS_PER_BLOCK, dynamic smem > 48 KiB
  unload          modules unloaded when their kernel is collected
  fft             a whole program of FFT / IFFT / RFFT / IRFFT thunks in c64
                  and c128 (cuFFT, inverses scaled by cuBLAS) against numpy
  nccl            collectives through NCCL: a one-device program with every
                  collective (a one-rank clique) against the interpreter;
                  2 devices on one GPU refused (one rank per GPU), on 2 GPUs
                  run where there are 2
  gemm            GEMM fusions on tensor cores (mma.sync: f16, bf16, s8 -> s32,
                  the seed's s8 x bf16 at full size, odd sizes) against the
                  interpreter
  plugin          jax through the PJRT plugin on the cuda target
                  (XLA_GPU_PJRT_TARGET=cuda, in a child process): a jitted
                  function, round trips, donation and optax training steps
                  of a tiny model against jax's cpu backend; skipped where
                  jax 0.10.x, the compiler (MLIR) or optax is missing
The kernel table: emitter, launch, result, time (CUDA events) and
bandwidth as a fraction of a device-to-device copy in the same run.
Exit status: 0 when everything ran and matched; 1 on any failure; 2 when
nothing was prepared or run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import threading
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
try:  # the installed package: its native part and generated op builders
    import xla_gpu  # noqa: F401,E402
except ImportError:  # a bare source tree (a GPU machine: runtime and hlo only)
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from xla_gpu import hlo  # noqa: E402
from xla_gpu.hlo.fusions import fusion_computation  # noqa: E402
from xla_gpu.hlo.numerics import compare, has_reduction, random_inputs, tolerance_type  # noqa: E402

SOURCES = [ROOT / "examples" / "gelu.hlo",
           *sorted((ROOT / "tests" / "python" / "hlo_inputs").glob("*.hlo")),
           *sorted(p for p in (ROOT / "tests" / "lit" / "emitters").glob("*.hlo")
                   if p.name != "invalid.hlo")]

# -- the cuda path's fusions ---------------------------------------------------------

MULTIPLY = """HloModule m
f {
  p = f32[1024,512] parameter(0)
  q = f32[1024,512] parameter(1)
  ROOT m = f32[1024,512] multiply(p, q)
}
ENTRY main {
  p = f32[1024,512] parameter(0)
  q = f32[1024,512] parameter(1)
  ROOT fusion = f32[1024,512] fusion(p, q), kind=kLoop, calls=f
}
"""

SQRT = """HloModule m
f {
  p = f32[1024,256] parameter(0)
  ROOT s = f32[1024,256] sqrt(p)
}
ENTRY main {
  p = f32[1024,256] parameter(0)
  ROOT fusion = f32[1024,256] fusion(p), kind=kLoop, calls=f
}
"""


# A whole program of fft thunks (no kernels): saved as a program, run by
# case_fft. The IRFFT reads the RFFT's result, which is an output too.
FFT_PROGRAM = """HloModule ffts
ENTRY main {
  z = c64[6,32,24] parameter(0)
  x = f32[40,100] parameter(1)
  w = c128[4,64] parameter(2)
  f = c64[6,32,24] fft(z), fft_type=FFT, fft_length={32,24}
  i = c64[6,32,24] fft(z), fft_type=IFFT, fft_length={24}
  r = c64[40,51] fft(x), fft_type=RFFT, fft_length={100}
  b = f32[40,100] fft(r), fft_type=IRFFT, fft_length={100}
  d = c128[4,64] fft(w), fft_type=IFFT, fft_length={4,64}
  ROOT t = (c64[6,32,24], c64[6,32,24], c64[40,51], f32[40,100], c128[4,64]) tuple(f, i, r, b, d)
}
"""


def _scatter_add(dtype: str) -> str:
    return f"""HloModule m
add {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] add(a, b)
}}
scatter {{
  p0 = {dtype}[64,8] parameter(0)
  p1 = s32[4096,1] parameter(1)
  p2 = {dtype}[4096,1,8] parameter(2)
  ROOT sc = {dtype}[64,8] scatter(p0, p1, p2), update_window_dims={{1,2}}, inserted_window_dims={{}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
}}
ENTRY main {{
  p0 = {dtype}[64,8] parameter(0)
  p1 = s32[4096,1] parameter(1)
  p2 = {dtype}[4096,1,8] parameter(2)
  ROOT f = {dtype}[64,8] fusion(p0, p1, p2), kind=kLoop, calls=scatter
}}
"""


def _huge_grid() -> str:
    # 2^48 blocks of 128 threads x 4 elements: over 2^31 - 1 blocks the loop
    # emitter goes 2-D, and this needs 131073 rows in y (CUDA: 65535).
    n = 1 << 57
    return f"""HloModule m
f {{
  p = f32[{n}] parameter(0)
  ROOT n = f32[{n}] negate(p)
}}
ENTRY main {{
  p = f32[{n}] parameter(0)
  ROOT fusion = f32[{n}] fusion(p), kind=kLoop, calls=f
}}
"""


def _gemm(lhs: str, rhs: str, out: str, dims: str, config: str | None = None,
          epilogue: bool = False) -> str:
    """One __triton_gemm fusion `out = dot(lhs, rhs)` (shapes as HLO
    text, e.g. "bf16[200,72]"); `config` "bm,bn,bk,warps" or the heuristic
    table; `epilogue`: the seed's `-(d * 0.125)` on the dot."""
    out_type = out.split("[")[0]
    if config:
        bm, bn, bk, warps = config.split(",")
        tiling = (f',"triton_gemm_config":{{"block_m":"{bm}","block_n":"{bn}",'
                  f'"block_k":"{bk}","split_k":"1","num_stages":"1","num_warps":"{warps}"}}')
    else:
        tiling = ""
    root = "ROOT d" if not epilogue else "d"
    tail = "" if not epilogue else f"""
  c = {out_type}[] constant(0.125)
  cb = {out} broadcast(c), dimensions={{}}
  m = {out} multiply(d, cb)
  ROOT n = {out} negate(m)"""
    return f"""HloModule m
gemm {{
  p0 = {lhs} parameter(0)
  p1 = {rhs} parameter(1)
  {root} = {out} dot(p0, p1), {dims}{tail}
}}
ENTRY main {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT f = {out} fusion(a, b), kind=kCustom, calls=gemm,
    backend_config={{"fusion_backend_config":{{"kind":"__triton_gemm"{tiling}}}}}
}}
"""


_PLAIN = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"

# The GEMM emitter's tensor-core kernels (mma.sync: 16-bit floats into
# f32, s8 into s32), odd sizes everywhere (partial tiles: zero-filled
# loads, predicated stores), checked by case_gemm against the interpreter.
GEMMS = {
    "gemm_bf16": _gemm("bf16[200,72]", "bf16[72,136]", "f32[200,136]", _PLAIN),
    "gemm_f16": _gemm("f16[77,100]", "f16[100,45]", "f16[77,45]", _PLAIN, "32,32,32,4"),
    "gemm_s8_s32": _gemm("s8[100,96]", "s8[96,72]", "s32[100,72]", _PLAIN, "64,64,64,4"),
    "gemm_bf16_batch_lhs_t": _gemm(
        "bf16[3,50,70]", "bf16[3,50,90]", "f32[3,70,90]",
        "lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
        "rhs_contracting_dims={1}", "32,64,16,4"),
    "gemm_bf16_8_warps": _gemm("bf16[300,260]", "bf16[270,260]", "bf16[300,270]",
                               "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
                               "128,128,32,8", epilogue=True),
    "gemm_small": _gemm("bf16[5,7]", "bf16[7,3]", "f32[5,3]", _PLAIN),
    "gemm_s8_u8_f32": _gemm("s8[64,96]", "u8[96,40]", "f32[64,40]", _PLAIN, "32,32,32,4"),
}
# The seed's example as its GEMM fusion: s8 converted to bf16 in the lhs
# tile's prologue, -(a @ b * 0.125) at full size.
GEMMS["gemm_seed_s8_bf16"] = _gemm("bf16[1024,512]", "bf16[512,2048]", "bf16[1024,2048]",
                                   _PLAIN, epilogue=True).replace(
    "  p0 = bf16[1024,512] parameter(0)\n",
    "  p = s8[1024,512] parameter(0)\n  p0 = bf16[1024,512] convert(p)\n").replace(
    "  a = bf16[1024,512] parameter(0)", "  a = s8[1024,512] parameter(0)")

CUDA_PATH = {"multiply": MULTIPLY, "sqrt": SQRT, "scatter_f16": _scatter_add("f16"),
             "scatter_bf16": _scatter_add("bf16"), **GEMMS}
# An arch whose cubin an H100/H200 (sm_90) cannot load (SASS runs only on
# its own major version).
OTHER_ARCH = "sm_80"


# -- prepare (needs the compiler) ------------------------------------------------------

# The collectives through NCCL (case_nccl). One device: every collective on
# a one-rank clique (the gathers, scatters and all-to-all along dimension 1
# go through scratch in strided copies), the device ids. Two partitions:
# refused on one GPU (NCCL's rule: one rank per GPU), run on two.
NCCL_ONE = """HloModule nccl_one, num_partitions=1
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
addc { a = c64[] parameter(0)  b = c64[] parameter(1)  ROOT s = c64[] add(a, b) }
maxb { a = bf16[] parameter(0)  b = bf16[] parameter(1)  ROOT m = bf16[] maximum(a, b) }
orp { a = pred[] parameter(0)  b = pred[] parameter(1)  ROOT o = pred[] or(a, b) }
mins { a = s32[] parameter(0)  b = s32[] parameter(1)  ROOT m = s32[] minimum(a, b) }
ENTRY main {
  x = f32[64,48] parameter(0)
  c = c64[16] parameter(1)
  h = bf16[32] parameter(2)
  b = pred[24] parameter(3)
  i = s32[6,10] parameter(4)
  ar = f32[64,48] all-reduce(x), replica_groups={{0}}, to_apply=add, channel_id=1
  arc = c64[16] all-reduce(c), replica_groups={{0}}, to_apply=addc, channel_id=2
  arh = bf16[32] all-reduce(h), replica_groups={{0}}, to_apply=maxb, channel_id=3
  arb = pred[24] all-reduce(b), replica_groups={{0}}, to_apply=orp, channel_id=4
  ag0 = f32[64,48] all-gather(x), replica_groups={{0}}, dimensions={0}, channel_id=5
  ag1 = s32[6,10] all-gather(i), replica_groups={{0}}, dimensions={1}, channel_id=6
  rs1 = s32[6,10] reduce-scatter(i), replica_groups={{0}}, dimensions={1}, to_apply=mins, channel_id=7
  a2a = s32[6,10] all-to-all(i), replica_groups={{0}}, dimensions={1}, channel_id=8
  cp = f32[64,48] collective-permute(x), source_target_pairs={{0,0}}, channel_id=9
  cz = s32[6,10] collective-permute(i), source_target_pairs={}, channel_id=10
  bc = c64[16] collective-broadcast(c), replica_groups={{0}}, channel_id=11
  pid = u32[] partition-id()
  rid = u32[] replica-id()
  ROOT t = (f32[64,48], c64[16], bf16[32], pred[24], f32[64,48], s32[6,10], s32[6,10], s32[6,10], f32[64,48], s32[6,10], c64[16], u32[], u32[]) tuple(ar, arc, arh, arb, ag0, ag1, rs1, a2a, cp, cz, bc, pid, rid)
}
"""
NCCL_TWO = """HloModule nccl_two, num_partitions=2
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
ENTRY main {
  x = f32[8,4] parameter(0)
  ar = f32[8,4] all-reduce(x), replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add, channel_id=1
  ag = f32[8,8] all-gather(x), replica_groups={{0,1}}, use_global_device_ids=true, dimensions={1}, channel_id=2
  cp = f32[8,4] collective-permute(x), source_target_pairs={{0,1},{1,0}}, channel_id=3
  pid = u32[] partition-id()
  ROOT t = (f32[8,4], f32[8,8], f32[8,4], u32[]) tuple(ar, ag, cp, pid)
}
"""


def _fusions(module) -> list[str | None]:
    if not any(c.is_entry for c in module.computations):
        return [None]
    names = [i.name for i in module.entry.instructions if i.opcode == "fusion"]
    return names or [None]


def _prepare_cuda_path(out: Path, arch: str) -> dict:
    import xla_gpu
    from xla_gpu.backends.cuda import codegen
    out.mkdir(parents=True, exist_ok=True)
    index: dict = {"arch": arch, "kernels": {}, "compile_errors": {}}
    for name, text in CUDA_PATH.items():
        # A GEMM fusion alone (its module would be a program of one thunk).
        exe = xla_gpu.compile(text, target="cuda", arch=arch, cache=False,
                              fusion="f" if name in GEMMS else None)
        exe.save(out / name)
        entry = {"cubin": exe.cubin is not None}
        resources = codegen.kernel_resources(exe.ptx, arch)
        if resources:
            entry["resources"] = {k: dataclasses.asdict(r) for k, r in resources.items()}
        index["kernels"][name] = entry
    # A cubin the GPU cannot load: the PTX of `multiply` built for another arch.
    ptx = (out / "multiply" / "kernel.ptx").read_text()
    try:
        other = codegen.to_cubin(ptx.replace(f".target {arch}", f".target {OTHER_ARCH}"),
                                 OTHER_ARCH)
    except codegen.CodegenError as e:
        other = None
        index["other_arch_error"] = str(e).splitlines()[0]
    if other is not None:
        (out / f"multiply.{OTHER_ARCH}.cubin").write_bytes(other)
        index["other_arch_cubin"] = f"multiply.{OTHER_ARCH}.cubin"
    try:
        xla_gpu.compile(FFT_PROGRAM, target="cuda", arch=arch, cache=False).save(
            out / "fft_program")
        index["fft_program"] = "fft_program"
    except Exception as e:  # reported by case_fft
        index["fft_program_error"] = f"{type(e).__name__}: {e}".splitlines()[0]
    for name, text in (("nccl_one", NCCL_ONE), ("nccl_two", NCCL_TWO)):
        try:
            xla_gpu.compile(text, target="cuda", arch=arch, cache=False).save(out / name)
            index.setdefault("nccl", {})[name] = name
        except Exception as e:  # reported by case_nccl
            index.setdefault("nccl_errors", {})[name] = \
                f"{type(e).__name__}: {e}".splitlines()[0]
    try:
        xla_gpu.compile(_huge_grid(), target="cuda", arch=arch, cache=False)
        index["compile_errors"]["huge_grid"] = None
    except Exception as e:
        index["compile_errors"]["huge_grid"] = f"{type(e).__name__}: {e}"
    (out / "index.json").write_text(json.dumps(index, indent=1))
    return index


def prepare(out: Path, arch: str) -> int:
    import xla_gpu
    out.mkdir(parents=True, exist_ok=True)
    cuda_path = _prepare_cuda_path(out / "cuda_path", arch)
    print(f"cuda path: {len(cuda_path['kernels'])} kernels"
          + (f", a {OTHER_ARCH} cubin" if "other_arch_cubin" in cuda_path else
             f", no {OTHER_ARCH} cubin ({cuda_path.get('other_arch_error', 'no ptxas')})"))
    index, failures = [], 0
    for path in SOURCES:
        text = path.read_text()
        module = hlo.parse_module(text, source=str(path))
        for fusion in _fusions(module):
            case = f"{path.stem}.{fusion or 'entry'}".replace("/", "_")
            try:
                exe = xla_gpu.compile(text, target="cuda", arch=arch, fusion=fusion)
            except Exception as e:  # report and go on: the table shows it
                index.append({"case": case, "error": f"{type(e).__name__}: {e}".splitlines()[0]})
                failures += 1
                continue
            if not hasattr(exe, "spec"):   # a whole program: bench/run_gpu.py runs those
                index.append({"case": case, "program": True})
                continue
            exe.save(out / case)
            (out / case / "fusion.json").write_text(json.dumps({"fusion": fusion}))
            index.append({"case": case, "emitter": exe.spec.emitter,
                          "cubin": exe.cubin is not None})
    (out / "index.json").write_text(json.dumps(index, indent=1))
    programs = sum(1 for entry in index if entry.get("program"))
    written = len(index) - failures - programs
    print(f"wrote {written} kernels to {out} ({failures} did not compile; {programs} whole "
          "programs left to bench/run_gpu.py)")
    for entry in index:
        if "error" in entry:
            print(f"  {entry['case']}: {entry['error']}")
    # The FFI cases: handler libraries built here (the GPU machine may have
    # no compiler) and programs calling them, registered for "cuda" there.
    try:
        sys.path.insert(0, str(HERE))
        import ffi_gpu_check
        ffi_code = ffi_gpu_check.prepare(out / "ffi", arch)
    except Exception as e:  # reported: the run then has no FFI section
        print(f"FFI cases not prepared: {type(e).__name__}: {e}")
        ffi_code = 1
    if ffi_code:
        print("FFI cases not prepared (see above)")
    return 0 if written and cuda_path["kernels"] else 2


# -- the cuda path cases -----------------------------------------------------------------


class CaseFailure(AssertionError):
    pass


class Skip(Exception):
    pass


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CaseFailure(message)


class Kernels:
    """The cuda path's kernels on one target: the saved artifacts on cuda,
    the same fusions recompiled from their saved HLO on cpu."""

    def __init__(self, directory: Path, target: str):
        self.directory, self.target = directory, target
        self.index = json.loads((directory / "index.json").read_text())
        self._cache: dict[str, object] = {}

    def hlo_text(self, name: str) -> str:
        return (self.directory / name / "fusion.hlo").read_text()

    def get(self, name: str):
        """An object with .run(*arrays) and .spec."""
        if name not in self._cache:
            if self.target == "cuda":
                from xla_gpu import runtime
                self._cache[name] = runtime.load(self.directory / name, trusted=True)
            else:
                import xla_gpu
                self._cache[name] = xla_gpu.compile(
                    self.hlo_text(name), target="cpu", cache=False,
                    fusion="f" if name in GEMMS else None)
        return self._cache[name]

    def files(self, name: str):
        """(KernelSpec, cubin or None, PTX) as saved."""
        from xla_gpu.runtime.spec import KernelSpec
        d = self.directory / name
        spec = KernelSpec.from_json((d / "kernel.json").read_text())
        cubin = (d / "kernel.cubin").read_bytes() if (d / "kernel.cubin").exists() else None
        return spec, cubin, (d / "kernel.ptx").read_text()

    def cuda_kernel(self, name: str, cubin: bytes | None | str = "saved", **spec_changes):
        """A fresh CudaKernel of a saved kernel, its spec changed."""
        from xla_gpu.runtime.cuda import CudaKernel
        spec, saved_cubin, ptx = self.files(name)
        spec = dataclasses.replace(spec, **spec_changes)
        return CudaKernel(spec, cubin=saved_cubin if cubin == "saved" else cubin, ptx=ptx)


class DeviceView:
    """A CAI view of device memory at any address (a misaligned slice, an
    array a stream is still writing)."""

    def __init__(self, pointer: int, shape, dtype, stream: int | None = None, keep=None):
        self._keep = keep
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": np.dtype(dtype).str, "data": (pointer, False),
            "version": 3, "strides": None, **({"stream": stream} if stream is not None else {})}


def _inputs_multiply(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1024, 512), dtype=np.float32),
            rng.standard_normal((1024, 512), dtype=np.float32))


def case_ptx(k: Kernels) -> str:
    import re
    notes = []
    for name in CUDA_PATH:
        spec, _, ptx = k.files(name)
        _expect(not re.search(r"\.sys\b", ptx), f"{name}: system-scope atomics in the PTX")
        found = re.search(r"\.maxntid\s+(\d+)", ptx)
        _expect(found and int(found.group(1)) == spec.threads,
                f"{name}: .maxntid {found and found.group(1)} != {spec.threads} threads")
        version = re.search(r"^\.version (\d+)\.(\d+)", ptx, re.M)
        _expect(version and (int(version[1]), int(version[2])) <= (7, 8),
                f"{name}: PTX .version {version and version.group(0)} (want <= 7.8)")
    _, _, ptx = k.files("sqrt")
    _expect("sqrt.rn.f32" in ptx and "sqrt.approx" not in ptx, "sqrt: not sqrt.rn.f32")
    for dtype in ("f16", "bf16"):
        _, _, ptx = k.files(f"scatter_{dtype}")
        _expect(f"atom.global.add.noftz.{dtype}" in ptx,
                f"scatter_{dtype}: no native atom.add.noftz.{dtype}")
        _expect("cas" not in ptx, f"scatter_{dtype}: a CAS loop left")
    for name, entry in k.index["kernels"].items():
        for r in entry.get("resources", {}).values():
            notes.append(f"{name} {r['registers']} regs")
    return "; ".join(notes)


def case_compile_limits(k: Kernels) -> str:
    error = k.index["compile_errors"].get("huge_grid")
    _expect(error is not None, "a grid of 2^48 blocks compiled for cuda")
    _expect(error.startswith("CompileError") and "exceeds CUDA's limit of 65535" in error,
            f"unexpected error: {error[:200]}")
    return "2^32 blocks: CompileError"


def case_misaligned(k: Kernels) -> str:
    x, y = _inputs_multiply(1)
    want = x * y
    if k.target == "cpu":
        raw = np.zeros(x.size + 4, np.float32)
        base = (-raw.ctypes.data % 16) // 4
        view = raw[base + 1: base + 1 + x.size].reshape(x.shape)
        view[...] = x
        _expect(view.ctypes.data % 16 == 4, "could not build a misaligned host array")
        (got,) = k.get("multiply").run(view, y)
        _expect(np.array_equal(got, want), "wrong result with a misaligned host input")
        return "host input 4 bytes off: copied, exact"
    from xla_gpu.runtime.cuda import DeviceArray
    kernel = k.get("multiply")
    padded = DeviceArray((x.size + 4,), np.float32)
    host = np.zeros(x.size + 4, np.float32)
    host[1:1 + x.size] = x.ravel()
    padded.copy_from_host(host)
    view = DeviceView(padded.ptr + 4, x.shape, np.float32, keep=padded)
    (got,) = kernel.run(view, y)
    _expect(np.array_equal(got, want), "wrong result with a misaligned device input")
    # Both misaligned, and an output in device memory: the context is still good.
    (got,) = kernel.run(view, DeviceView(padded.ptr + 4, x.shape, np.float32, keep=padded))
    _expect(np.array_equal(got, x * x), "wrong result with two misaligned inputs")
    raw = np.zeros(x.size + 1, np.float32)[1:].reshape(x.shape)
    raw[...] = x
    (got,) = kernel.run(raw, y)
    _expect(np.array_equal(got, want), "wrong result with a misaligned host input")
    return "device and host inputs 4 bytes off: copied, exact, context intact"


def case_threads(k: Kernels) -> str:
    x, y = _inputs_multiply(2)
    want = x * y
    errors: list[str] = []

    def record(fn):
        def wrapped(*a):
            try:
                fn(*a)
            except Exception as e:  # reported by the main thread
                errors.append(f"{type(e).__name__}: {e}")
        return wrapped

    def run_and_check(kernel):
        for _ in range(3):
            (got,) = kernel.run(x, y)
            if not np.array_equal(got, want):
                raise CaseFailure("wrong result on a second thread")

    if k.target == "cpu":
        kernel = k.get("multiply")
        threads = [threading.Thread(target=record(run_and_check), args=(kernel,))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        _expect(not errors, "; ".join(errors[:2]))
        return "4 threads run one host kernel"
    from xla_gpu.runtime.cuda import DeviceArray, _check, _driver, current_context
    loaded = k.get("multiply")
    loaded.run(x, y)                                   # loaded on the main thread
    fresh = k.cuda_kernel("multiply")                  # first loaded on another thread
    made = DeviceArray.from_host(x)

    def other_thread():
        run_and_check(loaded)
        run_and_check(fresh)
        _expect(np.array_equal(made.to_host(), x), "to_host on another thread")
        copy = DeviceArray(x.shape, np.float32)
        copy.copy_from_device(made.ptr)
        _expect(np.array_equal(copy.to_host(), x), "a copy on another thread")
        (out,) = loaded.run(x, y, device_outputs=True)
        _expect(np.array_equal(out.to_host(), want), "device outputs on another thread")

    t = threading.Thread(target=record(other_thread))
    t.start()
    t.join()
    _expect(not errors, "; ".join(errors[:2]))
    # Freed on another thread (no context current there): no leak.
    with current_context():
        free_before, _ = _check("cuMemGetInfo", _driver().cuMemGetInfo())
    for _ in range(20):
        arrays = [DeviceArray((16 << 20,), np.uint8) for _ in range(4)]
        t = threading.Thread(target=record(lambda a: a.clear()), args=(arrays,))
        t.start()
        t.join()
        del arrays
    gc.collect()
    with current_context():
        free_after, _ = _check("cuMemGetInfo", _driver().cuMemGetInfo())
    _expect(not errors, "; ".join(errors[:2]))
    _expect(free_before - free_after < (64 << 20),
            f"{(free_before - free_after) >> 20} MiB leaked by frees on other threads")
    threads = [threading.Thread(target=record(run_and_check), args=(loaded,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _expect(not errors, "; ".join(errors[:2]))
    return "load, run, copy, to_host, free on other threads; 4 concurrent runs"


def case_stream(k: Kernels) -> str:
    if k.target == "cpu":
        raise Skip("cuda only")
    from xla_gpu.runtime.cuda import DeviceArray, _check, _driver, current_context
    cu = _driver()
    kernel = k.get("multiply")
    x, _ = _inputs_multiply(3)
    ones = np.ones_like(x)
    n = x.size
    three = int(np.float32(3).view(np.uint32))
    with current_context():
        producer = _check("cuStreamCreate", cu.cuStreamCreate(
            cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        consumer = _check("cuStreamCreate", cu.cuStreamCreate(
            cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    scratch = [DeviceArray((512 << 20,), np.uint8) for _ in range(2)]
    results = {}
    try:
        for label, with_stream in (("waits on the CAI stream", True),
                                   ("ignores the CAI stream", False)):
            target = DeviceArray(x.shape, np.float32)
            target.copy_from_host(np.zeros_like(x))
            with current_context():
                _check("cuStreamSynchronize", cu.cuStreamSynchronize(0))
                # Keep the producer busy (~10 ms of copies), then write 3.0.
                for _ in range(20):
                    scratch[1].copy_from_device(scratch[0].ptr, int(producer))
                _check("cuMemsetD32Async", cu.cuMemsetD32Async(
                    target.ptr, three, n, int(producer)))
            view = DeviceView(target.ptr, x.shape, np.float32,
                              stream=int(producer) if with_stream else None, keep=target)
            (got,) = kernel.run(view, ones)
            results[label] = bool((got == 3).all())
            with current_context():
                _check("cuStreamSynchronize", cu.cuStreamSynchronize(int(producer)))
        _expect(results["waits on the CAI stream"],
                "read the input before its producer stream wrote it")
        # Our own non-blocking stream, and timing on it.
        (got,) = kernel.run(x, ones, stream=int(consumer))
        _expect(np.array_equal(got, x), "wrong result on a caller's stream")
        seconds = kernel.time(x, ones, iterations=5, warmup=1, stream=consumer)
        _expect(0 < seconds < 1, f"timing on the caller's stream: {seconds}")
    finally:
        with current_context():
            cu.cuStreamDestroy(producer)
            cu.cuStreamDestroy(consumer)
    race = "observable" if not results["ignores the CAI stream"] else "not observed"
    return f"ordered after a non-blocking producer (without the wait the race is {race})"


class _HandMadeDLPack:
    """A DLPack producer over our own device memory, built with ctypes (the
    protocol without jax): the consumer must call its deleter."""

    def __init__(self, array, shape, deleted: list):
        import ctypes

        from xla_gpu.runtime import interop
        self.array, self.deleted, self.asked = array, deleted, []
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._callback = interop._DELETER(lambda address: deleted.append(address))
        self._managed = interop._DLManagedTensorVersioned()
        t = self._managed.dl_tensor
        t.data, t.byte_offset, t.ndim = array.ptr, 0, len(shape)
        t.device.device_type, t.device.device_id = interop.DLPACK_CUDA, 0
        t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
        t.shape = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        self._managed.version.major = 1
        self._managed.deleter = ctypes.cast(self._callback, ctypes.c_void_p).value
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        self._new = lambda: new(ctypes.addressof(self._managed), b"dltensor_versioned", None)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None):
        self.asked.append(stream)
        return self._new()


class _DLPackOnly:
    """Hides every protocol but DLPack (jax arrays also speak CAI)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def case_dlpack(k: Kernels) -> str:
    x, y = _inputs_multiply(4)
    want = x * y
    kernel = k.get("multiply")
    if k.target == "cpu":
        (got,) = kernel.run(_DLPackOnly(x), _DLPackOnly(y))
        _expect(np.array_equal(got, want), "wrong result from DLPack host inputs")
        return "numpy through DLPack only"
    from xla_gpu.runtime.cuda import DeviceArray
    deleted: list = []
    producer = _HandMadeDLPack(DeviceArray.from_host(x), x.shape, deleted)
    (got,) = kernel.run(producer, y)
    _expect(np.array_equal(got, want), "wrong result from a DLPack device input")
    _expect(producer.asked == [1], f"__dlpack__ got stream {producer.asked} (want 1: legacy)")
    _expect(len(deleted) == 1, f"the DLPack deleter ran {len(deleted)} times (want 1)")
    notes = ["hand-made producer: stream 1 asked, deleter called once"]
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
    except Exception as e:  # no jax, or no GPU backend in it
        return "; ".join(notes + [f"jax: skipped ({type(e).__name__})"])
    if not gpus:
        return "; ".join(notes + ["jax: no GPU device"])
    xj, yj = jax.device_put(x, gpus[0]), jax.device_put(y, gpus[0])
    (got,) = kernel.run(_DLPackOnly(xj), _DLPackOnly(yj))
    _expect(np.array_equal(got, want), "wrong result from jax arrays through DLPack")
    (got,) = kernel.run(xj, yj)     # CAI if jax offers it, else DLPack
    _expect(np.array_equal(got, want), "wrong result from jax arrays")
    zj = (xj * 2).block_until_ready()
    (got,) = kernel.run(_DLPackOnly(zj), yj)
    _expect(np.array_equal(got, (x * 2) * y), "wrong result from a jax result")
    return "; ".join(notes + [f"jax {jax.__version__}: DLPack and direct inputs exact"])


def case_cubin_fallback(k: Kernels) -> str:
    import re
    if k.target == "cpu":
        raise Skip("cuda only")
    from xla_gpu.runtime.cuda import _check, _driver
    x, y = _inputs_multiply(5)
    version = _check("cuDriverGetVersion", _driver().cuDriverGetVersion())
    notes = [f"driver {version // 1000}.{version % 1000 // 10}"]
    normal = k.cuda_kernel("multiply")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (got,) = normal.run(x, y)
    _expect(np.array_equal(got, x * y), "wrong result from the saved kernel")
    notes.append(f"saved kernel loaded from {normal.loaded_from}"
                 + (f" ({caught[0].message})" if caught else ""))
    candidates = [("garbage cubin", b"\x7fELF not a cubin" * 8)]
    if "other_arch_cubin" in k.index:
        candidates.insert(0, (f"{OTHER_ARCH} cubin",
                              (k.directory / k.index["other_arch_cubin"]).read_bytes()))
    for label, image in candidates:
        kernel = k.cuda_kernel("multiply", cubin=image)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (got,) = kernel.run(x, y)
        _expect(np.array_equal(got, x * y), f"{label}: wrong result after the fallback")
        _expect(kernel.loaded_from == "ptx", f"{label}: loaded from {kernel.loaded_from}")
        messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        _expect(any("cubin does not load" in m for m in messages), f"{label}: no warning")
        error = re.search(r"CUDA_ERROR_\w+", messages[0])
        notes.append(f"{label}: {error.group(0) if error else messages[0][:80]} -> PTX")
    return "; ".join(notes)


def case_sqrt(k: Kernels) -> str:
    rng = np.random.default_rng(6)
    x = np.exp2(rng.uniform(-149, 128, (1024, 256))).astype(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -1.0, np.nan, 1e-45, 1.1754942e-38,
                         2.0, 3.0, 1.0000001, 3.4028235e38], np.float32)
    x.ravel()[:specials.size] = specials
    (got,) = k.get("sqrt").run(x)
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    _expect(same.all(), f"{(~same).sum()} of {x.size} square roots differ from numpy's "
            f"(first at {x.ravel()[np.argmin(same.ravel())]!r})")
    return f"{x.size} values incl. subnormals, 0, -0, inf, nan: bit-exact"


def case_atomics16(k: Kernels) -> str:
    import ml_dtypes
    rng = np.random.default_rng(7)
    notes = []
    for dtype, np_dtype, limit in (("f16", np.float16, 2048), ("bf16", ml_dtypes.bfloat16, 256)):
        idx = rng.integers(0, 64, (4096, 1)).astype(np.int32)
        counts = np.bincount(idx[:, 0], minlength=64)
        _expect(counts.max() <= limit, "test input: sums would round")
        (got,) = k.get(f"scatter_{dtype}").run(np.zeros((64, 8), np_dtype), idx,
                                                 np.ones((4096, 1, 8), np_dtype))
        want = np.repeat(counts[:, None], 8, axis=1).astype(np.float32)
        _expect(np.array_equal(got.astype(np.float32), want),
                f"{dtype}: atomic sums differ from the counts")
        notes.append(f"{dtype} exact")
    return ", ".join(notes) + " (4096 adds into 64 rows)"


def case_launch_limits(k: Kernels) -> str:
    from xla_gpu.errors import ResourceError
    from xla_gpu.runtime.cuda import check_launch
    for threads, blocks, text in ((2048, 1, "2048 threads"), (128, 1 << 31, "2147483648 blocks")):
        try:
            check_launch("k", threads, blocks)
            raise CaseFailure(f"{text}: no ResourceError")
        except ResourceError:
            pass
    if k.target == "cpu":
        return "pure checks (cuda: load-time checks run on the GPU)"
    x, y = _inputs_multiply(8)
    spec, _, _ = k.files("multiply")
    notes = []
    # More threads than the kernel's .maxntid: refused at load, by the driver's attribute.
    wide = k.cuda_kernel("multiply", threads=spec.threads * 2)
    try:
        wide.run(x, y)
        raise CaseFailure("a launch wider than .maxntid ran")
    except ResourceError as e:
        _expect("allows at most" in str(e), f"unexpected message: {e}")
        notes.append(f"{spec.threads * 2} threads > .maxntid {spec.threads}: refused at load")
    for blocks in (1 << 31,):
        try:
            k.cuda_kernel("multiply", blocks=blocks).run(x, y)
            raise CaseFailure("a grid of 2^31 blocks launched")
        except ResourceError:
            notes.append("2^31 blocks: refused")
    # Dynamic shared memory over 48 KiB needs the opt-in attribute: it runs.
    smem = k.cuda_kernel("multiply", shared_bytes=100 * 1024)
    (got,) = smem.run(x, y)
    _expect(np.array_equal(got, x * y), "wrong result with 100 KiB of dynamic shared memory")
    notes.append(f"100 KiB dynamic smem: opted in, ran ({smem.attributes})")
    return "; ".join(notes)


def case_unload(k: Kernels) -> str:
    if k.target == "cpu":
        raise Skip("cuda only")
    from xla_gpu.runtime.cuda import _check, _driver, current_context
    x, y = _inputs_multiply(9)
    finalizers = []
    with current_context():
        free_before, _ = _check("cuMemGetInfo", _driver().cuMemGetInfo())
    for _ in range(100):
        kernel = k.cuda_kernel("multiply")
        kernel.run(x, y)
        finalizers.append(kernel._unloader)
        del kernel
    gc.collect()
    alive = sum(f.alive for f in finalizers)
    _expect(alive == 0, f"{alive} of 100 modules still loaded after their kernels went")
    with current_context():
        free_after, _ = _check("cuMemGetInfo", _driver().cuMemGetInfo())
    _expect(free_before - free_after < (32 << 20),
            f"{(free_before - free_after) >> 20} MiB lost over 100 loads")
    kernel = k.cuda_kernel("multiply")
    kernel.run(x, y)
    kernel.unload()
    (got,) = kernel.run(x, y)      # loads again
    _expect(np.array_equal(got, x * y), "wrong result after unload and reload")
    return f"100 loads: all unloaded, {(free_before - free_after) >> 20} MiB difference"


def case_fft(k: Kernels) -> str:
    if k.target == "cuda":
        if "fft_program" not in k.index:
            raise CaseFailure(f"not prepared: {k.index.get('fft_program_error', 'missing')}")
        from xla_gpu import runtime
        program = runtime.load(k.directory / k.index["fft_program"], trusted=True)
    else:
        import xla_gpu
        program = xla_gpu.compile(FFT_PROGRAM, target="cpu", cache=False)
    rng = np.random.default_rng(10)
    z = (rng.standard_normal((6, 32, 24)) + 1j * rng.standard_normal((6, 32, 24))) \
        .astype(np.complex64)
    x = rng.standard_normal((40, 100)).astype(np.float32)
    w = rng.standard_normal((4, 64)) + 1j * rng.standard_normal((4, 64))
    wants = [np.fft.fft2(z.astype(np.complex128)), np.fft.ifft(z.astype(np.complex128)),
             np.fft.rfft(x.astype(np.float64)), x.astype(np.float64), np.fft.ifft2(w)]
    names = ["FFT c64 2-D", "IFFT c64", "RFFT f32", "IRFFT(RFFT) f32", "IFFT c128 2-D"]
    errors = []
    for _ in range(2):   # the second run reuses the plans
        got = program.run(z, x, w)
        errors = []
        for name, g, want in zip(names, got, wants):
            error = float(np.abs(g - want).max() / max(1.0, np.abs(want).max()))
            limit = 1e-12 if g.dtype == np.complex128 else 1e-5
            _expect(error <= limit, f"{name}: relative error {error:.2e} > {limit:.0e}")
            errors.append(f"{name} {error:.1e}")
    return "; ".join(errors) + f" ({program.stats.get('ffts', 0)} fft thunks)"


def case_gemm(k: Kernels) -> str:
    """The GEMM fusions of GEMMS (tensor cores on cuda) against the
    interpreter, on the harness's inputs."""
    from xla_gpu.hlo.numerics import tolerance_type
    notes, failures = [], []
    for name in GEMMS:   # all of them, then every failure in one line
        if name not in k.index["kernels"]:
            failures.append(f"{name} was not prepared")
            continue
        text = k.hlo_text(name)
        module = hlo.parse_module(text, source=name)
        inputs = random_inputs(module.entry, seed=3)
        kernel = k.get(name)
        if kernel.spec.emitter != "gemm":
            failures.append(f"{name}: emitter {kernel.spec.emitter}")
        (got,) = kernel.run(*inputs)
        (want,) = hlo.evaluate(module, *inputs)
        dtype = module.entry.root.shape.element_type
        mismatch = compare(np.asarray(got), np.asarray(want), dtype, 0,
                           tolerance_type(module.entry, dtype), True)
        if mismatch is not None:
            failures.append(f"{name}: {mismatch}")
        notes.append(name[len("gemm_"):])
    _expect(not failures, "; ".join(failures))
    mma = sum("mma.sync" in (k.directory / n / "kernel.ptx").read_text()
              for n in GEMMS if (k.directory / n / "kernel.ptx").exists())
    speed = ""
    if k.target == "cuda":   # the seed's GEMM: 2 * 1024 * 512 * 2048 flops
        module = hlo.parse_module(k.hlo_text("gemm_seed_s8_bf16"))
        seconds = k.get("gemm_seed_s8_bf16").time(*random_inputs(module.entry, seed=3),
                                                  iterations=20, warmup=3)
        tflops = 2 * 1024 * 512 * 2048 / seconds / 1e12
        speed = f"; seed {seconds * 1e6:.0f} us, {tflops:.1f} TFLOP/s"
    return f"{', '.join(notes)} match ({mma} of {len(GEMMS)} PTX with mma.sync){speed}"


def _nccl_program(k: Kernels, name: str, text: str):
    if k.target == "cuda":
        if name not in k.index.get("nccl", {}):
            raise CaseFailure(f"{name} not prepared: "
                              f"{k.index.get('nccl_errors', {}).get(name, 'missing')}")
        from xla_gpu import runtime
        return runtime.load(k.directory / name, trusted=True)
    import xla_gpu
    return xla_gpu.compile(text, target="cpu", cache=False)


def _nccl_mismatches(module, got_per_device, want_per_device) -> list[str]:
    """The outputs (by the root tuple's operand names) that differ bit for
    bit from the interpreter's."""
    names = [o.name for o in module.entry.root.operands]
    bad = []
    for d, (got, want) in enumerate(zip(got_per_device, want_per_device)):
        for name, g, w in zip(names, got, want):
            w = np.asarray(w)
            if np.asarray(g, dtype=w.dtype).tobytes() != w.tobytes():
                bad.append(f"device {d} {name}")
    return bad


def case_nccl(k: Kernels) -> str:
    """NCCL on the cuda target: every collective of a one-device program
    (a one-rank clique) against the interpreter, twice (the second run
    reuses the clique and the scratch); two devices on one GPU refused
    (NCCL's rule), on two GPUs run. On cpu: the same programs on emulated
    devices (the harness itself)."""
    notes = []
    if k.target == "cuda":
        from xla_gpu.runtime import nccl
        notes.append("NCCL %d.%d.%d" % nccl.nccl_version())   # a missing library fails here
    one = _nccl_program(k, "nccl_one", NCCL_ONE)
    module = hlo.parse_module(NCCL_ONE)
    args = random_inputs(module.entry, seed=5)
    (want,) = hlo.evaluate_devices(module, [args])
    for attempt in range(2):
        got = one.run(*args)
        bad = _nccl_mismatches(module, [got], [want])
        _expect(not bad, f"one rank, run {attempt + 1}: {', '.join(bad)} differ from the "
                         "interpreter")
    notes.append(f"1 rank: {len(got)} outputs match ({one.stats.get('collectives', 0)} "
                 "collectives)")
    two = _nccl_program(k, "nccl_two", NCCL_TWO)
    module2 = hlo.parse_module(NCCL_TWO)
    args2 = [random_inputs(module2.entry, seed=d) for d in range(2)]
    want2 = hlo.evaluate_devices(module2, args2)
    gpus = 2
    if k.target == "cuda":
        from xla_gpu.runtime.cuda import device_count
        gpus = device_count()
    if gpus < 2:
        from xla_gpu.runtime.nccl import NcclError
        try:
            two.run_partitioned(args2)
        except NcclError as e:
            _expect("2 ranks on one GPU" in str(e), f"refused, but not as NCCL's rule: {e}")
            notes.append("2 ranks on one GPU refused (NCCL allows one rank per GPU)")
        else:
            raise CaseFailure("2 devices on one GPU ran: NCCL's one-rank-per-GPU rule was "
                              "not applied")
    else:
        from xla_gpu.errors import UnsupportedError
        try:
            got2 = two.run_partitioned(args2)
        except UnsupportedError as e:   # not implemented: said, not failed
            notes.append(f"{gpus} GPUs: not run ({str(e)[:80]})")
        else:
            bad = _nccl_mismatches(module2, got2, want2)
            _expect(not bad, f"2 devices: {', '.join(bad)} differ from the interpreter")
            notes.append("2 emulated devices match" if k.target == "cpu" else
                         f"2 devices on {gpus} GPUs match")
    return "; ".join(notes)


# The plugin case's child: prints one "PLUGIN_RESULT {json}" line, with
# "skip" where what it needs is missing (the plugin compiles at jit time,
# so it needs the compiler as well as jax).
PLUGIN_SCRIPT = r"""
import json, sys


def report(**fields):
    print("PLUGIN_RESULT " + json.dumps(fields), flush=True)
    sys.exit(0)


try:
    import jax, jaxlib
except ImportError as e:
    report(skip=f"jax not installed ({e})")
if not jaxlib.__version__.startswith("0.10."):
    report(skip=f"jaxlib {jaxlib.__version__} installed; the plugin speaks jaxlib 0.10.x's "
                "PJRT C API")
try:
    import mlir.ir  # noqa: F401
except ImportError as e:
    report(skip=f"the compiler is not installed (MLIR Python bindings: {e}); the plugin "
                "compiles at jit time")
try:
    import optax
except ImportError:
    optax = None
import numpy as np
import jax.numpy as jnp
import xla_gpu.pjrt
from xla_gpu.pjrt import _plugin as P

xla_gpu.pjrt.initialize()   # a bare source tree has no entry point
dev, cpu = jax.devices("xla_gpu")[0], jax.devices("cpu")[0]
out = {"target": P.TARGET, "why": P.TARGET_REASON, "kind": dev.device_kind}
rng = np.random.default_rng(0)
a = rng.standard_normal((64, 32)).astype(np.float32)
b = rng.standard_normal((32, 16)).astype(np.float32)
f = jax.jit(lambda a, b: jax.nn.gelu(a @ b).sum(axis=0) + a.mean())
got = np.asarray(f(jax.device_put(a, dev), jax.device_put(b, dev)))
want = np.asarray(f(jax.device_put(a, cpu), jax.device_put(b, cpu)))
out["jit_error"] = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
h = jnp.asarray(rng.standard_normal((5, 7)).astype(np.float16), device=dev)
out["round_trip"] = bool(np.asarray(h).tobytes() == np.asarray(jax.device_put(h, cpu)).tobytes())
add = jax.jit(lambda x, y: x + y, donate_argnums=0)
x = jax.device_put(np.arange(4, dtype=np.float32), dev)
z = add(x, x * 0 + 2)
out["donation"] = bool(x.is_deleted() and np.asarray(z).tolist() == [2.0, 3.0, 4.0, 5.0])


def train(device, steps=5):
    with jax.default_device(device):
        w1, w2 = np.random.default_rng(1).standard_normal((2, 16, 16)).astype(np.float32)
        params = {"w1": jnp.asarray(w1 * 0.3), "w2": jnp.asarray(w2 * 0.3)}
        data = np.random.default_rng(2).standard_normal((32, 16)).astype(np.float32)
        xs, ys = jnp.asarray(data), jnp.asarray(np.sin(data))
        opt = optax.adam(1e-2)
        state = opt.init(params)

        @jax.jit
        def step(params, state):
            def loss(p):
                return jnp.mean((jnp.tanh(xs @ p["w1"]) @ p["w2"] - ys) ** 2)
            value, grads = jax.value_and_grad(loss)(params)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state, value

        losses = []
        for _ in range(steps):
            params, state, value = step(params, state)
            losses.append(float(value))
        return losses


if optax is not None:
    out["losses_cpu"], out["losses"] = train(cpu), train(dev)
report(**out)
"""
PLUGIN_TIMEOUT = 240


def case_plugin(k: Kernels) -> str:
    """jax through the PJRT plugin in a child process, on the target of
    this run (cuda: XLA_GPU_PJRT_TARGET=cuda), against jax's cpu."""
    import xla_gpu
    package_root = str(Path(xla_gpu.__file__).resolve().parent.parent)
    env = dict(os.environ, JAX_PLATFORMS="xla_gpu,cpu", XLA_GPU_PJRT_TARGET=k.target,
               PYTHONSAFEPATH="1",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root,
                                                        os.environ.get("PYTHONPATH")])))
    try:
        child = subprocess.run([sys.executable, "-c", PLUGIN_SCRIPT], capture_output=True,
                               text=True, env=env, timeout=PLUGIN_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise CaseFailure(f"the jax child process timed out after {PLUGIN_TIMEOUT} s") from None
    lines = [line for line in child.stdout.splitlines() if line.startswith("PLUGIN_RESULT ")]
    if not lines:
        tail = [line for line in child.stderr.splitlines() if line.strip()]
        raise CaseFailure(f"the jax child process exited {child.returncode}: "
                          f"{tail[-1][:200] if tail else 'no output'}")
    result = json.loads(lines[-1][len("PLUGIN_RESULT "):])
    if "skip" in result:
        raise Skip(result["skip"])
    _expect(result["target"] == k.target, f"the plugin chose {result['target']} "
                                          f"({result['why']}), not {k.target}")
    _expect(result["jit_error"] < 1e-4, f"jitted function differs from jax cpu by "
                                        f"{result['jit_error']:.2e} (relative)")
    _expect(result["round_trip"], "an f16 array did not come back bit-exact")
    _expect(result["donation"], "a donated argument was not consumed, or the sum was wrong")
    notes = [result["kind"], f"jit within {result['jit_error']:.1e} of jax cpu",
             "round trip and donation ok"]
    if "losses" in result:
        cpu, ours = result["losses_cpu"], result["losses"]
        worst = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(cpu, ours))
        _expect(worst <= 1e-3, f"training losses differ from jax cpu: {ours} vs {cpu}")
        _expect(ours[-1] < ours[0], f"the loss did not fall: {ours}")
        notes.append(f"{len(ours)} optax steps match jax cpu (loss {ours[0]:.3f} -> "
                     f"{ours[-1]:.3f})")
    else:
        notes.append("training not run (no optax)")
    return "; ".join(notes)


CASES = [("ptx", case_ptx), ("compile_limits", case_compile_limits),
         ("cubin_fallback", case_cubin_fallback), ("sqrt", case_sqrt),
         ("atomics16", case_atomics16), ("threads", case_threads), ("stream", case_stream),
         ("dlpack", case_dlpack), ("launch_limits", case_launch_limits),
         ("unload", case_unload), ("fft", case_fft), ("gemm", case_gemm),
         ("nccl", case_nccl), ("plugin", case_plugin),
         # Last: if the misaligned read were not caught, its sticky error
         # would fail every case after it.
         ("misaligned", case_misaligned)]


def run_cuda_path(directory: Path, target: str, only: list[str] | None = None) -> int:
    """The cuda path cases, one line each. 0: all passed (or skipped)."""
    if not (directory / "index.json").exists():
        print(f"cuda path: nothing prepared in {directory}")
        return 2
    if target == "cuda":
        from xla_gpu.runtime.cuda import _primary_context
        from xla_gpu.errors import CudaError
        try:
            _primary_context()
        except CudaError as e:
            print(f"cuda path: {e}")
            return 2
    kernels = Kernels(directory, target)
    failed = ran = 0
    for name, case in CASES:
        if only and name not in only:
            continue
        start = time.perf_counter()
        try:
            detail = case(kernels)
            status = "ok"
            ran += 1
        except Skip as e:
            status, detail = "skip", str(e)
        except Exception as e:
            status, detail = "FAIL", f"{type(e).__name__}: {e}".splitlines()[0][:300]
            failed += 1
            ran += 1
            traceback.print_exc(file=sys.stderr)
        print(f"  {name:15s} {status:4s} {time.perf_counter() - start:6.2f}s  {detail}",
              flush=True)
    print(f"cuda path on {target}: {ran - failed} of {ran} cases passed", flush=True)
    return 2 if ran == 0 else (1 if failed else 0)


# -- the kernel table ----------------------------------------------------------------------


def _copy_bandwidth() -> float:
    """Bytes per second of a 256 MiB device-to-device copy (read + write)."""
    from xla_gpu.runtime import DeviceArray
    from xla_gpu.runtime.cuda import _check, _driver, current_context
    cu = _driver()
    n = 256 << 20
    src, dst = DeviceArray((n,), np.uint8), DeviceArray((n,), np.uint8)
    for _ in range(3):
        dst.copy_from_device(src.ptr)
    with current_context():
        start = _check("cuEventCreate", cu.cuEventCreate(0))
        stop = _check("cuEventCreate", cu.cuEventCreate(0))
        try:
            reps = 20
            _check("cuEventRecord", cu.cuEventRecord(start, 0))
            for _ in range(reps):
                dst.copy_from_device(src.ptr)
            _check("cuEventRecord", cu.cuEventRecord(stop, 0))
            _check("cuEventSynchronize", cu.cuEventSynchronize(stop))
            ms = _check("cuEventElapsedTime", cu.cuEventElapsedTime(start, stop))
        finally:
            cu.cuEventDestroy(start)
            cu.cuEventDestroy(stop)
    return 2 * n * reps / (ms / 1e3)


def run_kernels(directory: Path, target: str, iterations: int) -> tuple[int, int]:
    """The kernel table; (rows, bad)."""
    index_path = directory / "index.json"
    if not index_path.exists():
        print(f"no kernels prepared in {directory} (run `prepare` first)")
        return 0, 0
    index = json.loads(index_path.read_text())
    if target == "cuda":
        from xla_gpu import runtime
        if not runtime.cuda_available():
            print("no usable GPU here: run with --target cpu, or on the GPU machine")
            return 0, 0
        copy_bw = _copy_bandwidth()
        print(f"device-to-device copy: {copy_bw / 1e9:.0f} GB/s")
    else:
        copy_bw = None
    rows, bad = [], 0
    for entry in index:
        case = entry["case"]
        if entry.get("program"):
            continue
        if "error" in entry:
            rows.append((case, "-", "-", "NOT COMPILED: " + entry["error"][:60], "", ""))
            continue
        kdir = directory / case
        try:
            fusion = json.loads((kdir / "fusion.json").read_text())["fusion"]
            module = hlo.parse_module((kdir / "fusion.hlo").read_text(), source=case)
            _, comp = fusion_computation(module, fusion)
            inputs = random_inputs(comp, seed=1)
            if target == "cuda":
                kernel = runtime.load(kdir, trusted=True)
            else:
                from xla_gpu.compiler import compile
                kernel = compile((kdir / "fusion.hlo").read_text(), target="cpu",
                                 fusion=fusion)
            spec = kernel.spec
            got = kernel.run(*inputs)
            want = hlo.evaluate(comp, *inputs)
            worst = None
            for k, (g, w, o) in enumerate(zip(got, want, spec.outputs)):
                m = compare(np.asarray(g), np.asarray(w), o.dtype, k,
                            tolerance_type(comp, o.dtype), has_reduction(comp))
                if m is not None and (worst is None or m.count > worst.count):
                    worst = m
            result = "ok" if worst is None else f"MISMATCH {worst}"
            bad += worst is not None
            seconds = kernel.time(*inputs, iterations=iterations, warmup=3)
            moved = sum(p.nbytes for p in spec.parameters) + sum(o.nbytes for o in spec.outputs)
            bw = moved / seconds
            frac = f"{bw / copy_bw:.0%}" if copy_bw else f"{bw / 1e9:.2f} GB/s"
            rows.append((case, spec.emitter, f"{spec.blocks}x{spec.threads}", result,
                         f"{seconds * 1e6:.1f} us", frac))
        except Exception as e:
            bad += 1
            rows.append((case, "-", "-", f"ERROR {type(e).__name__}: {e}".splitlines()[0][:90],
                         "", ""))
            traceback.print_exc(file=sys.stderr)
    header = ("kernel", "emitter", "grid", "result", "time", "of copy bw" if copy_bw else "bw")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(6)]
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    ran = sum(1 for r in rows if not r[3].startswith("NOT COMPILED"))
    print(f"{len(rows) - bad} of {len(rows)} kernels match the reference interpreter")
    return ran, bad


def run(directory: Path, target: str, iterations: int, cuda_path_only: bool = False,
        cases: list[str] | None = None) -> int:
    print(f"== cuda path ({target}) ==", flush=True)
    command = [sys.executable, str(Path(__file__).resolve()), "cuda-path",
               str(directory / "cuda_path"), "--target", target]
    if cases:
        command += ["--cases", *cases]
    try:
        child = subprocess.run(command, timeout=600)
        path_code = child.returncode
    except subprocess.TimeoutExpired:
        print("cuda path: timed out after 600 s")
        path_code = 1
    if path_code not in (0, 1, 2):
        print(f"cuda path: the child process died (exit status {path_code})")
        path_code = 1
    if cuda_path_only:
        return path_code
    print(f"\n== kernels ({target}) ==", flush=True)
    ran, bad = run_kernels(directory, target, iterations)
    ffi_code = 0
    if target == "cuda" and (directory / "ffi").is_dir():
        # The FFI handlers registered for "cuda" (bench/ffi_gpu_check.py), in
        # a child process too: a handler's sticky CUDA error stays there.
        print("\n== FFI custom calls (cuda) ==", flush=True)
        try:
            ffi_code = subprocess.run([sys.executable, str(HERE / "ffi_gpu_check.py"), "run",
                                       str(directory / "ffi")], timeout=300).returncode
        except subprocess.TimeoutExpired:
            print("FFI custom calls: timed out after 300 s")
            ffi_code = 1
    if ran == 0 and path_code == 2:
        return 2
    return 1 if bad or path_code or ffi_code or ran == 0 else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="compile the cuda path and every fusion to artifacts")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "gpu_check")
    p.add_argument("--arch", default="sm_90")
    r = sub.add_parser("run", help="run the cuda path cases, then the kernels")
    r.add_argument("directory", type=Path)
    r.add_argument("--target", choices=["cuda", "cpu"], default="cuda")
    r.add_argument("--iterations", type=int, default=50)
    r.add_argument("--cuda-path-only", action="store_true")
    r.add_argument("--cases", nargs="*", help="run only these cuda path cases")
    c = sub.add_parser("cuda-path", help="the cuda path cases alone (what `run` starts)")
    c.add_argument("directory", type=Path)
    c.add_argument("--target", choices=["cuda", "cpu"], default="cuda")
    c.add_argument("--cases", nargs="*")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.cmd == "prepare":
        code = prepare(args.out, args.arch)
    elif args.cmd == "run":
        code = run(args.directory, args.target, args.iterations, args.cuda_path_only,
                   args.cases)
    else:
        code = run_cuda_path(args.directory, args.target, args.cases)
    print(f"({time.perf_counter() - start:.1f} s)")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
