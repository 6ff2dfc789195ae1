/*===- xla_gpu_pjrt_abi.h - the PJRT C API, as xla_gpu's jax plugin speaks it -===
 *
 * jax loads a PJRT plugin as a shared library and talks to it through one C
 * table of function pointers (`PJRT_Api`). Every function takes a single
 * pointer to an argument struct and returns a `PJRT_Error*` (NULL for
 * success). This header declares that binary interface at version 0.112,
 * the one jaxlib 0.10.2's framework speaks, for what xla_gpu touches:
 *
 * * the `PJRT_Api` header and all 138 function slots, in table order;
 * * the argument struct of every slot xla_gpu implements (the others are
 *   declared by name only: their slots answer UNIMPLEMENTED without looking
 *   at the struct);
 * * the value structs those reach (`PJRT_Program`, `PJRT_ExecuteOptions`,
 *   `PJRT_NamedValue`, `PJRT_Buffer_MemoryLayout`, ...), the vtables of
 *   `PJRT_Error` and `PJRT_Memory`, and the enums.
 *
 * The conventions of the ABI:
 *
 * * every argument struct starts with `size_t struct_size` (the size up to
 *   and including the last field the caller knows of) and a pointer to a
 *   chain of extensions; a newer caller passes a bigger struct_size, an
 *   implementation reads only fields that struct_size covers;
 * * new fields and slots are only ever appended (minor version), so a table
 *   or struct of 0.112 starts with the 0.94 one;
 * * objects (clients, buffers, events, errors ...) are opaque handles owned
 *   by the implementation; strings are (pointer, size) pairs, not NUL-ended.
 *
 * The layouts are LP64 (x86-64 and aarch64 Linux). The `XLA_GPU_PJRT_*`
 * assertions at the end pin every size and offset that was measured against
 * jaxlib 0.10.2 (pjrt/DESIGN.md, sections 2 and 4): building
 * libXlaGpuPjrt.so checks them, and tests/python/pjrt/test_pjrt_abi.py checks
 * that xla_gpu/pjrt/_abi.py (the Python side, which reads and writes these
 * structs by byte offset) agrees with this header field by field.
 *
 * This header stands in for XLA's own pjrt_c_api.h and uses the ABI's type
 * names, so the two cannot be included in one translation unit.
 *
 *===----------------------------------------------------------------------===*/

#ifndef XLA_GPU_PJRT_ABI_H_
#define XLA_GPU_PJRT_ABI_H_

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The API version the table reports (jaxlib 0.10.2 requires major 0 and
 * accepts minor >= 29; 0.112 is what it speaks itself). */
#define XLA_GPU_PJRT_API_MAJOR 0
#define XLA_GPU_PJRT_API_MINOR 112

/* What a caller puts in `struct_size`: the size through `field`, its last. */
#define XLA_GPU_PJRT_SIZE_THROUGH(type, field) \
  (offsetof(type, field) + sizeof(((type *)0)->field))

#ifdef __cplusplus
#define XLA_GPU_PJRT_ASSERT(cond, what) static_assert(cond, what)
#else
#define XLA_GPU_PJRT_ASSERT(cond, what) _Static_assert(cond, what)
#endif

/* ------------------------------------------------------------ the slots --- */

/* The 138 function slots of the 0.112 table, in table order, as
 * X(return type, name without the PJRT_ prefix). Slot i sits at byte
 * 40 + 8 * i. Only Error_Destroy and Error_Message return nothing. */
#define XLA_GPU_PJRT_SLOTS(X)                                   \
  /* 0 */                                                       \
  X(void, Error_Destroy)                                        \
  X(void, Error_Message)                                        \
  X(PJRT_Error *, Error_GetCode)                                \
  X(PJRT_Error *, Plugin_Initialize)                            \
  X(PJRT_Error *, Plugin_Attributes)                            \
  X(PJRT_Error *, Event_Destroy)                                \
  X(PJRT_Error *, Event_IsReady)                                \
  X(PJRT_Error *, Event_Error)                                  \
  X(PJRT_Error *, Event_Await)                                  \
  X(PJRT_Error *, Event_OnReady)                                \
  /* 10 */                                                      \
  X(PJRT_Error *, Client_Create)                                \
  X(PJRT_Error *, Client_Destroy)                               \
  X(PJRT_Error *, Client_PlatformName)                          \
  X(PJRT_Error *, Client_ProcessIndex)                          \
  X(PJRT_Error *, Client_PlatformVersion)                       \
  X(PJRT_Error *, Client_Devices)                               \
  X(PJRT_Error *, Client_AddressableDevices)                    \
  X(PJRT_Error *, Client_LookupDevice)                          \
  X(PJRT_Error *, Client_LookupAddressableDevice)               \
  X(PJRT_Error *, Client_AddressableMemories)                   \
  /* 20 */                                                      \
  X(PJRT_Error *, Client_Compile)                               \
  X(PJRT_Error *, Client_DefaultDeviceAssignment)               \
  X(PJRT_Error *, Client_BufferFromHostBuffer)                  \
  X(PJRT_Error *, DeviceDescription_Id)                         \
  X(PJRT_Error *, DeviceDescription_ProcessIndex)               \
  X(PJRT_Error *, DeviceDescription_Attributes)                 \
  X(PJRT_Error *, DeviceDescription_Kind)                       \
  X(PJRT_Error *, DeviceDescription_DebugString)                \
  X(PJRT_Error *, DeviceDescription_ToString)                   \
  X(PJRT_Error *, Device_GetDescription)                        \
  /* 30 */                                                      \
  X(PJRT_Error *, Device_IsAddressable)                         \
  X(PJRT_Error *, Device_LocalHardwareId)                       \
  X(PJRT_Error *, Device_AddressableMemories)                   \
  X(PJRT_Error *, Device_DefaultMemory)                         \
  X(PJRT_Error *, Device_MemoryStats)                           \
  X(PJRT_Error *, Memory_Id)                                    \
  X(PJRT_Error *, Memory_Kind)                                  \
  X(PJRT_Error *, Memory_DebugString)                           \
  X(PJRT_Error *, Memory_ToString)                              \
  X(PJRT_Error *, Memory_AddressableByDevices)                  \
  /* 40 */                                                      \
  X(PJRT_Error *, Executable_Destroy)                           \
  X(PJRT_Error *, Executable_Name)                              \
  X(PJRT_Error *, Executable_NumReplicas)                       \
  X(PJRT_Error *, Executable_NumPartitions)                     \
  X(PJRT_Error *, Executable_NumOutputs)                        \
  X(PJRT_Error *, Executable_SizeOfGeneratedCodeInBytes)        \
  X(PJRT_Error *, Executable_GetCostAnalysis)                   \
  X(PJRT_Error *, Executable_OutputMemoryKinds)                 \
  X(PJRT_Error *, Executable_OptimizedProgram)                  \
  X(PJRT_Error *, Executable_Serialize)                         \
  /* 50 */                                                      \
  X(PJRT_Error *, LoadedExecutable_Destroy)                     \
  X(PJRT_Error *, LoadedExecutable_GetExecutable)               \
  X(PJRT_Error *, LoadedExecutable_AddressableDevices)          \
  X(PJRT_Error *, LoadedExecutable_Delete)                      \
  X(PJRT_Error *, LoadedExecutable_IsDeleted)                   \
  X(PJRT_Error *, LoadedExecutable_Execute)                     \
  X(PJRT_Error *, Executable_DeserializeAndLoad)                \
  X(PJRT_Error *, LoadedExecutable_Fingerprint)                 \
  X(PJRT_Error *, Buffer_Destroy)                               \
  X(PJRT_Error *, Buffer_ElementType)                           \
  /* 60 */                                                      \
  X(PJRT_Error *, Buffer_Dimensions)                            \
  X(PJRT_Error *, Buffer_UnpaddedDimensions)                    \
  X(PJRT_Error *, Buffer_DynamicDimensionIndices)               \
  X(PJRT_Error *, Buffer_GetMemoryLayout)                       \
  X(PJRT_Error *, Buffer_OnDeviceSizeInBytes)                   \
  X(PJRT_Error *, Buffer_Device)                                \
  X(PJRT_Error *, Buffer_Memory)                                \
  X(PJRT_Error *, Buffer_Delete)                                \
  X(PJRT_Error *, Buffer_IsDeleted)                             \
  X(PJRT_Error *, Buffer_CopyToDevice)                          \
  /* 70 */                                                      \
  X(PJRT_Error *, Buffer_ToHostBuffer)                          \
  X(PJRT_Error *, Buffer_IsOnCpu)                               \
  X(PJRT_Error *, Buffer_ReadyEvent)                            \
  X(PJRT_Error *, Buffer_UnsafePointer)                         \
  X(PJRT_Error *, Buffer_IncreaseExternalReferenceCount)        \
  X(PJRT_Error *, Buffer_DecreaseExternalReferenceCount)        \
  X(PJRT_Error *, Buffer_OpaqueDeviceMemoryDataPointer)         \
  X(PJRT_Error *, CopyToDeviceStream_Destroy)                   \
  X(PJRT_Error *, CopyToDeviceStream_AddChunk)                  \
  X(PJRT_Error *, CopyToDeviceStream_TotalBytes)                \
  /* 80 */                                                      \
  X(PJRT_Error *, CopyToDeviceStream_GranuleSize)               \
  X(PJRT_Error *, CopyToDeviceStream_CurrentBytes)              \
  X(PJRT_Error *, TopologyDescription_Create)                   \
  X(PJRT_Error *, TopologyDescription_Destroy)                  \
  X(PJRT_Error *, TopologyDescription_PlatformName)             \
  X(PJRT_Error *, TopologyDescription_PlatformVersion)          \
  X(PJRT_Error *, TopologyDescription_GetDeviceDescriptions)    \
  X(PJRT_Error *, TopologyDescription_Serialize)                \
  X(PJRT_Error *, TopologyDescription_Attributes)               \
  X(PJRT_Error *, Compile)                                      \
  /* 90 */                                                      \
  X(PJRT_Error *, Executable_OutputElementTypes)                \
  X(PJRT_Error *, Executable_OutputDimensions)                  \
  X(PJRT_Error *, Buffer_CopyToMemory)                          \
  X(PJRT_Error *, Client_CreateViewOfDeviceBuffer)              \
  X(PJRT_Error *, Executable_Fingerprint)                       \
  X(PJRT_Error *, Client_TopologyDescription)                   \
  X(PJRT_Error *, Executable_GetCompiledMemoryStats)            \
  X(PJRT_Error *, Memory_Kind_Id)                               \
  X(PJRT_Error *, ExecuteContext_Create)                        \
  X(PJRT_Error *, ExecuteContext_Destroy)                       \
  /* 100 */                                                     \
  X(PJRT_Error *, Buffer_CopyRawToHost)                         \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_Destroy)     \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_TransferData) \
  X(PJRT_Error *, Client_CreateBuffersForAsyncHostToDevice)     \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_RetrieveBuffer) \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_Device)      \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_BufferCount) \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_BufferSize)  \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_SetBufferError) \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_AddMetadata) \
  /* 110 */                                                     \
  X(PJRT_Error *, Client_DmaMap)                                \
  X(PJRT_Error *, Client_DmaUnmap)                              \
  X(PJRT_Error *, Client_CreateUninitializedBuffer)             \
  X(PJRT_Error *, Client_UpdateGlobalProcessInfo)               \
  X(PJRT_Error *, TopologyDescription_Deserialize)              \
  X(PJRT_Error *, Client_CreateAliasBuffer)                     \
  X(PJRT_Error *, Client_FulfillAliasBuffer)                    \
  X(PJRT_Error *, LoadedExecutable_GetDeviceAssignment)         \
  X(PJRT_Error *, Client_CreateErrorBuffer)                     \
  X(PJRT_Error *, AsyncHostToDeviceTransferManager_TransferLiteral) \
  /* 120 */                                                     \
  X(PJRT_Error *, Buffer_CopyRawToHostFuture)                   \
  X(PJRT_Error *, Device_PoisonExecution)                       \
  X(PJRT_Error *, Device_CreateAsyncTrackingEvent)              \
  X(PJRT_Error *, AsyncTrackingEvent_Destroy)                   \
  X(PJRT_Error *, Executable_GetCompileOptions)                 \
  X(PJRT_Error *, Buffer_DonateWithControlDependency)           \
  X(PJRT_Error *, Event_Create)                                 \
  X(PJRT_Error *, Event_Set)                                    \
  X(PJRT_Error *, Device_GetAttributes)                         \
  /* 129: the 0.94 table ends above (1072 bytes) */             \
  X(PJRT_Error *, Client_Load)                                  \
  /* 130 */                                                     \
  X(PJRT_Error *, LoadedExecutable_AddressableDeviceLogicalIds) \
  X(PJRT_Error *, Buffer_Bitcast)                               \
  X(PJRT_Error *, Error_ForEachPayload)                         \
  X(PJRT_Error *, TopologyDescription_Fingerprint)              \
  X(PJRT_Error *, Executable_ParameterMemoryKinds)              \
  X(PJRT_Error *, Device_ClearMemoryStats)                      \
  X(PJRT_Error *, TopologyDescription_MakeCanonicalShapeForMemorySpace) \
  X(PJRT_Error *, TopologyDescription_GetMemorySpaceKindIds)

/* Slot indices: XLA_GPU_PJRT_SLOT_Client_Compile == 20, ... */
#define XLA_GPU_PJRT_SLOT_INDEX_(ret, name) XLA_GPU_PJRT_SLOT_##name,
enum { XLA_GPU_PJRT_SLOTS(XLA_GPU_PJRT_SLOT_INDEX_) XLA_GPU_PJRT_NUM_SLOTS };
#undef XLA_GPU_PJRT_SLOT_INDEX_

/* ------------------------------------------------------ opaque handles --- */

/* Owned by the implementation. `PJRT_Error` and `PJRT_Memory` are defined
 * below: since 0.106 they start with a vtable the framework may call. */
typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Memory PJRT_Memory;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_TopologyDescription PJRT_TopologyDescription;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_ExecuteContext PJRT_ExecuteContext;
/* Owners the implementation hands out with a deleter next to them. */
typedef struct PJRT_Device_Attributes PJRT_Device_Attributes;
typedef struct PJRT_SerializedExecutable PJRT_SerializedExecutable;
typedef struct PJRT_DeviceAssignmentSerialized PJRT_DeviceAssignmentSerialized;
/* Reached only through pointers xla_gpu never follows. */
typedef struct PJRT_SendCallbackInfo PJRT_SendCallbackInfo;
typedef struct PJRT_RecvCallbackInfo PJRT_RecvCallbackInfo;
typedef struct PJRT_KeyValueGetCallback_Args PJRT_KeyValueGetCallback_Args;
typedef struct PJRT_KeyValuePutCallback_Args PJRT_KeyValuePutCallback_Args;
typedef struct PJRT_KeyValueTryGetCallback_Args PJRT_KeyValueTryGetCallback_Args;
typedef struct PJRT_MultiSliceConfig PJRT_MultiSliceConfig;

/* Every slot's argument struct, by name (defined below for the slots xla_gpu
 * implements). */
#define XLA_GPU_PJRT_NAME_ARGS_(ret, name) typedef struct PJRT_##name##_Args PJRT_##name##_Args;
XLA_GPU_PJRT_SLOTS(XLA_GPU_PJRT_NAME_ARGS_)
#undef XLA_GPU_PJRT_NAME_ARGS_

/* ---------------------------------------------------------------- enums --- */

/* absl::StatusCode values. */
typedef enum {
  PJRT_Error_Code_OK = 0,
  PJRT_Error_Code_CANCELLED = 1,
  PJRT_Error_Code_UNKNOWN = 2,
  PJRT_Error_Code_INVALID_ARGUMENT = 3,
  PJRT_Error_Code_DEADLINE_EXCEEDED = 4,
  PJRT_Error_Code_NOT_FOUND = 5,
  PJRT_Error_Code_ALREADY_EXISTS = 6,
  PJRT_Error_Code_PERMISSION_DENIED = 7,
  PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
  PJRT_Error_Code_FAILED_PRECONDITION = 9,
  PJRT_Error_Code_ABORTED = 10,
  PJRT_Error_Code_OUT_OF_RANGE = 11,
  PJRT_Error_Code_UNIMPLEMENTED = 12,
  PJRT_Error_Code_INTERNAL = 13,
  PJRT_Error_Code_UNAVAILABLE = 14,
  PJRT_Error_Code_DATA_LOSS = 15,
  PJRT_Error_Code_UNAUTHENTICATED = 16
} PJRT_Error_Code;

/* Element types of buffers. Not XLA's PrimitiveType numbering (bf16, the
 * complex types, the float8 types and token differ): map by name. */
typedef enum {
  PJRT_Buffer_Type_INVALID = 0,
  PJRT_Buffer_Type_PRED = 1,
  PJRT_Buffer_Type_S8 = 2,
  PJRT_Buffer_Type_S16 = 3,
  PJRT_Buffer_Type_S32 = 4,
  PJRT_Buffer_Type_S64 = 5,
  PJRT_Buffer_Type_U8 = 6,
  PJRT_Buffer_Type_U16 = 7,
  PJRT_Buffer_Type_U32 = 8,
  PJRT_Buffer_Type_U64 = 9,
  PJRT_Buffer_Type_F16 = 10,
  PJRT_Buffer_Type_F32 = 11,
  PJRT_Buffer_Type_F64 = 12,
  PJRT_Buffer_Type_BF16 = 13,
  PJRT_Buffer_Type_C64 = 14,
  PJRT_Buffer_Type_C128 = 15,
  PJRT_Buffer_Type_F8E5M2 = 16,
  PJRT_Buffer_Type_F8E4M3FN = 17,
  PJRT_Buffer_Type_F8E4M3B11FNUZ = 18,
  PJRT_Buffer_Type_F8E5M2FNUZ = 19,
  PJRT_Buffer_Type_F8E4M3FNUZ = 20,
  PJRT_Buffer_Type_S4 = 21,
  PJRT_Buffer_Type_U4 = 22,
  PJRT_Buffer_Type_TOKEN = 23,
  PJRT_Buffer_Type_S2 = 24,
  PJRT_Buffer_Type_U2 = 25,
  PJRT_Buffer_Type_F8E4M3 = 26,
  PJRT_Buffer_Type_F8E3M4 = 27,
  PJRT_Buffer_Type_F8E8M0FNU = 28,
  PJRT_Buffer_Type_F4E2M1FN = 29,
  PJRT_Buffer_Type_S1 = 30,
  PJRT_Buffer_Type_U1 = 31
} PJRT_Buffer_Type;

/* The value held by a PJRT_NamedValue. */
typedef enum {
  PJRT_NamedValue_kString = 0,
  PJRT_NamedValue_kInt64 = 1,
  PJRT_NamedValue_kInt64List = 2,
  PJRT_NamedValue_kFloat = 3,
  PJRT_NamedValue_kBool = 4
} PJRT_NamedValue_Type;

/* What Client_BufferFromHostBuffer may do with the caller's host memory. */
typedef enum {
  /* Read it during the call only. */
  PJRT_HostBufferSemantics_kImmutableOnlyDuringCall = 0,
  /* Read it until `done_with_host_buffer` fires. */
  PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes = 1,
  /* Alias it, read-only, while the buffer lives (what jax's device_put asks). */
  PJRT_HostBufferSemantics_kImmutableZeroCopy = 2,
  /* Alias it, writable, while the buffer lives. */
  PJRT_HostBufferSemantics_kMutableZeroCopy = 3
} PJRT_HostBufferSemantics;

/* Which member of PJRT_Buffer_MemoryLayout's union is set. */
typedef enum {
  PJRT_Buffer_MemoryLayout_Type_Tiled = 0,
  PJRT_Buffer_MemoryLayout_Type_Strides = 1
} PJRT_Buffer_MemoryLayout_Type;

/* The kinds of extension in a chain (xla_gpu offers none and reads none). */
typedef enum {
  PJRT_Extension_Type_Gpu_Custom_Call = 0,
  PJRT_Extension_Type_Profiler = 1,
  PJRT_Extension_Type_Custom_Partitioner = 2,
  PJRT_Extension_Type_Stream = 3,
  PJRT_Extension_Type_Layouts = 4,
  PJRT_Extension_Type_FFI = 5,
  PJRT_Extension_Type_MemoryDescriptions = 6,
  PJRT_Extension_Type_Triton = 7
} PJRT_Extension_Type;

/* ------------------------------------------------- headers and versions --- */

typedef struct PJRT_Extension_Base {
  size_t struct_size;
  PJRT_Extension_Type type;
  struct PJRT_Extension_Base *next;
} PJRT_Extension_Base;

typedef struct PJRT_Api_Version {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  int major_version;
  int minor_version;
} PJRT_Api_Version;

/* The two words every argument struct starts with. */
#define XLA_GPU_PJRT_ARGS_HEAD \
  size_t struct_size;          \
  PJRT_Extension_Base *extension_start

/* --------------------------------------------------------------- values --- */

/* A key/value pair (plugin attributes, client options, cost properties). */
typedef struct PJRT_NamedValue {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const char *name;
  size_t name_size;
  PJRT_NamedValue_Type type;
  union {
    const char *string_value;
    int64_t int64_value;
    const int64_t *int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size; /* elements of a string or list; 1 for a scalar */
} PJRT_NamedValue;

/* A program handed to Compile (or returned by OptimizedProgram). */
typedef struct PJRT_Program {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  char *code; /* "mlir": StableHLO bytecode */
  size_t code_size;
  const char *format; /* "mlir", "hlo", "hlo_with_config" */
  size_t format_size;
} PJRT_Program;

/* Dense layout as minor-to-major dimension order, with optional tiles. */
typedef struct PJRT_Buffer_MemoryLayout_Tiled {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const int64_t *minor_to_major;
  size_t minor_to_major_size;
  const int64_t *tile_dims; /* all tiles' dimensions, concatenated */
  const size_t *tile_dim_sizes; /* num_tiles entries */
  size_t num_tiles;
} PJRT_Buffer_MemoryLayout_Tiled;

/* Layout as byte strides (may be negative). */
typedef struct PJRT_Buffer_MemoryLayout_Strides {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  const int64_t *byte_strides;
  size_t num_byte_strides;
} PJRT_Buffer_MemoryLayout_Strides;

typedef struct PJRT_Buffer_MemoryLayout {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  union {
    PJRT_Buffer_MemoryLayout_Tiled tiled;
    PJRT_Buffer_MemoryLayout_Strides strides;
  };
  PJRT_Buffer_MemoryLayout_Type type;
} PJRT_Buffer_MemoryLayout;

/* Options of one LoadedExecutable_Execute call. 0.112 form: jaxlib 0.10.2
 * passes struct_size 144. The 0.94 form ends at incarnation_ids (112); 0.97
 * appended multi_slice_config and later versions three more words, which
 * xla_gpu never reads (their names are not known here). */
typedef struct PJRT_ExecuteOptions {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_SendCallbackInfo **send_callbacks; /* [num_devices][num_send_ops] */
  PJRT_RecvCallbackInfo **recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  /* Inputs that must not be donated even where the program aliases them. */
  const int64_t *non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  PJRT_ExecuteContext *context;
  const char *call_location; /* NUL-terminated, valid during the call */
  size_t num_tasks;
  int *task_ids;
  int64_t *incarnation_ids;
  const PJRT_MultiSliceConfig *multi_slice_config; /* 0.97 */
  uint64_t unnamed_after_0_97[3];
} PJRT_ExecuteOptions;

/* One device's (replica, partition) pair. */
typedef struct PJRT_LogicalDeviceIds {
  int replica_id;
  int partition_id;
} PJRT_LogicalDeviceIds;

/* ------------------------------------------------------------- vtables --- */

typedef void (*PJRT_Error_PayloadVisitor)(const char *key, size_t key_size,
                                          const char *value, size_t value_size,
                                          void *user_arg);

/* The functions the framework may call on a PJRT_Error directly. */
typedef struct PJRT_Error_FunctionTable {
  size_t struct_size;
  size_t instance_size;
  PJRT_Extension_Base *extension_start;
  void (*destroy)(PJRT_Error *error);
  void (*message)(const PJRT_Error *error, const char **message, size_t *message_size);
  PJRT_Error_Code (*get_code)(const PJRT_Error *error);
  void (*for_each_payload)(const PJRT_Error *error, PJRT_Error_PayloadVisitor visitor,
                           void *user_arg);
} PJRT_Error_FunctionTable;

struct PJRT_Error {
  const PJRT_Error_FunctionTable *vtable;
};

/* Per-memory user data: the framework caches its own objects there. */
typedef struct PJRT_Memory_FunctionTable {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  size_t instance_struct_size;
  void *(*get_user_data)(PJRT_Memory *memory, const void *key);
  void (*set_user_data)(PJRT_Memory *memory, const void *key, void *data,
                        void (*deleter)(void *data));
} PJRT_Memory_FunctionTable;

struct PJRT_Memory {
  const PJRT_Memory_FunctionTable *vtable;
};

/* ---------------------------------------------------- argument structs --- */

/* In every struct below, fields marked "out" are written by the
 * implementation; everything it hands out lives as long as the object it
 * was asked about, unless a deleter comes with it. */

/* Errors. */
struct PJRT_Error_Destroy_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Error *error;
};
struct PJRT_Error_Message_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_Error *error;
  const char *message; /* out */
  size_t message_size; /* out */
};
struct PJRT_Error_GetCode_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_Error *error;
  PJRT_Error_Code code; /* out */
};
struct PJRT_Error_ForEachPayload_Args { /* 0.99 */
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_Error *error;
  PJRT_Error_PayloadVisitor visitor;
  void *user_arg;
};

/* Plugin. */
struct PJRT_Plugin_Initialize_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
};
struct PJRT_Plugin_Attributes_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_NamedValue *attributes; /* out, process lifetime */
  size_t num_attributes; /* out */
};

/* Events. Error and Await return a fresh PJRT_Error* (the caller's). */
struct PJRT_Event_Destroy_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Event *event;
};
struct PJRT_Event_IsReady_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Event *event;
  bool is_ready; /* out */
};
struct PJRT_Event_Error_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Event *event;
};
struct PJRT_Event_Await_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Event *event;
};
/* Called once the event is ready; takes ownership of `error`. */
typedef void (*PJRT_Event_OnReadyCallback)(PJRT_Error *error, void *user_arg);
struct PJRT_Event_OnReady_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Event *event;
  PJRT_Event_OnReadyCallback callback;
  void *user_arg;
};

/* Client. */
typedef PJRT_Error *(*PJRT_KeyValueGetCallback)(PJRT_KeyValueGetCallback_Args *args);
typedef PJRT_Error *(*PJRT_KeyValuePutCallback)(PJRT_KeyValuePutCallback_Args *args);
typedef PJRT_Error *(*PJRT_KeyValueTryGetCallback)(PJRT_KeyValueTryGetCallback_Args *args);
struct PJRT_Client_Create_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_NamedValue *create_options;
  size_t num_options;
  /* A key/value store shared by the processes of a multi-process job. */
  PJRT_KeyValueGetCallback kv_get_callback;
  void *kv_get_user_arg;
  PJRT_KeyValuePutCallback kv_put_callback;
  void *kv_put_user_arg;
  PJRT_Client *client; /* out */
  PJRT_KeyValueTryGetCallback kv_try_get_callback;
  void *kv_try_get_user_arg;
};
struct PJRT_Client_Destroy_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
};
struct PJRT_Client_PlatformName_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  const char *platform_name; /* out */
  size_t platform_name_size; /* out */
};
struct PJRT_Client_ProcessIndex_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  int process_index; /* out */
};
struct PJRT_Client_PlatformVersion_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  const char *platform_version; /* out */
  size_t platform_version_size; /* out */
};
struct PJRT_Client_TopologyDescription_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  PJRT_TopologyDescription *topology; /* out, owned by the client */
};
struct PJRT_Client_Devices_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  PJRT_Device *const *devices; /* out */
  size_t num_devices; /* out */
};
struct PJRT_Client_AddressableDevices_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  PJRT_Device *const *addressable_devices; /* out */
  size_t num_addressable_devices; /* out */
};
struct PJRT_Client_LookupDevice_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  int id; /* a DeviceDescription_Id */
  PJRT_Device *device; /* out */
};
struct PJRT_Client_LookupAddressableDevice_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  int local_hardware_id;
  PJRT_Device *addressable_device; /* out */
};
struct PJRT_Client_AddressableMemories_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  PJRT_Memory *const *addressable_memories; /* out */
  size_t num_addressable_memories; /* out */
};
struct PJRT_Client_Compile_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  const PJRT_Program *program;
  const char *compile_options; /* a serialized CompileOptionsProto */
  size_t compile_options_size;
  PJRT_LoadedExecutable *executable; /* out */
};
struct PJRT_Client_DefaultDeviceAssignment_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  int num_replicas;
  int num_partitions;
  size_t default_assignment_size; /* >= num_replicas * num_partitions */
  int *default_assignment; /* the caller's array, filled */
};
struct PJRT_Client_BufferFromHostBuffer_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  const void *data;
  PJRT_Buffer_Type type;
  const int64_t *dims;
  size_t num_dims;
  const int64_t *byte_strides; /* num_dims entries, or none: dense row-major */
  size_t num_byte_strides;
  PJRT_HostBufferSemantics host_buffer_semantics;
  PJRT_Device *device;
  PJRT_Memory *memory; /* wins over `device` where set */
  PJRT_Buffer_MemoryLayout *device_layout; /* NULL: dense row-major */
  PJRT_Event *done_with_host_buffer; /* out */
  PJRT_Buffer *buffer; /* out */
};

/* Device descriptions. */
struct PJRT_DeviceDescription_Id_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_DeviceDescription *device_description;
  int id; /* out */
};
struct PJRT_DeviceDescription_ProcessIndex_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_DeviceDescription *device_description;
  int process_index; /* out */
};
struct PJRT_DeviceDescription_Attributes_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_DeviceDescription *device_description;
  size_t num_attributes; /* out; note: before the array */
  const PJRT_NamedValue *attributes; /* out */
};
struct PJRT_DeviceDescription_Kind_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_DeviceDescription *device_description;
  const char *device_kind; /* out */
  size_t device_kind_size; /* out */
};
struct PJRT_DeviceDescription_DebugString_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_DeviceDescription *device_description;
  const char *debug_string; /* out */
  size_t debug_string_size; /* out */
};
struct PJRT_DeviceDescription_ToString_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_DeviceDescription *device_description;
  const char *to_string; /* out */
  size_t to_string_size; /* out */
};

/* Devices. */
struct PJRT_Device_GetDescription_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Device *device;
  PJRT_DeviceDescription *device_description; /* out */
};
struct PJRT_Device_IsAddressable_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Device *device;
  bool is_addressable; /* out */
};
struct PJRT_Device_LocalHardwareId_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Device *device;
  int local_hardware_id; /* out */
};
struct PJRT_Device_AddressableMemories_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Device *device;
  PJRT_Memory *const *memories; /* out */
  size_t num_memories; /* out */
};
struct PJRT_Device_DefaultMemory_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Device *device;
  PJRT_Memory *memory; /* out */
};
struct PJRT_Device_GetAttributes_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Device *device;
  const PJRT_NamedValue *attributes; /* out */
  size_t num_attributes; /* out */
  PJRT_Device_Attributes *device_attributes; /* out, owns `attributes` */
  void (*attributes_deleter)(PJRT_Device_Attributes *device_attributes); /* out */
};

/* Memories. */
struct PJRT_Memory_Id_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Memory *memory;
  int id; /* out */
};
struct PJRT_Memory_Kind_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Memory *memory;
  const char *kind; /* out */
  size_t kind_size; /* out */
};
struct PJRT_Memory_Kind_Id_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Memory *memory;
  int kind_id; /* out */
};
struct PJRT_Memory_DebugString_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Memory *memory;
  const char *debug_string; /* out */
  size_t debug_string_size; /* out */
};
struct PJRT_Memory_ToString_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Memory *memory;
  const char *to_string; /* out */
  size_t to_string_size; /* out */
};
struct PJRT_Memory_AddressableByDevices_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Memory *memory;
  PJRT_Device *const *devices; /* out */
  size_t num_devices; /* out */
};

/* Executables (the compiled program; a PJRT_LoadedExecutable is one bound
 * to devices, and hands out a PJRT_Executable view of itself). */
struct PJRT_Executable_Destroy_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
};
struct PJRT_Executable_Name_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  const char *executable_name; /* out */
  size_t executable_name_size; /* out */
};
struct PJRT_Executable_NumReplicas_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  size_t num_replicas; /* out */
};
struct PJRT_Executable_NumPartitions_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  size_t num_partitions; /* out */
};
struct PJRT_Executable_NumOutputs_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  size_t num_outputs; /* out */
};
struct PJRT_Executable_SizeOfGeneratedCodeInBytes_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  int64_t size_in_bytes; /* out */
};
struct PJRT_Executable_GetCostAnalysis_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  size_t num_properties; /* out */
  const PJRT_NamedValue *properties; /* out */
};
struct PJRT_Executable_OutputMemoryKinds_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  size_t num_outputs; /* out */
  const char *const *memory_kinds; /* out */
  const size_t *memory_kind_sizes; /* out */
};
/* Two calls: with program->code NULL it reports code_size, then fills. */
struct PJRT_Executable_OptimizedProgram_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  PJRT_Program *program; /* in/out */
};
struct PJRT_Executable_Serialize_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_Executable *executable;
  const char *serialized_bytes; /* out, owned by serialized_executable */
  size_t serialized_bytes_size; /* out */
  PJRT_SerializedExecutable *serialized_executable; /* out */
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable *exec); /* out */
};
struct PJRT_LoadedExecutable_Destroy_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_LoadedExecutable *executable;
};
struct PJRT_LoadedExecutable_GetExecutable_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_LoadedExecutable *loaded_executable;
  PJRT_Executable *executable; /* out */
};
struct PJRT_LoadedExecutable_AddressableDevices_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_LoadedExecutable *executable;
  PJRT_Device *const *addressable_devices; /* out */
  size_t num_addressable_devices; /* out */
};
struct PJRT_LoadedExecutable_Delete_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_LoadedExecutable *executable;
};
struct PJRT_LoadedExecutable_IsDeleted_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_LoadedExecutable *executable;
  bool is_deleted; /* out */
};
struct PJRT_LoadedExecutable_Execute_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_LoadedExecutable *executable;
  PJRT_ExecuteOptions *options;
  PJRT_Buffer *const *const *argument_lists; /* [num_devices][num_args] */
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer **const *output_lists; /* the caller's [num_devices][outputs], filled */
  PJRT_Event **device_complete_events; /* NULL, or [num_devices], filled */
  PJRT_Device *execute_device; /* NULL: the devices compiled for */
};
struct PJRT_Executable_DeserializeAndLoad_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Client *client;
  const char *serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable *loaded_executable; /* out */
  const char *overridden_serialized_compile_options; /* NULL: the serialized ones */
  size_t overridden_serialized_compile_options_size;
  /* One input appended after 0.94 (jaxlib 0.10.2 passes struct_size 72);
   * its name is not known here and xla_gpu does not read it. */
  const void *unnamed_after_0_94;
};
/* Topologies: the devices a program is compiled for, with or without a
 * client (jax's ahead-of-time compiles). */
typedef struct PJRT_SerializedTopology PJRT_SerializedTopology;
struct PJRT_TopologyDescription_Create_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const char *topology_name;
  size_t topology_name_size;
  const PJRT_NamedValue *create_options;
  size_t num_options;
  PJRT_TopologyDescription *topology; /* out */
};
struct PJRT_TopologyDescription_Destroy_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_TopologyDescription *topology;
};
struct PJRT_TopologyDescription_PlatformName_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_TopologyDescription *topology;
  const char *platform_name; /* out, owned by the topology */
  size_t platform_name_size; /* out */
};
struct PJRT_TopologyDescription_PlatformVersion_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_TopologyDescription *topology;
  const char *platform_version; /* out, owned by the topology */
  size_t platform_version_size; /* out */
};
struct PJRT_TopologyDescription_GetDeviceDescriptions_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_TopologyDescription *topology;
  PJRT_DeviceDescription *const *descriptions; /* out, owned by the topology */
  size_t num_descriptions; /* out */
};
struct PJRT_TopologyDescription_Serialize_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_TopologyDescription *topology;
  const char *serialized_bytes; /* out, owned by serialized_topology */
  size_t serialized_bytes_size; /* out */
  PJRT_SerializedTopology *serialized_topology; /* out */
  void (*serialized_topology_deleter)(PJRT_SerializedTopology *topology); /* out */
};
struct PJRT_TopologyDescription_Deserialize_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const char *serialized_topology;
  size_t serialized_topology_size;
  PJRT_TopologyDescription *topology; /* out */
};
struct PJRT_TopologyDescription_Attributes_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_TopologyDescription *topology;
  const PJRT_NamedValue *attributes; /* out, owned by the topology */
  size_t num_attributes; /* out */
};
/* A compile for a topology: the executable is not loaded on any client. */
struct PJRT_Compile_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  const PJRT_TopologyDescription *topology;
  const PJRT_Program *program;
  const char *compile_options; /* a serialized CompileOptionsProto */
  size_t compile_options_size;
  PJRT_Client *client; /* optional */
  PJRT_Executable *executable; /* out */
};
struct PJRT_Executable_OutputElementTypes_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  PJRT_Buffer_Type *output_types; /* out */
  size_t num_output_types; /* out */
};
struct PJRT_Executable_OutputDimensions_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  size_t num_outputs; /* out */
  const int64_t *dims; /* out, all outputs' dimensions concatenated */
  const size_t *dim_sizes; /* out, num_outputs ranks */
};
struct PJRT_Executable_Fingerprint_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  const char *executable_fingerprint; /* out */
  size_t executable_fingerprint_size; /* out */
};
struct PJRT_Executable_GetCompiledMemoryStats_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  /* All out; device memory first, then host memory. */
  int64_t generated_code_size_in_bytes;
  int64_t argument_size_in_bytes;
  int64_t output_size_in_bytes;
  int64_t alias_size_in_bytes; /* arguments reused as outputs */
  int64_t temp_size_in_bytes;
  int64_t host_generated_code_size_in_bytes;
  int64_t host_argument_size_in_bytes;
  int64_t host_output_size_in_bytes;
  int64_t host_alias_size_in_bytes;
  int64_t host_temp_size_in_bytes;
  int64_t peak_memory_in_bytes;
  int64_t total_size_in_bytes; /* the 0.94 form ends here (120 bytes) */
  int64_t total_allocation_bytes; /* 0.104 */
  int64_t indefinite_allocations; /* 0.104 */
  int64_t peak_unpadded_heap_bytes; /* 0.104 */
};
struct PJRT_LoadedExecutable_GetDeviceAssignment_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_LoadedExecutable *executable;
  const char *serialized_bytes; /* out: a DeviceAssignmentProto */
  size_t serialized_bytes_size; /* out */
  PJRT_DeviceAssignmentSerialized *serialized_device_assignment; /* out */
  void (*serialized_device_assignment_deleter)(PJRT_DeviceAssignmentSerialized *da); /* out */
};
struct PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args { /* 0.96 */
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_LoadedExecutable *executable;
  const PJRT_LogicalDeviceIds *addressable_device_logical_ids; /* out */
  size_t num_addressable_device_logical_ids; /* out */
};
struct PJRT_Executable_ParameterMemoryKinds_Args { /* 0.102 */
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Executable *executable;
  size_t num_parameters; /* out */
  const char *const *memory_kinds; /* out */
  const size_t *memory_kind_sizes; /* out */
};

/* Buffers. */
struct PJRT_Buffer_Destroy_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
};
struct PJRT_Buffer_ElementType_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  PJRT_Buffer_Type type; /* out */
};
struct PJRT_Buffer_Dimensions_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  const int64_t *dims; /* out */
  size_t num_dims; /* out */
};
struct PJRT_Buffer_UnpaddedDimensions_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  const int64_t *unpadded_dims; /* out */
  size_t num_dims; /* out */
};
struct PJRT_Buffer_DynamicDimensionIndices_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  const size_t *dynamic_dim_indices; /* out */
  size_t num_dynamic_dims; /* out */
};
struct PJRT_Buffer_GetMemoryLayout_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  PJRT_Buffer_MemoryLayout layout; /* out, embedded */
};
struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  size_t on_device_size_in_bytes; /* out */
};
struct PJRT_Buffer_Device_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  PJRT_Device *device; /* out */
};
struct PJRT_Buffer_Memory_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  PJRT_Memory *memory; /* out */
};
struct PJRT_Buffer_Delete_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
};
struct PJRT_Buffer_IsDeleted_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  bool is_deleted; /* out */
};
struct PJRT_Buffer_CopyToDevice_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  PJRT_Device *dst_device;
  PJRT_Buffer *dst_buffer; /* out */
};
struct PJRT_Buffer_CopyToMemory_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  PJRT_Memory *dst_memory;
  PJRT_Buffer *dst_buffer; /* out */
};
/* dst NULL asks for the size (written to dst_size). */
struct PJRT_Buffer_ToHostBuffer_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *src;
  PJRT_Buffer_MemoryLayout *host_layout; /* NULL: the buffer's own */
  void *dst; /* in/out */
  size_t dst_size; /* in/out */
  PJRT_Event *event; /* out */
};
struct PJRT_Buffer_IsOnCpu_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  bool is_on_cpu; /* out */
};
struct PJRT_Buffer_ReadyEvent_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  PJRT_Event *event; /* out */
};
struct PJRT_Buffer_UnsafePointer_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  uintptr_t buffer_pointer; /* out */
};
/* While the count is above 0 the data must not move or be freed. */
struct PJRT_Buffer_IncreaseExternalReferenceCount_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
};
struct PJRT_Buffer_DecreaseExternalReferenceCount_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
};
struct PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args {
  XLA_GPU_PJRT_ARGS_HEAD;
  PJRT_Buffer *buffer;
  void *device_memory_ptr; /* out */
};

/* ------------------------------------------------------------ the table --- */

/* One function type per slot: PJRT_Client_Compile_Fn, ... */
#define XLA_GPU_PJRT_SLOT_TYPE_(ret, name) typedef ret (*PJRT_##name##_Fn)(PJRT_##name##_Args *args);
XLA_GPU_PJRT_SLOTS(XLA_GPU_PJRT_SLOT_TYPE_)
#undef XLA_GPU_PJRT_SLOT_TYPE_

typedef struct PJRT_Api {
  size_t struct_size;
  PJRT_Extension_Base *extension_start;
  PJRT_Api_Version pjrt_api_version;
  /* The slots: PJRT_Error_Destroy, PJRT_Error_Message, ... */
#define XLA_GPU_PJRT_SLOT_FIELD_(ret, name) PJRT_##name##_Fn PJRT_##name;
  XLA_GPU_PJRT_SLOTS(XLA_GPU_PJRT_SLOT_FIELD_)
#undef XLA_GPU_PJRT_SLOT_FIELD_
} PJRT_Api;

/* ------------------------------------------- xla_gpu's handle blocks --- */

/* Not PJRT: xla_gpu's own. Every handle the plugin hands out points at one
 * of these blocks, which the Python object behind the handle owns and fills
 * once, when it is made (a buffer's or an executable's facts never change
 * afterwards; a buffer's deletion and array, and an executable's C run
 * path, are set later), or which the library's Execute makes for a result
 * (library_owned: it frees the block at Buffer_Destroy). libXlaGpuPjrt.so
 * answers the getters jax calls on every execute from the block without
 * entering Python, after checking that the handle is live (in its live set
 * or the plugin's handle map) and of the right kind; any
 * other handle goes to the Python slot, which reports the error. The first
 * word is the vtable pointer PJRT_Error and PJRT_Memory start with. */
typedef enum {
  XLA_GPU_PJRT_HANDLE_OTHER = 0,
  XLA_GPU_PJRT_HANDLE_BUFFER = 1,
  XLA_GPU_PJRT_HANDLE_EXECUTABLE = 2, /* a PJRT_LoadedExecutable or its PJRT_Executable */
  XLA_GPU_PJRT_HANDLE_MEMORY = 3
} XlaGpuPjrt_HandleKind;

typedef struct XlaGpuPjrt_Handle {
  const void *vtable;
  uint64_t kind; /* XlaGpuPjrt_HandleKind */
  /* Buffers. */
  PJRT_Device *device;
  PJRT_Memory *memory;
  const int64_t *dims;
  size_t num_dims;
  size_t on_device_size;
  int64_t type; /* PJRT_Buffer_Type */
  uint64_t deleted; /* PJRT_Buffer_Delete or a donation consumed it */
  uint64_t on_cpu; /* PJRT_Buffer_IsOnCpu */
  /* Executables. */
  size_t num_replicas;
  size_t num_partitions;
  size_t num_outputs;
  /* Memories: the memory kind. */
  const char *memory_kind;
  size_t memory_kind_size;
  /* Buffers: the payload object (a PyObject*, borrowed from the owner);
   * NULL once the buffer's array is gone. */
  void *array;
  /* Executables: the cpu target's C run path (a PyObject*, borrowed: the
   * Python executable keeps it) and its outputs' facts; NULL where Execute
   * goes to Python. `device` and `memory` above are where it runs. */
  void *host_run;
  const struct XlaGpuPjrt_Output *outputs;
  /* Buffers: made by the library's Execute; it frees the block. */
  uint64_t library_owned;
  /* Buffers: PJRT_Buffer_IncreaseExternalReferenceCount's count (kept by
   * the Python slots, read under the GIL): a donation leaves a buffer that
   * a numpy view still reads as it is. */
  uint64_t external_refs;
  /* Executables cleared for the library's Execute: the parameters the
   * program donates (input_output_alias), ascending; a run consumes them
   * (deleted, their array dropped) unless jaxlib lists them as not
   * donatable for that call. */
  const int64_t *donated;
  size_t num_donated;
} XlaGpuPjrt_Handle;

/* One output of an executable as the library's Execute makes its buffer. */
typedef struct XlaGpuPjrt_Output {
  int64_t type; /* PJRT_Buffer_Type */
  size_t num_dims;
  size_t on_device_size;
  const int64_t *dims;
} XlaGpuPjrt_Output;

/* ------------------------------------------------- the layout, pinned --- */

/* Sizes and offsets as measured against jaxlib 0.10.2 (x86-64). */
#define XLA_GPU_PJRT_SIZEOF(type, n) \
  XLA_GPU_PJRT_ASSERT(sizeof(type) == (n), "sizeof(" #type ") != " #n)
#define XLA_GPU_PJRT_AT(type, field, n) \
  XLA_GPU_PJRT_ASSERT(offsetof(type, field) == (n), #type "." #field " is not at byte " #n)
/* `n` is the struct_size jaxlib 0.10.2 passes: through the last field. */
#define XLA_GPU_PJRT_PASSED(type, last, n)                           \
  XLA_GPU_PJRT_ASSERT(XLA_GPU_PJRT_SIZE_THROUGH(type, last) == (n), \
                      #type " through " #last " is not " #n " bytes")

XLA_GPU_PJRT_ASSERT(sizeof(void *) == 8 && sizeof(size_t) == 8 && sizeof(int) == 4,
                    "the PJRT layouts here are LP64");
XLA_GPU_PJRT_ASSERT(sizeof(PJRT_Buffer_Type) == 4 && sizeof(PJRT_Error_Code) == 4,
                    "PJRT enums are int-sized");

/* The table: 5 header words, then 138 slots. */
XLA_GPU_PJRT_ASSERT(XLA_GPU_PJRT_NUM_SLOTS == 138, "PJRT 0.112 has 138 slots");
XLA_GPU_PJRT_SIZEOF(PJRT_Api, 1144);
XLA_GPU_PJRT_SIZEOF(PJRT_Api_Version, 24);
XLA_GPU_PJRT_AT(PJRT_Api, pjrt_api_version, 16);
XLA_GPU_PJRT_AT(PJRT_Api_Version, major_version, 16);
XLA_GPU_PJRT_AT(PJRT_Api_Version, minor_version, 20);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Error_Destroy, 40);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Event_OnReady, 112);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Client_Compile, 200);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Client_BufferFromHostBuffer, 216);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Device_MemoryStats, 312);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Executable_Serialize, 432);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_LoadedExecutable_Execute, 480);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Buffer_OpaqueDeviceMemoryDataPointer, 648);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Compile, 752);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats, 808);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_LoadedExecutable_GetDeviceAssignment, 976);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Device_GetAttributes, 1064);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Client_Load, 1072);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_LoadedExecutable_AddressableDeviceLogicalIds, 1080);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Error_ForEachPayload, 1096);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_Executable_ParameterMemoryKinds, 1112);
XLA_GPU_PJRT_AT(PJRT_Api, PJRT_TopologyDescription_GetMemorySpaceKindIds, 1136);
/* Every slot one pointer after the previous one (no padding, no gaps). */
#define XLA_GPU_PJRT_SLOT_AT_(ret, name)                                             \
  XLA_GPU_PJRT_ASSERT(offsetof(PJRT_Api, PJRT_##name) ==                            \
                          offsetof(PJRT_Api, PJRT_Error_Destroy) +                  \
                              sizeof(void *) * XLA_GPU_PJRT_SLOT_##name,            \
                      "slot PJRT_" #name " out of place");
XLA_GPU_PJRT_SLOTS(XLA_GPU_PJRT_SLOT_AT_)
#undef XLA_GPU_PJRT_SLOT_AT_

/* Value structs and vtables. */
XLA_GPU_PJRT_SIZEOF(PJRT_NamedValue, 56);
XLA_GPU_PJRT_AT(PJRT_NamedValue, name, 16);
XLA_GPU_PJRT_AT(PJRT_NamedValue, name_size, 24);
XLA_GPU_PJRT_AT(PJRT_NamedValue, type, 32);
XLA_GPU_PJRT_AT(PJRT_NamedValue, int64_value, 40);
XLA_GPU_PJRT_AT(PJRT_NamedValue, value_size, 48);
XLA_GPU_PJRT_SIZEOF(PJRT_Program, 48);
XLA_GPU_PJRT_AT(PJRT_Program, code, 16);
XLA_GPU_PJRT_AT(PJRT_Program, code_size, 24);
XLA_GPU_PJRT_AT(PJRT_Program, format, 32);
XLA_GPU_PJRT_AT(PJRT_Program, format_size, 40);
XLA_GPU_PJRT_SIZEOF(PJRT_Buffer_MemoryLayout, 80);
XLA_GPU_PJRT_SIZEOF(PJRT_Buffer_MemoryLayout_Tiled, 56);
XLA_GPU_PJRT_AT(PJRT_Buffer_MemoryLayout, tiled, 16);
XLA_GPU_PJRT_AT(PJRT_Buffer_MemoryLayout, strides, 16);
XLA_GPU_PJRT_AT(PJRT_Buffer_MemoryLayout, type, 72);
XLA_GPU_PJRT_SIZEOF(PJRT_ExecuteOptions, 144);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, send_callbacks, 16);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, recv_callbacks, 24);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, num_send_ops, 32);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, num_recv_ops, 40);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, launch_id, 48);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, non_donatable_input_indices, 56);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, num_non_donatable_input_indices, 64);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, context, 72);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, call_location, 80);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, num_tasks, 88);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, task_ids, 96);
XLA_GPU_PJRT_AT(PJRT_ExecuteOptions, incarnation_ids, 104);
XLA_GPU_PJRT_PASSED(PJRT_ExecuteOptions, unnamed_after_0_97, 144);
XLA_GPU_PJRT_SIZEOF(PJRT_Error_FunctionTable, 56);
XLA_GPU_PJRT_AT(PJRT_Error_FunctionTable, extension_start, 16);
XLA_GPU_PJRT_AT(PJRT_Error_FunctionTable, for_each_payload, 48);
XLA_GPU_PJRT_SIZEOF(PJRT_Memory_FunctionTable, 40);
XLA_GPU_PJRT_AT(PJRT_Memory_FunctionTable, instance_struct_size, 16);
XLA_GPU_PJRT_AT(PJRT_Memory_FunctionTable, set_user_data, 32);
XLA_GPU_PJRT_SIZEOF(PJRT_LogicalDeviceIds, 8);

/* The argument structs: struct_size as jaxlib 0.10.2 passes it. */
XLA_GPU_PJRT_PASSED(PJRT_Plugin_Initialize_Args, extension_start, 16);
XLA_GPU_PJRT_PASSED(PJRT_Plugin_Attributes_Args, num_attributes, 32);
XLA_GPU_PJRT_PASSED(PJRT_Error_ForEachPayload_Args, user_arg, 40);
XLA_GPU_PJRT_PASSED(PJRT_Event_IsReady_Args, is_ready, 25);
XLA_GPU_PJRT_PASSED(PJRT_Event_Error_Args, event, 24);
XLA_GPU_PJRT_PASSED(PJRT_Event_OnReady_Args, user_arg, 40);
XLA_GPU_PJRT_PASSED(PJRT_Client_Create_Args, kv_try_get_user_arg, 88);
XLA_GPU_PJRT_AT(PJRT_Client_Create_Args, client, 64);
XLA_GPU_PJRT_PASSED(PJRT_Client_PlatformName_Args, platform_name_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_Client_PlatformVersion_Args, platform_version_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_Client_Devices_Args, num_devices, 40);
XLA_GPU_PJRT_PASSED(PJRT_Client_AddressableDevices_Args, num_addressable_devices, 40);
XLA_GPU_PJRT_PASSED(PJRT_Client_LookupDevice_Args, device, 40);
XLA_GPU_PJRT_PASSED(PJRT_Client_AddressableMemories_Args, num_addressable_memories, 40);
XLA_GPU_PJRT_PASSED(PJRT_Client_Compile_Args, executable, 56);
XLA_GPU_PJRT_AT(PJRT_Client_Compile_Args, client, 16);
XLA_GPU_PJRT_AT(PJRT_Client_Compile_Args, program, 24);
XLA_GPU_PJRT_AT(PJRT_Client_Compile_Args, compile_options, 32);
XLA_GPU_PJRT_AT(PJRT_Client_Compile_Args, compile_options_size, 40);
XLA_GPU_PJRT_AT(PJRT_Client_Compile_Args, executable, 48);
XLA_GPU_PJRT_AT(PJRT_Client_DefaultDeviceAssignment_Args, num_replicas, 24);
XLA_GPU_PJRT_AT(PJRT_Client_DefaultDeviceAssignment_Args, num_partitions, 28);
XLA_GPU_PJRT_AT(PJRT_Client_DefaultDeviceAssignment_Args, default_assignment_size, 32);
XLA_GPU_PJRT_AT(PJRT_Client_DefaultDeviceAssignment_Args, default_assignment, 40);
XLA_GPU_PJRT_PASSED(PJRT_Client_BufferFromHostBuffer_Args, buffer, 120);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, client, 16);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, data, 24);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, type, 32);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, dims, 40);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, num_dims, 48);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, byte_strides, 56);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, num_byte_strides, 64);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics, 72);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, device, 80);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, memory, 88);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, device_layout, 96);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, done_with_host_buffer, 104);
XLA_GPU_PJRT_AT(PJRT_Client_BufferFromHostBuffer_Args, buffer, 112);
XLA_GPU_PJRT_PASSED(PJRT_DeviceDescription_Id_Args, id, 28);
XLA_GPU_PJRT_PASSED(PJRT_DeviceDescription_ProcessIndex_Args, process_index, 28);
XLA_GPU_PJRT_PASSED(PJRT_DeviceDescription_Attributes_Args, attributes, 40);
XLA_GPU_PJRT_AT(PJRT_DeviceDescription_Attributes_Args, num_attributes, 24);
XLA_GPU_PJRT_AT(PJRT_DeviceDescription_Attributes_Args, attributes, 32);
XLA_GPU_PJRT_PASSED(PJRT_DeviceDescription_Kind_Args, device_kind_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_DeviceDescription_DebugString_Args, debug_string_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_DeviceDescription_ToString_Args, to_string_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_Device_GetDescription_Args, device_description, 32);
XLA_GPU_PJRT_PASSED(PJRT_Device_IsAddressable_Args, is_addressable, 25);
XLA_GPU_PJRT_PASSED(PJRT_Device_LocalHardwareId_Args, local_hardware_id, 28);
XLA_GPU_PJRT_PASSED(PJRT_Device_AddressableMemories_Args, num_memories, 40);
XLA_GPU_PJRT_PASSED(PJRT_Device_DefaultMemory_Args, memory, 32);
XLA_GPU_PJRT_PASSED(PJRT_Device_GetAttributes_Args, attributes_deleter, 56);
XLA_GPU_PJRT_AT(PJRT_Device_GetAttributes_Args, attributes, 24);
XLA_GPU_PJRT_AT(PJRT_Device_GetAttributes_Args, num_attributes, 32);
XLA_GPU_PJRT_AT(PJRT_Device_GetAttributes_Args, device_attributes, 40);
XLA_GPU_PJRT_AT(PJRT_Device_GetAttributes_Args, attributes_deleter, 48);
XLA_GPU_PJRT_PASSED(PJRT_Memory_Kind_Args, kind_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_Memory_AddressableByDevices_Args, num_devices, 40);
XLA_GPU_PJRT_PASSED(PJRT_Executable_Name_Args, executable_name_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_Executable_NumOutputs_Args, num_outputs, 32);
XLA_GPU_PJRT_PASSED(PJRT_Executable_GetCostAnalysis_Args, properties, 40);
XLA_GPU_PJRT_PASSED(PJRT_Executable_OutputMemoryKinds_Args, memory_kind_sizes, 48);
XLA_GPU_PJRT_PASSED(PJRT_Executable_ParameterMemoryKinds_Args, memory_kind_sizes, 48);
XLA_GPU_PJRT_PASSED(PJRT_Executable_OptimizedProgram_Args, program, 32);
XLA_GPU_PJRT_PASSED(PJRT_Executable_Serialize_Args, serialized_executable_deleter, 56);
XLA_GPU_PJRT_PASSED(PJRT_Executable_DeserializeAndLoad_Args, unnamed_after_0_94, 72);
XLA_GPU_PJRT_PASSED(PJRT_TopologyDescription_Create_Args, topology, 56);
XLA_GPU_PJRT_PASSED(PJRT_TopologyDescription_Destroy_Args, topology, 24);
XLA_GPU_PJRT_PASSED(PJRT_TopologyDescription_PlatformName_Args, platform_name_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_TopologyDescription_PlatformVersion_Args, platform_version_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_TopologyDescription_GetDeviceDescriptions_Args, num_descriptions, 40);
XLA_GPU_PJRT_PASSED(PJRT_TopologyDescription_Serialize_Args, serialized_topology_deleter, 56);
XLA_GPU_PJRT_PASSED(PJRT_TopologyDescription_Deserialize_Args, topology, 40);
XLA_GPU_PJRT_PASSED(PJRT_TopologyDescription_Attributes_Args, num_attributes, 40);
XLA_GPU_PJRT_PASSED(PJRT_Compile_Args, executable, 64);
XLA_GPU_PJRT_PASSED(PJRT_Client_TopologyDescription_Args, topology, 32);
XLA_GPU_PJRT_PASSED(PJRT_Executable_Fingerprint_Args, executable_fingerprint_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_Executable_OutputDimensions_Args, dim_sizes, 48);
XLA_GPU_PJRT_AT(PJRT_Executable_OutputDimensions_Args, num_outputs, 24);
XLA_GPU_PJRT_AT(PJRT_Executable_OutputDimensions_Args, dims, 32);
XLA_GPU_PJRT_AT(PJRT_Executable_OutputDimensions_Args, dim_sizes, 40);
XLA_GPU_PJRT_PASSED(PJRT_Executable_GetCompiledMemoryStats_Args, peak_unpadded_heap_bytes, 144);
XLA_GPU_PJRT_AT(PJRT_Executable_GetCompiledMemoryStats_Args, total_size_in_bytes, 112);
XLA_GPU_PJRT_AT(PJRT_Executable_GetCompiledMemoryStats_Args, total_allocation_bytes, 120);
XLA_GPU_PJRT_AT(PJRT_Executable_GetCompiledMemoryStats_Args, indefinite_allocations, 128);
XLA_GPU_PJRT_AT(PJRT_Executable_GetCompiledMemoryStats_Args, peak_unpadded_heap_bytes, 136);
XLA_GPU_PJRT_PASSED(PJRT_LoadedExecutable_GetExecutable_Args, executable, 32);
XLA_GPU_PJRT_PASSED(PJRT_LoadedExecutable_AddressableDevices_Args, num_addressable_devices, 40);
XLA_GPU_PJRT_PASSED(PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args,
                    num_addressable_device_logical_ids, 40);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_AddressableDeviceLogicalIds_Args,
                addressable_device_logical_ids, 24);
XLA_GPU_PJRT_PASSED(PJRT_LoadedExecutable_GetDeviceAssignment_Args,
                    serialized_device_assignment_deleter, 56);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_GetDeviceAssignment_Args, serialized_bytes, 24);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_GetDeviceAssignment_Args, serialized_bytes_size, 32);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_GetDeviceAssignment_Args, serialized_device_assignment, 40);
XLA_GPU_PJRT_PASSED(PJRT_LoadedExecutable_Execute_Args, execute_device, 80);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_Execute_Args, executable, 16);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_Execute_Args, options, 24);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_Execute_Args, argument_lists, 32);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_Execute_Args, num_devices, 40);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_Execute_Args, num_args, 48);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_Execute_Args, output_lists, 56);
XLA_GPU_PJRT_AT(PJRT_LoadedExecutable_Execute_Args, device_complete_events, 64);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_ElementType_Args, type, 28);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_Dimensions_Args, num_dims, 40);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_DynamicDimensionIndices_Args, num_dynamic_dims, 40);
XLA_GPU_PJRT_SIZEOF(PJRT_Buffer_GetMemoryLayout_Args, 104);
XLA_GPU_PJRT_AT(PJRT_Buffer_GetMemoryLayout_Args, layout, 24);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes, 32);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_Device_Args, device, 32);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_Memory_Args, memory, 32);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_Delete_Args, buffer, 24);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_IsDeleted_Args, is_deleted, 25);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_ToHostBuffer_Args, event, 56);
XLA_GPU_PJRT_AT(PJRT_Buffer_ToHostBuffer_Args, src, 16);
XLA_GPU_PJRT_AT(PJRT_Buffer_ToHostBuffer_Args, host_layout, 24);
XLA_GPU_PJRT_AT(PJRT_Buffer_ToHostBuffer_Args, dst, 32);
XLA_GPU_PJRT_AT(PJRT_Buffer_ToHostBuffer_Args, dst_size, 40);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_ReadyEvent_Args, event, 32);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_IncreaseExternalReferenceCount_Args, buffer, 24);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_DecreaseExternalReferenceCount_Args, buffer, 24);
XLA_GPU_PJRT_PASSED(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args, device_memory_ptr, 32);

XLA_GPU_PJRT_SIZEOF(XlaGpuPjrt_Handle, 176);
XLA_GPU_PJRT_AT(XlaGpuPjrt_Handle, memory_kind_size, 112);
XLA_GPU_PJRT_AT(XlaGpuPjrt_Handle, array, 120);
XLA_GPU_PJRT_AT(XlaGpuPjrt_Handle, library_owned, 144);
XLA_GPU_PJRT_AT(XlaGpuPjrt_Handle, external_refs, 152);
XLA_GPU_PJRT_AT(XlaGpuPjrt_Handle, num_donated, 168);
XLA_GPU_PJRT_SIZEOF(XlaGpuPjrt_Output, 32);

#undef XLA_GPU_PJRT_SIZEOF
#undef XLA_GPU_PJRT_AT
#undef XLA_GPU_PJRT_PASSED

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* XLA_GPU_PJRT_ABI_H_ */
