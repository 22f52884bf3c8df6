#pragma once
// ResNet-18/34/50/101 for classification (He et al. 2015), the original's libreyolo/models/resnet/nn.py
// (ARCH_DEFS "18", "34", "50", "101": timm's / torchvision's resnet, v1.5): 7x7/2 stem, 3x3/2 max-pool, four
// stages of basic blocks (18, 34) or bottlenecks (50, 101; expansion 4, the stride on the 3x3), global average
// pool, linear classifier. The original registers no ResNet-152 (its detect_size maps only these four).
// Module names equal the original's (timm's) state-dict keys:
//   conv1, bn1                                          stem
//   layer<1-4>.<block>.{conv1, bn1, conv2, bn2}         basic block
//   layer<1-4>.<block>.{conv1, bn1, conv2, bn2, conv3, bn3}   bottleneck
//   layer<1-4>.<block>.downsample.{0, 1}                1x1 conv (strides) + BN on a stage's first block
//                                                       when the stride or the width changes
//   fc                                                  classifier (512 or 2048 inputs)
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>

#include <torch/torch.h>

#include <array>
#include <string>

namespace libreyolo::resnet {

// 1x1 conv + BN on the identity path; children `0` (conv), `1` (BN), as the original's nn.Sequential.
inline torch::nn::Sequential make_downsample(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Sequential(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
      libreyolo::nn::BatchNorm2d(out));
}

// Basic block: 3x3 (strides) + BN + ReLU -> 3x3 + BN, plus the identity (downsampled when needed), ReLU.
class BasicBlockImpl : public torch::nn::Cloneable<BasicBlockImpl> {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) : in_(in), planes_(planes), stride_(stride) { reset(); }
  void reset() override {
    namespace nn = torch::nn;
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in_, planes_, 3).stride(stride_).padding(1).bias(false)));
    bn1 = register_module("bn1", libreyolo::nn::BatchNorm2d(planes_));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(planes_, planes_, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", libreyolo::nn::BatchNorm2d(planes_));
    if (stride_ != 1 || in_ != planes_) downsample = register_module("downsample", make_downsample(in_, planes_, stride_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    auto skip = downsample ? downsample->forward(x) : x;
    return torch::relu(y + skip);
  }
  // The last BN of the residual branch (zero-initialised, see ResNetImpl::init_weights).
  libreyolo::nn::BatchNorm2d& last_bn() { return bn2; }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  libreyolo::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};

 private:
  int64_t in_, planes_, stride_;
};
TORCH_MODULE(BasicBlock);

// Bottleneck (v1.5): 1x1 + BN + ReLU -> 3x3 (strides) + BN + ReLU -> 1x1 to 4 x planes + BN, plus the identity
// (downsampled when needed), ReLU.
class BottleneckImpl : public torch::nn::Cloneable<BottleneckImpl> {
 public:
  static constexpr int64_t expansion = 4;
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride) : in_(in), planes_(planes), stride_(stride) { reset(); }
  void reset() override {
    namespace nn = torch::nn;
    const int64_t out = planes_ * expansion;
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(in_, planes_, 1).bias(false)));
    bn1 = register_module("bn1", libreyolo::nn::BatchNorm2d(planes_));
    conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(planes_, planes_, 3).stride(stride_).padding(1).bias(false)));
    bn2 = register_module("bn2", libreyolo::nn::BatchNorm2d(planes_));
    conv3 = register_module("conv3", nn::Conv2d(nn::Conv2dOptions(planes_, out, 1).bias(false)));
    bn3 = register_module("bn3", libreyolo::nn::BatchNorm2d(out));
    if (stride_ != 1 || in_ != out) downsample = register_module("downsample", make_downsample(in_, out, stride_));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = torch::relu(bn2(conv2(y)));
    y = bn3(conv3(y));
    auto skip = downsample ? downsample->forward(x) : x;
    return torch::relu(y + skip);
  }
  libreyolo::nn::BatchNorm2d& last_bn() { return bn3; }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  libreyolo::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};

 private:
  int64_t in_, planes_, stride_;
};
TORCH_MODULE(Bottleneck);

// One size of the original's ARCH_DEFS: the block type and the blocks per stage.
struct ArchDef {
  bool bottleneck;
  std::array<int, 4> layers;
};
inline ArchDef arch_def(int depth) {
  switch (depth) {
    case 18: return {false, {2, 2, 2, 2}};
    case 34: return {false, {3, 4, 6, 3}};
    case 50: return {true, {3, 4, 6, 3}};
    case 101: return {true, {3, 4, 23, 3}};
    default: throw ConfigError("resnet depth " + std::to_string(depth) + " is not available; allowed: 18, 34, 50, 101");
  }
}

struct ResNetOptions {
  int depth = 18;  // 18 | 34 | 50 | 101
  int64_t num_classes = 1000;
};

class ResNetImpl : public torch::nn::Cloneable<ResNetImpl> {
 public:
  explicit ResNetImpl(ResNetOptions o) : o_(o) { reset(); }
  void reset() override {
    namespace nn = torch::nn;
    const ArchDef arch = arch_def(o_.depth);
    conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
    bn1 = register_module("bn1", libreyolo::nn::BatchNorm2d(64));
    int64_t in = 64;
    const std::array<int64_t, 4> planes{64, 128, 256, 512};
    for (size_t s = 0; s < 4; ++s) {
      nn::Sequential stage;
      for (int b = 0; b < arch.layers[s]; ++b) {
        const int64_t stride = (b == 0 && s > 0) ? 2 : 1;
        if (arch.bottleneck) {
          stage->push_back(Bottleneck(in, planes[s], stride));
          in = planes[s] * BottleneckImpl::expansion;
        } else {
          stage->push_back(BasicBlock(in, planes[s], stride));
          in = planes[s] * BasicBlockImpl::expansion;
        }
      }
      layers[s] = register_module("layer" + std::to_string(s + 1), stage);
    }
    num_features_ = in;
    fc = register_module("fc", nn::Linear(in, o_.num_classes));
    init_weights();
  }
  // x: float [B,3,H,W], normalised. Returns logits [B, num_classes].
  torch::Tensor forward(const torch::Tensor& x) {
    return fc(torch::adaptive_avg_pool2d(forward_features(x), {1, 1}).flatten(1));
  }
  // Stem, max-pool and the four stages: [B, 512 or 2048, H/32, W/32].
  torch::Tensor forward_features(const torch::Tensor& x) {
    auto y = torch::relu(bn1(conv1(x)));
    y = torch::max_pool2d(y, 3, 2, 1);
    for (auto& l : layers) y = l->forward(y);
    return y;
  }
  const ResNetOptions& options() const { return o_; }
  int64_t num_features() const { return num_features_; }

  torch::nn::Conv2d conv1{nullptr};
  libreyolo::nn::BatchNorm2d bn1{nullptr};
  std::array<torch::nn::Sequential, 4> layers{nullptr, nullptr, nullptr, nullptr};  // layer1 .. layer4
  torch::nn::Linear fc{nullptr};

 private:
  // Kaiming-normal convs (fan_out, relu) and unit BN, as torchvision; the last BN of each residual
  // branch starts at zero so every block begins as the identity (stabilises training from scratch).
  // (The original's nn.py keeps PyTorch's default initialisation; the architecture is the same.)
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
    for (auto& l : layers)
      for (auto& m : l->children()) {
        if (auto* b = m->as<BasicBlock>()) b->last_bn()->weight.zero_();
        if (auto* b = m->as<Bottleneck>()) b->last_bn()->weight.zero_();
      }
  }
  ResNetOptions o_;
  int64_t num_features_ = 512;
};
TORCH_MODULE(ResNet);

}  // namespace libreyolo::resnet
