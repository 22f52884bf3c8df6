#pragma once
// Shared by the fuzz targets (fuzz_<parser>.cpp, each defining LLVMFuzzerTestOneInput): a scratch
// folder for the file a parser reads, and the rule that a parser may fail only with a named libreyolo
// error. Anything else escaping (a bare std::exception, a library's own exception type) is an
// "unnamed error" and aborts, so the fuzzer reports it like a crash, with the input that caused it.
#include <libreyolo/core/error.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace lry_fuzz {

// A private scratch folder per process (removed at exit), on /dev/shm when there is one.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    auto d = base / ("lry_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch(), ec);
    });
    return d;
  }();
  return dir;
}

inline std::filesystem::path write_input(const std::string& name, const uint8_t* data, size_t size) {
  const auto p = scratch() / name;
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return p;
}

[[noreturn]] inline void unnamed(const char* what) {
  std::fprintf(stderr, "FUZZ: unnamed error escaped the parser: %s\n", what);
  std::fflush(stderr);
  std::abort();
}
[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "FUZZ: invariant broken: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// Runs body(); named libreyolo errors are the expected outcome of bad input, anything else aborts.
template <class F>
void guarded(F&& body) {
  try {
    body();
  } catch (const libreyolo::Error&) {
  } catch (const std::exception& e) {
    unnamed(e.what());
  } catch (...) {
    unnamed("a non-std exception");
  }
}

}  // namespace lry_fuzz
