"""The ctypes side of the C API (xla_gpu._native.C_SIGNATURES) against the
installed CAPI.h: every signature is compiled as a C++ static_assert, so a
changed header fails here instead of corrupting calls at run time."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import xla_gpu
from xla_gpu import _native


def _header_functions(header: Path) -> set[str]:
    return set(re.findall(r"MLIR_CAPI_EXPORTED\s+[\w\s\*]+?\b(xlaGpu\w+)\s*\(",
                          header.read_text()))


def test_every_exported_function_is_declared_to_ctypes():
    header = Path(xla_gpu.include_dir()) / "xla_gpu" / "CAPI.h"
    assert header.exists(), header
    assert _header_functions(header) == set(_native.C_SIGNATURES)


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="no C++ compiler")
def test_ctypes_signatures_match_the_header(tmp_path):
    import mlir
    compiler = shutil.which("c++") or shutil.which("g++")
    mlir_include = Path(list(mlir.__path__)[0]) / "include"
    checks = []
    for name, (result, params) in _native.C_SIGNATURES.items():
        signature = f"{result} (*)({', '.join(params) or 'void'})"
        checks.append(f"static_assert(std::is_same_v<decltype(&{name}), {signature}>, "
                      f"\"{name}: the header and xla_gpu._native disagree\");")
    source = tmp_path / "abi.cc"
    source.write_text("#include <type_traits>\n#include \"xla_gpu/CAPI.h\"\n" + "\n".join(checks) + "\n")
    result = subprocess.run([compiler, "-std=c++17", "-fsyntax-only",
                             f"-I{xla_gpu.include_dir()}", f"-I{mlir_include}", str(source)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]


def test_the_check_fails_on_a_wrong_signature(tmp_path, monkeypatch):
    signatures = dict(_native.C_SIGNATURES)
    signatures["xlaGpuIndexingMapAttrSimplify"] = ("MlirAttribute", ("MlirAffineMap",))
    monkeypatch.setattr(_native, "C_SIGNATURES", signatures)
    with pytest.raises(AssertionError, match="header and xla_gpu._native disagree"):
        test_ctypes_signatures_match_the_header(tmp_path)
