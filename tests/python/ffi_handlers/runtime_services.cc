// Handlers that use the services the runtime offers through its function
// table: per-instance state set by the instantiate stage, the cpu thread
// pool with an asynchronous result (a Future), scratch memory, user data
// from the execution context, the run id and device ordinal, and the
// platform stream (which a cpu handler must be refused).
//
// Types are exported for registration as with jax:
//   register_ffi_type("xla_gpu_test_counter",
//                     {"type_id": pycapsule(lib.XlaGpuTestCounterTypeId()),
//                      "type_info": pycapsule(lib.XlaGpuTestCounterTypeInfo())})

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// --- state: instantiate creates it, execute reads and updates it ----------

struct Counter {
  static ffi::TypeId id;
  explicit Counter(int32_t start) : value(start) {}
  int32_t value;
  static std::atomic<int> live;  // instances alive (destroyed by the runtime)
};
ffi::TypeId Counter::id = {};
std::atomic<int> Counter::live{0};

static ffi::TypeInfo counter_info = ffi::MakeTypeInfo<Counter>();

extern "C" XLA_FFI_TypeId* XlaGpuTestCounterTypeId() { return &Counter::id; }
extern "C" const XLA_FFI_TypeInfo* XlaGpuTestCounterTypeInfo() {
  counter_info.deleter = [](void* p) {
    Counter::live.fetch_sub(1);
    delete static_cast<Counter*>(p);
  };
  return &counter_info;
}
extern "C" int XlaGpuTestCountersAlive() { return Counter::live.load(); }

static ffi::ErrorOr<std::unique_ptr<Counter>> CounterInstantiate(int32_t start) {
  Counter::live.fetch_add(1);
  return std::make_unique<Counter>(start);
}

// out = the counter's value, then the counter advances: executions of one
// instance see start, start + 1, ...
static ffi::Error CounterExecute(Counter* counter, ffi::ResultBufferR0<ffi::S32> out) {
  *out->typed_data() = counter->value++;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestCounterInstantiate, CounterInstantiate,
                              ffi::Ffi::BindInstantiate().Attr<int32_t>("start"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestCounterExecute, CounterExecute,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::State<Counter>>()
                                  .Ret<ffi::BufferR0<ffi::S32>>());

// --- thread pool and a Future: out[i] = x[i] * x[i], in chunks -------------

static ffi::Future ParallelSquare(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> x,
                                  ffi::ResultBuffer<ffi::F32> out) {
  const int64_t n = static_cast<int64_t>(x.element_count());
  const int64_t chunks = 4;
  ffi::CountDownPromise promise(chunks);
  ffi::Future future(promise);
  const float* in = x.typed_data();
  float* o = out->typed_data();
  for (int64_t c = 0; c < chunks; ++c) {
    pool.Schedule([=]() mutable {
      for (int64_t i = c * n / chunks; i < (c + 1) * n / chunks; ++i) {
        o[i] = in[i] * in[i];
      }
      promise.CountDown();
    });
  }
  return future;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestParallelSquare, ParallelSquare,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

// An asynchronous handler whose work fails: the error arrives through the
// future.
static ffi::Future AsyncFails(ffi::ThreadPool pool, ffi::AnyBuffer,
                              ffi::Result<ffi::AnyBuffer>) {
  ffi::Promise promise;
  ffi::Future future(promise);
  pool.Schedule([promise]() mutable {
    promise.SetError(ffi::Error(ffi::ErrorCode::kAborted,
                                "xla_gpu_test_async_fails: the task failed"));
  });
  return future;
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestAsyncFails, AsyncFails,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

// --- scratch memory, user data, run id, device ordinal ---------------------

struct Offset {
  static ffi::TypeId id;
  float value;
};
ffi::TypeId Offset::id = {};
static ffi::TypeInfo offset_info = ffi::MakeTypeInfo<Offset>();
static Offset the_offset{0.0f};

extern "C" XLA_FFI_TypeId* XlaGpuTestOffsetTypeId() { return &Offset::id; }
extern "C" const XLA_FFI_TypeInfo* XlaGpuTestOffsetTypeInfo() { return &offset_info; }
// The object a test hands to the execution context as user data.
extern "C" void* XlaGpuTestOffsetObject(float value) {
  the_offset.value = value;
  return &the_offset;
}

// out = reverse(x) + offset, staged through scratch memory; out2 = [run id,
// device ordinal].
static ffi::Error ScratchReverse(ffi::ScratchAllocator scratch, Offset* offset,
                                 ffi::RunId run_id, int32_t device,
                                 ffi::Buffer<ffi::F32> x,
                                 ffi::ResultBuffer<ffi::F32> out,
                                 ffi::ResultBuffer<ffi::S64> ids) {
  const size_t n = x.element_count();
  std::optional<void*> memory = scratch.Allocate(n * sizeof(float) + 1, 16);
  if (!memory) {
    return ffi::Error::Internal("xla_gpu_test_scratch: no scratch memory");
  }
  if (reinterpret_cast<uintptr_t>(*memory) % 16 != 0) {
    return ffi::Error::Internal("xla_gpu_test_scratch: misaligned scratch");
  }
  float* tmp = static_cast<float*>(*memory);
  for (size_t i = 0; i < n; ++i) tmp[i] = x.typed_data()[n - 1 - i];
  for (size_t i = 0; i < n; ++i) out->typed_data()[i] = tmp[i] + offset->value;
  ids->typed_data()[0] = run_id.run_id;
  ids->typed_data()[1] = device;
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestScratch, ScratchReverse,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ScratchAllocator>()
                                  .Ctx<ffi::UserData<Offset>>()
                                  .Ctx<ffi::RunId>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S64>>());

// A handler that asks for the platform stream: on cpu the runtime must
// refuse it (there is none) and the binding turns that into an error.
static ffi::Error WantsStream(void* stream, ffi::AnyBuffer, ffi::Result<ffi::AnyBuffer>) {
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestWantsStream, WantsStream,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

// A raw C handler that reports FFI API 9.0 when asked for its metadata:
// a runtime that speaks 0.1 .. 0.3 must refuse to register it.
extern "C" XLA_FFI_Error* XlaGpuTestFutureApiVersion(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start != nullptr &&
      frame->extension_start->type == XLA_FFI_Extension_Metadata) {
    auto* extension =
        reinterpret_cast<XLA_FFI_Metadata_Extension*>(frame->extension_start);
    extension->metadata->api_version.major_version = 9;
    extension->metadata->api_version.minor_version = 0;
    extension->metadata->traits = 0;
  }
  return nullptr;
}

// Writes the platform stream it was handed into its result: a test drives
// the cuda code path with host memory standing in for device memory and
// checks that the stream of the execution reaches the handler.
static ffi::Error StreamValue(void* stream, ffi::ResultBufferR0<ffi::S64> out) {
  *out->typed_data() = static_cast<int64_t>(reinterpret_cast<intptr_t>(stream));
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(XlaGpuTestStreamValue, StreamValue,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<void*>>()
                                  .Ret<ffi::BufferR0<ffi::S64>>());
