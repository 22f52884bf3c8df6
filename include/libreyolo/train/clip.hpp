#pragma once
// Gradient clipping by total L2 norm, entirely on the device: the scale factor stays a tensor so the
// step never waits for the GPU (no .item(), no host-side comparison).
#include <libreyolo/core/compat.hpp>

#include <torch/torch.h>

#include <vector>

namespace libreyolo::train {

// Scales every defined grad by min(1, max_norm / (norm + 1e-6)), norm = L2 norm over all grads
// together; returns that norm (before clipping) as a 0-d float tensor on the grads' device.
inline torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return torch::zeros({}, torch::kFloat);
  const torch::Device device = grads.front().device();
  std::vector<torch::Tensor> norms = at::_foreach_norm(grads, at::Scalar(2.0));
  for (auto& n : norms) n = n.to(device, torch::kFloat);
  const torch::Tensor total = torch::stack(norms).norm(2);
  const torch::Tensor factor = (max_norm / (total + 1e-6)).clamp_max(1.0);
  compat::foreach_mul_by_tensor_(grads, factor);
  return total;
}

}  // namespace libreyolo::train
