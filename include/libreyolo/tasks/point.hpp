#pragma once
// The point task: object centroids found on a coarse grid, as the original's FOMO (Feature-map Output
// for Mobile Objects) trains and reports them.
//
// Data (data/point.hpp): a YOLO dataset YAML (path, train, val, names) with box labels `class cx cy w h`
// (or polygons): each object is its box centre. Images are stretched to imgsz x imgsz; the target is the
// heat-map at the network's output stride, int64 [B, G, G], G = imgsz / stride, 0 = background,
// 1 + class at the centre's cell. Network output: logits [B, 1 + classes, G, G]. Input: RGB in [-1, 1]
// ((x / 255 - 0.5) / 0.5, the original's FOMO normalisation).
// Loss: the weighted cross-entropy over cells (background weight 1, every foreground class fg_weight;
// weighted mean), weighted_cross_entropy() below.
// Decode (eval/point.hpp): per-cell arg-max over the foreground classes, threshold, clustering of
// neighbouring cells into one point (square suppression of radius r).
// Validation: grid precision / recall / F1 of the decoded points matched to the ground-truth cells within
// 1.5 cells (class-aware, Hungarian), the best over thresholds {0.25 .. 0.90} x radii {1, 2} (fitness =
// that F1, the original's metrics/grid_F1), and the validation loss.
// Predict: points in original pixels (cell centre (x + 0.5) * orig_w / G, ...) with score and class in
// predictions.json, and a copy of each image with its points drawn.
//
// A point family derives from PointTask<Family> and supplies:
//   static constexpr std::string_view name; sizes; struct traits : family_defaults {...};
//   static constexpr int output_stride;              the network's output stride (FOMO: 8)
//   using Network = ...;                              a torch ModuleHolder returning logits [B, 1 + classes, G, G]
//   explicit Family(std::string size)                 validates the size, calls PointTask(size)
//   Network make_network() const                      for num_classes()
//   train::LossOutput loss(const torch::Tensor& logits, const Batch&)   (weighted_cross_entropy() is FOMO's)
//   static std::vector<std::string> loss_names()
// and may hide normalise() (the network input from uint8 images) or decode().
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/draw.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/point.hpp>
#include <libreyolo/data/synth.hpp>
#include <libreyolo/eval/point.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/tasks/task.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace libreyolo::tasks {

struct PointInfo {
  static constexpr Task task = Task::point;
  static constexpr std::string_view name = "point";
  static constexpr std::string_view model_suffix = "-point";
  static constexpr std::string_view data_help =
      "dataset YAML with path, train, val, names; labels `class cx cy w h` (YOLO boxes: their centres are the points)";
};

namespace point {
// The task's synthetic set: square JPEGs with small shapes, YOLO box labels, a data.yaml.
inline void synth(data::SynthOptions o) {
  o.task = "point";
  data::synth_point(o);
}
// Draws a point: a filled dot with a white ring, coloured by class.
inline void draw_point(data::Image& img, double x, double y, int cls) {
  static const data::Rgb palette[] = {{255, 56, 56}, {255, 157, 151}, {255, 112, 31}, {255, 178, 29}, {207, 210, 49},
                                      {72, 249, 10},  {146, 204, 23},  {61, 219, 134}, {26, 147, 52},  {0, 212, 187}};
  const double r = std::max(3.0, std::min(img.w, img.h) / 80.0);
  data::fill_circle(img, x, y, r + 1.5, data::Texture::solid({255, 255, 255}));
  data::fill_circle(img, x, y, r, data::Texture::solid(palette[cls % 10]));
}
}  // namespace point

template <class Derived>
class PointTask : public TaskBase<Derived, PointInfo, data::PointDataset, data::PointBatch> {
  using Base = TaskBase<Derived, PointInfo, data::PointDataset, data::PointBatch>;

 public:
  // The optional members every family of this task has (train/members.hpp).
  using task_members = member::list<member::size>;
  using typename Base::Batch;
  using typename Base::Dataset;

  // The original's FOMO validation sweep and matching tolerance (FOMOConfig).
  static constexpr std::array<double, 6> val_thresholds{0.25, 0.35, 0.50, 0.65, 0.80, 0.90};
  static constexpr std::array<int, 2> val_radii{1, 2};
  static constexpr double val_tolerance = 1.5;  // grid cells
  static constexpr double fg_weight = 100.0;    // FOMOConfig.fg_weight

  explicit PointTask(std::string size) : Base(std::move(size)) {}

  void setup(const TrainConfig& cfg) {
    this->require_data(cfg, "a point dataset YAML is required (path, train, val, names; YOLO box labels)");
    const std::pair<const char*, double> unused[] = {{"mosaic", cfg.mosaic},   {"mixup", cfg.mixup},
                                                     {"degrees", cfg.degrees}, {"translate", cfg.translate},
                                                     {"scale", cfg.scale},     {"shear", cfg.shear},
                                                     {"perspective", cfg.perspective}};
    for (const auto& [key, v] : unused)
      if (v != 0 && cfg.is_explicit(key))
        log::warn(key, "=", v, ": the point task applies no mosaic, mixup or affine augmentation; ignored");
    if (cfg.hsv_mode != "multiply")
      throw ConfigError("hsv_mode=" + cfg.hsv_mode + ": the point task's HSV jitter takes multiply gains; allowed: multiply");
    const auto yaml = data::load_dataset_yaml(cfg.data);
    this->adopt_names(yaml.names, "the classes of " + cfg.data);
    this->open_splits(augment_from(cfg), [&](const char* split, const data::PointAugment& aug) {
      return Dataset::open(yaml, split, aug);
    });
  }
  static data::PointAugment augment_from(const TrainConfig& cfg) {
    data::PointAugment a;
    a.imgsz = cfg.imgsz;
    a.stride = Derived::output_stride;
    a.fliplr = cfg.fliplr;
    a.flipud = cfg.flipud;
    a.hsv_h = cfg.hsv_h;
    a.hsv_s = cfg.hsv_s;
    a.hsv_v = cfg.hsv_v;
    a.hsv_prob = cfg.hsv_prob;
    a.cache = cfg.cache;
    return a;
  }
  static torch::Tensor input(const Batch& b) { return Derived::normalise(b.images); }
  // uint8 [B,3,H,W] -> float in [-1, 1]: (x / 255 - 0.5) / 0.5.
  static torch::Tensor normalise(const torch::Tensor& images) { return images.to(torch::kFloat32).div(127.5).sub_(1.0); }

  // FOMO's loss: cross-entropy over the cells with class weights (background 1, foreground `fg`),
  // reduced as the weighted mean (sum of w_t * ce / sum of w_t), PyTorch's CrossEntropyLoss(weight=...).
  static train::LossOutput weighted_cross_entropy(const torch::Tensor& logits, const Batch& b, double fg = fg_weight) {
    auto l = weighted_ce(logits, b.grid, fg);
    return {l, l.detach().reshape({1})};
  }
  static torch::Tensor weighted_ce(const torch::Tensor& logits, const torch::Tensor& grid, double fg = fg_weight) {
    if (logits.dim() != 4 || grid.dim() != 3 || logits.size(2) != grid.size(1) || logits.size(3) != grid.size(2))
      throw Error("point loss: the network's output grid does not match the target grid (check imgsz against the "
                  "network's output stride)");
    // Written out as sum(w_t * ce) / sum(w_t) rather than cross_entropy(weight=...): that kernel's weighted
    // mean adds with atomics on CUDA, so its value varied in the last bits between identical runs; these
    // sums are deterministic.
    namespace F = torch::nn::functional;
    auto ce = F::cross_entropy(logits.to(torch::kFloat32), grid, F::CrossEntropyFuncOptions().reduction(torch::kNone));
    auto w = (grid > 0).to(torch::kFloat32).mul_(fg - 1.0).add_(1.0);  // background 1, foreground fg
    return (ce * w).sum() / w.sum();
  }

  // Points from the network's output: per image [n, 4] x, y (grid cells), score, class.
  static std::vector<torch::Tensor> decode(const torch::Tensor& logits, const eval::PointDecodeOptions& o) {
    return eval::decode_points(logits, o);
  }

  template <class Forward>
  train::ValResult validate(Forward&& forward, data::Loader<Dataset>& loader, torch::Device dev) const {
    torch::NoGradGuard ng;
    eval::PointMetrics metrics({val_thresholds.begin(), val_thresholds.end()}, {val_radii.begin(), val_radii.end()},
                               val_tolerance);
    loader.start_epoch(0);
    double loss_sum = 0;
    int64_t batches = 0, images = 0;
    while (auto batch = loader.next()) {
      auto b = Derived::to_device(*batch, dev);
      auto logits = forward(Derived::input(b)).to(torch::kFloat32);
      loss_sum += weighted_ce(logits, b.grid).template item<double>();
      ++batches;
      images += b.images.size(0);
      metrics.add(logits.to(torch::kCPU), batch->grid);
    }
    if (images == 0) throw DataError("the validation split has no images");
    const auto& best = metrics.best();
    const auto& c = best.counts;
    train::ValResult r;
    r.fitness = c.f1();
    r.metrics = {{"grid_F1", c.f1()},         {"grid_precision", c.precision()}, {"grid_recall", c.recall()},
                 {"grid_mean_distance", c.mean_distance()}, {"grid_TP", c.tp}, {"grid_FP", c.fp}, {"grid_FN", c.fn},
                 {"threshold", best.conf},    {"nms_radius", best.radius},       {"val_loss", loss_sum / double(batches)}};
    char buf[128];
    std::snprintf(buf, sizeof buf, "F1 %.4f  P %.4f  R %.4f  (conf %.2f, radius %d)", c.f1(), c.precision(), c.recall(),
                  best.conf, best.radius);
    r.summary = buf;
    return r;
  }

  // Predict on image files: stretch to imgsz, forward, decode (conf, radius 1, max_det points), points
  // mapped to original pixels. Writes predictions.json and a copy of each image with its points.
  template <class Forward>
  nlohmann::json predict(Forward&& forward, const std::filesystem::path& source, const PredictOptions& opt,
                         torch::Device dev, const std::filesystem::path& out_dir) const {
    const auto files = detect::sources(source);
    std::filesystem::create_directories(out_dir);
    torch::NoGradGuard ng;
    eval::PointDecodeOptions dec{opt.conf, 1, opt.max_det};
    auto one = [&](const std::filesystem::path& file) -> nlohmann::json {
      data::Image img = data::read_image(file);
      auto in = data::to_chw_tensor(data::resize_bilinear(img, opt.imgsz, opt.imgsz)).unsqueeze(0).to(dev);
      torch::Tensor logits = forward(Derived::normalise(in));
      const double gh = double(logits.size(2)), gw = double(logits.size(3));
      torch::Tensor pts = Derived::decode(logits, dec)[0];
      nlohmann::json points = nlohmann::json::array();
      auto a = pts.accessor<float, 2>();
      for (int64_t i = 0; i < pts.size(0); ++i) {
        const double x = (a[i][0] + 0.5) * img.w / gw, y = (a[i][1] + 0.5) * img.h / gh;
        const int cls = static_cast<int>(a[i][3]);
        points.push_back({{"class", cls}, {"name", cls < static_cast<int>(names_.size()) ? names_[cls] : std::to_string(cls)},
                          {"score", a[i][2]}, {"point", {x, y}}});
        if (opt.save_images) point::draw_point(img, x, y, cls);
      }
      if (opt.save_images) data::write_jpeg(out_dir / (file.stem().string() + ".jpg"), img, 90);
      return {{"file", json_file_name(file)}, {"width", img.w}, {"height", img.h}, {"points", points}};
    };
    return predict_images(files, out_dir, one);
  }
  static std::string predict_summary(const nlohmann::json& j) {
    size_t n = 0;
    for (auto& f : j) n += f["points"].size();
    return std::to_string(j.size()) + " image(s), " + std::to_string(n) + " point(s)";
  }

  static void synth(const data::SynthOptions& o) { point::synth(o); }
  static std::filesystem::path synth_data(const std::filesystem::path& out) { return out / "data.yaml"; }

 protected:
  using Base::names_;
};

}  // namespace libreyolo::tasks
