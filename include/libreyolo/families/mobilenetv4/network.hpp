#pragma once
// MobileNetV4 conv-small / conv-medium / conv-large (Qin et al. 2024, "MobileNetV4 - Universal Models for the
// Mobile Ecosystem"), the original's libreyolo/models/mobilenetv4/nn.py (ARCH_DEFS "s", "m", "l": timm's
// mobilenetv4_conv_{small,medium,large}): a 3x3/2 stem (32 channels; 24 for "l"), five stages of ConvBnAct
// ('cn'), EdgeResidual / FusedIB ('er') and Universal Inverted Bottleneck ('uir') blocks, then global
// pooling, a 1x1 conv to 1280 + BN + ReLU and the linear classifier. ReLU throughout, no squeeze-excite, no
// attention (the original registers no hybrid size). Module names equal the original's (timm's) state-dict keys:
//   conv_stem, bn1                                  stem
//   blocks.<stage>.<block>.{conv, bn1}             'cn' blocks
//   blocks.<stage>.<block>.{conv_exp, bn1, conv_pwl, bn2}   'er' blocks (m, l: the first stage)
//   blocks.<stage>.<block>.{dw_start, pw_exp, dw_mid, pw_proj}.{conv, bn}   'uir' blocks (dw_start / dw_mid
//                                                  absent when the block string has a0 / k0)
//   conv_head, norm_head, classifier               head
// An ER block is: kxk conv (strides) to make_divisible(in * e) + BN + ReLU -> 1x1 projection + BN (no act),
// residual when in == out and stride 1.
// A UIB is: optional depthwise kxk (no act; strides when there is no middle depthwise) -> 1x1 expansion
// (make_divisible(in * e)) + ReLU -> optional depthwise kxk + ReLU (strides) -> 1x1 projection (no act),
// residual when in == out and stride 1 ("extra depthwise" variants: both / start only / middle only / none).
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>

#include <torch/torch.h>

#include <string>
#include <vector>

namespace libreyolo::families::mobilenetv4 {

// timm's make_divisible (divisor 8, round_limit 0.9).
inline int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t n = std::max<int64_t>(divisor, static_cast<int64_t>(v + double(divisor) / 2) / divisor * divisor);
  if (double(n) < 0.9 * v) n += divisor;
  return n;
}
inline int64_t same_padding(int64_t k, int64_t stride) { return ((stride - 1) + (k - 1)) / 2; }  // timm get_padding

// conv -> BN -> optional ReLU; children `conv`, `bn` (timm ConvNormAct).
class ConvNormActImpl : public torch::nn::Cloneable<ConvNormActImpl> {
 public:
  ConvNormActImpl(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups, bool act)
      : in_(in), out_(out), k_(k), stride_(stride), groups_(groups), act_(act) { reset(); }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, k_).stride(stride_)
                                                         .padding(same_padding(k_, stride_)).groups(groups_).bias(false)));
    bn = register_module("bn", libreyolo::nn::BatchNorm2d(out_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = bn->forward(conv->forward(x));
    return act_ ? torch::relu(y) : y;
  }
  torch::nn::Conv2d conv{nullptr};
  libreyolo::nn::BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_, k_, stride_, groups_;
  bool act_;
};
TORCH_MODULE(ConvNormAct);

// 'cn': conv -> BN -> ReLU; children `conv`, `bn1` (timm ConvBnAct; no skip in conv-small).
class ConvBnActImpl : public torch::nn::Cloneable<ConvBnActImpl> {
 public:
  ConvBnActImpl(int64_t in, int64_t out, int64_t k, int64_t stride) : in_(in), out_(out), k_(k), stride_(stride) { reset(); }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, k_).stride(stride_)
                                                         .padding(same_padding(k_, stride_)).bias(false)));
    bn1 = register_module("bn1", libreyolo::nn::BatchNorm2d(out_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(bn1->forward(conv->forward(x))); }
  torch::nn::Conv2d conv{nullptr};
  libreyolo::nn::BatchNorm2d bn1{nullptr};

 private:
  int64_t in_, out_, k_, stride_;
};
TORCH_MODULE(ConvBnAct);

// 'er': the fused inverted bottleneck (timm EdgeResidual); children `conv_exp`, `bn1`, `conv_pwl`, `bn2`.
class EdgeResidualImpl : public torch::nn::Cloneable<EdgeResidualImpl> {
 public:
  EdgeResidualImpl(int64_t in, int64_t out, int64_t k, int64_t stride, double expand)
      : in_(in), out_(out), k_(k), stride_(stride), expand_(expand) { reset(); }
  void reset() override {
    const int64_t mid = make_divisible(double(in_) * expand_);
    conv_exp = register_module("conv_exp", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, mid, k_).stride(stride_)
                                                                 .padding(same_padding(k_, stride_)).bias(false)));
    bn1 = register_module("bn1", libreyolo::nn::BatchNorm2d(mid));
    conv_pwl = register_module("conv_pwl", torch::nn::Conv2d(torch::nn::Conv2dOptions(mid, out_, 1).bias(false)));
    bn2 = register_module("bn2", libreyolo::nn::BatchNorm2d(out_));
    skip_ = in_ == out_ && stride_ == 1;
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = bn2->forward(conv_pwl->forward(torch::relu(bn1->forward(conv_exp->forward(x)))));
    return skip_ ? y + x : y;
  }
  torch::nn::Conv2d conv_exp{nullptr}, conv_pwl{nullptr};
  libreyolo::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};

 private:
  int64_t in_, out_, k_, stride_;
  double expand_;
  bool skip_ = false;
};
TORCH_MODULE(EdgeResidual);

// 'uir': the Universal Inverted Bottleneck (timm UniversalInvertedResidual).
class UniversalInvertedResidualImpl : public torch::nn::Cloneable<UniversalInvertedResidualImpl> {
 public:
  UniversalInvertedResidualImpl(int64_t in, int64_t out, int64_t k_start, int64_t k_mid, int64_t stride, double expand)
      : in_(in), out_(out), k_start_(k_start), k_mid_(k_mid), stride_(stride), expand_(expand) { reset(); }
  void reset() override {
    if (k_start_) dw_start = register_module("dw_start", ConvNormAct(in_, in_, k_start_, k_mid_ ? 1 : stride_, in_, false));
    const int64_t mid = make_divisible(double(in_) * expand_);
    pw_exp = register_module("pw_exp", ConvNormAct(in_, mid, 1, 1, 1, true));
    if (k_mid_) dw_mid = register_module("dw_mid", ConvNormAct(mid, mid, k_mid_, stride_, mid, true));
    pw_proj = register_module("pw_proj", ConvNormAct(mid, out_, 1, 1, 1, false));
    skip_ = in_ == out_ && stride_ == 1;
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = dw_start ? dw_start->forward(x) : x;
    y = pw_exp->forward(y);
    if (dw_mid) y = dw_mid->forward(y);
    y = pw_proj->forward(y);
    return skip_ ? y + x : y;
  }
  ConvNormAct dw_start{nullptr}, pw_exp{nullptr}, dw_mid{nullptr}, pw_proj{nullptr};

 private:
  int64_t in_, out_, k_start_, k_mid_, stride_;
  double expand_;
  bool skip_ = false;
};
TORCH_MODULE(UniversalInvertedResidual);

// One block of the architecture table (timm's block strings, repeats expanded).
struct BlockDef {
  char type;        // 'c' = cn, 'e' = er, 'u' = uir
  int64_t k_start;  // uir: a (0 = none); cn, er: kernel
  int64_t k_mid;    // uir: k (0 = none)
  int64_t stride;
  double expand;
  int64_t out;
  int repeats = 1;
};

// One size of the original's ARCH_DEFS: the stem's channels and the five stages.
struct ArchDef {
  int64_t stem;
  std::vector<std::vector<BlockDef>> stages;
};

// ARCH_DEFS["s"] (conv-small), ["m"] (conv-medium), ["l"] (conv-large); throws for any other size.
inline ArchDef arch_def(const std::string& size) {
  if (size == "s")
    return {32,
            {
                {{'c', 3, 0, 2, 1, 32}, {'c', 1, 0, 1, 1, 32}},
                {{'c', 3, 0, 2, 1, 96}, {'c', 1, 0, 1, 1, 64}},
                {{'u', 5, 5, 2, 3, 96}, {'u', 0, 3, 1, 2, 96, 4}, {'u', 3, 0, 1, 4, 96}},
                {{'u', 3, 3, 2, 6, 128}, {'u', 5, 5, 1, 4, 128}, {'u', 0, 5, 1, 4, 128}, {'u', 0, 5, 1, 3, 128},
                 {'u', 0, 3, 1, 4, 128, 2}},
                {{'c', 1, 0, 1, 1, 960}},
            }};
  if (size == "m")
    return {32,
            {
                {{'e', 3, 0, 2, 4, 48}},
                {{'u', 3, 5, 2, 4, 80}, {'u', 3, 3, 1, 2, 80}},
                {{'u', 3, 5, 2, 6, 160}, {'u', 3, 3, 1, 4, 160, 2}, {'u', 3, 5, 1, 4, 160}, {'u', 3, 3, 1, 4, 160},
                 {'u', 3, 0, 1, 4, 160}, {'u', 0, 0, 1, 2, 160}, {'u', 3, 0, 1, 4, 160}},
                {{'u', 5, 5, 2, 6, 256}, {'u', 5, 5, 1, 4, 256}, {'u', 3, 5, 1, 4, 256, 2}, {'u', 0, 0, 1, 4, 256},
                 {'u', 3, 0, 1, 4, 256}, {'u', 3, 5, 1, 2, 256}, {'u', 5, 5, 1, 4, 256}, {'u', 0, 0, 1, 4, 256, 2},
                 {'u', 5, 0, 1, 2, 256}},
                {{'c', 1, 0, 1, 1, 960}},
            }};
  if (size == "l")
    return {24,
            {
                {{'e', 3, 0, 2, 4, 48}},
                {{'u', 3, 5, 2, 4, 96}, {'u', 3, 3, 1, 4, 96}},
                {{'u', 3, 5, 2, 4, 192}, {'u', 3, 3, 1, 4, 192, 3}, {'u', 3, 5, 1, 4, 192}, {'u', 5, 3, 1, 4, 192, 5},
                 {'u', 3, 0, 1, 4, 192}},
                {{'u', 5, 5, 2, 4, 512, 4}, {'u', 5, 0, 1, 4, 512}, {'u', 5, 3, 1, 4, 512}, {'u', 5, 0, 1, 4, 512, 2},
                 {'u', 5, 3, 1, 4, 512}, {'u', 5, 5, 1, 4, 512}, {'u', 5, 0, 1, 4, 512, 3}},
                {{'c', 1, 0, 1, 1, 960}},
            }};
  throw ConfigError("MobileNetV4 size '" + size + "' is not available; allowed: s, m, l");
}

struct MobileNetV4Options {
  std::string size = "s";
  int64_t num_classes = 1000;
};

// x: float [B, 3, H, W], ImageNet-normalised. Returns logits [B, num_classes].
class MobileNetV4Impl : public torch::nn::Cloneable<MobileNetV4Impl> {
 public:
  static constexpr int64_t head_hidden = 1280;
  explicit MobileNetV4Impl(MobileNetV4Options o) : o_(std::move(o)) { reset(); }
  void reset() override {
    const ArchDef arch = arch_def(o_.size);
    const int64_t stem = make_divisible(double(arch.stem));
    conv_stem = register_module("conv_stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, stem, 3).stride(2)
                                                                   .padding(same_padding(3, 2)).bias(false)));
    bn1 = register_module("bn1", libreyolo::nn::BatchNorm2d(stem));
    blocks = register_module("blocks", torch::nn::ModuleList());
    int64_t in = stem;
    for (const auto& stage : arch.stages) {
      torch::nn::Sequential seq;
      int idx = 0;
      for (const auto& d : stage)
        for (int r = 0; r < d.repeats; ++r, ++idx) {
          const int64_t stride = idx == 0 ? d.stride : 1;  // only a stage's first block strides
          const int64_t out = make_divisible(double(d.out));
          if (d.type == 'c') seq->push_back(ConvBnAct(in, out, d.k_start, stride));
          else if (d.type == 'e') seq->push_back(EdgeResidual(in, out, d.k_start, stride, d.expand));
          else seq->push_back(UniversalInvertedResidual(in, out, d.k_start, d.k_mid, stride, d.expand));
          in = out;
        }
      blocks->push_back(seq);
    }
    conv_head = register_module("conv_head", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, head_hidden, 1).bias(false)));
    norm_head = register_module("norm_head", libreyolo::nn::BatchNorm2d(head_hidden));
    classifier = register_module("classifier", torch::nn::Linear(head_hidden, o_.num_classes));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1->forward(conv_stem->forward(x)));
    y = forward_blocks(y);
    y = torch::adaptive_avg_pool2d(y, {1, 1});
    y = torch::relu(norm_head->forward(conv_head->forward(y)));
    return classifier->forward(y.flatten(1));
  }
  // The five stages (stride 32, 960 channels).
  torch::Tensor forward_blocks(torch::Tensor y) {
    for (const auto& stage : *blocks) y = stage->as<torch::nn::Sequential>()->forward(y);
    return y;
  }
  const MobileNetV4Options& options() const { return o_; }

  torch::nn::Conv2d conv_stem{nullptr}, conv_head{nullptr};
  libreyolo::nn::BatchNorm2d bn1{nullptr}, norm_head{nullptr};
  torch::nn::ModuleList blocks{nullptr};  // one Sequential per stage
  torch::nn::Linear classifier{nullptr};

 private:
  MobileNetV4Options o_;
};
TORCH_MODULE(MobileNetV4);

}  // namespace libreyolo::families::mobilenetv4
