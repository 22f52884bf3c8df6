#pragma once
// D-FINE's hybrid encoder (the original's models/dfine/encoder.py HybridEncoder; DEIM and RT-DETRv4 use
// the same): RT-DETR's layout (1x1 conv + BN input projections, AIFI = one post-norm transformer encoder
// layer with the 2-D sin-cos position embedding on the coarsest map, a top-down FPN and a bottom-up PAN)
// with D-FINE's blocks: the fusion blocks are RepNCSPELAN4 (GELAN: a 1x1 conv split in two halves, two
// CSP(RepVgg) + 3x3 conv branches chained on the second half, all four concatenated and fused by a 1x1
// conv), the lateral convs carry no activation, and the PAN downsamples with SCDown (1x1 conv, then a
// depthwise 3x3/2 conv, neither activated). Reuses nn/detr/hybrid_encoder.hpp's transformer encoder,
// position embedding, CSPRepLayer (= the original's CSPLayer with VGGBlock bottlenecks) and its layout
// (HybridEncoderTImpl, over DFineEncoderBlocks).
#include <libreyolo/nn/detr/hybrid_encoder.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace libreyolo::nn::detr {

// SCDown: 1x1 ConvNorm (c1 -> c2), then a depthwise k x k / s ConvNorm; no activation.
class SCDownImpl : public torch::nn::Cloneable<SCDownImpl> {
 public:
  SCDownImpl(int64_t c1, int64_t c2, int64_t k, int64_t s) : c1_(c1), c2_(c2), k_(k), s_(s) { reset(); }
  void reset() override {
    cv1 = register_module("cv1", ConvNorm(c1_, c2_, 1, 1, Act::none));
    cv2 = register_module("cv2", ConvNorm(c2_, c2_, k_, s_, Act::none, -1, c2_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return cv2->forward(cv1->forward(x)); }
  ConvNorm cv1{nullptr}, cv2{nullptr};

 private:
  int64_t c1_, c2_, k_, s_;
};
TORCH_MODULE(SCDown);

// RepNCSPELAN4(c1, c2, c3, c4, n): cv1 1x1 c1 -> c3, split into two c3/2 halves a, b;
// cv2 = CSP(c3/2 -> c4, n RepVgg blocks) + 3x3 ConvNorm, on b; cv3 = CSP(c4 -> c4, n) + 3x3 ConvNorm, on
// cv2's output; cv4 1x1 (c3 + 2 c4) -> c2 over [a, b, cv2, cv3]. Every conv SiLU-activated.
class RepNCSPELAN4Impl : public torch::nn::Cloneable<RepNCSPELAN4Impl> {
 public:
  RepNCSPELAN4Impl(int64_t c1, int64_t c2, int64_t c3, int64_t c4, int64_t n, Act act = Act::silu)
      : c1_(c1), c2_(c2), c3_(c3), c4_(c4), n_(n), act_(act) {
    reset();
  }
  void reset() override {
    cv1 = register_module("cv1", ConvNorm(c1_, c3_, 1, 1, act_));
    cv2 = register_module("cv2", torch::nn::Sequential(CSPRepLayer(c3_ / 2, c4_, n_, 1.0, act_), ConvNorm(c4_, c4_, 3, 1, act_)));
    cv3 = register_module("cv3", torch::nn::Sequential(CSPRepLayer(c4_, c4_, n_, 1.0, act_), ConvNorm(c4_, c4_, 3, 1, act_)));
    cv4 = register_module("cv4", ConvNorm(c3_ + 2 * c4_, c2_, 1, 1, act_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = cv1->forward(x).split_with_sizes({c3_ / 2, c3_ / 2}, 1);
    auto y2 = cv2->forward(y[1]);
    auto y3 = cv3->forward(y2);
    return cv4->forward(torch::cat({y[0], y[1], y2, y3}, 1));
  }
  ConvNorm cv1{nullptr}, cv4{nullptr};
  torch::nn::Sequential cv2{nullptr}, cv3{nullptr};

 private:
  int64_t c1_, c2_, c3_, c4_, n_;
  Act act_;
};
TORCH_MODULE(RepNCSPELAN4);

// HybridEncoderOptions with D-FINE-n's encoder as the defaults.
struct DFineEncoderOptions : HybridEncoderOptions {
  DFineEncoderOptions() {
    in_channels = {512, 1024};
    feat_strides = {16, 32};
    hidden_dim = 128;
    dim_feedforward = 512;
    use_encoder_idx = {1};
    expansion = 0.34;
    depth_mult = 0.5;
  }
};

// D-FINE's blocks: projection children named conv / norm, lateral convs without activation,
// RepNCSPELAN4 fusion (c4 = round(expansion · hidden // 2), round(3 · depth_mult) RepVgg blocks, Python's
// rounding: half to even), SCDown downsampling (inside a Sequential: downsample_convs.N.0).
struct DFineEncoderBlocks {
  using Options = DFineEncoderOptions;
  static constexpr const char* name = "DFineEncoder";
  static torch::nn::Sequential input_proj(int64_t c, int64_t d) {
    torch::nn::Sequential s;
    s->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(c, d, 1).bias(false)));
    s->push_back("norm", BatchNorm2d(d));
    return s;
  }
  static constexpr Act lateral_act = Act::none;
  using Fusion = RepNCSPELAN4Impl;
  static RepNCSPELAN4 fusion(const Options& o) {
    const int64_t d = o.hidden_dim;
    const auto c4 = static_cast<int64_t>(std::nearbyint(std::floor(o.expansion * static_cast<double>(d) / 2.0)));
    const auto n = static_cast<int64_t>(std::nearbyint(3.0 * o.depth_mult));
    return RepNCSPELAN4(2 * d, d, 2 * d, c4, n);
  }
  using Down = torch::nn::SequentialImpl;
  static torch::nn::Sequential downsample(int64_t d) { return torch::nn::Sequential(SCDown(d, d, 3, 2)); }
};

using DFineEncoderImpl = HybridEncoderTImpl<DFineEncoderBlocks>;
TORCH_MODULE(DFineEncoder);

}  // namespace libreyolo::nn::detr
