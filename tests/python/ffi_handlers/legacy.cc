// Functions of XLA's legacy custom-call ABI (before the typed FFI; jax:
// register_ffi_target(name, pycapsule(fn), platform="cpu", api_version=0)).
// The ABI passes buffers without shapes: these functions know theirs.
// Failure is reported through XlaCustomCallStatusSetFailure, which the
// library links against (the runtime exports it).

#include <cstddef>
#include <cstdint>
#include <cstring>

extern "C" {
typedef struct XlaCustomCallStatus_ XlaCustomCallStatus;
void XlaCustomCallStatusSetFailure(XlaCustomCallStatus* status,
                                   const char* message, size_t message_len);
}

// API_VERSION_ORIGINAL: out = in0 + in1 over f32[8].
extern "C" void XlaGpuTestLegacyAdd(void* out, const void** in) {
  const float* a = static_cast<const float*>(in[0]);
  const float* b = static_cast<const float*>(in[1]);
  float* o = static_cast<float*>(out);
  for (int i = 0; i < 8; ++i) o[i] = a[i] + b[i];
}

// API_VERSION_STATUS_RETURNING: the tuple (in0 + in1, in0 - in1) over
// f32[4]; fails when in0[0] is negative.
extern "C" void XlaGpuTestLegacySumDiff(void* out, const void** in,
                                        XlaCustomCallStatus* status) {
  const float* a = static_cast<const float*>(in[0]);
  const float* b = static_cast<const float*>(in[1]);
  if (a[0] < 0) {
    const char message[] = "xla_gpu_test_legacy_sum_diff: negative input";
    XlaCustomCallStatusSetFailure(status, message, std::strlen(message));
    return;
  }
  float** results = static_cast<float**>(out);
  for (int i = 0; i < 4; ++i) {
    results[0][i] = a[i] + b[i];
    results[1][i] = a[i] - b[i];
  }
}

// API_VERSION_STATUS_RETURNING_UNIFIED: out = in0 * (length of the opaque
// backend_config string) over f32[4].
extern "C" void XlaGpuTestLegacyOpaque(void* out, const void** in, const char* opaque,
                                       size_t opaque_len, XlaCustomCallStatus*) {
  const float* a = static_cast<const float*>(in[0]);
  float* o = static_cast<float*>(out);
  for (int i = 0; i < 4; ++i) o[i] = a[i] * static_cast<float>(opaque_len);
}
