#pragma once
// DEIMv2's lite encoder (the original's models/deimv2/engine/deim/lite_encoder.py LiteEncoder, the
// atto / femto / pico sizes): one stride-16 backbone map projected to hidden_dim (1x1 conv + BN), a
// stride-32 map made from it (down_sample1: 3x3/2 average pooling, padding 1, counting the padding, then
// a 1x1 conv + BN + SiLU), that map plus its global average (GAP_Fusion, `bi_fusion`: x + mean(x) through
// a 1x1 ConvNorm + SiLU), then a two-level FPN / PAN by sums: fpn_block(p16 + nearest-2x(p32)), then
// pan_block(p32 + down_sample2(fpn out)); both blocks RepNCSPELAN4 with CSPLayer2 (nn/detr/dfine_encoder.hpp).
// Returns the stride-16 and stride-32 maps. Module names equal the original's state dict.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>
#include <libreyolo/nn/detr/dfine_encoder.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace libreyolo::nn::detr {

// GAP_Fusion: cv(x + global_average(x)), cv a 1x1 ConvNorm + SiLU.
class GapFusionImpl : public torch::nn::Cloneable<GapFusionImpl> {
 public:
  explicit GapFusionImpl(int64_t d) : d_(d) { reset(); }
  void reset() override { cv = register_module("cv", ConvNorm(d_, d_, 1, 1, Act::silu)); }
  torch::Tensor forward(const torch::Tensor& x) { return cv->forward(x + torch::adaptive_avg_pool2d(x, {1, 1})); }
  ConvNorm cv{nullptr};

 private:
  int64_t d_;
};
TORCH_MODULE(GapFusion);

struct LiteEncoderOptions {
  std::vector<int64_t> in_channels{256};  // one map
  std::vector<int64_t> feat_strides{16};
  int64_t hidden_dim = 64;
  double expansion = 0.34;
  double depth_mult = 0.5;
};

class LiteEncoderImpl : public torch::nn::Cloneable<LiteEncoderImpl> {
 public:
  explicit LiteEncoderImpl(LiteEncoderOptions o = {}) : o_(std::move(o)) {
    if (o_.in_channels.size() != 1) throw ConfigError("LiteEncoder: one input map, got " + std::to_string(o_.in_channels.size()));
    reset();
  }
  void reset() override {
    const int64_t d = o_.hidden_dim;
    input_proj = register_module("input_proj", torch::nn::ModuleList());
    torch::nn::Sequential proj;
    proj->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(o_.in_channels[0], d, 1).bias(false)));
    proj->push_back("norm", BatchNorm2d(d));
    input_proj->push_back(proj);
    down_sample1 = register_module("down_sample1", down_block(d));
    down_sample2 = register_module("down_sample2", down_block(d));
    bi_fusion = register_module("bi_fusion", GapFusion(d));
    // c4 = round(expansion x hidden // 2) (Python: floor division first, then round half to even).
    const auto c4 = static_cast<int64_t>(std::nearbyint(std::floor(o_.expansion * static_cast<double>(d) / 2.0)));
    const auto n = static_cast<int64_t>(std::nearbyint(3.0 * o_.depth_mult));
    fpn_block = register_module("fpn_block", RepNCSPELAN4(d, d, 2 * d, c4, n, Act::silu, /*csp2=*/true));
    pan_block = register_module("pan_block", RepNCSPELAN4(d, d, 2 * d, c4, n, Act::silu, /*csp2=*/true));
    // The original deep-copies one down_sample and one fuse_block (lite_encoder.py:90-91, 107-108).
    start_as_copies(ModulePtrs{down_sample1.ptr(), down_sample2.ptr()});
    start_as_copies(ModulePtrs{fpn_block.ptr(), pan_block.ptr()});
  }
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& feats) {
    TORCH_CHECK(feats.size() == 1, "LiteEncoder: expected 1 feature map, got ", feats.size());
    auto p16 = input_proj[0]->as<torch::nn::Sequential>()->forward(feats[0]);
    auto p32 = down_sample1->forward(p16);
    p32 = bi_fusion->forward(p32);
    auto up = torch::upsample_nearest2d(p32, {p32.size(2) * 2, p32.size(3) * 2});
    auto o16 = fpn_block->forward(p16 + up);
    auto o32 = pan_block->forward(p32 + down_sample2->forward(o16));
    return {o16, o32};
  }
  // The output channels (hidden_dim per level) and strides (the input's, then twice it).
  std::vector<int64_t> out_strides() const { return {o_.feat_strides[0], 2 * o_.feat_strides[0]}; }
  const LiteEncoderOptions& options() const { return o_; }

  torch::nn::ModuleList input_proj{nullptr};
  torch::nn::Sequential down_sample1{nullptr}, down_sample2{nullptr};
  GapFusion bi_fusion{nullptr};
  RepNCSPELAN4 fpn_block{nullptr}, pan_block{nullptr};

 private:
  // AvgPool2d(3, 2, 1) (count_include_pad), 1x1 conv, BN, SiLU: children 0..3 (1 and 2 hold the state).
  static torch::nn::Sequential down_block(int64_t d) {
    torch::nn::Sequential s;
    s->push_back(torch::nn::AvgPool2d(torch::nn::AvgPool2dOptions(3).stride(2).padding(1)));
    s->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(d, d, 1).bias(false)));
    s->push_back(BatchNorm2d(d));
    s->push_back(torch::nn::SiLU());
    return s;
  }
  LiteEncoderOptions o_;
};
TORCH_MODULE(LiteEncoder);

}  // namespace libreyolo::nn::detr
