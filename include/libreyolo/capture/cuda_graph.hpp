#pragma once
// capture::CudaGraph<Scope, Threshold>: captures the family's capture region (capture/region.hpp: the whole
// network, or its backbone + encoder) in CUDA graphs, forward and backward, once an input shape has been
// seen Threshold times (SPEC §2.3), and replays them for that shape; the rest of the forward and the loss
// run eager. Everything that cannot be captured at run time (CPU device, a build without CUDA,
// cuda_graph=false, a failed capture, a failed forward or backward replay) turns the policy into eager
// training for the rest of the run with one warning: a failed replay's step is undone (the region's
// BatchNorm statistics restored, its partial gradients dropped) and run again eager, so the flag is
// always safe.
// With Scope = scope::step (cuda_graph=step) the trainer hands the whole step to run_whole_step instead:
// one graph per shape key of the batch (images and padded targets), up to cuda_graph_max_graphs of
// them in one shared memory pool, recorded on the threshold-th sighting of the key (that step runs
// eager on a side stream first) and replayed from then on. A family whose loss is not fixed-shape
// never gets this scope (capture::resolve narrows it to scope::network at compile time, one notice);
// under gradient accumulation a window's accumulating micro-batches and its last one are two graphs per
// shape (train/accumulation.hpp, train/device_step.hpp); a failed capture or replay turns the policy eager
// as above (a replay that failed before its first node ran is re-run eager).
#include <libreyolo/capture/eager.hpp>
#include <libreyolo/capture/graphed_callable.hpp>
#include <libreyolo/capture/shape_counter.hpp>
#include <libreyolo/capture/step_graph.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/log.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#if defined(LIBREYOLO_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace libreyolo::capture {

template <class Scope = scope::network, int Threshold = 3>
class CudaGraph {
  static_assert(Threshold >= 1, "CudaGraph<Scope, Threshold>: a shape must be seen at least once before capture");
  static_assert(std::is_same_v<Scope, scope::network> || std::is_same_v<Scope, scope::step>,
                "CudaGraph<Scope>: Scope is capture::scope::network or capture::scope::step");

 public:
  static constexpr bool graphs = true;
  static constexpr bool whole_step = std::is_same_v<Scope, scope::step>;
  using network_only = CudaGraph<scope::network, Threshold>;
  static constexpr const char* fallback_prefix = "cuda_graph training capture disabled, falling back to eager: ";

  // The run-time conditions under which no graph can be captured in this run (CUTLASS's
  // can_implement), asked once by setup(): empty when capture can run, else the reason.
  static std::string cannot_run(const TrainConfig& cfg, torch::Device device) {
    if (cfg.cuda_graph == GraphMode::off) return "cuda_graph=false";
    if (!compat::with_cuda) return "this build has no CUDA support (LIBREYOLO_WITH_CUDA is off)";
    if (!device.is_cuda()) return "device " + device.str() + " is not a CUDA device";
    return {};
  }

  // cfg.cuda_graph_warmup, when given explicitly, overrides Threshold. The scope is the type's (a
  // cuda_graph key asking another one is told what runs by capture::resolve's notice).
  void setup(const TrainConfig& cfg, torch::Device device) {
    counter_.set_threshold(cfg.is_explicit("cuda_graph_warmup") ? cfg.cuda_graph_warmup : Threshold);
    warmup_iters_ = 3;
    step_mode_ = false;
    max_step_graphs_ = cfg.cuda_graph_max_graphs;
    if (max_step_graphs_ < 1)
      throw ConfigError("cuda_graph_max_graphs=" + std::to_string(max_step_graphs_) + ": allowed an integer >= 1");
    if (const auto why = cannot_run(cfg, device); !why.empty())
      disable(why);
    else
      enabled_ = true;
    // The step report's "requested": the type's scope with capture on, or a step key over a network-scope
    // policy (capture::resolve's notice says what runs then).
    step_requested_ = whole_step ? cfg.cuda_graph != GraphMode::off : cfg.cuda_graph == GraphMode::step;
    if constexpr (whole_step) {
      if (!step_requested_) return;
      step_mode_ = true;
      if (enabled_)
        log::info("cuda_graph=step: the whole training step is captured per batch shape (at most ", max_step_graphs_,
                  " graphs, after ", counter_.threshold(), " sightings of a shape)",
                  cfg.accumulate() > 1 ? "; with gradient accumulation (" + std::to_string(cfg.accumulate()) +
                                             " batches per optimizer step) an accumulating micro-batch and a window's "
                                             "last one are two graphs per shape"
                                       : std::string());
    }
  }

  // The network's output for x: the region through its graph replay when x has the captured key, else
  // eager (counted).
  template <class Net, class Region = whole_network>
  auto forward(Net& net, const torch::Tensor& x, Region = {}) {
    region_name_ = to_string(Region::value);
    if constexpr (Region::value == CaptureRegion::backbone_encoder) {
      static_assert(EncoderBoundary<typename Net::ContainedType>,
                    "capture_region = backbone_encoder: the network must declare encoder(), encode(x), decode(f)");
      auto enc = region_forward(net, net->encoder(), [net](const torch::Tensor& in) mutable { return net->encode(in); }, x);
      return net->decode(enc);
    } else {
      return region_forward(net, *net, [net](const torch::Tensor& in) mutable { return net->forward(in); }, x);
    }
  }

  // One micro-batch's forward + backward. A failed backward replay ends graph training for the run: the
  // step's effects are undone (BatchNorm statistics of the region restored; gradients back to the step's
  // start) and the step runs again eager.
  template <class Net, class Body>
  void run_step(Net& net, Body&& body, bool window_start) {
#if defined(LIBREYOLO_WITH_CUDA)
    if (!enabled_) return body();
    std::vector<torch::Tensor> saved;  // eager-region gradients mid-window (only then can they be non-zero)
    if (graphed_ && !window_start && !eager_params_.empty())
      for (auto& p : eager_params_) saved.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    try {
      body();
    } catch (const std::exception& e) {
      if (!graphed_ || !graphed_->backward_failed()) throw;
      const bool restored = graphed_->restore_buffers();
      for (size_t i = 0; i < eager_params_.size(); ++i)
        eager_params_[i].mutable_grad() = window_start || saved.empty() ? torch::Tensor() : saved[i];
      (void)net;
      fail(std::string("backward replay failed at input shape ") + capture_key_->shape_string() + ": " + e.what(),
           restored);
      body();
    }
#else
    (void)net;
    (void)window_start;
    body();
#endif
  }

  // ---- cuda_graph=step (Scope = scope::step) -----------------------------------------------------
  // After setup(): whether the trainer runs the whole step through run_whole_step in this run (false
  // for the network scope, and with gradient accumulation).
  bool step_mode() const { return step_mode_; }
  // Whether step graphs may still be recorded or replayed (CUDA, no fallback yet): the trainer pads the
  // batch to its bucket only then.
  bool step_graphs_enabled() const { return step_mode_ && enabled_; }
  int max_step_graphs() const { return max_step_graphs_; }
  size_t step_graph_count() const {
#if defined(LIBREYOLO_WITH_CUDA)
    return step_graphs_.size();
#else
    return 0;
#endif
  }

  // One whole training step: body(batch) -> the step's loss items (forward, loss, backward, unscale,
  // clip, optimizer, scaler, EMA on device state); reset_grads() sets every parameter's grad to none.
  // Eager (reset_grads(), body(b)) until b's key is seen the threshold-th time; that step runs eager on a
  // side stream and the graph is recorded; later steps with the key replay it. The returned items are
  // valid until the next step.
  // accumulating: a micro-batch of an accumulation window before its last (its own graph per shape).
  template <class Batch, class Body, class Reset>
  torch::Tensor run_whole_step(Batch& b, Body&& body, Reset&& reset_grads, [[maybe_unused]] bool accumulating = false) {
    auto eager = [&] { return body(b); };
#if defined(LIBREYOLO_WITH_CUDA)
    return run_keyed<StepGraph<Batch>>(
        b, accumulating, eager, [&](StepGraph<Batch>& g, bool fault) { g.replay(fault); },
        [&](const StepKey& key) { return capture_whole_step(b, body, reset_grads, key); }, reset_grads);
#else
    reset_grads();
    ++eager_steps_;
    return eager();
#endif
  }

  // The same for a segmented step (capture/step_graph.hpp: part_a(batch) -> Segment, part_b(batch, given) ->
  // items; the DETR line's matching between them): eager run_segments, then SegmentedStepGraph per key.
  template <class Batch, class PartA, class PartB, class Reset>
  torch::Tensor run_segmented_step(Batch& b, PartA&& a, PartB&& part_b, Reset&& reset_grads, [[maybe_unused]] bool accumulating = false) {
    auto eager = [&] { return run_segments(b, a, part_b); };
#if defined(LIBREYOLO_WITH_CUDA)
    return run_keyed<SegmentedStepGraph<Batch>>(
        b, accumulating, eager, [&](SegmentedStepGraph<Batch>& g, bool fault) { g.replay_segments(fault); },
        [&](const StepKey& key) { return capture_segmented_step(b, a, part_b, reset_grads, key); }, reset_grads);
#else
    reset_grads();
    ++eager_steps_;
    return eager();
#endif
  }

  // The family's captured computation changed: drop the graph, forget the counts, run eager until the
  // shape repeats again.
  void invalidate(std::string_view reason) {
    drop_graph();
    counter_.reset();
#if defined(LIBREYOLO_WITH_CUDA)
    step_seen_.clear();
#endif
    ++invalidations_;
    if (enabled_) log::info("cuda_graph: capture invalidated (", reason, "); will re-capture");
  }

  // Phase events (train/events.hpp): a step's start forgets the previous step's replay state.
  void operator()(event::step_begin) {
#if defined(LIBREYOLO_WITH_CUDA)
    if (graphed_) graphed_->begin_step();
#endif
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
            {"fallback_reason", fallback_reason_ ? nlohmann::json(*fallback_reason_) : nlohmann::json(nullptr)},
            {"step", step_report()}};
  }
  // cuda_graph=step: "cuda_graph=step: R of N steps replayed (shapes: MiB, replays; ...)"; empty
  // when the whole step is not captured in this run (or graphs never could be: a CPU).
  std::string step_summary() const {
    if (!step_mode_ || replayed_steps_ + eager_steps_ == 0 || (!enabled_ && replayed_steps_ == 0)) return {};
    std::string graphs;
#if defined(LIBREYOLO_WITH_CUDA)
    for (const auto& [key, g] : step_graphs_)
      graphs += (graphs.empty() ? "" : "; ") + key.shape_string() + ": " + trainer_mib(g->vram_bytes) + " MiB, " +
                std::to_string(g->replays()) + " replays";
#endif
    return "cuda_graph=step: " + std::to_string(replayed_steps_) + " of " + std::to_string(replayed_steps_ + eager_steps_) +
           " steps replayed" + (graphs.empty() ? std::string() : " (" + graphs + ")");
  }
  // cuda_graph=step: the mode, and per cached graph its batch shapes, replays and VRAM.
  nlohmann::json step_report() const {
    nlohmann::json graphs = nlohmann::json::array();
#if defined(LIBREYOLO_WITH_CUDA)
    for (const auto& [key, g] : step_graphs_)
      graphs.push_back({{"shapes", key.shape_string()},
                        {"replays", g->replays()},
                        {"vram_mib", static_cast<double>(g->vram_bytes) / (1 << 20)}});
#endif
    return {{"requested", step_requested_}, {"whole_step", step_mode_}, {"max_graphs", max_step_graphs_},
            {"graphs", graphs}, {"dropped_graphs", dropped_step_graphs_}};
  }

  bool enabled() const { return enabled_; }
  bool has_graph() const {
#if defined(LIBREYOLO_WITH_CUDA)
    return graphed_ != nullptr || !step_graphs_.empty();
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
  // Tests: the next replay fails as a failed replay would (exercises the run-time fallback): the forward
  // replay before its launch (default) or after it ran, or the backward replay after it ran.
  using Fault = ReplayFault;
  void fail_next_replay_for_testing(Fault f = Fault::forward_before_launch) { pending_fault_ = f; }

 private:
  void disable(const std::string& reason, const std::string& consequence = "") {
    enabled_ = false;
    fallback_reason_ = reason;
    log::warn(fallback_prefix, reason, consequence);
  }
  void drop_graph() {
#if defined(LIBREYOLO_WITH_CUDA)
    if (graphed_ || !step_graphs_.empty()) c10::cuda::device_synchronize();  // no replay may still be running
    graphed_.reset();
    capture_key_.reset();
    dropped_step_graphs_ += static_cast<int64_t>(step_graphs_.size());
    step_graphs_.clear();
    // The next recording gets a pool of its own: once every graph sharing a pool is destroyed, the
    // caching allocator keeps that pool (use count 0) until its memory is freed and refuses a new capture
    // into it (an internal assert in beginAllocateToPool), which would turn a re-capture after
    // invalidate() (YOLOX's L1 switch) into the eager fallback. The old pool's memory is released by the
    // allocator once its blocks are free.
    step_pool_.reset();
#endif
  }

  template <class Net, class Fn>
  auto region_forward(Net& net, torch::nn::Module& region, Fn fn, const torch::Tensor& x) {
    using Out = std::decay_t<decltype(fn(x))>;
    const auto key = ShapeKey::of(x);
#if defined(LIBREYOLO_WITH_CUDA)
    if (enabled_ && net->is_training()) {
      if (auto out = graphed_forward<Out>(*net, region, fn, x, key)) return std::move(*out);
    } else {
      counter_.count(key);
    }
#else
    (void)net;
    (void)region;
    counter_.count(key);
#endif
    ++eager_steps_;
    Out out(fn(x));
#if defined(LIBREYOLO_WITH_CUDA)
    if (enabled_ && !graphed_ && net->is_training()) record_grad_layouts(OutputCodec<Out>::flatten(out));
#endif
    return out;
  }

#if defined(LIBREYOLO_WITH_CUDA)
  // Before the recording: the strides each region output's gradient arrives in from the eager code after it (a
  // hook per output: its sizes then its strides; a gradient that is not dense and non-overlapping, an expanded one,
  // gives its sizes only).
  // The recording lays its gradient-output buffers out the same (GraphedCallable::grad_buffer_for).
  void record_grad_layouts(const std::vector<torch::Tensor>& outs) {
    auto seen = std::make_shared<std::vector<std::vector<int64_t>>>(outs.size());
    grad_layouts_ = seen;
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].requires_grad())
        outs[i].register_hook([seen, i](const torch::Tensor& g) {
          (*seen)[i] = g.is_non_overlapping_and_dense() ? g.strides().vec() : std::vector<int64_t>{};
          (*seen)[i].insert((*seen)[i].begin(), g.sizes().begin(), g.sizes().end());  // sizes, then strides
        });
  }

  template <class Out, class Fn>
  std::optional<Out> graphed_forward(torch::nn::Module& whole, torch::nn::Module& region, Fn& fn, const torch::Tensor& x,
                                     const ShapeKey& key) {
    if (!graphed_) {
      if (!counter_.count(key)) return std::nullopt;
      try {
        capture<Out>(whole, region, fn, x, key);
      } catch (const std::exception& e) {
        fail("capture failed at input shape " + key.shape_string() + ": " + e.what(), false);
        return std::nullopt;
      }
    } else if (!(key == *capture_key_)) {
      counter_.count(key);  // another shape (multi-scale, last partial batch): eager
      return std::nullopt;
    }
    if (pending_fault_ != Fault::none) graphed_->inject(std::exchange(pending_fault_, Fault::none));
    try {
      auto out = OutputCodec<Out>::unflatten((*graphed_)(x));
      ++replayed_steps_;
      return out;
    } catch (const std::exception& e) {
      const bool restored = graphed_->restore_buffers();
      fail(std::string("replay failed at input shape ") + key.shape_string() + ": " + e.what(), restored);
      return std::nullopt;
    }
  }

  template <class Out, class Fn>
  void capture(torch::nn::Module& whole, torch::nn::Module& region, Fn fn, const torch::Tensor& x, const ShapeKey& key) {
    random_notice_.at_capture(region);
    std::vector<torch::Tensor> params;
    for (auto& p : region.parameters())
      if (p.requires_grad()) params.push_back(p);
    eager_params_.clear();
    for (auto& p : whole.parameters()) {  // the network's parameters outside the region (their grads run eager)
      if (!p.requires_grad()) continue;
      bool inside = false;
      for (auto& q : params) inside = inside || q.is_same(p);
      if (!inside) eager_params_.push_back(p);
    }
    BufferSnapshot buffers(whole);
    auto flat = [fn](const torch::Tensor& in) mutable { return OutputCodec<Out>::flatten(fn(in)); };
    try {
      graphed_ = std::make_unique<GraphedCallable>(flat, std::move(params), region.buffers(), x,
                                                   at::cuda::graph_pool_handle(), warmup_iters_,
                                                   grad_layouts_ ? *grad_layouts_ : std::vector<std::vector<int64_t>>{});
    } catch (...) {
      graphed_.reset();
      drain_cuda_errors();
      buffers.restore();
      throw;
    }
    buffers.restore();
    graphed_->begin_step();
    capture_key_ = key;
    capture_shape_ = key.shape;
    ++captures_;
    log::info("cuda_graph: captured training forward/backward (", region_name_, ") at input shape ", key.shape_string());
  }

  // A failed capture or replay: drained errors, the graph dropped, eager for the rest of the run.
  void fail(const std::string& reason, bool buffers_restored, const std::string& step_note = "") {
    const std::string pending = drain_cuda_errors();
    try {
      drop_graph();
    } catch (const std::exception&) {
      (void)graphed_.release();  // a broken graph is leaked rather than destroyed on a failing device
      capture_key_.reset();
      for (auto& [k, g] : step_graphs_) (void)g.release();
      step_graphs_.clear();
    }
    eager_params_.clear();
    disable(pending.empty() ? reason : reason + " (pending CUDA errors: " + pending + ")",
            std::string("; training continues eager for the rest of the run") +
                (buffers_restored ? " (this step's BatchNorm statistics restored, the step re-run eager)" : "") +
                step_note);
  }

  // A step through the graph of b's key: replayed when recorded (a failed replay turns the policy eager; its
  // step is kept when the graph had started, else re-run eager), recorded on the key's threshold-th sighting
  // while the cache has room, else eager.
  template <class G, class Batch, class Eager, class Replay, class Capture, class Reset>
  torch::Tensor run_keyed(Batch& b, bool accumulating, Eager& eager, Replay&& replay, Capture&& capture, Reset& reset_grads) {
    if (step_mode_ && enabled_) {
      const StepKey key = StepKey::of(b, accumulating);
      if (auto it = step_graphs_.find(key); it != step_graphs_.end()) {
        auto* g = static_cast<G*>(it->second.get());
        try {
          g->load(b);
          replay(*g, std::exchange(pending_fault_, Fault::none) != Fault::none);
          ++replayed_steps_;
          return g->items();
        } catch (const std::exception& e) {
          bool ran = true;
          try {
            ran = g->ran_last_launch();
          } catch (const std::exception&) {
          }
          fail(std::string("step replay failed at batch shapes ") + key.shape_string() + ": " + e.what(), false,
               ran ? " (the failed replay had started: its step is kept)" : " (the step re-run eager)");
          if (ran) return torch::zeros_like(g_items_shape_);
        }
      } else if (++step_seen_[key] == counter_.threshold()) {
        if (static_cast<int>(step_graphs_.size()) < max_step_graphs_) {
          const std::string short_of = short_of_memory(step_device(b));
          if (short_of.empty()) return capture(key);
          log::notice_once("capture.step.memory", "cuda_graph=step: " + short_of + "; batch shapes " + key.shape_string() +
                                                       " train eager for the rest of the run, as do other new ones while the device lacks the room");
        } else {
          log::notice_once("capture.step.cache_full",
                           "cuda_graph=step: " + std::to_string(max_step_graphs_) + " step graphs are cached "
                           "(cuda_graph_max_graphs); batch shapes " + key.shape_string() +
                           " and any further new ones train eager");
        }
      }
    }
    reset_grads();
    ++eager_steps_;
    return eager();
  }

  // The threshold-th sighting of a key: this step runs eager on a side stream (the warm-up of the
  // graph's kernels, cuDNN/cuBLAS set-up included), then the same body is recorded over static copies
  // of the batch (its kernels do not run). A failed recording turns the policy eager.
  template <class Batch, class Body, class Reset>
  torch::Tensor capture_whole_step(Batch& b, Body& body, Reset& reset_grads, const StepKey& key) {
    return capture_keyed(b, [&] { return body(b); }, [&] { return std::make_unique<StepGraph<Batch>>(b, body, *step_pool_, key); },
                         reset_grads, key);
  }
  // The segmented step's: the eager step keeps its solve's result as the recording's sample of part B's input.
  template <class Batch, class PartA, class PartB, class Reset>
  torch::Tensor capture_segmented_step(Batch& b, PartA& a, PartB& part_b, Reset& reset_grads, const StepKey& key) {
    torch::Tensor given;
    auto keep = [&](const Batch& sb, const torch::Tensor& g) {
      given = g;
      return part_b(sb, g);
    };
    return capture_keyed(b, [&] { return run_segments(b, a, keep); },
                         [&] { return std::make_unique<SegmentedStepGraph<Batch>>(b, a, part_b, given, *step_pool_, key); }, reset_grads, key);
  }
  template <class Batch, class Eager, class Make, class Reset>
  torch::Tensor capture_keyed(Batch& b, Eager&& eager, Make&& make, Reset& reset_grads, const StepKey& key) {
    const c10::DeviceIndex dev = step_device(b);
    auto ambient = c10::cuda::getCurrentCUDAStream(dev);
    // One side stream for every step graph of the run: the caching allocator reuses a freed block of the shared
    // pool only for allocations on the stream it was made on, so captures on a new pool stream each could not
    // reuse one another's freed memory (session 40, RF-DETR-n under multi-scale: every further step graph
    // reserved 2.2-4.0 GB, about a whole eager step, and the 19th capture ran out of the H100's 80 GB).
    if (!capture_stream_ || capture_stream_->device_index() != dev)
      capture_stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, dev);
    auto side = *capture_stream_;
    at::cuda::CUDAEvent to_side;
    to_side.record(ambient);
    to_side.block(side);
    torch::Tensor items;
    std::unique_ptr<StepGraphBase> g;
    std::string error;
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      reset_grads();
      items = eager();  // this step, eager
      ++eager_steps_;
      side.synchronize();
      reset_grads();  // the recorded backward allocates the grads in the pool
      if (!step_pool_) step_pool_ = at::cuda::graph_pool_handle();
      const int64_t before = compat::cuda_reserved(dev);
      try {
        g = make();
        g->vram_bytes = compat::cuda_reserved(dev) - before;
      } catch (const std::exception& e) {
        error = e.what();
        g.reset();
      }
      at::cuda::CUDAEvent to_ambient;
      to_ambient.record(side);
      to_ambient.block(ambient);
    }
    if (!g) {
      reset_grads();  // none of the failed recording's tensors is kept
      fail("capture of the whole training step failed at batch shapes " + key.shape_string() + ": " + error, false);
      return items;
    }
    g_items_shape_ = torch::zeros_like(items);
    ++captures_;
    if (!capture_shape_) capture_shape_ = key.parts.front().shape;
    log::info("cuda_graph=step: captured the training step at batch shapes ", key.shape_string(), " (graph ",
              step_graphs_.size() + 1, " of at most ", max_step_graphs_, ", ",
              trainer_mib(g->vram_bytes), " MiB of device memory)");
    step_graphs_.emplace(key, std::move(g));
    return items;
  }
  // Before recording one more step graph: empty when the device keeps room for it, else why not. A graph is
  // assumed to need as much as the largest one recorded so far (the first is always tried), with 1 GiB kept for
  // the CUDA context and the eager steps' stray allocations; memory the allocator already holds counts as used
  // (a capture cannot return cached blocks to the device). Without this a capture that ran out of memory turned
  // the whole run eager (session 40: RF-DETR-n's 19th graph on an 80 GB H100).
  std::string short_of_memory(c10::DeviceIndex dev) const {
    int64_t largest = 0, held = 0;
    for (const auto& [k, g] : step_graphs_) largest = std::max(largest, g->vram_bytes), held += g->vram_bytes;
    if (largest == 0) return {};
    const int64_t left = compat::cuda_total_memory(dev) - compat::cuda_reserved(dev) - (int64_t{1} << 30);
    if (left >= largest + largest / 4) return {};
    return std::to_string(step_graphs_.size()) + " step graphs hold " + trainer_mib(held) + " MiB and " +
           trainer_mib(std::max<int64_t>(left, 0)) + " MiB of the device are left (1 GiB kept), less than 1.25x the " +
           "largest graph (" + trainer_mib(largest) + " MiB)";
  }
  static std::string trainer_mib(int64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(bytes) / (1 << 20));
    return buf;
  }

  RandomNotice random_notice_;
  std::unique_ptr<GraphedCallable> graphed_;
  std::shared_ptr<std::vector<std::vector<int64_t>>> grad_layouts_;  // the last eager step's (record_grad_layouts)
  std::map<StepKey, std::unique_ptr<StepGraphBase>> step_graphs_;
  std::map<StepKey, int64_t> step_seen_;
  std::optional<StepGraphBase::PoolId> step_pool_;
  std::optional<c10::cuda::CUDAStream> capture_stream_;  // every step graph's recording stream (capture_keyed)
  torch::Tensor g_items_shape_;  // zeros shaped like a step's loss items (a failed replay that ran)
  std::optional<ShapeKey> capture_key_;
  std::vector<torch::Tensor> eager_params_;
#endif

  ShapeCounter counter_{Threshold};
  bool enabled_ = false;
  bool step_requested_ = false, step_mode_ = false;
  int max_step_graphs_ = 4;
  int64_t dropped_step_graphs_ = 0;
  Fault pending_fault_ = Fault::none;
  std::string_view region_name_ = "network";
  int warmup_iters_ = 3;
  std::optional<std::string> fallback_reason_;
  std::optional<std::vector<int64_t>> capture_shape_;
  int64_t replayed_steps_ = 0, eager_steps_ = 0, captures_ = 0, invalidations_ = 0;
};

static_assert(CapturePolicy<CudaGraph<>> && CapturePolicy<CudaGraph<scope::step>>);

}  // namespace libreyolo::capture
