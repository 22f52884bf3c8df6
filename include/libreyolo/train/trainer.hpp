#pragma once
// Trainer<Family, Precision, Capture, Profiler>: the training loop, composed at compile time.
//
// One step reads top to bottom as the named phases of SPEC §2.1:
//   dataload -> to_device -> forward (autocast, network through the capture policy, eager loss)
//   -> backward (scale, backward, unscale + clip) -> optimizer (scaler step + update)
//   then, outside every phase: zero_grad, EMA, LR.
// With gradient accumulation (nbs / batch micro-batches per optimizer step) clipping moves into the
// optimizer phase. A capture policy the family/task/mode cannot use resolves to Eager at compile time
// (capture::resolve_t) with one notice.
//
// The loop raises events (train/events.hpp): epoch_begin / step_end / epoch_end for the callbacks given
// to fit() and subscribed with events().on(...), and the phase events (step_begin, phase_begin/_end,
// step_done) for its two built-in clients, the profiler and the capture policy.
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/capture/eager.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/device.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/progress.hpp>
#include <libreyolo/core/cudnn.hpp>
#include <libreyolo/core/memory_format.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/distributed/reducer.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/precision/fp32.hpp>
#include <libreyolo/precision/grad_scaler.hpp>
#include <libreyolo/plot/charts.hpp>
#include <libreyolo/profile/window.hpp>
#include <libreyolo/train/autobatch.hpp>
#include <libreyolo/io/checkpoint.hpp>
#include <libreyolo/train/accumulation.hpp>
#include <libreyolo/train/events.hpp>
#include <libreyolo/train/clip.hpp>
#include <libreyolo/train/device_step.hpp>
#include <libreyolo/train/ema.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/interrupt.hpp>
#include <libreyolo/train/members.hpp>
#include <libreyolo/train/optimizer.hpp>
#include <libreyolo/train/param_groups.hpp>
#include <libreyolo/train/run_dir.hpp>
#include <libreyolo/train/schedule.hpp>

#include <chrono>
#include <memory>
#include <optional>

namespace libreyolo {

struct TrainResult {
  std::filesystem::path run_dir;
  double best_fitness = -1;
  nlohmann::json last_metrics = nlohmann::json::object();
  int epochs_done = 0;
  int64_t optimizer_steps = 0;
  bool interrupted = false;
};

namespace profile {
// resolve<Prof, M>::type is Prof, or Off in a distributed trainer (the window measures one process).
template <class Prof, capture::Mode M>
struct resolve {
  static constexpr bool downgraded = Prof::enabled && M == capture::Mode::distributed;
  using type = std::conditional_t<downgraded, Off, Prof>;
  static void notice() {
    if constexpr (downgraded)
      log::notice_once("profile.resolve.distributed", "profile=true ignored (distributed); the profiler measures single-process runs only.");
  }
};
template <class Prof, capture::Mode M>
using resolve_t = typename resolve<Prof, M>::type;
// The compile-time window of a profiler policy (Window<Warmup, Active>), for the keys a config leaves unset.
template <class Prof>
struct window_params {
  static constexpr int warmup = 5, active = 20;
};
template <int Warmup, int Active>
struct window_params<Window<Warmup, Active>> {
  static constexpr int warmup = Warmup, active = Active;
};
}  // namespace profile

template <train::FamilyPolicy F, precision::PrecisionPolicy P = precision::Fp32, capture::CapturePolicy C = capture::Eager,
          profile::ProfilerPolicy Prof = profile::Off, capture::Mode M = capture::Mode::single>
class Trainer {
 public:
  using Family = F;
  using Capture = capture::resolve_t<F, C, M>;
  using Profiler = profile::resolve_t<Prof, M>;
  static constexpr bool distributed = M == capture::Mode::distributed;
  using Network = typename F::Network;
  using Batch = typename F::Batch;
  using Loader = data::Loader<typename F::Dataset>;

  static constexpr CaptureRegion region = family_traits<F>::capture_region;
  static_assert(!Capture::graphs || region != CaptureRegion::backbone_encoder ||
                    capture::EncoderBoundary<typename Network::ContainedType>,
                "capture_region = backbone_encoder: the family's network must declare the boundary "
                "(encoder(), encode(x), decode(features); capture/region.hpp)");
  // The family's optional members against its declaration (train/members.hpp).
  static_assert(train::check_members<F, Capture>());

  // The profiler's window comes from the config where it sets profile_warmup / profile_steps /
  // profile_trace_steps (the policy's own values, e.g. Window<W, A>'s, stay for the keys it leaves
  // alone); code may still change it through profiler() before fit().
  explicit Trainer(TrainConfig cfg, F family = F{}) : cfg_(std::move(cfg)), family_(std::move(family)) {
    if constexpr (Profiler::enabled) {
      using W = profile::window_params<Profiler>;
      const bool w = cfg_.is_explicit("profile_warmup"), a = cfg_.is_explicit("profile_steps");
      if (w || a) prof_.set_window(w ? cfg_.profile_warmup : W::warmup, a ? cfg_.profile_steps : W::active);
      if (cfg_.is_explicit("profile_trace_steps")) prof_.set_traced_steps(cfg_.profile_trace_steps);
    }
  }

  // Opens data, builds network/EMA/optimizer/schedule, restores a checkpoint when asked.
  void setup();
  // Trains to the configured end (or max_steps / interruption). Callbacks are optional-hook objects.
  template <class... Callbacks>
  TrainResult fit(Callbacks&&... callbacks);

  // One micro-batch through all phases; false at the end of the epoch.
  bool train_one_batch();
  train::ValResult validate();

  const TrainConfig& config() const { return cfg_; }
  // Run-time subscriptions to the loop events: events().on(event::step_end{}, handler).
  LoopEvents& events() { return events_; }
  Network& network() { return net_; }
  train::Optimizer& optimizer() { return *opt_; }
  train::ModelEMA* ema() { return ema_.get(); }
  P& precision() { return precision_; }
  Capture& capture() { return capture_; }
  Profiler& profiler() { return prof_; }
  // Distributed runs: this process's group (null in a single-process trainer); rank 0 is the main one.
  dist::Context* dist() { return dist_.get(); }
  bool is_main() const { return !dist_ || dist_->is_main(); }
  F& family() { return family_; }
  Loader& train_loader() { return *train_loader_; }
  torch::Device device() const { return device_; }
  const std::filesystem::path& run_dir() const { return run_dir_; }
  int accumulate() const { return accumulate_; }
  int64_t iteration() const { return ni_; }
  int64_t optimizer_steps() const { return opt_steps_; }
  // Saves weights/last.ckpt (and best.ckpt when `best`) atomically.
  void save_checkpoint(bool best = false);
  // One training step's peak device memory at batch `batch` in bytes (0 on CPU; nothing when it ran out
  // of memory): forward, loss and backward on copies of the first training sample, under this trainer's
  // precision, eager. The network comes back as it was: BatchNorm statistics restored, no gradients.
  // batch=-1 uses it (auto_batch); after setup().
  std::optional<int64_t> probe_memory(int batch);

 private:
  void resolve_config();
  void build();
  int auto_batch();  // batch=-1: the largest power of two whose step fits in 60% of the GPU (train/autobatch.hpp)
  void restore(const train::Checkpoint& ck, bool full);
  void clip_gradients();
  // cuda_graph=step: the whole step on device state through the capture policy; the step's loss items.
  torch::Tensor train_whole_step(Batch& b, bool optimizer_step = true);
  void make_ema();
  nlohmann::json run_summary() const;
  nlohmann::json epoch_row(int epoch, const torch::Tensor& mean_loss, const train::ValResult* v, double secs) const;
  void log_header() const;
  bool capture_active() const;
  std::string progress_tail() const;
  bool stop_now();
  bool stop_at_epoch_end();
  // Micro-batches whose gradients are accumulated but not yet stepped (0 on an optimizer-step boundary).
  int64_t pending_micro_batches() const { return ni_ - 1 - last_opt_ni_; }
  // The micro-batches still to train before the open accumulation window's optimizer step (0 on a boundary).
  int64_t window_remaining() const;
  template <class E, class... A>
  void raise_phase(E e, A... a);  // to the profiler and the capture policy
  void family_hook_epoch_begin(const EpochInfo& info);
  // fit(), split (train/trainer_fit.hpp): what the epochs share, one epoch's batches, its end, the stop
  // protocol, the run's end.
  struct FitState {
    std::chrono::steady_clock::time_point t_run;
    bool stop = false;
    bool draining = false;  // a stop is waiting for the end of the current accumulation window
    int epochs_run = 0;
    int completed = 0;
  };
  struct EpochRun {
    int64_t resumed_at = 0;  // batches trained before this run's part of the epoch (resume)
    int64_t batches = 0;     // the epoch's batches
    double secs = 0;
  };
  template <class... Callbacks>
  EpochRun train_epoch(FitState& st, Callbacks&... callbacks);
  bool stop_after_step(FitState& st);
  void end_epoch(EpochInfo& info, const EpochRun& run, FitState& st);
  void stop_after_epoch(FitState& st);
  TrainResult finish(const FitState& st);
  void add_loss(const torch::Tensor& items);  // into the epoch's running sum (loss_sum_, loss_count_)

  TrainConfig cfg_;
  F family_;
  LoopEvents events_;
  [[no_unique_address]] Profiler prof_;
  ProfilerClient<Profiler> prof_client_;  // the profiler, as a client of the phase events
  std::unique_ptr<dist::Context> dist_;
  std::unique_ptr<CudnnScope> cudnn_scope_;  // setup() sets cuDNN's process-wide flags; destroyed, they are put back
  P precision_;
  Capture capture_;
  torch::Device device_{torch::kCPU};
  Network net_{nullptr};
  std::unique_ptr<train::ModelEMA> ema_;
  std::unique_ptr<train::Optimizer> opt_;
  std::unique_ptr<train::LRSchedule> sched_;
  std::unique_ptr<Loader> train_loader_, val_loader_;
  std::unique_ptr<dist::GradReducer> reducer_;         // distributed: gradient all-reduce overlapped with backward
  std::unique_ptr<dist::SyncBatchNormGroup> sync_bn_;  // distributed with sync_bn=true
  static constexpr int64_t stop_check_every = 10;      // distributed: steps between stop agreements
  bool stop_agreed_ = false;
  std::optional<train::Checkpoint> resume_ck_;
  std::filesystem::path run_dir_;
  std::unique_ptr<train::ResultsWriter> results_;
  int accumulate_ = 1;
  int start_epoch_ = 0;
  int epoch_ = 0;
  int64_t batch_in_epoch_ = 0;  // micro-batches consumed in the current epoch
  int64_t skip_batches_ = 0;    // resume inside an epoch: batches already trained
  int64_t ni_ = 0;              // micro-batches since the start of the run
  int64_t last_opt_ni_ = -1;
  int64_t opt_steps_ = 0;
  double best_fitness_ = -1;
  nlohmann::json last_metrics_ = nlohmann::json::object();
  torch::Tensor loss_sum_;  // the epoch's running loss sum (restored by a resume inside the epoch)
  int64_t loss_count_ = 0;
  torch::Tensor batch_items_;      // the last micro-batch's loss parts (StepInfo::batch_loss_items)
  bool is_setup_ = false;
  bool channels_last_ = false;  // cfg.channels_last on a CUDA device
  bool device_state_ = false;   // cuda_graph=step: the optimizer runs on its device state
  train::GradAccumulator grad_acc_;  // cuda_graph=step with accumulation: the window's gradient sums
};

// The blessed compositions (ensmallen style), one process, no profiler, the family's default precision:
// eager; the family's capture region in CUDA graphs (cuda_graph=true); the whole step (cuda_graph=step),
// which is GraphTrainer itself for a family whose loss is not fixed-shape (resolved statically).
template <class F, class P = precision::FamilyDefault>
using EagerTrainer = Trainer<F, P, capture::Eager>;
template <class F, class P = precision::FamilyDefault>
using GraphTrainer = Trainer<F, P, capture::CudaGraph<>>;
template <class F, class P = precision::FamilyDefault>
using StepTrainer = Trainer<F, P, capture::resolve_t<F, capture::CudaGraph<capture::scope::step>>>;

}  // namespace libreyolo

#include <libreyolo/train/trainer_impl.hpp>
