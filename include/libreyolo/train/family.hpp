#pragma once
// The family contract: what a trainer needs from "what is trained".
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/traits.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <concepts>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo::train {

// A loss: `total` is what backward() runs on; `items` holds the detached components (one per
// loss_names() entry) and stays on the device (no host sync per step).
struct LossOutput {
  torch::Tensor total;
  torch::Tensor items;
};

// A validation pass: `fitness` picks the best checkpoint (top-1, mAP50-95, ...).
struct ValResult {
  double fitness = 0.0;
  nlohmann::json metrics = nlohmann::json::object();
  std::string summary;
};

// @tparam F — a family policy. Required:
//   static constexpr std::string_view name; struct traits (see core/traits.hpp);
//   using Network (a torch ModuleHolder of a Cloneable module), Dataset (a Loader dataset), Batch;
//   void setup(const TrainConfig&)                      open the data
//   Network make_network() const                        build a fresh network for the data
//   shared_ptr<const Dataset> train_set() / val_set()
//   static Batch to_device(const Batch&, torch::Device)   non-blocking copies
//   static Tensor input(const Batch&)                   network input (normalised float)
//   LossOutput loss(output, const Batch&)              eager loss
//   vector<string> loss_names()
//   ValResult validate(forward_fn, Loader<Dataset>&, Device)
//   json describe() const; void restore(const json&)  what a checkpoint needs to rebuild the network
template <class F>
concept FamilyPolicy = requires {
  { F::name } -> std::convertible_to<std::string_view>;
  typename F::traits;
  typename F::Network;
  typename F::Dataset;
  typename F::Batch;
} && requires(F f, const F cf, const TrainConfig& cfg, const typename F::Batch& b, torch::Device d,
              const nlohmann::json& j) {
  f.setup(cfg);
  { cf.make_network() } -> std::same_as<typename F::Network>;
  { cf.train_set() } -> std::convertible_to<std::shared_ptr<const typename F::Dataset>>;
  { cf.val_set() } -> std::convertible_to<std::shared_ptr<const typename F::Dataset>>;
  { F::to_device(b, d) } -> std::same_as<typename F::Batch>;
  { F::input(b) } -> std::convertible_to<torch::Tensor>;
  { cf.loss_names() } -> std::convertible_to<std::vector<std::string>>;
  { cf.describe() } -> std::convertible_to<nlohmann::json>;
  f.restore(j);
};

}  // namespace libreyolo::train
