#pragma once
// RF-DETR's backbone (families/rfdetr/network.hpp has the whole network's description): the size table and
// constants, the windowed DINOv2 encoder (`backbone.0.encoder`), the multi-scale projector
// (`backbone.0.projector`), the sine position encoding (`backbone.1`) and the Joiner that holds them
// (`backbone`), with the original's module names.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <set>
#include <string>
#include <vector>

namespace libreyolo::families::rfdetr {

namespace detr = libreyolo::nn::detr;

// ---- configuration ------------------------------------------------------------------------------
// One row of the original's RFDETR_CONFIGS (models/rfdetr/nn.py) with the fixed arguments of its
// _make_args (hidden 256, patch 16, 2 x 2 windows, 8 / 16 heads, 2 points, 300 queries, group_detr 13,
// dim_feedforward 2048, out_feature_indexes 3 6 9 12, projector P4) and DINOv2-small's config.
struct RFDETRSizeConfig {
  int64_t dec_layers;
  int64_t resolution;                // the input size the original uses (INPUT_SIZES)
  int64_t positional_encoding_size;  // the position-embedding grid (resolution / 16)
};

inline const RFDETRSizeConfig* rfdetr_size(const std::string& size) {
  static const RFDETRSizeConfig n{2, 384, 24};
  static const RFDETRSizeConfig s{3, 512, 32};
  static const RFDETRSizeConfig m{4, 576, 36};
  static const RFDETRSizeConfig l{4, 704, 44};
  if (size == "n") return &n;
  if (size == "s") return &s;
  if (size == "m") return &m;
  if (size == "l") return &l;
  return nullptr;
}

inline constexpr int64_t kHiddenDim = 256;
inline constexpr int64_t kPatch = 16;
inline constexpr int64_t kNumWindows = 2;
inline constexpr int64_t kVitDim = 384;  // dinov2 "small"
inline constexpr int64_t kVitHeads = 6;
inline constexpr int64_t kVitDepth = 12;
inline constexpr double kVitMlpRatio = 4.0;
inline constexpr double kVitEps = 1e-6;
inline constexpr std::array<int64_t, 4> kOutFeatureIndexes{3, 6, 9, 12};  // stages: hidden_states[i] = after layer i-1
inline constexpr int64_t kSelfAttnHeads = 8;
inline constexpr int64_t kCrossAttnHeads = 16;
inline constexpr int64_t kDecPoints = 2;
inline constexpr int64_t kDimFeedforward = 2048;
inline constexpr int64_t kProjectorBlocks = 3;
inline constexpr double kProjectorEps = 1e-6;

struct RFDETROptions {
  std::string size = "n";      // n | s | m | l
  int64_t num_classes = 80;    // the head has num_classes + 1 logits (the original's build_model)
  int64_t num_queries = 300;
  int64_t group_detr = 13;
  bool imagenet_norm = true;   // normalise [0, 1] RGB inside encode() (see the header comment)
};

// ---- DINOv2 (windowed, no registers) ------------------------------------------------------------
// Dinov2WithRegistersLayerScale: x * lambda1.
class Dinov2LayerScaleImpl : public torch::nn::Cloneable<Dinov2LayerScaleImpl> {
 public:
  explicit Dinov2LayerScaleImpl(int64_t dim, double init = 1.0) : dim_(dim), init_(init) { reset(); }
  void reset() override { lambda1 = register_parameter("lambda1", torch::full({dim_}, init_)); }
  torch::Tensor forward(const torch::Tensor& x) { return x * lambda1; }
  torch::Tensor lambda1;

 private:
  int64_t dim_;
  double init_;
};
TORCH_MODULE(Dinov2LayerScale);

// Dinov2WithRegistersSelfAttention: separate query / key / value Linears; softmax(q k^T / sqrt(d)) v
// (the eager and the SDPA classes compute the same).
class Dinov2SelfAttentionImpl : public torch::nn::Cloneable<Dinov2SelfAttentionImpl> {
 public:
  Dinov2SelfAttentionImpl(int64_t dim, int64_t heads) : dim_(dim), heads_(heads) { reset(); }
  void reset() override {
    if (dim_ % heads_ != 0) throw ConfigError("RF-DETR DINOv2: hidden size not divisible by the head count");
    query = register_module("query", torch::nn::Linear(dim_, dim_));
    key = register_module("key", torch::nn::Linear(dim_, dim_));
    value = register_module("value", torch::nn::Linear(dim_, dim_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), N = x.size(1), d = dim_ / heads_;
    auto split = [&](const torch::Tensor& t) { return t.view({B, N, heads_, d}).permute({0, 2, 1, 3}); };
    auto q = split(detr::linear(query, x)), k = split(detr::linear(key, x)), v = split(detr::linear(value, x));
    auto o = compat::scaled_dot_product_attention(q, k, v);
    return o.permute({0, 2, 1, 3}).reshape({B, N, dim_});
  }
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  int64_t dim_, heads_;
};
TORCH_MODULE(Dinov2SelfAttention);

// Dinov2WithRegistersSelfOutput: dense (the residual is the layer's).
class Dinov2SelfOutputImpl : public torch::nn::Cloneable<Dinov2SelfOutputImpl> {
 public:
  explicit Dinov2SelfOutputImpl(int64_t dim) : dim_(dim) { reset(); }
  void reset() override { dense = register_module("dense", torch::nn::Linear(dim_, dim_)); }
  torch::Tensor forward(const torch::Tensor& x) { return detr::linear(dense, x); }
  torch::nn::Linear dense{nullptr};

 private:
  int64_t dim_;
};
TORCH_MODULE(Dinov2SelfOutput);

// Dinov2WithRegistersAttention: attention (the self-attention), output (its projection).
class Dinov2AttentionImpl : public torch::nn::Cloneable<Dinov2AttentionImpl> {
 public:
  Dinov2AttentionImpl(int64_t dim, int64_t heads) : dim_(dim), heads_(heads) { reset(); }
  void reset() override {
    attention = register_module("attention", Dinov2SelfAttention(dim_, heads_));
    output = register_module("output", Dinov2SelfOutput(dim_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return output->forward(attention->forward(x)); }
  Dinov2SelfAttention attention{nullptr};
  Dinov2SelfOutput output{nullptr};

 private:
  int64_t dim_, heads_;
};
TORCH_MODULE(Dinov2Attention);

// Dinov2WithRegistersMLP: fc2(gelu(fc1(x))), exact GELU (ACT2FN["gelu"]). nn::vit::Mlp has the same names
// and math, but its LinearImpl::forward runs a 3-D input as matmul + add (LibTorch 1.13's functional
// linear); the original's F.linear is at::linear (one fused addmm), as detr::linear here, which keeps the
// rounding closer to the original's.
class Dinov2MLPImpl : public torch::nn::Cloneable<Dinov2MLPImpl> {
 public:
  Dinov2MLPImpl(int64_t dim, int64_t hidden) : dim_(dim), hidden_(hidden) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(dim_, hidden_));
    fc2 = register_module("fc2", torch::nn::Linear(hidden_, dim_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return detr::linear(fc2, torch::gelu(detr::linear(fc1, x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  int64_t dim_, hidden_;
};
TORCH_MODULE(Dinov2MLP);

// WindowedDinov2WithRegistersLayer: pre-norm block; x [B * nw^2, T, D] (window-major within an image).
// full_attention: the image's windows attend together (viewed as [B, nw^2 * T, D] for the attention only).
class Dinov2LayerImpl : public torch::nn::Cloneable<Dinov2LayerImpl> {
 public:
  Dinov2LayerImpl(int64_t dim, int64_t heads, int64_t num_windows) : dim_(dim), heads_(heads), nw_(num_windows) { reset(); }
  void reset() override {
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim_}).eps(kVitEps)));
    attention = register_module("attention", Dinov2Attention(dim_, heads_));
    layer_scale1 = register_module("layer_scale1", Dinov2LayerScale(dim_));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim_}).eps(kVitEps)));
    mlp = register_module("mlp", Dinov2MLP(dim_, static_cast<int64_t>(double(dim_) * kVitMlpRatio)));
    layer_scale2 = register_module("layer_scale2", Dinov2LayerScale(dim_));
  }
  torch::Tensor forward(const torch::Tensor& x, bool full_attention) {
    auto h = x;
    const int64_t BW = x.size(0), T = x.size(1), C = x.size(2), nw2 = nw_ * nw_;
    if (full_attention) h = h.view({BW / nw2, nw2 * T, C});
    auto a = attention->forward(norm1->forward(h));
    if (full_attention) a = a.view({BW, T, C});
    auto y = layer_scale1->forward(a) + x;
    return layer_scale2->forward(mlp->forward(norm2->forward(y))) + y;
  }
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  Dinov2Attention attention{nullptr};
  Dinov2LayerScale layer_scale1{nullptr}, layer_scale2{nullptr};
  Dinov2MLP mlp{nullptr};

 private:
  int64_t dim_, heads_, nw_;
};
TORCH_MODULE(Dinov2Layer);

// Dinov2WithRegistersPatchEmbeddings: projection (a patch x patch / patch conv with bias).
class Dinov2PatchEmbeddingsImpl : public torch::nn::Cloneable<Dinov2PatchEmbeddingsImpl> {
 public:
  Dinov2PatchEmbeddingsImpl(int64_t dim, int64_t patch) : dim_(dim), patch_(patch) { reset(); }
  void reset() override {
    projection = register_module("projection", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, dim_, patch_).stride(patch_)));
  }
  // [B, 3, H, W] -> [B, h*w, D]
  torch::Tensor forward(const torch::Tensor& x) { return projection->forward(x).flatten(2).transpose(1, 2); }
  torch::nn::Conv2d projection{nullptr};

 private:
  int64_t dim_, patch_;
};
TORCH_MODULE(Dinov2PatchEmbeddings);

// WindowedDinov2WithRegistersEmbeddings: cls_token, mask_token (a parameter the detector never uses: no
// masked positions), position_embeddings [1, grid^2 + 1, D], patch_embeddings; the windowing.
class Dinov2EmbeddingsImpl : public torch::nn::Cloneable<Dinov2EmbeddingsImpl> {
 public:
  Dinov2EmbeddingsImpl(int64_t dim, int64_t patch, int64_t grid, int64_t num_windows)
      : dim_(dim), patch_(patch), grid_(grid), nw_(num_windows) {
    reset();
  }
  void reset() override {
    cls_token = register_parameter("cls_token", torch::zeros({1, 1, dim_}));
    mask_token = register_parameter("mask_token", torch::zeros({1, dim_}));
    position_embeddings = register_parameter("position_embeddings", torch::zeros({1, grid_ * grid_ + 1, dim_}));
    patch_embeddings = register_module("patch_embeddings", Dinov2PatchEmbeddings(dim_, patch_));
  }

  // interpolate_pos_encoding: the stored embeddings when the image has as many patches as positions and
  // is square; else the patch part resampled (bicubic, antialiased, align_corners false, in float32) to
  // the image's h x w grid.
  torch::Tensor pos_encoding(int64_t num_patches, int64_t H, int64_t W) const {
    const int64_t num_positions = position_embeddings.size(1) - 1;
    if (num_patches == num_positions && H == W) return position_embeddings;
    auto cls_pos = position_embeddings.narrow(1, 0, 1);
    const auto s = static_cast<int64_t>(std::sqrt(static_cast<double>(num_positions)));
    auto patch_pos = position_embeddings.narrow(1, 1, num_positions).reshape({1, s, s, dim_}).permute({0, 3, 1, 2});
    const auto dtype = patch_pos.scalar_type();
    namespace F = torch::nn::functional;
    patch_pos = F::interpolate(patch_pos.to(torch::kFloat32), F::InterpolateFuncOptions()
                                                                  .size(std::vector<int64_t>{H / patch_, W / patch_})
                                                                  .mode(torch::kBicubic)
                                                                  .align_corners(false)
                                                                  .antialias(true))
                    .to(dtype);
    patch_pos = patch_pos.permute({0, 2, 3, 1}).reshape({1, -1, dim_});
    return torch::cat({cls_pos, patch_pos}, 1);
  }

  // [B, 3, H, W] -> [B * nw^2, 1 + (h/nw)*(w/nw), D]: per window its [CLS] token (+ its position) and
  // its patch tokens, windows row-major within an image, images outer.
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), H = x.size(2), W = x.size(3);
    auto emb = patch_embeddings->forward(x.to(patch_embeddings->projection->weight.scalar_type()));
    emb = torch::cat({cls_token.expand({B, -1, -1}), emb}, 1);
    emb = emb + pos_encoding(emb.size(1) - 1, H, W);
    if (nw_ <= 1) return emb;
    const int64_t h = H / patch_, w = W / patch_, hw = h / nw_, ww = w / nw_, D = emb.size(2);
    auto cls = emb.narrow(1, 0, 1);
    auto pix = emb.narrow(1, 1, h * w).reshape({B * nw_, hw, nw_, ww, D}).permute({0, 2, 1, 3, 4}).reshape({B * nw_ * nw_, hw * ww, D});
    // As the original: the [CLS] + position rows repeated nw^2 times (image-minor, where the windows are
    // image-major; the rows are the same for every image, so each window gets its image's).
    return torch::cat({cls.repeat({nw_ * nw_, 1, 1}), pix}, 1);
  }
  torch::Tensor cls_token, mask_token, position_embeddings;
  Dinov2PatchEmbeddings patch_embeddings{nullptr};

 private:
  int64_t dim_, patch_, grid_, nw_;
};
TORCH_MODULE(Dinov2Embeddings);

// WindowedDinov2WithRegistersEncoder: layer.{0..11}.
class Dinov2EncoderImpl : public torch::nn::Cloneable<Dinov2EncoderImpl> {
 public:
  Dinov2EncoderImpl(int64_t dim, int64_t heads, int64_t depth, int64_t num_windows) : dim_(dim), heads_(heads), depth_(depth), nw_(num_windows) {
    reset();
  }
  void reset() override {
    layer = register_module("layer", torch::nn::ModuleList());
    for (int64_t i = 0; i < depth_; ++i) layer->push_back(Dinov2Layer(dim_, heads_, nw_));
  }
  torch::nn::ModuleList layer{nullptr};

 private:
  int64_t dim_, heads_, depth_, nw_;
};
TORCH_MODULE(Dinov2Encoder);

// WindowedDinov2WithRegistersBackbone (embeddings, encoder, layernorm): -> the out_feature stages' maps
// [B, D, H/16, W/16] (through layernorm, [CLS] dropped, windows merged).
class WindowedDinov2Impl : public torch::nn::Cloneable<WindowedDinov2Impl> {
 public:
  WindowedDinov2Impl(int64_t grid, int64_t num_windows) : grid_(grid), nw_(num_windows) { reset(); }
  void reset() override {
    embeddings = register_module("embeddings", Dinov2Embeddings(kVitDim, kPatch, grid_, nw_));
    encoder = register_module("encoder", Dinov2Encoder(kVitDim, kVitHeads, kVitDepth, nw_));
    layernorm = register_module("layernorm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kVitDim}).eps(kVitEps)));
    // window_block_indexes = {0 .. last out index} minus the out indexes: the other layers attend in full.
    std::set<int64_t> windowed;
    for (int64_t i = 0; i <= kOutFeatureIndexes.back(); ++i) windowed.insert(i);
    for (auto i : kOutFeatureIndexes) windowed.erase(i);
    full_attention_.assign(static_cast<size_t>(kVitDepth), false);
    for (int64_t i = 0; i < kVitDepth; ++i) full_attention_[static_cast<size_t>(i)] = !windowed.count(i);
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    const int64_t B = x.size(0), H = x.size(2), W = x.size(3), block = kPatch * nw_;
    if (H % block || W % block)
      throw ConfigError("RF-DETR: input " + std::to_string(H) + "x" + std::to_string(W) + " must be divisible by " +
                        std::to_string(block) + " (patch size x windows; give imgsz= a multiple of " + std::to_string(block) + ")");
    const int64_t h = H / kPatch, w = W / kPatch;
    auto hidden = embeddings->forward(x);
    std::vector<torch::Tensor> outs;
    for (int64_t i = 0; i < kVitDepth; ++i) {
      hidden = encoder->layer[i]->as<Dinov2LayerImpl>()->forward(hidden, full_attention_[static_cast<size_t>(i)]);
      if (std::find(kOutFeatureIndexes.begin(), kOutFeatureIndexes.end(), i + 1) == kOutFeatureIndexes.end()) continue;
      auto t = layernorm->forward(hidden);
      t = t.narrow(1, 1, t.size(1) - 1);  // the [CLS] token (no register tokens)
      const int64_t C = t.size(2);
      if (nw_ > 1) {
        const int64_t BW = t.size(0), T = t.size(1), nw2 = nw_ * nw_;
        t = t.reshape({BW / nw2, nw2 * T, C}).reshape({(BW / nw2) * nw_, nw_, h / nw_, w / nw_, C}).permute({0, 2, 1, 3, 4});
      }
      outs.push_back(t.reshape({B, h, w, C}).permute({0, 3, 1, 2}).contiguous());
    }
    return outs;
  }
  Dinov2Embeddings embeddings{nullptr};
  Dinov2Encoder encoder{nullptr};
  torch::nn::LayerNorm layernorm{nullptr};

 private:
  int64_t grid_, nw_;
  std::vector<bool> full_attention_;
};
TORCH_MODULE(WindowedDinov2);

// backbone.py DinoV2: encoder (the windowed DINOv2).
class DinoV2Impl : public torch::nn::Cloneable<DinoV2Impl> {
 public:
  explicit DinoV2Impl(int64_t grid) : grid_(grid) { reset(); }
  void reset() override {
    encoder = register_module("encoder", WindowedDinov2(grid_, kNumWindows));
    // The original's post_init (_init_weights): Linear / Conv2d weights trunc_normal(0, 0.02) (cut at +-2
    // absolute: a normal), zero biases, LayerNorm 1 / 0, position embeddings and [CLS] trunc_normal(0,
    // 0.02); mask_token zeros, LayerScale 1.0 as built.
    torch::NoGradGuard ng;
    for (auto& m : encoder->modules(/*include_self=*/false)) {
      if (auto* l = m->as<torch::nn::LinearImpl>()) {
        l->weight.normal_(0.0, 0.02);
        l->bias.zero_();
      } else if (auto* c = m->as<torch::nn::Conv2dImpl>()) {
        c->weight.normal_(0.0, 0.02);
        c->bias.zero_();
      }
    }
    encoder->embeddings->position_embeddings.normal_(0.0, 0.02);
    encoder->embeddings->cls_token.normal_(0.0, 0.02);
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) { return encoder->forward(x); }
  WindowedDinov2 encoder{nullptr};

 private:
  int64_t grid_;
};
TORCH_MODULE(DinoV2);

// ---- projector ----------------------------------------------------------------------------------
// backbone.py LayerNorm: channels-first LayerNorm (normalised over C of [B, C, H, W]), eps 1e-6.
class LayerNorm2dImpl : public torch::nn::Cloneable<LayerNorm2dImpl> {
 public:
  explicit LayerNorm2dImpl(int64_t c, double eps = kProjectorEps) : c_(c), eps_(eps) { reset(); }
  void reset() override {
    weight = register_parameter("weight", torch::ones({c_}));
    bias = register_parameter("bias", torch::zeros({c_}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x.permute({0, 2, 3, 1}), {c_}, weight, bias, eps_).permute({0, 3, 1, 2});
  }
  torch::Tensor weight, bias;

 private:
  int64_t c_;
  double eps_;
};
TORCH_MODULE(LayerNorm2d);

// ConvX with layer_norm: conv (k x k, padding k/2, no bias), bn (channels-first LayerNorm), SiLU.
class ConvXImpl : public torch::nn::Cloneable<ConvXImpl> {
 public:
  ConvXImpl(int64_t in, int64_t out, int64_t k) : in_(in), out_(out), k_(k) { reset(); }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, k_).padding(k_ / 2).bias(false)));
    bn = register_module("bn", LayerNorm2d(out_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::silu(bn->forward(conv->forward(x.contiguous()))); }
  torch::nn::Conv2d conv{nullptr};
  LayerNorm2d bn{nullptr};

 private:
  int64_t in_, out_, k_;
};
TORCH_MODULE(ConvX);

// Bottleneck (e 1.0, no shortcut as C2f builds it): cv2(cv1(x)), both 3x3.
class BottleneckImpl : public torch::nn::Cloneable<BottleneckImpl> {
 public:
  explicit BottleneckImpl(int64_t c) : c_(c) { reset(); }
  void reset() override {
    cv1 = register_module("cv1", ConvX(c_, c_, 3));
    cv2 = register_module("cv2", ConvX(c_, c_, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return cv2->forward(cv1->forward(x)); }
  ConvX cv1{nullptr}, cv2{nullptr};

 private:
  int64_t c_;
};
TORCH_MODULE(Bottleneck);

// C2f (e 0.5): cv1 -> two halves; each bottleneck on the last piece; cv2 of all pieces concatenated.
class C2fImpl : public torch::nn::Cloneable<C2fImpl> {
 public:
  C2fImpl(int64_t in, int64_t out, int64_t n) : in_(in), out_(out), n_(n) { reset(); }
  void reset() override {
    c_ = out_ / 2;
    cv1 = register_module("cv1", ConvX(in_, 2 * c_, 1));
    cv2 = register_module("cv2", ConvX((2 + n_) * c_, out_, 1));
    m = register_module("m", torch::nn::ModuleList());
    for (int64_t i = 0; i < n_; ++i) m->push_back(Bottleneck(c_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = cv1->forward(x).split(c_, 1);
    std::vector<torch::Tensor> pieces(y.begin(), y.end());
    for (const auto& b : *m) pieces.push_back(b->as<BottleneckImpl>()->forward(pieces.back()));
    return cv2->forward(torch::cat(pieces, 1));
  }
  ConvX cv1{nullptr}, cv2{nullptr};
  torch::nn::ModuleList m{nullptr};

 private:
  int64_t in_, out_, n_, c_ = 0;
};
TORCH_MODULE(C2f);

// MultiScaleProjector for projector_scale ["P4"] (scale factor 1: no resampling; its stages_sampling are
// empty Sequentials, without parameters, not built here): stages.0 = (C2f, LayerNorm2d) on the
// concatenated encoder maps.
class MultiScaleProjectorImpl : public torch::nn::Cloneable<MultiScaleProjectorImpl> {
 public:
  MultiScaleProjectorImpl(int64_t in_channels, int64_t out_channels) : in_(in_channels), out_(out_channels) { reset(); }
  void reset() override {
    stages = register_module("stages", torch::nn::ModuleList());
    torch::nn::Sequential stage;
    stage->push_back(C2f(in_, out_, kProjectorBlocks));
    stage->push_back(LayerNorm2d(out_));
    stages->push_back(stage);
  }
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& x) {
    auto fused = x.size() > 1 ? torch::cat(x, 1) : x[0];
    return {stages[0]->as<torch::nn::SequentialImpl>()->forward(fused)};
  }
  torch::nn::ModuleList stages{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(MultiScaleProjector);

// backbone.py Backbone (`backbone.0`): encoder (DinoV2), projector.
class RFDETRBackboneImpl : public torch::nn::Cloneable<RFDETRBackboneImpl> {
 public:
  explicit RFDETRBackboneImpl(int64_t grid) : grid_(grid) { reset(); }
  void reset() override {
    encoder = register_module("encoder", DinoV2(grid_));
    projector = register_module("projector", MultiScaleProjector(kVitDim * static_cast<int64_t>(kOutFeatureIndexes.size()), kHiddenDim));
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) { return projector->forward(encoder->forward(x)); }
  DinoV2 encoder{nullptr};
  MultiScaleProjector projector{nullptr};

 private:
  int64_t grid_;
};
TORCH_MODULE(RFDETRBackbone);

// backbone.py PositionEmbeddingSine(hidden / 2, normalize=True) on an all-False mask (`backbone.1`): no
// parameters; dim_t (a non-persistent buffer in the original) is a plain member here.
class PositionEmbeddingSineImpl : public torch::nn::Cloneable<PositionEmbeddingSineImpl> {
 public:
  explicit PositionEmbeddingSineImpl(int64_t num_pos_feats, double temperature = 10000.0)
      : n_(num_pos_feats), temperature_(temperature) {
    reset();
  }
  void reset() override {
    auto d = torch::arange(n_, torch::kFloat32);
    dim_t_ = torch::pow(temperature_, 2 * torch::div(d, 2, "floor") / static_cast<double>(n_));
    dim_t_dev_ = torch::Tensor();
  }
  // feat [B, C, h, w] -> [B, 2 * num_pos_feats, h, w] in feat's dtype.
  torch::Tensor forward(const torch::Tensor& feat) {
    const int64_t B = feat.size(0), h = feat.size(2), w = feat.size(3);
    const auto o = torch::TensorOptions().dtype(torch::kFloat32).device(feat.device());
    auto ones = torch::ones({B, h, w}, o);
    auto y = ones.cumsum(1), x = ones.cumsum(2);
    const double scale = 2 * std::numbers::pi, eps = 1e-6;
    y = y / (y.narrow(1, h - 1, 1) + eps) * scale;
    x = x / (x.narrow(2, w - 1, 1) + eps) * scale;
    const auto& dim_t = dim_t_on(feat.device());
    auto embed = [&](const torch::Tensor& e) {
      auto p = e.unsqueeze(-1) / dim_t;  // [B, h, w, n]
      using torch::indexing::Slice;
      return torch::stack({p.index({"...", Slice(0, torch::indexing::None, 2)}).sin(), p.index({"...", Slice(1, torch::indexing::None, 2)}).cos()}, 4)
          .flatten(3);
    };
    return torch::cat({embed(y), embed(x)}, 3).permute({0, 3, 1, 2}).to(feat.scalar_type());
  }

 private:
  // dim_t on the features' device, copied there once: by the first forward on that device, an eager step
  // before any CUDA graph is captured (a capture cannot copy from pageable host memory). dim_t itself stays
  // as computed on the CPU, as the original's buffer is.
  const torch::Tensor& dim_t_on(const torch::Device& d) {
    if (!dim_t_dev_.defined() || dim_t_dev_.device() != d) dim_t_dev_ = dim_t_.to(d);
    return dim_t_dev_;
  }
  int64_t n_;
  double temperature_;
  torch::Tensor dim_t_, dim_t_dev_;
};
TORCH_MODULE(PositionEmbeddingSine);

// The backbone's output: per level the projector's map and its position encoding.
struct RFDETRFeatures {
  std::vector<torch::Tensor> srcs;  // [B, 256, h, w]
  std::vector<torch::Tensor> pos;   // [B, 256, h, w]
};

// backbone.py Joiner (`backbone`): 0 = the Backbone, 1 = the position encoding.
class RFDETRJoinerImpl : public torch::nn::Cloneable<RFDETRJoinerImpl> {
 public:
  explicit RFDETRJoinerImpl(int64_t grid) : grid_(grid) { reset(); }
  void reset() override {
    body = register_module("0", RFDETRBackbone(grid_));
    position = register_module("1", PositionEmbeddingSine(kHiddenDim / 2));
  }
  RFDETRFeatures forward(const torch::Tensor& x) {
    RFDETRFeatures f;
    f.srcs = body->forward(x);
    for (const auto& s : f.srcs) f.pos.push_back(position->forward(s));
    return f;
  }
  RFDETRBackbone body{nullptr};          // registered as "0"
  PositionEmbeddingSine position{nullptr};  // registered as "1"

 private:
  int64_t grid_;
};
TORCH_MODULE(RFDETRJoiner);
}  // namespace libreyolo::families::rfdetr
