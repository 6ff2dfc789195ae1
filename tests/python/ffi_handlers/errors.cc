// Handlers that fail: one always returns an error (the message and code
// must reach the caller), one fails only when its `fail` attribute is set
// (so a program can run it successfully first).

#include <cstdint>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error AlwaysFails(ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer>) {
  return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                    "xla_gpu_test_always_fails: this handler always fails");
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestAlwaysFails, AlwaysFails,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

static ffi::Error FailsWhenAsked(ffi::Buffer<ffi::S32> x,
                                 ffi::ResultBuffer<ffi::S32> out, bool fail) {
  if (fail) {
    return ffi::Error::Internal("xla_gpu_test_fails_when_asked: asked to fail");
  }
  for (size_t i = 0; i < x.element_count(); ++i) {
    out->typed_data()[i] = -x.typed_data()[i];
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestFailsWhenAsked, FailsWhenAsked,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Attr<bool>("fail"));
