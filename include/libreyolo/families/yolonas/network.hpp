#pragma once
// YOLO-NAS (Deci, 2023) detection network, size s: the QARepVGG backbone (stem, four stages, SPP
// context module), the PAN neck with the extra C2 input (two up stages, two down stages) and the
// PP-YOLOE-style decoupled DFL heads. Written from the original's architecture
// (libreyolo/models/yolonas/nn.py, snapshot c41461e, itself SuperGradients' module tree) and checked
// against its fixture (shared/fixtures/libreyolo/yolonas-s, tests/yolonas/test_fixture.cpp):
// named_parameters() + named_buffers() are exactly its state_dict, so SuperGradients' and LibreYOLO's
// yolo_nas_s checkpoints load by name.
//
// Numerics that matter: every BatchNorm eps 1e-3 / momentum 0.03 (the original's _initialize_weights);
// ReLU everywhere; QARepVGG = post_bn(BN(conv3x3 x) + conv1x1(x) [+ x]) then ReLU, the 1x1 with a bias
// and no BN, trained un-fused; its rbr_reparam conv (the fused kernel) is a parameter of the state
// dict but unused until fuse() (and so gets no gradient while training, as in the original). The CSP
// bottlenecks carry a learnable-looking `alpha` (shape [1], 1.0) on their shortcut: the original's
// trainer never gives it to the optimizer (its parameter groups take only `weight`/`bias`), so here it
// is built with requires_grad=false and stays 1.0 while training. The up stages upsample with a 2x2
// stride-2 ConvTranspose2d. Each head decodes DFL with reg_max + 1 = 17 bins (projection 0..16).
//
// forward() returns {pred_bboxes [B, A, 4] xyxy input pixels, pred_scores [B, A, nc] sigmoid, class
// logits [B, A, nc], DFL logits [B, A, 4·17]} for A = the anchors of strides 8, 16, 32, row-major level
// by level: the original's (decoded, raw) pair without its constant anchor tensors, which
// grid_cell_anchors() gives.
//
// Initialisation for training from scratch, as the original: PyTorch's defaults, then the class
// biases at -log((1 - 0.01) / 0.01) (prior 0.01). Modules are built in the original's order.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>
#include <libreyolo/nn/blocks.hpp>

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolonas {

inline nn::BatchNorm2d nas_bn(int64_t c) {
  return nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(c).eps(1e-3).momentum(0.03));
}

// ---- conv + BN (+ ReLU): the original's `Conv` (names conv, bn) -----------------------------------
class ConvBnImpl : public torch::nn::Cloneable<ConvBnImpl> {
 public:
  ConvBnImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, bool relu = true, int64_t groups = 1)
      : in_(in), out_(out), kernel_(kernel), stride_(stride), groups_(groups), relu_(relu) {
    reset();
  }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, kernel_)
                                                         .stride(stride_)
                                                         .padding(kernel_ / 2)
                                                         .groups(groups_)
                                                         .bias(false)));
    bn = register_module("bn", nas_bn(out_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = bn->forward(nn::counted_conv(*conv, x));
    return relu_ ? torch::relu(y) : y;
  }
  torch::nn::Conv2d conv{nullptr};
  nn::BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_, kernel_, stride_, groups_;
  bool relu_;
};
TORCH_MODULE(ConvBn);

// ---- ConvBNReLU of the heads: the same behind a `seq` (names seq.conv, seq.bn) ------------------------
class SeqConvImpl : public torch::nn::Cloneable<SeqConvImpl> {
 public:
  SeqConvImpl(int64_t in, int64_t out, int64_t kernel) : in_(in), out_(out), kernel_(kernel) { reset(); }
  void reset() override { seq = register_module("seq", ConvBn(in_, out_, kernel_)); }
  torch::Tensor forward(const torch::Tensor& x) { return seq->forward(x); }
  ConvBn seq{nullptr};

 private:
  int64_t in_, out_, kernel_;
};
TORCH_MODULE(SeqConv);

// ---- QARepVGG block (Chu et al. 2022, "Make RepVGG Greater Again") -----------------------------------
// Trains as post_bn(BN(conv3x3(x)) + conv1x1(x) + [x]) -> ReLU. fuse() re-parameterises it: partial =
// the three branches folded into rbr_reparam (then post_bn, ReLU), full = post_bn folded in as well
// (rbr_reparam, ReLU), the original's partial_fusion / full_fusion. A fused block is for inference.
class QARepVGGImpl : public torch::nn::Cloneable<QARepVGGImpl> {
 public:
  enum class Fusion { none, partial, full };
  QARepVGGImpl(int64_t in, int64_t out, int64_t stride = 1, bool residual = true)
      : in_(in), out_(out), stride_(stride), residual_(residual) {
    if (residual_ && (in_ != out_ || stride_ != 1))
      throw ConfigError("QARepVGG: the identity branch needs in == out and stride 1, got " + std::to_string(in_) +
                        " -> " + std::to_string(out_) + " stride " + std::to_string(stride_));
    reset();
  }
  void reset() override {
    branch_3x3 = register_module("branch_3x3", ConvBn(in_, out_, 3, stride_, /*relu=*/false));
    branch_1x1 = register_module("branch_1x1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, 1).stride(stride_).bias(true)));
    post_bn = register_module("post_bn", nas_bn(out_));
    rbr_reparam = register_module("rbr_reparam", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, 3)
                                                                       .stride(stride_)
                                                                       .padding(1)
                                                                       .bias(true)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    switch (fusion_) {
      case Fusion::full: return torch::relu(nn::counted_conv(*rbr_reparam, x));
      case Fusion::partial: return torch::relu(post_bn->forward(nn::counted_conv(*rbr_reparam, x)));
      case Fusion::none: break;
    }
    auto y = branch_3x3->forward(x) + nn::counted_conv(*branch_1x1, x);
    if (residual_) y = y + x;
    return torch::relu(post_bn->forward(y));
  }

  // The equivalent single 3x3 kernel and bias of the three branches (BN of the 3x3 branch folded with
  // its running statistics, the 1x1 padded to 3x3, the identity as a centred 1).
  std::pair<torch::Tensor, torch::Tensor> equivalent_kernel_bias() const {
    torch::NoGradGuard ng;
    const auto& bn3 = *branch_3x3->bn;
    auto stdev = (bn3.running_var + bn3.options.eps()).sqrt();
    auto scale = bn3.weight / stdev;
    auto kernel = branch_3x3->conv->weight * scale.view({-1, 1, 1, 1});
    auto bias = bn3.bias - bn3.running_mean * scale;
    kernel = kernel + torch::constant_pad_nd(branch_1x1->weight, {1, 1, 1, 1});
    bias = bias + branch_1x1->bias;
    if (residual_) {
      auto id = torch::zeros_like(kernel);
      for (int64_t i = 0; i < in_; ++i) id[i][i][1][1] = 1.0;
      kernel = kernel + id;
    }
    return {kernel, bias};
  }
  // Re-parameterise for inference: full = false is the original's partial_fusion, true its full_fusion.
  void fuse(bool full = false) {
    torch::NoGradGuard ng;
    if (fusion_ == Fusion::none) {
      auto [k, b] = equivalent_kernel_bias();
      rbr_reparam->weight.copy_(k);
      rbr_reparam->bias.copy_(b);
      fusion_ = Fusion::partial;
    }
    if (full && fusion_ == Fusion::partial) {
      auto stdev = (post_bn->running_var + post_bn->options.eps()).sqrt();
      auto scale = post_bn->weight / stdev;
      rbr_reparam->weight.mul_(scale.view({-1, 1, 1, 1}));
      rbr_reparam->bias.copy_(rbr_reparam->bias * scale + post_bn->bias - post_bn->running_mean * scale);
      fusion_ = Fusion::full;
    }
  }
  Fusion fusion() const { return fusion_; }

  ConvBn branch_3x3{nullptr};
  torch::nn::Conv2d branch_1x1{nullptr};
  nn::BatchNorm2d post_bn{nullptr};
  torch::nn::Conv2d rbr_reparam{nullptr};

 private:
  int64_t in_, out_, stride_;
  bool residual_;
  Fusion fusion_ = Fusion::none;
};
TORCH_MODULE(QARepVGG);

// ---- CSP bottleneck: two blocks (QARepVGG, or 3x3 Conv in the down stages), alpha-scaled shortcut ----
class BottleneckImpl : public torch::nn::Cloneable<BottleneckImpl> {
 public:
  BottleneckImpl(int64_t c, bool repvgg) : c_(c), repvgg_(repvgg) { reset(); }
  void reset() override {
    if (repvgg_) {
      rep1 = register_module("cv1", QARepVGG(c_, c_));
      rep2 = register_module("cv2", QARepVGG(c_, c_));
    } else {
      conv1 = register_module("cv1", ConvBn(c_, c_, 3));
      conv2 = register_module("cv2", ConvBn(c_, c_, 3));
    }
    // The original's optimizer never updates it (see the header comment).
    alpha = register_parameter("alpha", torch::ones({1}), /*requires_grad=*/false);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = repvgg_ ? rep2->forward(rep1->forward(x)) : conv2->forward(conv1->forward(x));
    return alpha * x + y;
  }
  QARepVGG rep1{nullptr}, rep2{nullptr};
  ConvBn conv1{nullptr}, conv2{nullptr};
  torch::Tensor alpha;

 private:
  int64_t c_;
  bool repvgg_;
};
TORCH_MODULE(Bottleneck);

// ---- CSP layer: conv1 -> bottlenecks, conv2 beside, concat, conv3 ------------------------------------
class CSPLayerImpl : public torch::nn::Cloneable<CSPLayerImpl> {
 public:
  CSPLayerImpl(int64_t in, int64_t out, int64_t n, int64_t hidden, bool repvgg, bool concat_intermediates = false)
      : in_(in), out_(out), n_(n), hidden_(hidden), repvgg_(repvgg), concat_(concat_intermediates) {
    reset();
  }
  void reset() override {
    conv1 = register_module("conv1", ConvBn(in_, hidden_, 1));
    conv2 = register_module("conv2", ConvBn(in_, hidden_, 1));
    conv3 = register_module("conv3", ConvBn(hidden_ * (2 + (concat_ ? n_ : 0)), out_, 1));
    bottlenecks = torch::nn::ModuleList();
    for (int64_t i = 0; i < n_; ++i) bottlenecks->push_back(Bottleneck(hidden_, repvgg_));
    bottlenecks = register_module("bottlenecks", bottlenecks);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    std::vector<torch::Tensor> parts;
    auto y = conv1->forward(x);
    if (concat_) parts.push_back(y);
    for (const auto& m : *bottlenecks) {
      y = m->as<BottleneckImpl>()->forward(y);
      if (concat_) parts.push_back(y);
    }
    if (!concat_) parts.push_back(y);
    parts.push_back(conv2->forward(x));
    return conv3->forward(torch::cat(parts, 1));
  }
  ConvBn conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::ModuleList bottlenecks{nullptr};

 private:
  int64_t in_, out_, n_, hidden_;
  bool repvgg_, concat_;
};
TORCH_MODULE(CSPLayer);

// ---- one size's widths ------------------------------------------------------------------------------
struct Variant {
  int64_t stem;
  std::array<int64_t, 4> stage_out, stage_blocks, stage_hidden;
  std::array<bool, 4> stage_concat;
  std::array<int64_t, 4> neck_out;  // neck1..neck4
  std::array<int64_t, 2> up_blocks, up_hidden, down_blocks, down_hidden;
  double head_width_mult;
};
inline Variant variant_for(const std::string& size) {
  if (size == "s")
    return {48, {96, 192, 384, 768}, {2, 3, 5, 2}, {32, 64, 96, 192}, {false, false, false, false},
            {192, 96, 192, 384}, {2, 2}, {64, 48}, {2, 2}, {64, 64}, 0.5};
  // The original's _VARIANT_CONFIGS (models/yolonas/nn.py at c41461e).
  if (size == "m")
    return {48, {96, 192, 384, 768}, {2, 3, 5, 2}, {64, 128, 256, 384}, {true, true, true, false},
            {192, 96, 192, 384}, {2, 3}, {192, 64}, {2, 3}, {192, 256}, 0.75};
  if (size == "l")
    return {48, {96, 192, 384, 768}, {2, 3, 5, 2}, {96, 128, 256, 512}, {true, true, true, true},
            {192, 96, 192, 384}, {4, 4}, {128, 128}, {4, 4}, {128, 256}, 1.0};
  throw ConfigError("unknown yolonas size '" + size + "'; allowed: s, m, l");
}
// The original's width_multiplier(x, factor, 8): int(x·factor) rounded up to a multiple of 8.
inline int64_t width8(int64_t x, double factor) {
  const auto scaled = static_cast<int64_t>(static_cast<double>(x) * factor);
  return (scaled + 7) / 8 * 8;
}

// ---- backbone -------------------------------------------------------------------------------------
class StemImpl : public torch::nn::Cloneable<StemImpl> {
 public:
  StemImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override { conv = register_module("conv", QARepVGG(in_, out_, 2, false)); }
  torch::Tensor forward(const torch::Tensor& x) { return conv->forward(x); }
  QARepVGG conv{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(Stem);

class StageImpl : public torch::nn::Cloneable<StageImpl> {
 public:
  StageImpl(int64_t in, int64_t out, int64_t n, int64_t hidden, bool concat)
      : in_(in), out_(out), n_(n), hidden_(hidden), concat_(concat) {
    reset();
  }
  void reset() override {
    downsample = register_module("downsample", QARepVGG(in_, out_, 2, false));
    blocks = register_module("blocks", CSPLayer(out_, out_, n_, hidden_, true, concat_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return blocks->forward(downsample->forward(x)); }
  QARepVGG downsample{nullptr};
  CSPLayer blocks{nullptr};

 private:
  int64_t in_, out_, n_, hidden_;
  bool concat_;
};
TORCH_MODULE(Stage);

class SPPImpl : public torch::nn::Cloneable<SPPImpl> {
 public:
  SPPImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    cv1 = register_module("cv1", ConvBn(in_, in_ / 2, 1));
    cv2 = register_module("cv2", ConvBn(in_ / 2 * 4, out_, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = cv1->forward(x);
    std::vector<torch::Tensor> parts{y};
    for (int64_t k : {5, 9, 13}) parts.push_back(torch::max_pool2d(y, {k, k}, {1, 1}, {k / 2, k / 2}));
    return cv2->forward(torch::cat(parts, 1));
  }
  ConvBn cv1{nullptr}, cv2{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(SPP);

class BackboneImpl : public torch::nn::Cloneable<BackboneImpl> {
 public:
  explicit BackboneImpl(Variant v) : v_(v) { reset(); }
  void reset() override {
    stem = register_module("stem", Stem(3, v_.stem));
    int64_t in = v_.stem;
    for (size_t i = 0; i < 4; ++i) {
      stages[i] = register_module("stage" + std::to_string(i + 1),
                                  Stage(in, v_.stage_out[i], v_.stage_blocks[i], v_.stage_hidden[i], v_.stage_concat[i]));
      in = v_.stage_out[i];
    }
    context_module = register_module("context_module", SPP(v_.stage_out[3], v_.stage_out[3]));
  }
  // c2, c3, c4, c5 (strides 4, 8, 16, 32; c5 after the SPP).
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    auto c2 = stages[0]->forward(stem->forward(x));
    auto c3 = stages[1]->forward(c2);
    auto c4 = stages[2]->forward(c3);
    auto c5 = context_module->forward(stages[3]->forward(c4));
    return {c2, c3, c4, c5};
  }
  Stem stem{nullptr};
  std::array<Stage, 4> stages{Stage{nullptr}, Stage{nullptr}, Stage{nullptr}, Stage{nullptr}};
  SPP context_module{nullptr};

 private:
  Variant v_;
};
TORCH_MODULE(Backbone);

// ---- neck -----------------------------------------------------------------------------------------
// Up stage with three inputs (x, skip1, skip2), reduce_channels on: 1x1 reductions of both skips, the
// finer one downsampled by a 3x3 stride-2 Conv; x -> 1x1 conv (x_inter) -> 2x2 transposed conv; concat
// [up, skip1, down(skip2)] -> 1x1 -> CSP. Returns (x_inter, out).
class UpStageImpl : public torch::nn::Cloneable<UpStageImpl> {
 public:
  UpStageImpl(int64_t in, int64_t skip1, int64_t skip2, int64_t out, int64_t n, int64_t hidden)
      : in_(in), skip1_(skip1), skip2_(skip2), out_(width8(out, 1.0)), n_(n), hidden_(hidden) {
    reset();
  }
  void reset() override {
    reduce_skip1 = register_module("reduce_skip1", ConvBn(skip1_, out_, 1));
    reduce_skip2 = register_module("reduce_skip2", ConvBn(skip2_, out_, 1));
    conv = register_module("conv", ConvBn(in_, out_, 1));
    upsample = register_module("upsample", torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(out_, out_, 2).stride(2)));
    downsample = register_module("downsample", ConvBn(out_, out_, 3, 2));
    reduce_after_concat = register_module("reduce_after_concat", ConvBn(3 * out_, out_, 1));
    blocks = register_module("blocks", CSPLayer(out_, out_, n_, hidden_, true));
  }
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, const torch::Tensor& s1, const torch::Tensor& s2) {
    auto a = reduce_skip1->forward(s1);
    auto b = downsample->forward(reduce_skip2->forward(s2));
    auto inter = conv->forward(x);
    auto y = torch::cat({upsample->forward(inter), a, b}, 1);
    return {inter, blocks->forward(reduce_after_concat->forward(y))};
  }
  int64_t out_channels() const { return out_; }
  ConvBn reduce_skip1{nullptr}, reduce_skip2{nullptr}, conv{nullptr}, downsample{nullptr}, reduce_after_concat{nullptr};
  torch::nn::ConvTranspose2d upsample{nullptr};
  CSPLayer blocks{nullptr};

 private:
  int64_t in_, skip1_, skip2_, out_, n_, hidden_;
};
TORCH_MODULE(UpStage);

// Down stage: 3x3 stride-2 Conv to out/2, concat with the skip, CSP of 3x3 Conv bottlenecks.
class DownStageImpl : public torch::nn::Cloneable<DownStageImpl> {
 public:
  DownStageImpl(int64_t in, int64_t skip, int64_t out, int64_t n, int64_t hidden)
      : in_(in), skip_(skip), out_(width8(out, 1.0)), n_(n), hidden_(hidden) {
    reset();
  }
  void reset() override {
    conv = register_module("conv", ConvBn(in_, out_ / 2, 3, 2));
    blocks = register_module("blocks", CSPLayer(out_ / 2 + skip_, out_, n_, hidden_, false));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& skip) {
    return blocks->forward(torch::cat({conv->forward(x), skip}, 1));
  }
  ConvBn conv{nullptr};
  CSPLayer blocks{nullptr};

 private:
  int64_t in_, skip_, out_, n_, hidden_;
};
TORCH_MODULE(DownStage);

class NeckImpl : public torch::nn::Cloneable<NeckImpl> {
 public:
  explicit NeckImpl(Variant v) : v_(v) { reset(); }
  void reset() override {
    const auto& c = v_.stage_out;  // c2, c3, c4, c5
    neck1 = register_module("neck1", UpStage(c[3], c[2], c[1], v_.neck_out[0], v_.up_blocks[0], v_.up_hidden[0]));
    neck2 = register_module("neck2", UpStage(neck1->out_channels(), c[1], c[0], v_.neck_out[1], v_.up_blocks[1], v_.up_hidden[1]));
    neck3 = register_module("neck3", DownStage(neck2->out_channels(), neck2->out_channels(), v_.neck_out[2],
                                               v_.down_blocks[0], v_.down_hidden[0]));
    neck4 = register_module("neck4", DownStage(width8(v_.neck_out[2], 1.0), neck1->out_channels(), v_.neck_out[3],
                                               v_.down_blocks[1], v_.down_hidden[1]));
  }
  // p3, p4, p5 (strides 8, 16, 32).
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& c) {
    auto [n1_inter, x] = neck1->forward(c[3], c[2], c[1]);
    auto [n2_inter, p3] = neck2->forward(x, c[1], c[0]);
    auto p4 = neck3->forward(p3, n2_inter);
    auto p5 = neck4->forward(p4, n1_inter);
    return {p3, p4, p5};
  }
  std::vector<int64_t> out_channels() const {
    return {neck2->out_channels(), width8(v_.neck_out[2], 1.0), width8(v_.neck_out[3], 1.0)};
  }
  UpStage neck1{nullptr}, neck2{nullptr};
  DownStage neck3{nullptr}, neck4{nullptr};

 private:
  Variant v_;
};
TORCH_MODULE(Neck);

// ---- heads ----------------------------------------------------------------------------------------
// One level: 1x1 stem, one 3x3 ConvBNReLU tower each for classes and boxes, 1x1 predictions.
class DFLHeadImpl : public torch::nn::Cloneable<DFLHeadImpl> {
 public:
  DFLHeadImpl(int64_t in, int64_t inter, int64_t nc, int64_t reg_max) : in_(in), inter_(inter), nc_(nc), reg_max_(reg_max) {
    reset();
  }
  void reset() override {
    stem = register_module("stem", SeqConv(in_, inter_, 1));
    cls_convs = register_module("cls_convs", torch::nn::Sequential(SeqConv(inter_, inter_, 3)));
    reg_convs = register_module("reg_convs", torch::nn::Sequential(SeqConv(inter_, inter_, 3)));
    cls_pred = register_module("cls_pred", torch::nn::Conv2d(torch::nn::Conv2dOptions(inter_, nc_, 1)));
    reg_pred = register_module("reg_pred", torch::nn::Conv2d(torch::nn::Conv2dOptions(inter_, 4 * (reg_max_ + 1), 1)));
    torch::NoGradGuard ng;
    cls_pred->bias.fill_(-std::log((1 - 0.01) / 0.01));
  }
  // (DFL logits [B, 4·(reg_max+1), H, W], class logits [B, nc, H, W]).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) {
    auto s = stem->forward(x);
    auto c = cls_convs->ptr(0)->as<SeqConvImpl>()->forward(s);
    auto r = reg_convs->ptr(0)->as<SeqConvImpl>()->forward(s);
    return {nn::counted_conv(*reg_pred, r), nn::counted_conv(*cls_pred, c)};
  }
  SeqConv stem{nullptr};
  torch::nn::Sequential cls_convs{nullptr}, reg_convs{nullptr};
  torch::nn::Conv2d cls_pred{nullptr}, reg_pred{nullptr};

 private:
  int64_t in_, inter_, nc_, reg_max_;
};
TORCH_MODULE(DFLHead);

// Anchor points (cell centres, input pixels) and strides of every level, the original's
// NDFLHeads._generate_anchors: [A, 2], [A, 1].
inline std::pair<torch::Tensor, torch::Tensor> anchor_points(const std::vector<std::array<int64_t, 2>>& hw,
                                                             const std::vector<int64_t>& strides,
                                                             torch::TensorOptions opts, double offset = 0.5) {
  std::vector<torch::Tensor> pts, st;
  for (size_t i = 0; i < hw.size(); ++i) {
    auto sx = torch::arange(hw[i][1], opts) + offset;
    auto sy = torch::arange(hw[i][0], opts) + offset;
    auto g = torch::meshgrid({sy, sx}, "ij");
    pts.push_back(torch::stack({g[1], g[0]}, -1).view({-1, 2}));
    st.push_back(torch::full({hw[i][0] * hw[i][1], 1}, static_cast<double>(strides[i]), opts));
  }
  return {torch::cat(pts), torch::cat(st)};
}

struct GridAnchors {
  torch::Tensor anchors;  // [A, 4] xyxy square cells of side grid_cell_size·stride around each point (pixels)
  torch::Tensor points;   // [A, 2] (i + 0.5)·stride (pixels)
  std::vector<int64_t> per_level;
  torch::Tensor strides;  // [A, 1]
};
// The original's generate_anchors_for_grid_cell (what the loss's assigners use).
inline GridAnchors grid_cell_anchors(const std::vector<std::array<int64_t, 2>>& hw, const std::vector<int64_t>& strides,
                                     torch::Device device, double cell_size = 5.0, double offset = 0.5) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  GridAnchors g;
  std::vector<torch::Tensor> anchors, points, st;
  for (size_t i = 0; i < hw.size(); ++i) {
    const double s = static_cast<double>(strides[i]), half = cell_size * s * 0.5;
    auto sx = (torch::arange(hw[i][1], opts) + offset) * s;
    auto sy = (torch::arange(hw[i][0], opts) + offset) * s;
    auto m = torch::meshgrid({sy, sx}, "ij");
    anchors.push_back(torch::stack({m[1] - half, m[0] - half, m[1] + half, m[0] + half}, -1).view({-1, 4}));
    points.push_back(torch::stack({m[1], m[0]}, -1).view({-1, 2}));
    g.per_level.push_back(hw[i][0] * hw[i][1]);
    st.push_back(torch::full({g.per_level.back(), 1}, s, opts));
  }
  g.anchors = torch::cat(anchors);
  g.points = torch::cat(points);
  g.strides = torch::cat(st);
  return g;
}

// DFL logits [..., 4·(reg_max+1)] -> expected distances [..., 4] (softmax over each side's bins · 0..reg_max).
inline torch::Tensor dfl_expectation(const torch::Tensor& dist, int64_t reg_max) {
  std::vector<int64_t> shape(dist.sizes().begin(), dist.sizes().end() - 1);
  shape.push_back(4);
  shape.push_back(reg_max + 1);
  auto p = dist.reshape(shape).softmax(-1);
  return (p * torch::arange(reg_max + 1, p.options())).sum(-1);
}
// (l, t, r, b) from points -> xyxy.
inline torch::Tensor distance2bbox(const torch::Tensor& points, const torch::Tensor& ltrb) {
  return torch::cat({points - ltrb.narrow(-1, 0, 2), points + ltrb.narrow(-1, 2, 2)}, -1);
}

class HeadsImpl : public torch::nn::Cloneable<HeadsImpl> {
 public:
  HeadsImpl(int64_t nc, std::vector<int64_t> in, double width_mult, int64_t reg_max)
      : nc_(nc), in_(std::move(in)), width_mult_(width_mult), reg_max_(reg_max) {
    reset();
  }
  void reset() override {
    const int64_t inter[3] = {128, 256, 512};
    for (size_t i = 0; i < 3; ++i)
      heads[i] = register_module("head" + std::to_string(i + 1), DFLHead(in_[i], width8(inter[i], width_mult_), nc_, reg_max_));
  }
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& feats) {
    std::vector<torch::Tensor> cls, reg, reduced;
    std::vector<std::array<int64_t, 2>> hw;
    for (size_t i = 0; i < 3; ++i) {
      auto [r, c] = heads[i]->forward(feats[i]);
      const int64_t b = r.size(0);
      hw.push_back({r.size(2), r.size(3)});
      reg.push_back(r.flatten(2).permute({0, 2, 1}));   // [B, hw, 4·(R+1)]
      cls.push_back(c.reshape({b, nc_, -1}));
    }
    auto cls_logits = torch::cat(cls, -1).permute({0, 2, 1});  // [B, A, nc]
    auto reg_dist = torch::cat(reg, 1);                        // [B, A, 4·(R+1)]
    // Decoded in float32 whatever the autocast dtype (the anchors are exact integers + 0.5 either way).
    auto [points, strides] = anchor_points(hw, {8, 16, 32}, reg_dist.options().dtype(torch::kFloat32));
    auto boxes = distance2bbox(points, dfl_expectation(reg_dist.to(torch::kFloat32), reg_max_)) * strides;
    return {boxes, cls_logits.sigmoid(), cls_logits, reg_dist};
  }
  int64_t reg_max() const { return reg_max_; }
  std::array<DFLHead, 3> heads{DFLHead{nullptr}, DFLHead{nullptr}, DFLHead{nullptr}};

 private:
  int64_t nc_;
  std::vector<int64_t> in_;
  double width_mult_;
  int64_t reg_max_;
};
TORCH_MODULE(Heads);

struct YoloNasOptions {
  std::string size = "s";
  int64_t nc = 80;
  int64_t reg_max = 16;
};

class YoloNasImpl : public torch::nn::Cloneable<YoloNasImpl> {
 public:
  explicit YoloNasImpl(YoloNasOptions o = {}) : options_(std::move(o)) {
    if (options_.nc < 1) throw ConfigError("yolonas nc must be >= 1, got " + std::to_string(options_.nc));
    if (options_.reg_max < 1) throw ConfigError("yolonas reg_max must be >= 1, got " + std::to_string(options_.reg_max));
    variant_ = variant_for(options_.size);
    reset();
  }
  void reset() override {
    backbone = register_module("backbone", Backbone(variant_));
    neck = register_module("neck", Neck(variant_));
    heads = register_module("heads", Heads(options_.nc, neck->out_channels(), variant_.head_width_mult, options_.reg_max));
  }
  // x: [B, 3, H, W], H and W multiples of 32 -> {boxes, scores, class logits, DFL logits} (header comment).
  std::vector<torch::Tensor> forward(torch::Tensor x) {
    if (x.dim() != 4 || x.size(1) != 3 || x.size(2) % 32 != 0 || x.size(3) % 32 != 0)
      throw ConfigError("yolonas input must be [B, 3, H, W] with H and W multiples of 32, got " + c10::str(x.sizes()));
    return heads->forward(neck->forward(backbone->forward(x)));
  }
  // Re-parameterises every QARepVGG block for inference (partial: keeps post_bn; full: folds it too).
  void fuse(bool full = false) {
    for (auto& m : modules(/*include_self=*/false))
      if (auto* q = dynamic_cast<QARepVGGImpl*>(m.get())) q->fuse(full);
  }
  std::vector<int64_t> strides() const { return {8, 16, 32}; }
  const YoloNasOptions& options() const { return options_; }

  Backbone backbone{nullptr};
  Neck neck{nullptr};
  Heads heads{nullptr};

 private:
  YoloNasOptions options_;
  Variant variant_{};
};
TORCH_MODULE(YoloNas);

}  // namespace libreyolo::families::yolonas
