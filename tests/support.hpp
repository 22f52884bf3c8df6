#pragma once
// Shared helpers for the test suite: scratch directories and CUDA gating.
#include <libreyolo/core/compat.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <utility>

namespace lry_test {

// A fresh directory under the system temp dir, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "lry") {
    static std::atomic<int> n{0};
    auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    path = std::filesystem::temp_directory_path() /
           (tag + "_" + std::to_string(stamp) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& s) const { return path / s; }
};

inline bool have_cuda() { return libreyolo::compat::cuda_available(); }

// The message of the E that `f` throws, or "<nothing thrown>" (tests assert on parts of the message).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<nothing thrown>";
}

}  // namespace lry_test

// The "gpu" test suite: skipped (counted as skipped) in a build without CUDA; in a CUDA build its cases
// need a device (LRY_REQUIRE_CUDA fails, naming it, when none is visible). Cases needing two GPUs are in
// LRY_GPU2_SUITE ("gpu2"), run on a machine with two.
#define LRY_GPU_SUITE TEST_SUITE("gpu" * doctest::skip(!libreyolo::compat::with_cuda))
#define LRY_GPU2_SUITE TEST_SUITE("gpu2" * doctest::skip(!libreyolo::compat::with_cuda))

// Inside a case of the gpu suites: fail, naming it, when no CUDA device is visible.
#define LRY_REQUIRE_CUDA() REQUIRE_MESSAGE(lry_test::have_cuda(), "no CUDA device is visible: the gpu suites need one")
