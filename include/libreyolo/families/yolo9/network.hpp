#pragma once
// YOLOv9 (GELAN) detection network, sizes t and s: backbone, PAN neck and the anchor-free decoupled
// head. Layout and widths follow the official gelan-t / gelan-s configurations (WongKinYiu/yolov9,
// MultimediaTechLab/YOLO v9-t / v9-s); module names follow the LibreYOLO9 state-dict layout
// (backbone.*, neck.*, head.cv2 / head.cv3). The PGI auxiliary branch is not built: training works
// without it and inference never uses it.
//
// Checked against the original (libreyolo/models/yolo9/nn.py, snapshot c41461e) with its fixtures
// (tests/yolo9/test_fixture.cpp): named_parameters() + named_buffers() are exactly its state_dict
// (names and shapes), and under the same weights every backbone / neck / head map is bit-identical.
// Numerics that matter: BN eps 1e-3 / momentum 0.03 in every Conv (RepConvN has no identity BN:
// the original builds it with bn=False); SiLU; "same" padding k/2; AConv = avg_pool 2x2 stride 1
// then a 3x3 stride-2 Conv; SPPELAN = three chained 5x5 stride-1 max pools; nearest 2x upsampling;
// concat order [upsampled, lateral] / [downsampled, skip]; RepConvN trained un-fused (conv1 3x3 +
// conv2 1x1). The original's head has two more buffers, both non-persistent (absent from its
// state_dict and checkpoints): head.stride = [8, 16, 32] and head.dfl.project = arange(reg_max);
// here strides() and postprocess.hpp's DFL stand for them, and there is no fixed DFL conv weight
// (the original drops a legacy head.dfl.conv.weight when loading).
//
// Initialisation for training from scratch, as the original: PyTorch's defaults (Conv2d kaiming-
// uniform a=√5, the head's output-conv biases uniform(±1/√fan_in), BN weight 1 / bias 0), then
// DDetect._init_bias (below); nothing else re-initialises (no custom conv init, no BN re-tuning).
// Modules are built in the original's order, so one seed gives the original's weights exactly.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/blocks.hpp>

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolo9 {

struct Yolo9Options {
  std::string size = "t";
  int64_t nc = 80;
  int64_t reg_max = 16;
};

namespace detail {
// Channel widths of one size. YOLOv9-s is YOLOv9-t with every width doubled.
struct Widths {
  int64_t stem0, stem1;     // the two stride-2 stem convs
  int64_t p3, p4, p5;       // GELAN outputs at strides 8 / 16 / 32 (also the SPPELAN output)
  int64_t down_p3, down_p4; // neck AConv widths on the bottom-up path
  int64_t repeats;          // RepNCSP depth inside every RepNCSPELAN4
};

inline Widths widths_for(const std::string& size) {
  if (size == "t") return {16, 32, 64, 96, 128, 48, 64, 3};
  if (size == "s") return {32, 64, 128, 192, 256, 96, 128, 3};
  if (size == "m" || size == "c" || size == "e")
    throw ConfigError("yolo9 size '" + size + "' is not implemented yet; available: t, s");
  throw ConfigError("unknown yolo9 size '" + size + "'; allowed: t, s (m, c, e are not implemented yet)");
}

// A GELAN block whose part width equals its output width and whose inner width is half of it, the
// only shape the t/s configurations use.
inline nn::RepNCSPELAN4 gelan(int64_t in, int64_t out, int64_t repeats) {
  return nn::RepNCSPELAN4(in, out, out, out / 2, repeats);
}
}  // namespace detail

// ---- backbone: stem -> ELAN1 -> 3 × (AConv -> RepNCSPELAN4) -> SPPELAN ---------------------------
class Yolo9BackboneImpl : public torch::nn::Cloneable<Yolo9BackboneImpl> {
 public:
  explicit Yolo9BackboneImpl(detail::Widths w) : w_(w) { reset(); }
  void reset() override {
    conv0 = register_module("conv0", nn::Conv(3, w_.stem0, 3, 2));
    conv1 = register_module("conv1", nn::Conv(w_.stem0, w_.stem1, 3, 2));
    elan1 = register_module("elan1", nn::ELAN1(w_.stem1, w_.stem1, w_.stem1, w_.stem1 / 2));
    down2 = register_module("down2", nn::AConv(w_.stem1, w_.p3));
    elan2 = register_module("elan2", detail::gelan(w_.p3, w_.p3, w_.repeats));
    down3 = register_module("down3", nn::AConv(w_.p3, w_.p4));
    elan3 = register_module("elan3", detail::gelan(w_.p4, w_.p4, w_.repeats));
    down4 = register_module("down4", nn::AConv(w_.p4, w_.p5));
    elan4 = register_module("elan4", detail::gelan(w_.p5, w_.p5, w_.repeats));
    spp = register_module("spp", nn::SPPELAN(w_.p5, w_.p5, w_.p5 / 2));
  }
  // Returns the stride-8, stride-16 and (SPPELAN) stride-32 features.
  std::array<torch::Tensor, 3> forward(const torch::Tensor& x) {
    auto y = elan1->forward(conv1->forward(conv0->forward(x)));
    auto p3 = elan2->forward(down2->forward(y));
    auto p4 = elan3->forward(down3->forward(p3));
    auto p5 = spp->forward(elan4->forward(down4->forward(p4)));
    return {p3, p4, p5};
  }
  nn::Conv conv0{nullptr}, conv1{nullptr};
  nn::ELAN1 elan1{nullptr};
  nn::AConv down2{nullptr}, down3{nullptr}, down4{nullptr};
  nn::RepNCSPELAN4 elan2{nullptr}, elan3{nullptr}, elan4{nullptr};
  nn::SPPELAN spp{nullptr};

 private:
  detail::Widths w_;
};
TORCH_MODULE(Yolo9Backbone);

// ---- neck: top-down (upsample + concat) then bottom-up (AConv + concat), PAN style --------------
class Yolo9NeckImpl : public torch::nn::Cloneable<Yolo9NeckImpl> {
 public:
  explicit Yolo9NeckImpl(detail::Widths w) : w_(w) { reset(); }
  void reset() override {
    elan_up1 = register_module("elan_up1", detail::gelan(w_.p5 + w_.p4, w_.p4, w_.repeats));
    elan_up2 = register_module("elan_up2", detail::gelan(w_.p4 + w_.p3, w_.p3, w_.repeats));
    down1 = register_module("down1", nn::AConv(w_.p3, w_.down_p3));
    elan_down1 = register_module("elan_down1", detail::gelan(w_.down_p3 + w_.p4, w_.p4, w_.repeats));
    down2 = register_module("down2", nn::AConv(w_.p4, w_.down_p4));
    elan_down2 = register_module("elan_down2", detail::gelan(w_.down_p4 + w_.p5, w_.p5, w_.repeats));
  }
  std::array<torch::Tensor, 3> forward(const std::array<torch::Tensor, 3>& backbone) {
    const auto& [p3, p4, p5] = backbone;
    auto n4 = elan_up1->forward(nn::concat_channels({upsample2(p5), p4}));
    auto out3 = elan_up2->forward(nn::concat_channels({upsample2(n4), p3}));
    auto out4 = elan_down1->forward(nn::concat_channels({down1->forward(out3), n4}));
    auto out5 = elan_down2->forward(nn::concat_channels({down2->forward(out4), p5}));
    return {out3, out4, out5};
  }
  nn::RepNCSPELAN4 elan_up1{nullptr}, elan_up2{nullptr}, elan_down1{nullptr}, elan_down2{nullptr};
  nn::AConv down1{nullptr}, down2{nullptr};

 private:
  static torch::Tensor upsample2(const torch::Tensor& x) {
    namespace F = torch::nn::functional;
    return F::interpolate(x, F::InterpolateFuncOptions()
                                 .size(std::vector<int64_t>{x.size(2) * 2, x.size(3) * 2})
                                 .mode(torch::kNearest));
  }
  detail::Widths w_;
};
TORCH_MODULE(Yolo9Neck);

// ---- head: per level a box tower (-> 4·reg_max DFL logits) and a class tower (-> nc logits) -----
// Tower widths as in the official YOLOv9 head: box = max(ceil4(c0/4), 4·reg_max, reg_max) with its
// second conv and output conv in 4 groups (one per box side); class = max(c0, min(nc, 100)).
// (The original computes the class width from the nc it is built with; its train() on a dataset of
// another class count replaces only the class output convs, so a t model built with the default 80
// classes and trained on nc < 80 keeps 80-wide class towers where this network, built for nc, has
// max(64, nc). s (c0 = 128) is the same either way.)
class Yolo9HeadImpl : public torch::nn::Cloneable<Yolo9HeadImpl> {
 public:
  Yolo9HeadImpl(std::vector<int64_t> in_channels, std::vector<int64_t> strides, int64_t nc, int64_t reg_max)
      : in_channels_(std::move(in_channels)), strides_(std::move(strides)), nc_(nc), reg_max_(reg_max) {
    reset();
  }
  void reset() override;
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& feats);
  // The original's DDetect._init_bias (Ultralytics' prior): every box-output bias 1.0; class-output
  // biases log(5 / nc / (640 / stride)²), about 5 objects per 640-px image spread over the level's
  // cells and classes (s = 8: log(5/80/6400) = -11.54 for 80 classes). The original re-runs it when
  // it replaces the class outputs for a dataset's class count (_rebuild_for_new_classes).
  void init_bias();

  torch::nn::ModuleList cv2{nullptr}, cv3{nullptr};

 private:
  // Towers are reached through cv2/cv3 on every call, never cached: clone() replaces the children.
  static torch::nn::SequentialImpl& tower(torch::nn::ModuleList& list, size_t level) {
    return *list->ptr<torch::nn::SequentialImpl>(level);
  }
  static torch::Tensor run_tower(torch::nn::SequentialImpl& seq, torch::Tensor x) {
    for (size_t j = 0; j + 1 < seq.size(); ++j) x = seq.ptr<nn::ConvImpl>(j)->forward(x);
    return nn::counted_conv(*seq.ptr<torch::nn::Conv2dImpl>(seq.size() - 1), x);
  }
  static constexpr int64_t box_groups = 4;
  std::vector<int64_t> in_channels_, strides_;
  int64_t nc_, reg_max_;
};
TORCH_MODULE(Yolo9Head);

inline void Yolo9HeadImpl::reset() {
  const int64_t c0 = in_channels_.front();
  const int64_t box_width =
      std::max({(c0 / 4 + box_groups - 1) / box_groups * box_groups, 4 * reg_max_, reg_max_});
  const int64_t class_width = std::max(c0, std::min<int64_t>(nc_, 100));
  // All box towers first, then all class towers, each conv in its own statement (C++ leaves the order
  // of function arguments unspecified): the original's construction order, so the default init draws
  // the same random numbers (same seed, same weights; tested against the original).
  cv2 = torch::nn::ModuleList();
  cv3 = torch::nn::ModuleList();
  for (int64_t c : in_channels_) {
    torch::nn::Sequential box;
    box->push_back(nn::Conv(c, box_width, 3));
    box->push_back(nn::Conv(box_width, box_width, 3, 1, box_groups));
    box->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(box_width, 4 * reg_max_, 1).groups(box_groups)));
    cv2->push_back(box);
  }
  for (int64_t c : in_channels_) {
    torch::nn::Sequential cls;
    cls->push_back(nn::Conv(c, class_width, 3));
    cls->push_back(nn::Conv(class_width, class_width, 3));
    cls->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(class_width, nc_, 1)));
    cv3->push_back(cls);
  }
  cv2 = register_module("cv2", cv2);
  cv3 = register_module("cv3", cv3);
  init_bias();
}

inline void Yolo9HeadImpl::init_bias() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < in_channels_.size(); ++i) {
    auto& box = tower(cv2, i);
    auto& cls = tower(cv3, i);
    box.ptr<torch::nn::Conv2dImpl>(box.size() - 1)->bias.fill_(1.0);
    const double cells = std::pow(640.0 / static_cast<double>(strides_[i]), 2);
    cls.ptr<torch::nn::Conv2dImpl>(cls.size() - 1)->bias.fill_(std::log(5.0 / static_cast<double>(nc_) / cells));
  }
}

inline std::vector<torch::Tensor> Yolo9HeadImpl::forward(const std::vector<torch::Tensor>& feats) {
  std::vector<torch::Tensor> out;
  out.reserve(feats.size());
  for (size_t i = 0; i < feats.size(); ++i)
    out.push_back(torch::cat({run_tower(tower(cv2, i), feats[i]), run_tower(tower(cv3, i), feats[i])}, 1));
  return out;
}

// ---- the whole network -------------------------------------------------------------------------
class Yolo9Impl : public torch::nn::Cloneable<Yolo9Impl> {
 public:
  explicit Yolo9Impl(Yolo9Options options = {}) : options_(std::move(options)) {
    if (options_.nc < 1) throw ConfigError("yolo9 nc must be >= 1, got " + std::to_string(options_.nc));
    if (options_.reg_max < 1)
      throw ConfigError("yolo9 reg_max must be >= 1, got " + std::to_string(options_.reg_max));
    widths_ = detail::widths_for(options_.size);
    reset();
  }
  void reset() override {
    backbone = register_module("backbone", Yolo9Backbone(widths_));
    neck = register_module("neck", Yolo9Neck(widths_));
    head = register_module("head", Yolo9Head(std::vector<int64_t>{widths_.p3, widths_.p4, widths_.p5}, strides(),
                                              options_.nc, options_.reg_max));
  }
  // x: [B, 3, H, W], H and W multiples of 32. Returns the raw head maps [B, 4·reg_max + nc, H/s, W/s]
  // for s = 8, 16, 32 (DFL logits first, then class logits).
  std::vector<torch::Tensor> forward(torch::Tensor x) {
    if (x.dim() != 4 || x.size(1) != 3 || x.size(2) % 32 != 0 || x.size(3) % 32 != 0)
      throw ConfigError("yolo9 input must be [B, 3, H, W] with H and W multiples of 32, got " +
                        shape_string(x));
    auto [n3, n4, n5] = neck->forward(backbone->forward(x));
    return head->forward({n3, n4, n5});
  }
  std::vector<int64_t> strides() const { return {8, 16, 32}; }
  const Yolo9Options& options() const { return options_; }
  int64_t outputs_per_anchor() const { return 4 * options_.reg_max + options_.nc; }

  Yolo9Backbone backbone{nullptr};
  Yolo9Neck neck{nullptr};
  Yolo9Head head{nullptr};

 private:
  static std::string shape_string(const torch::Tensor& x) {
    std::string s = "[";
    for (int64_t d = 0; d < x.dim(); ++d) s += (d ? ", " : "") + std::to_string(x.size(d));
    return s + "]";
  }
  Yolo9Options options_;
  detail::Widths widths_{};
};
TORCH_MODULE(Yolo9);

}  // namespace libreyolo::families::yolo9
