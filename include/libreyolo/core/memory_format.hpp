#pragma once
// NHWC ("channels last") layout: the layout cuDNN's Tensor-Core convolutions and batch norms run in.
// With NCHW tensors cuDNN converts every convolution's input and output (nchwToNhwc / nhwcToNchw
// kernels); on an H200 those conversions were ~45% of a YOLOv9-t fp16 step's GPU time.
#include <torch/torch.h>

namespace libreyolo {

// Converts every 4-d parameter and buffer of `m` to channels-last in place (their data, not their identity:
// optimizer state and hooks keep pointing at the same tensors).
inline void to_channels_last(torch::nn::Module& m) {
  torch::NoGradGuard ng;
  for (auto& p : m.parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
  for (auto& b : m.buffers())
    if (b.dim() == 4) b.set_data(b.contiguous(torch::MemoryFormat::ChannelsLast));
}

// An image batch [B, C, H, W] in channels-last layout (other ranks unchanged).
inline torch::Tensor as_channels_last(const torch::Tensor& x) {
  return x.dim() == 4 ? x.contiguous(torch::MemoryFormat::ChannelsLast) : x;
}

}  // namespace libreyolo
