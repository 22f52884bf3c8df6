#pragma once
// SegFormer (Xie et al., NeurIPS 2021) as the original builds it (libreyolo/models/segformer/nn.py):
// the MiT encoder (four stages of overlapping patch embedding -> pre-norm transformer blocks with
// efficient self-attention, whose keys/values are spatially reduced by a strided conv, and Mix-FFN,
// fc1 -> depthwise 3x3 -> GELU -> fc2 -> LayerNorm) with stochastic depth rising linearly from 0 to 0.1
// over the blocks, and the all-MLP decode head (per-stage linear projection to the decoder width,
// bilinear upsampling to stage 1's size, concatenation deepest first, 1x1 fuse conv + BatchNorm + ReLU,
// dropout 0.1, 1x1 classifier). Input: RGB float in [0, 1]; the ImageNet normalisation runs inside.
// Output: logits [B, nc, H/4, W/4] (the task resizes them to the masks / the image).
// Module names are the original's state-dict keys (encoder.stages.0.blocks.1.attention.q_proj.weight,
// decode_head.linear_fuse.weight, ...), so its checkpoints load without a table.
#include <libreyolo/capture/graphed_callable.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>
#include <libreyolo/nn/normalize.hpp>

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

namespace libreyolo::segformer {

inline constexpr double kLayerNormEps = 1e-5;  // the original's (PyTorch's default), not the configs' 1e-6
inline constexpr double kDropPathRate = 0.1;
inline constexpr double kClassifierDropout = 0.1;
inline constexpr double kInitStd = 0.02;

struct SizeConfig {
  std::array<int64_t, 4> depths, embed_dims;
  int64_t decoder_hidden_size;
  std::array<int64_t, 4> num_heads{1, 2, 5, 8}, sr_ratios{8, 4, 2, 1}, mlp_ratios{4, 4, 4, 4}, patch_sizes{7, 3, 3, 3},
      strides{4, 2, 2, 2};
};

inline SizeConfig size_config(const std::string& size) {
  if (size == "b0") return {{2, 2, 2, 2}, {32, 64, 160, 256}, 256};
  if (size == "b1") return {{2, 2, 2, 2}, {64, 128, 320, 512}, 256};
  if (size == "b2") return {{3, 4, 6, 3}, {64, 128, 320, 512}, 768};
  if (size == "b3") return {{3, 4, 18, 3}, {64, 128, 320, 512}, 768};
  if (size == "b4") return {{3, 8, 27, 3}, {64, 128, 320, 512}, 768};
  if (size == "b5") return {{3, 6, 40, 3}, {64, 128, 320, 512}, 768};
  throw ConfigError("SegFormer size '" + size + "' is unknown; allowed: b0, b1, b2, b3, b4, b5");
}

inline torch::nn::LayerNorm layer_norm(int64_t dim) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(kLayerNormEps));
}

// Stochastic depth per sample: in training, each sample's branch is kept with probability 1 - p and
// scaled by 1 / (1 - p); identity in eval or at p = 0. Declares its randomness to the capture layer.
class DropPathImpl : public torch::nn::Cloneable<DropPathImpl>, public capture::DrawsRandomInTraining {
 public:
  explicit DropPathImpl(double p = 0.0) : p_(p) {
    if (!(p >= 0 && p < 1)) throw ConfigError("DropPath: probability must lie in [0, 1), got " + std::to_string(p));
  }
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x) {
    if (p_ == 0.0 || !is_training()) return x;
    const double keep = 1.0 - p_;
    std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
    shape[0] = x.size(0);
    auto mask = torch::rand(shape, x.options()).add_(keep).floor_();
    return x.div(keep) * mask;
  }
  double random_draw_probability() const override { return p_; }
  double p() const { return p_; }

 private:
  double p_;
};
TORCH_MODULE(DropPath);

class OverlapPatchEmbeddingsImpl : public torch::nn::Cloneable<OverlapPatchEmbeddingsImpl> {
 public:
  OverlapPatchEmbeddingsImpl(int64_t patch, int64_t stride, int64_t in, int64_t dim)
      : patch_(patch), stride_(stride), in_(in), dim_(dim) {
    reset();
  }
  void reset() override {
    proj = register_module("proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, dim_, patch_).stride(stride_).padding(patch_ / 2)));
    norm = register_module("layer_norm", layer_norm(dim_));
  }
  // -> tokens [B, h*w, C] and (h, w)
  std::tuple<torch::Tensor, int64_t, int64_t> forward(const torch::Tensor& x) {
    auto e = proj->forward(x);
    const int64_t h = e.size(2), w = e.size(3);
    return {norm->forward(e.flatten(2).transpose(1, 2)), h, w};
  }
  torch::nn::Conv2d proj{nullptr};
  torch::nn::LayerNorm norm{nullptr};

 private:
  int64_t patch_, stride_, in_, dim_;
};
TORCH_MODULE(OverlapPatchEmbeddings);

class SequenceReductionImpl : public torch::nn::Cloneable<SequenceReductionImpl> {
 public:
  SequenceReductionImpl(int64_t dim, int64_t ratio) : dim_(dim), ratio_(ratio) { reset(); }
  void reset() override {
    conv = register_module("sequence_reduction",
                           torch::nn::Conv2d(torch::nn::Conv2dOptions(dim_, dim_, ratio_).stride(ratio_)));
    norm = register_module("layer_norm", layer_norm(dim_));
  }
  torch::Tensor forward(const torch::Tensor& x, int64_t h, int64_t w) {
    const int64_t B = x.size(0), C = x.size(2);
    auto y = conv->forward(x.transpose(1, 2).reshape({B, C, h, w}));
    return norm->forward(y.reshape({B, C, -1}).transpose(1, 2));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::LayerNorm norm{nullptr};

 private:
  int64_t dim_, ratio_;
};
TORCH_MODULE(SequenceReduction);

class EfficientSelfAttentionImpl : public torch::nn::Cloneable<EfficientSelfAttentionImpl> {
 public:
  EfficientSelfAttentionImpl(int64_t dim, int64_t heads, int64_t sr) : dim_(dim), heads_(heads), sr_(sr) { reset(); }
  void reset() override {
    if (dim_ % heads_ != 0)
      throw ConfigError("SegFormer attention: width " + std::to_string(dim_) + " is not a multiple of " + std::to_string(heads_) + " heads");
    head_dim_ = dim_ / heads_;
    q_proj = register_module("q_proj", torch::nn::Linear(dim_, dim_));
    k_proj = register_module("k_proj", torch::nn::Linear(dim_, dim_));
    v_proj = register_module("v_proj", torch::nn::Linear(dim_, dim_));
    o_proj = register_module("o_proj", torch::nn::Linear(dim_, dim_));
    if (sr_ > 1) reduction = register_module("sequence_reduction", SequenceReduction(dim_, sr_));
  }
  torch::Tensor forward(const torch::Tensor& x, int64_t h, int64_t w) {
    const int64_t B = x.size(0), N = x.size(1);
    auto q = q_proj->forward(x).view({B, N, heads_, head_dim_}).transpose(1, 2);
    auto kv = sr_ > 1 ? reduction->forward(x, h, w) : x;
    const int64_t M = kv.size(1);
    auto k = k_proj->forward(kv).view({B, M, heads_, head_dim_}).transpose(1, 2);
    auto v = v_proj->forward(kv).view({B, M, heads_, head_dim_}).transpose(1, 2);
    auto att = torch::matmul(q, k.transpose(2, 3)) * std::pow(double(head_dim_), -0.5);
    att = torch::softmax(att, -1, torch::kFloat32).to(q.scalar_type());
    auto out = torch::matmul(att, v).transpose(1, 2).contiguous().reshape({B, N, dim_});
    return o_proj->forward(out);
  }
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  SequenceReduction reduction{nullptr};

 private:
  int64_t dim_, heads_, sr_, head_dim_ = 0;
};
TORCH_MODULE(EfficientSelfAttention);

class DepthWiseConvImpl : public torch::nn::Cloneable<DepthWiseConvImpl> {
 public:
  explicit DepthWiseConvImpl(int64_t dim) : dim_(dim) { reset(); }
  void reset() override {
    conv = register_module("dwconv", torch::nn::Conv2d(torch::nn::Conv2dOptions(dim_, dim_, 3).padding(1).groups(dim_)));
  }
  torch::Tensor forward(const torch::Tensor& x, int64_t h, int64_t w) {
    const int64_t B = x.size(0), C = x.size(2);
    return conv->forward(x.transpose(1, 2).reshape({B, C, h, w})).flatten(2).transpose(1, 2);
  }
  torch::nn::Conv2d conv{nullptr};

 private:
  int64_t dim_;
};
TORCH_MODULE(DepthWiseConv);

// Mix-FFN (its dropout is the original's hidden_dropout_prob = 0: no module, nothing drawn).
class MixMLPImpl : public torch::nn::Cloneable<MixMLPImpl> {
 public:
  MixMLPImpl(int64_t in, int64_t hidden) : in_(in), hidden_(hidden) { reset(); }
  void reset() override {
    fc1 = register_module("fc1", torch::nn::Linear(in_, hidden_));
    dwconv = register_module("dwconv", DepthWiseConv(hidden_));
    fc2 = register_module("fc2", torch::nn::Linear(hidden_, in_));
  }
  torch::Tensor forward(const torch::Tensor& x, int64_t h, int64_t w) {
    return fc2->forward(torch::gelu(dwconv->forward(fc1->forward(x), h, w)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  DepthWiseConv dwconv{nullptr};

 private:
  int64_t in_, hidden_;
};
TORCH_MODULE(MixMLP);

class SegformerLayerImpl : public torch::nn::Cloneable<SegformerLayerImpl> {
 public:
  SegformerLayerImpl(int64_t dim, int64_t heads, double drop_path, int64_t sr, int64_t mlp_ratio)
      : dim_(dim), heads_(heads), sr_(sr), mlp_ratio_(mlp_ratio), drop_path_p_(drop_path) {
    reset();
  }
  void reset() override {
    layernorm_before = register_module("layernorm_before", layer_norm(dim_));
    attention = register_module("attention", EfficientSelfAttention(dim_, heads_, sr_));
    drop_path = register_module("drop_path", DropPath(drop_path_p_));
    layernorm_after = register_module("layernorm_after", layer_norm(dim_));
    mlp = register_module("mlp", MixMLP(dim_, dim_ * mlp_ratio_));
  }
  torch::Tensor forward(const torch::Tensor& x, int64_t h, int64_t w) {
    auto y = drop_path->forward(attention->forward(layernorm_before->forward(x), h, w)) + x;
    return drop_path->forward(mlp->forward(layernorm_after->forward(y), h, w)) + y;
  }
  torch::nn::LayerNorm layernorm_before{nullptr}, layernorm_after{nullptr};
  EfficientSelfAttention attention{nullptr};
  DropPath drop_path{nullptr};
  MixMLP mlp{nullptr};

 private:
  int64_t dim_, heads_, sr_, mlp_ratio_;
  double drop_path_p_;
};
TORCH_MODULE(SegformerLayer);

class SegformerStageImpl : public torch::nn::Cloneable<SegformerStageImpl> {
 public:
  SegformerStageImpl(int64_t stage, int64_t in, SizeConfig cfg, std::vector<double> drops)
      : stage_(stage), in_(in), cfg_(cfg), drops_(std::move(drops)) {
    reset();
  }
  void reset() override {
    const auto s = static_cast<size_t>(stage_);
    int64_t start = 0;
    for (size_t i = 0; i < s; ++i) start += cfg_.depths[i];
    const int64_t dim = cfg_.embed_dims[s];
    patch_embeddings = register_module("patch_embeddings", OverlapPatchEmbeddings(cfg_.patch_sizes[s], cfg_.strides[s], in_, dim));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < cfg_.depths[s]; ++i)
      blocks->push_back(SegformerLayer(dim, cfg_.num_heads[s], drops_.at(static_cast<size_t>(start + i)), cfg_.sr_ratios[s],
                                       cfg_.mlp_ratios[s]));
    norm = register_module("layer_norm", layer_norm(dim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto [t, h, w] = patch_embeddings->forward(x);
    for (const auto& b : *blocks) t = b->as<SegformerLayerImpl>()->forward(t, h, w);
    t = norm->forward(t);
    return t.reshape({t.size(0), h, w, -1}).permute({0, 3, 1, 2}).contiguous();
  }
  OverlapPatchEmbeddings patch_embeddings{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm norm{nullptr};

 private:
  int64_t stage_, in_;
  SizeConfig cfg_;
  std::vector<double> drops_;
};
TORCH_MODULE(SegformerStage);

class SegformerEncoderImpl : public torch::nn::Cloneable<SegformerEncoderImpl> {
 public:
  explicit SegformerEncoderImpl(SizeConfig cfg) : cfg_(cfg) { reset(); }
  void reset() override {
    int64_t total = 0;
    for (auto d : cfg_.depths) total += d;
    std::vector<double> drops;  // linear 0 .. rate over the blocks
    for (int64_t i = 0; i < total; ++i) drops.push_back(kDropPathRate * double(i) / double(std::max<int64_t>(total - 1, 1)));
    stages = register_module("stages", torch::nn::ModuleList());
    int64_t in = 3;
    for (int64_t s = 0; s < 4; ++s) {
      stages->push_back(SegformerStage(s, in, cfg_, drops));
      in = cfg_.embed_dims[static_cast<size_t>(s)];
    }
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    std::vector<torch::Tensor> out;
    torch::Tensor h = x;
    for (const auto& s : *stages) out.push_back(h = s->as<SegformerStageImpl>()->forward(h));
    return out;
  }
  torch::nn::ModuleList stages{nullptr};

 private:
  SizeConfig cfg_;
};
TORCH_MODULE(SegformerEncoder);

class SegformerMLPImpl : public torch::nn::Cloneable<SegformerMLPImpl> {
 public:
  SegformerMLPImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override { proj = register_module("proj", torch::nn::Linear(in_, out_)); }
  torch::Tensor forward(const torch::Tensor& x) { return proj->forward(x.flatten(2).transpose(1, 2)); }
  torch::nn::Linear proj{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(SegformerMLP);

class SegformerDecodeHeadImpl : public torch::nn::Cloneable<SegformerDecodeHeadImpl> {
 public:
  SegformerDecodeHeadImpl(SizeConfig cfg, int64_t classes) : cfg_(cfg), classes_(classes) { reset(); }
  void reset() override {
    const int64_t D = cfg_.decoder_hidden_size;
    linear_projections = register_module("linear_projections", torch::nn::ModuleList());
    for (size_t i = 0; i < 4; ++i) linear_projections->push_back(SegformerMLP(cfg_.embed_dims[i], D));
    linear_fuse = register_module("linear_fuse", torch::nn::Conv2d(torch::nn::Conv2dOptions(4 * D, D, 1).bias(false)));
    batch_norm = register_module("batch_norm", libreyolo::nn::BatchNorm2d(D));
    dropout = register_module("dropout", torch::nn::Dropout(kClassifierDropout));
    classifier = register_module("classifier", torch::nn::Conv2d(torch::nn::Conv2dOptions(D, classes_, 1)));
  }
  torch::Tensor forward(const std::vector<torch::Tensor>& feats) {
    const int64_t B = feats.back().size(0);
    const std::vector<int64_t> size{feats[0].size(2), feats[0].size(3)};
    std::vector<torch::Tensor> proj(4);
    for (size_t i = 0; i < 4; ++i) {
      const int64_t h = feats[i].size(2), w = feats[i].size(3);
      auto t = linear_projections[i]->as<SegformerMLPImpl>()->forward(feats[i]).transpose(1, 2).reshape({B, -1, h, w});
      if (h != size[0] || w != size[1])
        t = torch::nn::functional::interpolate(
            t, torch::nn::functional::InterpolateFuncOptions().size(size).mode(torch::kBilinear).align_corners(false));
      proj[3 - i] = t;  // deepest first
    }
    auto y = torch::relu(batch_norm->forward(linear_fuse->forward(torch::cat(proj, 1))));
    return classifier->forward(dropout->forward(y));
  }
  torch::nn::ModuleList linear_projections{nullptr};
  torch::nn::Conv2d linear_fuse{nullptr}, classifier{nullptr};
  libreyolo::nn::BatchNorm2d batch_norm{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  SizeConfig cfg_;
  int64_t classes_;
};
TORCH_MODULE(SegformerDecodeHead);

class SegformerImpl : public torch::nn::Cloneable<SegformerImpl> {
 public:
  SegformerImpl(std::string size, int64_t classes) : size_(std::move(size)), classes_(classes) { reset(); }
  void reset() override {
    if (classes_ < 1) throw ConfigError("SegFormer: num_classes must be >= 1, got " + std::to_string(classes_));
    const auto cfg = size_config(size_);
    encoder = register_module("encoder", SegformerEncoder(cfg));
    decode_head = register_module("decode_head", SegformerDecodeHead(cfg, classes_));
    init_weights();
  }
  // The original's init: normal(0, 0.02) conv/linear weights, zero biases; norms at 1 / 0.
  void init_weights() {
    torch::NoGradGuard ng;
    for (auto& m : modules(/*include_self=*/false)) {
      auto* p = m.get();
      if (dynamic_cast<torch::nn::LinearImpl*>(p) || dynamic_cast<torch::nn::Conv2dImpl*>(p)) {
        for (auto& kv : p->named_parameters(false)) {
          if (kv.key() == "weight") kv.value().normal_(0.0, kInitStd);
          else if (kv.key() == "bias") kv.value().zero_();
        }
      } else if (dynamic_cast<torch::nn::LayerNormImpl*>(p) || dynamic_cast<libreyolo::nn::BatchNorm2dImpl*>(p)) {
        for (auto& kv : p->named_parameters(false)) {
          if (kv.key() == "weight") kv.value().fill_(1.0);
          else if (kv.key() == "bias") kv.value().zero_();
        }
      }
    }
  }
  // x: RGB float [B,3,H,W] in [0, 1]. Returns logits [B, nc, ceil(H/4), ceil(W/4)].
  torch::Tensor forward(const torch::Tensor& x) {
    return decode_head->forward(encoder->forward(nn::imagenet_normalize(x)));
  }
  SegformerEncoder encoder{nullptr};
  SegformerDecodeHead decode_head{nullptr};
  const std::string& size() const { return size_; }
  int64_t num_classes() const { return classes_; }

 private:
  std::string size_;
  int64_t classes_;
};
TORCH_MODULE(Segformer);

}  // namespace libreyolo::segformer
