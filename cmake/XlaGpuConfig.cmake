# CMake package of the installed xla_gpu dialect. Find it with
#   find_package(XlaGpu CONFIG REQUIRED
#                HINTS "$(python -c 'import xla_gpu; print(xla_gpu.cmake_dir())')")
# You also need MLIR 22.1's headers (find_package(MLIR)) on the include path.
# Headers are namespaced: #include "xla_gpu/XlaGpuDialect.h", "xla_gpu/Passes.h",
# "xla_gpu/CAPI.h", "xla_gpu/IndexingMap.h".
get_filename_component(_xla_gpu_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(XlaGpu_INCLUDE_DIRS "${_xla_gpu_root}/include")
set(XlaGpu_PLUGIN "${_xla_gpu_root}/lib/XlaGpuPlugin.so")
# libXlaGpu.so runs over the MLIR of the Python bindings installed beside it.
get_filename_component(_xla_gpu_site "${_xla_gpu_root}/../.." ABSOLUTE)
set(XlaGpu_MLIR_LIBRARIES "")
foreach(_lib "mlir/_mlir_libs/libMLIRPythonCAPI.so" "llvm/lib/libLLVM.so")
  if(EXISTS "${_xla_gpu_site}/${_lib}")
    list(APPEND XlaGpu_MLIR_LIBRARIES "${_xla_gpu_site}/${_lib}")
  endif()
endforeach()
if(NOT TARGET XlaGpu::XlaGpu)
  add_library(XlaGpu::XlaGpu SHARED IMPORTED)
  set_target_properties(XlaGpu::XlaGpu PROPERTIES
    IMPORTED_LOCATION "${_xla_gpu_root}/lib/libXlaGpu.so"
    INTERFACE_INCLUDE_DIRECTORIES "${XlaGpu_INCLUDE_DIRS}"
    INTERFACE_LINK_LIBRARIES "${XlaGpu_MLIR_LIBRARIES}")
  add_library(XlaGpu::XlaGpuStatic STATIC IMPORTED)
  set_target_properties(XlaGpu::XlaGpuStatic PROPERTIES
    IMPORTED_LOCATION "${_xla_gpu_root}/lib/libXlaGpuStatic.a"
    INTERFACE_INCLUDE_DIRECTORIES "${XlaGpu_INCLUDE_DIRS}")
endif()
set(XlaGpu_FOUND TRUE)
