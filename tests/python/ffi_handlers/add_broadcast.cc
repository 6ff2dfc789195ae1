// The custom call of XLA's custom-call guide: out[i] = in0[i % d0] + in1[i]
// over 1-D f32 buffers (`in0` is broadcast cyclically over `in1`).
// Exported as the C symbol XlaGpuTestAddBroadcast, registered with
//   register_ffi_target("xla_gpu_test_add_broadcast",
//                       pycapsule(lib.XlaGpuTestAddBroadcast), platform="cpu")
// The binding (BufferR1<F32>) refuses any other element type or rank.

#include <cstddef>
#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

using BufferF32 = ffi::BufferR1<ffi::F32>;

static ffi::Error AddBroadcast(BufferF32 in0, BufferF32 in1,
                               ffi::Result<BufferF32> out) {
  const size_t d0 = in0.dimensions()[0];
  const size_t d1 = in1.dimensions()[0];
  if (out->dimensions()[0] != static_cast<int64_t>(d1)) {
    return ffi::Error::InvalidArgument(
        "xla_gpu_test_add_broadcast: the result must have in1's size");
  }
  if (d0 == 0 && d1 != 0) {
    return ffi::Error::InvalidArgument(
        "xla_gpu_test_add_broadcast: in0 is empty");
  }
  const float* a = in0.typed_data();
  const float* b = in1.typed_data();
  float* o = out->typed_data();
  for (size_t i = 0; i < d1; ++i) o[i] = a[i % d0] + b[i];
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestAddBroadcast, AddBroadcast,
                              ffi::Ffi::Bind()
                                  .Arg<BufferF32>()
                                  .Arg<BufferF32>()
                                  .Ret<BufferF32>());
