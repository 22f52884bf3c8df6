#pragma once
// Shared helpers for the test suite: scratch directories and CUDA gating.
#include <libreyolo/core/compat.hpp>

#include <algorithm>
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

// The GPU graph cases' yardstick where eager is not bit-reproducible: over three eager runs, their largest pairwise
// distance (spread) and the graph run's distance to its nearest eager run (near), under `dist`.
struct Yardstick {
  double spread, near;
};
template <class T, class Dist>
Yardstick yardstick(const T& g, const T& e1, const T& e2, const T& e3, Dist dist) {
  return {std::max({dist(e1, e2), dist(e1, e3), dist(e2, e3)}), std::min({dist(g, e1), dist(g, e2), dist(g, e3)})};
}

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
