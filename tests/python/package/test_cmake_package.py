"""find_package(XlaGpu): a separate C++ project builds against the installed
headers and library and runs the dialect."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import xla_gpu

HERE = Path(__file__).resolve().parents[1]


def _site_packages() -> Path | None:
    spec = importlib.util.find_spec("mlir")
    for path in (spec.submodule_search_locations or []) if spec else []:
        if (Path(path) / "lib" / "cmake" / "mlir").is_dir():
            return Path(path).parent
    return None


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                    reason="needs cmake and a C++ compiler")
def test_cpp_consumer(tmp_path):
    site = _site_packages()
    if site is None:
        pytest.skip("the MLIR SDK (xtc-mlir-dev) is not installed")
    build = tmp_path / "build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(HERE / "cmake_consumer"), "-B", str(build),
                    *generator, "-DCMAKE_BUILD_TYPE=Release",
                    f"-DMLIR_DIR={site / 'mlir/lib/cmake/mlir'}",
                    f"-DLLVM_DIR={site / 'llvm/lib/cmake/llvm'}",
                    f"-DXlaGpu_DIR={xla_gpu.cmake_dir()}"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(
        [str(site / "mlir/_mlir_libs"), str(site / "llvm/lib"),
         str(Path(xla_gpu.library_path()).parent)]))
    ir = ('func.func @f() -> index {\n'
          '  %c = arith.constant 5 : index\n'
          '  %0 = xla_gpu.apply_indexing #xla_gpu.indexing_map<"(th_x) -> (th_x * 2), '
          'domain: th_x in [0, 7]">(%c)\n'
          '  return %0 : index\n}')
    out = subprocess.run([str(build / "consumer"), ir], check=True, env=env,
                         capture_output=True, text=True).stdout
    assert "dims=1 first=th_x range=[0, 7]" in out
    assert "arith.constant 10 : index" in out
