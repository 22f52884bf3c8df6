#pragma once
// Trainer::fit — the epoch loop (train_epoch, end_epoch, the stop protocol: stop_after_step and
// stop_after_epoch, finish): progress lines, validation, results files, checkpoints, stop/resume.
#include <libreyolo/train/trainer_impl.hpp>

#include <unordered_set>

namespace libreyolo {

// The family's epoch hook (member::epoch_hook, checked in train/members.hpp): its recipe step at an
// epoch's start, e.g. YOLOX's L1 switch (capture.invalidate) or D-FINE's EMA restart.
LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::family_hook_epoch_begin(const EpochInfo& info) {
  if constexpr (member::declares<F, member::epoch_hook>) {
    train::EpochContext<Capture> ctx{capture_, ema_.get(), is_main()};
    family_.on(event::epoch_begin{}, info, cfg_, ctx);
  }
}

LIBREYOLO_TRAINER_TEMPLATE
template <class... Callbacks>
TrainResult LIBREYOLO_TRAINER::fit(Callbacks&&... callbacks) {
  // Every callback handles at least one loop event, each with the event's arguments (core/events.hpp).
  static_assert((check_callback<Callbacks>() && ...));
  setup();
  FitState st;
  st.t_run = std::chrono::steady_clock::now();
  st.completed = start_epoch_;
  for (epoch_ = start_epoch_; epoch_ < cfg_.epochs && !st.stop; ++epoch_) {
    EpochInfo info{epoch_, cfg_.epochs, {}};
    family_hook_epoch_begin(info);
    (deliver<event::epoch_begin>(callbacks, info), ...);
    events_.raise(event::epoch_begin{}, info);
    const EpochRun run = train_epoch(st, callbacks...);
    end_epoch(info, run, st);
    (deliver<event::epoch_end>(callbacks, info), ...);
    events_.raise(event::epoch_end{}, info);
    stop_after_epoch(st);
  }
  return finish(st);
}

// One epoch's batches, from its resume position (exact: the loader skips the trained batches) until the
// loader ends or the stop protocol (stop_after_step) ends it on an optimizer-step boundary.
LIBREYOLO_TRAINER_TEMPLATE
template <class... Callbacks>
typename LIBREYOLO_TRAINER::EpochRun LIBREYOLO_TRAINER::train_epoch(FitState& st, Callbacks&... callbacks) {
  net_->train();
  train_loader_->start_epoch(epoch_);
  batch_in_epoch_ = 0;
  for (; skip_batches_ > 0; --skip_batches_, ++batch_in_epoch_) train_loader_->next();  // exact resume
  EpochRun run;
  run.resumed_at = batch_in_epoch_;
  // A resume inside the epoch continues its running loss sum (restored with the position), so the
  // epoch's mean loss (results.json, the log line, StepInfo::loss_items) covers the whole epoch, as unbroken.
  if (run.resumed_at == 0) {
    loss_sum_ = torch::Tensor();
    loss_count_ = 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  run.batches = static_cast<int64_t>(train_loader_->num_batches());
  // The epoch's live line (core/progress.hpp): rank 0 only; the rate counts this run's batches.
  std::optional<progress::Bar> bar;
  if (is_main())
    bar.emplace("epoch " + std::to_string(epoch_ + 1) + "/" + std::to_string(cfg_.epochs), run.batches - run.resumed_at,
                cfg_.progress_interval);
  while (train_one_batch()) {
    StepInfo si{epoch_, ni_, opt_steps_, loss_sum_, batch_items_};
    (deliver<event::step_end>(callbacks, si), ...);
    events_.raise(event::step_end{}, si);
    if (bar) bar->update(batch_in_epoch_ - run.resumed_at, [&] { return progress_tail(); });
    if (stop_after_step(st)) break;
  }
  if (bar) bar->finish();
  run.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

// The stop protocol inside an epoch: a stop request, a finished profile (profile_stop) or max_steps ends
// the epoch after this step. Stops land on an optimizer-step boundary: a stop inside a gradient-
// accumulation window first trains the window's remaining micro-batches (their gradients are not in a
// checkpoint), so resume=true continues exactly. max_steps stops are on a boundary already.
LIBREYOLO_TRAINER_TEMPLATE
bool LIBREYOLO_TRAINER::stop_after_step(FitState& st) {
  bool profiled = false;
  if constexpr (Profiler::enabled) profiled = cfg_.profile_stop && prof_.finished();
  if (!(st.draining || profiled || stop_now() || (cfg_.max_steps > 0 && opt_steps_ >= cfg_.max_steps))) return false;
  if (pending_micro_batches() == 0) {
    st.stop = true;
    return true;
  }
  if (!st.draining)
    log::info("stop requested inside a gradient-accumulation window: training its ", window_remaining(),
              " remaining micro-batch(es) first, so the checkpoint is at an optimizer step and resume=true continues "
              "exactly (a second Ctrl-C quits at once)");
  st.draining = true;
  return false;
}

// After an epoch's batches: validation (rank 0, every eval_interval epochs and the last), the results
// row and files, the checkpoint (the next epoch's position when the epoch completed, else the mid-epoch
// position), the epoch's log line; `info.row` gets the results row.
LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::end_epoch(EpochInfo& info, const EpochRun& run, FitState& st) {
  const bool epoch_complete = !st.stop || batch_in_epoch_ >= run.batches;
  const int64_t trained_batches = batch_in_epoch_ - run.resumed_at;
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
  auto row = epoch_row(epoch_, mean_loss, v ? &*v : nullptr, run.secs);
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
  ++st.epochs_run;
  const double run_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.t_run).count();
  const double eta = run_secs / st.epochs_run * (cfg_.epochs - epoch_ - 1);
  std::string losses;
  auto names = family_.loss_names();
  for (size_t i = 0; mean_loss.defined() && i < names.size(); ++i)
    losses += names[i] + " " + trainer_detail::fmt(mean_loss[i].item<double>(), "%.4f") + "  ";
  log::info("epoch ", epoch_ + 1, "/", cfg_.epochs, "  ", trainer_detail::fmt(trained_batches / run.secs, "%.2f"),
            " it/s  ", losses, v ? v->summary + "  " : "", "lr ", trainer_detail::fmt(opt_->lr(0)), "  ",
            train::format_duration(run.secs), "  ETA ", train::format_duration(eta),
            epoch_complete ? "" : "  (stopped mid-epoch; resume=true continues here)");
  info.row = row;
  if (epoch_complete) ++st.completed;
}

// The stop protocol at an epoch's end: a stop requested during validation or the epoch's last batch ends
// here, where the checkpoint was just saved, rather than after the first batch of the next epoch. No
// accumulation window is open here: windows end with their epoch (train/accumulation.hpp).
LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::stop_after_epoch(FitState& st) {
  if (st.stop || st.draining || epoch_ + 1 >= cfg_.epochs || !stop_at_epoch_end()) return;
  st.stop = true;
  log::info("stopped at the end of epoch ", epoch_ + 1, "; resume=true continues with epoch ", epoch_ + 2);
}

// The end of fit: the profile report written, the run's result and its closing lines.
LIBREYOLO_TRAINER_TEMPLATE
TrainResult LIBREYOLO_TRAINER::finish(const FitState& st) {
  prof_.wait();  // the profile report finishes before fit returns
  TrainResult res;
  res.run_dir = run_dir_;
  res.best_fitness = best_fitness_;
  res.last_metrics = last_metrics_;
  res.epochs_done = st.completed;
  res.optimizer_steps = opt_steps_;
  res.interrupted = st.stop && (train::stop_requested() || stop_agreed_);  // a run that finished all epochs was not
  if constexpr (Capture::whole_step)  // cuda_graph=step: the share replayed, VRAM per graph
    if (const auto line = capture_.step_summary(); !line.empty()) log::info(line);
  log::info("done: ", st.epochs_run, " epoch(s) in ", train::format_duration(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - st.t_run).count()), "; best fitness ",
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
  if constexpr (Capture::whole_step) step_graphs = capture_.step_graphs_enabled();
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
  std::unordered_set<const void*> seen;  // each tensor once (a module shared by several parents: DEIMv2's box head)
  for (auto& p : net_->parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) params += p.numel();
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
  else return capture_.enabled();
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
