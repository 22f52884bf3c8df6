#pragma once
// D-FINE's hybrid encoder (the original's models/dfine/encoder.py HybridEncoder; DEIM and RT-DETRv4 use
// the same): RT-DETR's layout (1x1 conv + BN input projections, AIFI = one post-norm transformer encoder
// layer with the 2-D sin-cos position embedding on the coarsest map, a top-down FPN and a bottom-up PAN)
// with D-FINE's blocks: the fusion blocks are RepNCSPELAN4 (GELAN: a 1x1 conv split in two halves, two
// CSP(RepVgg) + 3x3 conv branches chained on the second half, all four concatenated and fused by a 1x1
// conv), the lateral convs carry no activation, and the PAN downsamples with SCDown (1x1 conv, then a
// depthwise 3x3/2 conv, neither activated). Reuses nn/detr/hybrid_encoder.hpp's transformer encoder,
// position embedding and CSPRepLayer (= the original's CSPLayer with VGGBlock bottlenecks).
#include <libreyolo/nn/detr/hybrid_encoder.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <tuple>
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

struct DFineEncoderOptions {
  std::vector<int64_t> in_channels{512, 1024};
  std::vector<int64_t> feat_strides{16, 32};
  int64_t hidden_dim = 128;
  int64_t nhead = 8;
  int64_t dim_feedforward = 512;
  std::vector<int64_t> use_encoder_idx{1};
  int64_t num_encoder_layers = 1;
  double pe_temperature = 10000;
  double expansion = 0.34;
  double depth_mult = 0.5;
};

class DFineEncoderImpl : public torch::nn::Cloneable<DFineEncoderImpl> {
 public:
  explicit DFineEncoderImpl(DFineEncoderOptions o = {}) : o_(std::move(o)) { reset(); }
  void reset() override {
    const int64_t d = o_.hidden_dim;
    const auto nlev = static_cast<int64_t>(o_.in_channels.size());
    input_proj = register_module("input_proj", torch::nn::ModuleList());
    for (auto c : o_.in_channels) {
      torch::nn::Sequential s;
      s->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(c, d, 1).bias(false)));
      s->push_back("norm", BatchNorm2d(d));
      input_proj->push_back(s);
    }
    encoder = register_module("encoder", torch::nn::ModuleList());
    for (size_t i = 0; i < o_.use_encoder_idx.size(); ++i)
      encoder->push_back(TransformerEncoder(o_.num_encoder_layers, d, o_.nhead, o_.dim_feedforward, Act::gelu));
    // round(expansion * hidden // 2) and round(3 * depth_mult), Python's round (half to even).
    const auto c4 = static_cast<int64_t>(std::nearbyint(std::floor(o_.expansion * static_cast<double>(d) / 2.0)));
    const auto n = static_cast<int64_t>(std::nearbyint(3.0 * o_.depth_mult));
    lateral_convs = register_module("lateral_convs", torch::nn::ModuleList());
    fpn_blocks = register_module("fpn_blocks", torch::nn::ModuleList());
    for (int64_t i = nlev - 1; i > 0; --i) {
      lateral_convs->push_back(ConvNorm(d, d, 1, 1, Act::none));
      fpn_blocks->push_back(RepNCSPELAN4(2 * d, d, 2 * d, c4, n));
    }
    downsample_convs = register_module("downsample_convs", torch::nn::ModuleList());
    pan_blocks = register_module("pan_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < nlev - 1; ++i) {
      downsample_convs->push_back(torch::nn::Sequential(SCDown(d, d, 3, 2)));
      pan_blocks->push_back(RepNCSPELAN4(2 * d, d, 2 * d, c4, n));
    }
  }

  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& feats) {
    const auto nlev = static_cast<int64_t>(o_.in_channels.size());
    TORCH_CHECK(static_cast<int64_t>(feats.size()) == nlev, "DFineEncoder: expected ", nlev, " feature maps, got ", feats.size());
    std::vector<torch::Tensor> proj;
    for (int64_t i = 0; i < nlev; ++i) proj.push_back(input_proj[i]->as<torch::nn::Sequential>()->forward(feats[i]));
    for (size_t i = 0; i < o_.use_encoder_idx.size(); ++i) {
      const auto idx = o_.use_encoder_idx[i];
      const int64_t h = proj[idx].size(2), w = proj[idx].size(3);
      auto src = proj[idx].flatten(2).permute({0, 2, 1});
      auto mem = encoder[i]->as<TransformerEncoderImpl>()->forward(src, pos_embed(w, h, src.device()));
      proj[idx] = mem.permute({0, 2, 1}).reshape({-1, o_.hidden_dim, h, w}).contiguous();
    }
    // Top-down FPN.
    std::vector<torch::Tensor> inner{proj.back()};
    for (int64_t idx = nlev - 1; idx > 0; --idx) {
      const auto j = nlev - 1 - idx;
      auto high = lateral_convs[j]->as<ConvNormImpl>()->forward(inner.front());
      inner.front() = high;
      auto up = torch::upsample_nearest2d(high, {high.size(2) * 2, high.size(3) * 2});
      inner.insert(inner.begin(), fpn_blocks[j]->as<RepNCSPELAN4Impl>()->forward(torch::cat({up, proj[idx - 1]}, 1)));
    }
    // Bottom-up PAN.
    std::vector<torch::Tensor> outs{inner.front()};
    for (int64_t idx = 0; idx < nlev - 1; ++idx) {
      auto down = downsample_convs[idx]->as<torch::nn::Sequential>()->forward(outs.back());
      outs.push_back(pan_blocks[idx]->as<RepNCSPELAN4Impl>()->forward(torch::cat({down, inner[idx + 1]}, 1)));
    }
    return outs;
  }

  const DFineEncoderOptions& options() const { return o_; }
  torch::nn::ModuleList input_proj{nullptr}, encoder{nullptr}, lateral_convs{nullptr}, fpn_blocks{nullptr},
      downsample_convs{nullptr}, pan_blocks{nullptr};

 private:
  // The position embedding of a w x h map, made once per size and device (on the device: a CUDA graph
  // capture of the encoder needs no host copy).
  torch::Tensor pos_embed(int64_t w, int64_t h, torch::Device dev) {
    const auto key = std::make_tuple(w, h, static_cast<int>(dev.type()), static_cast<int>(dev.index()));
    auto it = pos_cache_.find(key);
    if (it != pos_cache_.end()) return it->second;
    torch::NoGradGuard ng;
    auto pe = sincos_position_embedding_2d(w, h, o_.hidden_dim, o_.pe_temperature, torch::TensorOptions().device(dev));
    pos_cache_.emplace(key, pe);
    return pe;
  }
  DFineEncoderOptions o_;
  std::map<std::tuple<int64_t, int64_t, int, int>, torch::Tensor> pos_cache_;
};
TORCH_MODULE(DFineEncoder);

}  // namespace libreyolo::nn::detr
