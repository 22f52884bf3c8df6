#pragma once
// cuDNN's convolution algorithm choice for a process. Without autotuning (cudnn_benchmark=false) cuDNN ranks
// its engines by a heuristic and PyTorch takes the first that runs: the "instant" heuristic
// (CUDNN_HEUR_MODE_INSTANT, PyTorch's default) or heuristic mode B (CUDNN_HEUR_MODE_B, which PyTorch uses when
// the environment variable TORCH_CUDNN_USE_HEURISTIC_MODE_B is set). Both depend only on the layer shapes, the
// GPU and the library versions, so every run picks the same engines (autotuning picks by the timings of the
// moment). Measured on an H200 (benchmarks/RESULTS.md, session 20; docs/performance.md): mode B cut YOLOv9-t's
// fp16 kernel time from 24.6 to 16.2 ms per step, but its runs trained to a lower mAP50-95 than the instant
// heuristic's on three sets, so "instant" stays the default.
#include <ATen/Context.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace libreyolo {

inline constexpr const char* cudnn_heuristic_env = "TORCH_CUDNN_USE_HEURISTIC_MODE_B";

// Makes the process use `mode` ("instant" or "b"). PyTorch reads the variable when it plans a convolution, so
// this is set before the first one. Returns a notice when the environment overrides the request (the variable
// was set outside and "instant" is asked for: it is removed, but a convolution planned before keeps mode B),
// else "".
inline std::string set_cudnn_heuristic(const std::string& mode) {
  const bool was_set = std::getenv(cudnn_heuristic_env) != nullptr;
  if (mode == "b") {
    setenv(cudnn_heuristic_env, "1", 1);
    return "";
  }
  if (!was_set) return "";
  unsetenv(cudnn_heuristic_env);
  return std::string(cudnn_heuristic_env) + " was set in the environment; cudnn_heuristic=instant removed it (give "
         "cudnn_heuristic=b for cuDNN's heuristic mode B)";
}

// cuDNN's process-wide choices as they were when built: autotuning, deterministic algorithms and the heuristic
// mode's environment variable. Destroyed, it puts them back, so that a trainer or a measurement that sets them
// for its own run leaves the embedding program's settings as they were.
class CudnnScope {
 public:
  CudnnScope()
      : benchmark_(at::globalContext().benchmarkCuDNN()), deterministic_(at::globalContext().deterministicCuDNN()) {
    if (const char* v = std::getenv(cudnn_heuristic_env)) heuristic_env_ = v;
  }
  CudnnScope(const CudnnScope&) = delete;
  CudnnScope& operator=(const CudnnScope&) = delete;
  ~CudnnScope() {
    at::globalContext().setBenchmarkCuDNN(benchmark_);
    at::globalContext().setDeterministicCuDNN(deterministic_);
    if (heuristic_env_) setenv(cudnn_heuristic_env, heuristic_env_->c_str(), 1);
    else unsetenv(cudnn_heuristic_env);
  }

 private:
  bool benchmark_, deterministic_;
  std::optional<std::string> heuristic_env_;
};

}  // namespace libreyolo
