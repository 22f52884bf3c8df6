#pragma once
// Definitions of Trainer's members (ensmallen's x.hpp / x_impl.hpp split).
#include <libreyolo/io/original.hpp>
#include <libreyolo/train/trainer.hpp>

#include <cstdio>

namespace libreyolo {

#define LIBREYOLO_TRAINER_TEMPLATE                                                                     \
  template <train::FamilyPolicy F, precision::PrecisionPolicy P, capture::CapturePolicy C, profile::ProfilerPolicy Prof, \
            capture::Mode M>
#define LIBREYOLO_TRAINER Trainer<F, P, C, Prof, M>

namespace trainer_detail {
inline const char* ckpt_format = io::kTrainerCheckpointFormat;
inline std::string fmt(double x, const char* f = "%.4g") {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}
}  // namespace trainer_detail

// Resume: the saved config comes back, and only what the user set explicitly now overrides it.
// Then the family's overrides fill the keys nobody set.
LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::resolve_config() {
  if (cfg_.resume) {
    run_dir_ = train::prepare_run_dir(cfg_);
    const auto from = train::resume_checkpoint(run_dir_);
    resume_ck_ = train::load_checkpoint(from);
    if (from.filename() == "best.ckpt")
      log::warn("resume: ", (run_dir_ / "weights" / "last.ckpt").string(),
                std::filesystem::exists(run_dir_ / "weights" / "last.ckpt") ? " is older than best.ckpt (its last write did not complete)"
                                                                             : " is missing (its first write did not complete)",
                "; resuming from ", from.string(), ", which holds the full state of the newest saved position");
    const std::string where = "checkpoint " + resume_ck_->source.string();
    TrainConfig merged;
    try {
      const auto& meta = resume_ck_->meta;
      if (!meta.contains("config") || !meta.at("config").is_object())
        throw CheckpointError(where + ": the 'config' object is missing from its metadata");
      merged = from_json(meta.at("config"));
      merged.explicit_keys = meta.value("explicit_keys", std::set<std::string>{});
    } catch (const ConfigError& e) {
      throw CheckpointError(where + ": " + e.what());
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError(where + ": a metadata field is missing or has the wrong type (" + e.what() + ")");
    }
    // Inside an epoch the position is counted in batches: another batch size would continue at
    // another image (skipping or repeating some), so it is refused. At an epoch's end any batch is fine.
    // (workers and imgsz keep the position: the order and each sample's randomness do not depend on them.)
    const auto& st0 = resume_ck_->meta.value("state", nlohmann::json::object());
    const auto state_int = [&](const char* key) {
      return st0.is_object() && st0.contains(key) && st0[key].is_number_integer() ? st0[key].get<int64_t>() : int64_t{0};
    };
    const int64_t in_epoch = state_int("batch_in_epoch");
    if (in_epoch > 0 && cfg_.explicit_keys.count("batch") && cfg_.batch != merged.batch)
      throw ConfigError("resume=true: the run in " + run_dir_.string() + " stopped inside epoch " +
                        std::to_string(state_int("epoch") + 1) + " after " + std::to_string(in_epoch) +
                        " batches of batch=" + std::to_string(merged.batch) + " (" + std::to_string(in_epoch * merged.batch) +
                        " images); batch=" + std::to_string(cfg_.batch) +
                        " would not continue at that image, so images would be skipped or repeated; resume with batch=" +
                        std::to_string(merged.batch) + " (or without batch=), or start a new run with weights=" +
                        from.string());
    auto user = to_json(cfg_);
    for (auto& k : cfg_.explicit_keys) {
      auto& v = user[k];
      set_key(merged, k, v.is_null() ? "" : v.is_string() ? v.get<std::string>() : v.dump());
    }
    cfg_ = merged;
    // A finished run has nothing to resume: say so rather than train 0 epochs and report success.
    const auto& st = st0;
    if (st.is_object() && st.contains("epoch") && st["epoch"].is_number_integer() &&
        st["epoch"].get<int64_t>() >= cfg_.epochs && st.value("batch_in_epoch", nlohmann::json(0)) == 0)
      throw ConfigError("resume=true: the run in " + run_dir_.string() + " already finished all " +
                        std::to_string(cfg_.epochs) + " epochs; nothing to resume (start a new run, e.g. with weights=" +
                        (run_dir_ / "weights" / "best.ckpt").string() + ", or give a larger epochs=)");
  }
  train::apply_family_overrides(family_, cfg_);
  if (cfg_.model.empty()) {  // a hand-composed trainer: the family's own name
    cfg_.model = std::string(F::name);
    if constexpr (member::declares<F, member::size>) cfg_.model += family_.size();
  }
  // The EMA restart is a recipe step of the families that declare it (their epoch hook applies it).
  if constexpr (!member::declares<F, member::ema_restart>)
    if (cfg_.ema_restart_decay > 0)
      log::notice_once("trainer.ema_restart." + std::string(F::name),
                       "ema_restart_decay=" + trainer_detail::fmt(cfg_.ema_restart_decay) + " ignored: " +
                           std::string(F::name) + " has no EMA restart in its recipe (traits members: member::ema_restart)");
  accumulate_ = cfg_.accumulate();  // batch=-1 is resolved in build(), which sets it again
}

LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::setup() {
  if (is_setup_) return;
  resolve_config();
  torch::manual_seed(static_cast<uint64_t>(cfg_.seed));
  if constexpr (distributed) {
    const auto env = dist::env_from_environment();
    device_ = resolve_device(dist::rank_device_spec(cfg_.device, env.local_rank, compat::cuda_available()));
    compat::set_cuda_device(device_);
    train::require_batch_for_world(cfg_.batch, env.world_size);
    if (cfg_.batch % env.world_size != 0)
      throw ConfigError("batch=" + std::to_string(cfg_.batch) + " is the global batch and must divide by the " +
                        std::to_string(env.world_size) + " ranks");
    dist_ = std::make_unique<dist::Context>(env, device_);
    if (!dist_->is_main()) log::set_level(log::Level::warn);  // only rank 0 logs
    profile::resolve<Prof, M>::notice();
  } else {
    device_ = resolve_device(cfg_.device);
    if (cfg_.sync_bn)
      log::notice_once("trainer.sync_bn", "sync_bn=true ignored: a single process already normalises over its whole batch");
  }
  cudnn_scope_ = std::make_unique<CudnnScope>();  // the flags below are the process's: put back when this trainer goes
  if (cfg_.deterministic) {
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  } else if (device_.is_cuda()) {
    std::string why;
    at::globalContext().setBenchmarkCuDNN(cudnn_autotune(cfg_, &why));
    if (!why.empty()) log::notice_once("trainer.cudnn_multi_scale", why);
  }
  if (device_.is_cuda())
    if (const std::string why = set_cudnn_heuristic(cfg_.cudnn_heuristic); !why.empty())
      log::notice_once("trainer.cudnn_heuristic", why);
  channels_last_ = cfg_.channels_last && device_.is_cuda();
  if (resume_ck_) {
    try {
      family_.restore(resume_ck_->meta.at("family"));
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError("checkpoint " + resume_ck_->source.string() + ": its 'family' metadata is missing or has "
                            "the wrong type (" + e.what() + ")");
    }
  }
  family_.setup(cfg_);
  build();
  if (resume_ck_) {
    restore(*resume_ck_, /*full=*/true);
    resume_ck_.reset();
  } else if (!cfg_.weights.empty()) {
    restore(io::load_any_checkpoint(cfg_.weights), /*full=*/false);
  }
  if (is_main()) {  // other ranks write nothing
    if (run_dir_.empty()) run_dir_ = train::prepare_run_dir(cfg_);
    if (const int n = train::remove_stale_temp_files(run_dir_ / "weights"))
      log::info("removed ", n, " temporary checkpoint file(s) left by an earlier run that was killed while saving");
    if (!results_) results_ = std::make_unique<train::ResultsWriter>(run_dir_);
    train::write_text_atomic(run_dir_ / "args.json", to_json(cfg_).dump(2) + "\n");
    // labels.png: what the training split holds (the task draws it).
    if constexpr (member::declares<F, member::plots>)
      if (cfg_.plots && plot::usable()) family_.plot_labels(run_dir_ / "labels.png");
  }
  capture::resolve<F, C, M>::notice(cfg_);
  if constexpr (Profiler::enabled) {
    profile::RunContext ctx{run_dir_, run_summary()["meta"], device_, accumulate_, M == capture::Mode::distributed,
                            Capture::graphs && device_.is_cuda()};
    prof_.attach(ctx);
  }
  is_setup_ = true;
  log_header();
}

LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::build() {
  net_ = family_.make_network();
  net_->to(device_);
  if (channels_last_) to_channels_last(*net_);
  if (dist_) dist_->broadcast_module(*net_);  // every rank starts from rank 0's weights
  if (cfg_.ema) make_ema();
  if (cfg_.batch == -1) {  // after the EMA copy, so the measured steps hold it too
    cfg_.batch = auto_batch();
    accumulate_ = cfg_.accumulate();
  }
  data::LoaderOptions lo;
  lo.batch = dist_ ? cfg_.batch / dist_->world() : cfg_.batch;  // batch is global: split over the ranks
  if (dist_) lo.rank = dist_->rank(), lo.world = dist_->world();
  lo.workers = cfg_.workers;
  lo.seed = static_cast<uint64_t>(cfg_.seed);
  lo.pin_memory = device_.is_cuda();
  // The originals drop each epoch's last partial batch whenever this rank sees at least one full batch
  // (data/dataset.py:790-803 create_dataloader, drop_last = visible_samples >= batch_size; the D-FINE line's
  // loaders drop_last=True, models/dfine/trainer.py:382-390, models/deim/trainer.py:405-413). A split smaller
  // than one batch trains as one short batch, as theirs does. Distributed, each rank's share leaves out the epoch
  // order's last size % world images, as their DistributedSampler(drop_last=len(train_dataset) >= world_size)
  // does (training/trainer.py:566-572). (The loader's drop_single, which left out a lone last image, has nothing
  // left to do here: with drop_last a tail never trains, and without it the split is one batch.)
  {
    const auto train_set = family_.train_set();
    lo.shard_drop_tail = true;
    lo.drop_last = Loader::share_size(train_set->size(), lo.world, lo.shard_drop_tail) >= static_cast<size_t>(lo.batch);
    train_loader_ = std::make_unique<Loader>(train_set, lo);
  }
  lo.shuffle = false;
  lo.drop_last = false;
  lo.shard_drop_tail = false;
  lo.rank = 0, lo.world = 1;  // validation runs on rank 0 over the whole split
  lo.batch = cfg_.batch * 2;
  val_loader_ = std::make_unique<Loader>(family_.val_set(), lo);
  // The weight decay as given, with or without a nominal batch (the original never scales it to nbs).
  const double wd = cfg_.weight_decay;
  // The family's parameter groups (e.g. a backbone at a fraction of the LR) and optimizer options.
  opt_ = train::family_optimizer(family_, *net_, cfg_, wd);
  // The schedule advances once per optimizer step, as the original's does under accumulation.
  auto so = train::schedule_options(cfg_, static_cast<int64_t>(train_loader_->num_batches()), accumulate_,
                                    opt_->options().momentum);
  // Only a flat_epochs the user gave: a family recipe's (DEIMv2 sets one per size) under a scheduler the user
  // chose is the recipe's, not a setting of theirs that goes unread.
  if (so.flat_epochs >= 0 && so.kind != train::ScheduleKind::deimv2_flat_cosine && cfg_.is_explicit("flat_epochs"))
    log::notice_once("schedule.flat_epochs", "flat_epochs=" + std::to_string(so.flat_epochs) + " is read by scheduler=deimv2_flat_cosine "
                     "only; scheduler=" + cfg_.scheduler + " does not use it");
  if (so.kind != train::ScheduleKind::step && cfg_.is_explicit("lr_drop"))
    log::notice_once("schedule.lr_drop", "lr_drop=" + std::to_string(so.lr_drop) + " is read by scheduler=step only; scheduler=" +
                     cfg_.scheduler + " does not use it");
  sched_ = std::make_unique<train::LRSchedule>(so);
  sched_->apply(*opt_, 0);
  // Training keeps autocast's cast cache on under every capture policy, so a graph run computes what eager
  // computes (a weight used twice, e.g. a box head shared by the decoder layers, is cast once and its gradients
  // meet in half precision); the recordings empty the cache at their edges (capture/graphed_callable.hpp,
  // capture/step_graph.hpp). Inference graphs (facade.hpp) still switch it off.
  precision_.setup(cfg_, device_, family_traits<F>::amp_default);
  // An explicit amp=true over a float32 family default: once, the reason the family defaults to float32.
  if (const auto n = precision::fp32_family_override(cfg_, F::name, family_traits<F>::amp_default,
                                                     family_traits<F>::fp32_reason); !n.empty())
    log::notice_once("precision.family_fp32." + std::string(F::name), n);
  capture_.setup(cfg_, device_);
  if (dist_) {
    reducer_ = std::make_unique<dist::GradReducer>(*dist_, opt_->params());
    if (cfg_.sync_bn) sync_bn_ = std::make_unique<dist::SyncBatchNormGroup>(*dist_);
    log::info("distributed: rank ", dist_->rank(), " of ", dist_->world(), " on ", device_name(device_), " (",
              dist_->backend_name(), "), ", cfg_.batch / dist_->world(), " images per rank, ",
              reducer_->num_buckets(), " gradient buckets overlapped with backward",
              cfg_.sync_bn ? ", SyncBatchNorm" : "");
  }
}

// full = resume (everything); otherwise initial weights only (EMA weights preferred when present).
// Every restored counter is checked against this run's configuration first (a crafted or damaged
// file must not hang the resume or train "epoch -4/2").
LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::restore(const train::Checkpoint& ck, bool full) {
  const std::string where = "checkpoint " + (ck.source.empty() ? std::string("(in memory)") : ck.source.string());
  const auto text = [&](const char* key) {
    return ck.meta.contains(key) && ck.meta.at(key).is_string() ? ck.meta.at(key).get<std::string>() : std::string{};
  };
  const auto fam = text("family_name");
  if (text("format") != trainer_detail::ckpt_format || fam != F::name)
    throw CheckpointError(where + " is from family '" + (fam.empty() ? "unknown" : fam) + "', but this trainer trains '" +
                          std::string(F::name) + "'; give weights= a checkpoint of the same family");
  bool has_ema = ck.tensors.count("ema.__present__") > 0;
  if (!full) {
    // Another class count (a checkpoint of another data set): what matches is loaded and the class-dependent
    // tensors keep this network's initialisation, as the original's _rebuild_for_new_classes does.
    const auto fresh = train::get_module_state_new_classes(ck, has_ema ? "ema." : "model.", *net_);
    if (ema_) make_ema();  // the average starts from the loaded weights
    log::info("weights: loaded ", has_ema ? "EMA" : "model", " weights from ", cfg_.weights);
    if (!fresh.empty()) {
      const auto nc = train::detail::family_classes(ck);
      const std::string was = nc ? std::to_string(*nc) + " classes" : std::string("another class count");
      std::string names;
      for (size_t i = 0; i < fresh.size() && i < 4; ++i) names += (i ? ", " : "") + fresh[i];
      if (fresh.size() > 4) names += ", ...";
      log::info("weights: the checkpoint was trained for ", was, ", this run for ", family_.num_classes(), " classes: its ",
                fresh.size(), " class-dependent tensors (", names, ") start from this network's initialisation, the rest "
                "from the checkpoint (the original's _rebuild_for_new_classes)");
    }
    return;
  }
  if (!ck.meta.contains("state") || !ck.meta.at("state").is_object())
    throw CheckpointError(where + ": the 'state' object (epoch, batch position, counters) is missing from its metadata");
  const auto& st = ck.meta.at("state");
  const auto counter = [&](const char* key, int64_t lo, int64_t hi, const std::string& why) {
    if (!st.contains(key) || !st.at(key).is_number_integer())
      throw CheckpointError(where + ": state." + key + " is missing or not an integer");
    const auto v = st.at(key).get<int64_t>();
    if (v < lo || v > hi)
      throw CheckpointError(where + ": state." + key + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) +
                            ", " + std::to_string(hi) + "] (" + why + "); the file is damaged or not from this run");
    return v;
  };
  const auto nb = static_cast<int64_t>(train_loader_->num_batches());
  const int64_t epoch = counter("epoch", 0, cfg_.epochs, "epochs=" + std::to_string(cfg_.epochs));
  const int64_t batch = counter("batch_in_epoch", 0, epoch < cfg_.epochs ? nb - 1 : 0,
                                std::to_string(nb) + " batches per epoch");
  constexpr int64_t big = int64_t{1} << 52;
  const int64_t iteration = counter("iteration", 0, big, "micro-batches so far");
  const int64_t last_opt = counter("last_opt_iteration", -1, iteration - 1, "before state.iteration");
  const int64_t steps = counter("optimizer_steps", 0, iteration, "at most one per micro-batch");
  if (!st.contains("best_fitness") || !st.at("best_fitness").is_number() ||
      !std::isfinite(st.at("best_fitness").get<double>()))
    throw CheckpointError(where + ": state.best_fitness is missing or not a finite number");
  train::get_module_state(ck, "model.", *net_);
  if (ema_ && has_ema) ema_->load(ck, "ema.");
  opt_->load(ck, "optim.");
  precision_.load(ck, "precision.");
  // The epoch's running loss sum at a mid-epoch position (absent from older checkpoints: the resumed
  // epoch's mean then covers the batches trained after the resume only).
  loss_sum_ = torch::Tensor();
  loss_count_ = 0;
  if (batch > 0 && ck.tensors.count("train.loss_sum")) {
    const int64_t count = counter("loss_count", 1, batch, "micro-batches trained in the epoch");
    const auto& sum = ck.tensors.at("train.loss_sum");
    if (sum.dim() != 1 || !sum.is_floating_point() || !torch::isfinite(sum).all().item<bool>())
      throw CheckpointError(where + ": train.loss_sum is not a vector of finite numbers (one sum per loss part)");
    loss_sum_ = sum.to(device_).clone();
    loss_count_ = count;
  }
  start_epoch_ = static_cast<int>(epoch);
  skip_batches_ = batch;
  ni_ = iteration;
  last_opt_ni_ = last_opt;
  opt_steps_ = steps;
  epoch_ = start_epoch_;  // a checkpoint saved before fit() runs again records the same position
  batch_in_epoch_ = skip_batches_;
  best_fitness_ = st.at("best_fitness").get<double>();
  results_ = std::make_unique<train::ResultsWriter>(run_dir_);
  const auto results = ck.meta.contains("results") ? ck.meta.at("results") : nlohmann::json::array();
  results_->restore(results.is_array() && std::all_of(results.begin(), results.end(), [](const auto& r) { return r.is_object(); })
                        ? results : nlohmann::json::array());
  sched_->apply(*opt_, opt_steps_);
  // best.ckpt is written before last.ckpt; should it still be missing (a kill while it was written, by
  // an older build that wrote last.ckpt first), last.ckpt holds the same weights when its save was a best.
  const auto best_file = run_dir_ / "weights" / "best.ckpt";
  if (is_main() && st.value("saved_as_best", false) && !std::filesystem::exists(best_file)) {
    train::save_checkpoint(ck, best_file);
    log::warn("resume: ", best_file.string(), " was missing; restored it from last.ckpt (saved at the best epoch)");
  }
  log::info("resume: ", run_dir_.string(), " from epoch ", start_epoch_ + 1, skip_batches_ ? " (batch " : "",
            skip_batches_ ? std::to_string(skip_batches_) + ")" : "", ", ", opt_steps_, " optimizer steps done");
}

LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::save_checkpoint(bool best) {
  if (!is_main()) return;  // rank 0 writes the run's checkpoints
  train::Checkpoint ck;
  ck.meta = {{"format", trainer_detail::ckpt_format},
             {"family_name", std::string(F::name)},
             {"model", cfg_.model},
             {"family", family_.describe()},
             {"config", to_json(cfg_)},
             {"explicit_keys", cfg_.explicit_keys},
             {"precision", precision_.used().to_json()},
             {"results", results_ ? results_->rows() : nlohmann::json::array()},
             {"torch", compat::torch_version()}};
  ck.meta["state"] = {{"epoch", epoch_},
                      {"batch_in_epoch", batch_in_epoch_},
                      {"iteration", ni_},
                      {"last_opt_iteration", last_opt_ni_},
                      {"optimizer_steps", opt_steps_},
                      {"best_fitness", best_fitness_},
                      {"saved_as_best", best}};
  train::put_module_state(ck, "model.", *net_);
  if (ema_) {
    ema_->save(ck, "ema.");
    ck.tensors["ema.__present__"] = torch::ones({1});
  }
  opt_->save(ck, "optim.");
  precision_.save(ck, "precision.");
  if (batch_in_epoch_ > 0 && loss_sum_.defined()) {  // mid-epoch: the epoch's running loss sum, for resume
    ck.tensors["train.loss_sum"] = loss_sum_.detach().to(torch::kCPU).clone();
    ck.meta["state"]["loss_count"] = loss_count_;
  }
  // best.ckpt first: a kill between the two writes leaves last.ckpt at the previous position, so the
  // resumed run trains the epoch again and writes best.ckpt then (last.ckpt first would record the new
  // best fitness, and the lost best.ckpt would never be written again).
  if (best) train::save_checkpoint(ck, run_dir_ / "weights" / "best.ckpt");
  train::save_checkpoint(ck, run_dir_ / "weights" / "last.ckpt");
}

LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::make_ema() {
  auto copy = family_.make_network();
  copy->to(device_);
  if (channels_last_) to_channels_last(*copy);  // same layout as the model: the multi-tensor update stays fused
  ema_ = std::make_unique<train::ModelEMA>(copy.ptr(), *net_, cfg_.ema_decay, cfg_.ema_tau);
}

LIBREYOLO_TRAINER_TEMPLATE
std::optional<int64_t> LIBREYOLO_TRAINER::probe_memory(int batch) {
  if (!net_) throw Error("Trainer::probe_memory: call setup() first");
  if (batch < 1) throw ConfigError("probe_memory: batch=" + std::to_string(batch) + " is invalid; allowed: >= 1");
  const auto ds = family_.train_set();
  std::mt19937_64 rng(static_cast<uint64_t>(cfg_.seed));
  std::vector<typename F::Dataset::Sample> samples(static_cast<size_t>(batch), ds->get(0, rng, 0));
  std::vector<torch::Tensor> saved;  // BatchNorm statistics: the probe's forwards must not move them
  for (const auto& b : net_->buffers()) saved.push_back(b.clone());
  const int index = compat::device_index(device_);
  std::optional<int64_t> peak;
  compat::cuda_synchronize(device_);
  if (device_.is_cuda()) compat::cuda_reset_peak(index);
  try {
    const Batch b = F::to_device(F::Dataset::collate(std::move(samples)), device_);
    train::LossOutput lo;
    {
      [[maybe_unused]] auto guard = precision_.autocast();
      auto out = net_->forward(channels_last_ ? as_channels_last(F::input(b)) : F::input(b));
      lo = family_.loss(out, b);
    }
    lo.total.backward();
    compat::cuda_synchronize(device_);
    peak = device_.is_cuda() ? compat::cuda_peak_allocated(index) : 0;
  } catch (const c10::Error& e) {
    if (!compat::is_out_of_memory(e)) throw;
  }
  for (auto& p : net_->parameters()) p.mutable_grad() = torch::Tensor();
  {
    torch::NoGradGuard no_grad;
    auto buffers = net_->buffers();
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(saved[i]);
  }
  compat::cuda_empty_cache();
  return peak;
}

LIBREYOLO_TRAINER_TEMPLATE
int LIBREYOLO_TRAINER::auto_batch() {
  if (!device_.is_cuda()) {
    log::notice_once("trainer.autobatch", "batch=-1 sizes the batch from GPU memory and needs a CUDA device; using batch=" +
                                              std::to_string(train::autobatch_fallback) + " on " + device_.str());
    return train::autobatch_fallback;
  }
  using trainer_detail::fmt;
  const auto gib = [](int64_t bytes) { return fmt(static_cast<double>(bytes) / (1 << 30), "%.2f") + " GiB"; };
  const int64_t total = compat::cuda_total_memory(compat::device_index(device_));
  const auto images = static_cast<int64_t>(family_.train_set()->size());
  log::info("batch=-1: one training step at batch 1, 2, 4, ... (at most ", train::largest_power_of_two_at_most(images),
            ", the training set's size) against ", fmt(100 * train::autobatch_fraction, "%.0f"), "% of ", gib(total));
  const auto r = train::pick_batch(
      [&](int b) {
        const auto peak = probe_memory(b);
        log::info("batch=-1:   batch ", b, ": ", peak ? "peak " + gib(*peak) : std::string("out of memory"));
        return peak;
      },
      total, images);
  if (r.none_fit)
    log::warn("batch=-1: even batch 1 needs more than ", gib(r.budget_bytes), " (", fmt(100 * train::autobatch_fraction, "%.0f"),
              "% of the device); using batch=1");
  else
    log::info("batch=-1: using batch=", r.batch);
  compat::cuda_reset_peak(compat::device_index(device_));  // the run's peak VRAM starts after the probes
  return r.batch;
}

LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::clip_gradients() {
  if (cfg_.clip_grad_norm <= 0) return;
  precision_.unscale_(*opt_);
  train::clip_grad_norm(opt_->params(), cfg_.clip_grad_norm);
}

// cuda_graph=step: what train_one_batch does from the forward to the EMA update, on device state (the
// optimizer's lr / step tensors, the scaler's found_inf, the EMA's decay tensor), so the capture policy
// can record it as one graph per batch shape. On a CPU, or before a shape is recorded, it runs eager and
// computes exactly what the eager loop does.
// optimizer_step false: a micro-batch of a gradient-accumulation window before its last (its gradients are
// stashed, nothing steps).
LIBREYOLO_TRAINER_TEMPLATE
torch::Tensor LIBREYOLO_TRAINER::train_whole_step(Batch& b, bool optimizer_step) {
  // A capture policy without whole-step graphs (Eager, a resolved fallback) never calls this; the guard keeps
  // the member compilable when the whole class is instantiated explicitly (families/instantiate.hpp).
  if constexpr (!Capture::whole_step) {
    (void)b;
    (void)optimizer_step;
    throw Error("train_whole_step: this trainer's capture policy has no whole-step graphs");
  } else {
    if (!device_state_) {
      opt_->enable_device_state();
      device_state_ = true;
    }
    if constexpr (member::declares<F, member::step_padding>)
      if (capture_.step_graphs_enabled()) b = F::pad_for_step_graph(b);  // a power-of-two box count
    if (ema_ && optimizer_step) ema_->begin_device_update();
    return train::device_step(family_, net_, precision_, *opt_, ema_.get(), capture_, b, cfg_.clip_grad_norm, channels_last_,
                              train::Accumulation{accumulate_ > 1 ? &grad_acc_ : nullptr, optimizer_step});
  }
}

// The phase events go to the loop's two built-in clients: the profiler and the capture policy.
LIBREYOLO_TRAINER_TEMPLATE
template <class E, class... A>
void LIBREYOLO_TRAINER::raise_phase(E, A... a) {
  prof_client_.bind(&prof_);
  deliver<E>(prof_client_, a...);
  deliver<E>(capture_, a...);
}

// The epoch's running loss sum. A sum restored by a resume with another shape than the family's loss
// parts (a checkpoint not from this build) is dropped: the mean then starts at this batch.
LIBREYOLO_TRAINER_TEMPLATE
void LIBREYOLO_TRAINER::add_loss(const torch::Tensor& items) {
  if (loss_sum_.defined() && loss_sum_.sizes() == items.sizes()) {
    loss_sum_ = loss_sum_ + items;
  } else {
    loss_sum_ = items.clone();
    loss_count_ = 0;
  }
  ++loss_count_;
}

LIBREYOLO_TRAINER_TEMPLATE
int64_t LIBREYOLO_TRAINER::window_remaining() const {
  const int64_t pending = pending_micro_batches();
  if (pending == 0) return 0;
  // The window holding the last trained micro-batch (batch_in_epoch_ - 1).
  const auto w = train::accumulation_window(batch_in_epoch_ - 1, static_cast<int64_t>(train_loader_->num_batches()),
                                            accumulate_);
  return std::max<int64_t>(0, w.length - pending);
}

LIBREYOLO_TRAINER_TEMPLATE
bool LIBREYOLO_TRAINER::train_one_batch() {
  using profile::Phase;
  auto phase_begin = [&](Phase p) { raise_phase(event::phase_begin{}, p); };
  auto phase_end = [&](Phase p) { raise_phase(event::phase_end{}, p); };
  raise_phase(event::step_begin{});
  phase_begin(Phase::dataload);
  std::optional<Batch> host = train_loader_->next();
  phase_end(Phase::dataload);
  if (!host) return false;
  phase_begin(Phase::to_device);
  Batch b = F::to_device(*host, device_);
  phase_end(Phase::to_device);
  // This micro-batch's accumulation window (train/accumulation.hpp: windows counted within the epoch, the
  // loss multiplied by 1 / the window's length, the optimizer after its last micro-batch).
  const auto window = train::accumulation_window(batch_in_epoch_, static_cast<int64_t>(train_loader_->num_batches()),
                                                 accumulate_);
  // cuda_graph=step: forward to EMA in one call of the capture policy (a graph replay once recorded).
  if constexpr (Capture::whole_step) {
    if (capture_.step_mode()) {
      if (accumulate_ > 1) {
        if (!grad_acc_.enabled()) grad_acc_.enable(opt_->params(), device_);
        grad_acc_.set_window(window.length);  // outside the recorded step: a replay reads it
      }
      phase_begin(Phase::forward);
      const torch::Tensor items = train_whole_step(b, window.last);
      phase_end(Phase::forward);
      if (window.last) {
        ++opt_steps_;
        last_opt_ni_ = ni_;
      }
      ++ni_;
      ++batch_in_epoch_;
      sched_->apply(*opt_, opt_steps_);  // writes the optimizer's device lr tensors
      add_loss(items);
      batch_items_ = items.clone();  // a recorded graph's output is overwritten by the next replay
      raise_phase(event::step_done{}, static_cast<int>(b.images.size(0)));
      return true;
    }
  }
  // Rank 0's BatchNorm statistics, as DDP does at each forward (SyncBatchNorm keeps them equal already).
  if (dist_ && !sync_bn_) dist_->broadcast_buffers(*net_);
  const bool boundary = window.last;
  const bool window_start = ni_ - last_opt_ni_ == 1;  // the gradients are zero at this micro-batch's start
  train::LossOutput lo;
  // Forward and backward of this micro-batch; a capture policy may run it again eager after a failed
  // graph replay (the failed attempt's effects undone first).
  auto forward_backward = [&] {
    phase_begin(Phase::forward);
    {
      [[maybe_unused]] auto guard = precision_.autocast();
      auto out = capture_.forward(net_, channels_last_ ? as_channels_last(F::input(b)) : F::input(b),
                                  capture::region_t<region>{});
      lo = family_.loss(out, b);
    }
    phase_end(Phase::forward);
    phase_begin(Phase::backward);
    if (reducer_ && boundary) reducer_->arm();  // this backward's gradients are averaged as they arrive
    precision_.scale(window.length > 1 ? lo.total * train::loss_factor(window.length) : lo.total).backward();
    if (reducer_ && boundary) reducer_->finish();  // before unscale/clip: the same gradients on every rank
    if (boundary && accumulate_ == 1) clip_gradients();
    phase_end(Phase::backward);
  };
  capture_.run_step(net_, forward_backward, window_start);
  if (boundary) {
    phase_begin(Phase::optimizer);
    if (accumulate_ > 1) clip_gradients();
    precision_.step(*opt_);
    precision_.update();
    phase_end(Phase::optimizer);
    opt_->zero_grad();
    if (ema_) ema_->update(*net_);
    ++opt_steps_;
    last_opt_ni_ = ni_;
  }
  ++ni_;
  ++batch_in_epoch_;
  sched_->apply(*opt_, opt_steps_);
  add_loss(lo.items);
  batch_items_ = lo.items;
  raise_phase(event::step_done{}, static_cast<int>(b.images.size(0)));
  return true;
}

LIBREYOLO_TRAINER_TEMPLATE
train::ValResult LIBREYOLO_TRAINER::validate() {
  torch::nn::Module& m = ema_ ? ema_->module() : static_cast<torch::nn::Module&>(*net_);
  auto* net = dynamic_cast<typename Network::ContainedType*>(&m);
  bool was_training = m.is_training();
  m.eval();
  // The task calls forward once per validation batch: that drives the progress line.
  progress::Bar bar("val", static_cast<int64_t>(val_loader_->num_batches()), cfg_.progress_interval);
  int64_t batches = 0;
  auto forward = [&](const torch::Tensor& x) {
    bar.update(batches++);
    [[maybe_unused]] auto guard = precision_.autocast();
    return net->forward(channels_last_ ? as_channels_last(x) : x);
  };
  // The task's validation pictures (val_batch0_*.jpg, confusion_matrix.png, PR_curve.png) with plots=true.
  if constexpr (member::declares<F, member::plots>)
    family_.set_plot_dir(cfg_.plots ? run_dir_ : std::filesystem::path());
  auto r = family_.validate(forward, *val_loader_, device_);
  bar.finish();
  m.train(was_training);
  return r;
}

}  // namespace libreyolo

#include <libreyolo/train/trainer_fit.hpp>
