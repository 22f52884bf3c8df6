#pragma once
// ImageNet normalisation inside a network (LingBot, SegFormer, EC; DEIMv2's ViT sizes): [0, 1] RGB
// [B, 3, H, W] -> (x - mean) / std per channel, in x's dtype. Per-channel scalar arithmetic: no host tensor
// is made and copied to the device, so the function runs inside a CUDA-graph capture (a
// `torch::tensor({...}).to(cuda)` there is a pageable host-to-device copy, which a capturing stream refuses:
// EC's backbone + encoder region failed to capture that way).
#include <torch/torch.h>

#include <array>
#include <vector>

namespace libreyolo::nn {

inline constexpr std::array<double, 3> kImageNetMean{0.485, 0.456, 0.406};
inline constexpr std::array<double, 3> kImageNetStd{0.229, 0.224, 0.225};

inline torch::Tensor imagenet_normalize(const torch::Tensor& x) {
  std::vector<torch::Tensor> ch;
  ch.reserve(3);
  for (int64_t c = 0; c < 3; ++c) ch.push_back(x.select(1, c).sub(kImageNetMean[c]).div(kImageNetStd[c]));
  return torch::stack(ch, 1);
}

}  // namespace libreyolo::nn
