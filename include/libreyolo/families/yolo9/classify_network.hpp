#pragma once
// YOLOv9 image classification (the original's task 'classify', LibreYOLO9Model(classification=True)):
// the detection backbone (Yolo9Backbone, same modules and names) and a classifier head on its
// deepest (stride-32, SPPELAN) map; no neck, no detection head. State-dict names: backbone.*,
// head.conv.{conv,bn}.*, head.linear.{weight,bias} (977,600 parameters for t with 80 classes).
//
// Head (the original's Classify): Conv 1x1 (Conv2d + BN eps 1e-3 momentum 0.03 + SiLU) to 1280
// channels -> global average pool -> flatten -> Dropout(0.2) -> Linear(1280, nc). forward returns the
// class logits [B, nc] in train and eval mode alike: the original returns logits from eval and from a
// train forward without targets (with targets it returns its cross-entropy loss dict, which here is
// the family's job); dropout is active only in train mode; no softmax (the original applies softmax
// only in its postprocess, for probabilities). Initialisation: PyTorch's defaults, as the original
// (Conv2d / Linear kaiming-uniform a=√5 with uniform biases, BN weight 1 / bias 0), in the
// original's construction order (backbone, head.conv, head.linear).
#include <libreyolo/core/error.hpp>
#include <libreyolo/families/yolo9/network.hpp>
#include <libreyolo/nn/blocks.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace libreyolo::families::yolo9 {

struct Yolo9ClassifyOptions {
  std::string size = "t";
  int64_t nc = 80;          // the original's default nb_classes
  int64_t hidden = 1280;   // the classifier's embedding width
  double dropout = 0.2;    // before the linear layer, train mode only
};

class Yolo9ClassifyHeadImpl : public torch::nn::Cloneable<Yolo9ClassifyHeadImpl> {
 public:
  Yolo9ClassifyHeadImpl(int64_t in, int64_t nc, int64_t hidden, double dropout)
      : in_(in), nc_(nc), hidden_(hidden), dropout_(dropout) {
    reset();
  }
  void reset() override {
    conv = register_module("conv", nn::Conv(in_, hidden_, 1));
    drop = register_module("drop", torch::nn::Dropout(torch::nn::DropoutOptions(dropout_)));
    linear = register_module("linear", torch::nn::Linear(hidden_, nc_));
  }
  // x: the backbone's deepest map [B, C, H, W] -> logits [B, nc].
  torch::Tensor forward(const torch::Tensor& x) {
    auto y = conv->forward(x).mean({2, 3});  // AdaptiveAvgPool2d(1) + flatten(1)
    return linear->forward(drop->forward(y));
  }
  nn::Conv conv{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear linear{nullptr};

 private:
  int64_t in_, nc_, hidden_;
  double dropout_;
};
TORCH_MODULE(Yolo9ClassifyHead);

class Yolo9ClassifyImpl : public torch::nn::Cloneable<Yolo9ClassifyImpl> {
 public:
  explicit Yolo9ClassifyImpl(Yolo9ClassifyOptions options = {}) : options_(std::move(options)) {
    if (options_.nc < 1) throw ConfigError("yolo9 classify nc must be >= 1, got " + std::to_string(options_.nc));
    if (options_.hidden < 1)
      throw ConfigError("yolo9 classify hidden width must be >= 1, got " + std::to_string(options_.hidden));
    if (!(options_.dropout >= 0.0 && options_.dropout < 1.0))
      throw ConfigError("yolo9 classify dropout must lie in [0, 1), got " + std::to_string(options_.dropout));
    widths_ = detail::widths_for(options_.size);
    reset();
  }
  void reset() override {
    backbone = register_module("backbone", Yolo9Backbone(widths_));
    head = register_module("head", Yolo9ClassifyHead(widths_.p5(), options_.nc, options_.hidden, options_.dropout));
  }
  // x: [B, 3, H, W] with H, W >= 32 (the original classifies at 224 px). Returns logits [B, nc].
  torch::Tensor forward(const torch::Tensor& x) {
    if (x.dim() != 4 || x.size(1) != 3 || x.size(2) < 32 || x.size(3) < 32)
      throw ConfigError("yolo9 classify input must be [B, 3, H, W] with H, W >= 32, got " + c10::str(x.sizes()));
    return head->forward(backbone->forward(x)[2]);
  }
  const Yolo9ClassifyOptions& options() const { return options_; }

  Yolo9Backbone backbone{nullptr};
  Yolo9ClassifyHead head{nullptr};

 private:
  Yolo9ClassifyOptions options_;
  detail::Widths widths_{};
};
TORCH_MODULE(Yolo9Classify);

}  // namespace libreyolo::families::yolo9
