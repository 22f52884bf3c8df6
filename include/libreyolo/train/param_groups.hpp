#pragma once
// Parameter groups: weight decay applies to conv/linear weights only, never to normalisation weights
// or biases (decaying those pulls BN scales and offsets toward zero and hurts accuracy).
#include <libreyolo/nn/batch_norm.hpp>

#include <torch/torch.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace libreyolo::train {

struct ParamGroup {
  std::string name;
  std::vector<torch::Tensor> params;
  double weight_decay = 0;
  double lr = 0;  // 0 = "not set": the optimizer starts the group at its lr0
  double lr_mult = 1.0;  // the group's lr = the schedule's lr x lr_mult (e.g. a backbone at 0.05x, a 10x head)
};

namespace detail {

inline bool is_norm_module(const torch::nn::Module& m) {
  const auto* p = &m;
  return dynamic_cast<const nn::BatchNorm2dImpl*>(p) || dynamic_cast<const torch::nn::BatchNorm1dImpl*>(p) ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(p) ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(p) ||
         dynamic_cast<const torch::nn::InstanceNorm1dImpl*>(p) ||
         dynamic_cast<const torch::nn::InstanceNorm2dImpl*>(p) ||
         dynamic_cast<const torch::nn::InstanceNorm3dImpl*>(p) ||
         dynamic_cast<const torch::nn::GroupNormImpl*>(p) ||
         dynamic_cast<const torch::nn::LayerNormImpl*>(p);
}

// Module types whose weights are known to be decayed, so the 1-D fallback never applies to them.
inline bool is_decay_module(const torch::nn::Module& m) {
  const auto* p = &m;
  return dynamic_cast<const torch::nn::Conv1dImpl*>(p) || dynamic_cast<const torch::nn::Conv2dImpl*>(p) ||
         dynamic_cast<const torch::nn::Conv3dImpl*>(p) ||
         dynamic_cast<const torch::nn::ConvTranspose1dImpl*>(p) ||
         dynamic_cast<const torch::nn::ConvTranspose2dImpl*>(p) ||
         dynamic_cast<const torch::nn::ConvTranspose3dImpl*>(p) ||
         dynamic_cast<const torch::nn::LinearImpl*>(p) || dynamic_cast<const torch::nn::EmbeddingImpl*>(p);
}

}  // namespace detail

// Exactly three groups, in this order: "decay" (weight_decay), "norm" (0), "bias" (0). A parameter
// named `bias` is always "bias"; the other parameters of a norm module are "norm"; in a module of
// unknown type a 1-D parameter named `weight` is taken for a norm scale. Frozen and shared
// (already seen) parameters are left out.
inline std::vector<ParamGroup> make_param_groups(torch::nn::Module& m, double weight_decay) {
  std::vector<ParamGroup> groups{{"decay", {}, weight_decay, 0}, {"norm", {}, 0, 0}, {"bias", {}, 0, 0}};
  std::unordered_set<const void*> seen;
  for (const auto& mod : m.modules(/*include_self=*/true)) {
    const bool norm = detail::is_norm_module(*mod);
    const bool known_decay = detail::is_decay_module(*mod);
    for (const auto& item : mod->named_parameters(/*recurse=*/false)) {
      const torch::Tensor& p = item.value();
      if (!p.defined() || !p.requires_grad()) continue;
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
      const std::string& name = item.key();
      size_t g = 0;
      if (name == "bias")
        g = 2;
      else if (norm || (!known_decay && name == "weight" && p.dim() == 1))
        g = 1;
      groups[g].params.push_back(p);
    }
  }
  return groups;
}

// The original's BaseTrainer groups (training/trainer.py:326-373 at c41461e), which its RTMDet and YOLO-NAS
// trainers use: weight_decay on the decay group only, while its BatchNorm-weight and bias groups carry no
// weight_decay key, so torch.optim.AdamW gives them its default 0.01 (SGD's default is 0: no change).
inline std::vector<ParamGroup> original_base_groups(torch::nn::Module& m, double weight_decay, bool adamw) {
  auto g = make_param_groups(m, weight_decay);
  if (adamw) g[1].weight_decay = g[2].weight_decay = 0.01;
  return g;
}

}  // namespace libreyolo::train
