"""The PJRT C API 0.112 layout the plugin speaks (jaxlib 0.10.2), in ctypes.

Only what the plugin touches is declared: the `PJRT_Api` header and slot
order, the `PJRT_Error` / `PJRT_Memory` vtables, `PJRT_NamedValue`, the buffer
type enum, and raw field accessors. Every argument struct starts with
`size_t struct_size; PJRT_Extension_Base* extension_start;`, fields follow
at byte 16 (x86-64 / aarch64 LP64 layout); the implementations read and
write fields by byte offset, as the C structs lay them out.
"""
from __future__ import annotations

import ctypes as C

import numpy as np

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
API_STRUCT_SIZE = 8 * (5 + len(SLOTS))  # 1144, what jaxlib 0.10.2 expects at 0.112
# The two slots that return void; every other one returns PJRT_Error*.
VOID_SLOTS = frozenset({"Error_Destroy", "Error_Message"})

# absl status codes (PJRT_Error_Code).
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
UNIMPLEMENTED = 12
INTERNAL = 13

# PJRT_NamedValue_Type.
NV_STRING, NV_INT64, NV_INT64_LIST, NV_FLOAT, NV_BOOL = 0, 1, 2, 3, 4
NAMED_VALUE_SIZE = 56


def _buffer_types() -> dict[int, np.dtype]:
    """PJRT_Buffer_Type -> numpy dtype (the enum differs from XLA's
    PrimitiveType numbering for bf16, complex and the float8 types)."""
    types = {1: np.bool_, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.uint8,
             7: np.uint16, 8: np.uint32, 9: np.uint64, 10: np.float16, 11: np.float32,
             12: np.float64, 14: np.complex64, 15: np.complex128}
    try:
        import ml_dtypes
    except ImportError:  # bf16/float8 buffers are then refused by name
        pass
    else:
        for code, name in ((13, "bfloat16"), (16, "float8_e5m2"), (17, "float8_e4m3fn"),
                           (18, "float8_e4m3b11fnuz"), (19, "float8_e5m2fnuz"),
                           (20, "float8_e4m3fnuz"), (21, "int4"), (22, "uint4"),
                           # 23 is the token type, which has no array.
                           (24, "int2"), (25, "uint2"), (26, "float8_e4m3"),
                           (27, "float8_e3m4"), (28, "float8_e8m0fnu"), (29, "float4_e2m1fn")):
            if hasattr(ml_dtypes, name):
                types[code] = getattr(ml_dtypes, name)
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
    return list((i64 * n).from_address(addr)) if n else []


def rd_bytes(addr: int, n: int) -> bytes:
    return C.string_at(addr, n) if n else b""


class CString:
    """A NUL-terminated byte string kept alive with its owner."""
    __slots__ = ("buf", "addr", "size")

    def __init__(self, text: str | bytes):
        data = text.encode() if isinstance(text, str) else text
        self.buf = C.create_string_buffer(data, len(data) + 1)
        self.addr = C.addressof(self.buf)
        self.size = len(data)


class NamedValues:
    """An array of PJRT_NamedValue that owns its strings and lists."""

    def __init__(self, items: list[tuple[str, object]]):
        self.keep: list = []
        self.array = (C.c_uint8 * (NAMED_VALUE_SIZE * max(1, len(items))))()
        self.addr = C.addressof(self.array)
        self.count = len(items)
        for k, (name, value) in enumerate(items):
            nv = self.addr + NAMED_VALUE_SIZE * k
            wr(nv, 0, NAMED_VALUE_SIZE)
            s = self._str(name)
            wr(nv, 16, s.addr)
            wr(nv, 24, s.size)
            if isinstance(value, str):
                s = self._str(value)
                wr_i32(nv, 32, NV_STRING)
                wr(nv, 40, s.addr)
                wr(nv, 48, s.size)
            elif isinstance(value, bool):
                wr_i32(nv, 32, NV_BOOL)
                wr_bool(nv, 40, value)
                wr(nv, 48, 1)
            elif isinstance(value, int):
                wr_i32(nv, 32, NV_INT64)
                i64.from_address(nv + 40).value = value
                wr(nv, 48, 1)
            elif isinstance(value, float):
                wr_i32(nv, 32, NV_FLOAT)
                C.c_float.from_address(nv + 40).value = value
                wr(nv, 48, 1)
            else:
                values = list(value)
                arr = (i64 * max(1, len(values)))(*values)
                self.keep.append(arr)
                wr_i32(nv, 32, NV_INT64_LIST)
                wr(nv, 40, C.addressof(arr))
                wr(nv, 48, len(values))

    def _str(self, text: str) -> CString:
        s = CString(text)
        self.keep.append(s)
        return s


def read_named_values(addr: int, count: int) -> dict[str, object]:
    """PJRT_NamedValue array -> dict (options jax passes to Client_Create)."""
    out: dict[str, object] = {}
    for k in range(count):
        nv = addr + NAMED_VALUE_SIZE * k
        name = rd_bytes(rd(nv, 16), rd(nv, 24)).decode()
        kind = rd_i32(nv, 32)
        if kind == NV_STRING:
            out[name] = rd_bytes(rd(nv, 40), rd(nv, 48)).decode()
        elif kind == NV_INT64:
            out[name] = i64.from_address(nv + 40).value
        elif kind == NV_INT64_LIST:
            out[name] = rd_i64s(rd(nv, 40), rd(nv, 48))
        elif kind == NV_FLOAT:
            out[name] = C.c_float.from_address(nv + 40).value
        elif kind == NV_BOOL:
            out[name] = bool(C.c_uint8.from_address(nv + 40).value)
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
