#pragma once
// libreyolo::Model — the run-time facade used by the command line and by users who choose the model
// at run time: `Model m("resnet18"); m.train(cfg);`. It dispatches once to the matching
// Trainer<Family, Precision, Capture, Profiler> instantiation.
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/registry.hpp>
#include <libreyolo/families/yolo9/predict.hpp>
#include <libreyolo/io/original.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/train/trainer.hpp>

#include <boost/hana.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace libreyolo {

// Runs `fn(family_instance)` for the family that a model name (e.g. "resnet18", "yolo9t") names.
// Returns the callable's result by value.
template <class Fn>
auto with_family(const std::string& model, Fn&& fn) {
  namespace hana = boost::hana;
  using R = std::decay_t<decltype(fn(std::declval<ResNetFamily>()))>;
  std::optional<R> out;
  std::string known;
  hana::for_each(registered_families, [&](auto t) {
    using F = typename decltype(t)::type;
    for (std::string_view size : F::sizes) {
      std::string full = std::string(F::name) + std::string(size);
      known += (known.empty() ? "" : ", ") + full;
      if (!out && model == full) out.emplace(fn(F(std::string(size))));
    }
    if constexpr (requires { F::planned_sizes; })
      for (std::string_view size : F::planned_sizes)
        if (model == std::string(F::name) + std::string(size)) F(std::string(size));  // throws "not implemented yet"
  });
  if (!out) throw ConfigError("model=" + model + ": unknown model; available: " + known);
  return R(std::move(*out));
}

// Composes the trainer for a family from the run-time switches (cuda_graph x profile) and trains.
template <class F, class Capture>
TrainResult train_with_capture(F family, const TrainConfig& cfg) {
  using precision_t = precision::FamilyDefault;
  if (cfg.profile) {
    Trainer<F, precision_t, Capture, profile::Window<>> t(cfg, std::move(family));
    t.profiler().set_window(cfg.profile_warmup, cfg.profile_steps);
    t.profiler().set_traced_steps(cfg.profile_trace_steps);
    return t.fit();
  }
  Trainer<F, precision_t, Capture, profile::Off> t(cfg, std::move(family));
  return t.fit();
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

// Validates a checkpoint's network (EMA weights when present) on cfg.data's validation split.
template <class F>
train::ValResult validate_with(F family, TrainConfig cfg, const train::Checkpoint& ck) {
  apply_overrides(cfg, family_traits<F>::overrides);
  family.restore(ck.meta.at("family"));
  family.setup(cfg);
  const auto dev = resolve_device(cfg.device);
  auto net = family.make_network();
  train::get_module_state(ck, ck.tensors.count("ema.__present__") ? "ema." : "model.", *net);
  net->to(dev);
  net->eval();
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

class Model {
 public:
  // A model name ("resnet18") or a checkpoint path (its family and weights are used).
  explicit Model(std::string name_or_checkpoint) {
    namespace fs = std::filesystem;
    if (fs::is_regular_file(name_or_checkpoint)) {
      auto ck = io::load_any_checkpoint(name_or_checkpoint);
      model_ = ck.meta.value("model", std::string{});
      weights_ = name_or_checkpoint;
    } else {
      model_ = std::move(name_or_checkpoint);
    }
    with_family(model_, [](auto&&) { return 0; });  // validates the name now
  }
  const std::string& name() const { return model_; }

  // `libreyolo val`: needs a checkpoint (Model constructed from a .ckpt path).
  train::ValResult val(TrainConfig cfg) const {
    if (weights_.empty()) throw ConfigError("val: model= must be a checkpoint file (weights/best.ckpt), not a bare name");
    auto ck = io::load_any_checkpoint(weights_);
    if (cfg.data.empty()) cfg.data = ck.meta.at("config").value("data", std::string{});
    if (!cfg.is_explicit("imgsz")) cfg.imgsz = ck.meta.at("config").value("imgsz", cfg.imgsz);
    return with_family(model_, [&](auto fam) { return validate_with(std::move(fam), cfg, ck); });
  }

  // `libreyolo predict` (detection families): boxes as JSON plus annotated images under out_dir.
  nlohmann::json predict(const std::filesystem::path& source, const TrainConfig& cfg,
                         const std::filesystem::path& out_dir, double conf = 0.25) const {
    if (weights_.empty()) throw ConfigError("predict: model= must be a checkpoint file (weights/best.ckpt)");
    if (model_.rfind("yolo9", 0) != 0) throw ConfigError("predict: model " + model_ + " is not a detector");
    auto ck = io::load_any_checkpoint(weights_);
    Yolo9Family fam(model_.substr(5));
    fam.restore(ck.meta.at("family"));
    auto net = fam.make_network();
    train::get_module_state(ck, ck.tensors.count("ema.__present__") ? "ema." : "model.", *net);
    const auto dev = resolve_device(cfg.device);
    net->to(dev);
    net->eval();
    families::yolo9::PredictOptions po;
    po.imgsz = cfg.is_explicit("imgsz") ? cfg.imgsz : ck.meta.at("config").value("imgsz", 640);
    po.conf = conf;
    auto forward = [&](const torch::Tensor& x) { return net->forward(x); };
    return families::yolo9::predict_images(forward, fam.names(), families::yolo9::predict_sources(source), po, dev,
                                           out_dir);
  }

  TrainResult train(TrainConfig cfg) const {
    cfg.model = model_;
    if (!weights_.empty() && cfg.weights.empty()) cfg.weights = weights_;
    return with_family(model_, [&](auto fam) { return train_with(std::move(fam), cfg); });
  }

 private:
  std::string model_;
  std::string weights_;
};

}  // namespace libreyolo
