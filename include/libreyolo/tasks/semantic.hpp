#pragma once
// The semantic segmentation task (`task=semantic`, model suffix "-sem"): the original's layout, a
// dataset YAML (path, train, val, names; masks_dir, label_mapping) over images/{train,val}/*.jpg and
// masks/{train,val}/*.png holding one class id per pixel, 255 = ignore (data/semantic.hpp). Training
// flips, scale-jitters + crops (image and mask together) and HSV-jitters the image only. Validation:
// the confusion matrix over the whole split, mIoU (classes absent from both truth and prediction
// excluded; fitness = mIoU), pixel accuracy, the mean validation loss (eval/semantic.hpp). Predict: per
// image a class-id mask PNG and a colour overlay PNG at the original size, plus predictions.json.
//
// A semantic family derives from SemanticTask<Family> and supplies:
//   static constexpr std::string_view name; sizes; struct traits : family_defaults {...};
//   using Network = ...;                              a torch ModuleHolder returning logits [B, nc, h, w]
//                                                     (any h, w: the task resizes them to the masks)
//   explicit Family(std::string size)                 validates the size, calls SemanticTask(size)
//   Network make_network() const                      for num_classes()
//   train::LossOutput loss(const torch::Tensor& logits, const Batch&)   (cross_entropy() below: the usual one)
//   static std::vector<std::string> loss_names()
// and may declare `static constexpr std::array<double, 2> scale_jitter` (its recipe's scale range, used
// while scale= is not given; else [1 - scale, 1 + scale], scale=0 = off), `semantic_stretch = true` (the
// original's stretch resize mode), `imgsz_divisor` (imgsz must be a multiple), or hide input() (float
// in [0, 1]: the networks normalise inside, as the original's do).
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/semantic.hpp>
#include <libreyolo/data/synth.hpp>
#include <libreyolo/eval/semantic.hpp>
#include <libreyolo/nn/resize.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/tasks/task.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace libreyolo::tasks {

struct SemanticInfo {
  static constexpr Task task = Task::semantic;
  static constexpr std::string_view name = "semantic";
  static constexpr std::string_view model_suffix = "-sem";
  static constexpr std::string_view data_help =
      "dataset YAML with path, train, val, names (masks_dir: masks) over images/{train,val}/*.jpg and "
      "masks/{train,val}/*.png (class id per pixel, 255 = ignore)";
};

namespace semantic {

// The task's synthetic set: shapes with their masks, a data.yaml.
inline void synth(data::SynthOptions o) {
  o.task = "semantic";
  data::synth_semantic(o);
}

// The colour of class k in overlays (a fixed palette, then golden-ratio hues).
inline data::Rgb class_colour(int64_t k) {
  static const data::Rgb palette[] = {{255, 56, 56}, {72, 249, 10}, {0, 120, 255}, {255, 178, 29}, {207, 0, 210},
                                      {0, 212, 187}, {255, 112, 31}, {146, 204, 23}, {61, 0, 134}, {255, 157, 151}};
  if (k < 10) return palette[k];
  const double h = std::fmod(k * 0.618033988749895, 1.0) * 6;
  const int i = static_cast<int>(h);
  const double f = h - i;
  const auto q = static_cast<uint8_t>(std::lround(255 * (1 - f))), t = static_cast<uint8_t>(std::lround(255 * f));
  switch (i % 6) {
    case 0: return {255, t, 0};
    case 1: return {q, 255, 0};
    case 2: return {0, 255, t};
    case 3: return {0, q, 255};
    case 4: return {t, 0, 255};
    default: return {255, 0, q};
  }
}

// The image with each pixel blended half-way towards its class colour (ignore pixels untouched).
inline data::Image overlay(const data::Image& img, const data::Image& mask, double alpha = 0.5) {
  if (img.h != mask.h || img.w != mask.w || mask.c != 1 || img.c != 3)
    throw DataError("semantic overlay: image and mask sizes differ (or the mask has more than one channel)");
  data::Image out = img;
  for (int y = 0; y < img.h; ++y)
    for (int x = 0; x < img.w; ++x) {
      const int k = mask.at(y, x, 0);
      if (k == data::kIgnoreIndex) continue;
      const data::Rgb c = class_colour(k);
      const uint8_t col[3] = {c.r, c.g, c.b};
      for (int ch = 0; ch < 3; ++ch)
        out.at(y, x, ch) = static_cast<uint8_t>(std::lround((1 - alpha) * img.at(y, x, ch) + alpha * col[ch]));
    }
  return out;
}

}  // namespace semantic

template <class Derived>
class SemanticTask : public TaskBase<Derived, SemanticInfo, data::SemanticDataset, data::SemanticBatch> {
  using Base = TaskBase<Derived, SemanticInfo, data::SemanticDataset, data::SemanticBatch>;

 public:
  // The optional members every family of this task has (train/members.hpp).
  using task_members = member::list<member::size>;
  using typename Base::Batch;
  using typename Base::Dataset;
  using Base::num_classes;
  static constexpr int64_t ignore_index = data::kIgnoreIndex;

  explicit SemanticTask(std::string size) : Base(std::move(size)) {}

  void setup(const TrainConfig& cfg) {
    this->require_data(cfg, "a semantic dataset YAML is required (path, train, val, names; masks under masks/)");
    const auto yaml = data::load_dataset_yaml(cfg.data);
    const auto keys = data::load_semantic_keys(yaml);
    this->adopt_names(yaml.names, "the classes of " + cfg.data);
    if constexpr (requires { Derived::imgsz_divisor; })
      if (cfg.imgsz % Derived::imgsz_divisor != 0)
        throw ConfigError("imgsz=" + std::to_string(cfg.imgsz) + ": model=" + std::string(Derived::name) + size_ +
                          " needs a multiple of " + std::to_string(Derived::imgsz_divisor) + " (its patch grid)");
    this->open_splits(augment_from(cfg), [&](const char* split, const data::SemanticAugment& aug) {
      return Dataset::open(yaml, split, keys.masks_dir, keys.label_mapping, aug);
    });
  }
  static data::SemanticAugment augment_from(const TrainConfig& cfg) {
    data::SemanticAugment a;
    a.imgsz = cfg.imgsz;
    a.fliplr = cfg.fliplr;
    if (cfg.scale == 0) {
      a.scale_lo = a.scale_hi = 1.0;
    } else if constexpr (requires { Derived::scale_jitter; }) {
      if (!cfg.is_explicit("scale")) {
        a.scale_lo = Derived::scale_jitter[0], a.scale_hi = Derived::scale_jitter[1];
      } else {
        a.scale_lo = std::max(0.05, 1.0 - cfg.scale), a.scale_hi = 1.0 + cfg.scale;
      }
    } else {
      a.scale_lo = std::max(0.05, 1.0 - cfg.scale), a.scale_hi = 1.0 + cfg.scale;
    }
    const bool hsv_off = cfg.hsv_h == 0 && cfg.hsv_s == 0 && cfg.hsv_v == 0;
    a.hsv_prob = hsv_off ? 0.0 : cfg.hsv_prob;
    a.hsv_h = cfg.hsv_h, a.hsv_s = cfg.hsv_s, a.hsv_v = cfg.hsv_v;
    a.cache = cfg.cache;
    if constexpr (requires { Derived::semantic_stretch; }) a.stretch = Derived::semantic_stretch;
    return a;
  }
  // Float RGB in [0, 1]: the semantic networks apply their ImageNet normalisation inside (the original's
  // contract for its semantic families).
  static torch::Tensor input(const Batch& b) { return b.images.to(torch::kFloat32).div(255.0); }

  // Logits resized (bilinear, half-pixel: the original's F.interpolate) to the masks' size, as two matrix
  // products (nn/resize.hpp: the built-in op's CUDA backward accumulates with atomics, in no fixed order).
  static torch::Tensor to_mask_size(const torch::Tensor& logits, int64_t h, int64_t w) {
    return nn::bilinear_resize(logits, h, w);
  }
  // The original's loss: cross-entropy over the labelled pixels (ignore 255) of logits upsampled to the
  // masks; 0 (still connected to the graph) when every pixel is ignored. No host sync: sum / max(n, 1).
  static train::LossOutput cross_entropy(const torch::Tensor& logits, const Batch& b) {
    auto up = to_mask_size(logits.to(torch::kFloat32), b.masks.size(1), b.masks.size(2));
    namespace F = torch::nn::functional;
    auto sum = F::cross_entropy(up, b.masks, F::CrossEntropyFuncOptions().ignore_index(ignore_index).reduction(torch::kSum));
    auto n = b.masks.ne(ignore_index).sum().clamp_min(1).to(torch::kFloat32);
    auto l = sum / n;
    return {l, l.detach().reshape({1})};
  }
  // Class ids [B, h, w] from logits, at h x w.
  static torch::Tensor decode(const torch::Tensor& logits, int64_t h, int64_t w) {
    return to_mask_size(logits.to(torch::kFloat32), h, w).argmax(1);
  }

  // mIoU over the whole validation split, pixel accuracy, the mean validation loss (over labelled
  // pixels). At the network's input size: letterbox padding is ignore, so it counts nowhere.
  template <class Forward>
  train::ValResult validate(Forward&& forward, data::Loader<Dataset>& loader, torch::Device dev) const {
    torch::NoGradGuard ng;
    eval::SemanticMetrics metrics(num_classes(), ignore_index);
    auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
    auto labelled = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(dev));
    loader.start_epoch(0);
    while (auto batch = loader.next()) {
      auto b = Derived::to_device(*batch, dev);
      auto up = to_mask_size(torch::Tensor(forward(Derived::input(b))).to(torch::kFloat32), b.masks.size(1), b.masks.size(2));
      namespace F = torch::nn::functional;
      loss_sum += F::cross_entropy(up, b.masks, F::CrossEntropyFuncOptions().ignore_index(ignore_index).reduction(torch::kSum))
                      .to(torch::kFloat64);
      labelled += b.masks.ne(ignore_index).sum();
      metrics.add(up.argmax(1), b.masks);
    }
    const auto r = metrics.compute();
    train::ValResult v;
    v.fitness = r.miou;
    const int64_t n = labelled.item<int64_t>();
    v.metrics = {{"mIoU", r.miou}, {"pixel_accuracy", r.pixel_accuracy}, {"classes_seen", r.classes_seen},
                 {"val_loss", n ? loss_sum.item<double>() / double(n) : 0.0}};
    nlohmann::json per = nlohmann::json::object();
    for (size_t c = 0; c < r.iou.size(); ++c)
      per[c < names_.size() ? names_[c] : std::to_string(c)] = std::isnan(r.iou[c]) ? nlohmann::json(nullptr) : nlohmann::json(r.iou[c]);
    v.metrics["IoU"] = per;
    char buf[96];
    std::snprintf(buf, sizeof buf, "mIoU %.4f  pixel_acc %.4f", r.miou, r.pixel_accuracy);
    v.summary = buf;
    return v;
  }

  // Predict on image files: letterbox (top-left, no upscaling beyond fitting imgsz), forward, logits
  // cropped to the content and resized to the original image, arg-max. Writes <stem>_mask.png (class
  // ids), <stem>_overlay.png (colours over the image) and predictions.json (pixel share per class).
  template <class Forward>
  nlohmann::json predict(Forward&& forward, const std::filesystem::path& source, const PredictOptions& opt,
                         torch::Device dev, const std::filesystem::path& out_dir) const {
    namespace fs = std::filesystem;
    const auto files = detect::sources(source);
    fs::create_directories(out_dir);
    torch::NoGradGuard ng;
    const int S = opt.imgsz;
    auto one = [&](const fs::path& file) -> nlohmann::json {
      const data::Image img = data::read_image(file);
      const data::Image none(img.h, img.w, 1, 0);
      data::SemanticDraw draw;
      if constexpr (requires { Derived::semantic_stretch; }) draw.stretch = Derived::semantic_stretch;
      const data::Image in = data::semantic_geometry(img, none, S, draw).first;
      const double ratio = std::min(double(S) / img.h, double(S) / img.w);
      const int64_t nh = draw.stretch ? S : std::min<int64_t>(S, std::max<int64_t>(1, std::lround(img.h * ratio)));
      const int64_t nw = draw.stretch ? S : std::min<int64_t>(S, std::max<int64_t>(1, std::lround(img.w * ratio)));
      auto x = data::to_chw_tensor(in).unsqueeze(0).to(dev).to(torch::kFloat32).div(255.0);
      auto logits = to_mask_size(torch::Tensor(forward(x)).to(torch::kFloat32), S, S);
      logits = logits.narrow(2, 0, nh).narrow(3, 0, nw);
      auto cls = decode(logits, img.h, img.w)[0].to(torch::kCPU).to(torch::kUInt8).contiguous();
      data::Image mask(img.h, img.w, 1);
      std::memcpy(mask.px.data(), cls.data_ptr<uint8_t>(), mask.px.size());
      const auto stem = file.stem().string();
      data::write_mask(out_dir / (stem + "_mask.png"), mask);
      data::write_png(out_dir / (stem + "_overlay.png"), semantic::overlay(img, mask));
      const torch::Tensor counts = torch::bincount(cls.reshape({-1}).to(torch::kInt64), {}, num_classes());
      nlohmann::json classes = nlohmann::json::array();
      for (int64_t c = 0; c < num_classes(); ++c) {
        const auto k = counts[c].item<int64_t>();
        if (k == 0) continue;
        classes.push_back({{"class", c}, {"name", names_.at(static_cast<size_t>(c))},
                           {"fraction", double(k) / (double(img.h) * img.w)}});
      }
      return {{"file", json_file_name(file)}, {"width", img.w}, {"height", img.h},
              {"mask", json_file_name(out_dir / (stem + "_mask.png"), false)},
              {"overlay", json_file_name(out_dir / (stem + "_overlay.png"), false)}, {"classes", classes}};
    };
    return predict_images(files, out_dir, one, " (+ mask and overlay PNGs)");
  }
  static std::string predict_summary(const nlohmann::json& j) {
    return std::to_string(j.size()) + " image(s) segmented (mask + overlay PNG each)";
  }

  static void synth(const data::SynthOptions& o) { semantic::synth(o); }
  static std::filesystem::path synth_data(const std::filesystem::path& out) { return out / "data.yaml"; }

 protected:
  using Base::names_;
  using Base::size_;
};

}  // namespace libreyolo::tasks
