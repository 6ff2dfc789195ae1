# The hottest modules of the HLO passes, compiled ahead of time by Cython into
# CPython extension modules that sit next to their Python sources in the
# installed package (Python's import system takes an extension module before
# a source of the same name). Same source, same semantics: the code is not
# rewritten for Cython and its annotations are not read as C types, so every
# value stays a Python object; what the compiled twin saves is the
# interpreter's dispatch of each bytecode, and priority fusion (the largest
# pass) takes about a fifth less time. A 12-layer GPT step compiles 12-18%
# faster.
#
# Only for a wheel or a non-editable install, and only where Cython is there
# (it is in the build requirements): an editable install keeps the sources
# live (a compiled twin would hide an edit), and without Cython the package is
# pure Python as before. XLA_GPU_PURE_PYTHON=1 at run time loads the sources
# even where the twins are installed (xla_gpu/_source_first.py).
#
# The extensions are built for the interpreter that builds the package (its
# version-specific suffix, not the stable ABI): another CPython finds no
# twin it can load and imports the sources.
option(XLA_GPU_COMPILE_HOT_MODULES
       "Compile the HLO passes' hottest Python modules with Cython" ON)

# Paths under xla_gpu/, without ".py".
set(XLA_GPU_HOT_MODULES
    hlo/module
    hlo/shape
    hlo/passes/cost_model
    hlo/passes/fusion_utils
    hlo/passes/priority_fusion)

if(XLA_GPU_COMPILE_HOT_MODULES AND NOT "${SKBUILD_STATE}" STREQUAL "editable")
  find_package(Python 3.11 REQUIRED COMPONENTS Interpreter Development.Module)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c "import Cython; print(Cython.__version__)"
    OUTPUT_VARIABLE _xla_gpu_cython_version OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _xla_gpu_cython_missing ERROR_QUIET)
  if(_xla_gpu_cython_missing EQUAL 0)
    message(STATUS "Cython ${_xla_gpu_cython_version}: compiling ${XLA_GPU_HOT_MODULES}")
    foreach(module IN LISTS XLA_GPU_HOT_MODULES)
      string(REPLACE "/" "." dotted "xla_gpu/${module}")
      string(REPLACE "/" "_" target "xla_gpu_compiled_${module}")
      get_filename_component(name "${module}" NAME)
      get_filename_component(folder "${module}" DIRECTORY)
      set(source "${PROJECT_SOURCE_DIR}/xla_gpu/${module}.py")
      set(out_dir "${CMAKE_CURRENT_BINARY_DIR}/compiled_python/${folder}")
      set(c_file "${out_dir}/${name}.c")
      add_custom_command(
        OUTPUT "${c_file}"
        COMMAND "${CMAKE_COMMAND}" -E make_directory "${out_dir}"
        # annotation_typing=False: annotations stay documentation (a
        # parameter annotated `list` may be given a tuple, as in Python).
        COMMAND "${Python_EXECUTABLE}" -m cython -3 -X annotation_typing=False
                --module-name "${dotted}" -o "${c_file}" "${source}"
        DEPENDS "${source}"
        COMMENT "Cython: xla_gpu/${module}.py"
        VERBATIM)
      Python_add_library(${target} MODULE WITH_SOABI "${c_file}")
      set_target_properties(${target} PROPERTIES
        OUTPUT_NAME "${name}" LIBRARY_OUTPUT_DIRECTORY "${out_dir}")
      # (-O2 rather than the build's -O3: Cython's C is large, and what the
      # twin saves is the interpreter's dispatch, not what -O3 adds; the
      # generated code warns by design.)
      target_compile_options(${target} PRIVATE -O2 -w)
      install(TARGETS ${target} LIBRARY DESTINATION "${XLA_GPU_PYTHON_DIR}/${folder}")
    endforeach()
  else()
    message(STATUS "Cython not found: the Python modules stay pure Python")
  endif()
endif()
