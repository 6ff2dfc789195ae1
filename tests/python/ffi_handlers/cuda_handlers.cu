// The test handlers for platform "cuda": the same computations as the cpu
// handlers beside this file, with the work enqueued as kernels on the
// stream XLA's FFI hands over (Ctx<PlatformStream<cudaStream_t>>) and the
// buffers' data pointers in device memory. errors.cc is compiled in as it
// is: a handler that touches no buffer runs on any platform.
//
// Built for the GPU check (bench/ffi_gpu_check.py prepare) with
//   nvcc -std=c++17 -arch=sm_90 -Xcompiler -fPIC -I<jax.ffi.include_dir()> -c
// and registered with
//   register_ffi_target("xla_gpu_test_add_broadcast",
//                       pycapsule(lib.XlaGpuTestCudaAddBroadcast), platform="cuda")

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "xla/ffi/api/ffi.h"

#include "errors.cc"

namespace ffi = xla::ffi;

namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

ffi::Error LaunchError(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(e));
}

// --- out[i] = in0[i % d0] + in1[i] ---------------------------------------

__global__ void AddBroadcastKernel(const float* in0, int64_t d0, const float* in1,
                                   float* out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in0[i % d0] + in1[i];
}

ffi::Error AddBroadcast(cudaStream_t stream, ffi::BufferR1<ffi::F32> in0,
                        ffi::BufferR1<ffi::F32> in1,
                        ffi::Result<ffi::BufferR1<ffi::F32>> out) {
  const int64_t d0 = in0.dimensions()[0];
  const int64_t n = in1.dimensions()[0];
  if (out->dimensions()[0] != n || (d0 == 0 && n != 0)) {
    return ffi::Error::InvalidArgument("xla_gpu_test_add_broadcast: bad sizes");
  }
  if (n == 0) return ffi::Error::Success();
  AddBroadcastKernel<<<Blocks(n), kThreads, 0, stream>>>(
      in0.typed_data(), d0, in1.typed_data(), out->typed_data(), n);
  return LaunchError("xla_gpu_test_add_broadcast");
}

// --- the stored ffi_call program's handler: modes 0, 1, 2 ------------------

__global__ void AddScaledKernel(const float* x, const float* y, float* out,
                                int64_t n, float scale, int32_t mode) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = mode == 0 ? scale * x[i]
         : mode == 1 ? scale * x[i] + y[i]
                     : scale * (x[i] - y[i]);
}

ffi::Error AddScaled(cudaStream_t stream, ffi::Buffer<ffi::F32> x,
                     ffi::Buffer<ffi::F32> y, ffi::ResultBuffer<ffi::F32> out,
                     float scale, int32_t mode) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (static_cast<int64_t>(y.element_count()) != n ||
      static_cast<int64_t>(out->element_count()) != n) {
    return ffi::Error::InvalidArgument(
        "xla_gpu_test_add_scaled: x, y and the result differ in size");
  }
  if (mode < 0 || mode > 2) {
    return ffi::Error::InvalidArgument("xla_gpu_test_add_scaled: unknown mode " +
                                       std::to_string(mode));
  }
  if (n == 0) return ffi::Error::Success();
  AddScaledKernel<<<Blocks(n), kThreads, 0, stream>>>(
      x.typed_data(), y.typed_data(), out->typed_data(), n, scale, mode);
  return LaunchError("xla_gpu_test_add_scaled");
}

// --- variadic: result j = args[0] + sum_k args[k] * (k + 1) + j -------------

__global__ void AxpyKernel(float* out, const float* a, float weight, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] += a[i] * weight;
}

__global__ void FillFromKernel(float* out, const float* a, float add, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + add;
}

ffi::Error WeightedSums(cudaStream_t stream, ffi::AnyBuffer first,
                        ffi::RemainingArgs rest, ffi::RemainingRets results) {
  const int64_t n = static_cast<int64_t>(first.element_count());
  if (first.element_type() != ffi::F32) {
    return ffi::Error::InvalidArgument("xla_gpu_test_variadic: f32 buffers only");
  }
  for (size_t j = 0; j < results.size(); ++j) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> out = results.get<ffi::AnyBuffer>(j);
    if (out.has_error()) return out.error();
    if ((*out)->element_type() != ffi::F32 ||
        static_cast<int64_t>((*out)->element_count()) != n) {
      return ffi::Error::InvalidArgument("xla_gpu_test_variadic: bad result " +
                                         std::to_string(j));
    }
    if (n == 0) continue;
    float* o = (*out)->typed_data<float>();
    FillFromKernel<<<Blocks(n), kThreads, 0, stream>>>(
        o, first.typed_data<float>(), static_cast<float>(j), n);
    for (size_t k = 0; k < rest.size(); ++k) {
      ffi::ErrorOr<ffi::AnyBuffer> arg = rest.get<ffi::AnyBuffer>(k);
      if (arg.has_error()) return arg.error();
      if (arg->element_type() != ffi::F32 ||
          static_cast<int64_t>(arg->element_count()) != n) {
        return ffi::Error::InvalidArgument("xla_gpu_test_variadic: bad argument " +
                                           std::to_string(k + 1));
      }
      AxpyKernel<<<Blocks(n), kThreads, 0, stream>>>(
          o, arg->typed_data<float>(), static_cast<float>(k + 2), n);
    }
  }
  return LaunchError("xla_gpu_test_variadic");
}

// --- scratch device memory: out = reverse(x) staged through scratch ---------

__global__ void ReverseKernel(const float* in, float* out, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = in[n - 1 - i];
}

ffi::Error ScratchReverse(cudaStream_t stream, ffi::ScratchAllocator scratch,
                          ffi::Buffer<ffi::F32> x, ffi::ResultBuffer<ffi::F32> out) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  std::optional<void*> memory = scratch.Allocate(n * sizeof(float) + 1, 16);
  if (!memory) return ffi::Error::Internal("xla_gpu_test_scratch: no device scratch");
  float* tmp = static_cast<float*>(*memory);
  if (n == 0) return ffi::Error::Success();
  ReverseKernel<<<Blocks(n), kThreads, 0, stream>>>(x.typed_data(), tmp, n);
  cudaMemcpyAsync(out->typed_data(), tmp, n * sizeof(float), cudaMemcpyDeviceToDevice,
                  stream);
  // The allocator frees `tmp` when this returns, ordered after the copy on
  // `stream` (the runtime frees stream-ordered).
  return LaunchError("xla_gpu_test_scratch");
}

}  // namespace

// XLA's legacy custom-call ABI on cuda (api_version=0 registrations, HLO
// api_version=API_VERSION_STATUS_RETURNING): buffers = (in0: f32[64],
// in1: f32[4096], out: f32[4096]); the sizes travel in the opaque string
// "64,4096".
struct XlaCustomCallStatus_;
extern "C" void XlaGpuTestCudaLegacyAddBroadcast(cudaStream_t stream, void** buffers,
                                                 const char* opaque, size_t opaque_len,
                                                 XlaCustomCallStatus_* status) {
  long long d0 = 0, n = 0;
  std::string sizes(opaque, opaque_len);
  if (std::sscanf(sizes.c_str(), "%lld,%lld", &d0, &n) != 2 || d0 <= 0 || n < 0) return;
  if (n == 0) return;
  AddBroadcastKernel<<<Blocks(n), kThreads, 0, stream>>>(
      static_cast<const float*>(buffers[0]), d0, static_cast<const float*>(buffers[1]),
      static_cast<float*>(buffers[2]), n);
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestCudaAddBroadcast, AddBroadcast,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::BufferR1<ffi::F32>>()
                                  .Arg<ffi::BufferR1<ffi::F32>>()
                                  .Ret<ffi::BufferR1<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestCudaAddScaled, AddScaled,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("scale")
                                  .Attr<int32_t>("mode"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestCudaVariadic, WeightedSums,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .RemainingArgs()
                                  .RemainingRets());

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestCudaScratch, ScratchReverse,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
