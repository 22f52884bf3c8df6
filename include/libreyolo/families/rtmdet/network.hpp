#pragma once
// RTMDet detection network (Lyu et al. 2022), sizes t s m l x: CSPNeXt backbone (3-conv stem, CSP stages of
// 3x3 + depthwise-5x5 blocks with channel attention, mmdet's 3-pool SPP), CSPNeXtPAFPN neck and the
// RTMDetSepBNHead, whose convolutions are SHARED across pyramid levels with separate BatchNorms per level.
// Module names follow the original (libreyolo/models/rtmdet/nn.py, snapshot c41461e; mmdet's layout), so
// its checkpoints load with no table (tests/rtmdet/test_fixture.cpp checks names, shapes and every child
// output against shared/fixtures/libreyolo/rtmdet-t).
//
// The shared convolutions: the original aliases cls_convs[n][i].conv = cls_convs[0][i].conv for n > 0, so
// PyTorch's state dict lists the level-1/2 conv weights as duplicates of level 0's (keys.tsv: kind
// "buffer"). Here levels 1 and 2 own only their BatchNorm (head.cls_convs.<n>.<i>.bn.*) and the forward
// runs level 0's conv at every level: one parameter per shared conv (the original's parameter count),
// gradients of all levels summed into it, and the EMA's deep copy (Cloneable::clone) shares nothing it
// should not. The 8 aliases are the only keys of the original's state dict absent from ours.
//
// Numerics that matter: BatchNorm eps 1e-5 / momentum 0.1 (mmdet's SyncBN defaults, as the original);
// SiLU; channel attention = x · hardsigmoid(fc(avgpool(x))) (fc with bias); nearest 2x upsampling;
// regression output · stride (t: no exp); the head returns per level [B, 4 + nc, H, W] float32 = (l, t, r, b
// distances in pixels, class logits) — the original returns the two tuples (cls, reg).
// Initialisation: PyTorch defaults, then mmdet's RTMDetSepBNHead.init_weights (the original's port skips
// it; the brief's stable training uses it): every head conv normal(0, 0.01), class-output bias
// -log((1 - 0.01) / 0.01), regression-output bias 0.
#include <libreyolo/core/compat.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>
#include <libreyolo/nn/blocks.hpp>

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::rtmdet {

struct RtmdetOptions {
  std::string size = "t";
  int64_t nc = 80;
};

namespace detail {
struct Config {
  double deepen, widen;
  std::vector<int64_t> neck_in;
  int64_t neck_out, csp_blocks;
  bool exp_on_reg;
};
inline Config config_for(const std::string& size) {
  // The original's _SIZE_CONFIG (models/rtmdet/nn.py at c41461e): deepen, widen, neck in / out channels, CSP
  // blocks of the neck, exp on the box branch (m, l, x).
  if (size == "t") return {0.167, 0.375, {96, 192, 384}, 96, 1, false};
  if (size == "s") return {0.33, 0.5, {128, 256, 512}, 128, 1, false};
  if (size == "m") return {0.67, 0.75, {192, 384, 768}, 192, 2, true};
  if (size == "l") return {1.0, 1.0, {256, 512, 1024}, 256, 3, true};
  if (size == "x") return {1.33, 1.25, {320, 640, 1280}, 320, 4, true};
  throw ConfigError("unknown rtmdet size '" + size + "'; allowed: t, s, m, l, x");
}
inline nn::BatchNorm2d bn(int64_t c) { return nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(c).eps(1e-5).momentum(0.1)); }
inline torch::nn::Conv2dOptions conv_opts(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad,
                                          int64_t groups = 1) {
  return torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).groups(groups).bias(false);
}
}  // namespace detail

// ---- ConvBNAct: Conv2d (no bias) + BN + SiLU (names conv, bn) ----------------------------------------
class ConvBNActImpl : public torch::nn::Cloneable<ConvBNActImpl> {
 public:
  ConvBNActImpl(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t pad = 0, int64_t groups = 1)
      : in_(in), out_(out), k_(k), stride_(stride), pad_(pad), groups_(groups) {
    reset();
  }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(detail::conv_opts(in_, out_, k_, stride_, pad_, groups_)));
    bn = register_module("bn", detail::bn(out_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::silu(bn->forward(nn::counted_conv(*conv, x))); }
  torch::nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_, k_, stride_, pad_, groups_;
};
TORCH_MODULE(ConvBNAct);

// ---- BNAct: the per-level BatchNorm of a shared head conv (the conv itself lives at level 0; the head's
// tower() runs it and then this BN + SiLU) -----------------------------------------------------------------
class BNActImpl : public torch::nn::Cloneable<BNActImpl> {
 public:
  explicit BNActImpl(int64_t c) : c_(c) { reset(); }
  void reset() override { bn = register_module("bn", detail::bn(c_)); }
  nn::BatchNorm2d bn{nullptr};

 private:
  int64_t c_;
};
TORCH_MODULE(BNAct);

// ---- depthwise k x k + pointwise 1x1, both Conv-BN-SiLU ----------------------------------------------
class DepthwiseSeparableConvImpl : public torch::nn::Cloneable<DepthwiseSeparableConvImpl> {
 public:
  DepthwiseSeparableConvImpl(int64_t in, int64_t out, int64_t k) : in_(in), out_(out), k_(k) { reset(); }
  void reset() override {
    depthwise_conv = register_module("depthwise_conv", ConvBNAct(in_, in_, k_, 1, k_ / 2, in_));
    pointwise_conv = register_module("pointwise_conv", ConvBNAct(in_, out_, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return pointwise_conv->forward(depthwise_conv->forward(x)); }
  ConvBNAct depthwise_conv{nullptr}, pointwise_conv{nullptr};

 private:
  int64_t in_, out_, k_;
};
TORCH_MODULE(DepthwiseSeparableConv);

// ---- ChannelAttention: x · hardsigmoid(fc(global average))) -------------------------------------------
class ChannelAttentionImpl : public torch::nn::Cloneable<ChannelAttentionImpl> {
 public:
  explicit ChannelAttentionImpl(int64_t c) : c_(c) { reset(); }
  void reset() override { fc = register_module("fc", torch::nn::Conv2d(torch::nn::Conv2dOptions(c_, c_, 1).bias(true))); }
  torch::Tensor forward(const torch::Tensor& x) {
    return x * torch::hardsigmoid(nn::counted_conv(*fc, x.mean({2, 3}, /*keepdim=*/true)));
  }
  torch::nn::Conv2d fc{nullptr};

 private:
  int64_t c_;
};
TORCH_MODULE(ChannelAttention);

// ---- CSPNeXtBlock: 3x3 then depthwise-separable 5x5, residual when add_identity and in == out ----------
class CSPNeXtBlockImpl : public torch::nn::Cloneable<CSPNeXtBlockImpl> {
 public:
  CSPNeXtBlockImpl(int64_t in, int64_t out, bool add_identity) : in_(in), out_(out), add_(add_identity && in == out) {
    reset();
  }
  void reset() override {
    conv1 = register_module("conv1", ConvBNAct(in_, out_, 3, 1, 1));  // expansion 1.0
    conv2 = register_module("conv2", DepthwiseSeparableConv(out_, out_, 5));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv2->forward(conv1->forward(x));
    return add_ ? y + x : y;
  }
  ConvBNAct conv1{nullptr};
  DepthwiseSeparableConv conv2{nullptr};

 private:
  int64_t in_, out_;
  bool add_;
};
TORCH_MODULE(CSPNeXtBlock);

// ---- CSPLayer: main (1x1 -> blocks) | short (1x1), [attention], final 1x1 -----------------------------
class CSPLayerImpl : public torch::nn::Cloneable<CSPLayerImpl> {
 public:
  CSPLayerImpl(int64_t in, int64_t out, int64_t n, bool add_identity, bool attention)
      : in_(in), out_(out), n_(n), add_(add_identity), att_(attention) {
    reset();
  }
  void reset() override {
    const int64_t mid = out_ / 2;
    main_conv = register_module("main_conv", ConvBNAct(in_, mid, 1));
    short_conv = register_module("short_conv", ConvBNAct(in_, mid, 1));
    final_conv = register_module("final_conv", ConvBNAct(2 * mid, out_, 1));
    blocks = torch::nn::Sequential();
    for (int64_t i = 0; i < n_; ++i) blocks->push_back(CSPNeXtBlock(mid, mid, add_));
    blocks = register_module("blocks", blocks);
    if (att_) attention = register_module("attention", ChannelAttention(2 * mid));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto s = short_conv->forward(x);
    auto m = blocks->forward(main_conv->forward(x));
    auto y = torch::cat({m, s}, 1);
    if (att_) y = attention->forward(y);
    return final_conv->forward(y);
  }
  ConvBNAct main_conv{nullptr}, short_conv{nullptr}, final_conv{nullptr};
  torch::nn::Sequential blocks{nullptr};
  ChannelAttention attention{nullptr};

 private:
  int64_t in_, out_, n_;
  bool add_, att_;
};
TORCH_MODULE(CSPLayer);

// ---- SPPBottleneck (mmdet): 1x1 halve, parallel max pools 5 / 9 / 13, 1x1 ------------------------------
class SPPBottleneckImpl : public torch::nn::Cloneable<SPPBottleneckImpl> {
 public:
  SPPBottleneckImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    conv1 = register_module("conv1", ConvBNAct(in_, in_ / 2, 1));
    conv2 = register_module("conv2", ConvBNAct(in_ / 2 * 4, out_, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv1->forward(x);
    std::vector<torch::Tensor> parts{y};
    for (int64_t k : {5, 9, 13}) parts.push_back(torch::max_pool2d(y, {k, k}, {1, 1}, {k / 2, k / 2}));
    return conv2->forward(torch::cat(parts, 1));
  }
  ConvBNAct conv1{nullptr}, conv2{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(SPPBottleneck);

// ---- CSPNeXt backbone: stem + stage1..4; returns stage2, stage3, stage4 --------------------------------
class CSPNeXtImpl : public torch::nn::Cloneable<CSPNeXtImpl> {
 public:
  explicit CSPNeXtImpl(detail::Config c) : c_(std::move(c)) { reset(); }
  void reset() override {
    const double w = c_.widen;
    const auto stem_out = static_cast<int64_t>(std::floor(64 * w / 2)), stem_full = static_cast<int64_t>(64 * w);
    stem = torch::nn::Sequential();
    stem->push_back(ConvBNAct(3, stem_out, 3, 2, 1));
    stem->push_back(ConvBNAct(stem_out, stem_out, 3, 1, 1));
    stem->push_back(ConvBNAct(stem_out, stem_full, 3, 1, 1));
    stem = register_module("stem", stem);
    const int64_t arch[4][3] = {{64, 128, 3}, {128, 256, 6}, {256, 512, 6}, {512, 1024, 3}};
    for (int i = 0; i < 4; ++i) {
      const auto in = static_cast<int64_t>(arch[i][0] * w), out = static_cast<int64_t>(arch[i][1] * w);
      const int64_t n = std::max<int64_t>(std::llround(static_cast<double>(arch[i][2]) * c_.deepen), 1);
      const bool last = i == 3;
      torch::nn::Sequential s;
      s->push_back(ConvBNAct(in, out, 3, 2, 1));
      if (last) s->push_back(SPPBottleneck(out, out));
      s->push_back(CSPLayer(out, out, n, /*add_identity=*/!last, /*attention=*/true));
      stages[i] = register_module("stage" + std::to_string(i + 1), s);
    }
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    auto y = stages[0]->forward(stem->forward(x));
    auto p3 = stages[1]->forward(y);
    auto p4 = stages[2]->forward(p3);
    auto p5 = stages[3]->forward(p4);
    return {p3, p4, p5};
  }
  torch::nn::Sequential stem{nullptr};
  torch::nn::Sequential stages[4] = {nullptr, nullptr, nullptr, nullptr};

 private:
  detail::Config c_;
};
TORCH_MODULE(CSPNeXt);

// ---- CSPNeXtPAFPN: top-down, bottom-up, then a 3x3 conv per level to out_channels ----------------------
class CSPNeXtPAFPNImpl : public torch::nn::Cloneable<CSPNeXtPAFPNImpl> {
 public:
  explicit CSPNeXtPAFPNImpl(detail::Config c) : c_(std::move(c)) { reset(); }
  void reset() override {
    const auto& in = c_.neck_in;
    const int64_t n = c_.csp_blocks;
    reduce_layers = torch::nn::ModuleList();
    top_down_blocks = torch::nn::ModuleList();
    for (size_t idx = in.size() - 1; idx > 0; --idx) {
      reduce_layers->push_back(ConvBNAct(in[idx], in[idx - 1], 1));
      top_down_blocks->push_back(CSPLayer(in[idx - 1] * 2, in[idx - 1], n, false, false));
    }
    reduce_layers = register_module("reduce_layers", reduce_layers);
    top_down_blocks = register_module("top_down_blocks", top_down_blocks);
    downsamples = torch::nn::ModuleList();
    bottom_up_blocks = torch::nn::ModuleList();
    for (size_t idx = 0; idx + 1 < in.size(); ++idx) {
      downsamples->push_back(ConvBNAct(in[idx], in[idx], 3, 2, 1));
      bottom_up_blocks->push_back(CSPLayer(in[idx] * 2, in[idx + 1], n, false, false));
    }
    downsamples = register_module("downsamples", downsamples);
    bottom_up_blocks = register_module("bottom_up_blocks", bottom_up_blocks);
    out_convs = torch::nn::ModuleList();
    for (size_t i = 0; i < in.size(); ++i) out_convs->push_back(ConvBNAct(in[i], c_.neck_out, 3, 1, 1));
    out_convs = register_module("out_convs", out_convs);
  }
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& inputs) {
    const size_t n = inputs.size();
    // top-down
    std::vector<torch::Tensor> inner{inputs[n - 1]};
    for (size_t i = 0, idx = n - 1; idx > 0; ++i, --idx) {
      auto high = reduce_layers->ptr<ConvBNActImpl>(i)->forward(inner.front());
      inner.front() = high;
      auto up = upsample2(high);
      auto out = top_down_blocks->ptr<CSPLayerImpl>(i)->forward(torch::cat({up, inputs[idx - 1]}, 1));
      inner.insert(inner.begin(), out);
    }
    // bottom-up
    std::vector<torch::Tensor> outs{inner.front()};
    for (size_t idx = 0; idx + 1 < n; ++idx) {
      auto down = downsamples->ptr<ConvBNActImpl>(idx)->forward(outs.back());
      outs.push_back(bottom_up_blocks->ptr<CSPLayerImpl>(idx)->forward(torch::cat({down, inner[idx + 1]}, 1)));
    }
    for (size_t i = 0; i < n; ++i) outs[i] = out_convs->ptr<ConvBNActImpl>(i)->forward(outs[i]);
    return outs;
  }
  torch::nn::ModuleList reduce_layers{nullptr}, top_down_blocks{nullptr}, downsamples{nullptr},
      bottom_up_blocks{nullptr}, out_convs{nullptr};

 private:
  static torch::Tensor upsample2(const torch::Tensor& x) {
    namespace F = torch::nn::functional;
    return F::interpolate(
        x, F::InterpolateFuncOptions().size(std::vector<int64_t>{x.size(2) * 2, x.size(3) * 2}).mode(torch::kNearest));
  }
  detail::Config c_;
};
TORCH_MODULE(CSPNeXtPAFPN);

// ---- RTMDetSepBNHead: shared 3x3 towers (per-level BN), 1x1 class / box outputs per level --------------
class RTMDetSepBNHeadImpl : public torch::nn::Cloneable<RTMDetSepBNHeadImpl> {
 public:
  RTMDetSepBNHeadImpl(int64_t nc, int64_t channels, std::vector<int64_t> strides, bool exp_on_reg)
      : nc_(nc), ch_(channels), strides_(std::move(strides)), exp_(exp_on_reg) {
    reset();
  }
  static constexpr int64_t stacked = 2;
  void reset() override {
    cls_convs = torch::nn::ModuleList();
    reg_convs = torch::nn::ModuleList();
    for (size_t lvl = 0; lvl < strides_.size(); ++lvl) {
      torch::nn::ModuleList c, r;
      for (int64_t i = 0; i < stacked; ++i) {
        if (lvl == 0) {
          c->push_back(ConvBNAct(ch_, ch_, 3, 1, 1));
          r->push_back(ConvBNAct(ch_, ch_, 3, 1, 1));
        } else {
          c->push_back(BNAct(ch_));
          r->push_back(BNAct(ch_));
        }
      }
      cls_convs->push_back(c);
      reg_convs->push_back(r);
    }
    cls_convs = register_module("cls_convs", cls_convs);
    reg_convs = register_module("reg_convs", reg_convs);
    rtm_cls = torch::nn::ModuleList();
    rtm_reg = torch::nn::ModuleList();
    for (size_t lvl = 0; lvl < strides_.size(); ++lvl) rtm_cls->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(ch_, nc_, 1)));
    for (size_t lvl = 0; lvl < strides_.size(); ++lvl) rtm_reg->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(ch_, 4, 1)));
    rtm_cls = register_module("rtm_cls", rtm_cls);
    rtm_reg = register_module("rtm_reg", rtm_reg);
    init_weights();
  }
  // mmdet's RTMDetSepBNHead.init_weights: convs normal(0, 0.01) with zero bias, BN 1 / 0, the class
  // outputs' bias at the 0.01 prior.
  void init_weights() {
    torch::NoGradGuard ng;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<torch::nn::Conv2dImpl>()) {
        c->weight.normal_(0.0, 0.01);
        if (c->bias.defined()) c->bias.zero_();
      }
    }
    for (size_t lvl = 0; lvl < strides_.size(); ++lvl)
      rtm_cls->ptr<torch::nn::Conv2dImpl>(lvl)->bias.fill_(-std::log((1 - 0.01) / 0.01));
  }
  // Per level [B, 4 + nc, H, W]: (l, t, r, b) distances in input pixels, class logits.
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& feats) {
    std::vector<torch::Tensor> out;
    out.reserve(feats.size());
    for (size_t lvl = 0; lvl < feats.size(); ++lvl) {
      auto cls = tower(cls_convs, lvl, feats[lvl]);
      auto reg = tower(reg_convs, lvl, feats[lvl]);
      auto c = nn::counted_conv(*rtm_cls->ptr<torch::nn::Conv2dImpl>(lvl), cls);
      auto r = nn::counted_conv(*rtm_reg->ptr<torch::nn::Conv2dImpl>(lvl), reg);
      // The stride multiply in float32: under fp16 autocast a raw distance above 65504 / 32 = 2047 would
      // overflow to inf (and the loss to NaN); the outputs are float32 whatever the autocast dtype.
      const auto s = static_cast<double>(strides_[lvl]);
      r = r.to(torch::kFloat32);
      r = exp_ ? r.exp() * s : r * s;
      out.push_back(torch::cat({r, c.to(torch::kFloat32)}, 1));
    }
    return out;
  }
  // The level's tower: level 0's convs (shared), this level's BatchNorms. Reached through the lists on
  // every call, never cached (clone() replaces the children).
  // Under CUDA autocast each shared weight is cast to the autocast dtype once per forward, here, and all
  // three levels use that one copy: the gradients of the levels then meet in one place (summed in the
  // autocast dtype, then cast back) whether or not autocast's weight cache is on. With the cache (eager)
  // PyTorch would do the same; without it (while a CUDA graph is recorded, precision/amp.hpp) each level
  // would cast on its own and the sum would happen in float32 — a graph run would then differ from eager
  // by ~1e-3 relative on these gradients.
  torch::Tensor tower(torch::nn::ModuleList& list, size_t lvl, torch::Tensor x) {
    auto& level0 = *list->ptr<torch::nn::ModuleListImpl>(0);
    auto& mine = *list->ptr<torch::nn::ModuleListImpl>(lvl);
    for (int64_t i = 0; i < stacked; ++i) {
      auto& conv = *level0.ptr<ConvBNActImpl>(i)->conv;
      auto y = torch::conv2d(x, shared_weight(conv.weight), {}, 1, 1);
      if (auto* counter = nn::ConvMacCounter::active()) counter->macs += conv.weight.numel() * y.size(-2) * y.size(-1);
      auto& bn = lvl == 0 ? mine.ptr<ConvBNActImpl>(i)->bn : mine.ptr<BNActImpl>(i)->bn;
      x = torch::silu(bn->forward(y));
    }
    return x;
  }
  static torch::Tensor shared_weight(const torch::Tensor& w) {
    if (w.is_cuda() && compat::cuda_autocast_enabled()) return w.to(compat::cuda_autocast_dtype());
    return w;
  }
  const std::vector<int64_t>& strides() const { return strides_; }
  torch::nn::ModuleList cls_convs{nullptr}, reg_convs{nullptr}, rtm_cls{nullptr}, rtm_reg{nullptr};

 private:
  int64_t nc_, ch_;
  std::vector<int64_t> strides_;
  bool exp_;
};
TORCH_MODULE(RTMDetSepBNHead);

// ---- the whole network -----------------------------------------------------------------------------------
class RtmdetImpl : public torch::nn::Cloneable<RtmdetImpl> {
 public:
  explicit RtmdetImpl(RtmdetOptions o = {}) : o_(std::move(o)) {
    if (o_.nc < 1) throw ConfigError("rtmdet nc must be >= 1, got " + std::to_string(o_.nc));
    c_ = detail::config_for(o_.size);
    reset();
  }
  void reset() override {
    backbone = register_module("backbone", CSPNeXt(c_));
    neck = register_module("neck", CSPNeXtPAFPN(c_));
    head = register_module("head", RTMDetSepBNHead(o_.nc, c_.neck_out, strides(), c_.exp_on_reg));
  }
  // x: [B, 3, H, W] (mean/std-normalised BGR), H and W multiples of 32 -> per stride 8 / 16 / 32 the map
  // [B, 4 + nc, H/s, W/s].
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    if (x.dim() != 4 || x.size(1) != 3 || x.size(2) % 32 != 0 || x.size(3) % 32 != 0)
      throw ConfigError("rtmdet input must be [B, 3, H, W] with H and W multiples of 32, got " +
                        std::string(c10::str(x.sizes())));
    return head->forward(neck->forward(backbone->forward(x)));
  }
  static std::vector<int64_t> strides() { return {8, 16, 32}; }
  const RtmdetOptions& options() const { return o_; }

  CSPNeXt backbone{nullptr};
  CSPNeXtPAFPN neck{nullptr};
  RTMDetSepBNHead head{nullptr};

 private:
  RtmdetOptions o_;
  detail::Config c_;
};
TORCH_MODULE(Rtmdet);

}  // namespace libreyolo::families::rtmdet
