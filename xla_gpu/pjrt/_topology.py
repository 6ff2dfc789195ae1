"""Topologies: the devices a program is compiled for, with no client to run
it (jax's ahead-of-time path, `jax.experimental.topologies`), and a
client's own.

    topologies.get_topology_desc("cuda:sm_90", platform="xla_gpu")
    topologies.get_topology_desc("cpu", platform="xla_gpu", num_devices=8)

The name picks the target: "" the one a client here would run (as
XLA_GPU_PJRT_TARGET resolves it, XLA_GPU_NUM_DEVICES devices), "cpu",
"cuda" (sm_90) or "cuda:sm_XX". The options give the device count:
`num_devices=N`, or `topology="AxB..."` (the product), as jax's GPU
plugin takes it. A cuda topology has one device, as the cuda client does.

`PJRT_Compile` compiles for a topology without a client (nor a GPU: the
cuda target's kernels are made by LLVM's NVPTX backend and ptxas); the
executable serializes with its compiled program and loads, with no
compile, on a client of the same target.
"""
from __future__ import annotations

import ctypes as C
import json
import re

from .._ctypes_arrays import array_type
from . import _abi as A
from . import _plugin as P
from ._abi import rd, wr

_DEFAULT_ARCH = "sm_90"
# (a client reports its GPU as sm_XY: no architecture-specific "a" forms,
# which no client could load)
_ARCH = re.compile(r"sm_\d{2,3}")
_FORMAT = "xla_gpu-topology-1"
_OPTIONS = ("num_devices", "topology")


class _TopologyDevice(P._Handle):
    """A device of a topology: what an executable compiled for it is
    assigned (it runs on the client's device of the same id once loaded)."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index


class Topology(P._Handle):
    def __init__(self, target: str, arch: str | None, num_devices: int,
                 descriptions: list | None = None, devices: list | None = None):
        super().__init__()
        # A client's topology (its devices and descriptions) lives as long
        # as the client.
        self.of_client = devices is not None
        self.target, self.arch, self.num_devices = target, arch, num_devices
        self.devices = devices or [_TopologyDevice(i) for i in range(num_devices)]
        self.descriptions = descriptions or [
            P.DeviceDescription(i, target, arch) for i in range(num_devices)]
        self.descriptions_array = array_type(A.u64, num_devices)(
            *[d.addr for d in self.descriptions])
        self.compile_options = {"target": target} if arch is None else \
            {"target": target, "arch": arch}
        version = P.platform_version_text(target, arch)
        if not self.of_client:
            # jax compiles for a topology through the client of the same
            # platform version where there is one, with a call into jaxlib
            # (PyClient.compile(topology=...)) that keeps the GIL while its
            # worker thread runs PJRT_Compile, which is Python here: a
            # deadlock. Another version sends it through the compile-only
            # client, which lets the GIL go.
            version = version[:-1] + ", ahead of time)"
        self.platform_version = A.CString(version)
        self.attributes = A.NamedValues([("target", target), ("num_devices", num_devices)] +
                                        ([("arch", arch)] if arch else []))
        self.serialized = A.CString(json.dumps(
            {"format": _FORMAT, "target": target, "arch": arch,
             "num_devices": num_devices}, sort_keys=True))

    def place(self) -> "P._Place":
        return P._Place(self.devices, self.compile_options,
                        f"the topology has {self.num_devices} "
                        f"(give get_topology_desc num_devices=N for more)")


def _bad(message: str) -> P._PjrtError:
    return P._PjrtError(A.INVALID_ARGUMENT, f"xla_gpu topology: {message}")


def _device_count(options: dict) -> int | None:
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise _bad(f"unknown option(s) {', '.join(unknown)}; it takes {', '.join(_OPTIONS)}")
    counts = []
    if "num_devices" in options:
        value = options["num_devices"]
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(f"num_devices={value!r} is not a number of devices")
        counts.append(value)
    if "topology" in options:
        value = options["topology"]
        parts = str(value).split("x")
        if not all(p.isdigit() for p in parts):
            raise _bad(f"topology={value!r} is not of the form AxB... (numbers of devices)")
        product = 1
        for p in parts:
            product *= int(p)
        counts.append(product)
    if len(set(counts)) > 1:
        raise _bad(f"num_devices={counts[0]} and topology={options['topology']!r} "
                   f"({counts[1]} devices) disagree")
    if counts and not 1 <= counts[0] <= P.MAX_DEVICES:
        raise _bad(f"{counts[0]} devices; a topology has 1 to {P.MAX_DEVICES}")
    return counts[0] if counts else None


def make_topology(name: str, options: dict) -> Topology:
    """The topology `name` with `options` names (see the module's text)."""
    count = _device_count(options)
    target, _, arch = name.strip().partition(":")
    if target == "":
        # What the client here runs.
        client = P._client()
        mine = P._compile_options()
        target, arch = mine["target"], mine.get("arch", "")
        if count is None:
            count = len(client.devices)
    if target not in ("cpu", "cuda"):
        raise _bad(f"unknown topology name {name!r}: it is \"\", \"cpu\", \"cuda\" or "
                   f"\"cuda:sm_XX\"")
    if target == "cpu":
        if arch:
            raise _bad(f"the cpu target has no GPU architecture ({name!r})")
        arch = None
        if count is None:
            count = P.num_devices_from_env()
    else:
        arch = arch or _DEFAULT_ARCH
        if not _ARCH.fullmatch(arch):
            raise _bad(f"{arch!r} is not a GPU architecture (sm_90, sm_80, ...)")
        if count not in (None, 1):
            raise _bad(f"a cuda topology has one device (the cuda client runs on GPU 0), "
                       f"not {count}")
        count = 1
    return Topology(target, arch, count)


def _topology(addr: int, what: str) -> Topology:
    return P._get(addr, Topology, what)


def _client_topology(client: "P.Client") -> Topology:
    """The client's own topology (kept with it): its devices' descriptions."""
    with P._lock:
        topology = getattr(client, "topology", None)
        if topology is None:
            options = P._compile_options()
            topology = client.topology = Topology(
                options["target"], options.get("arch"), len(client.devices),
                descriptions=[d.description for d in client.devices], devices=client.devices)
        return topology


# ----------------------------------------------------------------------------- the slots
def _answer(a, f, what: str, attribute: str, fields: tuple[int, int]) -> None:
    """Writes the topology's `attribute` (a CString, an array or named
    values) and its length into the out fields at `fields`."""
    t = _topology(rd(a, f.topology), f"PJRT_TopologyDescription_{what}")
    value = getattr(t, attribute)
    at, count = fields
    if isinstance(value, A.CString):
        wr(a, at, value.addr)
        wr(a, count, value.size)
    elif isinstance(value, A.NamedValues):
        wr(a, at, value.addr)
        wr(a, count, value.count)
    else:
        wr(a, at, C.addressof(value))
        wr(a, count, len(value))


@P.slot
def TopologyDescription_Create(a):
    f = A.TOPOLOGY_CREATE
    name = A.rd_bytes(rd(a, f.topology_name), rd(a, f.topology_name_size)).decode(
        errors="replace") if rd(a, f.topology_name) else ""
    options = A.read_named_values(rd(a, f.create_options), rd(a, f.num_options))
    wr(a, f.topology, make_topology(name, options).addr)


@P.slot
def TopologyDescription_Destroy(a):
    topology = P._objects.get(rd(a, A.TOPOLOGY_DESTROY.topology))
    if isinstance(topology, Topology) and not topology.of_client:
        for handle in (*topology.descriptions, *topology.devices, topology):
            handle.release()


@P.slot
def TopologyDescription_PlatformName(a):
    f = A.TOPOLOGY_PLATFORM_NAME
    _topology(rd(a, f.topology), "PJRT_TopologyDescription_PlatformName")
    wr(a, f.platform_name, P._PLATFORM_NAME.addr)
    wr(a, f.platform_name_size, P._PLATFORM_NAME.size)


@P.slot
def TopologyDescription_PlatformVersion(a):
    f = A.TOPOLOGY_PLATFORM_VERSION
    _answer(a, f, "PlatformVersion", "platform_version",
            (f.platform_version, f.platform_version_size))


@P.slot
def TopologyDescription_GetDeviceDescriptions(a):
    f = A.TOPOLOGY_GET_DEVICE_DESCRIPTIONS
    _answer(a, f, "GetDeviceDescriptions", "descriptions_array",
            (f.descriptions, f.num_descriptions))


@P.slot
def TopologyDescription_Serialize(a):
    f = A.TOPOLOGY_SERIALIZE
    t = _topology(rd(a, f.topology), "PJRT_TopologyDescription_Serialize")
    P.write_owned_bytes(a, (f.serialized_bytes, f.serialized_bytes_size,
                            f.serialized_topology, f.serialized_topology_deleter), t.serialized)


@P.slot
def TopologyDescription_Deserialize(a):
    f = A.TOPOLOGY_DESERIALIZE
    blob = A.rd_bytes(rd(a, f.serialized_topology), rd(a, f.serialized_topology_size))
    try:
        d = json.loads(blob)
        ok = d.get("format") == _FORMAT
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise _bad("not a serialized xla_gpu topology")
    name = d.get("target", "") + (f":{d['arch']}" if d.get("arch") else "")
    wr(a, f.topology, make_topology(name, {"num_devices": d.get("num_devices")}).addr)


@P.slot
def TopologyDescription_Attributes(a):
    f = A.TOPOLOGY_ATTRIBUTES
    _answer(a, f, "Attributes", "attributes", (f.attributes, f.num_attributes))


@P.slot
def Client_TopologyDescription(a):
    f = A.CLIENT_TOPOLOGY_DESCRIPTION
    client = P._get(rd(a, f.client), P.Client, "PJRT_Client_TopologyDescription")
    wr(a, f.topology, _client_topology(client).addr)


@P.slot
def Compile(a):
    f, p = A.COMPILE, A.PROGRAM
    t = _topology(rd(a, f.topology), "PJRT_Compile")
    program = rd(a, f.program)
    code = A.rd_bytes(rd(program, p.code), rd(program, p.code_size))
    fmt = A.rd_bytes(rd(program, p.format), rd(program, p.format_size)).decode(errors="replace")
    options = A.rd_bytes(rd(a, f.compile_options), rd(a, f.compile_options_size))
    exe = P.compile_for(code, fmt, options, t.place())
    exe.on_client = False
    wr(a, f.executable, exe.view.addr)
