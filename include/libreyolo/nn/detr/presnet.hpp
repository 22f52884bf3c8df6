#pragma once
// PResNet, the ResNet-vd backbone of RT-DETR (the original's models/rtdetr/backbone.py): a 3x3 stem of
// three ConvNormLayers, max-pool, four stages of BasicBlocks (depth 18/34) whose stride-2 shortcuts
// average-pool first (variant d). Returns the stages named by return_idx (RT-DETR: 1, 2, 3 = strides
// 8, 16, 32). Names equal the original's state dict (conv1.conv1_1.conv.weight, res_layers.0.blocks.0.
// short.conv.weight, res_layers.1.blocks.0.short.conv.conv.weight, ...).
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

namespace libreyolo::nn::detr {

// The variant-d shortcut of a stride-2 block: AvgPool2d(2, 2, ceil_mode) then a 1x1 ConvNormLayer
// (the original's Sequential(pool, conv): the pool has no parameters, so only `conv` is registered).
class PoolShortcutImpl : public torch::nn::Cloneable<PoolShortcutImpl> {
 public:
  PoolShortcutImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override { conv = register_module("conv", ConvNorm(in_, out_, 1, 1)); }
  torch::Tensor forward(const torch::Tensor& x) {
    return conv->forward(torch::avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, /*ceil_mode=*/true));
  }
  ConvNorm conv{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(PoolShortcut);

class BasicBlockImpl : public torch::nn::Cloneable<BasicBlockImpl> {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride, bool shortcut) : in_(in), out_(out), stride_(stride), shortcut_(shortcut) {
    reset();
  }
  void reset() override {
    if (!shortcut_) {
      if (stride_ == 2) pool_short = register_module("short", PoolShortcut(in_, out_));
      else conv_short = register_module("short", ConvNorm(in_, out_, 1, stride_));
    }
    branch2a = register_module("branch2a", ConvNorm(in_, out_, 3, stride_, Act::relu));
    branch2b = register_module("branch2b", ConvNorm(out_, out_, 3, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto out = branch2b->forward(branch2a->forward(x));
    torch::Tensor s = shortcut_ ? x : pool_short ? pool_short->forward(x) : conv_short->forward(x);
    return torch::relu(out + s);
  }
  PoolShortcut pool_short{nullptr};
  ConvNorm conv_short{nullptr}, branch2a{nullptr}, branch2b{nullptr};

 private:
  int64_t in_, out_, stride_;
  bool shortcut_;
};
TORCH_MODULE(BasicBlock);

class PResNetStageImpl : public torch::nn::Cloneable<PResNetStageImpl> {
 public:
  PResNetStageImpl(int64_t in, int64_t out, int64_t count, int64_t stage_num) : in_(in), out_(out), count_(count), stage_(stage_num) {
    reset();
  }
  void reset() override {
    blocks = register_module("blocks", torch::nn::ModuleList());
    int64_t in = in_;
    for (int64_t i = 0; i < count_; ++i) {
      blocks->push_back(BasicBlock(in, out_, i == 0 && stage_ != 2 ? 2 : 1, i != 0));
      in = out_;
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (const auto& b : *blocks) x = b->as<BasicBlockImpl>()->forward(x);
    return x;
  }
  torch::nn::ModuleList blocks{nullptr};

 private:
  int64_t in_, out_, count_, stage_;
};
TORCH_MODULE(PResNetStage);

struct PResNetOptions {
  int depth = 18;                        // 18 | 34 (BasicBlock); 50/101 (BottleNeck) are not ported yet
  std::vector<int64_t> return_idx{1, 2, 3};
  // >= 0: the stem's parameters and those of the first freeze_at stages are frozen (requires_grad false;
  // their BatchNorm statistics still train). RT-DETR r18/r34: 0 = the stem only.
  int freeze_at = 0;
};

class PResNetImpl : public torch::nn::Cloneable<PResNetImpl> {
 public:
  explicit PResNetImpl(PResNetOptions o = {}) : o_(std::move(o)) {
    if (o_.depth != 18 && o_.depth != 34)
      throw ConfigError("PResNet depth=" + std::to_string(o_.depth) + ": not available; allowed: 18, 34");
    reset();
  }
  void reset() override {
    conv1 = register_module("conv1", torch::nn::Sequential());
    conv1->push_back("conv1_1", ConvNorm(3, 32, 3, 2, Act::relu));
    conv1->push_back("conv1_2", ConvNorm(32, 32, 3, 1, Act::relu));
    conv1->push_back("conv1_3", ConvNorm(32, 64, 3, 1, Act::relu));
    const std::vector<int64_t> counts = o_.depth == 18 ? std::vector<int64_t>{2, 2, 2, 2} : std::vector<int64_t>{3, 4, 6, 3};
    const int64_t ch[4] = {64, 128, 256, 512};
    res_layers = register_module("res_layers", torch::nn::ModuleList());
    int64_t in = 64;
    for (int i = 0; i < 4; ++i) {
      res_layers->push_back(PResNetStage(in, ch[i], counts[i], i + 2));
      in = ch[i];
    }
    if (o_.freeze_at >= 0) {
      for (auto& p : conv1->parameters()) p.requires_grad_(false);
      for (int i = 0; i < std::min(o_.freeze_at, 4); ++i)
        for (auto& p : res_layers[i]->parameters()) p.requires_grad_(false);
    }
  }
  std::vector<int64_t> out_channels() const {
    const int64_t ch[4] = {64, 128, 256, 512};
    std::vector<int64_t> out;
    for (auto i : o_.return_idx) out.push_back(ch[i]);
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
  PResNetOptions o_;
};
TORCH_MODULE(PResNet);

}  // namespace libreyolo::nn::detr
