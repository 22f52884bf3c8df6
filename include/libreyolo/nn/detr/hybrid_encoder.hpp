#pragma once
// RT-DETR's hybrid encoder (the original's HybridEncoder in models/rtdetr/nn.py): 1x1 conv + BN input
// projections to hidden_dim, AIFI (one post-norm transformer encoder layer with a 2-D sin-cos position
// embedding) on the stride-32 map, then CCFM: a top-down FPN and a bottom-up PAN of CSPRepLayers
// (RepVgg bottlenecks). Shared by RT-DETR v1/v2 (and D-FINE/DEIM-style encoders later).
#include <libreyolo/core/compat.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <tuple>
#include <vector>

namespace libreyolo::nn::detr {

// RepVggBlock: 3x3 ConvNorm + 1x1 ConvNorm summed, then the activation.
class RepVggBlockImpl : public torch::nn::Cloneable<RepVggBlockImpl> {
 public:
  RepVggBlockImpl(int64_t in, int64_t out, Act act) : in_(in), out_(out), act_(act) { reset(); }
  void reset() override {
    conv1 = register_module("conv1", ConvNorm(in_, out_, 3, 1, Act::none, 1));
    conv2 = register_module("conv2", ConvNorm(in_, out_, 1, 1, Act::none, 0));
  }
  torch::Tensor forward(const torch::Tensor& x) { return activate(conv1->forward(x) + conv2->forward(x), act_); }
  ConvNorm conv1{nullptr}, conv2{nullptr};

 private:
  int64_t in_, out_;
  Act act_;
};
TORCH_MODULE(RepVggBlock);

// CSPRepLayer: conv1 -> bottlenecks, plus conv2, summed, then conv3 (when hidden != out).
class CSPRepLayerImpl : public torch::nn::Cloneable<CSPRepLayerImpl> {
 public:
  CSPRepLayerImpl(int64_t in, int64_t out, int64_t blocks, double expansion, Act act)
      : in_(in), out_(out), n_(blocks), hidden_(static_cast<int64_t>(out * expansion)), act_(act) {
    reset();
  }
  void reset() override {
    conv1 = register_module("conv1", ConvNorm(in_, hidden_, 1, 1, act_));
    conv2 = register_module("conv2", ConvNorm(in_, hidden_, 1, 1, act_));
    bottlenecks = register_module("bottlenecks", torch::nn::Sequential());
    for (int64_t i = 0; i < n_; ++i) bottlenecks->push_back(RepVggBlock(hidden_, hidden_, act_));
    if (hidden_ != out_) conv3 = register_module("conv3", ConvNorm(hidden_, out_, 1, 1, act_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = bottlenecks->forward(conv1->forward(x)) + conv2->forward(x);
    return conv3 ? conv3->forward(y) : y;
  }
  ConvNorm conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::Sequential bottlenecks{nullptr};

 private:
  int64_t in_, out_, n_, hidden_;
  Act act_;
};
TORCH_MODULE(CSPRepLayer);

// Post-norm transformer encoder layer (no dropout: the original's dropout is 0.0).
class TransformerEncoderLayerImpl : public torch::nn::Cloneable<TransformerEncoderLayerImpl> {
 public:
  TransformerEncoderLayerImpl(int64_t d, int64_t heads, int64_t ffn, Act act) : d_(d), h_(heads), f_(ffn), act_(act) { reset(); }
  void reset() override {
    self_attn = register_module("self_attn", MultiheadAttention(d_, h_));
    linear1 = register_module("linear1", torch::nn::Linear(d_, f_));
    linear2 = register_module("linear2", torch::nn::Linear(f_, d_));
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_})));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_})));
  }
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& pos) {
    // Under CUDA autocast the original adds the fp16 map and the float32 embedding in float32 (type promotion: add is
    // no autocast op) and the in-projection rounds the sum once to fp16 (fidelity row 38); elsewhere the embedding
    // takes the map's dtype (float32 training, or a model cast to half without autocast).
    auto q = src.is_cuda() && compat::cuda_autocast_enabled() ? src + pos : src + pos.to(src.scalar_type());
    auto x = norm1->forward(src + self_attn->forward(q, q, src));
    return norm2->forward(x + linear2->forward(activate(linear1->forward(x), act_)));
  }
  MultiheadAttention self_attn{nullptr};
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};

 private:
  int64_t d_, h_, f_;
  Act act_;
};
TORCH_MODULE(TransformerEncoderLayer);

class TransformerEncoderImpl : public torch::nn::Cloneable<TransformerEncoderImpl> {
 public:
  TransformerEncoderImpl(int64_t n, int64_t d, int64_t heads, int64_t ffn, Act act) : n_(n), d_(d), h_(heads), f_(ffn), act_(act) { reset(); }
  void reset() override {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < n_; ++i) layers->push_back(TransformerEncoderLayer(d_, h_, f_, act_));
    start_as_copies(layers);  // the original's TransformerEncoder: deep copies of one layer
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& pos) {
    for (const auto& l : *layers) x = l->as<TransformerEncoderLayerImpl>()->forward(x, pos);
    return x;
  }
  torch::nn::ModuleList layers{nullptr};

 private:
  int64_t n_, d_, h_, f_;
  Act act_;
};
TORCH_MODULE(TransformerEncoder);

// 2-D sin-cos position embedding [1, w*h, dim] (the original's build_2d_sincos_position_embedding:
// meshgrid over (w, h) with "ij" indexing, then [sin w, cos w, sin h, cos h]), on `opts`' device.
inline torch::Tensor sincos_position_embedding_2d(int64_t w, int64_t h, int64_t dim, double temperature,
                                                  torch::TensorOptions opts) {
  opts = opts.dtype(torch::kFloat32);
  auto gw = torch::arange(w, opts), gh = torch::arange(h, opts);
  auto grids = torch::meshgrid({gw, gh}, "ij");
  const int64_t pd = dim / 4;
  auto omega = 1.0 / torch::pow(temperature, torch::arange(pd, opts) / static_cast<double>(pd));
  auto ow = grids[0].flatten().unsqueeze(1) * omega.unsqueeze(0);
  auto oh = grids[1].flatten().unsqueeze(1) * omega.unsqueeze(0);
  return torch::cat({ow.sin(), ow.cos(), oh.sin(), oh.cos()}, 1).unsqueeze(0);
}

struct HybridEncoderOptions {
  std::vector<int64_t> in_channels{128, 256, 512};
  std::vector<int64_t> feat_strides{8, 16, 32};
  int64_t hidden_dim = 256;
  int64_t nhead = 8;
  int64_t dim_feedforward = 1024;
  std::vector<int64_t> use_encoder_idx{2};
  int64_t num_encoder_layers = 1;
  double pe_temperature = 10000;
  double expansion = 0.5;
  double depth_mult = 1.0;
  Act enc_act = Act::gelu;  // the AIFI layer's FFN activation (EC: silu)
  // The FPN / PAN fusion input: false, the two maps concatenated (2 x hidden_dim channels); true, summed
  // (hidden_dim channels: EC's and DEIMv2's fuse_op "sum").
  bool fuse_sum = false;
  // The lateral convs, the downsampling blocks and the fusion blocks (FPN and PAN alike) start as copies of
  // one each (DEIMv2's and EC's encoders deep-copy one Lateral_Conv, SCDown_Conv and Fuse_Block); false,
  // each drawn afresh (RT-DETR's, D-FINE's and DEIM's build them in the loop).
  bool cloned_blocks = false;
};

// The hybrid encoder's layout: 1x1 conv + BN input projections to hidden_dim, AIFI on the
// use_encoder_idx maps, then CCFM: a top-down FPN (lateral 1x1 ConvNorm, nearest 2x upsampling, a fusion
// block over the concatenation, or the sum with fuse_sum) and a bottom-up PAN (a downsampling block, a fusion block). What tells
// RT-DETR's encoder from D-FINE's (nn/detr/dfine_encoder.hpp) is `Blocks`:
//   Blocks::Options                  the options (HybridEncoderOptions' fields, the family's defaults)
//   Blocks::name                     the encoder's name in errors
//   Blocks::input_projection         whether the levels are projected (EC's encoder has none: its backbone
//                                    projects); Blocks::input_proj(c, d) one level's projection: Sequential(conv,
//                                    BN), the original's child names
//   Blocks::lateral_act              the lateral ConvNorm's activation
//   Blocks::Fusion, fusion(o)        the FPN / PAN fusion block (its Impl type) and a new one
//   Blocks::Down, downsample(d)      the PAN's downsampling block (its Impl type) and a new one
// Module names (the original's state-dict keys) and construction order are the same for both.
template <class Blocks>
class HybridEncoderTImpl : public torch::nn::Cloneable<HybridEncoderTImpl<Blocks>> {
 public:
  using Options = typename Blocks::Options;
  explicit HybridEncoderTImpl(Options o = {}) : o_(std::move(o)) { reset(); }
  void reset() override {
    const int64_t d = o_.hidden_dim;
    const auto nlev = static_cast<int64_t>(o_.in_channels.size());
    if constexpr (Blocks::input_projection) {
      input_proj = this->register_module("input_proj", torch::nn::ModuleList());
      for (auto c : o_.in_channels) input_proj->push_back(Blocks::input_proj(c, d));
    } else {
      for (auto c : o_.in_channels)
        TORCH_CHECK(c == d, Blocks::name, ": without input projections every level needs hidden_dim (", d, ") channels, got ", c);
    }
    encoder = this->register_module("encoder", torch::nn::ModuleList());
    for (size_t i = 0; i < o_.use_encoder_idx.size(); ++i)
      encoder->push_back(TransformerEncoder(o_.num_encoder_layers, d, o_.nhead, o_.dim_feedforward, o_.enc_act));
    start_as_copies(encoder);  // every original deep-copies one encoder layer into each AIFI encoder
    lateral_convs = this->register_module("lateral_convs", torch::nn::ModuleList());
    fpn_blocks = this->register_module("fpn_blocks", torch::nn::ModuleList());
    for (int64_t i = nlev - 1; i > 0; --i) {
      lateral_convs->push_back(ConvNorm(d, d, 1, 1, Blocks::lateral_act));
      fpn_blocks->push_back(Blocks::fusion(o_));
    }
    downsample_convs = this->register_module("downsample_convs", torch::nn::ModuleList());
    pan_blocks = this->register_module("pan_blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < nlev - 1; ++i) {
      downsample_convs->push_back(Blocks::downsample(d));
      pan_blocks->push_back(Blocks::fusion(o_));
    }
    if (o_.cloned_blocks) {
      start_as_copies(lateral_convs);
      start_as_copies(downsample_convs);
      auto fusion = fpn_blocks->children();
      for (const auto& m : pan_blocks->children()) fusion.push_back(m);
      start_as_copies(fusion);
    }
  }

  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& feats) {
    using Fusion = typename Blocks::Fusion;
    using Down = typename Blocks::Down;
    const auto nlev = static_cast<int64_t>(o_.in_channels.size());
    TORCH_CHECK(static_cast<int64_t>(feats.size()) == nlev, Blocks::name, ": expected ", nlev, " feature maps, got ", feats.size());
    std::vector<torch::Tensor> proj;
    for (int64_t i = 0; i < nlev; ++i) {
      if constexpr (Blocks::input_projection) proj.push_back(input_proj[i]->as<torch::nn::Sequential>()->forward(feats[i]));
      else proj.push_back(feats[i]);
    }
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
      inner.insert(inner.begin(), fpn_blocks[j]->as<Fusion>()->forward(fuse(up, proj[idx - 1])));
    }
    // Bottom-up PAN.
    std::vector<torch::Tensor> outs{inner.front()};
    for (int64_t idx = 0; idx < nlev - 1; ++idx) {
      auto down = downsample_convs[idx]->as<Down>()->forward(outs.back());
      outs.push_back(pan_blocks[idx]->as<Fusion>()->forward(fuse(down, inner[idx + 1])));
    }
    return outs;
  }

  const Options& options() const { return o_; }
  torch::nn::ModuleList input_proj{nullptr}, encoder{nullptr}, lateral_convs{nullptr}, fpn_blocks{nullptr},
      downsample_convs{nullptr}, pan_blocks{nullptr};

 private:
  // The position embedding of a w x h map, made once per size and device (on the device, so a CUDA
  // graph capture of the encoder needs no host copy).
  torch::Tensor pos_embed(int64_t w, int64_t h, torch::Device dev) {
    const auto key = std::make_tuple(w, h, static_cast<int>(dev.type()), static_cast<int>(dev.index()));
    auto it = pos_cache_.find(key);
    if (it != pos_cache_.end()) return it->second;
    torch::NoGradGuard ng;
    auto pe = sincos_position_embedding_2d(w, h, o_.hidden_dim, o_.pe_temperature, torch::TensorOptions().device(dev));
    pos_cache_.emplace(key, pe);
    return pe;
  }
  torch::Tensor fuse(const torch::Tensor& a, const torch::Tensor& b) const { return o_.fuse_sum ? a + b : torch::cat({a, b}, 1); }
  Options o_;
  std::map<std::tuple<int64_t, int64_t, int, int>, torch::Tensor> pos_cache_;
};

// RT-DETR's blocks: unnamed projection children (input_proj.N.0 / .1), SiLU lateral convs, CSPRepLayer
// fusion with round(3 · depth_mult) RepVgg blocks, a 3x3/2 SiLU ConvNorm downsampling.
struct RTDETREncoderBlocks {
  using Options = HybridEncoderOptions;
  static constexpr const char* name = "HybridEncoder";
  static constexpr bool input_projection = true;
  static torch::nn::Sequential input_proj(int64_t c, int64_t d) {
    torch::nn::Sequential s;
    s->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(c, d, 1).bias(false)));
    s->push_back(BatchNorm2d(d));
    return s;
  }
  static constexpr Act lateral_act = Act::silu;
  using Fusion = CSPRepLayerImpl;
  static CSPRepLayer fusion(const Options& o) {
    const auto blocks = static_cast<int64_t>(std::lround(3 * o.depth_mult));
    return CSPRepLayer(2 * o.hidden_dim, o.hidden_dim, blocks, o.expansion, Act::silu);
  }
  using Down = ConvNormImpl;
  static ConvNorm downsample(int64_t d) { return ConvNorm(d, d, 3, 2, Act::silu); }
};

using HybridEncoderImpl = HybridEncoderTImpl<RTDETREncoderBlocks>;
TORCH_MODULE(HybridEncoder);

}  // namespace libreyolo::nn::detr
