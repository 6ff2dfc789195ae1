"""The PJRT C API layout, declared twice: in C (pjrt/xla_gpu_pjrt_abi.h,
which asserts the sizes measured against jaxlib 0.10.2) and in Python
(xla_gpu/pjrt/_abi.py, whose offset tables the plugin reads and writes the
argument structs with). A small C program built against the header prints
sizeof / offsetof of every (struct, field) in the Python tables and the value
of every enumerator; they must agree, so the two cannot drift apart.

Needs a C compiler, not jax.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from xla_gpu.pjrt import _abi as A

ROOT = Path(__file__).resolve().parents[3]
HEADER = ROOT / "pjrt" / "xla_gpu_pjrt_abi.h"


def _compiler(env: str, *names: str) -> str | None:
    for name in (os.environ.get(env), *names):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


CC = _compiler("CC", "cc", "gcc", "clang")
CXX = _compiler("CXX", "c++", "g++", "clang++")
pytestmark = pytest.mark.skipif(CC is None or not HEADER.is_file(),
                                reason="no C compiler or no pjrt/ sources")


def _probe_source(structs: dict[str, A.Struct], enums: dict[str, A.Enum]) -> str:
    """A program printing what the header says about every table entry."""
    lines = ['#include <stdio.h>', '#include "xla_gpu_pjrt_abi.h"', "int main(void) {",
             '  printf("version API %d %d\\n", XLA_GPU_PJRT_API_MAJOR, XLA_GPU_PJRT_API_MINOR);',
             '  printf("slots count %d\\n", (int)XLA_GPU_PJRT_NUM_SLOTS);']
    for c_name, layout in structs.items():
        lines.append(f'  printf("size {c_name} %zu\\n", sizeof({c_name}));')
        for field in layout.fields:
            lines.append(f'  printf("field {c_name}.{field} %zu\\n", offsetof({c_name}, {field}));')
    for enum in enums.values():
        lines.append(f'  printf("enum {enum.c_name} %zu\\n", sizeof({enum.c_name}));')
        for name in enum.members:
            c = enum.prefix + name
            lines.append(f'  printf("value {c} %lld\\n", (long long){c});')
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def _build(compiler: str, source: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    src = out.with_suffix(".cc" if "++" in Path(compiler).name else ".c")
    src.write_text(source)
    return subprocess.run([compiler, *flags, "-Wall", f"-I{HEADER.parent}", str(src), "-o",
                           str(out)], capture_output=True, text=True, timeout=300)


def _measure(compiler: str, out: Path, *flags: str) -> dict[str, int]:
    done = _build(compiler, _probe_source(A.STRUCTS, A.ENUMS), out, *flags)
    assert done.returncode == 0, done.stderr[-4000:]
    run = subprocess.run([str(out)], capture_output=True, text=True, timeout=60, check=True)
    measured = {}
    for line in run.stdout.splitlines():
        kind, key, *values = line.split()
        measured[f"{kind} {key}"] = [int(v) for v in values]
    return measured


def _mismatches(measured: dict[str, list[int]]) -> list[str]:
    """Every place where _abi's tables differ from what the header says."""
    expected = {"version API": [A.API_MAJOR, A.API_MINOR], "slots count": [len(A.SLOTS)]}
    for c_name, layout in A.STRUCTS.items():
        expected[f"size {c_name}"] = [layout.size]
        for field, offset in layout.fields.items():
            expected[f"field {c_name}.{field}"] = [offset]
    for enum in A.ENUMS.values():
        expected[f"enum {enum.c_name}"] = [4]
        for name, value in enum.members.items():
            expected[f"value {enum.prefix}{name}"] = [value]
    return [f"{key}: _abi.py says {want}, the header {measured.get(key)}"
            for key, want in expected.items() if measured.get(key) != want]


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, list[int]]:
    return _measure(CC, tmp_path_factory.mktemp("pjrt_abi") / "probe", "-std=c11")


def test_every_field_size_and_enumerator_matches_the_header(measured):
    assert _mismatches(measured) == []
    # Everything the plugin touches is covered: all argument structs of the
    # slots it implements, the value structs, the vtables and the table.
    assert len([k for k in measured if k.startswith("field ")]) == sum(
        len(s.fields) for s in A.STRUCTS.values())
    assert len(A.STRUCTS) >= 99


def test_table_size_and_slot_order(measured):
    assert [A.API_STRUCT_SIZE] == measured["size PJRT_Api"] == [1144]
    assert len(A.SLOTS) == measured["slots count"][0] == 138
    assert [A.API_MAJOR, A.API_MINOR] == measured["version API"] == [0, 112]
    # Slot i of _abi.SLOTS is the header's i-th function pointer.
    offsets = [measured[f"field PJRT_Api.PJRT_{name}"][0] for name in A.SLOTS]
    assert offsets == [40 + 8 * i for i in range(138)]
    assert A.slot_offset("Device_GetAttributes") == 1064
    assert A.slot_offset("Error_ForEachPayload") == 1096


def test_a_wrong_entry_in_the_python_tables_is_reported(measured, monkeypatch):
    monkeypatch.setitem(A.EXECUTE.fields, "num_devices", 48)
    monkeypatch.setattr(A.EXECUTE_OPTIONS, "size", 112)
    monkeypatch.setitem(A.BUFFER_TYPE.members, "TOKEN", 17)   # XLA's number, not PJRT's
    swapped = dict(A.API.fields, PJRT_Buffer_Device=A.API.fields["PJRT_Buffer_Memory"],
                   PJRT_Buffer_Memory=A.API.fields["PJRT_Buffer_Device"])
    monkeypatch.setattr(A.API, "fields", swapped)
    assert sorted(_mismatches(measured)) == sorted([
        "size PJRT_ExecuteOptions: _abi.py says [112], the header [144]",
        "field PJRT_Api.PJRT_Buffer_Device: _abi.py says [568], the header [560]",
        "field PJRT_Api.PJRT_Buffer_Memory: _abi.py says [560], the header [568]",
        "field PJRT_LoadedExecutable_Execute_Args.num_devices: _abi.py says [48], "
        "the header [40]",
        "value PJRT_Buffer_Type_TOKEN: _abi.py says [17], the header [23]",
    ])


def test_a_field_the_header_lacks_does_not_build(tmp_path):
    bogus = A.Struct("PJRT_LoadedExecutable_Execute_Args", 80, num_replicas=40)
    done = _build(CC, _probe_source({bogus.c_name: bogus}, {}), tmp_path / "probe", "-std=c11")
    assert done.returncode != 0
    assert "num_replicas" in done.stderr


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
def test_the_header_gives_cxx_the_same_layout(measured, tmp_path):
    assert _measure(CXX, tmp_path / "probe", "-std=c++11") == measured


def test_every_implemented_slot_has_its_argument_table():
    from xla_gpu.pjrt import _plugin as P
    assert set(P.IMPL) <= set(A.ARGS)
    # A slot served by another's implementation (Client_AddressableDevices by
    # Client_Devices, ...) must have that one's layout, field for field.
    aliases = {name: fn.__name__ for name, fn in P.IMPL.items() if fn.__name__ != name}
    assert aliases == {
        "Client_AddressableDevices": "Client_Devices",
        "DeviceDescription_ToString": "DeviceDescription_DebugString",
        "Memory_ToString": "Memory_DebugString",
        "Buffer_UnpaddedDimensions": "Buffer_Dimensions",
        "Buffer_OpaqueDeviceMemoryDataPointer": "Buffer_UnsafePointer",
    }
    for name, served_by in aliases.items():
        mine, theirs = A.ARGS[name], A.ARGS[served_by]
        assert mine.size == theirs.size, name
        assert sorted(mine.fields.values()) == sorted(theirs.fields.values()), name
