#pragma once
// The graphed callable (the structure of PyTorch's make_graphed_callables, written for LibTorch): a
// forward CUDA graph and a backward CUDA graph over static input / output / gradient buffers, behind
// a torch::autograd::Function, so parameter .grad accumulates exactly as in eager mode while the loss
// and everything after it stay eager. Unlike make_graphed_callables, the backward graph adds the
// parameter gradients into persistent .grad tensors itself (one multi-tensor add inside the graph)
// instead of handing them to autograd's AccumulateGrad: measured on an H200, that per-parameter
// allocate-and-copy was the largest host cost of a graphed step (~240 nodes, 8.6 of 18 ms for YOLOX-t). The CPU-testable pieces (output flattening, BatchNorm buffer
// snapshot, randomness detection) are outside the CUDA guard.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#if defined(LIBREYOLO_WITH_CUDA)
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace libreyolo::capture {

// A network's output as a flat tensor list and back: Tensor (ResNet) or vector<Tensor> (YOLOv9).
template <class Out>
struct OutputCodec;
template <>
struct OutputCodec<torch::Tensor> {
  static std::vector<torch::Tensor> flatten(const torch::Tensor& t) { return {t}; }
  static torch::Tensor unflatten(std::vector<torch::Tensor> v) {
    if (v.size() != 1)
      throw Error("capture: a single-tensor network output came back as " + std::to_string(v.size()) + " tensors");
    return std::move(v[0]);
  }
};
template <>
struct OutputCodec<std::vector<torch::Tensor>> {
  static std::vector<torch::Tensor> flatten(const std::vector<torch::Tensor>& v) { return v; }
  static std::vector<torch::Tensor> unflatten(std::vector<torch::Tensor> v) { return v; }
};

// Copies of a module's buffers (BatchNorm running_mean/var, num_batches_tracked), written back by
// restore(): warm-up and capture run the network forward without it counting as a training step.
class BufferSnapshot {
 public:
  explicit BufferSnapshot(torch::nn::Module& m) {
    torch::NoGradGuard ng;
    for (auto& b : m.buffers()) saved_.emplace_back(b, b.clone());
  }
  void restore() {
    torch::NoGradGuard ng;
    for (auto& [live, copy] : saved_) live.copy_(copy);
  }
  size_t size() const { return saved_.size(); }

 private:
  std::vector<std::pair<torch::Tensor, torch::Tensor>> saved_;
};

// A module other than LibTorch's dropouts that draws random numbers in training mode (stochastic
// depth, ...): it derives from this and says how likely a draw changes its output (0 = never draws).
struct DrawsRandomInTraining {
  virtual ~DrawsRandomInTraining() = default;
  virtual double random_draw_probability() const = 0;
};

// Names of submodules that draw random numbers in training mode (dropout of any kind with p > 0, and
// DrawsRandomInTraining modules with a probability > 0, e.g. drop-path).
inline std::vector<std::string> random_training_modules(const torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& item : m.named_modules("net")) {
    const torch::nn::Module* mod = item.value().get();
    if (!mod->is_training()) continue;
    double p = 0;
    if (auto* d = dynamic_cast<const torch::nn::DropoutImpl*>(mod)) p = d->options.p();
    else if (auto* d2 = dynamic_cast<const torch::nn::Dropout2dImpl*>(mod)) p = d2->options.p();
    else if (auto* d3 = dynamic_cast<const torch::nn::Dropout3dImpl*>(mod)) p = d3->options.p();
    else if (auto* a = dynamic_cast<const torch::nn::AlphaDropoutImpl*>(mod)) p = a->options.p();
    else if (auto* f = dynamic_cast<const torch::nn::FeatureAlphaDropoutImpl*>(mod)) p = f->options.p();
    else if (auto* r = dynamic_cast<const DrawsRandomInTraining*>(mod)) p = r->random_draw_probability();
    if (p > 0) out.push_back(item.key());
  }
  return out;
}

// The notice that the captured region draws random numbers (SPEC §2.3): logged at the first capture
// whose region has such modules, once per run (a re-capture after an invalidation says nothing new).
class RandomNotice {
 public:
  // Returns whether it logged now.
  bool at_capture(const torch::nn::Module& region) {
    if (logged_) return false;
    const auto random = random_training_modules(region);
    if (random.empty()) return false;
    log::info("cuda_graph: the captured region draws random numbers (", random.front(),
              random.size() > 1 ? " and " + std::to_string(random.size() - 1) + " more" : std::string(),
              "); replays draw from the graph's own random stream: statistically equivalent to eager, not identical");
    logged_ = true;
    return true;
  }
  bool logged() const { return logged_; }

 private:
  bool logged_ = false;
};

// Failure injection for the tests: a forward replay that throws before its launch or after it ran, or a
// backward replay that throws after it ran.
enum class ReplayFault { none, forward_before_launch, forward_after_launch, backward };

#if defined(LIBREYOLO_WITH_CUDA)

// Drains pending (non-sticky) CUDA errors so a failed capture does not poison the next eager kernel.
inline std::string drain_cuda_errors() {
  std::string seen;
  for (int i = 0; i < 16; ++i) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) break;
    seen += (seen.empty() ? "" : "; ") + std::string(cudaGetErrorString(e));
  }
  return seen;
}

class GraphedCallable {
 public:
  using Fn = std::function<std::vector<torch::Tensor>(const torch::Tensor&)>;
  using PoolId = decltype(at::cuda::graph_pool_handle());

  // Warms up and captures fn at sample's shape; throws (after ending any open capture) on failure.
  // Call it with the previous step's autograd graph already released. `buffers` are the captured
  // region's buffers (BatchNorm statistics): the forward graph first copies them aside, so that a failed
  // replay can put them back (restore_buffers()).
  // grad_strides: per output, the sizes then the strides its gradient arrived in during the last eager step before
  // the recording (sizes only or empty: unknown); the backward graph's gradient-output buffers take them where the
  // sizes are the output's (grad_buffer_for).
  GraphedCallable(Fn fn, std::vector<torch::Tensor> params, std::vector<torch::Tensor> buffers,
                  const torch::Tensor& sample, PoolId pool, int warmup_iters,
                  std::vector<std::vector<int64_t>> grad_strides = {})
      : fn_(std::move(fn)), params_(std::move(params)), buffers_(std::move(buffers)), pool_(pool),
        grad_strides_(std::move(grad_strides)) {
    capture(sample, warmup_iters);
  }
  GraphedCallable(const GraphedCallable&) = delete;
  GraphedCallable& operator=(const GraphedCallable&) = delete;

  // Forward through the graphs: the outputs carry a grad_fn whose backward replays the backward graph.
  std::vector<torch::Tensor> operator()(const torch::Tensor& x);

  const std::vector<int64_t>& shape() const { return shape_; }

  const std::vector<torch::Tensor>& params() const { return params_; }

  using Fault = ReplayFault;
  void inject(Fault f) { fault_ = f; }

  // Called at each step's start: forgets the previous step's launch and backward failure.
  void begin_step() {
    launched_ = false;
    backward_failed_ = false;
  }
  bool backward_failed() const { return backward_failed_; }
  // Puts the region's buffers back as they were before this step's forward replay, when that replay ran
  // (its first nodes copy them aside and count the replay on the device); false when nothing was changed.
  bool restore_buffers() {
    if (!launched_ || buffers_.empty()) return false;
    if (sentinel_.item<int64_t>() != launches_) return false;  // the launch never reached the graph's first node
    torch::NoGradGuard ng;
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(backup_[group_[i]].narrow(0, offset_[i], buffers_[i].numel()).view_as(buffers_[i]));
    return true;
  }

  // Used by GraphedFunction.
  std::vector<torch::Tensor> replay_forward(const torch::Tensor& x) {
    begin_step();  // a new step's forward: nothing of it has run yet
    {
      torch::NoGradGuard ng;
      static_input_.copy_(x);
    }
    if (fault_ == Fault::forward_before_launch) {
      fault_ = Fault::none;
      throw Error("forced replay failure (test hook, before launch)");
    }
    launched_ = true;
    ++launches_;
    fwd_->replay();
    if (fault_ == Fault::forward_after_launch) {
      fault_ = Fault::none;
      throw Error("forced replay failure (test hook, after launch)");
    }
    std::vector<torch::Tensor> outs;
    outs.reserve(static_outputs_.size());
    for (auto& o : static_outputs_) outs.push_back(o.detach());  // a fresh impl: autograd sets its history
    return outs;
  }
  // The backward graph adds each parameter's gradient into its persistent buffer (grad_bufs_); before
  // the replay every buffer becomes its parameter's .grad again: a parameter without a gradient (the
  // optimizer's zero_grad sets them to none) gets its buffer zeroed, one whose .grad is another tensor
  // (eager code outside the region, which runs its backward first, accumulated into it) has that value
  // copied in. Autograd then receives no parameter gradient from this node.
  void replay_backward(const std::vector<torch::Tensor>& grads) {
    {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < static_grad_outputs_.size(); ++i) {
        if (!static_grad_outputs_[i].defined()) continue;
        if (i < grads.size() && grads[i].defined()) static_grad_outputs_[i].copy_(grads[i]);
        else static_grad_outputs_[i].zero_();
      }
      std::vector<torch::Tensor> to_zero;
      prior_.clear();
      for (size_t i = 0; i < params_.size(); ++i) {
        const auto& buf = grad_bufs_[i];
        if (!buf.defined()) continue;
        const auto& g = params_[i].grad();
        if (g.defined() && g.is_same(buf)) {  // mid accumulation window: the replay adds to what it holds
          prior_.emplace_back(i, buf.clone());
          continue;
        }
        prior_.emplace_back(i, g);  // none, or the eager code's tensor (left as it is)
        if (g.defined()) buf.copy_(g);
        else to_zero.push_back(buf);
        params_[i].mutable_grad() = buf;
      }
      if (!to_zero.empty()) at::_foreach_zero_(to_zero);
    }
    try {
      bwd_->replay();
      if (fault_ == Fault::backward) {
        fault_ = Fault::none;
        throw Error("forced backward replay failure (test hook)");
      }
    } catch (...) {
      // The replay may have added into the buffers: every parameter gets back the gradient it had before.
      backward_failed_ = true;
      for (auto& [i, g] : prior_) params_[i].mutable_grad() = g;
      prior_.clear();
      throw;
    }
  }

 private:
  struct Differentiable {
    std::vector<torch::Tensor> outputs, grad_outputs;
  };
  // The outputs that require grad, each with a zero gradient buffer of its shape.
  Differentiable differentiable(const std::vector<torch::Tensor>& outs) const {
    Differentiable d;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].requires_grad()) {
        d.outputs.push_back(outs[i]);
        d.grad_outputs.push_back(grad_buffer_for(i, outs[i]));
      }
    return d;
  }
  // Output i's gradient buffer (zeros) in the layout eager code handed its gradient in (grad_strides_), else in the
  // output's own. The layout matters for bits: the backward's reductions (a bias's gradient, a sum over tokens)
  // walk the gradient in memory order, so a region output that is a permuted view (tokens [B, N, C] over a
  // [B, C, N] map) whose gradient arrives contiguous sums in another order from a buffer laid out like the view
  // (session 35, benchmarks/s35/linear_graph_diag.py: graph = eager bit for bit only with the eager layout).
  torch::Tensor grad_buffer_for(size_t i, const torch::Tensor& o) const {
    const auto d = static_cast<size_t>(o.dim());
    if (i < grad_strides_.size() && grad_strides_[i].size() == 2 * d &&
        std::equal(o.sizes().begin(), o.sizes().end(), grad_strides_[i].begin()))
      return at::empty_strided(o.sizes(), at::IntArrayRef(grad_strides_[i]).slice(d), o.options()).zero_();
    return torch::zeros_like(o);
  }
  void capture(const torch::Tensor& sample, int warmup_iters);
  // The region is recorded inside the caller's forward, so under its autocast region, while eager code runs
  // .backward() after that region has closed. Autograd hands the calling thread's dispatch state (autocast's
  // keys among it) to the backward, so a backward started under autocast runs its formulas autocast too: a
  // bias's gradient (a sum over tokens, on autocast's float32 list) came out float32 where eager's rounds to
  // half (session 37's lockstep case: only the Linear and attention biases differed, only under AMP). The
  // region's backward, warm-up and recording, therefore runs with autocast's keys excluded, as eager's does.
  struct BackwardOutsideAutocast {
    c10::impl::ExcludeDispatchKeyGuard guard{c10::autocast_dispatch_keyset};
  };
  // Records body into g (current stream, shared pool); on any failure ends the capture and rethrows.
  // Autocast's cast cache is emptied before and after each recording: a cast cached before it (the warm-up's, in
  // normal memory) would be read by the graph instead of recorded, and one cached during it (in the pool) must not
  // serve eager code after it. Inside the recording the cache works as in eager, so a weight used twice is cast
  // once and its two uses' gradients meet in the cast's dtype, exactly as eager computes them.
  template <class Body>
  void captured(at::cuda::CUDAGraph& g, Body&& body) {
    at::autocast::clear_cache();
    g.capture_begin(pool_, cudaStreamCaptureModeThreadLocal);
    try {
      body();
      g.capture_end();
    } catch (...) {
      at::autocast::clear_cache();
      end_capture_after_failure(g);
      throw;
    }
    at::autocast::clear_cache();
  }
  void end_capture_after_failure(at::cuda::CUDAGraph& g);

  // The buffers' aside copy: one flat tensor per dtype (a few cat kernels in the graph, no host work).
  void make_backup();
  void record_backup();

  Fn fn_;
  std::vector<torch::Tensor> params_, buffers_;
  std::vector<torch::Tensor> backup_;       // per dtype group
  std::vector<std::vector<torch::Tensor>> group_views_;
  std::vector<size_t> group_;               // buffer -> its group
  std::vector<int64_t> offset_;             // buffer -> its offset in the group
  torch::Tensor sentinel_;                  // int64 on the device: forward replays that ran their first node
  int64_t launches_ = 0;
  bool launched_ = false, backward_failed_ = false;
  Fault fault_ = Fault::none;
  PoolId pool_;
  c10::DeviceIndex device_ = 0;
  std::vector<int64_t> shape_;
  torch::Tensor static_input_;
  std::vector<torch::Tensor> static_outputs_, static_grad_outputs_;
  std::vector<torch::Tensor> grad_bufs_;  // per parameter: its persistent .grad (undefined: no gradient here)
  std::vector<std::vector<int64_t>> grad_strides_;  // per output: eager's gradient sizes + strides (else unknown)
  std::vector<std::pair<size_t, torch::Tensor>> prior_;  // this replay's parameters and their .grad before it
  std::unique_ptr<at::cuda::CUDAGraph> fwd_, bwd_;
};

// The autograd function: forward(self, x, params) replays the forward graph; backward replays the
// backward graph. Params are passed as at::TensorList so autograd sees them as variables.
struct GraphedFunction : torch::autograd::Function<GraphedFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, GraphedCallable* self,
                                                const torch::Tensor& x, at::TensorList params) {
    ctx->saved_data["self"] = reinterpret_cast<int64_t>(self);
    ctx->saved_data["n_params"] = static_cast<int64_t>(params.size());
    return self->replay_forward(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* self = reinterpret_cast<GraphedCallable*>(ctx->saved_data["self"].toInt());
    self->replay_backward(grads);  // the parameter gradients are already in their .grad
    // self (not a tensor), x (the input image needs no gradient), and no gradient for each parameter.
    return torch::autograd::variable_list(static_cast<size_t>(2 + ctx->saved_data["n_params"].toInt()));
  }
};

inline std::vector<torch::Tensor> GraphedCallable::operator()(const torch::Tensor& x) {
  return GraphedFunction::apply(this, x, at::TensorList(params_));
}

// Warm-up on a side stream (autograd::grad, so .grad is untouched), then the forward graph and the
// backward graph in one shared pool, thread-local capture mode (a loader thread's pinned allocation
// cannot invalidate it). The caller restores BatchNorm buffers afterwards.
inline void GraphedCallable::capture(const torch::Tensor& sample, int warmup_iters) {
  device_ = sample.device().index() < 0 ? c10::DeviceIndex(0) : sample.device().index();
  shape_ = sample.sizes().vec();
  static_input_ = sample.detach().clone();
  // The persistent gradient buffers, outside the graphs' pool (on the ambient stream): a parameter's own
  // .grad where it has one (mid accumulation window), else zeros of its layout.
  grad_bufs_.clear();
  for (auto& p : params_) grad_bufs_.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  auto ambient = c10::cuda::getCurrentCUDAStream(device_);
  auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_);
  at::cuda::CUDAEvent to_side;
  to_side.record(ambient);
  to_side.block(side);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    for (int i = 0; i < warmup_iters; ++i) {
      auto d = differentiable(fn_(static_input_));
      if (!d.outputs.empty()) {
        BackwardOutsideAutocast no_autocast;
        torch::autograd::grad(d.outputs, params_, d.grad_outputs, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
      }
    }
    side.synchronize();

    make_backup();
    fwd_ = std::make_unique<at::cuda::CUDAGraph>();
    captured(*fwd_, [&] {
      record_backup();
      static_outputs_ = fn_(static_input_);
    });

    Differentiable d;
    for (auto& o : static_outputs_) {
      static_grad_outputs_.push_back(o.requires_grad() ? grad_buffer_for(static_grad_outputs_.size(), o) : torch::Tensor());
      if (o.requires_grad()) {
        d.outputs.push_back(o);
        d.grad_outputs.push_back(static_grad_outputs_.back());
      }
    }
    if (d.outputs.empty()) throw Error("capture: no network output requires grad; nothing to graph for backward");
    bwd_ = std::make_unique<at::cuda::CUDAGraph>();
    captured(*bwd_, [&] {
      BackwardOutsideAutocast no_autocast;
      auto grads = torch::autograd::grad(d.outputs, params_, d.grad_outputs, /*retain_graph=*/false,
                                         /*create_graph=*/false, /*allow_unused=*/true);
      std::vector<torch::Tensor> into, add;
      for (size_t i = 0; i < params_.size(); ++i) {
        if (i < grads.size() && grads[i].defined()) {
          into.push_back(grad_bufs_[i]);
          add.push_back(grads[i]);
        } else {
          grad_bufs_[i] = torch::Tensor();  // unused by the region: autograd gives it nothing, as before
        }
      }
      if (!into.empty()) at::_foreach_add_(into, add);
    });
    for (auto& o : static_outputs_) o = o.detach();  // the captured autograd graph is not kept alive
    at::cuda::CUDAEvent to_ambient;
    to_ambient.record(side);
    to_ambient.block(ambient);
  }
  ambient.synchronize();
}

inline void GraphedCallable::make_backup() {
  sentinel_ = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA, device_));
  std::vector<c10::ScalarType> dtypes;
  std::vector<int64_t> sizes;
  for (auto& b : buffers_) {
    auto it = std::find(dtypes.begin(), dtypes.end(), b.scalar_type());
    size_t g = static_cast<size_t>(it - dtypes.begin());
    if (it == dtypes.end()) {
      dtypes.push_back(b.scalar_type());
      sizes.push_back(0);
      group_views_.emplace_back();
    }
    group_.push_back(g);
    offset_.push_back(sizes[g]);
    sizes[g] += b.numel();
    group_views_[g].push_back(b.reshape({-1}));  // a view: the buffers are contiguous
  }
  for (size_t g = 0; g < dtypes.size(); ++g)
    backup_.push_back(torch::empty({sizes[g]}, buffers_[0].options().dtype(dtypes[g])));
}
inline void GraphedCallable::record_backup() {
  torch::NoGradGuard ng;
  for (size_t g = 0; g < backup_.size(); ++g) at::cat_out(backup_[g], group_views_[g], 0);
  sentinel_.add_(1);
}

inline void GraphedCallable::end_capture_after_failure(at::cuda::CUDAGraph& g) {
  // capture_end ends the stream capture and the allocator's pool routing; when it throws before the
  // latter (an invalidated capture), end the routing ourselves. Either call may legitimately throw.
  try {
    g.capture_end();
  } catch (const std::exception&) {
  }
  try {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_);
  } catch (const std::exception&) {
  }
  drain_cuda_errors();
}

#endif  // LIBREYOLO_WITH_CUDA

}  // namespace libreyolo::capture
