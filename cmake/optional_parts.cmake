# The optional parts of the build and the dependencies they need. The machines scripts/gpu-check
# runs on have CUDA, CMake, Ninja and nlohmann-json but none of LLVM 19, OpenBLAS, oneDNN, MPI or
# GoogleTest (and no network); a build without them still has the reference backend, the runtime
# (orthogonalize on ref and cuda, the Muon optimizer, ZeRO with the NCCL engine), the C API, the
# `orthojit` CLI and the Python extension. What needs a part that is not built says so at run time
# ("this build has no CPU backend (LLVM 19 was not found at configure time); use backend ref or
# cuda"), and `orthojit info` lists the parts (runtime/build_parts.h).
#
# Each option is ON, OFF or AUTO. AUTO (the default) is re-decided at every configure: ON when the
# dependency is found. ON fails the configure when it is missing (the Makefile's main build asks
# for everything, so CI cannot lose a part silently); OFF leaves the part out even when present.
#
#   ORTHOJIT_WITH_LLVM         the CPU backend: LLVM 19 JIT microkernels (llvm-19-dev)
#   ORTHOJIT_WITH_VENDOR_BLAS  OpenBLAS: the tuner's vendor-library candidate and the f64 products of
#                              the reference checks (a plain loop without it); oneDNN, when found
#                              too, for the tuner's bf16 vendor candidate and the CPU benchmark's bf16
#                              baseline (libopenblas-dev, libdnnl-dev)
#   ORTHOJIT_WITH_MPI          the MPI engine of the distributed optimizer (libopenmpi-dev)
#   ORTHOJIT_BUILD_PYTHON      the nanobind extension orthojit._orthojit (pip install nanobind, and
#                              the interpreter's development headers)
#   ORTHOJIT_WITH_GTEST        the GoogleTest suites (libgtest-dev); the tests without it (cli,
#                              C API, cuda_device_test) are built either way
#   ORTHOJIT_WITH_BENCHMARK    the Google Benchmark programs (libbenchmark-dev); bench/gpu_bench is
#                              built either way
#
# Results: ORTHOJIT_HAVE_CPU_BACKEND, ORTHOJIT_HAVE_VENDOR_BLAS, ORTHOJIT_HAVE_MPI,
# ORTHOJIT_HAVE_PYTHON, ORTHOJIT_HAVE_GTEST, ORTHOJIT_HAVE_BENCHMARK (ON/OFF) and, for each part
# left out, ORTHOJIT_<PART>_ABSENT_REASON, the clause the run-time messages quote.

set(ORTHOJIT_WITH_LLVM AUTO CACHE STRING "Build the CPU backend (LLVM 19): ON, OFF or AUTO (ON when found)")
set(ORTHOJIT_WITH_VENDOR_BLAS AUTO CACHE STRING "Use OpenBLAS (and oneDNN for the benchmarks): ON, OFF or AUTO (ON when found)")
set(ORTHOJIT_WITH_MPI AUTO CACHE STRING "Build the MPI engine of the distributed optimizer: ON, OFF or AUTO (ON when found)")
set(ORTHOJIT_BUILD_PYTHON AUTO CACHE STRING "Build the Python extension (nanobind): ON, OFF or AUTO (ON when found)")
set(ORTHOJIT_WITH_GTEST AUTO CACHE STRING "Build the GoogleTest suites: ON, OFF or AUTO (ON when found)")
set(ORTHOJIT_WITH_BENCHMARK AUTO CACHE STRING "Build the Google Benchmark programs: ON, OFF or AUTO (ON when found)")
foreach(option ORTHOJIT_WITH_LLVM ORTHOJIT_WITH_VENDOR_BLAS ORTHOJIT_WITH_MPI ORTHOJIT_BUILD_PYTHON ORTHOJIT_WITH_GTEST ORTHOJIT_WITH_BENCHMARK)
  set_property(CACHE ${option} PROPERTY STRINGS AUTO ON OFF)
endforeach()

# orthojit_decide(OPTION RESULT FOUND WHAT INSTALL): RESULT := whether the part is built, and
# RESULT_REASON := why not (a clause: "<WHAT> was not found at configure time").
function(orthojit_decide option result found what install)
  string(TOUPPER "${${option}}" value)
  if(value STREQUAL "AUTO")
    set(enabled ${found})
    set(reason "${what} was not found at configure time")
  elseif(value STREQUAL "OFF" OR value STREQUAL "FALSE" OR value STREQUAL "0" OR value STREQUAL "NO")
    set(enabled OFF)
    set(reason "it was configured with -D${option}=OFF")
  elseif(value STREQUAL "ON" OR value STREQUAL "TRUE" OR value STREQUAL "1" OR value STREQUAL "YES")
    if(NOT found)
      message(FATAL_ERROR "${option}=${${option}}, but ${what} was not found: ${install}, or configure with -D${option}=AUTO (or OFF) to build without it")
    endif()
    set(enabled ON)
  else()
    message(FATAL_ERROR "${option}='${${option}}': expected ON, OFF or AUTO")
  endif()
  if(enabled)
    set(${result} ON PARENT_SCOPE)
    set(${result}_REASON "" PARENT_SCOPE)
  else()
    set(${result} OFF PARENT_SCOPE)
    set(${result}_REASON "${reason}" PARENT_SCOPE)
  endif()
endfunction()

function(orthojit_option_is_off option result)
  string(TOUPPER "${${option}}" value)
  if(value STREQUAL "OFF" OR value STREQUAL "FALSE" OR value STREQUAL "0" OR value STREQUAL "NO")
    set(${result} ON PARENT_SCOPE)
  else()
    set(${result} OFF PARENT_SCOPE)
  endif()
endfunction()

# LLVM 19 (one major is pinned: Debian's llvm-19-dev; the shared libLLVM is linked). Searched only
# where Debian installs it, so another LLVM on the machine is never picked up by accident.
set(orthojit_llvm_found OFF)
orthojit_option_is_off(ORTHOJIT_WITH_LLVM llvm_off)
if(NOT llvm_off)
  find_package(LLVM CONFIG QUIET PATHS /usr/lib/llvm-19/lib/cmake/llvm NO_DEFAULT_PATH)
  if(LLVM_FOUND AND LLVM_VERSION_MAJOR EQUAL 19)
    set(orthojit_llvm_found ON)
  endif()
endif()
orthojit_decide(ORTHOJIT_WITH_LLVM ORTHOJIT_HAVE_CPU_BACKEND ${orthojit_llvm_found} "LLVM 19" "install llvm-19-dev (scripts/install-deps.sh)")
set(ORTHOJIT_CPU_BACKEND_ABSENT_REASON "${ORTHOJIT_HAVE_CPU_BACKEND_REASON}")

# OpenBLAS (cblas.h and libopenblas) and, for the benchmarks only, oneDNN.
set(orthojit_openblas_found OFF)
orthojit_option_is_off(ORTHOJIT_WITH_VENDOR_BLAS blas_off)
if(NOT blas_off)
  find_library(OPENBLAS_LIBRARY NAMES openblas)
  find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
  find_library(DNNL_LIBRARY NAMES dnnl)
  find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
  if(OPENBLAS_LIBRARY AND OPENBLAS_INCLUDE_DIR)
    set(orthojit_openblas_found ON)
  endif()
endif()
orthojit_decide(ORTHOJIT_WITH_VENDOR_BLAS ORTHOJIT_HAVE_VENDOR_BLAS ${orthojit_openblas_found} "OpenBLAS" "install libopenblas-dev (scripts/install-deps.sh)")
set(ORTHOJIT_VENDOR_BLAS_ABSENT_REASON "${ORTHOJIT_HAVE_VENDOR_BLAS_REASON}")
if(NOT ORTHOJIT_HAVE_VENDOR_BLAS)
  set(OPENBLAS_LIBRARY "")  # what links ${OPENBLAS_LIBRARY} links nothing
endif()
# oneDNN, the tuner's bf16 vendor candidate (engine onednn) and the benchmark's bf16 baseline:
# optional within the vendor part (no option of its own); without it the engine is not offered and
# says why (ORTHOJIT_ONEDNN_ABSENT_REASON).
if(blas_off)
  set(ORTHOJIT_HAVE_ONEDNN OFF)
  set(ORTHOJIT_ONEDNN_ABSENT_REASON "it was configured with -DORTHOJIT_WITH_VENDOR_BLAS=OFF")
elseif(DNNL_LIBRARY AND DNNL_INCLUDE_DIR)
  set(ORTHOJIT_HAVE_ONEDNN ON)
  set(ORTHOJIT_ONEDNN_ABSENT_REASON "")
else()
  set(ORTHOJIT_HAVE_ONEDNN OFF)
  set(ORTHOJIT_ONEDNN_ABSENT_REASON "oneDNN (libdnnl-dev) was not found at configure time")
endif()

# MPI (Open MPI on Debian).
set(orthojit_mpi_found OFF)
orthojit_option_is_off(ORTHOJIT_WITH_MPI mpi_off)
if(NOT mpi_off)
  find_package(MPI QUIET COMPONENTS C)
  if(MPI_C_FOUND)
    set(orthojit_mpi_found ON)
  endif()
endif()
orthojit_decide(ORTHOJIT_WITH_MPI ORTHOJIT_HAVE_MPI ${orthojit_mpi_found} "MPI" "install libopenmpi-dev (scripts/install-deps.sh)")
set(ORTHOJIT_MPI_ABSENT_REASON "${ORTHOJIT_HAVE_MPI_REASON}")

# Python: the interpreter's development headers and nanobind (a pip package) for that interpreter.
# Debian's python3 is the one with python3-numpy and python3-torch (scripts/install-deps.sh); a
# pyenv or venv python first on PATH usually has neither. pip install . (scikit-build-core) and
# -DPython_EXECUTABLE=... (scripts/gpu-check passes the python3 that has torch) choose their own.
set(orthojit_python_found OFF)
set(orthojit_python_what "nanobind and the Python development headers")
orthojit_option_is_off(ORTHOJIT_BUILD_PYTHON python_off)
if(NOT python_off)
  if(NOT DEFINED Python_EXECUTABLE AND NOT DEFINED SKBUILD AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python 3.9 QUIET COMPONENTS Interpreter Development.Module)
  if(Python_Interpreter_FOUND AND Python_Development.Module_FOUND)
    execute_process(COMMAND "${Python_EXECUTABLE}" -m nanobind --cmake_dir OUTPUT_QUIET ERROR_QUIET RESULT_VARIABLE nanobind_missing)
    if(NOT nanobind_missing)
      set(orthojit_python_found ON)
    else()
      set(orthojit_python_what "nanobind (for ${Python_EXECUTABLE})")
    endif()
  elseif(Python_Interpreter_FOUND)
    set(orthojit_python_what "the development headers of ${Python_EXECUTABLE} (Python.h)")
  endif()
endif()
orthojit_decide(ORTHOJIT_BUILD_PYTHON ORTHOJIT_HAVE_PYTHON ${orthojit_python_found} "${orthojit_python_what}"
                "pip install nanobind (scripts/install-deps.sh does) for that interpreter, or pass -DPython_EXECUTABLE=")
set(ORTHOJIT_PYTHON_ABSENT_REASON "${ORTHOJIT_HAVE_PYTHON_REASON}")

# GoogleTest and Google Benchmark: what the tests and the CPU benchmarks are written with.
set(orthojit_gtest_found OFF)
orthojit_option_is_off(ORTHOJIT_WITH_GTEST gtest_off)
if(NOT gtest_off AND ORTHOJIT_BUILD_TESTS)
  find_package(GTest QUIET)
  if(GTest_FOUND)
    set(orthojit_gtest_found ON)
  endif()
endif()
orthojit_decide(ORTHOJIT_WITH_GTEST ORTHOJIT_HAVE_GTEST ${orthojit_gtest_found} "GoogleTest" "install libgtest-dev (scripts/install-deps.sh)")
set(ORTHOJIT_GTEST_ABSENT_REASON "${ORTHOJIT_HAVE_GTEST_REASON}")
set(orthojit_benchmark_found OFF)
orthojit_option_is_off(ORTHOJIT_WITH_BENCHMARK benchmark_off)
if(NOT benchmark_off AND ORTHOJIT_BUILD_BENCH)
  find_package(benchmark QUIET)
  if(benchmark_FOUND)
    set(orthojit_benchmark_found ON)
  endif()
endif()
orthojit_decide(ORTHOJIT_WITH_BENCHMARK ORTHOJIT_HAVE_BENCHMARK ${orthojit_benchmark_found} "Google Benchmark" "install libbenchmark-dev (scripts/install-deps.sh)")
set(ORTHOJIT_BENCHMARK_ABSENT_REASON "${ORTHOJIT_HAVE_BENCHMARK_REASON}")

foreach(part CPU_BACKEND VENDOR_BLAS ONEDNN MPI PYTHON GTEST BENCHMARK)
  if(ORTHOJIT_HAVE_${part})
    message(STATUS "orthojit: ${part}: built")
  else()
    message(STATUS "orthojit: ${part}: not built (${ORTHOJIT_${part}_ABSENT_REASON})")
  endif()
endforeach()
