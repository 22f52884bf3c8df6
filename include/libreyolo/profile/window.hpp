#pragma once
// Window<Warmup, Active>: profiles a window of real training steps inside a normal run (SPEC §2.1).
// Warm-up steps are discarded; the first half of the window runs unsynchronised (real overlap, used
// for the verdict, and untraced), the second half synchronises the device around each phase and its
// last steps run under the kernel tracer (composition, busy time). After the last window step it
// analyses, prints the report, writes the four artifacts and detaches;
// training continues and every later call is a no-op. Distributed runs: one log line, never attaches.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/collector.hpp>
#include <libreyolo/profile/policy.hpp>
#include <libreyolo/profile/report_text.hpp>
#include <libreyolo/profile/writers.hpp>

#include <ATen/record_function.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

namespace libreyolo::profile {

// Window sizes after rounding up to whole optimizer steps (SPEC: with accumulation, warm-up and window
// round up to multiples of the accumulation count). The unsynchronised half gets the larger share of
// whole optimizer steps when there are at least two, otherwise the first ceil(active/2) micro-steps.
// The traced steps (the last ones of the synchronised half; `traced` 0 = all of it) round up to whole
// optimizer steps too, so their per-step figures hold the optimizer's share once per optimizer step.
struct WindowPlan {
  int warmup = 0, active = 0, unsynced = 0, traced = 0;
};
inline int round_up_to(int v, int multiple) { return (v + multiple - 1) / multiple * multiple; }
inline WindowPlan plan_window(int warmup, int active, int accumulate, int traced = 0) {
  const int acc = std::max(1, accumulate);
  WindowPlan p{round_up_to(warmup, acc), round_up_to(active, acc), 0, 0};
  const int optimizer_steps = p.active / acc;
  p.unsynced = optimizer_steps >= 2 ? acc * ((optimizer_steps + 1) / 2) : p.active - p.active / 2;
  const int synced = p.active - p.unsynced;
  p.traced = traced > 0 ? std::min(round_up_to(traced, acc), synced) : synced;
  return p;
}

template <int Warmup = 5, int Active = 20>
class Window {
  static_assert(Warmup >= 0, "Window: Warmup must be >= 0");
  static_assert(Active >= 2, "Window: Active must be >= 2 (one unsynchronised and one synchronised step)");

 public:
  static constexpr bool enabled = true;
  static constexpr int default_warmup = Warmup;
  static constexpr int default_active = Active;
  // The config key profile_trace_steps has the same default. Two, because the tracer is the window's
  // main cost: on the H200 each traced step costs ~12 ms more than an untraced one for ResNet-18 (b16)
  // and ~40-80 ms for YOLOv9-t (b8), and the read-out grows with the operators recorded (RESULTS.md, session 6).
  static constexpr int default_traced = 2;

  // RAII range around one phase: synchronises first and last in synced steps, emits "phase/<name>".
  class Scope {
   public:
    Scope() = default;
    Scope(Window* w, Phase p) : w_(w), phase_(p) {
      if (w_->current_synced_) compat::cuda_synchronize(w_->ctx_.device);
      range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
      if (range_->isActive()) range_->before(phase_range_name(p));
      start_ = host_now_ns();
    }
    Scope(Scope&& o) noexcept : w_(std::exchange(o.w_, nullptr)), phase_(o.phase_), start_(o.start_), range_(std::move(o.range_)) {}
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    ~Scope() {
      if (!w_) return;
      if (w_->current_synced_) compat::cuda_synchronize(w_->ctx_.device);
      const int64_t end = host_now_ns();
      range_.reset();  // ends the traced range
      w_->record_phase(phase_, start_, end);
    }

   private:
    Window* w_ = nullptr;
    Phase phase_ = Phase::dataload;
    int64_t start_ = 0;
    std::unique_ptr<at::RecordFunction> range_;
  };

  Window() = default;
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;
  ~Window() {
    wait();
    collector_.reset();  // after the report thread: a trace it never read out is stopped here
    if (state_ == State::measuring)
      log::info("profile: training ended after ", rec_.steps.size(), " of ", plan_.active,
                " window steps; no profile was written");
  }

  // Overrides the compile-time window (the trainer's `profile_warmup` / `profile_steps` style keys).
  void set_window(int warmup, int active) {
    if (warmup < 0) throw ConfigError("profile: warmup=" + std::to_string(warmup) + " is invalid; allowed: >= 0 steps");
    if (active < 2)
      throw ConfigError("profile: active=" + std::to_string(active) +
                        " is invalid; allowed: >= 2 measured steps (one unsynchronised, one synchronised)");
    if (state_ != State::detached) throw ConfigError("profile: set_window() must be called before attach()");
    warmup_req_ = warmup, active_req_ = active;
  }
  // How many of the synchronised steps run under the kernel tracer: the last `n` of them (0 = all),
  // rounded up to whole optimizer steps under accumulation. Fewer traced steps cost the run less.
  void set_traced_steps(int n) {
    if (n < 0) throw ConfigError("profile: traced steps=" + std::to_string(n) + " is invalid; allowed: >= 0 (0 = every synchronised step)");
    if (state_ != State::detached) throw ConfigError("profile: set_traced_steps() must be called before attach()");
    traced_req_ = n;
  }

  // Where Kineto's stop and read-out run at the window's end: on the report thread while training goes
  // on (the default), or on the training thread before it continues (`false`; for comparisons, and
  // always for runs that replay CUDA graphs).
  void set_background_readout(bool on) {
    if (state_ != State::detached) throw ConfigError("profile: set_background_readout() must be called before attach()");
    background_readout_ = on;
  }

  // After attach(): whether this run's read-out goes to the report thread (false for graph runs).
  bool background_readout() const { return collector_ ? collector_->background_readout() : background_readout_; }

  void attach(const RunContext& ctx) {
    if (state_ != State::detached) return;
    if (ctx.distributed) {
      log::info("profile=true ignored in distributed training (the profiler measures single-process runs only)");
      state_ = State::done;
      return;
    }
    ctx_ = ctx;
    plan_ = plan_window(warmup_req_, active_req_, ctx.accumulate, traced_req_);
    // Graph runs read the trace out on the training thread: on the H200 a YOLOv9-t cuda_graph run whose
    // read-out ran on the report thread while graphs replayed crashed (SIGSEGV) in its next epoch.
    collector_ = std::make_unique<Collector>(ctx.device, /*teardown_cupti=*/true, background_readout_ && !ctx.graphs);
    state_ = State::warming;
    log::info("profile: measuring ", plan_.active, " steps (", plan_.unsynced, " unsynchronised, ",
              plan_.active - plan_.unsynced, " synchronised", collector_->can_trace() ? " and traced" : "", ") after ",
              plan_.warmup, " warm-up steps",
              collector_->can_trace() ? "" : "; no GPU kernel trace in this build/device (host timings only)");
  }

  void step_begin() {
    if (state_ != State::warming && state_ != State::measuring) return;
    if (in_step_) {
      // The previous step never ended (the loader ran dry at the end of an epoch): forget its phases
      // and do not count it, so every recorded step holds the five phases of one real step.
      const int abandoned = static_cast<int>(rec_.steps.size());
      std::erase_if(rec_.phases, [&](const PhaseSpan& p) { return p.step == abandoned; });
      in_step_ = false;
      --step_;
    }
    ++step_;
    if (step_ == plan_.warmup) {
      state_ = State::measuring;
      rec_ = WindowRecord{};
      collector_->begin_window();
    }
    if (state_ != State::measuring) return;
    current_synced_ = (step_ - plan_.warmup) >= plan_.unsynced;
    // The tracer covers the synchronised half only: it slows every operator it records, so the
    // unsynchronised steps (the real step time of the verdict) are timed without it. It is set up and
    // attached here, before this step's clock starts (see Collector::start_trace).
    if (step_ - plan_.warmup == plan_.active - plan_.traced) {
      rec_.traced_from = static_cast<int>(rec_.steps.size());
      collector_->start_trace();
    }
    if (current_synced_) compat::cuda_synchronize(ctx_.device);
    step_start_ = host_now_ns();
    in_step_ = true;
  }

  Scope phase(Phase p) {
    if (state_ != State::measuring || !in_step_) return Scope{};
    return Scope(this, p);
  }

  void step_end(int batch_images) {
    if (state_ != State::measuring || !in_step_) return;
    in_step_ = false;
    rec_.steps.push_back({step_start_, host_now_ns(), current_synced_, batch_images});
    if (static_cast<int>(rec_.steps.size()) == plan_.active) finish();
  }

  // True once the window has closed (the report may still be being written in the background).
  bool finished() const { return state_ == State::done; }
  // Blocks until the report and the artifacts are written (the accessors below call it).
  void wait() const {
    if (reporter_.joinable()) reporter_.join();
  }
  // Whether the artifacts were written (false in distributed runs or when writing failed).
  bool produced() const {
    wait();
    return produced_;
  }
  const WindowPlan& plan() const { return plan_; }
  const WindowRecord& record() const {
    wait();
    return rec_;
  }
  const std::optional<Analysis>& analysis() const {
    wait();
    return analysis_;
  }

 private:
  enum class State { detached, warming, measuring, done };

  static std::string fixed_ms(double ms) {
    std::ostringstream o;
    o.setf(std::ios::fixed);
    o.precision(1);
    o << ms << " ms";
    return o.str();
  }

  void record_phase(Phase p, int64_t start, int64_t end) {
    rec_.phases.push_back({static_cast<int>(rec_.steps.size()), p, start, end, current_synced_});
  }

  // The tracer is detached on the training thread; its read-out, the analysis, report and artifacts run
  // on a background thread so the training loop continues at once (the window's cost is its steps).
  void finish() {
    collector_->stop(rec_);
    rec_.warmup = plan_.warmup;
    rec_.meta = ctx_.meta;
    state_ = State::done;
    reporter_ = std::thread([this] { report(); });
  }

  void report() {
    collector_->convert(rec_);
    analysis_ = analyse(rec_);
    if (rec_.trace_collected)
      log::info("profile: tracer cost outside the measured steps: set-up ", fixed_ms(rec_.tracer_setup_ms), ", attach ",
                fixed_ms(rec_.tracer_start_ms),
                background_readout() ? ", detach " + fixed_ms(rec_.tracer_detach_ms) + " on the training thread; stop and read-out " +
                                           fixed_ms(rec_.tracer_readout_ms) + ", event conversion "
                                     : ", stop and read-out " + fixed_ms(rec_.tracer_readout_ms) +
                                           " on the training thread; event conversion ",
                fixed_ms(rec_.tracer_convert_ms), " in the background (", rec_.gpu.size(), " device events from ",
                analysis_->traced_steps, " traced steps)");
    const auto doc = profile_json(*analysis_);
    std::istringstream lines(summary_text(doc));
    for (std::string line; std::getline(lines, line);) log::info("profile: ", line);
    try {
      write_artifacts(ctx_.run_dir, rec_, *analysis_);
      produced_ = true;
      log::info("profile: wrote timeline.html, profile_trace.json, profile_summary.json, profile.json to ",
                ctx_.run_dir.string(), "; training continues");
    } catch (const std::exception& e) {
      log::warn("profile: could not write the artifacts (", e.what(), "); training continues");
    }
  }

  int warmup_req_ = Warmup, active_req_ = Active, traced_req_ = default_traced;
  bool background_readout_ = true;
  WindowPlan plan_;
  State state_ = State::detached;
  RunContext ctx_;
  std::unique_ptr<Collector> collector_;
  WindowRecord rec_;
  std::optional<Analysis> analysis_;
  int step_ = -1;
  bool in_step_ = false, current_synced_ = false, produced_ = false;
  int64_t step_start_ = 0;
  mutable std::thread reporter_;
};

static_assert(ProfilerPolicy<Window<>>);

}  // namespace libreyolo::profile
