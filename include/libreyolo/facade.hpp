#pragma once
// The per-family entry points of the run-time facade: train_with (the trainers a run can need: cuda_graph
// false / true / step x profile, and the distributed one; step is the network trainer itself for a
// family whose loss is not fixed-shape), validate_with, predict_with and export_with. They need the family's
// header only, not the family list: the generated per-family translation units (families/instantiate.hpp)
// include this and their own family, so a change to one family recompiles that family's unit alone.
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/io/original.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/tasks/task.hpp>
#include <libreyolo/train/trainer.hpp>

#include <filesystem>
#include <string>

namespace libreyolo {

// Composes the trainer for a family from the run-time switches (cuda_graph x profile) and trains. The
// profiler's window comes from the config (profile_warmup / profile_steps / profile_trace_steps) inside
// the trainer itself.
template <class F, class Capture>
TrainResult train_with_capture(F family, const TrainConfig& cfg) {
  using precision_t = precision::FamilyDefault;
  if (cfg.profile) return Trainer<F, precision_t, Capture, profile::Window<>>(cfg, std::move(family)).fit();
  return Trainer<F, precision_t, Capture, profile::Off>(cfg, std::move(family)).fit();
}
template <class F>
TrainResult train_with(F family, const TrainConfig& cfg) {
  if (dist::launched_distributed()) {
    // One rank of a data-parallel run: capture resolves to Eager and the profiler to Off statically, so
    // the flags only decide which notice is printed; every combination is the same trainer type.
    using precision_t = precision::FamilyDefault;
    constexpr auto D = capture::Mode::distributed;
    if (dist::env_from_environment().rank != 0) log::set_level(log::Level::warn);  // only rank 0 logs
    if (cfg.cuda_graph != GraphMode::off) capture::resolve<F, capture::CudaGraph<>, D>::notice(cfg);
    if (cfg.profile) profile::resolve<profile::Window<>, D>::notice();
    Trainer<F, precision_t, capture::resolve_t<F, capture::Eager, D>, profile::Off, D> t(cfg, std::move(family));
    return t.fit();
  }
  switch (cfg.cuda_graph) {
    case GraphMode::step: {
      // Statically step -> network (a loss that is not fixed-shape) -> eager, said once here; the trainer
      // is then the network or eager one, not a third type.
      using R = capture::resolve<F, capture::CudaGraph<capture::scope::step>>;
      R::notice(cfg);
      return train_with_capture<F, typename R::type>(std::move(family), cfg);
    }
    case GraphMode::network: return train_with_capture<F, capture::CudaGraph<>>(std::move(family), cfg);
    case GraphMode::off: break;
  }
  return train_with_capture<F, capture::Eager>(std::move(family), cfg);
}

// A checkpoint's network (EMA weights when present) for `family` (restored from the checkpoint), in eval
// mode on `dev`.
template <class F>
typename F::Network network_from(F& family, const train::Checkpoint& ck, torch::Device dev) {
  family.restore(ck.meta.at("family"));
  auto net = family.make_network();
  train::get_module_state(ck, ck.tensors.count("ema.__present__") ? "ema." : "model.", *net);
  net->to(dev);
  net->eval();
  return net;
}

// Validates a checkpoint's network (EMA weights when present) on cfg.data's validation split.
template <class F>
train::ValResult validate_with(F family, TrainConfig cfg, const train::Checkpoint& ck) {
  train::apply_family_overrides(family, cfg);
  family.restore(ck.meta.at("family"));
  family.setup(cfg);
  const auto dev = resolve_device(cfg.device);
  auto net = network_from(family, ck, dev);
  precision::FamilyDefault prec;
  prec.setup(cfg, dev, family_traits<F>::amp_default);
  data::LoaderOptions lo;
  lo.batch = std::max(1, cfg.batch) * 2;
  lo.workers = cfg.workers;
  lo.shuffle = false;
  lo.pin_memory = dev.is_cuda();
  data::Loader<typename F::Dataset> loader(family.val_set(), lo);
  auto forward = [&](const torch::Tensor& x) {
    [[maybe_unused]] auto g = prec.autocast();
    return net->forward(x);
  };
  return family.validate(forward, loader, dev);
}

// Predict with a checkpoint's network on the images `source` names; the task writes its outputs under
// out_dir and returns them as JSON.
template <class F>
nlohmann::json predict_with(F family, const train::Checkpoint& ck, const std::filesystem::path& source,
                            const TrainConfig& cfg, const std::filesystem::path& out_dir, double conf) {
  const auto dev = resolve_device(cfg.device);
  auto net = network_from(family, ck, dev);
  tasks::PredictOptions po;
  po.imgsz = cfg.is_explicit("imgsz") ? cfg.imgsz : ck.meta.at("config").value("imgsz", 640);
  po.conf = conf;
  po.save_txt = cfg.save_txt;
  auto forward = [&](const torch::Tensor& x) { return net->forward(x); };
  return family.predict(forward, source, po, dev, out_dir);
}

// Writes a checkpoint's network (EMA weights when present) as the original's .pt at `out` (io/original.hpp).
template <class F>
void export_with(F family, const train::Checkpoint& ck, const std::filesystem::path& out) {
  family.restore(ck.meta.at("family"));
  auto net = family.make_network();
  train::get_module_state(ck, ck.tensors.count("ema.__present__") ? "ema." : "model.", *net);
  io::write_original_checkpoint(out, ck, *net, std::string(F::task_info::name), "libreyolo-cpp");
}

}  // namespace libreyolo
