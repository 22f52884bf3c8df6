#pragma once
// libreyolo::Model — the run-time facade used by the command line and by users who choose the model
// at run time: `Model m("<family><size>"); m.train(cfg);`. It dispatches once, through the family list
// (families/list.hpp), to the matching Trainer<Family, Precision, Capture, Profiler> instantiations. The
// per-family entry points train_with / validate_with / predict_with are explicitly instantiated in one
// translation unit per family (families/instantiate.hpp); the command line sees only their declarations.
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/registry.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/train/trainer.hpp>

#include <filesystem>
#include <optional>
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
    if (cfg.cuda_graph) capture::resolve<F, capture::CudaGraph<>, D>::notice();
    if (cfg.profile) profile::resolve<profile::Window<>, D>::notice();
    Trainer<F, precision_t, capture::resolve_t<F, capture::Eager, D>, profile::Off, D> t(cfg, std::move(family));
    return t.fit();
  }
  if (cfg.cuda_graph) return train_with_capture<F, capture::CudaGraph<>>(std::move(family), cfg);
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
  apply_overrides(cfg, family_traits<F>::overrides);
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
  auto forward = [&](const torch::Tensor& x) { return net->forward(x); };
  return family.predict(forward, source, po, dev, out_dir);
}

class Model {
 public:
  // A model name (family + size, see families/list.hpp; "" = the first listed) or a checkpoint path (its
  // family, task and weights are used).
  //
  // The original's PyTorch checkpoints (.pt) are the place for io/: read the state dict, map each name
  // with the family's original_key() (the original's names equal ours) and start from those weights.
  explicit Model(std::string name_or_checkpoint) {
    namespace fs = std::filesystem;
    if (fs::is_regular_file(name_or_checkpoint)) {
      if (fs::path(name_or_checkpoint).extension() == ".pt")
        throw ConfigError("model=" + name_or_checkpoint + ": the original's .pt checkpoints are not read yet (io/); "
                          "give a libreyolo checkpoint (.ckpt) or a model name");
      auto ck = train::load_checkpoint(name_or_checkpoint);
      model_ = ck.meta.value("model", std::string{});
      if (ck.meta.contains("config")) task_ = ck.meta.at("config").value("task", std::string{});
      weights_ = name_or_checkpoint;
    } else {
      model_ = name_or_checkpoint.empty() ? families::default_model() : std::move(name_or_checkpoint);
    }
    with_family(model_, task_, [](auto&&) { return 0; });  // validates the name now
  }
  const std::string& name() const { return model_; }

  // `libreyolo val`: needs a checkpoint (Model constructed from a .ckpt path).
  train::ValResult val(TrainConfig cfg) const {
    if (weights_.empty()) throw ConfigError("val: model= must be a checkpoint file (weights/best.ckpt), not a bare name");
    auto ck = train::load_checkpoint(weights_);
    if (cfg.data.empty()) cfg.data = ck.meta.at("config").value("data", std::string{});
    if (!cfg.is_explicit("imgsz")) cfg.imgsz = ck.meta.at("config").value("imgsz", cfg.imgsz);
    return with_family(model_, task_, [&](auto fam) { return validate_with(std::move(fam), cfg, ck); });
  }

  // `libreyolo predict`: the task's outputs (detection: boxes + annotated images; classification: top-k
  // classes) under out_dir, as JSON.
  nlohmann::json predict(const std::filesystem::path& source, const TrainConfig& cfg,
                         const std::filesystem::path& out_dir, double conf = 0.25) const {
    if (weights_.empty()) throw ConfigError("predict: model= must be a checkpoint file (weights/best.ckpt)");
    auto ck = train::load_checkpoint(weights_);
    return with_family(model_, task_, [&](auto fam) { return predict_with(std::move(fam), ck, source, cfg, out_dir, conf); });
  }

  TrainResult train(TrainConfig cfg) const {
    cfg.model = model_;
    if (!weights_.empty() && cfg.weights.empty()) cfg.weights = weights_;
    const std::string task = cfg.task.empty() ? task_ : cfg.task;
    return with_family(model_, task, [&](auto fam) { return train_with(std::move(fam), cfg); });
  }

 private:
  std::string model_;
  std::string task_;
  std::string weights_;
};

}  // namespace libreyolo
