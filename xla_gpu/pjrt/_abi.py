"""The PJRT C API 0.112 layout the plugin speaks (jaxlib 0.10.2), in ctypes.

Only what the plugin touches is declared: the `PJRT_Api` header and slot
order, the argument struct of every slot the plugin implements, the value
structs they reach, the `PJRT_Error` / `PJRT_Memory` vtables, the enums, and
raw field accessors. Every argument struct starts with
`size_t struct_size; PJRT_Extension_Base* extension_start;`, fields follow
at byte 16 (x86-64 / aarch64 LP64 layout); the implementations read and
write fields by byte offset, named by the `Struct` tables below.

pjrt/xla_gpu_pjrt_abi.h declares the same layout in C (and asserts the
sizes measured against jaxlib); tests/python/pjrt/test_pjrt_abi.py compiles it
and checks every table here against it, field by field.
"""
from __future__ import annotations

import ctypes as C

import numpy as np

from .._ctypes_arrays import array_type

API_MAJOR = 0
API_MINOR = 112

# The `PJRT_Api` function slots in table order (PJRT_ prefix dropped), as
# jaxlib 0.10.2's framework (API 0.112) indexes them. Slot i sits at byte
# offset 8 * (5 + i): the header is struct_size, extension_start and a
# 24-byte PJRT_Api_Version {struct_size, extension_start, major, minor}.
SLOTS = (
    "Error_Destroy", "Error_Message", "Error_GetCode", "Plugin_Initialize",
    "Plugin_Attributes", "Event_Destroy", "Event_IsReady", "Event_Error", "Event_Await",
    "Event_OnReady", "Client_Create", "Client_Destroy", "Client_PlatformName",
    "Client_ProcessIndex", "Client_PlatformVersion", "Client_Devices",
    "Client_AddressableDevices", "Client_LookupDevice", "Client_LookupAddressableDevice",
    "Client_AddressableMemories", "Client_Compile", "Client_DefaultDeviceAssignment",
    "Client_BufferFromHostBuffer", "DeviceDescription_Id", "DeviceDescription_ProcessIndex",
    "DeviceDescription_Attributes", "DeviceDescription_Kind", "DeviceDescription_DebugString",
    "DeviceDescription_ToString", "Device_GetDescription", "Device_IsAddressable",
    "Device_LocalHardwareId", "Device_AddressableMemories", "Device_DefaultMemory",
    "Device_MemoryStats", "Memory_Id", "Memory_Kind", "Memory_DebugString", "Memory_ToString",
    "Memory_AddressableByDevices", "Executable_Destroy", "Executable_Name",
    "Executable_NumReplicas", "Executable_NumPartitions", "Executable_NumOutputs",
    "Executable_SizeOfGeneratedCodeInBytes", "Executable_GetCostAnalysis",
    "Executable_OutputMemoryKinds", "Executable_OptimizedProgram", "Executable_Serialize",
    "LoadedExecutable_Destroy", "LoadedExecutable_GetExecutable",
    "LoadedExecutable_AddressableDevices", "LoadedExecutable_Delete",
    "LoadedExecutable_IsDeleted", "LoadedExecutable_Execute", "Executable_DeserializeAndLoad",
    "LoadedExecutable_Fingerprint", "Buffer_Destroy", "Buffer_ElementType", "Buffer_Dimensions",
    "Buffer_UnpaddedDimensions", "Buffer_DynamicDimensionIndices", "Buffer_GetMemoryLayout",
    "Buffer_OnDeviceSizeInBytes", "Buffer_Device", "Buffer_Memory", "Buffer_Delete",
    "Buffer_IsDeleted", "Buffer_CopyToDevice", "Buffer_ToHostBuffer", "Buffer_IsOnCpu",
    "Buffer_ReadyEvent", "Buffer_UnsafePointer", "Buffer_IncreaseExternalReferenceCount",
    "Buffer_DecreaseExternalReferenceCount", "Buffer_OpaqueDeviceMemoryDataPointer",
    "CopyToDeviceStream_Destroy", "CopyToDeviceStream_AddChunk",
    "CopyToDeviceStream_TotalBytes", "CopyToDeviceStream_GranuleSize",
    "CopyToDeviceStream_CurrentBytes", "TopologyDescription_Create",
    "TopologyDescription_Destroy", "TopologyDescription_PlatformName",
    "TopologyDescription_PlatformVersion", "TopologyDescription_GetDeviceDescriptions",
    "TopologyDescription_Serialize", "TopologyDescription_Attributes", "Compile",
    "Executable_OutputElementTypes", "Executable_OutputDimensions", "Buffer_CopyToMemory",
    "Client_CreateViewOfDeviceBuffer", "Executable_Fingerprint", "Client_TopologyDescription",
    "Executable_GetCompiledMemoryStats", "Memory_Kind_Id", "ExecuteContext_Create",
    "ExecuteContext_Destroy", "Buffer_CopyRawToHost",
    "AsyncHostToDeviceTransferManager_Destroy", "AsyncHostToDeviceTransferManager_TransferData",
    "Client_CreateBuffersForAsyncHostToDevice",
    "AsyncHostToDeviceTransferManager_RetrieveBuffer", "AsyncHostToDeviceTransferManager_Device",
    "AsyncHostToDeviceTransferManager_BufferCount", "AsyncHostToDeviceTransferManager_BufferSize",
    "AsyncHostToDeviceTransferManager_SetBufferError",
    "AsyncHostToDeviceTransferManager_AddMetadata", "Client_DmaMap", "Client_DmaUnmap",
    "Client_CreateUninitializedBuffer", "Client_UpdateGlobalProcessInfo",
    "TopologyDescription_Deserialize", "Client_CreateAliasBuffer", "Client_FulfillAliasBuffer",
    "LoadedExecutable_GetDeviceAssignment", "Client_CreateErrorBuffer",
    "AsyncHostToDeviceTransferManager_TransferLiteral", "Buffer_CopyRawToHostFuture",
    "Device_PoisonExecution", "Device_CreateAsyncTrackingEvent", "AsyncTrackingEvent_Destroy",
    "Executable_GetCompileOptions", "Buffer_DonateWithControlDependency", "Event_Create",
    "Event_Set", "Device_GetAttributes",
    # Added after 0.94.
    "Client_Load", "LoadedExecutable_AddressableDeviceLogicalIds", "Buffer_Bitcast",
    "Error_ForEachPayload", "TopologyDescription_Fingerprint",
    "Executable_ParameterMemoryKinds", "Device_ClearMemoryStats",
    "TopologyDescription_MakeCanonicalShapeForMemorySpace",
    "TopologyDescription_GetMemorySpaceKindIds",
)
assert len(SLOTS) == 138
# The two slots that return void; every other one returns PJRT_Error*.
VOID_SLOTS = frozenset({"Error_Destroy", "Error_Message"})


class Enum:
    """A C enum of the ABI: members are attributes (ERROR_CODE.INTERNAL);
    in C each is `prefix + name` (PJRT_Error_Code_INTERNAL)."""

    def __init__(self, c_name: str, prefix: str, **members: int):
        self.c_name = c_name
        self.prefix = prefix
        self.members = dict(members)
        for name, value in members.items():
            setattr(self, name, value)

    def __getitem__(self, name: str) -> int:
        return self.members[name]


class Struct:
    """A C struct of the ABI: its name in pjrt/xla_gpu_pjrt_abi.h, its
    sizeof, and each field's byte offset as an attribute
    (`EXECUTE.num_devices == 40`)."""

    def __init__(self, c_name: str, size: int, **fields: int):
        reserved = {"c_name", "size", "fields"} & set(fields)
        if reserved:
            raise ValueError(f"{c_name}: field names {sorted(reserved)} clash with Struct's own")
        self.c_name = c_name
        self.size = size
        self.fields = dict(fields)
        for name, offset in fields.items():
            setattr(self, name, offset)

    def __repr__(self) -> str:
        return f"Struct({self.c_name}, {self.size}, {self.fields})"


# Every table, by C name (what the ABI test walks).
STRUCTS: dict[str, Struct] = {}
ENUMS: dict[str, Enum] = {}
# Slot name -> the table of its argument struct.
ARGS: dict[str, Struct] = {}


def _struct(c_name: str, size: int, **fields: int) -> Struct:
    layout = Struct(c_name, size, **fields)
    STRUCTS[c_name] = layout
    return layout


def _args(slot: str, size: int, **fields: int) -> Struct:
    """The argument struct of `slot`: the two-word head, then `fields`."""
    assert slot in SLOTS, slot
    layout = _struct(f"PJRT_{slot}_Args", size, struct_size=0, extension_start=8, **fields)
    ARGS[slot] = layout
    return layout


def _enum(c_name: str, prefix: str, **members: int) -> Enum:
    ENUMS[c_name] = e = Enum(c_name, prefix, **members)
    return e


# ----------------------------------------------------------------------------- enums
ERROR_CODE = _enum(
    "PJRT_Error_Code", "PJRT_Error_Code_", OK=0, CANCELLED=1, UNKNOWN=2, INVALID_ARGUMENT=3,
    DEADLINE_EXCEEDED=4, NOT_FOUND=5, ALREADY_EXISTS=6, PERMISSION_DENIED=7,
    RESOURCE_EXHAUSTED=8, FAILED_PRECONDITION=9, ABORTED=10, OUT_OF_RANGE=11,
    UNIMPLEMENTED=12, INTERNAL=13, UNAVAILABLE=14, DATA_LOSS=15, UNAUTHENTICATED=16)
BUFFER_TYPE = _enum(
    "PJRT_Buffer_Type", "PJRT_Buffer_Type_", INVALID=0, PRED=1, S8=2, S16=3, S32=4, S64=5,
    U8=6, U16=7, U32=8, U64=9, F16=10, F32=11, F64=12, BF16=13, C64=14, C128=15, F8E5M2=16,
    F8E4M3FN=17, F8E4M3B11FNUZ=18, F8E5M2FNUZ=19, F8E4M3FNUZ=20, S4=21, U4=22, TOKEN=23,
    S2=24, U2=25, F8E4M3=26, F8E3M4=27, F8E8M0FNU=28, F4E2M1FN=29, S1=30, U1=31)
NAMED_VALUE_TYPE = _enum(
    "PJRT_NamedValue_Type", "PJRT_NamedValue_", kString=0, kInt64=1, kInt64List=2, kFloat=3,
    kBool=4)
HOST_BUFFER_SEMANTICS = _enum(
    "PJRT_HostBufferSemantics", "PJRT_HostBufferSemantics_", kImmutableOnlyDuringCall=0,
    kImmutableUntilTransferCompletes=1, kImmutableZeroCopy=2, kMutableZeroCopy=3)
MEMORY_LAYOUT_TYPE = _enum(
    "PJRT_Buffer_MemoryLayout_Type", "PJRT_Buffer_MemoryLayout_Type_", Tiled=0, Strides=1)

# The error codes the plugin answers with.
INVALID_ARGUMENT = ERROR_CODE.INVALID_ARGUMENT
DEADLINE_EXCEEDED = ERROR_CODE.DEADLINE_EXCEEDED
RESOURCE_EXHAUSTED = ERROR_CODE.RESOURCE_EXHAUSTED
FAILED_PRECONDITION = ERROR_CODE.FAILED_PRECONDITION
UNIMPLEMENTED = ERROR_CODE.UNIMPLEMENTED
INTERNAL = ERROR_CODE.INTERNAL

NV_STRING = NAMED_VALUE_TYPE.kString
NV_INT64 = NAMED_VALUE_TYPE.kInt64
NV_INT64_LIST = NAMED_VALUE_TYPE.kInt64List
NV_FLOAT = NAMED_VALUE_TYPE.kFloat
NV_BOOL = NAMED_VALUE_TYPE.kBool

# ----------------------------------------------------------------------------- the table
POINTER = C.sizeof(C.c_void_p)   # one slot, one element of a pointer array

API_VERSION = _struct("PJRT_Api_Version", 24, struct_size=0, extension_start=8,
                      major_version=16, minor_version=20)
# struct_size, extension_start, the embedded PJRT_Api_Version, then the slots.
_FIRST_SLOT = 16 + API_VERSION.size
API = _struct("PJRT_Api", _FIRST_SLOT + POINTER * len(SLOTS), struct_size=0,
              extension_start=8, pjrt_api_version=16,
              **{f"PJRT_{name}": _FIRST_SLOT + POINTER * i for i, name in enumerate(SLOTS)})
API_STRUCT_SIZE = API.size  # 1144, what jaxlib 0.10.2 expects at 0.112


def slot_offset(name: str) -> int:
    """Byte offset of slot `name` (PJRT_ prefix dropped) in PJRT_Api."""
    return API.fields[f"PJRT_{name}"]


# ----------------------------------------------------------------------------- values and vtables
NAMED_VALUE = _struct(
    "PJRT_NamedValue", 56, struct_size=0, extension_start=8, name=16, name_size=24, type=32,
    # One union: the member that holds the value depends on `type`.
    string_value=40, int64_value=40, int64_array_value=40, float_value=40, bool_value=40,
    value_size=48)
NAMED_VALUE_SIZE = NAMED_VALUE.size
PROGRAM = _struct("PJRT_Program", 48, struct_size=0, extension_start=8, code=16, code_size=24,
                  format=32, format_size=40)
MEMORY_LAYOUT_TILED = _struct(
    "PJRT_Buffer_MemoryLayout_Tiled", 56, struct_size=0, extension_start=8, minor_to_major=16,
    minor_to_major_size=24, tile_dims=32, tile_dim_sizes=40, num_tiles=48)
MEMORY_LAYOUT_STRIDES = _struct(
    "PJRT_Buffer_MemoryLayout_Strides", 32, struct_size=0, extension_start=8, byte_strides=16,
    num_byte_strides=24)
# `tiled` and `strides` share one union; `type` says which is set.
MEMORY_LAYOUT = _struct("PJRT_Buffer_MemoryLayout", 80, struct_size=0, extension_start=8,
                        tiled=16, strides=16, type=72)
# The 0.112 form jaxlib 0.10.2 passes (the 0.94 form ends at incarnation_ids).
EXECUTE_OPTIONS = _struct(
    "PJRT_ExecuteOptions", 144, struct_size=0, extension_start=8, send_callbacks=16,
    recv_callbacks=24, num_send_ops=32, num_recv_ops=40, launch_id=48,
    non_donatable_input_indices=56, num_non_donatable_input_indices=64, context=72,
    call_location=80, num_tasks=88, task_ids=96, incarnation_ids=104, multi_slice_config=112,
    unnamed_after_0_97=120)
LOGICAL_DEVICE_IDS = _struct("PJRT_LogicalDeviceIds", 8, replica_id=0, partition_id=4)
ERROR_VTABLE = _struct(
    "PJRT_Error_FunctionTable", 56, struct_size=0, instance_size=8, extension_start=16,
    destroy=24, message=32, get_code=40, for_each_payload=48)
MEMORY_VTABLE = _struct(
    "PJRT_Memory_FunctionTable", 40, struct_size=0, extension_start=8, instance_struct_size=16,
    get_user_data=24, set_user_data=32)
# PJRT_Error and PJRT_Memory objects start with their vtable pointer.
ERROR = _struct("PJRT_Error", 8, vtable=0)
MEMORY = _struct("PJRT_Memory", 8, vtable=0)

# xla_gpu's own handle block (not PJRT): what every handle the plugin hands
# out points at. libXlaGpuPjrt.so answers the per-execute getters from it
# (pjrt/xla_gpu_pjrt_abi.h says why).
HANDLE_KIND = _enum("XlaGpuPjrt_HandleKind", "XLA_GPU_PJRT_HANDLE_", OTHER=0, BUFFER=1,
                    EXECUTABLE=2, MEMORY=3)
HANDLE = _struct("XlaGpuPjrt_Handle", 176, vtable=0, kind=8, device=16, memory=24, dims=32,
                 num_dims=40, on_device_size=48, type=56, deleted=64, on_cpu=72,
                 num_replicas=80, num_partitions=88, num_outputs=96, memory_kind=104,
                 memory_kind_size=112, array=120, host_run=128, outputs=136,
                 library_owned=144, external_refs=152, donated=160, num_donated=168)
OUTPUT = _struct("XlaGpuPjrt_Output", 32, type=0, num_dims=8, on_device_size=16, dims=24)

# ----------------------------------------------------------------------------- argument structs
# Errors.
ERROR_DESTROY = _args("Error_Destroy", 24, error=16)
ERROR_MESSAGE = _args("Error_Message", 40, error=16, message=24, message_size=32)
ERROR_GET_CODE = _args("Error_GetCode", 32, error=16, code=24)
ERROR_FOR_EACH_PAYLOAD = _args("Error_ForEachPayload", 40, error=16, visitor=24, user_arg=32)
# Plugin.
PLUGIN_INITIALIZE = _args("Plugin_Initialize", 16)
PLUGIN_ATTRIBUTES = _args("Plugin_Attributes", 32, attributes=16, num_attributes=24)
# Events.
EVENT_DESTROY = _args("Event_Destroy", 24, event=16)
EVENT_IS_READY = _args("Event_IsReady", 32, event=16, is_ready=24)
EVENT_ERROR = _args("Event_Error", 24, event=16)
EVENT_AWAIT = _args("Event_Await", 24, event=16)
EVENT_ON_READY = _args("Event_OnReady", 40, event=16, callback=24, user_arg=32)
# Client.
CLIENT_CREATE = _args(
    "Client_Create", 88, create_options=16, num_options=24, kv_get_callback=32,
    kv_get_user_arg=40, kv_put_callback=48, kv_put_user_arg=56, client=64,
    kv_try_get_callback=72, kv_try_get_user_arg=80)
CLIENT_DESTROY = _args("Client_Destroy", 24, client=16)
CLIENT_PLATFORM_NAME = _args("Client_PlatformName", 40, client=16, platform_name=24,
                             platform_name_size=32)
CLIENT_PROCESS_INDEX = _args("Client_ProcessIndex", 32, client=16, process_index=24)
CLIENT_PLATFORM_VERSION = _args("Client_PlatformVersion", 40, client=16, platform_version=24,
                                platform_version_size=32)
CLIENT_DEVICES = _args("Client_Devices", 40, client=16, devices=24, num_devices=32)
CLIENT_ADDRESSABLE_DEVICES = _args("Client_AddressableDevices", 40, client=16,
                                   addressable_devices=24, num_addressable_devices=32)
CLIENT_LOOKUP_DEVICE = _args("Client_LookupDevice", 40, client=16, id=24, device=32)
CLIENT_LOOKUP_ADDRESSABLE_DEVICE = _args("Client_LookupAddressableDevice", 40, client=16,
                                         local_hardware_id=24, addressable_device=32)
CLIENT_ADDRESSABLE_MEMORIES = _args("Client_AddressableMemories", 40, client=16,
                                    addressable_memories=24, num_addressable_memories=32)
CLIENT_COMPILE = _args("Client_Compile", 56, client=16, program=24, compile_options=32,
                       compile_options_size=40, executable=48)
CLIENT_DEFAULT_DEVICE_ASSIGNMENT = _args(
    "Client_DefaultDeviceAssignment", 48, client=16, num_replicas=24, num_partitions=28,
    default_assignment_size=32, default_assignment=40)
CLIENT_BUFFER_FROM_HOST_BUFFER = _args(
    "Client_BufferFromHostBuffer", 120, client=16, data=24, type=32, dims=40, num_dims=48,
    byte_strides=56, num_byte_strides=64, host_buffer_semantics=72, device=80, memory=88,
    device_layout=96, done_with_host_buffer=104, buffer=112)
# Device descriptions.
DEVICE_DESCRIPTION_ID = _args("DeviceDescription_Id", 32, device_description=16, id=24)
DEVICE_DESCRIPTION_PROCESS_INDEX = _args("DeviceDescription_ProcessIndex", 32,
                                         device_description=16, process_index=24)
# num_attributes before the array (unlike the other attribute structs).
DEVICE_DESCRIPTION_ATTRIBUTES = _args("DeviceDescription_Attributes", 40,
                                      device_description=16, num_attributes=24, attributes=32)
DEVICE_DESCRIPTION_KIND = _args("DeviceDescription_Kind", 40, device_description=16,
                                device_kind=24, device_kind_size=32)
DEVICE_DESCRIPTION_DEBUG_STRING = _args("DeviceDescription_DebugString", 40,
                                        device_description=16, debug_string=24,
                                        debug_string_size=32)
DEVICE_DESCRIPTION_TO_STRING = _args("DeviceDescription_ToString", 40, device_description=16,
                                     to_string=24, to_string_size=32)
# Devices.
DEVICE_GET_DESCRIPTION = _args("Device_GetDescription", 32, device=16, device_description=24)
DEVICE_IS_ADDRESSABLE = _args("Device_IsAddressable", 32, device=16, is_addressable=24)
DEVICE_LOCAL_HARDWARE_ID = _args("Device_LocalHardwareId", 32, device=16, local_hardware_id=24)
DEVICE_ADDRESSABLE_MEMORIES = _args("Device_AddressableMemories", 40, device=16, memories=24,
                                    num_memories=32)
DEVICE_DEFAULT_MEMORY = _args("Device_DefaultMemory", 32, device=16, memory=24)
DEVICE_GET_ATTRIBUTES = _args("Device_GetAttributes", 56, device=16, attributes=24,
                              num_attributes=32, device_attributes=40, attributes_deleter=48)
# Memories.
MEMORY_ID = _args("Memory_Id", 32, memory=16, id=24)
MEMORY_KIND = _args("Memory_Kind", 40, memory=16, kind=24, kind_size=32)
MEMORY_KIND_ID = _args("Memory_Kind_Id", 32, memory=16, kind_id=24)
MEMORY_DEBUG_STRING = _args("Memory_DebugString", 40, memory=16, debug_string=24,
                            debug_string_size=32)
MEMORY_TO_STRING = _args("Memory_ToString", 40, memory=16, to_string=24, to_string_size=32)
MEMORY_ADDRESSABLE_BY_DEVICES = _args("Memory_AddressableByDevices", 40, memory=16,
                                      devices=24, num_devices=32)
# Executables.
EXECUTABLE_DESTROY = _args("Executable_Destroy", 24, executable=16)
EXECUTABLE_NAME = _args("Executable_Name", 40, executable=16, executable_name=24,
                        executable_name_size=32)
EXECUTABLE_NUM_REPLICAS = _args("Executable_NumReplicas", 32, executable=16, num_replicas=24)
EXECUTABLE_NUM_PARTITIONS = _args("Executable_NumPartitions", 32, executable=16,
                                  num_partitions=24)
EXECUTABLE_NUM_OUTPUTS = _args("Executable_NumOutputs", 32, executable=16, num_outputs=24)
EXECUTABLE_SIZE_OF_GENERATED_CODE = _args("Executable_SizeOfGeneratedCodeInBytes", 32,
                                          executable=16, size_in_bytes=24)
EXECUTABLE_GET_COST_ANALYSIS = _args("Executable_GetCostAnalysis", 40, executable=16,
                                     num_properties=24, properties=32)
EXECUTABLE_OUTPUT_MEMORY_KINDS = _args("Executable_OutputMemoryKinds", 48, executable=16,
                                       num_outputs=24, memory_kinds=32, memory_kind_sizes=40)
EXECUTABLE_PARAMETER_MEMORY_KINDS = _args(
    "Executable_ParameterMemoryKinds", 48, executable=16, num_parameters=24, memory_kinds=32,
    memory_kind_sizes=40)
EXECUTABLE_OPTIMIZED_PROGRAM = _args("Executable_OptimizedProgram", 32, executable=16,
                                     program=24)
EXECUTABLE_SERIALIZE = _args("Executable_Serialize", 56, executable=16, serialized_bytes=24,
                             serialized_bytes_size=32, serialized_executable=40,
                             serialized_executable_deleter=48)
EXECUTABLE_DESERIALIZE_AND_LOAD = _args(
    "Executable_DeserializeAndLoad", 72, client=16, serialized_executable=24,
    serialized_executable_size=32, loaded_executable=40,
    overridden_serialized_compile_options=48, overridden_serialized_compile_options_size=56,
    unnamed_after_0_94=64)
TOPOLOGY_CREATE = _args("TopologyDescription_Create", 56, topology_name=16,
                        topology_name_size=24, create_options=32, num_options=40, topology=48)
TOPOLOGY_DESTROY = _args("TopologyDescription_Destroy", 24, topology=16)
TOPOLOGY_PLATFORM_NAME = _args("TopologyDescription_PlatformName", 40, topology=16,
                               platform_name=24, platform_name_size=32)
TOPOLOGY_PLATFORM_VERSION = _args("TopologyDescription_PlatformVersion", 40, topology=16,
                                  platform_version=24, platform_version_size=32)
TOPOLOGY_GET_DEVICE_DESCRIPTIONS = _args("TopologyDescription_GetDeviceDescriptions", 40,
                                         topology=16, descriptions=24, num_descriptions=32)
TOPOLOGY_SERIALIZE = _args("TopologyDescription_Serialize", 56, topology=16,
                           serialized_bytes=24, serialized_bytes_size=32,
                           serialized_topology=40, serialized_topology_deleter=48)
TOPOLOGY_DESERIALIZE = _args("TopologyDescription_Deserialize", 40, serialized_topology=16,
                             serialized_topology_size=24, topology=32)
TOPOLOGY_ATTRIBUTES = _args("TopologyDescription_Attributes", 40, topology=16, attributes=24,
                            num_attributes=32)
COMPILE = _args("Compile", 64, topology=16, program=24, compile_options=32,
                compile_options_size=40, client=48, executable=56)
CLIENT_TOPOLOGY_DESCRIPTION = _args("Client_TopologyDescription", 32, client=16, topology=24)
EXECUTABLE_OUTPUT_ELEMENT_TYPES = _args("Executable_OutputElementTypes", 40, executable=16,
                                        output_types=24, num_output_types=32)
EXECUTABLE_OUTPUT_DIMENSIONS = _args("Executable_OutputDimensions", 48, executable=16,
                                     num_outputs=24, dims=32, dim_sizes=40)
EXECUTABLE_FINGERPRINT = _args("Executable_Fingerprint", 40, executable=16,
                               executable_fingerprint=24, executable_fingerprint_size=32)
# The 0.94 form ends at total_size_in_bytes (120); 0.104 appended three.
EXECUTABLE_GET_COMPILED_MEMORY_STATS = _args(
    "Executable_GetCompiledMemoryStats", 144, executable=16, generated_code_size_in_bytes=24,
    argument_size_in_bytes=32, output_size_in_bytes=40, alias_size_in_bytes=48,
    temp_size_in_bytes=56, host_generated_code_size_in_bytes=64,
    host_argument_size_in_bytes=72, host_output_size_in_bytes=80, host_alias_size_in_bytes=88,
    host_temp_size_in_bytes=96, peak_memory_in_bytes=104, total_size_in_bytes=112,
    total_allocation_bytes=120, indefinite_allocations=128, peak_unpadded_heap_bytes=136)
# Loaded executables.
LOADED_EXECUTABLE_DESTROY = _args("LoadedExecutable_Destroy", 24, executable=16)
LOADED_EXECUTABLE_GET_EXECUTABLE = _args("LoadedExecutable_GetExecutable", 32,
                                         loaded_executable=16, executable=24)
LOADED_EXECUTABLE_ADDRESSABLE_DEVICES = _args(
    "LoadedExecutable_AddressableDevices", 40, executable=16, addressable_devices=24,
    num_addressable_devices=32)
LOADED_EXECUTABLE_ADDRESSABLE_DEVICE_LOGICAL_IDS = _args(
    "LoadedExecutable_AddressableDeviceLogicalIds", 40, executable=16,
    addressable_device_logical_ids=24, num_addressable_device_logical_ids=32)
LOADED_EXECUTABLE_GET_DEVICE_ASSIGNMENT = _args(
    "LoadedExecutable_GetDeviceAssignment", 56, executable=16, serialized_bytes=24,
    serialized_bytes_size=32, serialized_device_assignment=40,
    serialized_device_assignment_deleter=48)
LOADED_EXECUTABLE_DELETE = _args("LoadedExecutable_Delete", 24, executable=16)
LOADED_EXECUTABLE_IS_DELETED = _args("LoadedExecutable_IsDeleted", 32, executable=16,
                                     is_deleted=24)
EXECUTE = _args("LoadedExecutable_Execute", 80, executable=16, options=24, argument_lists=32,
                num_devices=40, num_args=48, output_lists=56, device_complete_events=64,
                execute_device=72)
# Buffers.
BUFFER_DESTROY = _args("Buffer_Destroy", 24, buffer=16)
BUFFER_ELEMENT_TYPE = _args("Buffer_ElementType", 32, buffer=16, type=24)
BUFFER_DIMENSIONS = _args("Buffer_Dimensions", 40, buffer=16, dims=24, num_dims=32)
BUFFER_UNPADDED_DIMENSIONS = _args("Buffer_UnpaddedDimensions", 40, buffer=16,
                                   unpadded_dims=24, num_dims=32)
BUFFER_DYNAMIC_DIMENSION_INDICES = _args("Buffer_DynamicDimensionIndices", 40, buffer=16,
                                         dynamic_dim_indices=24, num_dynamic_dims=32)
# `layout` is a PJRT_Buffer_MemoryLayout embedded in the struct.
BUFFER_GET_MEMORY_LAYOUT = _args("Buffer_GetMemoryLayout", 104, buffer=16, layout=24)
BUFFER_ON_DEVICE_SIZE_IN_BYTES = _args("Buffer_OnDeviceSizeInBytes", 32, buffer=16,
                                       on_device_size_in_bytes=24)
BUFFER_DEVICE = _args("Buffer_Device", 32, buffer=16, device=24)
BUFFER_MEMORY = _args("Buffer_Memory", 32, buffer=16, memory=24)
BUFFER_DELETE = _args("Buffer_Delete", 24, buffer=16)
BUFFER_IS_DELETED = _args("Buffer_IsDeleted", 32, buffer=16, is_deleted=24)
BUFFER_COPY_TO_DEVICE = _args("Buffer_CopyToDevice", 40, buffer=16, dst_device=24,
                              dst_buffer=32)
BUFFER_COPY_TO_MEMORY = _args("Buffer_CopyToMemory", 40, buffer=16, dst_memory=24,
                              dst_buffer=32)
BUFFER_TO_HOST_BUFFER = _args("Buffer_ToHostBuffer", 56, src=16, host_layout=24, dst=32,
                              dst_size=40, event=48)
BUFFER_IS_ON_CPU = _args("Buffer_IsOnCpu", 32, buffer=16, is_on_cpu=24)
BUFFER_READY_EVENT = _args("Buffer_ReadyEvent", 32, buffer=16, event=24)
BUFFER_UNSAFE_POINTER = _args("Buffer_UnsafePointer", 32, buffer=16, buffer_pointer=24)
BUFFER_INCREASE_EXTERNAL_REFERENCE_COUNT = _args("Buffer_IncreaseExternalReferenceCount", 24,
                                                 buffer=16)
BUFFER_DECREASE_EXTERNAL_REFERENCE_COUNT = _args("Buffer_DecreaseExternalReferenceCount", 24,
                                                 buffer=16)
BUFFER_OPAQUE_DEVICE_MEMORY_DATA_POINTER = _args("Buffer_OpaqueDeviceMemoryDataPointer", 32,
                                                 buffer=16, device_memory_ptr=24)


def _buffer_types() -> dict[int, np.dtype]:
    """PJRT_Buffer_Type -> numpy dtype (the enum differs from XLA's
    PrimitiveType numbering for bf16, complex and the float8 types, so it
    is mapped by name)."""
    types = {BUFFER_TYPE[name]: t for name, t in (
        ("PRED", np.bool_), ("S8", np.int8), ("S16", np.int16), ("S32", np.int32),
        ("S64", np.int64), ("U8", np.uint8), ("U16", np.uint16), ("U32", np.uint32),
        ("U64", np.uint64), ("F16", np.float16), ("F32", np.float32), ("F64", np.float64),
        ("C64", np.complex64), ("C128", np.complex128))}
    try:
        import ml_dtypes
    except ImportError:  # bf16/float8 buffers are then refused by name
        pass
    else:
        for code, name in (("BF16", "bfloat16"), ("F8E5M2", "float8_e5m2"),
                           ("F8E4M3FN", "float8_e4m3fn"), ("F8E4M3B11FNUZ", "float8_e4m3b11fnuz"),
                           ("F8E5M2FNUZ", "float8_e5m2fnuz"), ("F8E4M3FNUZ", "float8_e4m3fnuz"),
                           ("S4", "int4"), ("U4", "uint4"),
                           # TOKEN has no array.
                           ("S2", "int2"), ("U2", "uint2"), ("F8E4M3", "float8_e4m3"),
                           ("F8E3M4", "float8_e3m4"), ("F8E8M0FNU", "float8_e8m0fnu"),
                           ("F4E2M1FN", "float4_e2m1fn")):
            if hasattr(ml_dtypes, name):
                types[BUFFER_TYPE[code]] = getattr(ml_dtypes, name)
    return {code: np.dtype(t) for code, t in types.items()}


BUFFER_TYPES = _buffer_types()
DTYPE_CODES = {dt: code for code, dt in BUFFER_TYPES.items()}

# Raw field access into the argument structs jaxlib passes.
u64 = C.c_uint64
i32 = C.c_int32
i64 = C.c_int64


def rd(addr: int, off: int) -> int:
    return u64.from_address(addr + off).value


def rd_i32(addr: int, off: int) -> int:
    return i32.from_address(addr + off).value


def wr(addr: int, off: int, value: int | None) -> None:
    u64.from_address(addr + off).value = value or 0


def wr_i32(addr: int, off: int, value: int) -> None:
    i32.from_address(addr + off).value = value


def wr_bool(addr: int, off: int, value: bool) -> None:
    C.c_uint8.from_address(addr + off).value = 1 if value else 0


def rd_i64s(addr: int, n: int) -> list[int]:
    return list(array_type(i64, n).from_address(addr)) if n else []


def rd_bytes(addr: int, n: int) -> bytes:
    return C.string_at(addr, n) if n else b""


class CString:
    """A NUL-terminated byte string kept alive with its owner. Held in a
    bytearray, not a `create_string_buffer`: that makes a ctypes array type
    per length, which lives in reference cycles once dropped (jax's tests
    count the garbage a jit call leaves)."""
    __slots__ = ("buf", "addr", "size")

    def __init__(self, text: str | bytes):
        data = text.encode() if isinstance(text, str) else text
        self.buf = bytearray(data)
        self.buf.append(0)
        self.addr = C.addressof(C.c_char.from_buffer(self.buf))
        self.size = len(data)

    @property
    def data(self) -> bytes:
        """The string's bytes (without the NUL)."""
        return bytes(self.buf[:self.size])


class NamedValues:
    """An array of PJRT_NamedValue that owns its strings and lists."""

    def __init__(self, items: list[tuple[str, object]]):
        self.keep: list = []
        self.array = array_type(C.c_uint8, NAMED_VALUE.size * max(1, len(items)))()
        self.addr = C.addressof(self.array)
        self.count = len(items)
        for k, (name, value) in enumerate(items):
            nv = self.addr + NAMED_VALUE.size * k
            wr(nv, NAMED_VALUE.struct_size, NAMED_VALUE.size)
            s = self._str(name)
            wr(nv, NAMED_VALUE.name, s.addr)
            wr(nv, NAMED_VALUE.name_size, s.size)
            if isinstance(value, str):
                s = self._str(value)
                wr_i32(nv, NAMED_VALUE.type, NV_STRING)
                wr(nv, NAMED_VALUE.string_value, s.addr)
                wr(nv, NAMED_VALUE.value_size, s.size)
            elif isinstance(value, bool):
                wr_i32(nv, NAMED_VALUE.type, NV_BOOL)
                wr_bool(nv, NAMED_VALUE.bool_value, value)
                wr(nv, NAMED_VALUE.value_size, 1)
            elif isinstance(value, int):
                wr_i32(nv, NAMED_VALUE.type, NV_INT64)
                i64.from_address(nv + NAMED_VALUE.int64_value).value = value
                wr(nv, NAMED_VALUE.value_size, 1)
            elif isinstance(value, float):
                wr_i32(nv, NAMED_VALUE.type, NV_FLOAT)
                C.c_float.from_address(nv + NAMED_VALUE.float_value).value = value
                wr(nv, NAMED_VALUE.value_size, 1)
            else:
                values = list(value)
                arr = array_type(i64, max(1, len(values)))(*values)
                self.keep.append(arr)
                wr_i32(nv, NAMED_VALUE.type, NV_INT64_LIST)
                wr(nv, NAMED_VALUE.int64_array_value, C.addressof(arr))
                wr(nv, NAMED_VALUE.value_size, len(values))

    def _str(self, text: str) -> CString:
        s = CString(text)
        self.keep.append(s)
        return s


def read_named_values(addr: int, count: int) -> dict[str, object]:
    """PJRT_NamedValue array -> dict (options jax passes to Client_Create)."""
    out: dict[str, object] = {}
    for k in range(count):
        nv = addr + NAMED_VALUE.size * k
        name = rd_bytes(rd(nv, NAMED_VALUE.name), rd(nv, NAMED_VALUE.name_size)).decode()
        kind = rd_i32(nv, NAMED_VALUE.type)
        if kind == NV_STRING:
            text = rd_bytes(rd(nv, NAMED_VALUE.string_value), rd(nv, NAMED_VALUE.value_size))
            out[name] = text.decode()
        elif kind == NV_INT64:
            out[name] = i64.from_address(nv + NAMED_VALUE.int64_value).value
        elif kind == NV_INT64_LIST:
            out[name] = rd_i64s(rd(nv, NAMED_VALUE.int64_array_value),
                                rd(nv, NAMED_VALUE.value_size))
        elif kind == NV_FLOAT:
            out[name] = C.c_float.from_address(nv + NAMED_VALUE.float_value).value
        elif kind == NV_BOOL:
            out[name] = bool(C.c_uint8.from_address(nv + NAMED_VALUE.bool_value).value)
    return out


# Function types of the table and of the callbacks the plugin calls or serves.
SLOT_FN = C.CFUNCTYPE(C.c_void_p, C.c_void_p)
VOID_SLOT_FN = C.CFUNCTYPE(None, C.c_void_p)
ON_READY_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p)       # (PJRT_Error*, user_arg)
DELETER_FN = C.CFUNCTYPE(None, C.c_void_p)
# PJRT_Error vtable (0.112): destroy, message, get_code, for_each_payload.
ERR_DESTROY_FN = C.CFUNCTYPE(None, C.c_void_p)
ERR_MESSAGE_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p, C.c_void_p)
ERR_CODE_FN = C.CFUNCTYPE(C.c_int, C.c_void_p)
ERR_PAYLOAD_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p, C.c_void_p)
# PJRT_Memory vtable (0.112): get_user_data(memory, key), set_user_data(memory, key, data, dtor).
MEM_GET_FN = C.CFUNCTYPE(C.c_void_p, C.c_void_p, C.c_void_p)
MEM_SET_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p, C.c_void_p, C.c_void_p)
