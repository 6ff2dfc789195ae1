// The XLA FFI handler that the ffi_call program calls:
// target "xla_gpu_test_add_scaled", platform cpu.
//
//   mode 0: out[i] = scale * x[i]
//   mode 1: out[i] = scale * x[i] + y[i]
//   mode 2: out[i] = scale * (x[i] - y[i])
//
// x, y and out are f32 arrays of the same shape; `scale` is an f32
// attribute, `mode` an s32 attribute. Another mode is an error
// (InvalidArgument), as is a shape mismatch.
//
// Built by generate.py with
//   g++ -std=c++17 -O2 -shared -fPIC -I$(python -c "import jax; print(jax.ffi.include_dir())") handler.cc -o libhandler.so
// and registered in jax with
//   jax.ffi.register_ffi_target("xla_gpu_test_add_scaled",
//                               jax.ffi.pycapsule(lib.XlaGpuTestAddScaled),
//                               platform="cpu")

#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error AddScaled(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> y,
                            ffi::ResultBuffer<ffi::F32> out, float scale,
                            int32_t mode) {
  const size_t n = x.element_count();
  if (y.element_count() != n || out->element_count() != n) {
    return ffi::Error::InvalidArgument(
        "xla_gpu_test_add_scaled: x, y and the result differ in size");
  }
  const float* xs = x.typed_data();
  const float* ys = y.typed_data();
  float* os = out->typed_data();
  switch (mode) {
    case 0:
      for (size_t i = 0; i < n; ++i) os[i] = scale * xs[i];
      break;
    case 1:
      for (size_t i = 0; i < n; ++i) os[i] = scale * xs[i] + ys[i];
      break;
    case 2:
      for (size_t i = 0; i < n; ++i) os[i] = scale * (xs[i] - ys[i]);
      break;
    default:
      return ffi::Error::InvalidArgument(
          "xla_gpu_test_add_scaled: unknown mode " + std::to_string(mode));
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestAddScaled, AddScaled,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("scale")
                                  .Attr<int32_t>("mode"));
