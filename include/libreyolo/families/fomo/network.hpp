#pragma once
// FOMO (Feature-map Output for Mobile Objects), the original's LibreFOMOModel (libreyolo/models/fomo/nn.py):
// a MobileNetV2 truncated at stride 8 (width multiplier alpha: s 0.35, m 0.50, l 1.00) and a 1x1 head with
// 1 + classes channels (0 = background). Module names equal the original's state-dict keys:
//   backbone.conv1.{0.conv, 1}            3x3/2 conv (TF "SAME" padding) + BN(eps 1e-3) + ReLU6
//   backbone.expanded_conv.conv.{0, 1}    depthwise 3x3 + BN + ReLU6, projection 1x1 + BN
//   backbone.block_1 .. block_5.conv.{0, 1, 2}   inverted residuals (expand 6): expand 1x1, depthwise 3x3, project 1x1
//   backbone.block_6_expand.{0.conv, 1}   1x1 expansion (x6) + BN + ReLU6
//   head                                   1x1 conv with bias
// The original pads each convolution "SAME" for the size it was built for (its imgsz); here the padding is
// computed from the input's size at run time, which is the same at that size and right at any other.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <string>
#include <string_view>

namespace libreyolo::families::fomo {

// The original's _make_divisible: round to the nearest multiple of divisor, never below 90% of v.
inline int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t n = std::max<int64_t>(divisor, static_cast<int64_t>(v + double(divisor) / 2) / divisor * divisor);
  if (double(n) < 0.9 * v) n += divisor;
  return n;
}

// TensorFlow "SAME" padding of one axis: (before, after).
inline std::pair<int64_t, int64_t> same_pad(int64_t in, int64_t k, int64_t s) {
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>((out - 1) * s + k - in, 0);
  return {total / 2, total - total / 2};
}

// Conv2d with "SAME" padding; its parameters live in the child `conv` (the original's StaticSamePadConv2d).
class SamePadConvImpl : public torch::nn::Cloneable<SamePadConvImpl> {
 public:
  SamePadConvImpl(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups)
      : in_(in), out_(out), k_(k), stride_(stride), groups_(groups) { reset(); }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, k_).stride(stride_).groups(groups_).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (k_ == 1 && stride_ == 1) return conv->forward(x);
    const auto [t, b] = same_pad(x.size(2), k_, stride_);
    const auto [l, r] = same_pad(x.size(3), k_, stride_);
    return conv->forward(torch::constant_pad_nd(x, {l, r, t, b}, 0));
  }
  torch::nn::Conv2d conv{nullptr};

 private:
  int64_t in_, out_, k_, stride_, groups_;
};
TORCH_MODULE(SamePadConv);

// conv (SAME) -> BN(eps 1e-3) -> ReLU6 (the original's ConvBNReLU6 / DepthwiseConvBNReLU6, a Sequential:
// children 0 = conv, 1 = BN; the ReLU6 at 2 has no parameters).
class ConvBNReLU6Impl : public torch::nn::Cloneable<ConvBNReLU6Impl> {
 public:
  ConvBNReLU6Impl(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups = 1)
      : in_(in), out_(out), k_(k), stride_(stride), groups_(groups) { reset(); }
  void reset() override {
    conv = register_module("0", SamePadConv(in_, out_, k_, stride_, groups_));
    bn = register_module("1", libreyolo::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(out_).eps(1e-3)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::hardtanh(bn->forward(conv->forward(x)), 0.0, 6.0); }
  SamePadConv conv{nullptr};
  libreyolo::nn::BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_, k_, stride_, groups_;
};
TORCH_MODULE(ConvBNReLU6);

// 1x1 projection -> BN(eps 1e-3) (the original's ProjectConvBN: children 0 = conv, 1 = BN).
class ProjectConvBNImpl : public torch::nn::Cloneable<ProjectConvBNImpl> {
 public:
  ProjectConvBNImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    conv = register_module("0", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, 1).bias(false)));
    bn = register_module("1", libreyolo::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(out_).eps(1e-3)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return bn->forward(conv->forward(x)); }
  torch::nn::Conv2d conv{nullptr};
  libreyolo::nn::BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(ProjectConvBN);

// MobileNetV2 inverted residual: [expand 1x1] -> depthwise 3x3 -> project 1x1, residual when asked.
class InvertedResidualImpl : public torch::nn::Cloneable<InvertedResidualImpl> {
 public:
  InvertedResidualImpl(int64_t in, int64_t out, int64_t stride, int64_t expand, bool residual)
      : in_(in), out_(out), stride_(stride), expand_(expand), residual_(residual) { reset(); }
  void reset() override {
    const int64_t hidden = in_ * expand_;  // int(round(in * expand)) for integer ratios
    torch::nn::Sequential s;
    if (expand_ != 1) s->push_back(ConvBNReLU6(in_, hidden, 1, 1));
    s->push_back(ConvBNReLU6(hidden, hidden, 3, stride_, hidden));
    s->push_back(ProjectConvBN(hidden, out_));
    conv = register_module("conv", s);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv->forward(x);
    return residual_ ? x + y : y;
  }
  torch::nn::Sequential conv{nullptr};

 private:
  int64_t in_, out_, stride_, expand_;
  bool residual_;
};
TORCH_MODULE(InvertedResidual);

struct FomoOptions {
  std::string size = "s";  // s | m | l
  int64_t num_classes = 1;
};

// The original's CONFIGS (libreyolo/models/fomo/nn.py), one row per size: width multiplier alpha, native
// input size, head input channels (= 6 x make_divisible(32 alpha), what the backbone ends with).
struct FomoSize {
  std::string_view name;
  double alpha;
  int64_t imgsz;
  int64_t head_in_channels;
};
inline constexpr std::array<FomoSize, 3> fomo_sizes{{
    {"s", 0.35, 96, 96},
    {"m", 0.50, 192, 96},
    {"l", 1.00, 224, 192},
}};
inline const FomoSize& fomo_size(const std::string& size) {
  for (const auto& r : fomo_sizes)
    if (r.name == size) return r;
  throw ConfigError("FOMO size '" + size + "' is not available; allowed: s, m, l");
}
inline double fomo_alpha(const std::string& size) { return fomo_size(size).alpha; }
inline int64_t fomo_imgsz(const std::string& size) { return fomo_size(size).imgsz; }

class FomoBackboneImpl : public torch::nn::Cloneable<FomoBackboneImpl> {
 public:
  explicit FomoBackboneImpl(std::string size) : size_(std::move(size)) { reset(); }
  void reset() override {
    const double a = fomo_alpha(size_);
    const int64_t c0 = make_divisible(32 * a), c1 = make_divisible(16 * a), c2 = make_divisible(24 * a),
                  c3 = make_divisible(32 * a);
    conv1 = register_module("conv1", ConvBNReLU6(3, c0, 3, 2));
    expanded_conv = register_module("expanded_conv", InvertedResidual(c0, c1, 1, 1, false));
    block_1 = register_module("block_1", InvertedResidual(c1, c2, 2, 6, false));
    block_2 = register_module("block_2", InvertedResidual(c2, c2, 1, 6, true));
    block_3 = register_module("block_3", InvertedResidual(c2, c3, 2, 6, false));
    block_4 = register_module("block_4", InvertedResidual(c3, c3, 1, 6, true));
    block_5 = register_module("block_5", InvertedResidual(c3, c3, 1, 6, true));
    block_6_expand = register_module("block_6_expand", ConvBNReLU6(c3, c3 * 6, 1, 1));
    out_channels_ = c3 * 6;
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv1->forward(x);
    y = expanded_conv->forward(y);
    y = block_1->forward(y);
    y = block_2->forward(y);
    y = block_3->forward(y);
    y = block_4->forward(y);
    y = block_5->forward(y);
    return block_6_expand->forward(y);
  }
  int64_t out_channels() const { return out_channels_; }

  ConvBNReLU6 conv1{nullptr}, block_6_expand{nullptr};
  InvertedResidual expanded_conv{nullptr}, block_1{nullptr}, block_2{nullptr}, block_3{nullptr}, block_4{nullptr},
      block_5{nullptr};

 private:
  std::string size_;
  int64_t out_channels_ = 0;
};
TORCH_MODULE(FomoBackbone);

// x: float [B, 3, S, S] in [-1, 1]. Returns logits [B, 1 + classes, S/8, S/8].
class FomoImpl : public torch::nn::Cloneable<FomoImpl> {
 public:
  explicit FomoImpl(FomoOptions o) : o_(std::move(o)) { reset(); }
  void reset() override {
    if (o_.num_classes < 1) throw ConfigError("FOMO: num_classes = " + std::to_string(o_.num_classes) + " must be >= 1");
    backbone = register_module("backbone", FomoBackbone(o_.size));
    // The original sizes the head from CONFIGS' head_in_channels (equal to the backbone's output channels).
    head = register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(fomo_size(o_.size).head_in_channels,
                                                                              o_.num_classes + 1, 1)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head->forward(backbone->forward(x)); }
  const FomoOptions& options() const { return o_; }

  FomoBackbone backbone{nullptr};
  torch::nn::Conv2d head{nullptr};

 private:
  FomoOptions o_;
};
TORCH_MODULE(Fomo);

}  // namespace libreyolo::families::fomo
