"""The cuda path, checked where no GPU is needed: buffer alignment (and the
cpu target's misaligned inputs end to end), `__cuda_array_interface__` and
DLPack parsing with objects that speak the protocols, stream handles,
launch limits, the runtime without a driver, and the PTX the cuda target
emits (IEEE sqrt, native 16-bit atomics, gpu-scope atomics, .maxntid,
ptxas resource checks). bench/gpu_check.py runs the same paths on a GPU."""

from __future__ import annotations

import ctypes
import gc
import json
import re
import weakref

import ml_dtypes
import numpy as np
import pytest

import xla_gpu
from xla_gpu.errors import ArgumentError, CompileError, CudaUnavailableError, ResourceError
from xla_gpu.runtime import cuda, interop
from xla_gpu.runtime.spec import (DEFAULT_ALIGNMENT, ArgSpec, KernelSpec, aligned_copy,
                                  aligned_empty, is_aligned)

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
  p = f32[64,512] parameter(0)
  ROOT s = f32[64,512] sqrt(p)
}
ENTRY main {
  p = f32[64,512] parameter(0)
  ROOT fusion = f32[64,512] fusion(p), kind=kLoop, calls=f
}
"""


def scatter_add(dtype: str, combiner: str = "add") -> str:
    return f"""HloModule m
combine {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] {combiner}(a, b)
}}
scatter {{
  p0 = {dtype}[64,8] parameter(0)
  p1 = s32[512,1] parameter(1)
  p2 = {dtype}[512,1,8] parameter(2)
  ROOT sc = {dtype}[64,8] scatter(p0, p1, p2), update_window_dims={{1,2}}, inserted_window_dims={{}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=combine
}}
ENTRY main {{
  p0 = {dtype}[64,8] parameter(0)
  p1 = s32[512,1] parameter(1)
  p2 = {dtype}[512,1,8] parameter(2)
  ROOT f = {dtype}[64,8] fusion(p0, p1, p2), kind=kLoop, calls=scatter
}}
"""


def misaligned(shape, dtype, offset_bytes: int) -> np.ndarray:
    """A C-contiguous array whose data sits `offset_bytes` past a 16-byte
    boundary (numpy calls it aligned: the element size divides it)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = np.zeros(n * dtype.itemsize + 64, np.uint8)
    start = (-raw.ctypes.data % 16) + offset_bytes
    out = raw[start:start + n * dtype.itemsize].view(dtype).reshape(shape)
    assert out.ctypes.data % 16 == offset_bytes % 16 and out.flags.c_contiguous
    return out


# -- alignment --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, ml_dtypes.bfloat16])
@pytest.mark.parametrize("alignment", [16, 64, 256])
def test_aligned_empty_starts_on_the_boundary(dtype, alignment):
    for shape in [(0,), (1,), (7, 3), (1024,)]:
        a = aligned_empty(shape, dtype, alignment)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous
        assert a.ctypes.data % alignment == 0 or a.size == 0
    x = misaligned((5, 7), dtype, 4 if np.dtype(dtype).itemsize <= 4 else 8)
    x[...] = np.arange(35).reshape(5, 7)
    y = aligned_copy(x, alignment)
    assert is_aligned(y, alignment) and not is_aligned(x, 16)
    np.testing.assert_array_equal(y, x)


def test_kernel_json_records_alignment_and_old_files_mean_16():
    spec = KernelSpec("k", "cuda", "sm_90", 128, 4, 0,
                      [ArgSpec((4, 8), "f32")], [ArgSpec((4, 8), "f32", 64)])
    data = json.loads(spec.to_json())
    assert data["parameters"][0]["alignment"] == DEFAULT_ALIGNMENT == 16
    assert data["outputs"][0]["alignment"] == 64
    assert KernelSpec.from_json(spec.to_json()) == spec
    # A kernel.json written before the field existed.
    for arg in data["parameters"] + data["outputs"]:
        del arg["alignment"]
    old = KernelSpec.from_json(json.dumps(data))
    assert [a.alignment for a in old.parameters + old.outputs] == [16, 16]
    for bad in [3, 0, -16, 8192, True, "16"]:
        data["parameters"][0]["alignment"] = bad
        with pytest.raises(ValueError, match="alignment"):
            KernelSpec.from_json(json.dumps(data))


def test_host_buffers_copy_only_misaligned_arguments():
    spec = KernelSpec("k", "cpu", "", 128, 4, 0,
                      [ArgSpec((8, 8), "f32"), ArgSpec((8, 8), "f32"), ArgSpec((8, 8), "f32")],
                      [ArgSpec((8, 8), "f32"), ArgSpec((8, 8), "f32")], aliases={1: 2})
    good = aligned_empty((8, 8), np.float32)
    good[...] = 1
    bad = misaligned((8, 8), np.float32, 4)
    bad[...] = 2
    in_place = aligned_empty((8, 8), np.float32)
    in_place[...] = 3
    buffers, outputs = spec.host_buffers([good, bad, in_place])
    assert buffers[0] is good                        # used as it is
    assert buffers[1] is not bad and is_aligned(buffers[1])
    np.testing.assert_array_equal(buffers[1], bad)
    assert buffers[2] is not in_place                # never written in place
    assert all(is_aligned(b) for b in buffers) and all(is_aligned(o) for o in outputs)
    assert outputs[1] is buffers[2] and len(buffers) == 4


@pytest.mark.parametrize("offset", [4, 8, 12])
def test_cpu_target_takes_misaligned_inputs(offset):
    """Issue 11: this input made the host kernel's 16-byte loads fault."""
    exe = xla_gpu.compile(MULTIPLY, target="cpu", cache=False)
    rng = np.random.default_rng(offset)
    x = misaligned((1024, 512), np.float32, offset)
    x[...] = rng.standard_normal((1024, 512))
    y = misaligned((1024, 512), np.float32, 16 - offset)
    y[...] = rng.standard_normal((1024, 512))
    (got,) = exe.run(x, y)
    np.testing.assert_array_equal(got, x * y)
    # The exact array of the report: a view one element into a buffer.
    z = np.zeros(1024 * 512 + 1, np.float32)[1:].reshape(1024, 512)
    if z.ctypes.data % 16:
        z[...] = 2
        (got,) = exe.run(z, z)
        assert (got == 4).all()


def test_saved_cpu_kernel_takes_misaligned_inputs(tmp_path):
    from xla_gpu import runtime
    exe = xla_gpu.compile(MULTIPLY, target="cpu", cache=False)
    if exe.host_library is None:
        pytest.skip("no host shared object (no linker)")
    exe.save(tmp_path / "k")
    kernel = runtime.load(tmp_path / "k", trusted=True)
    x = misaligned((1024, 512), np.float32, 8)
    x[...] = 3
    (got,) = kernel.run(x, x)
    assert (got == 9).all()


# -- __cuda_array_interface__ -------------------------------------------------------


class FakeCAI:
    """An object that only speaks the CUDA array interface."""

    def __init__(self, **iface):
        self.__cuda_array_interface__ = {"version": 3, "strides": None, **iface}


def test_cai_parsing():
    a = FakeCAI(shape=(4, 8), typestr="<f4", data=(0x10004, False), stream=7)
    view = interop.from_cuda_array_interface(a)
    assert (view.pointer, view.shape, view.dtype, view.stream) == (0x10004, (4, 8),
                                                                  np.float32, 7)
    assert view.is_c_contiguous and view.on_device and view.nbytes == 128
    assert view.misalignment(16) == 4 and view.misalignment(4) == 0
    assert view.protocol == "cuda_array_interface" and view.owner is a
    # Explicit C strides are contiguous; other strides are not.
    assert interop.from_cuda_array_interface(
        FakeCAI(shape=(4, 8), typestr="<f4", data=(16, False), strides=(32, 4))).is_c_contiguous
    assert not interop.from_cuda_array_interface(
        FakeCAI(shape=(4, 8), typestr="<f4", data=(16, False), strides=(4, 16))).is_c_contiguous
    # Version 2 has no stream; version 3 without one needs no wait.
    v2 = FakeCAI(shape=(2,), typestr="<f2", data=(16, True), stream=5)
    v2.__cuda_array_interface__["version"] = 2
    assert interop.from_cuda_array_interface(v2).stream is None
    assert interop.from_cuda_array_interface(v2).read_only
    assert interop.from_cuda_array_interface(
        FakeCAI(shape=(2,), typestr="<f2", data=(16, False))).stream is None


def test_cai_errors_name_the_problem(monkeypatch):
    with pytest.raises(ArgumentError, match="stream 0 is disallowed"):
        interop.from_cuda_array_interface(
            FakeCAI(shape=(2,), typestr="<f4", data=(16, False), stream=0))
    with pytest.raises(ArgumentError, match="masked"):
        interop.from_cuda_array_interface(
            FakeCAI(shape=(2,), typestr="<f4", data=(16, False), mask=object()))
    with pytest.raises(ArgumentError, match="malformed"):
        interop.from_cuda_array_interface(FakeCAI(shape=(2,), data=(16, False)))
    with pytest.raises(ArgumentError, match="big-endian"):
        interop.from_cuda_array_interface(FakeCAI(shape=(2,), typestr=">f4", data=(16, False)))
    with pytest.raises(ArgumentError, match="1 strides for 2 dimensions"):
        interop.from_cuda_array_interface(
            FakeCAI(shape=(2, 2), typestr="<f4", data=(16, False), strides=(4,)))
    # Numba's opt-out of the stream wait.
    monkeypatch.setenv("CUDA_ARRAY_INTERFACE_SYNC", "0")
    assert interop.from_cuda_array_interface(
        FakeCAI(shape=(2,), typestr="<f4", data=(16, False), stream=9)).stream is None


def test_check_arguments_turns_device_arrays_into_views():
    spec = KernelSpec("k", "cuda", "sm_90", 128, 1, 0, [ArgSpec((4, 8), "f32"),
                                                        ArgSpec((4, 8), "bf16")],
                      [ArgSpec((4, 8), "f32")])
    a = FakeCAI(shape=(4, 8), typestr="<f4", data=(4096, False), stream=3)
    host = np.ones((4, 8), ml_dtypes.bfloat16)
    views = spec.check_arguments([a, host], device_ok=True)
    assert isinstance(views[0], interop.ForeignArray) and views[0].stream == 3
    assert isinstance(views[1], np.ndarray)
    with pytest.raises(ArgumentError, match=r"argument 0: expected shape \[4, 8\]"):
        spec.check_arguments([FakeCAI(shape=(8, 4), typestr="<f4", data=(0, False)), host],
                             device_ok=True)
    with pytest.raises(ArgumentError, match="argument 0: expected dtype f32"):
        spec.check_arguments([FakeCAI(shape=(4, 8), typestr="<i4", data=(0, False)), host],
                             device_ok=True)
    with pytest.raises(ArgumentError, match="argument 0: device array must be C-contiguous"):
        spec.check_arguments([FakeCAI(shape=(4, 8), typestr="<f4", data=(0, False),
                                      strides=(4, 16)), host], device_ok=True)
    # The cpu target takes host arrays only, and says so.
    with pytest.raises(ArgumentError, match="argument 0: a CUDA device array cannot be passed"):
        spec.check_arguments([a, host])
    # bf16 exported as raw 2-byte values is accepted (CAI has no bf16 typestr).
    views = spec.check_arguments([a, FakeCAI(shape=(4, 8), typestr="<V2", data=(0, False))],
                                 device_ok=True)
    assert views[1].dtype.itemsize == 2


# -- DLPack -----------------------------------------------------------------------


def test_dlpack_numpy_producer_versioned_and_legacy():
    base = np.arange(48, dtype=np.float32).reshape(6, 8)
    for kwargs, name in [({"max_version": (1, 1)}, "dltensor_versioned"), ({}, "dltensor")]:
        sub = base[1:, 2:]
        alive = weakref.ref(sub)
        capsule = sub.__dlpack__(**kwargs)
        del sub
        assert f'"{name}"' in repr(capsule)
        view = interop.from_dlpack_capsule(capsule, owner=None)
        assert f'"used_{name}"' in repr(capsule)    # consumed: its destructor is inert
        assert view.device_type == interop.DLPACK_CPU and not view.on_device
        assert view.shape == (5, 6) and view.dtype == np.float32
        assert view.pointer == base.ctypes.data + (8 + 2) * 4
        assert view.strides == (32, 4) and not view.is_c_contiguous
        first = ctypes.c_float.from_address(view.pointer).value
        assert first == base[1, 2]
        del capsule
        gc.collect()
        assert alive() is not None                    # the producer keeps it alive...
        view.release()
        view.release()                                # ...until released, once
        gc.collect()
        assert alive() is None


class _Deleter:
    """A DLManagedTensor built by hand (device memory cannot exist here)."""

    def __init__(self, versioned: bool, *, device_type=2, device_id=0, data=0x7000,
                 byte_offset=16, shape=(3, 5), strides=(5, 1), code=4, bits=16, lanes=1,
                 flags=0, major=1):
        self.calls = 0
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides) if strides else None
        self.callback = interop._DELETER(self._deleted)
        cls = interop._DLManagedTensorVersioned if versioned else interop._DLManagedTensor
        self.managed = cls()
        t = self.managed.dl_tensor
        t.data, t.byte_offset, t.ndim = data, byte_offset, len(shape)
        t.device.device_type, t.device.device_id = device_type, device_id
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, lanes
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        if self.strides is not None:
            t.strides = ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
        self.managed.deleter = ctypes.cast(self.callback, ctypes.c_void_p).value
        if versioned:
            self.managed.version.major, self.managed.flags = major, flags
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_void_p]
        self.capsule = new(ctypes.addressof(self.managed),
                           b"dltensor_versioned" if versioned else b"dltensor", None)

    def _deleted(self, address):
        assert address == ctypes.addressof(self.managed)
        self.calls += 1


@pytest.mark.parametrize("versioned", [True, False])
def test_dlpack_capsule_fields_and_deleter(versioned):
    made = _Deleter(versioned, flags=1)
    view = interop.from_dlpack_capsule(made.capsule)
    assert view.device_type == interop.DLPACK_CUDA and view.on_device
    assert view.pointer == 0x7000 + 16 and view.misalignment(16) == 0
    assert view.shape == (3, 5) and view.dtype == ml_dtypes.bfloat16
    assert view.strides == (10, 2) and view.is_c_contiguous
    assert view.read_only == versioned                 # DLPACK_FLAG_BITMASK_READ_ONLY
    assert made.calls == 0
    del view                                           # collected: deleter called once
    assert made.calls == 1


def test_dlpack_capsule_refusals_still_call_the_deleter():
    for kwargs, message in [({"lanes": 4}, "4 lanes"), ({"code": 0, "bits": 4}, "packed below"),
                            ({"code": 2, "bits": 8}, "unsupported DLPack dtype"),
                            ({"major": 2}, "major version 2")]:
        made = _Deleter(True, **kwargs)
        with pytest.raises(ArgumentError, match=message):
            interop.from_dlpack_capsule(made.capsule)
        assert made.calls == 1
    with pytest.raises(ArgumentError, match="unused DLPack capsule"):
        interop.from_dlpack_capsule(object())
    made = _Deleter(False)
    interop.from_dlpack_capsule(made.capsule).release()
    with pytest.raises(ArgumentError, match="unused DLPack capsule"):   # already used
        interop.from_dlpack_capsule(made.capsule)


def test_dlpack_dtypes():
    assert interop.dlpack_dtype(2, 32) == np.float32
    assert interop.dlpack_dtype(6, 8) == np.bool_
    assert interop.dlpack_dtype(5, 64) == np.complex64
    assert interop.dlpack_dtype(10, 8) == ml_dtypes.float8_e4m3fn
    assert interop.dlpack_dtype(12, 8) == ml_dtypes.float8_e5m2
    assert interop.dlpack_dtype(1, 64) == np.uint64


class FakeDLPack:
    """A CUDA producer by the DLPack protocol: records the stream the
    consumer asked for; `legacy` producers know no max_version."""

    def __init__(self, legacy: bool = False, device=(2, 0)):
        self.legacy, self.device, self.asked = legacy, device, []
        self.made: list[_Deleter] = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, **kwargs):
        if self.legacy and kwargs:
            raise TypeError("unexpected keyword argument 'max_version'")
        self.asked.append(stream)
        made = _Deleter(not self.legacy, device_type=self.device[0], device_id=self.device[1],
                        code=2, bits=32, shape=(4, 8), strides=None, byte_offset=0)
        self.made.append(made)
        return made.capsule


def test_dlpack_producer_gets_our_stream():
    producer = FakeDLPack()
    assert interop.is_foreign_array(producer) and not interop.is_foreign_array(np.zeros(2))
    view = interop.foreign_array(producer, consumer_stream=0)
    assert producer.asked == [interop.LEGACY_DEFAULT_STREAM]   # stream 0 is DLPack's 1
    assert view.stream is None and view.protocol == "dlpack" and view.owner is producer
    assert view.shape == (4, 8) and view.strides is None
    view.release()
    legacy = FakeDLPack(legacy=True)
    interop.foreign_array(legacy, consumer_stream=0xABC).release()
    assert legacy.asked == [0xABC] and legacy.made[0].calls == 1
    # A CPU producer is a host array, not a device one; so is an array
    # whose __cuda_array_interface__ property raises (jax on the host).
    assert not interop.is_foreign_array(FakeDLPack(device=(1, 0)))

    class HostJaxLike(FakeDLPack):
        @property
        def __cuda_array_interface__(self):
            raise ValueError("only defined for NVIDIA GPU buffers")
    assert not interop.is_foreign_array(HostJaxLike(device=(1, 0)))
    assert interop.is_foreign_array(HostJaxLike())            # DLPack says CUDA
    view = interop.foreign_array(HostJaxLike())
    assert view.protocol == "dlpack"
    view.release()
    # Device id mismatch between __dlpack_device__ and the tensor.
    liar = FakeDLPack()
    liar.__dlpack_device__ = lambda: (2, 1)
    with pytest.raises(ArgumentError, match="__dlpack_device__ says"):
        interop.foreign_array(liar)
    assert liar.made[0].calls == 1


def test_dlpack_argument_through_check_arguments():
    spec = KernelSpec("k", "cuda", "sm_90", 128, 1, 0, [ArgSpec((4, 8), "f32")],
                      [ArgSpec((4, 8), "f32")])
    producer = FakeDLPack()
    (view,) = spec.check_arguments([producer], device_ok=True, stream=0x55)
    assert isinstance(view, interop.ForeignArray) and producer.asked == [0x55]
    view.release()
    # The cpu target reads a CPU DLPack producer as a host array.

    class HostOnly:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    host = np.arange(32, dtype=np.float32).reshape(4, 8)
    (got,) = spec.check_arguments([HostOnly(host)])
    np.testing.assert_array_equal(got, host)


# -- streams and limits ---------------------------------------------------------------


def test_stream_handles():
    from cuda.bindings import driver
    assert cuda.stream_handle(None) == 0 and cuda.stream_handle(0x1234) == 0x1234
    assert cuda.stream_handle(driver.CUstream(0x99)) == 0x99

    class CoreStream:                     # cuda.core's protocol
        def __cuda_stream__(self):
            return (0, 0x77)
    assert cuda.stream_handle(CoreStream()) == 0x77
    for bad in [True, -1, "s", 1.5]:
        with pytest.raises(ArgumentError, match="stream"):
            cuda.stream_handle(bad)
    assert cuda._same_stream(0, 1) and cuda._same_stream(5, 5) and not cuda._same_stream(0, 2)


def test_launch_limits():
    cuda.check_launch("k", 1024, (1 << 31) - 1)
    cuda.check_launch("k", 128, (100, 65535, 65535))
    cases = [((1025, 1), "1025 threads per block; CUDA allows 1 to 1024"),
             ((0, 1), "0 threads per block"),
             ((128, 1 << 31), "a grid of 2147483648 blocks in x; CUDA allows 1 to 2147483647"),
             ((128, (4, 65536)), "a grid of 65536 blocks in y"),
             ((128, (4, 1, 70000)), "a grid of 70000 blocks in z")]
    for (threads, blocks), message in cases:
        with pytest.raises(ResourceError, match=re.escape(message)):
            cuda.check_launch("k", threads, blocks)
    with pytest.raises(ResourceError, match="40960 bytes of static and 200000 of dynamic"):
        cuda.check_launch("k", 128, 1, 200000, static_shared_bytes=40960)
    cuda.check_launch("k", 128, 1, 100 * 1024)        # opt-in: fine on sm_90
    with pytest.raises(ResourceError, match="at most 101376"):
        cuda.check_launch("k", 128, 1, 100 * 1024, limits=cuda.limits_for_arch("sm_89"))
    # Registers: allocated per warp in units of 256.
    assert cuda.registers_per_block(24, 128) == 4 * 768
    assert cuda.registers_per_block(65, 32) == 2304
    cuda.check_launch("k", 1024, 1, registers_per_thread=64)
    with pytest.raises(ResourceError, match="72 registers per thread x 1024 threads need 73728"):
        cuda.check_launch("k", 1024, 1, registers_per_thread=72)
    with pytest.raises(ResourceError, match="the loaded kernel allows at most 640"):
        cuda.check_launch("k", 1024, 1, registers_per_thread=96, max_threads=640)


def test_runtime_without_a_driver_says_so():
    if cuda.cuda_available():
        pytest.skip("a GPU is present: bench/gpu_check.py covers the driver paths")
    spec = KernelSpec("k", "cuda", "sm_90", 128, 1, 0, [ArgSpec((4,), "f32")],
                      [ArgSpec((4,), "f32")])
    kernel = cuda.CudaKernel(spec, ptx=".version 7.8\n")
    with pytest.raises(CudaUnavailableError):
        kernel.run(np.zeros(4, np.float32))
    with pytest.raises(CudaUnavailableError):
        cuda.DeviceArray((4,), np.float32)
    with pytest.raises(CudaUnavailableError):
        with cuda.current_context():
            pass
    # Bad arguments are reported before the driver is needed.
    with pytest.raises(ArgumentError, match="takes 1 arguments"):
        kernel.run()
    with pytest.raises(ValueError, match="cubin or PTX"):
        cuda.CudaKernel(spec)
    assert cuda.device_count() == 0


# -- the PTX of the cuda target ------------------------------------------------------------


def test_sqrt_is_ieee_as_in_xla():
    exe = xla_gpu.compile(SQRT, target="cuda", cache=False)
    assert "sqrt.rn.f32" in exe.ptx and "sqrt.approx" not in exe.ptx


def test_ptx_version_is_the_oldest_that_knows_sm_90():
    exe = xla_gpu.compile(SQRT, target="cuda", cache=False)
    version = re.search(r"^\.version (\d+)\.(\d+)", exe.ptx, re.M)
    assert version and (int(version[1]), int(version[2])) <= (7, 8)


@pytest.mark.parametrize("dtype,ptx", [("f16", "atom.global.add.noftz.f16"),
                                       ("bf16", "atom.global.add.noftz.bf16")])
def test_16bit_float_atomic_add_is_native(dtype, ptx):
    exe = xla_gpu.compile(scatter_add(dtype), target="cuda", cache=False)
    assert exe.spec.emitter == "scatter"
    assert ptx in exe.ptx and "cas" not in exe.ptx


def test_atomics_are_gpu_scope():
    # A multiply has no hardware atomic: a CAS loop, at gpu scope.
    exe = xla_gpu.compile(scatter_add("f32", "multiply"), target="cuda", cache=False)
    atomics = [line.split()[0] for line in exe.ptx.splitlines() if "atom." in line]
    assert atomics and all(".gpu." in a for a in atomics if "cas" in a)
    assert not any(".sys" in line for line in exe.ptx.splitlines())
    assert any("ld.relaxed.gpu" in line for line in exe.ptx.splitlines())


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_16bit_float_atomic_add_on_the_cpu_target(dtype):
    """The host keeps the CAS loop; sums of ones are exact in any order."""
    exe = xla_gpu.compile(scatter_add(dtype), target="cpu", cache=False)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 64, (512, 1)).astype(np.int32)
    np_dtype = np.float16 if dtype == "f16" else ml_dtypes.bfloat16
    (got,) = exe.run(np.zeros((64, 8), np_dtype), idx, np.ones((512, 1, 8), np_dtype))
    want = np.zeros((64, 8), np.float32)
    np.add.at(want, idx[:, 0], 1.0)
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_kernels_carry_maxntid_and_ptxas_resources():
    from xla_gpu.backends.cuda import codegen
    exe = xla_gpu.compile(MULTIPLY, target="cuda", cache=False)
    assert codegen.ptx_block_size(exe.ptx) == {exe.spec.name: exe.spec.threads}
    resources = codegen.kernel_resources(exe.ptx)
    if resources is None:
        pytest.skip("neither ptxas nor nvJitLink")
    r = resources[exe.spec.name]
    assert 0 < r.registers <= 255 and r.block_size == exe.spec.threads
    assert r.spill_store_bytes == 0
    codegen.check_resources(resources, "sm_90")
    too_many = {r.name: codegen.KernelResources(r.name, registers=128, block_size=1024)}
    with pytest.raises(codegen.LaunchLimitError,
                       match="128 registers per thread x 1024 threads need 131072"):
        codegen.check_resources(too_many, "sm_90")
    assert issubclass(codegen.LaunchLimitError, CompileError)


@pytest.mark.parametrize("source,fusion", [("transpose_021.hlo", None),
                                           ("reduction.hlo", "row"),
                                           ("sort.hlo", None)])
def test_every_emitter_launches_within_maxntid(source, fusion):
    """.maxntid comes from the thread ids' range: it must equal the launch's
    threads (a smaller one would make the driver refuse the launch)."""
    from pathlib import Path

    from xla_gpu.backends.cuda import codegen
    path = Path(__file__).resolve().parents[2] / "lit" / "emitters" / source
    exe = xla_gpu.compile(path.read_text(), target="cuda", fusion=fusion, cache=False)
    assert codegen.ptx_block_size(exe.ptx) == {exe.spec.name: exe.spec.threads}
    resources = codegen.kernel_resources(exe.ptx)
    if resources is not None and exe.spec.emitter == "transpose":
        assert resources[exe.spec.name].shared_bytes > 0      # its tile, from ptxas -v


def test_ptxas_log_parsing():
    from xla_gpu.backends.cuda import codegen
    log = ("ptxas info    : 0 bytes gmem\n"
           "ptxas info    : Compiling entry function 'k1' for 'sm_90'\n"
           "ptxas info    : Function properties for k1\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 8448 bytes smem, "
           "368 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function 'k2' for 'sm_90'\n"
           "ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]\n")
    ptx = (".visible .entry k1(\n\t.param .u64 a\n)\n.maxntid 256, 1, 1\n{\n}\n"
           ".visible .entry k2(\n)\n{\n}\n")
    got = codegen.parse_ptxas_info(log, ptx)
    assert got["k1"] == codegen.KernelResources("k1", 40, 8448, 8, 4, 4, 256)
    assert got["k2"] == codegen.KernelResources("k2", 8, 0, block_size=0)
    codegen.check_resources(got, "sm_90")
    big = codegen.KernelResources("k3", 8, 70000, block_size=128)
    codegen.check_resources({"k3": big}, "sm_90")
    with pytest.raises(codegen.LaunchLimitError,
                       match="70000 bytes of static .* at most 65536 .*sm_75"):
        codegen.check_resources({"k3": big}, "sm_75")


def test_grid_over_the_cuda_limit_is_a_compile_error():
    # 2^57 f32 elements: 2^48 blocks of 128 threads x 4. Past 2^31 - 1 blocks
    # the loop emitter's grid goes 2-D (x, y), and here y would need 131073
    # rows of 2^31 - 1 blocks: CUDA allows 65535.
    n = 1 << 57
    text = f"""HloModule m
f {{
  p = f32[{n}] parameter(0)
  ROOT n = f32[{n}] negate(p)
}}
ENTRY main {{
  p = f32[{n}] parameter(0)
  ROOT fusion = f32[{n}] fusion(p), kind=kLoop, calls=f
}}
"""
    with pytest.raises(CompileError, match="blocks in y exceeds CUDA's limit of 65535"):
        xla_gpu.compile(text, target="cuda", cache=False)


# -- bench/gpu_check.py's cuda path, on the cpu target ------------------------------------


def test_gpu_check_cuda_path_runs_on_the_cpu_target(tmp_path, capsys):
    """The script a lent GPU runs first: its prepared artifacts and every
    cpu-capable case (the cuda-only ones say so), and exit status 2 when
    nothing was prepared."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[3] / "bench" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    assert gpu_check.run_cuda_path(tmp_path / "nothing", "cpu") == 2
    index = gpu_check._prepare_cuda_path(tmp_path / "cuda_path", "sm_90")
    assert set(index["kernels"]) == set(gpu_check.CUDA_PATH)
    assert "exceeds CUDA's limit" in index["compile_errors"]["huge_grid"]
    assert set(index["nccl"]) == {"nccl_one", "nccl_two"}   # compiled for cuda
    assert gpu_check.run_cuda_path(tmp_path / "cuda_path", "cpu") == 0
    lines = capsys.readouterr().out.splitlines()
    status = {line.split()[0]: line.split()[1] for line in lines if line.startswith("  ")}
    assert status == {"ptx": "ok", "compile_limits": "ok", "cubin_fallback": "skip",
                      "sqrt": "ok", "atomics16": "ok", "threads": "ok", "stream": "skip",
                      "dlpack": "ok", "launch_limits": "ok", "unload": "skip",
                      "misaligned": "ok", "fft": "ok", "gemm": "ok", "nccl": "ok",
                      "plugin": "ok"}


def test_small_outputs_share_one_allocation():
    """A run's small outputs (rng_bit_generator: 11 of them; its run took
    0.47 ms on the H200, about 0.42 of it outside the kernels) are laid out
    in one allocation at 256-byte offsets; large ones get their own."""
    big = cuda.GROUPED_ARRAY_BYTES + 1
    offsets, total = cuda.group_layout([4, 0, 300, big, 256])
    assert offsets == {0: 0, 1: 256, 2: 256, 4: 768}
    assert total == 1024
    assert cuda.group_layout([4]) == ({}, 0)            # one array: its own
    assert cuda.group_layout([big, big]) == ({}, 0)
    assert cuda.group_layout([0, 0]) == ({0: 0, 1: 0}, 1)


@pytest.mark.skipif(not cuda.cuda_available(), reason="needs a GPU")
def test_grouped_device_arrays_round_trip_and_outlive_their_siblings():
    arrays = [np.arange(n, dtype=np.float32) * k for k, n in enumerate((3, 70, 1, 0), 1)]
    group = cuda.DeviceArray.group([(a.shape, a.dtype) for a in arrays])
    assert group[0]._block is not None and len({id(g._block) for g in group}) == 1
    for device, host in zip(group, arrays):
        device.copy_from_host(host)
    kept = group[1]
    del group
    import gc
    gc.collect()
    np.testing.assert_array_equal(kept.to_host(), arrays[1])
    kept.free()
    assert kept.ptr == 0
