# Build helpers: the build shows the architecture. One library per top-level
# folder (ctitan_library), tests and benchmarks through ctitan_test /
# ctitan_benchmark, one precompiled header for <torch/torch.h> shared by all.

# LibTorch comes from a Python's torch wheel: CTITAN_TORCH_PYTHON (a CMake
# cache variable or the environment variable of that name; a GPU node's own
# Python, say) or else the project's virtual environment (scripts/bootstrap.sh).
# torch 2.11 through 2.15 are supported (scripts/check_torch.sh VERSION builds
# and unit-tests against another one; docs/libtorch.md); an older one is one
# configure-time line.
# The wheel's CUDA libraries live in site-packages/nvidia/*/lib and carry no
# RUNPATH of their own (Python preloads them), so ctitan's binaries get those
# folders first in their RUNPATH; otherwise the older CUDA 13.0 toolkit in
# /usr/local/cuda would be picked up and libtorch_cuda.so would not link.
set(CTITAN_TORCH_MIN_VERSION 2.11)
macro(ctitan_find_torch)
  if(NOT CTITAN_TORCH_PREFIX)
    if(NOT CTITAN_TORCH_PYTHON AND DEFINED ENV{CTITAN_TORCH_PYTHON})
      set(CTITAN_TORCH_PYTHON "$ENV{CTITAN_TORCH_PYTHON}")
    endif()
    if(CTITAN_TORCH_PYTHON)
      set(_py "${CTITAN_TORCH_PYTHON}")
      set(_fix "set CTITAN_TORCH_PYTHON to a Python whose `import torch` works")
    else()
      set(_py "${CMAKE_SOURCE_DIR}/.venv/bin/python")
      set(_fix "run scripts/bootstrap.sh first, or set CTITAN_TORCH_PYTHON to a Python with torch")
    endif()
    if(NOT EXISTS "${_py}")
      message(FATAL_ERROR "LibTorch not found: ${_py} is missing; ${_fix}.")
    endif()
    execute_process(COMMAND "${_py}" -c
      "import torch, torch.utils; print(torch.__version__.split('+')[0]); print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _out RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "LibTorch not found: `${_py} -c 'import torch'` failed; ${_fix}.")
    endif()
    string(REPLACE "\n" ";" _out "${_out}")
    list(GET _out 0 _version)
    list(GET _out 1 _prefix)
    if(_version VERSION_LESS CTITAN_TORCH_MIN_VERSION)
      message(FATAL_ERROR "torch ${_version} (${_py}) is older than ${CTITAN_TORCH_MIN_VERSION}, the oldest "
        "ctitan builds against; use a Python with torch >= ${CTITAN_TORCH_MIN_VERSION} (CTITAN_TORCH_PYTHON).")
    endif()
    message(STATUS "ctitan: LibTorch ${_version} from ${_py}")
    set(CTITAN_TORCH_PREFIX "${_prefix}" CACHE PATH "torch.utils.cmake_prefix_path of the Python LibTorch came from")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${CTITAN_TORCH_PREFIX}")
  find_package(Torch REQUIRED)
  get_filename_component(_site "${CTITAN_TORCH_PREFIX}/../../.." ABSOLUTE)
  file(GLOB CTITAN_NVIDIA_LIB_DIRS LIST_DIRECTORIES true "${_site}/nvidia/*/lib")
  set(CTITAN_TORCH_LINK_OPTIONS "")
  foreach(_d ${CTITAN_NVIDIA_LIB_DIRS})
    list(APPEND CTITAN_TORCH_LINK_OPTIONS "LINKER:-rpath,${_d}" "LINKER:-rpath-link,${_d}")
  endforeach()
  # libstdc++ first among a binary's libraries: torch 2.11's libtorch.so
  # exports 64 std::filesystem functions of its own (2.15's none), and a
  # binary that lists libtorch before libstdc++ binds to those, whose
  # std::filesystem::remove_all jumps to address 0 (scripts/check_torch.sh
  # 2.11.0 found it: every test that removes a folder crashed).
  list(PREPEND CTITAN_TORCH_LINK_OPTIONS "LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
  add_library(ctitan_torch INTERFACE)
  target_link_libraries(ctitan_torch INTERFACE ${TORCH_LIBRARIES})
  target_link_options(ctitan_torch INTERFACE ${CTITAN_TORCH_LINK_OPTIONS})
  # Gloo's headers are not in the wheel; Debian's libgloo-dev provides them
  # (see docs/libtorch.md for why that is safe for the calls ctitan makes),
  # from /usr or from the offline bundle's prefix (CMAKE_PREFIX_PATH).
  find_path(CTITAN_GLOO_INCLUDE_DIR gloo/config.h REQUIRED)
  target_include_directories(ctitan_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS} ${CTITAN_GLOO_INCLUDE_DIR})
  target_compile_definitions(ctitan_torch INTERFACE USE_C10D_GLOO)
endmacro()

set(CTITAN_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter)

macro(ctitan_add_pch)
  add_library(ctitan_pch STATIC ${CMAKE_SOURCE_DIR}/cmake/pch.cpp)
  target_link_libraries(ctitan_pch PUBLIC ctitan_torch)
  target_compile_options(ctitan_pch PRIVATE ${CTITAN_WARNINGS})
  target_precompile_headers(ctitan_pch PRIVATE <torch/torch.h> <string> <vector>
    <unordered_map> <memory> <functional>)
endmacro()

# ctitan_library(NAME SRCS a.cpp b.cpp DEPS lib... [NO_TORCH])
# NO_TORCH: a library that never includes LibTorch (common/, results/,
# reports/) gets neither ctitan_torch nor the torch PCH, so its objects
# compile without LibTorch's headers and it links without libtorch; a
# dependent that needs LibTorch brings it itself.
function(ctitan_library name)
  cmake_parse_arguments(A "NO_TORCH" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SRCS})
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated)
  target_link_libraries(${name} PUBLIC ${A_DEPS})
  target_compile_options(${name} PRIVATE ${CTITAN_WARNINGS})
  if(NOT A_NO_TORCH)
    target_link_libraries(${name} PUBLIC ctitan_torch)
    target_precompile_headers(${name} REUSE_FROM ctitan_pch)
  endif()
endfunction()

# ctitan_test(NAME SRCS ... DEPS ... LABEL unit|integration)
function(ctitan_test name)
  cmake_parse_arguments(A "" "LABEL" "SRCS;DEPS" ${ARGN})
  # Every test binary settles ATen's CPU vector math before its first test and
  # runs its tests in a scratch folder of its own (tests/test_process_environment.cpp).
  add_executable(${name} ${A_SRCS} ${CMAKE_SOURCE_DIR}/tests/test_process_environment.cpp)
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${name} PRIVATE ${CTITAN_WARNINGS})
  target_precompile_headers(${name} REUSE_FROM ctitan_pch)
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
    PROPERTIES LABELS ${A_LABEL}
    # One variable per property: gtest_discover_tests drops list separators.
    ENVIRONMENT "CTITAN_BIN=$<TARGET_FILE:ctitan>"
    ENVIRONMENT_MODIFICATION "CTITAN_SOURCE_DIR=set:${CMAKE_SOURCE_DIR}"
    DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60)
endfunction()

function(ctitan_benchmark name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${A_SRCS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} benchmark::benchmark)
  target_compile_options(${name} PRIVATE ${CTITAN_WARNINGS})
  target_precompile_headers(${name} REUSE_FROM ctitan_pch)
endfunction()
