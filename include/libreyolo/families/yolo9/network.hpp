#pragma once
// YOLOv9 (GELAN) detection network, sizes t, s, m and c: backbone, PAN neck and the anchor-free
// decoupled head. Layout and widths follow the original's YOLO9_CONFIGS table (itself the official
// gelan-t/s/m/c configurations: WongKinYiu/yolov9, MultimediaTechLab/YOLO); a size is one row of
// detail::widths_for. Module names follow the LibreYOLO9 state-dict layout
// (backbone.*, neck.*, head.cv2 / head.cv3). The PGI auxiliary branch is not built: training works
// without it and inference never uses it.
//
// Checked against the original (libreyolo/models/yolo9/nn.py, snapshot c41461e) with its fixtures
// (tests/yolo9/test_fixture.cpp): named_parameters() + named_buffers() are exactly its state_dict
// (names and shapes), and under the same weights every backbone / neck / head map is bit-identical.
// Numerics that matter: BN eps 1e-3 / momentum 0.03 in every Conv (RepConvN has no identity BN:
// the original builds it with bn=False); SiLU; "same" padding k/2; AConv = avg_pool 2x2 stride 1
// then a 3x3 stride-2 Conv; ADown (c) = the same average pool, then channel halves through a 3x3
// stride-2 Conv and through a 3x3 stride-2 max pool + 1x1 Conv, concatenated; SPPELAN = three chained 5x5 stride-1 max pools; nearest 2x upsampling;
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

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo::families::yolo9 {

// The sizes built (the original's YOLO9_CONFIGS at c41461e: t, s, m, c) and the one named but not built
// (e): Yolo9Family's size lists and the size errors below.
inline constexpr std::array<std::string_view, 4> kSizes{"t", "s", "m", "c"};
inline constexpr std::array<std::string_view, 1> kPlannedSizes{"e"};

struct Yolo9Options {
  std::string size = "t";
  int64_t nc = 80;
  int64_t reg_max = 16;
};

namespace detail {
// One GELAN (RepNCSPELAN) block: its output width and its part width (cv1's output, split in halves);
// the inner width of its two RepNCSP branches is part / 2 in every size.
struct Gelan {
  int64_t out, part;
};
// One backbone stage: the downsampling block's output width, then the GELAN after it.
struct Stage {
  int64_t down;
  Gelan elan;
};
enum class FirstBlock { elan, gelan };  // after the stem: plain ELAN (t, s) or GELAN (m, c)
enum class Down { aconv, adown };       // every downsampling block: AConv (t, s, m) or ADown (c)

// One size of the original's YOLO9_CONFIGS table (libreyolo/models/yolo9/nn.py).
struct Widths {
  int64_t stem0, stem1;         // the two stride-2 stem convs
  FirstBlock first;             // the block after the stem ...
  Gelan first_block;            // ... its output and part widths (ELAN: inner = part / 2 as well)
  Down down;                    // backbone and neck downsampling
  std::array<Stage, 3> stages;  // strides 8, 16, 32 (backbone.down2/elan2 .. down4/elan4)
  int64_t spp;                  // SPPELAN output (its inner width is spp / 2): the stride-32 feature
  int64_t repeats;              // RepNCSP depth inside every GELAN
  Gelan up1, up2;               // neck top-down GELANs (elan_up1: stride 16, elan_up2: stride 8)
  int64_t down1;                // neck bottom-up downsampling of the stride-8 output
  Gelan elan_down1;             // -> stride 16
  int64_t down2;                // neck bottom-up downsampling of the stride-16 output
  Gelan elan_down2;             // -> stride 32
  // The backbone's stride-8 / stride-16 / stride-32 widths and the neck's (= the head's inputs).
  int64_t p3() const { return stages[0].elan.out; }
  int64_t p4() const { return stages[1].elan.out; }
  int64_t p5() const { return spp; }
  std::vector<int64_t> head_channels() const { return {up2.out, elan_down1.out, elan_down2.out}; }
};

// The original's sizes. s is t with every width doubled; m and c start with a GELAN instead of the
// plain ELAN and use one RepNCSP bottleneck per GELAN instead of three; c downsamples with ADown and its
// first two GELANs have a part width different from their output width.
inline Widths widths_for(const std::string& size) {
  using enum FirstBlock;
  using enum Down;
  if (size == "t")
    return {16, 32, elan, {32, 32}, aconv, {{{64, {64, 64}}, {96, {96, 96}}, {128, {128, 128}}}}, 128, 3,
            {96, 96}, {64, 64}, 48, {96, 96}, 64, {128, 128}};
  if (size == "s")
    return {32, 64, elan, {64, 64}, aconv, {{{128, {128, 128}}, {192, {192, 192}}, {256, {256, 256}}}}, 256, 3,
            {192, 192}, {128, 128}, 96, {192, 192}, 128, {256, 256}};
  if (size == "m")
    return {32, 64, gelan, {128, 128}, aconv, {{{240, {240, 240}}, {360, {360, 360}}, {480, {480, 480}}}}, 480, 1,
            {360, 360}, {240, 240}, 184, {360, 360}, 240, {480, 480}};
  if (size == "c")
    return {64, 128, gelan, {256, 128}, adown, {{{256, {512, 256}}, {512, {512, 512}}, {512, {512, 512}}}}, 512, 1,
            {512, 512}, {256, 256}, 256, {512, 512}, 512, {512, 512}};
  auto listed = [](const auto& sizes) {
    std::string out;
    for (std::string_view s : sizes) out += (out.empty() ? "" : ", ") + std::string(s);
    return out;
  };
  if (std::ranges::find(kPlannedSizes, std::string_view(size)) != kPlannedSizes.end())
    throw ConfigError("yolo9 size '" + size + "' is not implemented yet; available: " + listed(kSizes));
  throw ConfigError("unknown yolo9 size '" + size + "'; allowed: " + listed(kSizes) + " (" + listed(kPlannedSizes) +
                    " is not implemented yet)");
}

inline nn::RepNCSPELAN4 make_gelan(int64_t in, Gelan g, int64_t repeats) {
  return nn::RepNCSPELAN4(in, g.out, g.part, g.part / 2, repeats);
}

// A slot holding one of two module types, registered directly under the slot's name (the original picks
// the class per size; the state-dict names have no level of their own for it).
template <class A, class B>
struct OneOf {
  A a{nullptr};
  B b{nullptr};
  torch::Tensor forward(const torch::Tensor& x) { return a ? a->forward(x) : b->forward(x); }
};
using DownBlock = OneOf<nn::AConv, nn::ADown>;
using FirstElan = OneOf<nn::ELAN1, nn::RepNCSPELAN4>;

inline DownBlock make_down(torch::nn::Module& parent, const std::string& name, Down kind, int64_t in, int64_t out) {
  DownBlock d;
  if (kind == Down::aconv)
    d.a = parent.register_module(name, nn::AConv(in, out));
  else
    d.b = parent.register_module(name, nn::ADown(in, out));
  return d;
}
}  // namespace detail

// ---- backbone: stem -> ELAN1 / GELAN -> 3 × (AConv / ADown -> RepNCSPELAN4) -> SPPELAN -------------
class Yolo9BackboneImpl : public torch::nn::Cloneable<Yolo9BackboneImpl> {
 public:
  explicit Yolo9BackboneImpl(detail::Widths w) : w_(w) { reset(); }
  void reset() override {
    const auto& st = w_.stages;
    conv0 = register_module("conv0", nn::Conv(3, w_.stem0, 3, 2));
    conv1 = register_module("conv1", nn::Conv(w_.stem0, w_.stem1, 3, 2));
    elan1 = {};
    if (w_.first == detail::FirstBlock::elan) {
      const auto& f = w_.first_block;
      elan1.a = register_module("elan1", nn::ELAN1(w_.stem1, f.out, f.part, f.part / 2));
    } else {
      elan1.b = register_module("elan1", detail::make_gelan(w_.stem1, w_.first_block, w_.repeats));
    }
    down2 = detail::make_down(*this, "down2", w_.down, w_.first_block.out, st[0].down);
    elan2 = register_module("elan2", detail::make_gelan(st[0].down, st[0].elan, w_.repeats));
    down3 = detail::make_down(*this, "down3", w_.down, st[0].elan.out, st[1].down);
    elan3 = register_module("elan3", detail::make_gelan(st[1].down, st[1].elan, w_.repeats));
    down4 = detail::make_down(*this, "down4", w_.down, st[1].elan.out, st[2].down);
    elan4 = register_module("elan4", detail::make_gelan(st[2].down, st[2].elan, w_.repeats));
    spp = register_module("spp", nn::SPPELAN(st[2].elan.out, w_.spp, w_.spp / 2));
  }
  // Returns the stride-8, stride-16 and (SPPELAN) stride-32 features.
  std::array<torch::Tensor, 3> forward(const torch::Tensor& x) {
    auto y = elan1.forward(conv1->forward(conv0->forward(x)));
    auto p3 = elan2->forward(down2.forward(y));
    auto p4 = elan3->forward(down3.forward(p3));
    auto p5 = spp->forward(elan4->forward(down4.forward(p4)));
    return {p3, p4, p5};
  }
  nn::Conv conv0{nullptr}, conv1{nullptr};
  detail::FirstElan elan1;  // ELAN1 (t, s) or RepNCSPELAN4 (m, c), registered as "elan1"
  detail::DownBlock down2, down3, down4;  // AConv (t, s, m) or ADown (c)
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
    elan_up1 = register_module("elan_up1", detail::make_gelan(w_.p5() + w_.p4(), w_.up1, w_.repeats));
    elan_up2 = register_module("elan_up2", detail::make_gelan(w_.up1.out + w_.p3(), w_.up2, w_.repeats));
    down1 = detail::make_down(*this, "down1", w_.down, w_.up2.out, w_.down1);
    elan_down1 = register_module("elan_down1", detail::make_gelan(w_.down1 + w_.up1.out, w_.elan_down1, w_.repeats));
    down2 = detail::make_down(*this, "down2", w_.down, w_.elan_down1.out, w_.down2);
    elan_down2 = register_module("elan_down2", detail::make_gelan(w_.down2 + w_.p5(), w_.elan_down2, w_.repeats));
  }
  std::array<torch::Tensor, 3> forward(const std::array<torch::Tensor, 3>& backbone) {
    const auto& [p3, p4, p5] = backbone;
    auto n4 = elan_up1->forward(nn::concat_channels({upsample2(p5), p4}));
    auto out3 = elan_up2->forward(nn::concat_channels({upsample2(n4), p3}));
    auto out4 = elan_down1->forward(nn::concat_channels({down1.forward(out3), n4}));
    auto out5 = elan_down2->forward(nn::concat_channels({down2.forward(out4), p5}));
    return {out3, out4, out5};
  }
  nn::RepNCSPELAN4 elan_up1{nullptr}, elan_up2{nullptr}, elan_down1{nullptr}, elan_down2{nullptr};
  detail::DownBlock down1, down2;  // AConv (t, s, m) or ADown (c)

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
// max(64, nc). s, m and c (c0 = 128, 240, 256) are the same either way.)
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
    head = register_module("head", Yolo9Head(widths_.head_channels(), strides(),
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
