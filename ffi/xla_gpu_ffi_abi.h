//===- xla_gpu_ffi_abi.h - the binary interface of XLA's FFI, declared here ===//
//
// XLA's FFI is a C ABI: a table of function pointers (the "API") that a
// custom-call handler calls back into, and a call frame (arguments, results,
// attributes) that the runtime hands to the handler. Handlers compiled
// against the FFI headers of a jaxlib wheel (xla/ffi/api/c_api.h) only ever
// see these structs through pointers, so a runtime that lays them out the
// same way can run those handlers unchanged.
//
// This header declares that layout for xla_gpu's runtime, in a namespace of
// its own so that a test can include it next to jaxlib's c_api.h and check
// every size, field offset and enumerator against it
// (tests/python/ffi_handlers/abi_check.cc). The conventions of the ABI:
//
// * every struct passed across starts with `size_t struct_size` (the size up
//   to and including the last field the caller knows of) and, except for a
//   few plain value structs, an `extension_start` pointer to a chain of
//   extensions; the runtime reads only fields that the caller's
//   struct_size covers and rejects a struct that is too small;
// * version 0.3 of the API (the one jaxlib 0.10 ships); handlers built
//   against 0.1 .. 0.3 are accepted (0.2's State_Set/Get args lack the
//   `stage` field: stage "instantiate" is assumed for them);
// * errors are opaque objects owned by whoever receives them;
// * attributes of a call frame are sorted by name (byte order) at every
//   dictionary level, so handlers can binary-search them.
//
//===----------------------------------------------------------------------===//

#ifndef XLA_GPU_FFI_ABI_H_
#define XLA_GPU_FFI_ABI_H_

#include <cstddef>
#include <cstdint>

namespace xla_gpu_ffi::abi {

inline constexpr int kApiMajor = 0;
inline constexpr int kApiMinor = 3;
// The oldest handler ABI the runtime still accepts (as XLA does).
inline constexpr int kMinSupportedMajor = 0;
inline constexpr int kMinSupportedMinor = 1;

// Size of a struct up to and including `field`: what callers put in
// `struct_size`.
#define XLA_GPU_FFI_SIZE_THROUGH(type, field) \
  (offsetof(type, field) + sizeof(static_cast<type*>(nullptr)->field))

struct Api;            // the function table
struct Error;          // opaque: defined by the runtime
struct Future;         // opaque: defined by the runtime
struct ExecutionContext;  // opaque: defined by the runtime

// --- extensions -------------------------------------------------------------

enum ExtensionType : int32_t { kExtensionMetadata = 1 };

struct ExtensionBase {
  size_t struct_size;
  ExtensionType type;
  ExtensionBase* next;
};

// --- version ------------------------------------------------------------------

struct ApiVersion {
  size_t struct_size;
  ExtensionBase* extension_start;
  int32_t major_version;
  int32_t minor_version;
};

// --- errors -------------------------------------------------------------------

// absl::StatusCode values.
enum ErrorCode : int32_t {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

struct ErrorCreateArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  const char* message;
  ErrorCode errc;
};

struct ErrorGetMessageArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  Error* error;
  const char* message;  // out
};

struct ErrorDestroyArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  Error* error;
};

// --- element types (xla::PrimitiveType numbers) -----------------------------

enum DataType : int32_t {
  kInvalid = 0,
  kPred = 1,
  kS8 = 2,
  kS16 = 3,
  kS32 = 4,
  kS64 = 5,
  kU8 = 6,
  kU16 = 7,
  kU32 = 8,
  kU64 = 9,
  kF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kC64 = 15,
  kBF16 = 16,
  kToken = 17,
  kC128 = 18,
  kF8E5M2 = 19,
  kF8E4M3FN = 20,
  kS4 = 21,
  kU4 = 22,
  kF8E4M3B11FNUZ = 23,
  kF8E5M2FNUZ = 24,
  kF8E4M3FNUZ = 25,
  kS2 = 26,
  kU2 = 27,
  kF8E4M3 = 28,
  kF8E3M4 = 29,
  kS1 = 30,
  kU1 = 31,
  kF4E2M1FN = 32,
  kF8E8M0FNU = 33,
};

// --- arguments, results, attributes -----------------------------------------

// One array argument or result: element type, data pointer (host or
// device), rank and the dimensions (logical order, row-major data).
struct Buffer {
  size_t struct_size;
  ExtensionBase* extension_start;
  DataType dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
};

enum ArgType : int32_t { kArgBuffer = 1 };
enum RetType : int32_t { kRetBuffer = 1 };

enum AttrType : int32_t {
  kAttrArray = 1,
  kAttrDictionary = 2,
  kAttrScalar = 3,
  kAttrString = 4,
};

struct ByteSpan {
  const char* ptr;
  size_t len;
};

struct Scalar {
  DataType dtype;
  void* value;
};

struct Array {
  DataType dtype;
  size_t size;  // elements
  void* data;
};

// --- user types ---------------------------------------------------------------

struct TypeId {
  int64_t type_id;  // 0: not assigned yet
};

struct TypeInfo {
  size_t struct_size;
  ExtensionBase* extension_start;
  void (*deleter)(void* object);
};

// --- futures --------------------------------------------------------------------

struct FutureCreateArgs {
  size_t struct_size;  // callers report the size through extension_start
  ExtensionBase* extension_start;
  Future* future;  // out
};

struct FutureSetAvailableArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  Future* future;
};

struct FutureSetErrorArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  Future* future;
  Error* error;  // ownership passes to the runtime
};

// --- the call frame -------------------------------------------------------------

enum ExecutionStage : int32_t {
  kInstantiate = 0,
  kPrepare = 1,
  kInitialize = 2,
  kExecute = 3,
};

struct Args {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  ArgType* types;
  void** args;  // Buffer* each
};

struct Rets {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  RetType* types;
  void** rets;  // Buffer* each
};

struct Attrs {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  AttrType* types;
  ByteSpan** names;  // sorted by name
  void** attrs;      // Array*, Attrs*, Scalar* or ByteSpan* by type
};

struct CallFrame {
  size_t struct_size;  // through `attrs`; `future` follows
  ExtensionBase* extension_start;
  const Api* api;
  ExecutionContext* ctx;
  ExecutionStage stage;
  Args args;
  Rets rets;
  Attrs attrs;
  Future* future;  // out: set by an asynchronous handler
};

typedef Error* Handler(CallFrame* call_frame);

struct HandlerBundle {
  Handler* instantiate;  // optional
  Handler* prepare;      // optional
  Handler* initialize;   // optional
  Handler* execute;      // required
};

enum HandlerTraitsBits : uint32_t { kCommandBufferCompatible = 1u << 0 };
typedef uint32_t HandlerTraits;

struct HandlerRegisterArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ByteSpan name;
  ByteSpan platform;
  HandlerBundle bundle;
  HandlerTraits traits;
};

struct TypeRegisterArgs {
  size_t struct_size;  // through `type_id`; `type_info` follows
  ExtensionBase* extension_start;
  ByteSpan name;
  TypeId* type_id;  // in-out
  const TypeInfo* type_info;
};

struct ExecutionContextGetArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  TypeId* type_id;
  void* data;  // out
};

struct StateSetArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  ExecutionStage stage;
  TypeId* type_id;
  void* state;
};

struct StateGetArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  ExecutionStage stage;
  TypeId* type_id;
  void* state;  // out
};

// State_Set / State_Get arguments of API 0.2 (no stage: instantiate).
struct StateArgsV02 {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  TypeId* type_id;
  void* state;
};

struct StreamGetArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  void* stream;  // out: CUstream on cuda
};

struct DeviceMemoryAllocateArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  size_t size;
  size_t alignment;
  void* data;  // out
};

struct DeviceMemoryFreeArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  size_t size;
  void* data;
};

typedef void Task(void* data);

struct ThreadPoolScheduleArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  Task* task;
  void* data;
};

struct ThreadPoolNumThreadsArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  int64_t* num_threads;  // out
};

struct RunIdGetArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  int64_t run_id;  // out
};

struct DeviceOrdinalGetArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  int32_t device_ordinal;  // out
};

// --- the metadata extension -------------------------------------------------------

// The runtime calls a handler with this extension in its call frame to ask
// which API version it was built against and its traits; the handler fills
// it in and returns without running.
struct Metadata {
  size_t struct_size;
  ApiVersion api_version;
  HandlerTraits traits;
  TypeId state_type_id;  // follows `traits`, outside struct_size
};

struct MetadataExtension {
  ExtensionBase extension_base;
  Metadata* metadata;
};

// --- the function table ---------------------------------------------------------

struct Api {
  size_t struct_size;
  ExtensionBase* extension_start;
  ApiVersion api_version;
  const void* internal_api;  // XLA-internal; null here

  Error* (*error_create)(ErrorCreateArgs*);
  void (*error_get_message)(ErrorGetMessageArgs*);
  void (*error_destroy)(ErrorDestroyArgs*);
  Error* (*handler_register)(HandlerRegisterArgs*);
  Error* (*stream_get)(StreamGetArgs*);
  Error* (*type_register)(TypeRegisterArgs*);
  Error* (*execution_context_get)(ExecutionContextGetArgs*);
  Error* (*state_set)(StateSetArgs*);
  Error* (*state_get)(StateGetArgs*);
  Error* (*device_memory_allocate)(DeviceMemoryAllocateArgs*);
  Error* (*device_memory_free)(DeviceMemoryFreeArgs*);
  Error* (*thread_pool_schedule)(ThreadPoolScheduleArgs*);
  Error* (*thread_pool_num_threads)(ThreadPoolNumThreadsArgs*);
  Error* (*future_create)(FutureCreateArgs*);
  Error* (*future_set_available)(FutureSetAvailableArgs*);
  Error* (*future_set_error)(FutureSetErrorArgs*);
  Error* (*run_id_get)(RunIdGetArgs*);
  Error* (*device_ordinal_get)(DeviceOrdinalGetArgs*);
};

// The sizes callers of each struct report (last field as the ABI defines
// it), used for the struct_size checks.
inline constexpr size_t kApiVersionSize =
    XLA_GPU_FFI_SIZE_THROUGH(ApiVersion, minor_version);
inline constexpr size_t kErrorCreateArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(ErrorCreateArgs, errc);
inline constexpr size_t kErrorGetMessageArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(ErrorGetMessageArgs, message);
inline constexpr size_t kErrorDestroyArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(ErrorDestroyArgs, error);
inline constexpr size_t kBufferSize = XLA_GPU_FFI_SIZE_THROUGH(Buffer, dims);
inline constexpr size_t kTypeInfoSize =
    XLA_GPU_FFI_SIZE_THROUGH(TypeInfo, deleter);
inline constexpr size_t kFutureCreateArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(FutureCreateArgs, extension_start);
inline constexpr size_t kFutureSetAvailableArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(FutureSetAvailableArgs, future);
inline constexpr size_t kFutureSetErrorArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(FutureSetErrorArgs, error);
inline constexpr size_t kArgsSize = XLA_GPU_FFI_SIZE_THROUGH(Args, args);
inline constexpr size_t kRetsSize = XLA_GPU_FFI_SIZE_THROUGH(Rets, rets);
inline constexpr size_t kAttrsSize = XLA_GPU_FFI_SIZE_THROUGH(Attrs, attrs);
inline constexpr size_t kCallFrameSize =
    XLA_GPU_FFI_SIZE_THROUGH(CallFrame, attrs);
inline constexpr size_t kHandlerRegisterArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(HandlerRegisterArgs, traits);
inline constexpr size_t kTypeRegisterArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(TypeRegisterArgs, type_id);
inline constexpr size_t kExecutionContextGetArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(ExecutionContextGetArgs, data);
inline constexpr size_t kStateSetArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(StateSetArgs, state);
inline constexpr size_t kStateGetArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(StateGetArgs, state);
inline constexpr size_t kStateArgsV02Size =
    XLA_GPU_FFI_SIZE_THROUGH(StateArgsV02, state);
inline constexpr size_t kStreamGetArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(StreamGetArgs, stream);
inline constexpr size_t kDeviceMemoryAllocateArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(DeviceMemoryAllocateArgs, data);
inline constexpr size_t kDeviceMemoryFreeArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(DeviceMemoryFreeArgs, data);
inline constexpr size_t kThreadPoolScheduleArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(ThreadPoolScheduleArgs, data);
inline constexpr size_t kThreadPoolNumThreadsArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(ThreadPoolNumThreadsArgs, num_threads);
inline constexpr size_t kRunIdGetArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(RunIdGetArgs, run_id);
inline constexpr size_t kDeviceOrdinalGetArgsSize =
    XLA_GPU_FFI_SIZE_THROUGH(DeviceOrdinalGetArgs, device_ordinal);
inline constexpr size_t kMetadataSize =
    XLA_GPU_FFI_SIZE_THROUGH(Metadata, traits);
inline constexpr size_t kMetadataExtensionSize =
    XLA_GPU_FFI_SIZE_THROUGH(MetadataExtension, metadata);
inline constexpr size_t kExtensionBaseSize =
    XLA_GPU_FFI_SIZE_THROUGH(ExtensionBase, next);
inline constexpr size_t kApiSize =
    XLA_GPU_FFI_SIZE_THROUGH(Api, device_ordinal_get);

}  // namespace xla_gpu_ffi::abi

#endif  // XLA_GPU_FFI_ABI_H_
