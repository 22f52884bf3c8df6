#pragma once
// ResNet-18 / ResNet-34 for classification (He et al. 2015), BasicBlock variant, torchvision layout:
// 7x7/2 stem, 3x3/2 max-pool, four stages of basic blocks, global average pool, linear classifier.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>

#include <torch/torch.h>

#include <array>
#include <string>

namespace libreyolo::resnet {

class BasicBlockImpl : public torch::nn::Cloneable<BasicBlockImpl> {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) : in_(in), out_(out), stride_(stride) { reset(); }
  void reset() override {
    namespace nn = torch::nn;
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in_, out_, 3).stride(stride_).padding(1).bias(false)));
    bn1 = register_module("bn1", libreyolo::nn::BatchNorm2d(out_));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out_, out_, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", libreyolo::nn::BatchNorm2d(out_));
    if (stride_ != 1 || in_ != out_) {
      down_conv = register_module("down_conv", nn::Conv2d(nn::Conv2dOptions(in_, out_, 1).stride(stride_).bias(false)));
      down_bn = register_module("down_bn", libreyolo::nn::BatchNorm2d(out_));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    auto skip = down_conv ? down_bn(down_conv(x)) : x;
    return torch::relu(y + skip);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, down_conv{nullptr};
  libreyolo::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, down_bn{nullptr};

 private:
  int64_t in_, out_, stride_;
};
TORCH_MODULE(BasicBlock);

struct ResNetOptions {
  int depth = 18;      // 18 | 34
  int64_t num_classes = 1000;
};

class ResNetImpl : public torch::nn::Cloneable<ResNetImpl> {
 public:
  explicit ResNetImpl(ResNetOptions o) : o_(o) { reset(); }
  void reset() override {
    namespace nn = torch::nn;
    std::array<int, 4> blocks{};
    if (o_.depth == 18) blocks = {2, 2, 2, 2};
    else if (o_.depth == 34) blocks = {3, 4, 6, 3};
    else throw ConfigError("resnet depth " + std::to_string(o_.depth) + " is not available; allowed: 18, 34");
    stem_conv = register_module("stem_conv", nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
    stem_bn = register_module("stem_bn", libreyolo::nn::BatchNorm2d(64));
    stages = register_module("stages", nn::Sequential());
    int64_t in = 64;
    const std::array<int64_t, 4> widths{64, 128, 256, 512};
    for (size_t s = 0; s < 4; ++s) {
      for (int b = 0; b < blocks[s]; ++b) {
        stages->push_back(BasicBlock(in, widths[s], (b == 0 && s > 0) ? 2 : 1));
        in = widths[s];
      }
    }
    fc = register_module("fc", nn::Linear(512, o_.num_classes));
    init_weights();
  }
  // x: float [B,3,H,W], normalised. Returns logits [B, num_classes].
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(stem_bn(stem_conv(x)));
    y = torch::max_pool2d(y, 3, 2, 1);
    y = stages->forward(y);
    y = torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1);
    return fc(y);
  }
  const ResNetOptions& options() const { return o_; }

  torch::nn::Conv2d stem_conv{nullptr};
  libreyolo::nn::BatchNorm2d stem_bn{nullptr};
  torch::nn::Sequential stages{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  // Kaiming-normal convs (fan_out, relu) and unit BN, as torchvision; the last BN of each residual
  // branch starts at zero so every block begins as the identity (stabilises training from scratch).
  void init_weights() {
    torch::NoGradGuard g;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<torch::nn::Conv2d>()) {
        torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* bn = m->as<libreyolo::nn::BatchNorm2d>()) {
        bn->weight.fill_(1.0);
        bn->bias.zero_();
      }
    }
    for (auto& m : stages->children())
      if (auto* b = m->as<BasicBlock>()) b->bn2->weight.zero_();
  }
  ResNetOptions o_;
};
TORCH_MODULE(ResNet);

}  // namespace libreyolo::resnet
