#pragma once
// GraphedForward: a network's inference forward (`predict cuda_graph=true`, `val cuda_graph=true`,
// `profile infer --cuda-graph`), eager or replayed from CUDA graphs, one graph per input shape. The
// inputs are letterboxed to a fixed size, so predict records one graph and val one per batch size (its
// last, smaller batch adds one). A DETR's forward returns the encoder maps with its decoder pending; the
// graphed path runs the decoder inside the recorded region too (complete(), outside autocast as decode()
// runs it), so decode() only reads its output; the eager path leaves it pending, as before.
//
// The recording reuses capture/step_graph.hpp's StepGraph (static input copy, shared memory pool,
// capture on a side stream) with the input as the whole "batch"; nothing else records graphs here.
// Contract of the graphed path: the returned output lives in the graph's static memory and holds its
// numbers until the next call (predict and val decode it at once, as they do with an eager output).
// Where graphs cannot run, one line is logged per GraphedForward and every call runs eager:
//  - a CPU device or a build without CUDA: "cuda_graph needs CUDA; running eager (device cpu)";
//  - a recording that fails (a host read-back or a data-dependent shape in the family's forward): the
//    reason, then eager for the rest of the run.
#include <libreyolo/capture/shape_counter.hpp>
#include <libreyolo/capture/step_graph.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/device.hpp>
#include <libreyolo/core/log.hpp>

#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#if defined(LIBREYOLO_WITH_CUDA)
#include <libreyolo/capture/graphed_callable.hpp>  // drain_cuda_errors
#endif

namespace libreyolo::eval {

// Runs a pending DETR decoder of an eval output (the output's run()) as decode() would run it: outside
// autocast (val's forward runs under it; its decode, which ran the decoder, does not). Other outputs are
// complete already.
template <class Out>
void complete(const Out& out) {
  if constexpr (requires { out.pending(); out.run(); }) {
    if (!out.pending()) return;
    const bool was = compat::cuda_autocast_enabled();
    const auto dtype = compat::cuda_autocast_dtype();
    compat::set_cuda_autocast(false, dtype);
    try {
      out.run();
    } catch (...) {
      compat::set_cuda_autocast(was, dtype);
      throw;
    }
    compat::set_cuda_autocast(was, dtype);
  }
}

// The one input of an inference graph, as StepGraph's batch.
struct InferInput {
  torch::Tensor x;
  template <class Fn>
  void for_each_tensor(Fn&& fn) {
    fn(x);
  }
};

template <class Net>
class GraphedForward {
 public:
  using Output = std::decay_t<decltype(std::declval<Net&>()->forward(std::declval<const torch::Tensor&>()))>;

  // graphs=false: plain eager calls. `who` names the caller in the fallback line ("predict", "val", ...).
  // warmup: eager calls on the side stream before a shape is recorded (lazy initialisation, cuDNN's
  // algorithm search, per-shape caches).
  GraphedForward(Net& net, torch::Device dev, bool graphs, std::string who, int warmup = 2)
      : net_(net), dev_(dev), who_(std::move(who)), warmup_(warmup) {
    if (!graphs) return;
    if (!dev.is_cuda() || !compat::with_cuda) {
      fallback_ = "cuda_graph needs CUDA; running eager (device " + device_name(dev) + ")";
      log::info(who_, ": ", fallback_);
      return;
    }
    active_ = true;
  }
  GraphedForward(const GraphedForward&) = delete;
  GraphedForward& operator=(const GraphedForward&) = delete;

  Output operator()(const torch::Tensor& x) {
#if defined(LIBREYOLO_WITH_CUDA)
    if (active_) {
      try {
        return replay(x);
      } catch (const std::exception& e) {
        const std::string why = e.what();
        give_up("recording or replaying the " + capture::ShapeKey::of(x).shape_string() + " graph failed (" +
                why.substr(0, why.find('\n')) + ")");
      }
    }
#endif
    return eager(x);
  }

  // The plain forward (a DETR's decoder left pending, as without graphs).
  Output eager(const torch::Tensor& x) { return net_->forward(x); }

  bool active() const { return active_; }
  // Why graphs are not used ("" while they are, or when they were not asked for).
  const std::string& fallback() const { return fallback_; }
  size_t graphs() const {
#if defined(LIBREYOLO_WITH_CUDA)
    return entries_.size();
#else
    return 0;
#endif
  }

 private:
  void give_up(const std::string& reason) {
    active_ = false;
#if defined(LIBREYOLO_WITH_CUDA)
    entries_.clear();
    const auto seen = capture::drain_cuda_errors();
    (void)seen;
#endif
    fallback_ = "cuda_graph: " + reason + "; running eager";
    log::info(who_, ": ", fallback_);
  }

#if defined(LIBREYOLO_WITH_CUDA)
  struct Entry {
    std::optional<Output> out;  // the static output the graph writes
    std::unique_ptr<capture::StepGraph<InferInput>> graph;
  };

  Output replay(const torch::Tensor& x) {
    const auto key = capture::ShapeKey::of(x);
    auto it = entries_.find(key);
    if (it == entries_.end()) it = entries_.emplace(key, record(x, key)).first;
    Entry& e = *it->second;
    InferInput in{x};
    e.graph->load(in);
    e.graph->replay();
    return *e.out;
  }

  std::unique_ptr<Entry> record(const torch::Tensor& x, const capture::ShapeKey& key) {
    if (!pool_) pool_ = at::cuda::graph_pool_handle();
    auto e = std::make_unique<Entry>();
    const auto index = static_cast<c10::DeviceIndex>(compat::device_index(dev_));
    auto ambient = c10::cuda::getCurrentCUDAStream(index);
    auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    at::cuda::CUDAEvent to_side;
    to_side.record(ambient);
    to_side.block(side);
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      for (int i = 0; i < warmup_; ++i) complete(eager(x));
      side.synchronize();
      Entry* target = e.get();
      auto body = [&](InferInput& in) {
        auto out = net_->forward(in.x);
        complete(out);
        target->out = out;
        return in.x.new_zeros({1});
      };
      e->graph = std::make_unique<capture::StepGraph<InferInput>>(InferInput{x}, body, *pool_, capture::StepKey{{key}});
    }
    at::cuda::CUDAEvent to_ambient;
    to_ambient.record(side);
    to_ambient.block(ambient);
    log::debug(who_, ": cuda_graph recorded the forward for input ", key.shape_string());
    return e;
  }

  std::map<capture::ShapeKey, std::unique_ptr<Entry>> entries_;
  std::optional<capture::StepGraphBase::PoolId> pool_;
#endif

  Net& net_;
  torch::Device dev_;
  std::string who_;
  int warmup_ = 2;
  bool active_ = false;
  std::string fallback_;
};

}  // namespace libreyolo::eval
