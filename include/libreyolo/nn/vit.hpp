#pragma once
// The ViT pieces the backbones share: LingBot-Vision's DINOv3 ViT (families/lingbot/network.hpp), EC's
// ECViT (families/ec/network.hpp) and DEIMv2's ViT-Tiny / DINOv3 ViTs (families/deimv2/network.hpp).
//   * the GELU MLP (fc1, fc2) and DINOv3's SwiGLU FFN (w1, w2, w3; hidden int(2/3 h) rounded up to 8);
//   * DINOv3's axial RoPE (periods base^(2i/(D/2)), i < D/4, a persistent `periods` buffer; patch-centre
//     coordinates per axis normalised to [-1, 1] separately for H and W; fp32 tables sin/cos [h*w,
//     D_head]) and its application to the patch tokens (rotate-half form; q and k in one pass over
//     prefix-padded tables, token_rope / rope_qk), base 100, normalize_coords
//     "separate"; eval mode has no coordinate shift / jitter / rescale, training mode has DINOv3's
//     rescale_coords where given (DEIMv2 l / x: 2; the others none);
//   * the pre-norm block (Block: norm1, attn (a fused QKV, optionally DINOv3's LinearKMaskedBias whose K
//     third has no bias; RoPE on the patch tokens; SDPA; proj), optional LayerScale ls1 / ls2, norm2, mlp),
//     its options covering ECViT's, ViT-Tiny's (both: LayerNorm eps 1e-6, no LayerScale, plain QKV) and
//     DINOv3's (eps 1e-5, LayerScale, masked K bias, MLP or SwiGLU);
//   * the DINOv3-style token ViT (ViT: a patch-embedding conv, a [CLS] token, optional storage (register)
//     tokens and mask token, the blocks, an optional final norm), giving the patch tokens of chosen blocks.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

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

// Axial RoPE tables for an h x w grid: sin, cos [h*w, d_head], fp32. rescale_coords r > 0 (DINOv3's, in
// training mode only): the coordinates times one log-uniform factor in [1/r, r] per call.
class RopePositionEmbeddingImpl : public torch::nn::Cloneable<RopePositionEmbeddingImpl> {
 public:
  RopePositionEmbeddingImpl(int64_t dim, int64_t heads, double base = kRopeBase, double rescale_coords = 0.0)
      : dim_(dim), heads_(heads), base_(base), rescale_(rescale_coords) {
    reset();
  }
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
    if (is_training() && rescale_ > 0)
      coords = coords * torch::empty({1}, o).uniform_(-std::log(rescale_), std::log(rescale_)).exp();
    auto angles = coords.unsqueeze(-1) * (2 * std::numbers::pi) / periods.to(torch::kFloat32).view({1, 1, -1});  // [HW, 2, D/4]
    angles = angles.flatten(1, 2).tile({2});                                                           // [HW, D]
    return {torch::sin(angles), torch::cos(angles)};
  }
  torch::Tensor periods;

 private:
  int64_t dim_, heads_;
  double base_, rescale_;
};
TORCH_MODULE(RopePositionEmbedding);

inline torch::Tensor rope_rotate_half(const torch::Tensor& x) {
  auto c = x.chunk(2, -1);
  return torch::cat({-c[1], c[0]}, -1);
}
inline torch::Tensor rope_apply(const torch::Tensor& x, const torch::Tensor& sin, const torch::Tensor& cos) {
  return x * cos + rope_rotate_half(x) * sin;
}

// The RoPE tables of a block's attention over all N tokens, built once per forward from the patch tokens'
// [h*w, D_head] tables (RopePositionEmbedding) and the prefix count: the prefix tokens' rows are the
// identity (cos 1, sin 0), so they pass unrotated, and sin's first half is negated (signed_sin) so that
// rotate_half(x) * sin = roll(x, D/2) * signed_sin. Negation is exact, so every product, and the rotated
// q and k, equal the rotate-half form's (rope_apply) element for element. Shapes [N, 1, 1, D_head], to
// broadcast over the [B, N, 2, heads, D_head] q/k view of the fused QKV. Undefined tensors: no RoPE.
struct TokenRope {
  torch::Tensor cos, signed_sin;
  bool defined() const { return cos.defined(); }
};
inline TokenRope token_rope(const torch::Tensor& sin, const torch::Tensor& cos, int64_t n_prefix) {
  const int64_t D = sin.size(-1), half = D / 2;
  auto s = torch::cat({-sin.narrow(-1, 0, half), sin.narrow(-1, half, D - half)}, -1), c = cos;
  if (n_prefix > 0) {
    s = torch::cat({torch::zeros({n_prefix, D}, s.options()), s}, 0);
    c = torch::cat({torch::ones({n_prefix, D}, c.options()), c}, 0);
  }
  return {c.view({-1, 1, 1, D}), s.view({-1, 1, 1, D})};
}

// q and k rotated together: qk [B, N, 2, heads, D_head] in the tables' dtype (fp32: the originals cast q
// and k to the RoPE dtype), x cos + roll(x, D/2) x signed_sin, cast back. Six kernels forward where the
// per-tensor rotate-half form on the patch-token slices took sixteen (a host-bound eager step's cost).
inline torch::Tensor rope_qk(const torch::Tensor& qk, const TokenRope& r) {
  const auto in_dtype = qk.scalar_type();
  auto x = qk.to(r.cos.scalar_type());
  return (x * r.cos + x.roll(x.size(-1) / 2, -1) * r.signed_sin).to(in_dtype);
}

// DINOv3's LayerScale: x * gamma (gamma initialised to `init`).
class LayerScaleImpl : public torch::nn::Cloneable<LayerScaleImpl> {
 public:
  LayerScaleImpl(int64_t dim, double init) : dim_(dim), init_(init) { reset(); }
  void reset() override { gamma = register_parameter("gamma", torch::full({dim_}, init_)); }
  torch::Tensor forward(const torch::Tensor& x) { return x * gamma; }
  torch::Tensor gamma;

 private:
  int64_t dim_;
  double init_;
};
TORCH_MODULE(LayerScale);

// DINOv3's SwiGLU FFN: w3(silu(w1 x) * w2 x), hidden width int(hidden * 2 / 3) rounded up to a multiple of 8.
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

// The fused QKV projection (weight, bias). mask_k (DINOv3's LinearKMaskedBias): the bias is multiplied by
// a persistent bias_mask buffer, ones with the K third zeroed. LibTorch's Linear init (nn.Linear's).
class LinearKMaskedBiasImpl : public torch::nn::Cloneable<LinearKMaskedBiasImpl> {
 public:
  LinearKMaskedBiasImpl(int64_t in, int64_t out, bool bias, bool mask_k = true) : in_(in), out_(out), bias_(bias), mask_k_(mask_k) {
    reset();
  }
  void reset() override {
    if (out_ % 3 != 0) throw ConfigError("ViT: fused QKV width must be divisible by 3");
    torch::nn::Linear lin(torch::nn::LinearOptions(in_, out_).bias(bias_));
    weight = register_parameter("weight", lin->weight.detach().clone());
    if (bias_) {
      bias = register_parameter("bias", lin->bias.detach().clone());
      if (mask_k_) {
        auto mask = torch::ones({out_});
        mask.narrow(0, out_ / 3, out_ / 3).zero_();
        bias_mask = register_buffer("bias_mask", mask);
      }
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor b;
    if (bias_) b = mask_k_ ? bias * bias_mask.to(bias.scalar_type()) : bias;
    return torch::nn::functional::linear(x, weight, b);
  }
  torch::Tensor weight, bias, bias_mask;

 private:
  int64_t in_, out_;
  bool bias_, mask_k_;
};
TORCH_MODULE(LinearKMaskedBias);

struct BlockOptions {
  int64_t dim = 384, heads = 6;
  double ffn_ratio = 4.0;      // the FFN's hidden width int(dim * ffn_ratio)
  bool swiglu = false;         // SwiGLU FFN (w1, w2, w3) instead of the GELU MLP (fc1, fc2)
  bool qkv_bias = true;
  bool mask_k_bias = false;    // DINOv3's LinearKMaskedBias (a bias_mask buffer)
  double layer_scale = 0.0;    // LayerScale ls1 / ls2 with this init; 0: none
  double ln_eps = 1e-6;
};

// Attention: the fused QKV, RoPE on the patch tokens (where the tables are given: token_rope's, the prefix
// tokens in front unrotated), SDPA, proj.
class SelfAttentionImpl : public torch::nn::Cloneable<SelfAttentionImpl> {
 public:
  explicit SelfAttentionImpl(BlockOptions o) : o_(o) { reset(); }
  void reset() override {
    qkv = register_module("qkv", LinearKMaskedBias(o_.dim, 3 * o_.dim, o_.qkv_bias, o_.mask_k_bias));
    proj = register_module("proj", torch::nn::Linear(o_.dim, o_.dim));
  }
  torch::Tensor forward(const torch::Tensor& x, const TokenRope& rope) {
    const int64_t B = x.size(0), N = x.size(1), C = x.size(2);
    auto t = qkv->forward(x).reshape({B, N, 3, o_.heads, C / o_.heads});
    auto qk = rope.defined() ? rope_qk(t.narrow(2, 0, 2), rope) : t;
    auto q = qk.select(2, 0).transpose(1, 2), k = qk.select(2, 1).transpose(1, 2), v = t.select(2, 2).transpose(1, 2);
    auto o = compat::scaled_dot_product_attention(q, k, v);
    return proj->forward(o.transpose(1, 2).reshape({B, N, C}));
  }
  LinearKMaskedBias qkv{nullptr};
  torch::nn::Linear proj{nullptr};

 private:
  BlockOptions o_;
};
TORCH_MODULE(SelfAttention);

// The pre-norm block: x + ls1(attn(norm1 x)), then + ls2(mlp(norm2 x)) (ls: LayerScale where
// layer_scale > 0, else identity).
class BlockImpl : public torch::nn::Cloneable<BlockImpl> {
 public:
  explicit BlockImpl(BlockOptions o) : o_(o) { reset(); }
  void reset() override {
    const int64_t D = o_.dim, hidden = static_cast<int64_t>(double(D) * o_.ffn_ratio);
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D}).eps(o_.ln_eps)));
    attn = register_module("attn", SelfAttention(o_));
    if (o_.layer_scale > 0) ls1 = register_module("ls1", LayerScale(D, o_.layer_scale));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D}).eps(o_.ln_eps)));
    if (o_.swiglu) swiglu = register_module("mlp", SwiGLUFFN(D, hidden, true));
    else mlp = register_module("mlp", Mlp(D, hidden, true));
    if (o_.layer_scale > 0) ls2 = register_module("ls2", LayerScale(D, o_.layer_scale));
  }
  torch::Tensor forward(const torch::Tensor& x, const TokenRope& rope) {
    auto a = attn->forward(norm1->forward(x), rope);
    auto y = x + (ls1 ? ls1->forward(a) : a);
    auto h = norm2->forward(y);
    auto m = swiglu ? swiglu->forward(h) : mlp->forward(h);
    return y + (ls2 ? ls2->forward(m) : m);
  }
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  SelfAttention attn{nullptr};
  LayerScale ls1{nullptr}, ls2{nullptr};
  Mlp mlp{nullptr};
  SwiGLUFFN swiglu{nullptr};

 private:
  BlockOptions o_;
};
TORCH_MODULE(Block);

// The original ViTs' init of their Linear layers (timm's / DINOv3's): weight trunc_normal_(std 0.02), cut
// at +-2 absolute (100 standard deviations out, so a normal), bias zero; the fused QKV included.
inline void init_linears_trunc_normal(torch::nn::Module& m) {
  torch::NoGradGuard ng;
  for (auto& c : m.modules(/*include_self=*/false)) {
    torch::Tensor w, b;
    if (auto* l = c->as<torch::nn::LinearImpl>()) w = l->weight, b = l->bias;
    else if (auto* q = c->as<LinearKMaskedBiasImpl>()) w = q->weight, b = q->bias;
    else continue;
    w.normal_(0.0, 0.02);
    if (b.defined()) b.zero_();
  }
}

// The patch embedding: a patch x patch / patch conv (proj); -> [B, h, w, D].
class PatchEmbedImpl : public torch::nn::Cloneable<PatchEmbedImpl> {
 public:
  PatchEmbedImpl(int64_t dim, int64_t patch) : dim_(dim), patch_(patch) { reset(); }
  void reset() override {
    proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, dim_, patch_).stride(patch_)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return proj->forward(x).permute({0, 2, 3, 1}); }
  torch::nn::Conv2d proj{nullptr};

 private:
  int64_t dim_, patch_;
};
TORCH_MODULE(PatchEmbed);

struct ViTOptions {
  BlockOptions block;
  int64_t depth = 12, patch = 16;
  int64_t storage_tokens = 0;   // DINOv3's register tokens after the [CLS] token
  bool mask_token = false;      // DINOv3's mask_token (added x 0 to the [CLS] token, as its forward)
  bool final_norm = true;       // a LayerNorm `norm` (eps as the blocks')
  double rope_rescale = 0.0;    // RopePositionEmbedding's rescale_coords (training only)
  std::string owner = "ViT";    // for messages
};

// The token ViT: [CLS] (+ storage tokens) + the patch tokens through the blocks, RoPE on the patch tokens.
class ViTImpl : public torch::nn::Cloneable<ViTImpl> {
 public:
  explicit ViTImpl(ViTOptions o) : o_(std::move(o)) { reset(); }
  void reset() override {
    const int64_t D = o_.block.dim;
    patch_embed = register_module("patch_embed", PatchEmbed(D, o_.patch));
    cls_token = register_parameter("cls_token", torch::zeros({1, 1, D}));
    if (o_.storage_tokens > 0) storage_tokens = register_parameter("storage_tokens", torch::zeros({1, o_.storage_tokens, D}));
    if (o_.mask_token) mask_token = register_parameter("mask_token", torch::zeros({1, D}));
    rope_embed = register_module("rope_embed", RopePositionEmbedding(D, o_.block.heads, kRopeBase, o_.rope_rescale));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < o_.depth; ++i) blocks->push_back(Block(o_.block));
    if (o_.final_norm) norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({D}).eps(o_.block.ln_eps)));
  }
  // The patch tokens [B, h*w, D] after each block in `layers` (ascending), through the final norm where
  // `normed`.
  std::vector<torch::Tensor> forward_layers(const torch::Tensor& x, const std::vector<int64_t>& layers, bool normed) {
    const int64_t B = x.size(0), H = x.size(2), W = x.size(3), p = o_.patch;
    if (H % p || W % p)
      throw ConfigError(o_.owner + ": input " + std::to_string(H) + "x" + std::to_string(W) + " must be divisible by the patch size " +
                        std::to_string(p) + " (give imgsz= a multiple of " + std::to_string(p) + ")");
    const int64_t h = H / p, w = W / p;
    auto tokens = patch_embed->forward(x).flatten(1, 2);
    auto cls = mask_token.defined() ? cls_token + 0 * mask_token : cls_token;
    auto prefix = storage_tokens.defined() ? torch::cat({cls, storage_tokens}, 1) : cls;
    const int64_t n_prefix = prefix.size(1);
    tokens = torch::cat({prefix.expand({B, -1, -1}), tokens}, 1);  // promotes as the originals' cat (fp32 under autocast)
    auto [sin, cos] = rope_embed->forward(h, w);
    const TokenRope rope = token_rope(sin, cos, n_prefix);
    std::vector<torch::Tensor> outs;
    for (int64_t i = 0; i < o_.depth; ++i) {
      tokens = blocks[i]->as<BlockImpl>()->forward(tokens, rope);
      if (std::find(layers.begin(), layers.end(), i) == layers.end()) continue;
      auto t = normed ? norm->forward(tokens) : tokens;
      outs.push_back(t.narrow(1, n_prefix, h * w));
    }
    return outs;
  }
  PatchEmbed patch_embed{nullptr};
  torch::Tensor cls_token, storage_tokens, mask_token;
  RopePositionEmbedding rope_embed{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  const ViTOptions& options() const { return o_; }

 private:
  ViTOptions o_;
};
TORCH_MODULE(ViT);

}  // namespace libreyolo::nn::vit
