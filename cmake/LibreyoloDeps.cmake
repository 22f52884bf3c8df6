# Finds libreyolo's dependencies and links them to an INTERFACE target. Shared by the build tree and
# by the installed package config, so a downstream find_package(libreyolo) resolves the same set.
include(CMakeFindDependencyMacro)
find_package(Threads REQUIRED)
find_package(Torch REQUIRED)
find_package(Boost 1.70 REQUIRED)            # header-only use: Boost.Hana
find_package(nlohmann_json 3.9 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
# RE2 (optional, Debian: libre2-dev): linear-time regular expressions for `profile kernels --grep` on
# untrusted profile.json files. Without it --grep takes plain text (case-insensitive substrings, '|'
# between alternatives). Newer RE2 releases install a CMake package (re2::re2, with its Abseil);
# Debian 12's has only pkg-config, so the library is looked up by hand then.
if(NOT TARGET re2::re2)
  find_package(re2 CONFIG QUIET)
endif()
if(NOT TARGET re2::re2)
  find_path(LIBREYOLO_RE2_INCLUDE re2/re2.h)
  find_library(LIBREYOLO_RE2_LIBRARY NAMES re2)
  if(LIBREYOLO_RE2_INCLUDE AND LIBREYOLO_RE2_LIBRARY)
    add_library(re2::re2 UNKNOWN IMPORTED)
    set_target_properties(re2::re2 PROPERTIES IMPORTED_LOCATION "${LIBREYOLO_RE2_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${LIBREYOLO_RE2_INCLUDE}")
  else()
    message(STATUS "libreyolo: no RE2 (libre2-dev); profile kernels --grep takes plain text")
  endif()
endif()

# cairo (optional, Debian: libcairo2-dev): the run directory's pictures (results.png, labels.png,
# confusion_matrix.png, PR_curve.png, annotated images with text). Without it `plots` logs one notice and
# writes none, and predict draws boxes without names.
if(NOT TARGET PkgConfig::LIBREYOLO_CAIRO)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(LIBREYOLO_CAIRO QUIET IMPORTED_TARGET GLOBAL cairo)
  endif()
  if(TARGET PkgConfig::LIBREYOLO_CAIRO)
    message(STATUS "libreyolo: cairo ${LIBREYOLO_CAIRO_VERSION}: plots on")
  else()
    message(STATUS "libreyolo: no cairo (libcairo2-dev); plots are off")
  endif()
endif()

function(libreyolo_link_deps target)
  # libreyolo_torch (below) carries this machine's LibTorch, so the exported target names no paths.
  target_link_libraries(${target} INTERFACE libreyolo_torch
    Boost::headers nlohmann_json::nlohmann_json JPEG::JPEG PNG::PNG Threads::Threads)
  if(TARGET yaml-cpp::yaml-cpp)
    target_link_libraries(${target} INTERFACE yaml-cpp::yaml-cpp)
  else()
    target_link_libraries(${target} INTERFACE yaml-cpp)
  endif()
  if(TARGET PkgConfig::LIBREYOLO_CAIRO)
    target_link_libraries(${target} INTERFACE PkgConfig::LIBREYOLO_CAIRO)
    target_compile_definitions(${target} INTERFACE LIBREYOLO_HAVE_CAIRO=1)
  endif()
  if(TARGET re2::re2)
    target_link_libraries(${target} INTERFACE re2::re2)
    target_compile_definitions(${target} INTERFACE LIBREYOLO_WITH_RE2=1)
  endif()
endfunction()

# An imported target that carries this machine's TORCH_LIBRARIES for installed consumers.
if(NOT TARGET libreyolo_torch)
  add_library(libreyolo_torch INTERFACE IMPORTED)
  # libstdc++ is linked ahead of LibTorch: pip LibTorch 2.x exports its own copies of std::filesystem
  # symbols, and resolving ours to them crashes (seen: fs::remove_all on torch 2.11).
  set(_lry_torch_libs ${TORCH_LIBRARIES})
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(PREPEND _lry_torch_libs stdc++)
  endif()
  set_target_properties(libreyolo_torch PROPERTIES INTERFACE_LINK_LIBRARIES "${_lry_torch_libs}")
  if(TARGET c10_cuda OR TARGET torch_cuda)
    set_property(TARGET libreyolo_torch APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS LIBREYOLO_WITH_CUDA=1)
    # Data-parallel on CUDA: LibTorch's ProcessGroupNCCL, whose header needs nccl.h. pip's nvidia-nccl
    # (the library this LibTorch loads) is preferred over a system copy.
    find_path(LIBREYOLO_C10D_INCLUDE torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp HINTS ${TORCH_INCLUDE_DIRS})
    find_package(Python3 COMPONENTS Interpreter QUIET)
    set(_lry_nccl_hint "")
    if(Python3_Interpreter_FOUND)
      execute_process(COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
        OUTPUT_VARIABLE _lry_nccl_hint OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    endif()
    find_path(LIBREYOLO_NCCL_INCLUDE nccl.h HINTS ${_lry_nccl_hint}/include)
    find_library(LIBREYOLO_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_lry_nccl_hint}/lib)
    if(LIBREYOLO_C10D_INCLUDE AND LIBREYOLO_NCCL_INCLUDE AND LIBREYOLO_NCCL_LIBRARY)
      message(STATUS "libreyolo: data-parallel on CUDA with NCCL (${LIBREYOLO_NCCL_INCLUDE})")
      set_property(TARGET libreyolo_torch APPEND PROPERTY INTERFACE_COMPILE_DEFINITIONS LIBREYOLO_WITH_NCCL=1)
      set_property(TARGET libreyolo_torch APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES ${LIBREYOLO_NCCL_INCLUDE})
      set_property(TARGET libreyolo_torch APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${LIBREYOLO_NCCL_LIBRARY})
    else()
      message(STATUS "libreyolo: no NCCL (ProcessGroupNCCL.hpp: ${LIBREYOLO_C10D_INCLUDE}, nccl.h: ${LIBREYOLO_NCCL_INCLUDE}); "
                     "distributed training on CUDA is off")
    endif()
  endif()
  if(TORCH_CXX_FLAGS)
    separate_arguments(_lry_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
    set_target_properties(libreyolo_torch PROPERTIES INTERFACE_COMPILE_OPTIONS "${_lry_torch_flags}")
  endif()
endif()
