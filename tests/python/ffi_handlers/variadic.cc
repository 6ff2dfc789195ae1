// Variadic arguments and results (RemainingArgs / RemainingRets): any
// number of f32 buffers of one size n in, any number of f32 buffers of size
// n out; result j gets   sum_k args[k][i] * (k + 1) + j   at i. The first
// argument is bound explicitly before the remaining ones, as XLA allows.

#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

static ffi::Error WeightedSums(ffi::AnyBuffer first, ffi::RemainingArgs rest,
                               ffi::RemainingRets results) {
  const size_t n = first.element_count();
  if (first.element_type() != ffi::F32) {
    return ffi::Error::InvalidArgument("xla_gpu_test_variadic: f32 buffers only");
  }
  for (size_t j = 0; j < results.size(); ++j) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> out = results.get<ffi::AnyBuffer>(j);
    if (out.has_error()) return out.error();
    if ((*out)->element_type() != ffi::F32 || (*out)->element_count() != n) {
      return ffi::Error::InvalidArgument(
          "xla_gpu_test_variadic: result " + std::to_string(j) +
          " is not an f32 buffer of the arguments' size");
    }
    float* o = (*out)->typed_data<float>();
    const float* a0 = first.typed_data<float>();
    for (size_t i = 0; i < n; ++i) o[i] = a0[i] + static_cast<float>(j);
    for (size_t k = 0; k < rest.size(); ++k) {
      ffi::ErrorOr<ffi::AnyBuffer> arg = rest.get<ffi::AnyBuffer>(k);
      if (arg.has_error()) return arg.error();
      if (arg->element_type() != ffi::F32 || arg->element_count() != n) {
        return ffi::Error::InvalidArgument(
            "xla_gpu_test_variadic: argument " + std::to_string(k + 1) +
            " is not an f32 buffer of the first argument's size");
      }
      const float* a = arg->typed_data<float>();
      for (size_t i = 0; i < n; ++i) o[i] += a[i] * static_cast<float>(k + 2);
    }
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestVariadic, WeightedSums,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .RemainingArgs()
                                  .RemainingRets());
