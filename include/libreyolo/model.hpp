#pragma once
// libreyolo::Model — the run-time facade used by the command line and by users who choose the model
// at run time: `Model m("resnet18"); m.train(cfg);`. It dispatches once to the matching
// Trainer<Family, Precision, Capture, Profiler> instantiation.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/registry.hpp>
#include <libreyolo/precision/family_default.hpp>
#include <libreyolo/train/trainer.hpp>

#include <boost/hana.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace libreyolo {

// Runs `fn(family_instance)` for the family that a model name (e.g. "resnet18", "yolo9t") names.
template <class Fn>
decltype(auto) with_family(const std::string& model, Fn&& fn) {
  namespace hana = boost::hana;
  using R = decltype(fn(std::declval<ResNetFamily>()));
  std::optional<R> out;
  std::string known;
  hana::for_each(registered_families, [&](auto t) {
    using F = typename decltype(t)::type;
    for (std::string_view size : F::sizes) {
      std::string full = std::string(F::name) + std::string(size);
      known += (known.empty() ? "" : ", ") + full;
      if (!out && model == full) out.emplace(fn(F(std::string(size))));
    }
  });
  if (!out) throw ConfigError("model=" + model + ": unknown model; available: " + known);
  return std::move(*out);
}

// Composes the trainer for a family from the run-time switches (profile) and trains.
template <class F>
TrainResult train_with(F family, const TrainConfig& cfg) {
  using precision_t = precision::FamilyDefault;
  if (cfg.profile) {
    Trainer<F, precision_t, capture::Eager, profile::Window<>> t(cfg, std::move(family));
    t.profiler().set_window(cfg.profile_warmup, cfg.profile_steps);
    return t.fit();
  }
  Trainer<F, precision_t, capture::Eager, profile::Off> t(cfg, std::move(family));
  return t.fit();
}

class Model {
 public:
  // A model name ("resnet18") or a checkpoint path (its family and weights are used).
  explicit Model(std::string name_or_checkpoint) {
    namespace fs = std::filesystem;
    if (fs::is_regular_file(name_or_checkpoint)) {
      auto ck = train::load_checkpoint(name_or_checkpoint);
      model_ = ck.meta.value("model", std::string{});
      weights_ = name_or_checkpoint;
    } else {
      model_ = std::move(name_or_checkpoint);
    }
    with_family(model_, [](auto&&) { return 0; });  // validates the name now
  }
  const std::string& name() const { return model_; }

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
