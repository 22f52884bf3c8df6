#pragma once
// Trainer::fit — the epoch loop: progress lines, validation, results files, checkpoints, stop/resume.
#include <libreyolo/train/trainer_impl.hpp>

namespace libreyolo {

// A family's hook (optional): `void on(event::epoch_begin, const EpochInfo&, const TrainConfig&,
// Capture&)`, e.g. to tell the capture policy that the captured computation changes (capture.invalidate).
// A hook of the old name or with other arguments is a compile error, not a hook that never runs.
LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::family_hook_epoch_begin(const EpochInfo& info) {
  using events::detail::any_arg;
  static_assert(!requires(F& f, any_arg a) { f.on_epoch_start(a, a, a); },
                "family hook on_epoch_start(epoch, cfg, capture) is the old form and would be ignored; write "
                "`void on(libreyolo::event::epoch_begin, const EpochInfo&, const TrainConfig&, Capture&)`");
  constexpr bool declared = requires(F& f, any_arg a) { f.on(event::epoch_begin{}, a, a, a); } ||
                            requires(F& f, any_arg a) { f.on(event::epoch_begin{}, a, a); } ||
                            requires(F& f, any_arg a) { f.on(event::epoch_begin{}, a); };
  if constexpr (declared) {
    static_assert(requires(F& f, const EpochInfo& i, const TrainConfig& c, Capture& cap) {
                    f.on(event::epoch_begin{}, i, c, cap);
                  },
                  "family hook on(event::epoch_begin, ...) has the wrong signature; expected "
                  "(const EpochInfo&, const TrainConfig&, Capture&)");
    family_.on(event::epoch_begin{}, info, cfg_, capture_);
  }
}

LIBREYOLO_TRAINER_TEMPLATE
template <class... Callbacks>
TrainResult LIBREYOLO_TRAINER::fit(Callbacks&&... callbacks) {
  // Every callback handles at least one loop event, each with the event's arguments (core/events.hpp).
  static_assert((check_callback<Callbacks>() && ...));
  setup();
  using clock = std::chrono::steady_clock;
  const auto t_run = clock::now();
  TrainResult res;
  res.run_dir = run_dir_;
  bool stop = false;
  bool draining = false;  // a stop is waiting for the end of the current accumulation window
  int epochs_run = 0;
  int completed = start_epoch_;
  for (epoch_ = start_epoch_; epoch_ < cfg_.epochs && !stop; ++epoch_) {
    EpochInfo info{epoch_, cfg_.epochs, {}};
    // The original's EMA restart (ema_restart_decay): a constant decay from the first no-aug epoch on
    // (decided by the epoch alone, so a resumed run gets it too).
    if (ema_ && cfg_.ema_restart_decay > 0 && cfg_.no_aug_epochs > 0 && epoch_ >= cfg_.epochs - cfg_.no_aug_epochs &&
        ema_->constant_decay() != cfg_.ema_restart_decay) {
      ema_->set_constant_decay(cfg_.ema_restart_decay);
      if (is_main()) log::info("EMA restart: constant decay ", cfg_.ema_restart_decay, " from epoch ", epoch_ + 1);
    }
    family_hook_epoch_begin(info);
    (deliver<event::epoch_begin>(callbacks, info), ...);
    events_.raise(event::epoch_begin{}, info);
    net_->train();
    train_loader_->start_epoch(epoch_);
    batch_in_epoch_ = 0;
    for (; skip_batches_ > 0; --skip_batches_, ++batch_in_epoch_) train_loader_->next();  // exact resume
    const int64_t resumed_at = batch_in_epoch_;
    // A resume inside the epoch continues its running loss sum (restored with the position), so the
    // epoch's mean loss (results.json, the log line, StepInfo::loss_items) covers the whole epoch, as unbroken.
    if (resumed_at == 0) {
      loss_sum_ = torch::Tensor();
      loss_count_ = 0;
    }
    const auto t0 = clock::now();
    const int64_t nb = static_cast<int64_t>(train_loader_->num_batches());
    // The epoch's live line (core/progress.hpp): rank 0 only; the rate counts this run's batches.
    std::optional<progress::Bar> bar;
    if (is_main())
      bar.emplace("epoch " + std::to_string(epoch_ + 1) + "/" + std::to_string(cfg_.epochs), nb - resumed_at,
                  cfg_.progress_interval);
    while (train_one_batch()) {
      StepInfo si{epoch_, ni_, opt_steps_, loss_sum_, batch_items_};
      (deliver<event::step_end>(callbacks, si), ...);
      events_.raise(event::step_end{}, si);
      if (bar) bar->update(batch_in_epoch_ - resumed_at, [&] { return progress_tail(); });
      bool profiled = false;
      if constexpr (Profiler::enabled) profiled = cfg_.profile_stop && prof_.finished();
      if (draining || profiled || stop_now() || (cfg_.max_steps > 0 && opt_steps_ >= cfg_.max_steps)) {
        // Stops land on an optimizer-step boundary: a stop inside a gradient-accumulation window first
        // trains the window's remaining micro-batches (their gradients are not in a checkpoint), so
        // resume=true continues exactly. max_steps stops are on a boundary already.
        if (pending_micro_batches() == 0) {
          stop = true;
          break;
        }
        if (!draining)
          log::info("stop requested inside a gradient-accumulation window: training its ",
                    accumulate_ - pending_micro_batches(), " remaining micro-batch(es) first, so the checkpoint is "
                    "at an optimizer step and resume=true continues exactly (a second Ctrl-C quits at once)");
        draining = true;
      }
    }
    if (bar) bar->finish();
    const bool epoch_complete = !stop || batch_in_epoch_ >= nb;
    const int64_t trained_batches = batch_in_epoch_ - resumed_at;
    const double secs = std::chrono::duration<double>(clock::now() - t0).count();
    std::optional<train::ValResult> v;
    const bool last_epoch = epoch_ + 1 == cfg_.epochs;
    if (is_main() && epoch_complete && cfg_.val && ((epoch_ + 1) % cfg_.eval_interval == 0 || last_epoch)) v = validate();
    bool is_best = false;
    if (v) {
      last_metrics_ = v->metrics;
      is_best = v->fitness > best_fitness_;
      if (is_best) best_fitness_ = v->fitness;
    }
    auto mean_loss = loss_count_ ? (loss_sum_ / double(loss_count_)).to(torch::kCPU) : torch::Tensor();
    auto row = epoch_row(epoch_, mean_loss, v ? &*v : nullptr, secs);
    if (!is_main()) {
      // rank 0 validates and writes; the others go on (the next all-reduce waits for it)
    } else if (epoch_complete) {
      results_->add_epoch(row, run_summary());
      if (cfg_.plots) plot::results_png(results_->rows(), run_dir_ / "results.png");  // refreshed each epoch
      ++epoch_;  // the checkpoint records the next epoch to run
      batch_in_epoch_ = 0;
      save_checkpoint(is_best || (!v && best_fitness_ < 0 && last_epoch));
      --epoch_;
    } else {
      save_checkpoint(false);  // mid-epoch: position kept for an exact resume
    }
    ++epochs_run;
    double run_secs = std::chrono::duration<double>(clock::now() - t_run).count();
    double eta = run_secs / epochs_run * (cfg_.epochs - epoch_ - 1);
    std::string losses;
    auto names = family_.loss_names();
    for (size_t i = 0; mean_loss.defined() && i < names.size(); ++i)
      losses += names[i] + " " + trainer_detail::fmt(mean_loss[i].item<double>(), "%.4f") + "  ";
    log::info("epoch ", epoch_ + 1, "/", cfg_.epochs, "  ", trainer_detail::fmt(trained_batches / secs, "%.2f"),
              " it/s  ", losses, v ? v->summary + "  " : "", "lr ", trainer_detail::fmt(opt_->lr(0)),
              "  ", train::format_duration(secs), "  ETA ", train::format_duration(eta),
              epoch_complete ? "" : "  (stopped mid-epoch; resume=true continues here)");
    info.row = row;
    (deliver<event::epoch_end>(callbacks, info), ...);
    events_.raise(event::epoch_end{}, info);
    if (epoch_complete) ++completed;
    // A stop requested during validation or the epoch's last batch: end here, where the checkpoint was
    // just saved, rather than after the first batch of the next epoch (or finish an open window first).
    if (!stop && !draining && epoch_ + 1 < cfg_.epochs && stop_at_epoch_end()) {
      if (pending_micro_batches() == 0) {
        stop = true;
        log::info("stopped at the end of epoch ", epoch_ + 1, "; resume=true continues with epoch ", epoch_ + 2);
      } else {
        draining = true;
        log::info("stop requested: the accumulation window open at the end of epoch ", epoch_ + 1, " is finished first (",
                  accumulate_ - pending_micro_batches(), " micro-batch(es)), so resume=true continues exactly");
      }
    }
  }
  if constexpr (requires { prof_.wait(); }) prof_.wait();  // the profile report finishes before fit returns
  res.best_fitness = best_fitness_;
  res.last_metrics = last_metrics_;
  res.epochs_done = completed;
  res.optimizer_steps = opt_steps_;
  res.interrupted = stop && (train::stop_requested() || stop_agreed_);  // a run that finished all epochs was not
  if constexpr (requires { capture_.step_summary(); })  // cuda_graph=step: the share replayed, VRAM per graph
    if (const auto line = capture_.step_summary(); !line.empty()) log::info(line);
  log::info("done: ", epochs_run, " epoch(s) in ", train::format_duration(
                std::chrono::duration<double>(clock::now() - t_run).count()), "; best fitness ",
            trainer_detail::fmt(best_fitness_), "; results in ", run_dir_.string());
  return res;
}

// A stop request (Ctrl-C, SIGTERM, train::request_stop()) ends the run after this step. Ranks of a
// distributed run must stop after the same step, or one would wait forever in the next all-reduce: they
// agree every stop_check_every steps (one all-reduce of a number), any rank's request stopping all.
LIBREYOLO_TRAINER_TEMPLATE
bool LIBREYOLO_TRAINER::stop_now() {
  if (!dist_) return train::stop_requested();
  if (ni_ % stop_check_every != 0) return false;
  stop_agreed_ = dist_->any(train::stop_requested());
  return stop_agreed_;
}

// At an epoch end (after validation and the checkpoint): whether a stop was requested. A distributed
// run keeps its one agreement point (every stop_check_every steps, in stop_now), so its ranks never
// disagree about where they stopped.
LIBREYOLO_TRAINER_TEMPLATE
bool LIBREYOLO_TRAINER::stop_at_epoch_end() {
  return !dist_ && train::stop_requested();
}

LIBREYOLO_TRAINER_TEMPLATE
nlohmann::json LIBREYOLO_TRAINER::epoch_row(int epoch, const torch::Tensor& mean_loss, const train::ValResult* v,
                                            double secs) const {
  nlohmann::json row = {{"epoch", epoch + 1}, {"time_s", secs}};
  auto names = family_.loss_names();
  for (size_t i = 0; i < names.size(); ++i)
    row["train/" + names[i]] = mean_loss.defined() ? nlohmann::json(mean_loss[i].item<double>()) : nlohmann::json();
  if (v)
    for (auto& [k, x] : v->metrics.items()) row["val/" + k] = x;
  for (size_t g = 0; g < opt_->num_groups(); ++g) row["lr/" + opt_->group(g).name] = opt_->lr(g);
  return row;
}

LIBREYOLO_TRAINER_TEMPLATE
nlohmann::json LIBREYOLO_TRAINER::run_summary() const {
  bool step_graphs = false;  // cuda_graph=step records whole steps in this run (CUDA, a step-capturable family)
  if constexpr (requires { capture_.step_graphs_enabled(); }) step_graphs = capture_.step_graphs_enabled();
  nlohmann::json meta = {{"model", cfg_.model},
                         {"family", std::string(F::name)},
                         {"task", std::string(to_string(family_traits<F>::task))},
                         {"device", device_name(device_)},
                         {"batch", cfg_.batch},
                         {"imgsz", cfg_.imgsz},
                         {"workers", cfg_.workers},
                         {"amp", precision_.used().amp},
                         {"amp_dtype", precision_.used().dtype},
                         {"cuda_graph", capture_active()},  // false after a fallback to eager (e.g. on a CPU)
                         {"cuda_graph_step", step_graphs},
                         {"accumulate", accumulate_},
                         {"torch", compat::torch_version()}};
  return {{"meta", meta},
          {"config", to_json(cfg_)},
          {"precision", precision_.used().to_json()},
          {"capture", capture_.report()},
          {"best_fitness", best_fitness_},
          {"optimizer_steps", opt_steps_}};
}

LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::log_header() const {
  int64_t params = 0;
  for (auto& p : net_->parameters()) params += p.numel();
  auto u = precision_.used();
  log::info("libreyolo train: ", cfg_.model, " (", params, " parameters) on ", device_name(device_), ", ",
            family_.train_set()->size(), " train / ", family_.val_set()->size(), " val images, batch ", cfg_.batch,
            " x accumulate ", accumulate_, ", imgsz ", cfg_.imgsz, ", ", cfg_.optimizer, " lr0 ", cfg_.lr0, " ",
            cfg_.scheduler, ", precision ", u.amp ? "amp " + u.dtype : std::string("fp32"),
            capture_active() ? ", cuda_graph" : "", "; run dir ", run_dir_.string());
}

// Whether CUDA-graph capture can still happen in this run (the policy is CudaGraph and its setup did not
// fall back to eager): what the run header states.
LIBREYOLO_TRAINER_TEMPLATE
bool LIBREYOLO_TRAINER::capture_active() const {
  if constexpr (!Capture::graphs) return false;
  else if constexpr (requires { capture_.enabled(); }) return capture_.enabled();
  else return true;
}

// The end of the epoch's progress line: the running mean of each loss part and the device memory. Runs
// only when a line is drawn (it reads the losses back from the device).
LIBREYOLO_TRAINER_TEMPLATE
std::string LIBREYOLO_TRAINER::progress_tail() const {
  std::string s;
  if (loss_sum_.defined() && loss_count_ > 0) {
    const auto mean = (loss_sum_ / double(loss_count_)).to(torch::kCPU).to(torch::kFloat64);
    const auto names = family_.loss_names();
    for (size_t i = 0; i < names.size() && static_cast<int64_t>(i) < mean.numel(); ++i)
      s += (s.empty() ? "" : "  ") + names[i] + " " + trainer_detail::fmt(mean[static_cast<int64_t>(i)].item<double>(), "%.4f");
  }
  if (device_.is_cuda()) {
    const auto bytes = compat::cuda_reserved(compat::device_index(device_));
    s += (s.empty() ? "" : "  ") + std::string("GPU ") + trainer_detail::fmt(double(bytes) / (1 << 30), "%.2f") + "G";
  }
  return s;
}

#undef LIBREYOLO_TRAINER
#undef LIBREYOLO_TRAINER_TEMPLATE

}  // namespace libreyolo
