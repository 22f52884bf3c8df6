#pragma once
// GELAN building blocks of YOLOv9 (Wang et al. 2024): Conv-BN-SiLU, RepConvN, RepNBottleneck, RepNCSP,
// RepNCSPELAN4, ELAN1, AConv, ADown, SPPELAN. Every block is a Cloneable module (the EMA deep-copies
// the network) and routes its convolutions through counted_conv() so FLOPs can be measured.
// Sub-module names follow the LibreYOLO9 state-dict layout (conv/bn, cv1..cv5, m) so checkpoints map.
#include <libreyolo/nn/batch_norm.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace libreyolo::nn {

// ---- conv FLOP counting ----------------------------------------------------------------------
// While a ConvMacCounter scope is alive on this thread, every counted_conv() adds the multiply-
// accumulates of one image's pass (weight elements × output pixels). No scope: one pointer test.
struct ConvMacCounter {
  int64_t macs = 0;
  ConvMacCounter() : previous_(active()) { active() = this; }
  ~ConvMacCounter() { active() = previous_; }
  ConvMacCounter(const ConvMacCounter&) = delete;
  ConvMacCounter& operator=(const ConvMacCounter&) = delete;
  // FLOPs with the published convention (2 × MACs), in units of 1e9.
  double gflops() const { return 2.0 * static_cast<double>(macs) / 1e9; }
  static ConvMacCounter*& active() {
    static thread_local ConvMacCounter* current = nullptr;
    return current;
  }

 private:
  ConvMacCounter* previous_;
};

inline torch::Tensor counted_conv(torch::nn::Conv2dImpl& conv, const torch::Tensor& x) {
  auto y = conv.forward(x);
  if (auto* counter = ConvMacCounter::active()) counter->macs += conv.weight.numel() * y.size(-2) * y.size(-1);
  return y;
}

// Channel concatenation, the "Concat" layer of the YOLO yaml files.
inline torch::Tensor concat_channels(const std::vector<torch::Tensor>& xs) { return torch::cat(xs, 1); }

// ---- Conv: Conv2d (no bias) + BatchNorm2d (eps 1e-3, momentum 0.03) + optional SiLU ------------
class ConvImpl : public torch::nn::Cloneable<ConvImpl> {
 public:
  ConvImpl(int64_t in, int64_t out, int64_t kernel = 1, int64_t stride = 1, int64_t groups = 1, bool act = true)
      : in_(in), out_(out), kernel_(kernel), stride_(stride), groups_(groups), act_(act) {
    reset();
  }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, kernel_)
                                                         .stride(stride_)
                                                         .padding(kernel_ / 2)
                                                         .groups(groups_)
                                                         .bias(false)));
    bn = register_module("bn", BatchNorm2d(torch::nn::BatchNorm2dOptions(out_).eps(1e-3).momentum(0.03)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = bn->forward(counted_conv(*conv, x));
    return act_ ? torch::silu(y) : y;
  }
  torch::nn::Conv2d conv{nullptr};
  BatchNorm2d bn{nullptr};

 private:
  int64_t in_, out_, kernel_, stride_, groups_;
  bool act_;
};
TORCH_MODULE(Conv);

// ---- RepConvN: 3x3 Conv-BN + 1x1 Conv-BN summed, then SiLU (no identity branch) -----------------
// Trains as two branches; at deployment both fold into one 3x3 conv (not needed for training).
class RepConvNImpl : public torch::nn::Cloneable<RepConvNImpl> {
 public:
  RepConvNImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    conv1 = register_module("conv1", Conv(in_, out_, 3, 1, 1, false));
    conv2 = register_module("conv2", Conv(in_, out_, 1, 1, 1, false));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::silu(conv1->forward(x) + conv2->forward(x)); }
  Conv conv1{nullptr}, conv2{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(RepConvN);

// ---- RepNBottleneck: RepConvN 3x3 -> Conv 3x3, residual when shapes allow ------------------------
class RepNBottleneckImpl : public torch::nn::Cloneable<RepNBottleneckImpl> {
 public:
  RepNBottleneckImpl(int64_t in, int64_t out, bool shortcut = true) : in_(in), out_(out), shortcut_(shortcut) {
    reset();
  }
  void reset() override {
    cv1 = register_module("cv1", RepConvN(in_, out_));  // expansion 1.0 inside RepNCSP
    cv2 = register_module("cv2", Conv(out_, out_, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = cv2->forward(cv1->forward(x));
    return (shortcut_ && in_ == out_) ? x + y : y;
  }
  RepConvN cv1{nullptr};
  Conv cv2{nullptr};

 private:
  int64_t in_, out_;
  bool shortcut_;
};
TORCH_MODULE(RepNBottleneck);

// ---- RepNCSP: CSP split, n RepNBottlenecks on one half, 1x1 fuse ---------------------------------
class RepNCSPImpl : public torch::nn::Cloneable<RepNCSPImpl> {
 public:
  RepNCSPImpl(int64_t in, int64_t out, int64_t repeats) : in_(in), out_(out), repeats_(repeats) { reset(); }
  void reset() override {
    const int64_t hidden = out_ / 2;
    cv1 = register_module("cv1", Conv(in_, hidden, 1));
    cv2 = register_module("cv2", Conv(in_, hidden, 1));
    cv3 = register_module("cv3", Conv(2 * hidden, out_, 1));
    m = torch::nn::Sequential();
    for (int64_t i = 0; i < repeats_; ++i) m->push_back(RepNBottleneck(hidden, hidden));
    m = register_module("m", m);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return cv3->forward(concat_channels({m->forward(cv1->forward(x)), cv2->forward(x)}));
  }
  Conv cv1{nullptr}, cv2{nullptr}, cv3{nullptr};
  torch::nn::Sequential m{nullptr};

 private:
  int64_t in_, out_, repeats_;
};
TORCH_MODULE(RepNCSP);

// ---- RepNCSPELAN4(in, out, part, inner, n): the GELAN block ---------------------------------------
// cv1 1x1 -> split in halves a|b; b -> [RepNCSP, Conv3x3] -> c -> [RepNCSP, Conv3x3] -> d;
// cv4 1x1 over cat(a, b, c, d) with part + 2·inner channels.
class RepNCSPELAN4Impl : public torch::nn::Cloneable<RepNCSPELAN4Impl> {
 public:
  RepNCSPELAN4Impl(int64_t in, int64_t out, int64_t part, int64_t inner, int64_t repeats)
      : in_(in), out_(out), part_(part), inner_(inner), repeats_(repeats) {
    reset();
  }
  void reset() override {
    // Sub-modules are built one statement at a time, in the original's order (function arguments
    // have no evaluation order in C++): the default init then draws the same random numbers.
    cv1 = register_module("cv1", Conv(in_, part_, 1));
    cv2 = torch::nn::Sequential();
    cv2->push_back(RepNCSP(part_ / 2, inner_, repeats_));
    cv2->push_back(Conv(inner_, inner_, 3));
    cv2 = register_module("cv2", cv2);
    cv3 = torch::nn::Sequential();
    cv3->push_back(RepNCSP(inner_, inner_, repeats_));
    cv3->push_back(Conv(inner_, inner_, 3));
    cv3 = register_module("cv3", cv3);
    cv4 = register_module("cv4", Conv(part_ + 2 * inner_, out_, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto halves = cv1->forward(x).chunk(2, 1);
    auto c = cv2->forward(halves[1]);
    auto d = cv3->forward(c);
    return cv4->forward(concat_channels({halves[0], halves[1], c, d}));
  }
  Conv cv1{nullptr}, cv4{nullptr};
  torch::nn::Sequential cv2{nullptr}, cv3{nullptr};

 private:
  int64_t in_, out_, part_, inner_, repeats_;
};
TORCH_MODULE(RepNCSPELAN4);

// ---- ELAN1(in, out, part, inner): the plain ELAN of YOLOv9-t/s (3x3 Convs instead of RepNCSP) -----
class ELAN1Impl : public torch::nn::Cloneable<ELAN1Impl> {
 public:
  ELAN1Impl(int64_t in, int64_t out, int64_t part, int64_t inner) : in_(in), out_(out), part_(part), inner_(inner) {
    reset();
  }
  void reset() override {
    cv1 = register_module("cv1", Conv(in_, part_, 1));
    cv2 = register_module("cv2", Conv(part_ / 2, inner_, 3));
    cv3 = register_module("cv3", Conv(inner_, inner_, 3));
    cv4 = register_module("cv4", Conv(part_ + 2 * inner_, out_, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto halves = cv1->forward(x).chunk(2, 1);
    auto c = cv2->forward(halves[1]);
    auto d = cv3->forward(c);
    return cv4->forward(concat_channels({halves[0], halves[1], c, d}));
  }
  Conv cv1{nullptr}, cv2{nullptr}, cv3{nullptr}, cv4{nullptr};

 private:
  int64_t in_, out_, part_, inner_;
};
TORCH_MODULE(ELAN1);

// ---- AConv: 2x2 stride-1 average pool, then a stride-2 3x3 Conv (downsample by 2) ---------------
class AConvImpl : public torch::nn::Cloneable<AConvImpl> {
 public:
  AConvImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override { cv = register_module("cv", Conv(in_, out_, 3, 2)); }
  torch::Tensor forward(const torch::Tensor& x) {
    return cv->forward(torch::avg_pool2d(x, {2, 2}, {1, 1}, {0, 0}, /*ceil_mode=*/false, /*count_include_pad=*/true));
  }
  Conv cv{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(AConv);

// ---- ADown: average pool, then half the channels through a stride-2 3x3 Conv and half through a
// 3x3 stride-2 max pool + 1x1 Conv (YOLOv9-c/e downsampling) ---------------------------------------
class ADownImpl : public torch::nn::Cloneable<ADownImpl> {
 public:
  ADownImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    cv1 = register_module("cv1", Conv(in_ / 2, out_ / 2, 3, 2));
    cv2 = register_module("cv2", Conv(in_ / 2, out_ / 2, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto halves = torch::avg_pool2d(x, {2, 2}, {1, 1}, {0, 0}, false, true).chunk(2, 1);
    auto a = cv1->forward(halves[0]);
    auto b = cv2->forward(torch::max_pool2d(halves[1], {3, 3}, {2, 2}, {1, 1}));
    return concat_channels({a, b});
  }
  Conv cv1{nullptr}, cv2{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(ADown);

// ---- SPPELAN(in, out, neck): 1x1 to neck channels, three chained 5x5 max pools, 1x1 over all four --
class SPPELANImpl : public torch::nn::Cloneable<SPPELANImpl> {
 public:
  SPPELANImpl(int64_t in, int64_t out, int64_t neck, int64_t pool = 5) : in_(in), out_(out), neck_(neck), pool_(pool) {
    reset();
  }
  void reset() override {
    cv1 = register_module("cv1", Conv(in_, neck_, 1));
    cv5 = register_module("cv5", Conv(4 * neck_, out_, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    std::vector<torch::Tensor> features{cv1->forward(x)};
    for (int i = 0; i < 3; ++i)
      features.push_back(torch::max_pool2d(features.back(), {pool_, pool_}, {1, 1}, {pool_ / 2, pool_ / 2}));
    return cv5->forward(concat_channels(features));
  }
  Conv cv1{nullptr}, cv5{nullptr};

 private:
  int64_t in_, out_, neck_, pool_;
};
TORCH_MODULE(SPPELAN);

}  // namespace libreyolo::nn
