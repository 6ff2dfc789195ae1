"""What one custom call costs on the cpu target, apart from the handler's
own work: the custom_call thunk calling (a) a C handler built against
jaxlib's FFI headers through libXlaGpuFfi.so, (b) a Python handler, on
tiny buffers; and (c) the native call alone (the call frame built and the
handler run, no Python around it but the ctypes call).

    python bench/ffi_overhead.py [--calls 20000]

Needs jaxlib (the FFI headers) and a C++ compiler; prints microseconds per
call.
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def _build_handler(directory: Path) -> ctypes.CDLL:
    import jax
    out = directory / "libadd_broadcast.so"
    subprocess.run([shutil.which("g++") or "c++", "-std=c++17", "-O2", "-shared", "-fPIC", "-w",
                    f"-I{jax.ffi.include_dir()}",
                    str(ROOT / "tests" / "python" / "ffi_handlers" / "add_broadcast.cc"),
                    "-o", str(out)], check=True)
    return ctypes.CDLL(str(out))


def _per_call(fn, calls: int) -> float:
    for _ in range(min(calls // 10, 1000)):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args(argv)

    import xla_gpu.ffi as ffi
    from xla_gpu.runtime.buffers import BufferSlice
    from xla_gpu.runtime.thunks import ArrayRef, CustomCallThunk, ExecutionContext

    with tempfile.TemporaryDirectory() as tmp:
        lib = _build_handler(Path(tmp))
        ffi.register_ffi_target("bench_add_broadcast", ffi.pycapsule(lib.XlaGpuTestAddBroadcast))
        ffi.register_ffi_target("bench_python", lambda a, b, out: np.add(a, b, out=out))
        memory = np.zeros(64, np.uint8)
        memory[0:32].view(np.float32)[:] = np.arange(8)
        ctx = ExecutionContext("cpu", [memory], {},
                               custom_calls=lambda t: ffi.runtime_handler(t, "cpu"))
        refs = ([ArrayRef(BufferSlice(0, 0, 16), "f32", (4,)),
                 ArrayRef(BufferSlice(0, 16, 16), "f32", (4,))],
                [ArrayRef(BufferSlice(0, 32, 16), "f32", (4,))])
        c_thunk = CustomCallThunk("c", "bench_add_broadcast", *refs, "",
                                  "API_VERSION_TYPED_FFI", [0, 0])
        py_thunk = CustomCallThunk("p", "bench_python", *refs, "", "API_VERSION_TYPED_FFI",
                                   [0, 0])
        c_us = _per_call(lambda: c_thunk.execute(ctx), args.calls)
        py_us = _per_call(lambda: py_thunk.execute(ctx), args.calls)
        site = c_thunk._xla_gpu_ffi_site
        native_us = _per_call(lambda: site.site.run("cpu", 0, 1, site.args, site.rets),
                              args.calls)
        assert memory[32:48].view(np.float32).tolist() == [4, 6, 8, 10]
    print(f"custom_call thunk, C handler:      {c_us:7.2f} us/call")
    print(f"custom_call thunk, Python handler: {py_us:7.2f} us/call")
    print(f"native call alone (ctypes + frame): {native_us:6.2f} us/call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
