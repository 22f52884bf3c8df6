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

// The ViT pieces LingBot shares with EC (nn/vit.hpp).
using nn::vit::Mlp;
using nn::vit::MlpImpl;
using nn::vit::RopePositionEmbedding;
using nn::vit::RopePositionEmbeddingImpl;
using nn::vit::rope_apply;
using nn::vit::rope_rotate_half;

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

inline torch::nn::LayerNorm layer_norm(int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kLayerNormEps));
}

class LayerScaleImpl : public torch::nn::Cloneable<LayerScaleImpl> {
 public:
  explicit LayerScaleImpl(int64_t dim) : dim_(dim) { reset(); }
  void reset() override { gamma = register_parameter("gamma", torch::full({dim_}, kLayerScaleInit)); }
  torch::Tensor forward(const torch::Tensor& x) { return x * gamma; }
  torch::Tensor gamma;

 private:
  int64_t dim_;
};
TORCH_MODULE(LayerScale);

class PatchEmbedImpl : public torch::nn::Cloneable<PatchEmbedImpl> {
 public:
  explicit PatchEmbedImpl(int64_t dim) : dim_(dim) { reset(); }
  void reset() override {
    proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, dim_, kPatch).stride(kPatch)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return proj->forward(x).permute({0, 2, 3, 1}); }  // B h w D
  torch::nn::Conv2d proj{nullptr};

 private:
  int64_t dim_;
};
TORCH_MODULE(PatchEmbed);


class SwiGLUFFNImpl : public torch::nn::Cloneable<SwiGLUFFNImpl> {
 public:
  SwiGLUFFNImpl(int64_t in, int64_t hidden, bool bias) : in_(in), hidden_(hidden), bias_(bias) { reset(); }
  void reset() override {
    const int64_t d = static_cast<int64_t>(double(hidden_) * 2 / 3);
    const int64_t h = d + ((8 - d % 8) % 8);
    w1 = register_module("w1", torch::nn::Linear(torch::nn::LinearOptions(in_, h).bias(bias_)));
    w2 = register_module("w2", torch::nn::Linear(torch::nn::LinearOptions(in_, h).bias(bias_)));
    w3 = register_module("w3", torch::nn::Linear(torch::nn::LinearOptions(h, in_).bias(bias_)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return w3->forward(torch::silu(w1->forward(x)) * w2->forward(x)); }
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};

 private:
  int64_t in_, hidden_;
  bool bias_;
};
TORCH_MODULE(SwiGLUFFN);


// The fused QKV projection whose bias is multiplied by bias_mask (the K third zeroed).
class LinearKMaskedBiasImpl : public torch::nn::Cloneable<LinearKMaskedBiasImpl> {
 public:
  LinearKMaskedBiasImpl(int64_t in, int64_t out, bool bias) : in_(in), out_(out), bias_(bias) { reset(); }
  void reset() override {
    if (out_ % 3 != 0) throw ConfigError("LingBot-Vision: fused QKV width must be divisible by 3");
    // LibTorch's Linear init (kaiming-uniform weight, uniform bias), as nn.Linear's.
    torch::nn::Linear lin(torch::nn::LinearOptions(in_, out_).bias(bias_));
    weight = register_parameter("weight", lin->weight.detach().clone());
    if (bias_) {
      bias = register_parameter("bias", lin->bias.detach().clone());
      auto mask = torch::ones({out_});
      mask.narrow(0, out_ / 3, out_ / 3).zero_();
      bias_mask = register_buffer("bias_mask", mask);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::nn::functional::linear(x, weight, bias_ ? bias * bias_mask.to(bias.scalar_type()) : torch::Tensor());
  }
  torch::Tensor weight, bias, bias_mask;

 private:
  int64_t in_, out_;
  bool bias_;
};
TORCH_MODULE(LinearKMaskedBias);

class SelfAttentionImpl : public torch::nn::Cloneable<SelfAttentionImpl> {
 public:
  SelfAttentionImpl(int64_t dim, int64_t heads, bool qkv_bias) : dim_(dim), heads_(heads), qkv_bias_(qkv_bias) { reset(); }
  void reset() override {
    qkv = register_module("qkv", LinearKMaskedBias(dim_, 3 * dim_, qkv_bias_));
    proj = register_module("proj", torch::nn::Linear(dim_, dim_));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& sin, const torch::Tensor& cos) {
    const int64_t B = x.size(0), N = x.size(1), C = x.size(2);
    auto t = qkv->forward(x).reshape({B, N, 3, heads_, C / heads_});
    auto q = t.select(2, 0).transpose(1, 2), k = t.select(2, 1).transpose(1, 2), v = t.select(2, 2).transpose(1, 2);
    if (sin.defined()) std::tie(q, k) = nn::vit::rope_patch_tokens(q, k, sin, cos);
    auto o = compat::scaled_dot_product_attention(q, k, v);
    return proj->forward(o.transpose(1, 2).reshape({B, N, C}));
  }
  LinearKMaskedBias qkv{nullptr};
  torch::nn::Linear proj{nullptr};

 private:
  int64_t dim_, heads_;
  bool qkv_bias_;
};
TORCH_MODULE(SelfAttention);

class SelfAttentionBlockImpl : public torch::nn::Cloneable<SelfAttentionBlockImpl> {
 public:
  SelfAttentionBlockImpl(SizeConfig c) : c_(c) { reset(); }
  void reset() override {
    const int64_t D = c_.embed_dim;
    norm1 = register_module("norm1", layer_norm(D));
    attn = register_module("attn", SelfAttention(D, c_.num_heads, c_.qkv_bias));
    ls1 = register_module("ls1", LayerScale(D));
    norm2 = register_module("norm2", layer_norm(D));
    if (c_.swiglu) swiglu = register_module("mlp", SwiGLUFFN(D, 4 * D, true));
    else mlp = register_module("mlp", Mlp(D, 4 * D, true));
    ls2 = register_module("ls2", LayerScale(D));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& sin, const torch::Tensor& cos) {
    auto y = x + ls1->forward(attn->forward(norm1->forward(x), sin, cos));
    auto h = norm2->forward(y);
    return y + ls2->forward(c_.swiglu ? swiglu->forward(h) : mlp->forward(h));
  }
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  SelfAttention attn{nullptr};
  LayerScale ls1{nullptr}, ls2{nullptr};
  Mlp mlp{nullptr};
  SwiGLUFFN swiglu{nullptr};

 private:
  SizeConfig c_;
};
TORCH_MODULE(SelfAttentionBlock);

class BackboneImpl : public torch::nn::Cloneable<BackboneImpl> {
 public:
  explicit BackboneImpl(SizeConfig c) : c_(c) { reset(); }
  void reset() override {
    const int64_t D = c_.embed_dim;
    patch_embed = register_module("patch_embed", PatchEmbed(D));
    cls_token = register_parameter("cls_token", torch::zeros({1, 1, D}));
    storage_tokens = register_parameter("storage_tokens", torch::zeros({1, kStorageTokens, D}));
    mask_token = register_parameter("mask_token", torch::zeros({1, D}));  // checkpoint compatibility only
    rope_embed = register_module("rope_embed", RopePositionEmbedding(D, c_.num_heads));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < c_.depth; ++i) blocks->push_back(SelfAttentionBlock(c_));
    norm = register_module("norm", layer_norm(D));
  }
  // -> patch tokens [B, h*w, D] after the final LayerNorm.
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
    if (H % kPatch || W % kPatch)
      throw ConfigError("LingBot-Vision: input " + std::to_string(H) + "x" + std::to_string(W) +
                        " must be divisible by the patch size 16 (give imgsz= a multiple of 16)");
    const int64_t h = H / kPatch, w = W / kPatch;
    auto tokens = patch_embed->forward(x).flatten(1, 2);
    auto prefix = torch::cat({cls_token, storage_tokens}, 1).expand({B, -1, -1});
    tokens = torch::cat({prefix, tokens}, 1);  // promotes as the original's cat does (fp32 under autocast)
    auto [sin, cos] = rope_embed->forward(h, w);
    for (const auto& b : *blocks) tokens = b->as<SelfAttentionBlockImpl>()->forward(tokens, sin, cos);
    tokens = norm->forward(tokens);
    return tokens.narrow(1, 1 + kStorageTokens, h * w);
  }
  PatchEmbed patch_embed{nullptr};
  torch::Tensor cls_token, storage_tokens, mask_token;
  RopePositionEmbedding rope_embed{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  int64_t embed_dim() const { return c_.embed_dim; }

 private:
  SizeConfig c_;
};
TORCH_MODULE(Backbone);

class LingBotImpl : public torch::nn::Cloneable<LingBotImpl> {
 public:
  LingBotImpl(std::string size, int64_t classes, bool freeze_backbone = true)
      : size_(std::move(size)), classes_(classes), freeze_(freeze_backbone) {
    reset();
  }
  void reset() override {
    if (classes_ < 1) throw ConfigError("LingBot-Vision: num_classes must be >= 1, got " + std::to_string(classes_));
    const auto c = size_config(size_);
    backbone = register_module("backbone", Backbone(c));
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
    auto tokens = backbone->forward(nn::imagenet_normalize(x));
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
