// Compile-time proof that xla_gpu's own declaration of XLA's FFI ABI
// (ffi/xla_gpu_ffi_abi.h) matches the c_api.h that jaxlib ships: every
// struct's size and field offsets, every struct_size constant and every
// enumerator. test_ffi.py compiles this file with
//   g++ -std=c++17 -fsyntax-only -I<jax.ffi.include_dir()> -I<repo>/ffi
// and a mismatch is a compile error naming the field.

#include <cstddef>
#include <type_traits>

#include "xla/ffi/api/c_api.h"
#include "xla_gpu_ffi_abi.h"

namespace ours = xla_gpu_ffi::abi;

#define SAME_SIZE(theirs, mine)                                   \
  static_assert(sizeof(theirs) == sizeof(ours::mine),             \
                "sizeof " #theirs " differs from " #mine);        \
  static_assert(alignof(theirs) == alignof(ours::mine),           \
                "alignof " #theirs " differs from " #mine)

#define SAME_FIELD(theirs, their_field, mine, my_field)                  \
  static_assert(offsetof(theirs, their_field) ==                         \
                    offsetof(ours::mine, my_field),                      \
                "offset of " #theirs "::" #their_field " differs");      \
  static_assert(sizeof(((theirs*)nullptr)->their_field) ==               \
                    sizeof(((ours::mine*)nullptr)->my_field),            \
                "size of " #theirs "::" #their_field " differs")

#define SAME_VALUE(theirs, mine) \
  static_assert(static_cast<long long>(theirs) == static_cast<long long>(mine), \
                #theirs " differs from " #mine)

// Version.
SAME_VALUE(XLA_FFI_API_MAJOR, ours::kApiMajor);
SAME_VALUE(XLA_FFI_API_MINOR, ours::kApiMinor);

// Extensions.
SAME_SIZE(XLA_FFI_Extension_Base, ExtensionBase);
SAME_FIELD(XLA_FFI_Extension_Base, struct_size, ExtensionBase, struct_size);
SAME_FIELD(XLA_FFI_Extension_Base, type, ExtensionBase, type);
SAME_FIELD(XLA_FFI_Extension_Base, next, ExtensionBase, next);
SAME_VALUE(XLA_FFI_Extension_Base_STRUCT_SIZE, ours::kExtensionBaseSize);
SAME_VALUE(XLA_FFI_Extension_Metadata, ours::kExtensionMetadata);

SAME_SIZE(XLA_FFI_Api_Version, ApiVersion);
SAME_FIELD(XLA_FFI_Api_Version, struct_size, ApiVersion, struct_size);
SAME_FIELD(XLA_FFI_Api_Version, extension_start, ApiVersion, extension_start);
SAME_FIELD(XLA_FFI_Api_Version, major_version, ApiVersion, major_version);
SAME_FIELD(XLA_FFI_Api_Version, minor_version, ApiVersion, minor_version);
SAME_VALUE(XLA_FFI_Api_Version_STRUCT_SIZE, ours::kApiVersionSize);

// Errors.
SAME_VALUE(XLA_FFI_Error_Code_OK, ours::kOk);
SAME_VALUE(XLA_FFI_Error_Code_CANCELLED, ours::kCancelled);
SAME_VALUE(XLA_FFI_Error_Code_UNKNOWN, ours::kUnknown);
SAME_VALUE(XLA_FFI_Error_Code_INVALID_ARGUMENT, ours::kInvalidArgument);
SAME_VALUE(XLA_FFI_Error_Code_DEADLINE_EXCEEDED, ours::kDeadlineExceeded);
SAME_VALUE(XLA_FFI_Error_Code_NOT_FOUND, ours::kNotFound);
SAME_VALUE(XLA_FFI_Error_Code_ALREADY_EXISTS, ours::kAlreadyExists);
SAME_VALUE(XLA_FFI_Error_Code_PERMISSION_DENIED, ours::kPermissionDenied);
SAME_VALUE(XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, ours::kResourceExhausted);
SAME_VALUE(XLA_FFI_Error_Code_FAILED_PRECONDITION, ours::kFailedPrecondition);
SAME_VALUE(XLA_FFI_Error_Code_ABORTED, ours::kAborted);
SAME_VALUE(XLA_FFI_Error_Code_OUT_OF_RANGE, ours::kOutOfRange);
SAME_VALUE(XLA_FFI_Error_Code_UNIMPLEMENTED, ours::kUnimplemented);
SAME_VALUE(XLA_FFI_Error_Code_INTERNAL, ours::kInternal);
SAME_VALUE(XLA_FFI_Error_Code_UNAVAILABLE, ours::kUnavailable);
SAME_VALUE(XLA_FFI_Error_Code_DATA_LOSS, ours::kDataLoss);
SAME_VALUE(XLA_FFI_Error_Code_UNAUTHENTICATED, ours::kUnauthenticated);
static_assert(sizeof(XLA_FFI_Error_Code) == sizeof(ours::ErrorCode), "enum size");

SAME_SIZE(XLA_FFI_Error_Create_Args, ErrorCreateArgs);
SAME_FIELD(XLA_FFI_Error_Create_Args, struct_size, ErrorCreateArgs, struct_size);
SAME_FIELD(XLA_FFI_Error_Create_Args, extension_start, ErrorCreateArgs, extension_start);
SAME_FIELD(XLA_FFI_Error_Create_Args, message, ErrorCreateArgs, message);
SAME_FIELD(XLA_FFI_Error_Create_Args, errc, ErrorCreateArgs, errc);
SAME_VALUE(XLA_FFI_Error_Create_Args_STRUCT_SIZE, ours::kErrorCreateArgsSize);

SAME_SIZE(XLA_FFI_Error_GetMessage_Args, ErrorGetMessageArgs);
SAME_FIELD(XLA_FFI_Error_GetMessage_Args, error, ErrorGetMessageArgs, error);
SAME_FIELD(XLA_FFI_Error_GetMessage_Args, message, ErrorGetMessageArgs, message);
SAME_VALUE(XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE, ours::kErrorGetMessageArgsSize);

SAME_SIZE(XLA_FFI_Error_Destroy_Args, ErrorDestroyArgs);
SAME_FIELD(XLA_FFI_Error_Destroy_Args, error, ErrorDestroyArgs, error);
SAME_VALUE(XLA_FFI_Error_Destroy_Args_STRUCT_SIZE, ours::kErrorDestroyArgsSize);

// Data types.
SAME_VALUE(XLA_FFI_DataType_INVALID, ours::kInvalid);
SAME_VALUE(XLA_FFI_DataType_PRED, ours::kPred);
SAME_VALUE(XLA_FFI_DataType_S1, ours::kS1);
SAME_VALUE(XLA_FFI_DataType_S2, ours::kS2);
SAME_VALUE(XLA_FFI_DataType_S4, ours::kS4);
SAME_VALUE(XLA_FFI_DataType_S8, ours::kS8);
SAME_VALUE(XLA_FFI_DataType_S16, ours::kS16);
SAME_VALUE(XLA_FFI_DataType_S32, ours::kS32);
SAME_VALUE(XLA_FFI_DataType_S64, ours::kS64);
SAME_VALUE(XLA_FFI_DataType_U1, ours::kU1);
SAME_VALUE(XLA_FFI_DataType_U2, ours::kU2);
SAME_VALUE(XLA_FFI_DataType_U4, ours::kU4);
SAME_VALUE(XLA_FFI_DataType_U8, ours::kU8);
SAME_VALUE(XLA_FFI_DataType_U16, ours::kU16);
SAME_VALUE(XLA_FFI_DataType_U32, ours::kU32);
SAME_VALUE(XLA_FFI_DataType_U64, ours::kU64);
SAME_VALUE(XLA_FFI_DataType_F16, ours::kF16);
SAME_VALUE(XLA_FFI_DataType_F32, ours::kF32);
SAME_VALUE(XLA_FFI_DataType_F64, ours::kF64);
SAME_VALUE(XLA_FFI_DataType_BF16, ours::kBF16);
SAME_VALUE(XLA_FFI_DataType_C64, ours::kC64);
SAME_VALUE(XLA_FFI_DataType_C128, ours::kC128);
SAME_VALUE(XLA_FFI_DataType_TOKEN, ours::kToken);
SAME_VALUE(XLA_FFI_DataType_F8E5M2, ours::kF8E5M2);
SAME_VALUE(XLA_FFI_DataType_F8E3M4, ours::kF8E3M4);
SAME_VALUE(XLA_FFI_DataType_F8E4M3, ours::kF8E4M3);
SAME_VALUE(XLA_FFI_DataType_F8E4M3FN, ours::kF8E4M3FN);
SAME_VALUE(XLA_FFI_DataType_F8E4M3B11FNUZ, ours::kF8E4M3B11FNUZ);
SAME_VALUE(XLA_FFI_DataType_F8E5M2FNUZ, ours::kF8E5M2FNUZ);
SAME_VALUE(XLA_FFI_DataType_F8E4M3FNUZ, ours::kF8E4M3FNUZ);
SAME_VALUE(XLA_FFI_DataType_F4E2M1FN, ours::kF4E2M1FN);
SAME_VALUE(XLA_FFI_DataType_F8E8M0FNU, ours::kF8E8M0FNU);
static_assert(sizeof(XLA_FFI_DataType) == sizeof(ours::DataType), "enum size");

// Buffers and the builtin argument / result / attribute kinds.
SAME_SIZE(XLA_FFI_Buffer, Buffer);
SAME_FIELD(XLA_FFI_Buffer, struct_size, Buffer, struct_size);
SAME_FIELD(XLA_FFI_Buffer, extension_start, Buffer, extension_start);
SAME_FIELD(XLA_FFI_Buffer, dtype, Buffer, dtype);
SAME_FIELD(XLA_FFI_Buffer, data, Buffer, data);
SAME_FIELD(XLA_FFI_Buffer, rank, Buffer, rank);
SAME_FIELD(XLA_FFI_Buffer, dims, Buffer, dims);
SAME_VALUE(XLA_FFI_Buffer_STRUCT_SIZE, ours::kBufferSize);
SAME_VALUE(XLA_FFI_ArgType_BUFFER, ours::kArgBuffer);
SAME_VALUE(XLA_FFI_RetType_BUFFER, ours::kRetBuffer);
static_assert(sizeof(XLA_FFI_ArgType) == sizeof(ours::ArgType), "enum size");
static_assert(sizeof(XLA_FFI_RetType) == sizeof(ours::RetType), "enum size");
SAME_VALUE(XLA_FFI_AttrType_ARRAY, ours::kAttrArray);
SAME_VALUE(XLA_FFI_AttrType_DICTIONARY, ours::kAttrDictionary);
SAME_VALUE(XLA_FFI_AttrType_SCALAR, ours::kAttrScalar);
SAME_VALUE(XLA_FFI_AttrType_STRING, ours::kAttrString);
static_assert(sizeof(XLA_FFI_AttrType) == sizeof(ours::AttrType), "enum size");

SAME_SIZE(XLA_FFI_ByteSpan, ByteSpan);
SAME_FIELD(XLA_FFI_ByteSpan, ptr, ByteSpan, ptr);
SAME_FIELD(XLA_FFI_ByteSpan, len, ByteSpan, len);
SAME_SIZE(XLA_FFI_Scalar, Scalar);
SAME_FIELD(XLA_FFI_Scalar, dtype, Scalar, dtype);
SAME_FIELD(XLA_FFI_Scalar, value, Scalar, value);
SAME_SIZE(XLA_FFI_Array, Array);
SAME_FIELD(XLA_FFI_Array, dtype, Array, dtype);
SAME_FIELD(XLA_FFI_Array, size, Array, size);
SAME_FIELD(XLA_FFI_Array, data, Array, data);

// Types.
SAME_SIZE(XLA_FFI_TypeId, TypeId);
SAME_FIELD(XLA_FFI_TypeId, type_id, TypeId, type_id);
SAME_SIZE(XLA_FFI_TypeInfo, TypeInfo);
SAME_FIELD(XLA_FFI_TypeInfo, deleter, TypeInfo, deleter);
SAME_VALUE(XLA_FFI_TypeInfo_STRUCT_SIZE, ours::kTypeInfoSize);

// Futures.
SAME_SIZE(XLA_FFI_Future_Create_Args, FutureCreateArgs);
SAME_FIELD(XLA_FFI_Future_Create_Args, future, FutureCreateArgs, future);
SAME_VALUE(XLA_FFI_Future_Create_Args_STRUCT_SIZE, ours::kFutureCreateArgsSize);
SAME_SIZE(XLA_FFI_Future_SetAvailable_Args, FutureSetAvailableArgs);
SAME_FIELD(XLA_FFI_Future_SetAvailable_Args, future, FutureSetAvailableArgs, future);
SAME_VALUE(XLA_FFI_Future_SetAvailable_Args_STRUCT_SIZE, ours::kFutureSetAvailableArgsSize);
SAME_SIZE(XLA_FFI_Future_SetError_Args, FutureSetErrorArgs);
SAME_FIELD(XLA_FFI_Future_SetError_Args, future, FutureSetErrorArgs, future);
SAME_FIELD(XLA_FFI_Future_SetError_Args, error, FutureSetErrorArgs, error);
SAME_VALUE(XLA_FFI_Future_SetError_Args_STRUCT_SIZE, ours::kFutureSetErrorArgsSize);

// The call frame.
SAME_VALUE(XLA_FFI_ExecutionStage_INSTANTIATE, ours::kInstantiate);
SAME_VALUE(XLA_FFI_ExecutionStage_PREPARE, ours::kPrepare);
SAME_VALUE(XLA_FFI_ExecutionStage_INITIALIZE, ours::kInitialize);
SAME_VALUE(XLA_FFI_ExecutionStage_EXECUTE, ours::kExecute);
static_assert(sizeof(XLA_FFI_ExecutionStage) == sizeof(ours::ExecutionStage), "enum size");

SAME_SIZE(XLA_FFI_Args, Args);
SAME_FIELD(XLA_FFI_Args, size, Args, size);
SAME_FIELD(XLA_FFI_Args, types, Args, types);
SAME_FIELD(XLA_FFI_Args, args, Args, args);
SAME_VALUE(XLA_FFI_Args_STRUCT_SIZE, ours::kArgsSize);
SAME_SIZE(XLA_FFI_Rets, Rets);
SAME_FIELD(XLA_FFI_Rets, size, Rets, size);
SAME_FIELD(XLA_FFI_Rets, types, Rets, types);
SAME_FIELD(XLA_FFI_Rets, rets, Rets, rets);
SAME_VALUE(XLA_FFI_Rets_STRUCT_SIZE, ours::kRetsSize);
SAME_SIZE(XLA_FFI_Attrs, Attrs);
SAME_FIELD(XLA_FFI_Attrs, size, Attrs, size);
SAME_FIELD(XLA_FFI_Attrs, types, Attrs, types);
SAME_FIELD(XLA_FFI_Attrs, names, Attrs, names);
SAME_FIELD(XLA_FFI_Attrs, attrs, Attrs, attrs);
SAME_VALUE(XLA_FFI_Attrs_STRUCT_SIZE, ours::kAttrsSize);

SAME_SIZE(XLA_FFI_CallFrame, CallFrame);
SAME_FIELD(XLA_FFI_CallFrame, struct_size, CallFrame, struct_size);
SAME_FIELD(XLA_FFI_CallFrame, extension_start, CallFrame, extension_start);
SAME_FIELD(XLA_FFI_CallFrame, api, CallFrame, api);
SAME_FIELD(XLA_FFI_CallFrame, ctx, CallFrame, ctx);
SAME_FIELD(XLA_FFI_CallFrame, stage, CallFrame, stage);
SAME_FIELD(XLA_FFI_CallFrame, args, CallFrame, args);
SAME_FIELD(XLA_FFI_CallFrame, rets, CallFrame, rets);
SAME_FIELD(XLA_FFI_CallFrame, attrs, CallFrame, attrs);
SAME_FIELD(XLA_FFI_CallFrame, future, CallFrame, future);
SAME_VALUE(XLA_FFI_CallFrame_STRUCT_SIZE, ours::kCallFrameSize);

// Handlers and their registration.
static_assert(std::is_same_v<decltype(&XLA_FFI_Handler_Bundle::execute),
                             XLA_FFI_Handler* XLA_FFI_Handler_Bundle::*>,
              "bundle member type");
SAME_SIZE(XLA_FFI_Handler_Bundle, HandlerBundle);
SAME_FIELD(XLA_FFI_Handler_Bundle, instantiate, HandlerBundle, instantiate);
SAME_FIELD(XLA_FFI_Handler_Bundle, prepare, HandlerBundle, prepare);
SAME_FIELD(XLA_FFI_Handler_Bundle, initialize, HandlerBundle, initialize);
SAME_FIELD(XLA_FFI_Handler_Bundle, execute, HandlerBundle, execute);
SAME_VALUE(XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE,
           ours::kCommandBufferCompatible);
static_assert(sizeof(XLA_FFI_Handler_Traits) == sizeof(ours::HandlerTraits), "traits size");

SAME_SIZE(XLA_FFI_Handler_Register_Args, HandlerRegisterArgs);
SAME_FIELD(XLA_FFI_Handler_Register_Args, name, HandlerRegisterArgs, name);
SAME_FIELD(XLA_FFI_Handler_Register_Args, platform, HandlerRegisterArgs, platform);
SAME_FIELD(XLA_FFI_Handler_Register_Args, bundle, HandlerRegisterArgs, bundle);
SAME_FIELD(XLA_FFI_Handler_Register_Args, traits, HandlerRegisterArgs, traits);
SAME_VALUE(XLA_FFI_Handler_Register_Args_STRUCT_SIZE, ours::kHandlerRegisterArgsSize);

SAME_SIZE(XLA_FFI_Type_Register_Args, TypeRegisterArgs);
SAME_FIELD(XLA_FFI_Type_Register_Args, name, TypeRegisterArgs, name);
SAME_FIELD(XLA_FFI_Type_Register_Args, type_id, TypeRegisterArgs, type_id);
SAME_FIELD(XLA_FFI_Type_Register_Args, type_info, TypeRegisterArgs, type_info);
SAME_VALUE(XLA_FFI_Type_Register_Args_STRUCT_SIZE, ours::kTypeRegisterArgsSize);

// Execution context, state, stream, memory, thread pool, run id, device.
SAME_SIZE(XLA_FFI_ExecutionContext_Get_Args, ExecutionContextGetArgs);
SAME_FIELD(XLA_FFI_ExecutionContext_Get_Args, ctx, ExecutionContextGetArgs, ctx);
SAME_FIELD(XLA_FFI_ExecutionContext_Get_Args, type_id, ExecutionContextGetArgs, type_id);
SAME_FIELD(XLA_FFI_ExecutionContext_Get_Args, data, ExecutionContextGetArgs, data);
SAME_VALUE(XLA_FFI_ExecutionContext_Get_Args_STRUCT_SIZE, ours::kExecutionContextGetArgsSize);

SAME_SIZE(XLA_FFI_State_Set_Args, StateSetArgs);
SAME_FIELD(XLA_FFI_State_Set_Args, ctx, StateSetArgs, ctx);
SAME_FIELD(XLA_FFI_State_Set_Args, stage, StateSetArgs, stage);
SAME_FIELD(XLA_FFI_State_Set_Args, type_id, StateSetArgs, type_id);
SAME_FIELD(XLA_FFI_State_Set_Args, state, StateSetArgs, state);
SAME_VALUE(XLA_FFI_State_Set_Args_STRUCT_SIZE, ours::kStateSetArgsSize);
SAME_SIZE(XLA_FFI_State_Get_Args, StateGetArgs);
SAME_FIELD(XLA_FFI_State_Get_Args, ctx, StateGetArgs, ctx);
SAME_FIELD(XLA_FFI_State_Get_Args, stage, StateGetArgs, stage);
SAME_FIELD(XLA_FFI_State_Get_Args, type_id, StateGetArgs, type_id);
SAME_FIELD(XLA_FFI_State_Get_Args, state, StateGetArgs, state);
SAME_VALUE(XLA_FFI_State_Get_Args_STRUCT_SIZE, ours::kStateGetArgsSize);
// The 0.2 layout must not be mistaken for the 0.3 one.
static_assert(ours::kStateArgsV02Size != XLA_FFI_State_Set_Args_STRUCT_SIZE,
              "0.2 and 0.3 State args must differ in size");

SAME_SIZE(XLA_FFI_Stream_Get_Args, StreamGetArgs);
SAME_FIELD(XLA_FFI_Stream_Get_Args, ctx, StreamGetArgs, ctx);
SAME_FIELD(XLA_FFI_Stream_Get_Args, stream, StreamGetArgs, stream);
SAME_VALUE(XLA_FFI_Stream_Get_Args_STRUCT_SIZE, ours::kStreamGetArgsSize);

SAME_SIZE(XLA_FFI_DeviceMemory_Allocate_Args, DeviceMemoryAllocateArgs);
SAME_FIELD(XLA_FFI_DeviceMemory_Allocate_Args, ctx, DeviceMemoryAllocateArgs, ctx);
SAME_FIELD(XLA_FFI_DeviceMemory_Allocate_Args, size, DeviceMemoryAllocateArgs, size);
SAME_FIELD(XLA_FFI_DeviceMemory_Allocate_Args, alignment, DeviceMemoryAllocateArgs, alignment);
SAME_FIELD(XLA_FFI_DeviceMemory_Allocate_Args, data, DeviceMemoryAllocateArgs, data);
SAME_VALUE(XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE, ours::kDeviceMemoryAllocateArgsSize);
SAME_SIZE(XLA_FFI_DeviceMemory_Free_Args, DeviceMemoryFreeArgs);
SAME_FIELD(XLA_FFI_DeviceMemory_Free_Args, ctx, DeviceMemoryFreeArgs, ctx);
SAME_FIELD(XLA_FFI_DeviceMemory_Free_Args, size, DeviceMemoryFreeArgs, size);
SAME_FIELD(XLA_FFI_DeviceMemory_Free_Args, data, DeviceMemoryFreeArgs, data);
SAME_VALUE(XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE, ours::kDeviceMemoryFreeArgsSize);

SAME_SIZE(XLA_FFI_ThreadPool_Schedule_Args, ThreadPoolScheduleArgs);
SAME_FIELD(XLA_FFI_ThreadPool_Schedule_Args, ctx, ThreadPoolScheduleArgs, ctx);
SAME_FIELD(XLA_FFI_ThreadPool_Schedule_Args, task, ThreadPoolScheduleArgs, task);
SAME_FIELD(XLA_FFI_ThreadPool_Schedule_Args, data, ThreadPoolScheduleArgs, data);
SAME_VALUE(XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE, ours::kThreadPoolScheduleArgsSize);
SAME_SIZE(XLA_FFI_ThreadPool_NumThreads_Args, ThreadPoolNumThreadsArgs);
SAME_FIELD(XLA_FFI_ThreadPool_NumThreads_Args, ctx, ThreadPoolNumThreadsArgs, ctx);
SAME_FIELD(XLA_FFI_ThreadPool_NumThreads_Args, num_threads, ThreadPoolNumThreadsArgs, num_threads);
SAME_VALUE(XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE, ours::kThreadPoolNumThreadsArgsSize);

SAME_SIZE(XLA_FFI_RunId_Get_Args, RunIdGetArgs);
SAME_FIELD(XLA_FFI_RunId_Get_Args, ctx, RunIdGetArgs, ctx);
SAME_FIELD(XLA_FFI_RunId_Get_Args, run_id, RunIdGetArgs, run_id);
SAME_VALUE(XLA_FFI_RunId_Get_Args_STRUCT_SIZE, ours::kRunIdGetArgsSize);
SAME_SIZE(XLA_FFI_DeviceOrdinal_Get_Args, DeviceOrdinalGetArgs);
SAME_FIELD(XLA_FFI_DeviceOrdinal_Get_Args, ctx, DeviceOrdinalGetArgs, ctx);
SAME_FIELD(XLA_FFI_DeviceOrdinal_Get_Args, device_ordinal, DeviceOrdinalGetArgs, device_ordinal);
SAME_VALUE(XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE, ours::kDeviceOrdinalGetArgsSize);

// Metadata extension.
SAME_SIZE(XLA_FFI_Metadata, Metadata);
SAME_FIELD(XLA_FFI_Metadata, struct_size, Metadata, struct_size);
SAME_FIELD(XLA_FFI_Metadata, api_version, Metadata, api_version);
SAME_FIELD(XLA_FFI_Metadata, traits, Metadata, traits);
SAME_FIELD(XLA_FFI_Metadata, state_type_id, Metadata, state_type_id);
SAME_VALUE(XLA_FFI_Metadata_STRUCT_SIZE, ours::kMetadataSize);
SAME_SIZE(XLA_FFI_Metadata_Extension, MetadataExtension);
SAME_FIELD(XLA_FFI_Metadata_Extension, extension_base, MetadataExtension, extension_base);
SAME_FIELD(XLA_FFI_Metadata_Extension, metadata, MetadataExtension, metadata);
SAME_VALUE(XLA_FFI_Metadata_Extension_STRUCT_SIZE, ours::kMetadataExtensionSize);

// The function table, entry by entry.
SAME_SIZE(XLA_FFI_Api, Api);
SAME_FIELD(XLA_FFI_Api, struct_size, Api, struct_size);
SAME_FIELD(XLA_FFI_Api, extension_start, Api, extension_start);
SAME_FIELD(XLA_FFI_Api, api_version, Api, api_version);
SAME_FIELD(XLA_FFI_Api, internal_api, Api, internal_api);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Error_Create, Api, error_create);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Error_GetMessage, Api, error_get_message);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Error_Destroy, Api, error_destroy);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Handler_Register, Api, handler_register);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Stream_Get, Api, stream_get);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Type_Register, Api, type_register);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_ExecutionContext_Get, Api, execution_context_get);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_State_Set, Api, state_set);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_State_Get, Api, state_get);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_DeviceMemory_Allocate, Api, device_memory_allocate);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_DeviceMemory_Free, Api, device_memory_free);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_ThreadPool_Schedule, Api, thread_pool_schedule);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_ThreadPool_NumThreads, Api, thread_pool_num_threads);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Future_Create, Api, future_create);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Future_SetAvailable, Api, future_set_available);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_Future_SetError, Api, future_set_error);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_RunId_Get, Api, run_id_get);
SAME_FIELD(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get, Api, device_ordinal_get);
SAME_VALUE(XLA_FFI_Api_STRUCT_SIZE, ours::kApiSize);

// The function types of the table agree too (pointer to the same
// signature, modulo the struct names).
static_assert(sizeof(XLA_FFI_Api::XLA_FFI_Error_Create) ==
                  sizeof(ours::Api::error_create),
              "function pointer size");

int main() { return 0; }
