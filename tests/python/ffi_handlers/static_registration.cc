// A handler that registers itself when its library is loaded, through the
// API getter XLA exports (XLA_FFI_REGISTER_HANDLER(XLA_FFI_GetApi(), ...)),
// the way handlers linked into an XLA binary do: the library must be loaded
// after the runtime that exports XLA_FFI_GetApi (xla_gpu.ffi.load_library).
//   target "xla_gpu_test_static_negate", platform "Host": out = -x (f32)

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error StaticNegate(ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> out) {
  for (size_t i = 0; i < x.element_count(); ++i) {
    out->typed_data()[i] = -x.typed_data()[i];
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER(kStaticNegate, StaticNegate,
                       ffi::Ffi::Bind()
                           .Arg<ffi::Buffer<ffi::F32>>()
                           .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_REGISTER_HANDLER(XLA_FFI_GetApi(), "xla_gpu_test_static_negate", "Host",
                         kStaticNegate);
