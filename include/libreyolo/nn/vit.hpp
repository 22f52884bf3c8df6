#pragma once
// Pieces the ViT backbones share (LingBot-Vision's DINOv3-style ViT, families/lingbot/network.hpp; EC's
// ECViT, families/ec/network.hpp): the GELU MLP (fc1, fc2), DINOv3's axial RoPE (periods base^(2i/(D/2)),
// i < D/4, a persistent `periods` buffer; patch-centre coordinates per axis normalised to [-1, 1]
// separately for H and W; fp32 tables sin/cos [h*w, D_head]) and its application to the patch tokens
// (rotate-half form). Both originals port DINOv3's RopePositionEmbedding with base 100 and
// normalize_coords "separate", in eval mode (no coordinate shift / jitter / rescale).
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <numbers>
#include <string>
#include <utility>

namespace libreyolo::nn::vit {

inline constexpr double kRopeBase = 100.0;

// fc2(gelu(fc1(x))) (exact GELU, nn.GELU's default).
class MlpImpl : public torch::nn::Cloneable<MlpImpl> {
 public:
  MlpImpl(int64_t in, int64_t hidden, bool bias) : in_(in), hidden_(hidden), bias_(bias) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(in_, hidden_).bias(bias_)));
    fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(hidden_, in_).bias(bias_)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2->forward(torch::gelu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  int64_t in_, hidden_;
  bool bias_;
};
TORCH_MODULE(Mlp);

// Axial RoPE tables for an h x w grid: sin, cos [h*w, d_head], fp32.
class RopePositionEmbeddingImpl : public torch::nn::Cloneable<RopePositionEmbeddingImpl> {
 public:
  RopePositionEmbeddingImpl(int64_t dim, int64_t heads, double base = kRopeBase) : dim_(dim), heads_(heads), base_(base) { reset(); }
  void reset() override {
    if (dim_ % (4 * heads_) != 0)
      throw ConfigError("ViT RoPE: embed_dim " + std::to_string(dim_) + " must be divisible by 4 * num_heads = " +
                        std::to_string(4 * heads_));
    const int64_t d_head = dim_ / heads_;
    auto periods = torch::pow(base_, 2 * torch::arange(d_head / 4, torch::kFloat32) / double(d_head / 2));
    this->periods = register_buffer("periods", periods);
  }
  std::pair<torch::Tensor, torch::Tensor> forward(int64_t H, int64_t W) {
    const auto o = torch::TensorOptions().dtype(torch::kFloat32).device(periods.device());
    auto ch = torch::arange(0.5, double(H), 1.0, o) / double(H);
    auto cw = torch::arange(0.5, double(W), 1.0, o) / double(W);
    auto grid = torch::meshgrid({ch, cw}, "ij");
    auto coords = torch::stack({grid[0], grid[1]}, -1).flatten(0, 1) * 2.0 - 1.0;                 // [HW, 2]
    auto angles = coords.unsqueeze(-1) * (2 * std::numbers::pi) / periods.to(torch::kFloat32).view({1, 1, -1});  // [HW, 2, D/4]
    angles = angles.flatten(1, 2).tile({2});                                                           // [HW, D]
    return {torch::sin(angles), torch::cos(angles)};
  }
  torch::Tensor periods;

 private:
  int64_t dim_, heads_;
  double base_;
};
TORCH_MODULE(RopePositionEmbedding);

inline torch::Tensor rope_rotate_half(const torch::Tensor& x) {
  auto c = x.chunk(2, -1);
  return torch::cat({-c[1], c[0]}, -1);
}
inline torch::Tensor rope_apply(const torch::Tensor& x, const torch::Tensor& sin, const torch::Tensor& cos) {
  return x * cos + rope_rotate_half(x) * sin;
}

// q, k [B, heads, N, D_head] with the RoPE applied to their last sin.size(-2) tokens (the patch tokens;
// the prefix tokens in front unrotated), in the tables' dtype, then cast back.
inline std::pair<torch::Tensor, torch::Tensor> rope_patch_tokens(torch::Tensor q, torch::Tensor k, const torch::Tensor& sin,
                                                                 const torch::Tensor& cos) {
  const int64_t N = q.size(2), prefix = N - sin.size(-2);
  const auto in_dtype = q.scalar_type();
  q = q.to(sin.scalar_type()), k = k.to(sin.scalar_type());
  q = torch::cat({q.narrow(2, 0, prefix), rope_apply(q.narrow(2, prefix, N - prefix), sin, cos)}, 2).to(in_dtype);
  k = torch::cat({k.narrow(2, 0, prefix), rope_apply(k.narrow(2, prefix, N - prefix), sin, cos)}, 2).to(in_dtype);
  return {q, k};
}

}  // namespace libreyolo::nn::vit
