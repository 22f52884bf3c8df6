#pragma once
// capture::CudaGraph<Threshold>: captures the network's training forward and backward in CUDA graphs
// once an input shape has been seen Threshold times (SPEC §2.3), and replays them for that shape.
// Everything that cannot be captured at run time (CPU device, a build without CUDA, cuda_graph=false,
// a failed capture or replay) turns the policy into eager training with one log line.
#include <libreyolo/capture/eager.hpp>
#include <libreyolo/capture/graphed_callable.hpp>
#include <libreyolo/capture/shape_counter.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/log.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#if defined(LIBREYOLO_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace libreyolo::capture {

template <int Threshold = 3>
class CudaGraph {
  static_assert(Threshold >= 1, "CudaGraph<Threshold>: a shape must be seen at least once before capture");

 public:
  static constexpr bool graphs = true;
  static constexpr const char* fallback_prefix = "cuda_graph training capture disabled, falling back to eager: ";

  // cfg.cuda_graph_warmup, when given explicitly, overrides Threshold.
  void setup(const TrainConfig& cfg, torch::Device device) {
    counter_.set_threshold(cfg.is_explicit("cuda_graph_warmup") ? cfg.cuda_graph_warmup : Threshold);
    warmup_iters_ = 3;
    if (!cfg.cuda_graph)
      disable("cuda_graph=false");
    else if (!compat::with_cuda)
      disable("this build has no CUDA support (LIBREYOLO_WITH_CUDA is off)");
    else if (!device.is_cuda())
      disable("device " + device.str() + " is not a CUDA device");
    else
      enabled_ = true;
  }

  // The network's output for x: a graph replay when x has the captured key, else eager (counted).
  template <class Net>
  auto forward(Net& net, const torch::Tensor& x) {
    using Out = std::decay_t<decltype(net->forward(x))>;
    const auto key = ShapeKey::of(x);
#if defined(LIBREYOLO_WITH_CUDA)
    if (enabled_ && net->is_training()) {
      if (auto out = graphed_forward<Out>(net, x, key)) return std::move(*out);
    } else {
      counter_.count(key);
    }
#else
    counter_.count(key);
#endif
    ++eager_steps_;
    return Out(net->forward(x));
  }

  // The family's captured computation changed: drop the graph, forget the counts, run eager again.
  void invalidate(std::string_view reason) {
    drop_graph();
    counter_.reset();
    ++invalidations_;
    log::info("cuda_graph: capture invalidated (", reason, "); will re-capture");
  }

  nlohmann::json report() const {
    return {{"cuda_graph", replayed_steps_ > 0},
            {"capture_shape", capture_shape_ ? nlohmann::json(*capture_shape_) : nlohmann::json(nullptr)},
            {"replayed_steps", replayed_steps_},
            {"eager_steps", eager_steps_},
            {"captures", captures_},
            {"invalidations", invalidations_},
            {"threshold", counter_.threshold()},
            {"distinct_shapes", counter_.distinct()},
            {"fallback_reason", fallback_reason_ ? nlohmann::json(*fallback_reason_) : nlohmann::json(nullptr)}};
  }

  bool enabled() const { return enabled_; }
  bool has_graph() const {
#if defined(LIBREYOLO_WITH_CUDA)
    return graphed_ != nullptr;
#else
    return false;
#endif
  }
  const ShapeCounter& shape_counter() const { return counter_; }
  const std::optional<std::string>& fallback_reason() const { return fallback_reason_; }
  int64_t replayed_steps() const { return replayed_steps_; }
  int64_t eager_steps() const { return eager_steps_; }
  int64_t captures() const { return captures_; }
  int64_t invalidations() const { return invalidations_; }
  // Tests: the next replay throws as a failed replay would (exercises the run-time fallback).
  void fail_next_replay_for_testing() { fail_next_replay_ = true; }

 private:
  void disable(const std::string& reason) {
    enabled_ = false;
    fallback_reason_ = reason;
    log::warn(fallback_prefix, reason);
  }
  void drop_graph() {
#if defined(LIBREYOLO_WITH_CUDA)
    if (graphed_) {
      c10::cuda::device_synchronize();  // no replay may still be running when its graph is destroyed
      graphed_.reset();
    }
    capture_key_.reset();
#endif
  }

#if defined(LIBREYOLO_WITH_CUDA)
  template <class Out, class Net>
  std::optional<Out> graphed_forward(Net& net, const torch::Tensor& x, const ShapeKey& key) {
    if (!graphed_) {
      if (!counter_.count(key)) return std::nullopt;
      try {
        capture(net, x, key);
      } catch (const std::exception& e) {
        fail("capture failed at input shape " + key.shape_string() + ": " + e.what());
        return std::nullopt;
      }
    } else if (!(key == *capture_key_)) {
      counter_.count(key);  // another shape (multi-scale, last partial batch): eager
      return std::nullopt;
    }
    try {
      if (fail_next_replay_) {
        fail_next_replay_ = false;
        throw Error("forced replay failure (test hook)");
      }
      auto out = OutputCodec<Out>::unflatten((*graphed_)(x));
      ++replayed_steps_;
      return out;
    } catch (const std::exception& e) {
      fail(std::string("replay failed at input shape ") + key.shape_string() + ": " + e.what());
      return std::nullopt;
    }
  }

  template <class Net>
  void capture(Net& net, const torch::Tensor& x, const ShapeKey& key) {
    using Out = std::decay_t<decltype(net->forward(x))>;
    auto random = random_training_modules(*net);
    if (!random.empty())
      log::info("cuda_graph: the captured region draws random numbers (", random.front(),
                random.size() > 1 ? " and " + std::to_string(random.size() - 1) + " more" : std::string(),
                "); replays draw from the graph's own random stream: statistically equivalent to eager, not identical");
    std::vector<torch::Tensor> params;
    for (auto& p : net->parameters())
      if (p.requires_grad()) params.push_back(p);
    BufferSnapshot buffers(*net);
    auto fn = [net](const torch::Tensor& in) mutable { return OutputCodec<Out>::flatten(net->forward(in)); };
    try {
      graphed_ = std::make_unique<GraphedCallable>(fn, std::move(params), x, at::cuda::graph_pool_handle(),
                                                   warmup_iters_);
    } catch (...) {
      graphed_.reset();
      drain_cuda_errors();
      buffers.restore();
      throw;
    }
    buffers.restore();
    capture_key_ = key;
    capture_shape_ = key.shape;
    ++captures_;
    log::info("cuda_graph: captured training forward/backward at input shape ", key.shape_string());
  }

  void fail(const std::string& reason) {
    const std::string pending = drain_cuda_errors();
    try {
      drop_graph();
    } catch (const std::exception&) {
      (void)graphed_.release();  // a broken graph is leaked rather than destroyed on a failing device
      capture_key_.reset();
    }
    disable(pending.empty() ? reason : reason + " (pending CUDA errors: " + pending + ")");
  }

  std::unique_ptr<GraphedCallable> graphed_;
  std::optional<ShapeKey> capture_key_;
#endif

  ShapeCounter counter_{Threshold};
  bool enabled_ = false;
  bool fail_next_replay_ = false;
  int warmup_iters_ = 3;
  std::optional<std::string> fallback_reason_;
  std::optional<std::vector<int64_t>> capture_shape_;
  int64_t replayed_steps_ = 0, eager_steps_ = 0, captures_ = 0, invalidations_ = 0;
};

static_assert(CapturePolicy<CudaGraph<>>);

}  // namespace libreyolo::capture
