#pragma once
// YOLOv7 (Wang, Bochkovskiy, Liao 2022: "YOLOv7: Trainable bag-of-freebies sets new state-of-the-art
// for real-time object detectors"), the base model `b`, as the original builds it
// (Libre-YOLO/libreyolo libreyolo/models/yolo7/net.py + blocks.py, a native port of the authors' MIT
// re-release MultimediaTechLab/YOLO with its yolo/config/model/v7.yaml): E-ELAN backbone (stem of four
// 3x3 convs, four stages of an ELAN block - two 1x1 branches, four chained 3x3 convs, concat of
// branches 1, 3, 5, 6, 1x1 - and MP transitions of max-pool + 1x1 beside 1x1 + 3x3 stride 2), the
// SPPCSPC neck head (SPPCSPConv: three 1x1/3x3/1x1 convs, three chained stride-1 max pools 5, 9, 13,
// 1x1 + 3x3, concat with a 1x1 shortcut, 1x1), a PAN with ELAN-H blocks (concat of all six branch
// outputs), RepConv (3x3 + 1x1, trained un-fused) at each level, and the YOLOR implicit-knowledge
// detection head IDetection (ImplicitA add -> 1x1 conv -> ImplicitM multiply), 3 anchors per cell.
//
// The layers are the yaml's 106 entries in order, registered as `layers.<i>` (i = 0..105; concat, pool
// and upsample entries hold nothing), so named_parameters() + named_buffers() are the original's 564
// state-dict entries and the upstream v7.pt / LibreYOLO7b.pt weights load by name. Conv = Conv2d (no
// bias, "same" padding) + BN (eps 1e-3, momentum 0.03) + SiLU. Upsampling is nearest 2x.
//
// forward() returns the three raw head maps [B, 3·(5 + nc), H/s, W/s] for s = 8, 16, 32; each anchor's
// channels are (tx, ty, tw, th, objectness, classes...). Initialisation for training from scratch:
// PyTorch's defaults, then the original's initialize_biases(0.01): objectness and class biases
// -log(99); ImplicitA starts at 0, ImplicitM at 1.
#include <libreyolo/core/error.hpp>
#include <libreyolo/nn/blocks.hpp>

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace libreyolo::families::yolov7 {

// Anchor (w, h) in input pixels, 3 per level, and the level strides (v7.yaml).
inline const std::array<std::array<std::array<double, 2>, 3>, 3>& anchors() {
  static const std::array<std::array<std::array<double, 2>, 3>, 3> a{{{{{12, 16}, {19, 36}, {40, 28}}},
                                                                      {{{36, 75}, {76, 55}, {72, 146}}},
                                                                      {{{142, 110}, {192, 243}, {459, 401}}}}};
  return a;
}
inline std::vector<int64_t> strides() { return {8, 16, 32}; }
constexpr int64_t kAnchorsPerCell = 3;

// ---- SPPCSPConv -----------------------------------------------------------------------------------
class SPPCSPConvImpl : public torch::nn::Cloneable<SPPCSPConvImpl> {
 public:
  SPPCSPConvImpl(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
  void reset() override {
    const int64_t n = out_;  // int(2 · out · 0.5)
    pre_conv = register_module("pre_conv", torch::nn::Sequential(nn::Conv(in_, n, 1), nn::Conv(n, n, 3), nn::Conv(n, n, 1)));
    short_conv = register_module("short_conv", nn::Conv(in_, n, 1));
    post_conv = register_module("post_conv", torch::nn::Sequential(nn::Conv(4 * n, n, 1), nn::Conv(n, n, 3)));
    merge_conv = register_module("merge_conv", nn::Conv(2 * n, out_, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    std::vector<torch::Tensor> f{pre_conv->forward(x)};
    for (int64_t k : {5, 9, 13}) f.push_back(torch::max_pool2d(f.back(), {k, k}, {1, 1}, {k / 2, k / 2}));  // chained
    auto y1 = post_conv->forward(torch::cat(f, 1));
    return merge_conv->forward(torch::cat({y1, short_conv->forward(x)}, 1));
  }
  torch::nn::Sequential pre_conv{nullptr}, post_conv{nullptr};
  nn::Conv short_conv{nullptr}, merge_conv{nullptr};

 private:
  int64_t in_, out_;
};
TORCH_MODULE(SPPCSPConv);

// ---- YOLOR implicit knowledge and the IDetection head -----------------------------------------------
class ImplicitImpl : public torch::nn::Cloneable<ImplicitImpl> {
 public:
  ImplicitImpl(int64_t c, double init) : c_(c), init_(init) { reset(); }
  void reset() override { implicit = register_parameter("implicit", torch::full({1, c_, 1, 1}, init_)); }
  torch::Tensor implicit;

 private:
  int64_t c_;
  double init_;
};
TORCH_MODULE(Implicit);

class IDetectionImpl : public torch::nn::Cloneable<IDetectionImpl> {
 public:
  IDetectionImpl(int64_t in, int64_t nc) : in_(in), nc_(nc) { reset(); }
  void reset() override {
    head_conv = register_module("head_conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_, kAnchorsPerCell * (5 + nc_), 1)));
    implicit_a = register_module("implicit_a", Implicit(in_, 0.0));
    implicit_m = register_module("implicit_m", Implicit(kAnchorsPerCell * (5 + nc_), 1.0));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return implicit_m->implicit * nn::counted_conv(*head_conv, implicit_a->implicit + x);
  }
  torch::nn::Conv2d head_conv{nullptr};
  Implicit implicit_a{nullptr}, implicit_m{nullptr};

 private:
  int64_t in_, nc_;
};
TORCH_MODULE(IDetection);

class MultiheadDetectionImpl : public torch::nn::Cloneable<MultiheadDetectionImpl> {
 public:
  MultiheadDetectionImpl(std::vector<int64_t> in, int64_t nc) : in_(std::move(in)), nc_(nc) { reset(); }
  void reset() override {
    heads = torch::nn::ModuleList();
    for (int64_t c : in_) heads->push_back(IDetection(c, nc_));
    heads = register_module("heads", heads);
  }
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& xs) {
    std::vector<torch::Tensor> out;
    for (size_t i = 0; i < xs.size(); ++i) out.push_back(heads[i]->as<IDetectionImpl>()->forward(xs[i]));
    return out;
  }
  // The original's initialize_biases(prior): objectness and class logits at logit(prior).
  void initialize_biases(double prior = 0.01) {
    torch::NoGradGuard ng;
    for (const auto& h : *heads) {
      auto b = h->as<IDetectionImpl>()->head_conv->bias.view({kAnchorsPerCell, 5 + nc_});
      b.narrow(1, 4, 1 + nc_).fill_(-std::log((1 - prior) / prior));
    }
  }
  torch::nn::ModuleList heads{nullptr};

 private:
  std::vector<int64_t> in_;
  int64_t nc_;
};
TORCH_MODULE(MultiheadDetection);

// An entry without parameters (concat, max pool, upsample): keeps the layer index.
class NoParamsImpl : public torch::nn::Cloneable<NoParamsImpl> {
 public:
  void reset() override {}
};
TORCH_MODULE(NoParams);

namespace detail {
enum class Kind { conv, pool, upsample, concat, sppcsp, repconv, detect };
struct Layer {
  Kind kind;
  int64_t out = 0, kernel = 1, stride = 1;
  std::vector<int64_t> source;  // as in the yaml: -1 = previous, < -1 relative, >= 0 absolute (0 = input)
  std::string tag;              // a name later layers refer to
  std::vector<std::string> tag_sources;  // named sources, appended after the numeric ones (concat / detect)
};

// The 106 entries of v7.yaml (MultimediaTechLab/YOLO yolo/config/model/v7.yaml).
inline std::vector<Layer> v7_layers() {
  std::vector<Layer> L;
  auto conv = [&](int64_t c, int64_t k, int64_t s = 1, int64_t src = -1, std::string tag = "") {
    L.push_back({Kind::conv, c, k, s, {src}, std::move(tag), {}});
  };
  auto concat = [&](std::vector<int64_t> src, std::string tag = "", std::vector<std::string> named = {}) {
    L.push_back({Kind::concat, 0, 1, 1, std::move(src), std::move(tag), std::move(named)});
  };
  auto pool = [&] { L.push_back({Kind::pool, 0, 2, 2, {-1}, "", {}}); };
  // ELAN block of the backbone: two 1x1 branches, four chained 3x3, concat [-1, -3, -5, -6], 1x1.
  auto elan = [&](int64_t c, int64_t out, std::string concat_tag = "", std::string out_tag = "") {
    conv(c, 1);
    conv(c, 1, 1, -2);
    for (int i = 0; i < 4; ++i) conv(c, 3);
    concat({-1, -3, -5, -6}, std::move(concat_tag));
    conv(out, 1, 1, -1, std::move(out_tag));
  };
  // MP transition: max pool -> 1x1 beside 1x1 -> 3x3 stride 2 of the block input, concat.
  auto mp = [&](int64_t c, std::vector<std::string> extra = {}) {
    pool();
    conv(c, 1);
    conv(c, 1, 1, -3);
    conv(c, 3, 2);
    concat({-1, -3}, "", std::move(extra));
  };
  // ELAN-H block of the head: two 1x1 branches, four chained 3x3, concat of all six, 1x1.
  auto elan_h = [&](int64_t c, int64_t mid, int64_t out, std::string out_tag) {
    conv(c, 1);
    conv(c, 1, 1, -2);
    for (int i = 0; i < 4; ++i) conv(mid, 3);
    concat({-1, -2, -3, -4, -5, -6});
    conv(out, 1, 1, -1, std::move(out_tag));
  };
  // backbone
  conv(32, 3, 1, 0);
  conv(64, 3, 2);
  conv(64, 3);
  conv(128, 3, 2);
  elan(64, 256);
  mp(128);
  elan(128, 512, "B3");
  mp(256);
  elan(256, 1024, "", "B4");
  mp(512);
  elan(256, 1024, "", "B5");
  // head
  L.push_back({Kind::sppcsp, 512, 1, 1, {-1}, "N3", {}});
  conv(256, 1);
  L.push_back({Kind::upsample, 0, 1, 1, {-1}, "", {}});
  L.push_back({Kind::conv, 256, 1, 1, {}, "", {"B4"}});
  concat({-1, -2});
  elan_h(256, 128, 256, "N2");
  conv(128, 1);
  L.push_back({Kind::upsample, 0, 1, 1, {-1}, "", {}});
  L.push_back({Kind::conv, 128, 1, 1, {}, "", {"B3"}});
  concat({-1, -2});
  elan_h(128, 64, 128, "P3");
  mp(128, {"N2"});
  elan_h(256, 128, 256, "P4");
  mp(256, {"N3"});
  elan_h(512, 256, 512, "P5");
  L.push_back({Kind::repconv, 256, 3, 1, {}, "", {"P3"}});
  L.push_back({Kind::repconv, 512, 3, 1, {}, "", {"P4"}});
  L.push_back({Kind::repconv, 1024, 3, 1, {}, "", {"P5"}});
  L.push_back({Kind::detect, 0, 1, 1, {-3, -2, -1}, "", {}});
  return L;
}
}  // namespace detail

struct Yolov7Options {
  std::string size = "b";
  int64_t nc = 80;
};

class Yolov7Impl : public torch::nn::Cloneable<Yolov7Impl> {
 public:
  explicit Yolov7Impl(Yolov7Options o = {}) : options_(std::move(o)) {
    if (options_.size != "b") throw ConfigError("unknown yolov7 size '" + options_.size + "'; allowed: b");
    if (options_.nc < 1) throw ConfigError("yolov7 nc must be >= 1, got " + std::to_string(options_.nc));
    reset();
  }
  void reset() override {
    const auto spec = detail::v7_layers();
    layers = torch::nn::ModuleList();
    sources_.clear();
    kinds_.clear();
    std::vector<int64_t> channels{3};  // index 0 = the input
    std::vector<std::pair<std::string, int64_t>> tags;
    auto tag_index = [&](const std::string& t) {
      for (auto& [n, i] : tags)
        if (n == t) return i;
      throw ConfigError("yolov7: unknown layer tag '" + t + "'");
    };
    for (size_t p = 0; p < spec.size(); ++p) {
      const auto& s = spec[p];
      const auto idx = static_cast<int64_t>(p) + 1;
      std::vector<int64_t> src;
      for (int64_t v : s.source) src.push_back(v < -1 ? v + idx : (v == -1 ? idx - 1 : v));
      for (const auto& t : s.tag_sources) src.push_back(tag_index(t));
      const int64_t in = channels[static_cast<size_t>(src.front())];
      int64_t out = in;
      switch (s.kind) {
        case detail::Kind::conv: layers->push_back(nn::Conv(in, s.out, s.kernel, s.stride)); out = s.out; break;
        case detail::Kind::sppcsp: layers->push_back(SPPCSPConv(in, s.out)); out = s.out; break;
        case detail::Kind::repconv: layers->push_back(nn::RepConvN(in, s.out)); out = s.out; break;
        case detail::Kind::pool:
        case detail::Kind::upsample: layers->push_back(NoParams()); break;
        case detail::Kind::concat: {
          layers->push_back(NoParams());
          out = 0;
          for (int64_t i : src) out += channels[static_cast<size_t>(i)];
          break;
        }
        case detail::Kind::detect: {
          std::vector<int64_t> in_ch;
          for (int64_t i : src) in_ch.push_back(channels[static_cast<size_t>(i)]);
          head_index_ = static_cast<int64_t>(p);
          layers->push_back(MultiheadDetection(in_ch, options_.nc));
          out = 0;
          break;
        }
      }
      channels.push_back(out);
      sources_.push_back(src);
      kinds_.push_back(s.kind);
      if (!s.tag.empty()) tags.emplace_back(s.tag, idx);
    }
    layers = register_module("layers", layers);
    head()->initialize_biases(0.01);
  }

  // x: [B, 3, H, W], H and W multiples of 32 -> the three raw head maps (header comment).
  std::vector<torch::Tensor> forward(torch::Tensor x) {
    if (x.dim() != 4 || x.size(1) != 3 || x.size(2) % 32 != 0 || x.size(3) % 32 != 0)
      throw ConfigError("yolov7 input must be [B, 3, H, W] with H and W multiples of 32, got " + c10::str(x.sizes()));
    std::vector<torch::Tensor> y{x};
    y.reserve(kinds_.size() + 1);
    for (size_t p = 0; p < kinds_.size(); ++p) {
      const auto& src = sources_[p];
      auto m = layers[p];
      torch::Tensor out;
      switch (kinds_[p]) {
        case detail::Kind::conv: out = m->as<nn::ConvImpl>()->forward(y[src[0]]); break;
        case detail::Kind::sppcsp: out = m->as<SPPCSPConvImpl>()->forward(y[src[0]]); break;
        case detail::Kind::repconv: out = m->as<nn::RepConvNImpl>()->forward(y[src[0]]); break;
        case detail::Kind::pool: out = torch::max_pool2d(y[src[0]], {2, 2}, {2, 2}); break;
        case detail::Kind::upsample:
          out = torch::upsample_nearest2d(y[src[0]], {y[src[0]].size(2) * 2, y[src[0]].size(3) * 2});
          break;
        case detail::Kind::concat: {
          std::vector<torch::Tensor> parts;
          for (int64_t i : src) parts.push_back(y[static_cast<size_t>(i)]);
          out = torch::cat(parts, 1);
          break;
        }
        case detail::Kind::detect: {
          std::vector<torch::Tensor> xs;
          for (int64_t i : src) xs.push_back(y[static_cast<size_t>(i)]);
          return m->as<MultiheadDetectionImpl>()->forward(xs);
        }
      }
      y.push_back(out);
    }
    throw Error("yolov7: the layer table has no detection head");
  }
  MultiheadDetectionImpl* head() { return layers[static_cast<size_t>(head_index_)]->as<MultiheadDetectionImpl>(); }
  const Yolov7Options& options() const { return options_; }

  torch::nn::ModuleList layers{nullptr};

 private:
  Yolov7Options options_;
  std::vector<std::vector<int64_t>> sources_;
  std::vector<detail::Kind> kinds_;
  int64_t head_index_ = -1;
};
TORCH_MODULE(Yolov7);

}  // namespace libreyolo::families::yolov7
