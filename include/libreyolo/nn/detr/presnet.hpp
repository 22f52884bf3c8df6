#pragma once
// PResNet, the ResNet-vd backbone of RT-DETR (the original's models/rtdetr/backbone.py): a 3x3 stem of
// three ConvNormLayers, max-pool, four stages of BasicBlocks (depth 18/34, [2,2,2,2] / [3,4,6,3]) or
// BottleNecks (depth 50 [3,4,6,3] / 101 [3,4,23,3], expansion 4: 1x1 -> 3x3 (the stride, variant d) -> 1x1 to 4x the
// width) whose stride-2 shortcuts average-pool first (variant d). freeze_norm (RT-DETR r50+) builds
// every norm of the backbone as a FrozenBatchNorm2d (the original's _freeze_norm): four buffers,
// no parameters. Returns the stages named by return_idx (RT-DETR: 1, 2, 3 = strides 8, 16, 32).
// Names equal the original's state dict (conv1.conv1_1.conv.weight, res_layers.0.blocks.0.
// short.conv.weight, res_layers.1.blocks.0.short.conv.conv.weight, ...).
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

namespace libreyolo::nn::detr {

// The backbone's ConvNormLayer: Conv2d (padding (k-1)/2, no bias) + BatchNorm2d, or a
// FrozenBatchNorm2d when `frozen`, registered as "norm" either way + activation.
class BackboneConvNormImpl : public torch::nn::Cloneable<BackboneConvNormImpl> {
 public:
  BackboneConvNormImpl(int64_t in, int64_t out, int64_t k, int64_t stride, bool frozen, Act act = Act::none)
      : in_(in), out_(out), k_(k), stride_(stride), frozen_(frozen), act_(act) {
    reset();
  }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, k_).stride(stride_).padding((k_ - 1) / 2).bias(false)));
    if (frozen_) frozen_norm = register_module("norm", FrozenBatchNorm2d(out_));
    else norm = register_module("norm", BatchNorm2d(out_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv->forward(x);
    return activate(frozen_ ? frozen_norm->forward(y) : norm->forward(y), act_);
  }
  torch::nn::Conv2d conv{nullptr};
  BatchNorm2d norm{nullptr};
  FrozenBatchNorm2d frozen_norm{nullptr};

 private:
  int64_t in_, out_, k_, stride_;
  bool frozen_;
  Act act_;
};
TORCH_MODULE(BackboneConvNorm);

// The variant-d shortcut of a stride-2 block: AvgPool2d(2, 2, ceil_mode) then a 1x1 ConvNormLayer
// (the original's Sequential(pool, conv): the pool has no parameters, so only `conv` is registered).
class PoolShortcutImpl : public torch::nn::Cloneable<PoolShortcutImpl> {
 public:
  PoolShortcutImpl(int64_t in, int64_t out, bool frozen) : in_(in), out_(out), frozen_(frozen) { reset(); }
  void reset() override { conv = register_module("conv", BackboneConvNorm(in_, out_, 1, 1, frozen_)); }
  torch::Tensor forward(const torch::Tensor& x) {
    return conv->forward(torch::avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, /*ceil_mode=*/true));
  }
  BackboneConvNorm conv{nullptr};

 private:
  int64_t in_, out_;
  bool frozen_;
};
TORCH_MODULE(PoolShortcut);

// A block's projection shortcut (not registered when the block adds its input): the pooled one at
// stride 2, else a 1x1 ConvNormLayer at the block's stride; both named "short".
struct Shortcut {
  PoolShortcut pool{nullptr};
  BackboneConvNorm conv{nullptr};
  void make(torch::nn::Module& m, int64_t in, int64_t out, int64_t stride, bool frozen) {
    if (stride == 2) pool = m.register_module("short", PoolShortcut(in, out, frozen));
    else conv = m.register_module("short", BackboneConvNorm(in, out, 1, stride, frozen));
  }
  torch::Tensor operator()(const torch::Tensor& x) { return pool ? pool->forward(x) : conv ? conv->forward(x) : x; }
};

// ResNet-18/34's block (expansion 1): 3x3 (the stride) -> 3x3, plus the shortcut, ReLU.
class BasicBlockImpl : public torch::nn::Cloneable<BasicBlockImpl> {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride, bool shortcut, bool frozen)
      : in_(in), out_(out), stride_(stride), shortcut_(shortcut), frozen_(frozen) {
    reset();
  }
  void reset() override {
    short_ = {};
    if (!shortcut_) short_.make(*this, in_, out_, stride_, frozen_);
    branch2a = register_module("branch2a", BackboneConvNorm(in_, out_, 3, stride_, frozen_, Act::relu));
    branch2b = register_module("branch2b", BackboneConvNorm(out_, out_, 3, 1, frozen_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(branch2b->forward(branch2a->forward(x)) + short_(x)); }
  BackboneConvNorm branch2a{nullptr}, branch2b{nullptr};

 private:
  int64_t in_, out_, stride_;
  bool shortcut_, frozen_;
  Shortcut short_;
};
TORCH_MODULE(BasicBlock);

// ResNet-50's block (expansion 4, variant d: the stride on the 3x3): 1x1 -> 3x3 -> 1x1 to 4x `width`,
// plus the shortcut, ReLU.
class BottleNeckImpl : public torch::nn::Cloneable<BottleNeckImpl> {
 public:
  static constexpr int64_t expansion = 4;
  BottleNeckImpl(int64_t in, int64_t width, int64_t stride, bool shortcut, bool frozen)
      : in_(in), width_(width), stride_(stride), shortcut_(shortcut), frozen_(frozen) {
    reset();
  }
  void reset() override {
    branch2a = register_module("branch2a", BackboneConvNorm(in_, width_, 1, 1, frozen_, Act::relu));
    branch2b = register_module("branch2b", BackboneConvNorm(width_, width_, 3, stride_, frozen_, Act::relu));
    branch2c = register_module("branch2c", BackboneConvNorm(width_, width_ * expansion, 1, 1, frozen_));
    short_ = {};
    if (!shortcut_) short_.make(*this, in_, width_ * expansion, stride_, frozen_);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::relu(branch2c->forward(branch2b->forward(branch2a->forward(x))) + short_(x));
  }
  BackboneConvNorm branch2a{nullptr}, branch2b{nullptr}, branch2c{nullptr};

 private:
  int64_t in_, width_, stride_;
  bool shortcut_, frozen_;
  Shortcut short_;
};
TORCH_MODULE(BottleNeck);

class PResNetStageImpl : public torch::nn::Cloneable<PResNetStageImpl> {
 public:
  // `out`: the blocks' width (their output is out x the block's expansion); bottleneck: BottleNeck blocks.
  PResNetStageImpl(int64_t in, int64_t out, int64_t count, int64_t stage_num, bool bottleneck, bool frozen)
      : in_(in), out_(out), count_(count), stage_(stage_num), bottleneck_(bottleneck), frozen_(frozen) {
    reset();
  }
  void reset() override {
    blocks = register_module("blocks", torch::nn::ModuleList());
    int64_t in = in_;
    for (int64_t i = 0; i < count_; ++i) {
      const int64_t stride = i == 0 && stage_ != 2 ? 2 : 1;
      if (bottleneck_) blocks->push_back(BottleNeck(in, out_, stride, i != 0, frozen_));
      else blocks->push_back(BasicBlock(in, out_, stride, i != 0, frozen_));
      in = out_ * (bottleneck_ ? BottleNeckImpl::expansion : BasicBlockImpl::expansion);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (const auto& b : *blocks) x = bottleneck_ ? b->as<BottleNeckImpl>()->forward(x) : b->as<BasicBlockImpl>()->forward(x);
    return x;
  }
  torch::nn::ModuleList blocks{nullptr};

 private:
  int64_t in_, out_, count_, stage_;
  bool bottleneck_, frozen_;
};
TORCH_MODULE(PResNetStage);

struct PResNetOptions {
  int depth = 18;                        // 18 | 34 (BasicBlock) | 50 | 101 (BottleNeck)
  std::vector<int64_t> return_idx{1, 2, 3};
  // >= 0: the stem's parameters and those of the first freeze_at stages are frozen (requires_grad false;
  // their BatchNorm statistics still train). RT-DETR r18/r34/r50: 0 = the stem only.
  int freeze_at = 0;
  // Every norm a FrozenBatchNorm2d (the original's freeze_norm; RT-DETR r50, r50m, r101).
  bool freeze_norm = false;
};

class PResNetImpl : public torch::nn::Cloneable<PResNetImpl> {
 public:
  explicit PResNetImpl(PResNetOptions o = {}) : o_(std::move(o)) {
    if (o_.depth != 18 && o_.depth != 34 && o_.depth != 50 && o_.depth != 101)
      throw ConfigError("PResNet depth=" + std::to_string(o_.depth) + ": not available; allowed: 18, 34, 50, 101");
    reset();
  }
  void reset() override {
    const bool fz = o_.freeze_norm;
    conv1 = register_module("conv1", torch::nn::Sequential());
    conv1->push_back("conv1_1", BackboneConvNorm(3, 32, 3, 2, fz, Act::relu));
    conv1->push_back("conv1_2", BackboneConvNorm(32, 32, 3, 1, fz, Act::relu));
    conv1->push_back("conv1_3", BackboneConvNorm(32, 64, 3, 1, fz, Act::relu));
    const std::vector<int64_t> counts = o_.depth == 18    ? std::vector<int64_t>{2, 2, 2, 2}
                                        : o_.depth == 101 ? std::vector<int64_t>{3, 4, 23, 3}
                                                          : std::vector<int64_t>{3, 4, 6, 3};
    res_layers = register_module("res_layers", torch::nn::ModuleList());
    int64_t in = 64;
    for (int i = 0; i < 4; ++i) {
      res_layers->push_back(PResNetStage(in, kWidths[i], counts[i], i + 2, bottleneck(), fz));
      in = kWidths[i] * expansion();
    }
    if (o_.freeze_at >= 0) {
      for (auto& p : conv1->parameters()) p.requires_grad_(false);
      for (int i = 0; i < std::min(o_.freeze_at, 4); ++i)
        for (auto& p : res_layers[i]->parameters()) p.requires_grad_(false);
    }
  }
  std::vector<int64_t> out_channels() const {
    std::vector<int64_t> out;
    for (auto i : o_.return_idx) out.push_back(kWidths[i] * expansion());
    return out;
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x) {
    auto y = torch::max_pool2d(conv1->forward(x), {3, 3}, {2, 2}, {1, 1});
    std::vector<torch::Tensor> outs;
    for (int64_t i = 0; i < static_cast<int64_t>(res_layers->size()); ++i) {
      y = res_layers[i]->as<PResNetStageImpl>()->forward(y);
      for (auto r : o_.return_idx)
        if (r == i) outs.push_back(y);
    }
    return outs;
  }
  torch::nn::Sequential conv1{nullptr};
  torch::nn::ModuleList res_layers{nullptr};

 private:
  static constexpr int64_t kWidths[4] = {64, 128, 256, 512};
  bool bottleneck() const { return o_.depth >= 50; }
  int64_t expansion() const { return bottleneck() ? BottleNeckImpl::expansion : BasicBlockImpl::expansion; }
  PResNetOptions o_;
};
TORCH_MODULE(PResNet);

}  // namespace libreyolo::nn::detr
