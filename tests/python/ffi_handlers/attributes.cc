// A handler that takes an attribute of every kind XLA's FFI decodes and
// writes what it decoded into its f64 result, in this order:
//
//   flag, i8, i16, i32, i64, u8, u16, u32, u64, f32, f64,
//   len(name), sum of name's bytes,
//   len(dims), dims[0..len),  len(weights), weights[0..len),
//   options.a (i32), len(options.tag), mode (enum Mode), range.lo, range.hi,
//   x[0] * scale-of-mode (kAdd: x[0] + 1, kMul: x[0] * 2)
//
// and zeros after. `options` is bound as a Dictionary (looked up by name),
// `mode` as a user enum, `range` as a user struct: the decodings XLA's
// headers build from integer and dictionary attributes.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

enum class Mode : int32_t { kAdd = 0, kMul = 1 };

struct Range {
  int64_t lo;
  int64_t hi;
};

XLA_FFI_REGISTER_ENUM_ATTR_DECODING(Mode);
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(Range, ffi::StructMember<int64_t>("lo"),
                                      ffi::StructMember<int64_t>("hi"));

static ffi::Error Attributes(ffi::Buffer<ffi::F32> x,
                             ffi::ResultBuffer<ffi::F64> out, bool flag,
                             int8_t i8, int16_t i16, int32_t i32, int64_t i64,
                             uint8_t u8, uint16_t u16, uint32_t u32,
                             uint64_t u64, float f32, double f64,
                             std::string_view name,
                             ffi::Span<const int64_t> dims,
                             ffi::Span<const float> weights,
                             ffi::Dictionary options, Mode mode, Range range) {
  double* o = out->typed_data();
  const size_t capacity = out->element_count();
  size_t n = 0;
  auto put = [&](double v) -> bool {
    if (n >= capacity) return false;
    o[n++] = v;
    return true;
  };
  for (size_t i = 0; i < capacity; ++i) o[i] = 0;
  bool ok = put(flag) && put(i8) && put(i16) && put(i32) &&
            put(static_cast<double>(i64)) && put(u8) && put(u16) && put(u32) &&
            put(static_cast<double>(u64)) && put(f32) && put(f64);
  double name_sum = 0;
  for (char c : name) name_sum += static_cast<unsigned char>(c);
  ok = ok && put(static_cast<double>(name.size())) && put(name_sum);
  ok = ok && put(static_cast<double>(dims.size()));
  for (int64_t d : dims) ok = ok && put(static_cast<double>(d));
  ok = ok && put(static_cast<double>(weights.size()));
  for (float w : weights) ok = ok && put(w);
  ffi::ErrorOr<int32_t> a = options.get<int32_t>("a");
  if (a.has_error()) return a.error();
  ffi::ErrorOr<std::string_view> tag = options.get<std::string_view>("tag");
  if (tag.has_error()) return tag.error();
  ok = ok && put(*a) && put(static_cast<double>(tag->size()));
  ok = ok && put(static_cast<int32_t>(mode));
  ok = ok && put(static_cast<double>(range.lo)) &&
       put(static_cast<double>(range.hi));
  const float x0 = x.element_count() ? x.typed_data()[0] : 0.0f;
  ok = ok && put(mode == Mode::kAdd ? x0 + 1.0 : x0 * 2.0);
  if (!ok) {
    return ffi::Error::InvalidArgument(
        "xla_gpu_test_attributes: the result is too small");
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestAttributes, Attributes,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F64>>()
                                  .Attr<bool>("flag")
                                  .Attr<int8_t>("i8")
                                  .Attr<int16_t>("i16")
                                  .Attr<int32_t>("i32")
                                  .Attr<int64_t>("i64")
                                  .Attr<uint8_t>("u8")
                                  .Attr<uint16_t>("u16")
                                  .Attr<uint32_t>("u32")
                                  .Attr<uint64_t>("u64")
                                  .Attr<float>("f32")
                                  .Attr<double>("f64")
                                  .Attr<std::string_view>("name")
                                  .Attr<ffi::Span<const int64_t>>("dims")
                                  .Attr<ffi::Span<const float>>("weights")
                                  .Attr<ffi::Dictionary>("options")
                                  .Attr<Mode>("mode")
                                  .Attr<Range>("range"));
