#pragma once
// YOLOX detection network (Ge et al. 2021), sizes n t s m l x: CSPDarknet backbone (Focus stem), the
// YOLOPAFPN neck (which owns the backbone, as in the official code) and the decoupled head (per level a
// 1x1 stem, a class tower and a box tower; the box tower also predicts objectness). Module names follow
// the original's state dict (libreyolo/models/yolox/nn.py, snapshot c41461e: backbone.backbone.stem...,
// backbone.lateral_conv0..., head.cls_convs / reg_convs / cls_preds / reg_preds / obj_preds / stems),
// so the original's checkpoints load with no table (tests/yolox/test_fixture.cpp checks names, shapes and
// every child output against shared/fixtures/libreyolo/yolox-{n,t,s,m,l,x}). Nano replaces the 3x3 convs of
// the stages, bottlenecks, PAFPN down-paths and head towers by DWConv (ConvOrDW below), as the original.
//
// Numerics that matter: every BatchNorm has eps 1e-3 / momentum 0.03 (the original sets them on every
// size, as YOLOX's Exp.get_model does), SiLU, "same" padding (k - 1) / 2, nearest 2x upsampling, SPP max
// pools 5 / 9 / 13 at stride 1, Focus's patch order (top-left, bottom-left, top-right, bottom-right).
// The head returns per level the raw map [B, 4 + 1 + nc, H, W] = (box offsets x y, log w h, objectness
// logit, class logits); the original's eval output applies the sigmoid to channels 4.. (decode() and the
// fixture test do that here). The network input is 0..255 BGR as the original's (family.hpp).
//
// Initialisation for training from scratch, as the original: PyTorch defaults, then the head's
// initialize_biases(0.01) on the class and objectness outputs (-log(99)).
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/blocks.hpp>

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolox {

struct YoloxOptions {
  std::string size = "s";
  int64_t nc = 80;
};

namespace detail {
struct Scale {
  double depth, width;
  bool depthwise = false;  // nano: the 3x3 convs of the stages, bottlenecks, PAFPN and head as DWConv
};
// The original's size table (models/yolox/model.py at c41461e: depth and width multipliers, depthwise).
inline Scale scale_for(const std::string& size) {
  if (size == "n") return {0.33, 0.25, true};
  if (size == "t") return {0.33, 0.375};
  if (size == "s") return {0.33, 0.50};
  if (size == "m") return {0.67, 0.75};
  if (size == "l") return {1.00, 1.00};
  if (size == "x") return {1.33, 1.25};
  throw ConfigError("unknown yolox size '" + size + "'; allowed: n, t, s, m, l, x");
}
inline torch::Tensor upsample2(const torch::Tensor& x) {
  namespace F = torch::nn::functional;
  return F::interpolate(
      x, F::InterpolateFuncOptions().size(std::vector<int64_t>{x.size(2) * 2, x.size(3) * 2}).mode(torch::kNearest));
}
}  // namespace detail

// BaseConv = Conv2d (no bias) + BN(eps 1e-3, momentum 0.03) + SiLU: nn::Conv (names conv, bn).
using nn::Conv;

// The original's `Conv = DWConv if depthwise else BaseConv`: one k x k conv (BaseConv: names conv, bn) or,
// for nano, DWConv: a depthwise k x k BaseConv (dconv, groups = in) then a pointwise 1x1 BaseConv (pconv).
class ConvOrDWImpl : public torch::nn::Cloneable<ConvOrDWImpl> {
 public:
  ConvOrDWImpl(int64_t in, int64_t out, int64_t k, int64_t stride, bool depthwise)
      : in_(in), out_(out), k_(k), stride_(stride), depthwise_(depthwise) {
    reset();
  }
  void reset() override {
    if (depthwise_) {
      dconv = register_module("dconv", Conv(in_, in_, k_, stride_, /*groups=*/in_));
      pconv = register_module("pconv", Conv(in_, out_, 1));
    } else {
      conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, k_).stride(stride_).padding(k_ / 2).bias(false)));
      bn = register_module("bn", nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(out_).eps(1e-3).momentum(0.03)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (depthwise_) return pconv->forward(dconv->forward(x));
    return torch::silu(bn->forward(nn::counted_conv(*conv, x)));
  }
  Conv dconv{nullptr}, pconv{nullptr};
  torch::nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_, k_, stride_;
  bool depthwise_;
};
TORCH_MODULE(ConvOrDW);

// ---- Bottleneck: 1x1 -> 3x3, residual when shortcut and in == out ------------------------------------
class BottleneckImpl : public torch::nn::Cloneable<BottleneckImpl> {
 public:
  BottleneckImpl(int64_t in, int64_t out, bool shortcut, double expansion = 0.5, bool depthwise = false)
      : in_(in), out_(out), shortcut_(shortcut), expansion_(expansion), depthwise_(depthwise) {
    reset();
  }
  void reset() override {
    const auto hidden = static_cast<int64_t>(static_cast<double>(out_) * expansion_);
    conv1 = register_module("conv1", Conv(in_, hidden, 1));
    conv2 = register_module("conv2", ConvOrDW(hidden, out_, 3, 1, depthwise_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv2->forward(conv1->forward(x));
    return (shortcut_ && in_ == out_) ? y + x : y;
  }
  Conv conv1{nullptr};
  ConvOrDW conv2{nullptr};

 private:
  int64_t in_, out_;
  bool shortcut_;
  double expansion_;
  bool depthwise_;
};
TORCH_MODULE(Bottleneck);

// ---- CSPLayer (C3): two 1x1 halves, n bottlenecks on the first, 1x1 fuse -------------------------------
class CSPLayerImpl : public torch::nn::Cloneable<CSPLayerImpl> {
 public:
  CSPLayerImpl(int64_t in, int64_t out, int64_t n, bool shortcut = true, bool depthwise = false)
      : in_(in), out_(out), n_(n), shortcut_(shortcut), depthwise_(depthwise) {
    reset();
  }
  void reset() override {
    const int64_t hidden = out_ / 2;  // int(out * 0.5)
    conv1 = register_module("conv1", Conv(in_, hidden, 1));
    conv2 = register_module("conv2", Conv(in_, hidden, 1));
    conv3 = register_module("conv3", Conv(2 * hidden, out_, 1));
    m = torch::nn::Sequential();
    for (int64_t i = 0; i < n_; ++i) m->push_back(Bottleneck(hidden, hidden, shortcut_, 1.0, depthwise_));
    m = register_module("m", m);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto a = m->forward(conv1->forward(x));
    auto b = conv2->forward(x);
    return conv3->forward(torch::cat({a, b}, 1));
  }
  Conv conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::Sequential m{nullptr};

 private:
  int64_t in_, out_, n_;
  bool shortcut_, depthwise_;
};
TORCH_MODULE(CSPLayer);

// ---- SPPBottleneck: 1x1 halve, max pools 5/9/13 (stride 1) concatenated with the input, 1x1 -------------
class SPPBottleneckImpl : public torch::nn::Cloneable<SPPBottleneckImpl> {
 public:
  SPPBottleneckImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    const int64_t hidden = in_ / 2;
    conv1 = register_module("conv1", Conv(in_, hidden, 1));
    conv2 = register_module("conv2", Conv(hidden * 4, out_, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv1->forward(x);
    std::vector<torch::Tensor> parts{y};
    for (int64_t k : {5, 9, 13}) parts.push_back(torch::max_pool2d(y, {k, k}, {1, 1}, {k / 2, k / 2}));
    return conv2->forward(torch::cat(parts, 1));
  }
  Conv conv1{nullptr}, conv2{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(SPPBottleneck);

// ---- Focus: space-to-depth (2x2 patches to channels), then a 3x3 conv ------------------------------------
class FocusImpl : public torch::nn::Cloneable<FocusImpl> {
 public:
  FocusImpl(int64_t in, int64_t out, int64_t k) : in_(in), out_(out), k_(k) { reset(); }
  void reset() override { conv = register_module("conv", Conv(in_ * 4, out_, k_)); }
  torch::Tensor forward(const torch::Tensor& x) {
    using torch::indexing::Slice;
    auto tl = x.index({"...", Slice(0, torch::indexing::None, 2), Slice(0, torch::indexing::None, 2)});
    auto tr = x.index({"...", Slice(0, torch::indexing::None, 2), Slice(1, torch::indexing::None, 2)});
    auto bl = x.index({"...", Slice(1, torch::indexing::None, 2), Slice(0, torch::indexing::None, 2)});
    auto br = x.index({"...", Slice(1, torch::indexing::None, 2), Slice(1, torch::indexing::None, 2)});
    return conv->forward(torch::cat({tl, bl, tr, br}, 1));
  }
  Conv conv{nullptr};

 private:
  int64_t in_, out_, k_;
};
TORCH_MODULE(Focus);

// ---- CSPDarknet: stem + dark2..dark5; returns dark3, dark4, dark5 ---------------------------------------
class CSPDarknetImpl : public torch::nn::Cloneable<CSPDarknetImpl> {
 public:
  explicit CSPDarknetImpl(detail::Scale s) : s_(s) { reset(); }
  void reset() override {
    const auto c = static_cast<int64_t>(s_.width * 64);
    const int64_t d = std::max<int64_t>(std::llround(s_.depth * 3), 1);
    stem = register_module("stem", Focus(3, c, 3));
    dark2 = register_module("dark2", stage(c, c * 2, d, false, s_.depthwise));
    dark3 = register_module("dark3", stage(c * 2, c * 4, d * 3, false, s_.depthwise));
    dark4 = register_module("dark4", stage(c * 4, c * 8, d * 3, false, s_.depthwise));
    dark5 = register_module("dark5", stage(c * 8, c * 16, d, true, s_.depthwise));
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    auto y = dark2->forward(stem->forward(x));
    auto p3 = dark3->forward(y);
    auto p4 = dark4->forward(p3);
    auto p5 = dark5->forward(p4);
    return {p3, p4, p5};
  }
  Focus stem{nullptr};
  torch::nn::Sequential dark2{nullptr}, dark3{nullptr}, dark4{nullptr}, dark5{nullptr};

 private:
  static torch::nn::Sequential stage(int64_t in, int64_t out, int64_t n, bool last, bool depthwise) {
    torch::nn::Sequential s;
    s->push_back(ConvOrDW(in, out, 3, 2, depthwise));
    if (last) s->push_back(SPPBottleneck(out, out));
    s->push_back(CSPLayer(out, out, n, /*shortcut=*/!last, depthwise));
    return s;
  }
  detail::Scale s_;
};
TORCH_MODULE(CSPDarknet);

// ---- YOLOPAFPN: the backbone plus the top-down and bottom-up paths ---------------------------------------
class YOLOPAFPNImpl : public torch::nn::Cloneable<YOLOPAFPNImpl> {
 public:
  explicit YOLOPAFPNImpl(detail::Scale s) : s_(s) { reset(); }
  void reset() override {
    const auto c3 = static_cast<int64_t>(256 * s_.width), c4 = static_cast<int64_t>(512 * s_.width),
               c5 = static_cast<int64_t>(1024 * s_.width);
    const int64_t n = std::llround(3 * s_.depth);
    backbone = register_module("backbone", CSPDarknet(s_));
    lateral_conv0 = register_module("lateral_conv0", Conv(c5, c4, 1));
    const bool dw = s_.depthwise;
    C3_p4 = register_module("C3_p4", CSPLayer(2 * c4, c4, n, false, dw));
    reduce_conv1 = register_module("reduce_conv1", Conv(c4, c3, 1));
    C3_p3 = register_module("C3_p3", CSPLayer(2 * c3, c3, n, false, dw));
    bu_conv2 = register_module("bu_conv2", ConvOrDW(c3, c3, 3, 2, dw));
    C3_n3 = register_module("C3_n3", CSPLayer(2 * c3, c4, n, false, dw));
    bu_conv1 = register_module("bu_conv1", ConvOrDW(c4, c4, 3, 2, dw));
    C3_n4 = register_module("C3_n4", CSPLayer(2 * c4, c5, n, false, dw));
  }
  // Returns the stride-8, 16 and 32 maps (pan_out2, pan_out1, pan_out0).
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    auto f = backbone->forward(x);
    auto fpn_out0 = lateral_conv0->forward(f[2]);
    auto f_out0 = C3_p4->forward(torch::cat({detail::upsample2(fpn_out0), f[1]}, 1));
    auto fpn_out1 = reduce_conv1->forward(f_out0);
    auto pan_out2 = C3_p3->forward(torch::cat({detail::upsample2(fpn_out1), f[0]}, 1));
    auto pan_out1 = C3_n3->forward(torch::cat({bu_conv2->forward(pan_out2), fpn_out1}, 1));
    auto pan_out0 = C3_n4->forward(torch::cat({bu_conv1->forward(pan_out1), fpn_out0}, 1));
    return {pan_out2, pan_out1, pan_out0};
  }
  CSPDarknet backbone{nullptr};
  Conv lateral_conv0{nullptr}, reduce_conv1{nullptr};
  ConvOrDW bu_conv2{nullptr}, bu_conv1{nullptr};
  CSPLayer C3_p4{nullptr}, C3_p3{nullptr}, C3_n3{nullptr}, C3_n4{nullptr};

 private:
  detail::Scale s_;
};
TORCH_MODULE(YOLOPAFPN);

// ---- YOLOXHead: per level stem 1x1, class tower (2 x 3x3) -> cls, box tower (2 x 3x3) -> reg + obj -------
class YOLOXHeadImpl : public torch::nn::Cloneable<YOLOXHeadImpl> {
 public:
  YOLOXHeadImpl(int64_t nc, detail::Scale s) : nc_(nc), s_(s) { reset(); }
  void reset() override {
    const auto hidden = static_cast<int64_t>(256 * s_.width);
    const int64_t in[3] = {static_cast<int64_t>(256 * s_.width), static_cast<int64_t>(512 * s_.width),
                           static_cast<int64_t>(1024 * s_.width)};
    cls_convs = torch::nn::ModuleList();
    reg_convs = torch::nn::ModuleList();
    cls_preds = torch::nn::ModuleList();
    reg_preds = torch::nn::ModuleList();
    obj_preds = torch::nn::ModuleList();
    stems = torch::nn::ModuleList();
    // The original's construction order per level: stem, class tower, box tower, the three outputs.
    for (int64_t i = 0; i < 3; ++i) {
      stems->push_back(Conv(in[i], hidden, 1));
      torch::nn::Sequential c, r;
      for (int k = 0; k < 2; ++k) c->push_back(ConvOrDW(hidden, hidden, 3, 1, s_.depthwise));
      cls_convs->push_back(c);
      for (int k = 0; k < 2; ++k) r->push_back(ConvOrDW(hidden, hidden, 3, 1, s_.depthwise));
      reg_convs->push_back(r);
      cls_preds->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(hidden, nc_, 1)));
      reg_preds->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(hidden, 4, 1)));
      obj_preds->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(hidden, 1, 1)));
    }
    // Registration order = the original's state-dict order (the ModuleLists' attribute order).
    cls_convs = register_module("cls_convs", cls_convs);
    reg_convs = register_module("reg_convs", reg_convs);
    cls_preds = register_module("cls_preds", cls_preds);
    reg_preds = register_module("reg_preds", reg_preds);
    obj_preds = register_module("obj_preds", obj_preds);
    stems = register_module("stems", stems);
    initialize_biases(0.01);
  }
  // The original's initialize_biases(prior): class and objectness output biases -log((1 - p) / p).
  void initialize_biases(double prior) {
    torch::NoGradGuard ng;
    const double b = -std::log((1 - prior) / prior);
    for (size_t i = 0; i < 3; ++i) {
      cls_preds->ptr<torch::nn::Conv2dImpl>(i)->bias.fill_(b);
      obj_preds->ptr<torch::nn::Conv2dImpl>(i)->bias.fill_(b);
    }
  }
  // Per level [B, 4 + 1 + nc, H, W] raw: box regression, objectness logit, class logits.
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& feats) {
    std::vector<torch::Tensor> out;
    out.reserve(feats.size());
    for (size_t i = 0; i < feats.size(); ++i) {
      auto x = stems->ptr<nn::ConvImpl>(i)->forward(feats[i]);
      auto cls_feat = cls_convs->ptr<torch::nn::SequentialImpl>(i)->forward(x);
      auto reg_feat = reg_convs->ptr<torch::nn::SequentialImpl>(i)->forward(x);
      auto cls = nn::counted_conv(*cls_preds->ptr<torch::nn::Conv2dImpl>(i), cls_feat);
      auto reg = nn::counted_conv(*reg_preds->ptr<torch::nn::Conv2dImpl>(i), reg_feat);
      auto obj = nn::counted_conv(*obj_preds->ptr<torch::nn::Conv2dImpl>(i), reg_feat);
      out.push_back(torch::cat({reg, obj, cls}, 1));
    }
    return out;
  }
  torch::nn::ModuleList cls_convs{nullptr}, reg_convs{nullptr}, cls_preds{nullptr}, reg_preds{nullptr},
      obj_preds{nullptr}, stems{nullptr};

 private:
  int64_t nc_;
  detail::Scale s_;
};
TORCH_MODULE(YOLOXHead);

// ---- the whole network -----------------------------------------------------------------------------------
class YoloxImpl : public torch::nn::Cloneable<YoloxImpl> {
 public:
  explicit YoloxImpl(YoloxOptions o = {}) : o_(std::move(o)) {
    if (o_.nc < 1) throw ConfigError("yolox nc must be >= 1, got " + std::to_string(o_.nc));
    s_ = detail::scale_for(o_.size);
    reset();
  }
  void reset() override {
    backbone = register_module("backbone", YOLOPAFPN(s_));
    head = register_module("head", YOLOXHead(o_.nc, s_));
  }
  // x: [B, 3, H, W] (0..255 BGR), H and W multiples of 32 -> per stride 8 / 16 / 32 the raw map
  // [B, 5 + nc, H/s, W/s].
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    if (x.dim() != 4 || x.size(1) != 3 || x.size(2) % 32 != 0 || x.size(3) % 32 != 0)
      throw ConfigError("yolox input must be [B, 3, H, W] with H and W multiples of 32, got " +
                        std::string(c10::str(x.sizes())));
    return head->forward(backbone->forward(x));
  }
  static std::vector<int64_t> strides() { return {8, 16, 32}; }
  const YoloxOptions& options() const { return o_; }

  YOLOPAFPN backbone{nullptr};
  YOLOXHead head{nullptr};

 private:
  YoloxOptions o_;
  detail::Scale s_{};
};
TORCH_MODULE(Yolox);

}  // namespace libreyolo::families::yolox
