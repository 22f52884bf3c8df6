#pragma once
// LingBot-Vision as the original builds it (libreyolo/models/lingbotvision/nn.py,
// LingBotVisionSemanticSegmenter): a DINOv3-style ViT/16 (patch embedding conv, a [CLS] token and 4
// storage tokens in front of the patch tokens, pre-norm blocks with LayerScale (init 1e-5), a fused QKV
// projection whose K third carries no bias (a persistent bias_mask buffer), axial RoPE over the patch grid
// (base 100, coordinates per axis in [-1, 1], fp32 tables), MLP or SwiGLU FFN, final LayerNorm) and the
// report's linear-probe head: one 1x1 conv over the patch-token grid. Input: RGB float in [0, 1] (ImageNet
// normalisation inside); output: logits [B, nc, H/16, W/16]. Names are the original's state-dict keys
// (backbone.blocks.0.attn.qkv.weight, backbone.rope_embed.periods, predict.weight, ...).
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/normalize.hpp>
#include <libreyolo/nn/vit.hpp>

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

namespace libreyolo::lingbot {

// The ViT pieces (nn/vit.hpp, shared with EC and DEIMv2).
using nn::vit::LinearKMaskedBias;
using nn::vit::LinearKMaskedBiasImpl;
using nn::vit::Mlp;
using nn::vit::MlpImpl;
using nn::vit::RopePositionEmbedding;
using nn::vit::RopePositionEmbeddingImpl;
using nn::vit::rope_apply;
using nn::vit::rope_rotate_half;
using SelfAttentionBlock = nn::vit::Block;
using SelfAttentionBlockImpl = nn::vit::BlockImpl;
using Backbone = nn::vit::ViT;

inline constexpr int64_t kPatch = 16;
inline constexpr int64_t kStorageTokens = 4;
inline constexpr double kLayerScaleInit = 1e-5;
inline constexpr double kLayerNormEps = 1e-5;

struct SizeConfig {
  int64_t embed_dim, depth, num_heads;
  bool swiglu, qkv_bias;
};

inline SizeConfig size_config(const std::string& size) {
  if (size == "s") return {384, 12, 6, false, true};
  if (size == "b") return {768, 12, 12, false, true};
  if (size == "l") return {1024, 24, 16, false, true};
  if (size == "g") return {1536, 40, 24, true, false};
  throw ConfigError("LingBot-Vision size '" + size + "' is unknown; allowed: s, b, l, g");
}

// The size's DINOv3 ViT: [CLS] + 4 storage tokens + a mask token, LayerScale 1e-5, the masked-K-bias QKV,
// LayerNorm eps 1e-5, FFN ratio 4 (MLP, or SwiGLU for g), a final norm.
inline nn::vit::ViTOptions vit_options(const SizeConfig& c) {
  nn::vit::ViTOptions o;
  o.block.dim = c.embed_dim;
  o.block.heads = c.num_heads;
  o.block.ffn_ratio = 4.0;
  o.block.swiglu = c.swiglu;
  o.block.qkv_bias = c.qkv_bias;
  o.block.mask_k_bias = true;
  o.block.layer_scale = kLayerScaleInit;
  o.block.ln_eps = kLayerNormEps;
  o.depth = c.depth;
  o.patch = kPatch;
  o.storage_tokens = kStorageTokens;
  o.mask_token = true;
  o.final_norm = true;
  o.owner = "LingBot-Vision";
  return o;
}

class LingBotImpl : public torch::nn::Cloneable<LingBotImpl> {
 public:
  LingBotImpl(std::string size, int64_t classes, bool freeze_backbone = true)
      : size_(std::move(size)), classes_(classes), freeze_(freeze_backbone) {
    reset();
  }
  void reset() override {
    if (classes_ < 1) throw ConfigError("LingBot-Vision: num_classes must be >= 1, got " + std::to_string(classes_));
    const auto c = size_config(size_);
    backbone = register_module("backbone", Backbone(vit_options(c)));
    predict = register_module("predict", torch::nn::Conv2d(torch::nn::Conv2dOptions(c.embed_dim, classes_, 1)));
    {
      // The head's init: the original's trunc_normal_(std 0.02) cuts at +-2 (absolute), 100 standard
      // deviations out, so it is a plain normal(0, 0.02); zero bias.
      torch::NoGradGuard ng;
      predict->weight.normal_(0.0, 0.02);
      predict->bias.zero_();
    }
    // The original's recipe trains the head only (the report's linear probe).
    if (freeze_)
      for (auto& p : backbone->parameters()) p.set_requires_grad(false);
  }
  // A deep copy (the EMA's) keeps the backbone frozen: LibTorch's clone rebuilds the children through
  // their own reset(), which knows nothing of the freeze.
  std::shared_ptr<torch::nn::Module> clone(const torch::optional<torch::Device>& device = torch::nullopt) const override {
    auto copy = torch::nn::Cloneable<LingBotImpl>::clone(device);
    if (freeze_)
      for (auto& p : std::dynamic_pointer_cast<LingBotImpl>(copy)->backbone->parameters()) p.set_requires_grad(false);
    return copy;
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto tokens = backbone->forward_layers(nn::imagenet_normalize(x), {backbone->options().depth - 1}, true)[0];
    const int64_t B = tokens.size(0), D = tokens.size(2), h = x.size(2) / kPatch, w = x.size(3) / kPatch;
    return predict->forward(tokens.transpose(1, 2).reshape({B, D, h, w}));
  }
  Backbone backbone{nullptr};
  torch::nn::Conv2d predict{nullptr};
  const std::string& size() const { return size_; }
  bool frozen() const { return freeze_; }

 private:
  std::string size_;
  int64_t classes_;
  bool freeze_;
};
TORCH_MODULE(LingBot);

}  // namespace libreyolo::lingbot
