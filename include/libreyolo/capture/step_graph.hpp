#pragma once
// The whole-step CUDA graph of cuda_graph=step (issue 25): forward under autocast, the loss with its
// fixed-shape assigner, backward, unscale + clip, the optimizer step, the scaler update and the EMA
// update, recorded once per shape key and replayed. What changes between steps lives in device tensors
// written before the replay (train/optimizer.hpp, train/ema.hpp, precision/grad_scaler.hpp); a step
// whose gradients hold inf/NaN is skipped on the device. This file holds the pieces the CudaGraph
// policy (capture/cuda_graph.hpp) uses: the key and the recorded step (CUDA only); the family trait
// (step_capturable) is in capture/eager.hpp, beside the static resolution that reads it.
#include <libreyolo/capture/shape_counter.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#if defined(LIBREYOLO_WITH_CUDA)
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace libreyolo::capture {

// The smallest power of two >= n (>= 1): the bucket of a batch's padded box count, so that one step
// graph serves every batch whose largest box count falls into it.
inline int64_t bucket_rows(int64_t n) {
  int64_t b = 1;
  while (b < n) b <<= 1;
  return b;
}

// A step graph's key: the key of every tensor the batch carries (images, padded targets / labels), and
// whether the step accumulates (a micro-batch of a gradient-accumulation window before its last: no optimizer;
// train/device_step.hpp records the two kinds as different graphs).
struct StepKey {
  std::vector<ShapeKey> parts;
  bool accumulating = false;
  template <class Batch>
  static StepKey of(Batch& b, bool accumulating = false) {
    StepKey k;
    b.for_each_tensor([&](torch::Tensor& t) { k.parts.push_back(ShapeKey::of(t)); });
    k.accumulating = accumulating;
    return k;
  }
  // "[8, 3, 640, 640] [8, 16, 5]", then " (accumulating)" for an accumulating step's key
  std::string shape_string() const {
    std::string s;
    for (size_t i = 0; i < parts.size(); ++i) s += (i ? " " : "") + parts[i].shape_string();
    return accumulating ? s + " (accumulating)" : s;
  }
  friend bool operator<(const StepKey& a, const StepKey& b) {
    return a.parts < b.parts || (!(b.parts < a.parts) && a.accumulating < b.accumulating);
  }
  friend bool operator==(const StepKey& a, const StepKey& b) { return !(a < b) && !(b < a); }
};

// ---- The segmented step (issue 44: the DETR line) ----------------------------------------------------
// A step whose loss needs one host decision between its forward and its backward (the DETR losses'
// Hungarian matching) runs as two parts with the host between them:
//   part A  (device, recordable): the forward and whatever the host must read, as one device tensor;
//   host    solve(copy of that tensor) -> the tensor part B reads (pinned on CUDA), e.g. the matches;
//   part B  (device, recordable): the loss from that tensor, backward, optimizer, scaler, EMA -> items.
// Part A returns a Segment; run_segments is the step without graphs, SegmentedStepGraph records both parts
// in one pool and replays them with the host's solve between.
struct Segment {
  torch::Tensor to_host;                                       // what the host reads (one copy)
  std::function<torch::Tensor(const torch::Tensor&)> solve;    // host copy -> part B's input (host)
};

// The segmented step without graphs: A, one copy to the host, the solve, one copy to the device, B.
template <class Batch, class PartA, class PartB>
torch::Tensor run_segments(const Batch& b, PartA& a, PartB& part_b) {
  Segment s = a(b);
  const auto dev = s.to_host.device();
  const auto host = s.to_host.to(torch::kCPU).contiguous();
  const auto given = s.solve(host);
  return part_b(b, dev.is_cpu() ? given : given.to(dev, /*non_blocking=*/given.is_pinned()));
}

// The CUDA device a recorded step runs on: its batch's (the last tensor's index; 0 when a tensor names none).
template <class Batch>
c10::DeviceIndex step_device(Batch& b) {
  c10::DeviceIndex dev = 0;
  b.for_each_tensor([&](torch::Tensor& t) { dev = t.device().index() < 0 ? c10::DeviceIndex(0) : t.device().index(); });
  return dev;
}

#if defined(LIBREYOLO_WITH_CUDA)

// One recorded training step for one key: static copies of the batch's tensors (outside the graph's
// pool, filled before each replay), the step's loss items (an output of the graph, valid until the
// next replay of any graph of the pool), and a device counter the graph's first node advances (a
// failed replay tells from it whether the step ran). StepGraph<Batch> adds the typed static batch.
class StepGraphBase {
 public:
  using PoolId = decltype(at::cuda::graph_pool_handle());
  virtual ~StepGraphBase() = default;

  // fail_before_launch: the test hook of a failed replay (throws before the launch).
  void replay(bool fail_before_launch = false) {
    begin_launch();
    launch(fail_before_launch);
  }
  // After a failed replay: whether its first node ran (reads the device counter back).
  bool ran_last_launch() const { return sentinel_.item<int64_t>() >= launches_; }
  const torch::Tensor& items() const { return items_; }
  const StepKey& key() const { return key_; }
  int64_t replays() const { return replays_; }
  int64_t vram_bytes = 0;  // the device memory reserved while this graph was recorded

 protected:
  StepGraphBase(PoolId pool, StepKey key) : pool_(pool), key_(std::move(key)) {}
  // Records body() -> loss items on the current (non-default) stream into the shared pool; the
  // kernels do not run. The caller has set every parameter's grad to none (the backward then
  // allocates them in the pool).
  template <class Body>
  void record(c10::DeviceIndex device, Body&& body) {
    device_ = device;
    sentinel_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA, device_));
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    capture_into(*graph_, [&] {
      sentinel_.add_(1);
      items_ = body();
    });
  }
  // Records fn() into `g` in the pool (the kernels do not run).
  // Autocast's cast cache is emptied before and after (GraphedCallable::captured says why); the step's own
  // autocast region opens and closes inside fn, so within it casts are cached as in eager.
  template <class Fn>
  void capture_into(at::cuda::CUDAGraph& g, Fn&& fn) {
    at::autocast::clear_cache();
    g.capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    try {
      fn();
      g.capture_end();
      at::autocast::clear_cache();
    } catch (...) {
      at::autocast::clear_cache();
      // capture_end ends the stream capture and the pool routing; when it throws first (an invalidated
      // capture), end the routing here. Either may legitimately throw.
      try {
        g.capture_end();
      } catch (const std::exception&) {
      }
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
      } catch (const std::exception&) {
      }
      throw;
    }
  }
  void set_device(c10::DeviceIndex d) { device_ = d; }
  // A replay in two calls (a segmented step counts its launch before its first graph): the launch counted,
  // then the recorded graph launched (the test hook throws before it).
  void begin_launch() { ++launches_; }
  void launch(bool fail_before_launch) {
    if (fail_before_launch) throw Error("forced step replay failure (test hook)");
    graph_->replay();
    ++replays_;
  }

 private:
  PoolId pool_;
  StepKey key_;
  c10::DeviceIndex device_ = 0;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  torch::Tensor sentinel_, items_;
  int64_t launches_ = 0, replays_ = 0;
};

template <class Batch>
class StepGraph : public StepGraphBase {
 public:
  // body(const Batch&) -> loss items, recorded over a static copy of `sample`'s tensors.
  template <class Body>
  StepGraph(const Batch& sample, Body& body, PoolId pool, StepKey key) : StepGraph(sample, pool, std::move(key)) {
    record(device_of_static(), [&] { return body(static_); });
  }
  // Copies the batch's tensors into the static ones (device to device, on the current stream).
  void load(Batch& b) {
    std::vector<torch::Tensor*> dst;
    static_.for_each_tensor([&](torch::Tensor& t) { dst.push_back(&t); });
    size_t i = 0;
    b.for_each_tensor([&](torch::Tensor& t) {
      if (i >= dst.size() || !dst[i]->sizes().equals(t.sizes()))
        throw Error("cuda_graph=step: a batch tensor does not match the graph's static one");
      dst[i++]->copy_(t, /*non_blocking=*/true);
    });
  }

 protected:
  // The static copy of `sample`'s tensors only (a derived graph records).
  StepGraph(const Batch& sample, PoolId pool, StepKey key) : StepGraphBase(pool, std::move(key)), static_(sample) {
    static_.for_each_tensor([](torch::Tensor& t) { t = t.detach().clone(); });
  }
  c10::DeviceIndex device_of_static() { return step_device(static_); }
  Batch static_;
};

// The segmented step recorded (run_segments' graphs): part A into one graph, part B into the base's (its
// first node the launch counter: a replay that failed before B ran re-runs eager), both in the pool,
// over the static batch; part B reads a static input tensor outside the pool. A replay: A, one copy of
// A's tensor into a pinned buffer, a wait for it, the recorded solve on the host (A's Segment::solve, kept
// from the recording), one asynchronous copy into B's input, B. `given_sample`: a value of part B's input
// (its shape and type; a step's real solve), recorded over.
template <class Batch>
class SegmentedStepGraph : public StepGraph<Batch> {
 public:
  template <class PartA, class PartB>
  SegmentedStepGraph(const Batch& sample, PartA& a, PartB& part_b, const torch::Tensor& given_sample, StepGraphBase::PoolId pool,
                     StepKey key)
      : StepGraph<Batch>(sample, pool, std::move(key)) {
    const auto dev = this->device_of_static();
    this->set_device(dev);
    given_ = given_sample.to(torch::Device(torch::kCUDA, dev)).clone();  // outside the pool
    graph_a_ = std::make_unique<at::cuda::CUDAGraph>();
    Segment seg;
    this->capture_into(*graph_a_, [&] { seg = a(this->static_); });
    to_host_ = seg.to_host;
    solve_ = std::move(seg.solve);
    host_ = torch::empty(to_host_.sizes(), to_host_.options().device(torch::kCPU).pinned_memory(true));
    this->record(dev, [&] { return part_b(this->static_, given_); });
  }
  // fail_before_launch: the test hook of a failed replay (throws before part B's launch).
  // The launch is counted before part A: a replay that fails anywhere before part B's first node re-runs eager.
  void replay_segments(bool fail_before_launch = false) {
    this->begin_launch();
    graph_a_->replay();
    host_.copy_(to_host_, /*non_blocking=*/true);
    c10::cuda::getCurrentCUDAStream(to_host_.device().index()).synchronize();
    given_.copy_(solve_(host_), /*non_blocking=*/true);
    this->launch(fail_before_launch);
  }

 private:
  std::unique_ptr<at::cuda::CUDAGraph> graph_a_;
  torch::Tensor to_host_, host_, given_;
  std::function<torch::Tensor(const torch::Tensor&)> solve_;
};

#endif  // LIBREYOLO_WITH_CUDA

}  // namespace libreyolo::capture
