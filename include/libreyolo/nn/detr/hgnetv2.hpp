#pragma once
// HGNetv2 (the original's models/dfine/backbone.py, shared by D-FINE, DEIM, RT-DETRv4 and DEIMv2; DEIMv2's
// Atto / Femto / Pico are the models/deim/backbone.py variants with three stages): a stem
// (stem1 3x3/2, the 2x2 stem2a/stem2b branch beside a 2x2 max-pool, stem3 3x3/2, stem4 1x1) and four
// HG stages; each stage an optional depthwise 3x3/2 downsample and HG blocks: `layer_num` convs (plain
// 3x3, or "light" = 1x1 + depthwise kxk) whose outputs are concatenated with the input and aggregated by
// a squeeze (1x1 to out/2) + excitation (1x1 to out) pair ("se" aggregation, the original's default);
// blocks after the first are residual. ConvBNAct = conv + BatchNorm + ReLU, then with use_lab a
// learnable affine (scale * x + bias, `lab.scale` / `lab.bias`) on activated convs.
// freeze_norm (the L/X sizes): every BatchNorm of the backbone is the original's FrozenBatchNorm2d, whose
// weight, bias, running_mean and running_var are buffers (no num_batches_tracked), never trained.
// Module names equal the original's state dict (stem.stem1.conv.weight, stages.2.blocks.1.layers.0.conv1...).
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/batch_norm.hpp>
#include <libreyolo/nn/detr/layers.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

namespace libreyolo::nn::detr {

// LearnableAffineBlock: scale * x + bias (one learnable scalar each, as [1] tensors).
class LearnableAffineImpl : public torch::nn::Cloneable<LearnableAffineImpl> {
 public:
  LearnableAffineImpl() { reset(); }
  void reset() override {
    scale = register_parameter("scale", torch::ones({1}));
    bias = register_parameter("bias", torch::zeros({1}));
  }
  // scale * x + bias as the original computes it (a fused addcmul rounds differently, and the decoder's
  // query selection turns 1e-7 differences into other tokens); under autocast in x's dtype.
  torch::Tensor forward(const torch::Tensor& x) { return scale.to(x.scalar_type()) * x + bias.to(x.scalar_type()); }
  torch::Tensor scale, bias;
};
TORCH_MODULE(LearnableAffine);

// ConvBNAct: Conv2d (padding (k-1)/2, no bias) + BatchNorm2d (FrozenBatchNorm2d with frozen_norm) +
// activation (use_act) + LAB (use_act && use_lab).
class ConvBNActImpl : public torch::nn::Cloneable<ConvBNActImpl> {
 public:
  ConvBNActImpl(int64_t in, int64_t out, int64_t k, int64_t stride = 1, int64_t groups = 1, bool use_act = true, bool use_lab = false,
                Act act = Act::relu, bool frozen_norm = false)
      : in_(in), out_(out), k_(k), s_(stride), g_(groups), use_act_(use_act), use_lab_(use_lab), frozen_(frozen_norm), act_(act) {
    reset();
  }
  void reset() override {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, out_, k_).stride(s_).padding((k_ - 1) / 2).groups(g_).bias(false)));
    if (frozen_) frozen_bn = register_module("bn", FrozenBatchNorm2d(out_));
    else bn = register_module("bn", BatchNorm2d(out_));
    if (use_act_ && use_lab_) lab = register_module("lab", LearnableAffine());
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv->forward(x);
    y = frozen_bn ? frozen_bn->forward(y) : bn->forward(y);
    if (use_act_) y = activate(y, act_);
    return lab ? lab->forward(y) : y;
  }
  torch::nn::Conv2d conv{nullptr};
  BatchNorm2d bn{nullptr};               // registered as "bn" unless frozen_norm
  FrozenBatchNorm2d frozen_bn{nullptr};  // registered as "bn" with frozen_norm
  LearnableAffine lab{nullptr};

 private:
  int64_t in_, out_, k_, s_, g_;
  bool use_act_, use_lab_, frozen_;
  Act act_;
};
TORCH_MODULE(ConvBNAct);

// LightConvBNAct: 1x1 ConvBNAct without activation, then a depthwise kxk ConvBNAct with it.
class LightConvBNActImpl : public torch::nn::Cloneable<LightConvBNActImpl> {
 public:
  LightConvBNActImpl(int64_t in, int64_t out, int64_t k, bool use_lab, Act act, bool frozen_norm = false)
      : in_(in), out_(out), k_(k), lab_(use_lab), fz_(frozen_norm), act_(act) {
    reset();
  }
  void reset() override {
    conv1 = register_module("conv1", ConvBNAct(in_, out_, 1, 1, 1, false, lab_, act_, fz_));
    conv2 = register_module("conv2", ConvBNAct(out_, out_, k_, 1, out_, true, lab_, act_, fz_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return conv2->forward(conv1->forward(x)); }
  ConvBNAct conv1{nullptr}, conv2{nullptr};

 private:
  int64_t in_, out_, k_;
  bool lab_, fz_;
  Act act_;
};
TORCH_MODULE(LightConvBNAct);

class HGStemImpl : public torch::nn::Cloneable<HGStemImpl> {
 public:
  HGStemImpl(int64_t in, int64_t mid, int64_t out, bool use_lab, Act act, bool frozen_norm = false)
      : in_(in), mid_(mid), out_(out), lab_(use_lab), fz_(frozen_norm), act_(act) {
    reset();
  }
  void reset() override {
    stem1 = register_module("stem1", ConvBNAct(in_, mid_, 3, 2, 1, true, lab_, act_, fz_));
    stem2a = register_module("stem2a", ConvBNAct(mid_, mid_ / 2, 2, 1, 1, true, lab_, act_, fz_));
    stem2b = register_module("stem2b", ConvBNAct(mid_ / 2, mid_, 2, 1, 1, true, lab_, act_, fz_));
    stem3 = register_module("stem3", ConvBNAct(mid_ * 2, mid_, 3, 2, 1, true, lab_, act_, fz_));
    stem4 = register_module("stem4", ConvBNAct(mid_, out_, 1, 1, 1, true, lab_, act_, fz_));
  }
  torch::Tensor forward(const torch::Tensor& x0) {
    auto x = torch::constant_pad_nd(stem1->forward(x0), {0, 1, 0, 1});
    auto x2 = stem2b->forward(torch::constant_pad_nd(stem2a->forward(x), {0, 1, 0, 1}));
    // MaxPool2d(kernel 2, stride 1, ceil_mode): on the padded map, the same size as x2.
    auto x1 = torch::max_pool2d(x, {2, 2}, {1, 1}, {0, 0}, {1, 1}, /*ceil_mode=*/true);
    return stem4->forward(stem3->forward(torch::cat({x1, x2}, 1)));
  }
  ConvBNAct stem1{nullptr}, stem2a{nullptr}, stem2b{nullptr}, stem3{nullptr}, stem4{nullptr};

 private:
  int64_t in_, mid_, out_;
  bool lab_, fz_;
  Act act_;
};
TORCH_MODULE(HGStem);

class HGBlockImpl : public torch::nn::Cloneable<HGBlockImpl> {
 public:
  HGBlockImpl(int64_t in, int64_t mid, int64_t out, int64_t layer_num, int64_t k, bool residual, bool light, bool use_lab, Act act,
              bool frozen_norm = false)
      : in_(in), mid_(mid), out_(out), n_(layer_num), k_(k), residual_(residual), light_(light), lab_(use_lab), fz_(frozen_norm), act_(act) {
    reset();
  }
  void reset() override {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t c = i == 0 ? in_ : mid_;
      if (light_) layers->push_back(LightConvBNAct(c, mid_, k_, lab_, act_, fz_));
      else layers->push_back(ConvBNAct(c, mid_, k_, 1, 1, true, lab_, act_, fz_));
    }
    const int64_t total = in_ + n_ * mid_;
    aggregation = register_module("aggregation", torch::nn::Sequential());
    aggregation->push_back(ConvBNAct(total, out_ / 2, 1, 1, 1, true, lab_, act_, fz_));
    aggregation->push_back(ConvBNAct(out_ / 2, out_, 1, 1, 1, true, lab_, act_, fz_));
  }
  torch::Tensor forward(const torch::Tensor& x0) {
    std::vector<torch::Tensor> outs{x0};
    auto x = x0;
    for (const auto& l : *layers) {
      x = light_ ? l->as<LightConvBNActImpl>()->forward(x) : l->as<ConvBNActImpl>()->forward(x);
      outs.push_back(x);
    }
    auto y = aggregation->forward(torch::cat(outs, 1));
    return residual_ ? y + x0 : y;
  }
  torch::nn::ModuleList layers{nullptr};
  torch::nn::Sequential aggregation{nullptr};

 private:
  int64_t in_, mid_, out_, n_, k_;
  bool residual_, light_, lab_, fz_;
  Act act_;
};
TORCH_MODULE(HGBlock);

// One stage: [in, mid, out, blocks, downsample, light, kernel, layers] (the original's stage_config row).
struct HGStageConfig {
  int64_t in, mid, out, blocks;
  bool downsample, light;
  int64_t kernel, layers;
};

class HGStageImpl : public torch::nn::Cloneable<HGStageImpl> {
 public:
  HGStageImpl(HGStageConfig c, bool use_lab, Act act, bool frozen_norm = false) : c_(c), lab_(use_lab), fz_(frozen_norm), act_(act) { reset(); }
  void reset() override {
    if (c_.downsample) downsample = register_module("downsample", ConvBNAct(c_.in, c_.in, 3, 2, c_.in, false, lab_, act_, fz_));
    blocks = register_module("blocks", torch::nn::Sequential());
    for (int64_t i = 0; i < c_.blocks; ++i)
      blocks->push_back(HGBlock(i == 0 ? c_.in : c_.out, c_.mid, c_.out, c_.layers, c_.kernel, i != 0, c_.light, lab_, act_, fz_));
  }
  torch::Tensor forward(const torch::Tensor& x) { return blocks->forward(downsample ? downsample->forward(x) : x); }
  ConvBNAct downsample{nullptr};
  torch::nn::Sequential blocks{nullptr};

 private:
  HGStageConfig c_;
  bool lab_, fz_;
  Act act_;
};
TORCH_MODULE(HGStage);

struct HGNetv2Options {
  std::string name = "B0";                // Atto, Femto, Pico (three stages), B0 .. B5 (the original's arch_configs)
  bool use_lab = true;
  std::vector<int64_t> return_idx{2, 3};  // stages returned (strides 4, 8, 16, 32 for 0..3)
  bool freeze_stem = true;                // the original's freeze_at >= 0 with freeze_stem_only: stem frozen
  bool freeze_norm = false;               // every BatchNorm a FrozenBatchNorm2d (the original's L/X sizes)
  Act act = Act::relu;
};

class HGNetv2Impl : public torch::nn::Cloneable<HGNetv2Impl> {
 public:
  explicit HGNetv2Impl(HGNetv2Options o = {}) : o_(std::move(o)) { reset(); }
  void reset() override {
    std::array<int64_t, 3> stem_ch{};
    std::vector<HGStageConfig> st;
    if (o_.name == "Atto" || o_.name == "Femto" || o_.name == "Pico") {  // DEIMv2's three-stage variants (B0's first stages)
      stem_ch = {3, 16, 16};
      st = {{16, 16, 64, 1, false, false, 3, 3}, {64, 32, 256, 1, true, false, 3, 3}};
      if (o_.name == "Atto") st.push_back({256, 64, 256, 1, true, true, 3, 3});
      else st.push_back({256, 64, 512, o_.name == "Pico" ? 2 : 1, true, true, 5, 3});
    } else if (o_.name == "B0") {
      stem_ch = {3, 16, 16};
      st = {{16, 16, 64, 1, false, false, 3, 3}, {64, 32, 256, 1, true, false, 3, 3}, {256, 64, 512, 2, true, true, 5, 3}, {512, 128, 1024, 1, true, true, 5, 3}};
    } else if (o_.name == "B1") {
      stem_ch = {3, 24, 32};
      st = {{32, 32, 64, 1, false, false, 3, 3}, {64, 48, 256, 1, true, false, 3, 3}, {256, 96, 512, 2, true, true, 5, 3}, {512, 192, 1024, 1, true, true, 5, 3}};
    } else if (o_.name == "B2") {
      stem_ch = {3, 24, 32};
      st = {{32, 32, 96, 1, false, false, 3, 4}, {96, 64, 384, 1, true, false, 3, 4}, {384, 128, 768, 3, true, true, 5, 4}, {768, 256, 1536, 1, true, true, 5, 4}};
    } else if (o_.name == "B4") {
      stem_ch = {3, 32, 48};
      st = {{48, 48, 128, 1, false, false, 3, 6}, {128, 96, 512, 1, true, false, 3, 6}, {512, 192, 1024, 3, true, true, 5, 6}, {1024, 384, 2048, 1, true, true, 5, 6}};
    } else if (o_.name == "B5") {
      stem_ch = {3, 32, 64};
      st = {{64, 64, 128, 1, false, false, 3, 6}, {128, 128, 512, 2, true, false, 3, 6}, {512, 256, 1024, 5, true, true, 5, 6}, {1024, 512, 2048, 2, true, true, 5, 6}};
    } else {
      throw ConfigError("HGNetv2 '" + o_.name + "': unknown; allowed: Atto, Femto, Pico, B0, B1, B2, B4, B5");
    }
    out_channels_.clear();
    for (auto& c : st) out_channels_.push_back(c.out);
    stem = register_module("stem", HGStem(stem_ch[0], stem_ch[1], stem_ch[2], o_.use_lab, o_.act, o_.freeze_norm));
    stages = register_module("stages", torch::nn::ModuleList());
    for (auto& c : st) stages->push_back(HGStage(c, o_.use_lab, o_.act, o_.freeze_norm));
    if (o_.freeze_stem)
      for (auto& p : stem->parameters()) p.set_requires_grad(false);
  }
  // A deep copy (the EMA's, a clone of the network) keeps the stem frozen: LibTorch's clone rebuilds the
  // children through their own reset(), which knows nothing of the freeze.
  std::shared_ptr<torch::nn::Module> clone(const torch::optional<torch::Device>& device = torch::nullopt) const override {
    auto copy = torch::nn::Cloneable<HGNetv2Impl>::clone(device);
    if (o_.freeze_stem)
      for (auto& p : std::dynamic_pointer_cast<HGNetv2Impl>(copy)->stem->parameters()) p.set_requires_grad(false);
    return copy;
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& x0) {
    auto x = stem->forward(x0);
    std::vector<torch::Tensor> outs;
    for (int64_t i = 0; i < static_cast<int64_t>(stages->size()); ++i) {
      x = stages[i]->as<HGStageImpl>()->forward(x);
      if (std::find(o_.return_idx.begin(), o_.return_idx.end(), i) != o_.return_idx.end()) outs.push_back(x);
    }
    return outs;
  }
  // The returned stages' channels.
  std::vector<int64_t> out_channels() const {
    std::vector<int64_t> c;
    for (auto i : o_.return_idx) c.push_back(out_channels_[static_cast<size_t>(i)]);
    return c;
  }
  const HGNetv2Options& options() const { return o_; }
  HGStem stem{nullptr};
  torch::nn::ModuleList stages{nullptr};

 private:
  HGNetv2Options o_;
  std::vector<int64_t> out_channels_;
};
TORCH_MODULE(HGNetv2);

}  // namespace libreyolo::nn::detr
