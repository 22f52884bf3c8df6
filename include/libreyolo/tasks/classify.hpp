#pragma once
// The classification task: class-named image folders (root/train/<class>/*.jpg, root/val/<class>/...),
// top-1 / top-5 and the mean validation loss on the validation split (fitness = top-1), predict to the
// top-k classes of each image.
//
// A classification family derives from ClassifyTask<Family> and supplies:
//   static constexpr std::string_view name; sizes; struct traits : family_defaults {...};
//   using Network = ...;                              a torch ModuleHolder returning logits [B, classes]
//   explicit Family(std::string size)                 validates the size, calls ClassifyTask(size)
//   Network make_network() const                      for num_classes()
//   train::LossOutput loss(const torch::Tensor& logits, const Batch&)   (cross_entropy() below is the usual one)
//   static std::vector<std::string> loss_names()
// and may hide input() (the default is ImageNet mean/std normalisation) or decode() (softmax).
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/data/classify.hpp>
#include <libreyolo/data/image.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/data/synth.hpp>
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
#include <vector>

namespace libreyolo::tasks {

struct ClassifyInfo {
  static constexpr Task task = Task::classify;
  static constexpr std::string_view name = "classify";
  static constexpr std::string_view model_suffix = "-cls";
  static constexpr std::string_view data_help = "folder with train/<class>/*.jpg and val/<class>/*.jpg";
};

namespace classify {
// The task's synthetic set: one folder of JPEGs per class, train/ and val/.
inline void synth(data::SynthOptions o) {
  o.task = "classify";
  data::synth_classify(o);
}
}  // namespace classify

template <class Derived>
class ClassifyTask : public TaskBase<Derived, ClassifyInfo, data::ClassifyFolder, data::ClassifyBatch> {
  using Base = TaskBase<Derived, ClassifyInfo, data::ClassifyFolder, data::ClassifyBatch>;

 public:
  // The optional members every family of this task has (train/members.hpp).
  using task_members = member::list<member::size, member::plots>;
  using typename Base::Batch;
  using typename Base::Dataset;
  using Base::num_classes;

  explicit ClassifyTask(std::string size) : Base(std::move(size)) {}

  // Opens the dataset named by cfg.data (a folder with train/ and val/ of class folders).
  void setup(const TrainConfig& cfg) {
    this->require_data(cfg, "a classification dataset folder is required (root/train/<class>/*.jpg)");
    auto d = data::open_classify(cfg.data, cfg.imgsz, augment_from(cfg));
    this->adopt_names(d.names, "the dataset's classes in " + cfg.data);
    this->train_ = std::move(d.train);
    this->val_ = std::move(d.val);
  }
  static data::ClassifyAugment augment_from(const TrainConfig& cfg) {
    data::ClassifyAugment aug;
    aug.imgsz = cfg.imgsz;
    aug.fliplr = cfg.fliplr;
    aug.scale_min = std::max(0.05, 1.0 - cfg.scale);  // random-resized-crop keeps >= (1 - scale) of the area
    aug.hsv_h = cfg.hsv_h;
    aug.hsv_s = cfg.hsv_s;
    aug.hsv_v = cfg.hsv_v;
    aug.cache = cfg.cache;
    return aug;
  }
  // uint8 [B,3,H,W] -> float, ImageNet mean/std normalisation (on the device: 4x less to copy). Scalar
  // ops per channel: no small host-to-device copies (each would stall the host on CUDA).
  static torch::Tensor input(const Batch& b) { return normalise(b.images); }
  static torch::Tensor normalise(const torch::Tensor& images) {
    static constexpr std::array<double, 3> mean{0.485 * 255, 0.456 * 255, 0.406 * 255};
    static constexpr std::array<double, 3> inv_std{1 / (0.229 * 255), 1 / (0.224 * 255), 1 / (0.225 * 255)};
    auto x = images.to(torch::kFloat32);
    for (int64_t c = 0; c < 3; ++c) x.select(1, c).sub_(mean[c]).mul_(inv_std[c]);
    return x;
  }
  // The usual classification loss, for families to return from loss().
  static train::LossOutput cross_entropy(const torch::Tensor& logits, const Batch& b) {
    auto l = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), b.labels);
    return {l, l.detach().reshape({1})};
  }
  // Class probabilities from the network's output.
  static torch::Tensor decode(const torch::Tensor& logits) { return logits.to(torch::kFloat32).softmax(1); }

  // Top-1 / top-5 and the mean validation loss. `forward` runs the (EMA) network under the run's
  // precision. One host sync at the end, not per batch.
  template <class Forward>
  train::ValResult validate(Forward&& forward, data::Loader<Dataset>& loader, torch::Device dev) const {
    torch::NoGradGuard ng;
    loader.start_epoch(0);
    auto correct1 = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt64).device(dev));
    auto correct5 = correct1.clone();
    auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(dev));
    int64_t n = 0;
    const int64_t k = std::min<int64_t>(5, static_cast<int64_t>(names_.size()));
    const bool plots = !plot_dir_.empty() && plot::available;
    plot::ConfusionMatrix confusion(num_classes());
    bool first_batch = true;
    while (auto batch = loader.next()) {
      auto b = Derived::to_device(*batch, dev);
      auto logits = forward(Derived::input(b)).to(torch::kFloat32);
      if (plots) {
        const torch::Tensor probs = Derived::decode(logits).to(torch::kCPU);
        const auto top = probs.max(1);
        const torch::Tensor pred = std::get<1>(top), score = std::get<0>(top);
        const torch::Tensor labels = batch->labels.to(torch::kCPU);
        for (int64_t i = 0; i < labels.size(0); ++i) confusion.add_class(pred[i].item<int64_t>(), labels[i].item<int64_t>());
        if (first_batch) plot_batch(*batch, pred, score);
        first_batch = false;
      }
      loss_sum += torch::nn::functional::cross_entropy(
                      logits, b.labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .to(torch::kFloat64);
      auto topk = std::get<1>(logits.topk(k, 1));
      auto hit = topk.eq(b.labels.unsqueeze(1));
      correct1 += hit.select(1, 0).sum();
      correct5 += hit.any(1).sum();
      n += b.labels.size(0);
    }
    if (plots) plot::confusion_png(confusion, names_, plot_dir_ / "confusion_matrix.png", /*with_background=*/false);
    train::ValResult r;
    if (n == 0) throw DataError("validation split of " + std::string("the dataset") + " has no images");
    double top1 = double(correct1.item<int64_t>()) / double(n);
    double top5 = double(correct5.item<int64_t>()) / double(n);
    r.fitness = top1;
    r.metrics = {{"top1", top1}, {"top5", top5}, {"val_loss", loss_sum.item<double>() / double(n)}};
    r.summary = "top1 " + fmt3(top1) + "  top5 " + fmt3(top5);
    return r;
  }

  // Predict on image files: the validation transform (resize + centre crop to imgsz), forward, the top-k
  // classes with their probabilities. Writes predictions.json, a copy of each image with its top class
  // and score, and with save_txt labels/<stem>.txt (one `class score` line per top-k class).
  template <class Forward>
  nlohmann::json predict(Forward&& forward, const std::filesystem::path& source, const PredictOptions& opt,
                         torch::Device dev, const std::filesystem::path& out_dir) const {
    const auto files = tasks::sources(source);
    std::filesystem::create_directories(out_dir);
    torch::NoGradGuard ng;
    const int64_t k = std::min<int64_t>(std::max<int64_t>(1, opt.top_k), static_cast<int64_t>(names_.size()));
    auto one = [&](const std::filesystem::path& file) -> nlohmann::json {
      data::Image img = data::read_image(file);
      auto in = data::to_chw_tensor(data::resize_center_crop(img, opt.imgsz)).unsqueeze(0).to(dev);
      torch::Tensor probs = Derived::decode(forward(normalise(in)))[0].to(torch::kCPU);
      auto top = probs.topk(k);
      nlohmann::json classes = nlohmann::json::array();
      std::vector<std::string> lines;
      for (int64_t i = 0; i < k; ++i) {
        const auto c = std::get<1>(top)[i].item<int64_t>();
        const double score = std::get<0>(top)[i].item<double>();
        classes.push_back({{"class", c}, {"name", names_.at(static_cast<size_t>(c))}, {"score", score}});
        lines.push_back(std::to_string(c) + " " + fmt3(score));
      }
      if (opt.save_images) {
        plot::caption(img, classes[0]["name"].get<std::string>() + " " + fmt3(classes[0]["score"].get<double>()));
        data::write_jpeg(out_dir / (file.stem().string() + ".jpg"), img, 90);
      }
      if (opt.save_txt) write_label_lines(out_dir, file, lines);
      return {{"file", json_file_name(file)}, {"width", img.w}, {"height", img.h}, {"classes", classes}};
    };
    return predict_images(files, out_dir, one);
  }
  static std::string predict_summary(const nlohmann::json& j) {
    return std::to_string(j.size()) + " image(s) classified";
  }

  // The task's synthetic set: one folder of JPEGs per class, train/ and val/.
  static void synth(const data::SynthOptions& o) { classify::synth(o); }
  static std::filesystem::path synth_data(const std::filesystem::path& out) { return out; }

  // Pictures (plots=true; the trainer calls these): validate() writes val_batch0_labels.jpg,
  // val_batch0_pred.jpg (top class and score, green when right) and confusion_matrix.png under `dir`
  // ("" = none); labels.png shows the training images per class.
  void set_plot_dir(const std::filesystem::path& dir) { plot_dir_ = dir; }
  void plot_labels(const std::filesystem::path& out) const {
    if (!train_) return;
    std::vector<double> count(names_.size(), 0);
    for (size_t i = 0; i < train_->size(); ++i)
      if (const auto l = train_->label(i); l >= 0 && static_cast<size_t>(l) < count.size()) count[static_cast<size_t>(l)] += 1;
    plot::class_histogram_png(names_, count, out);
  }

 protected:
  using Base::names_;
  using Base::train_;

  void plot_batch(const Batch& batch, const torch::Tensor& pred, const torch::Tensor& score) const {
    std::vector<data::Image> labelled, predicted;
    for (int64_t i = 0; i < batch.images.size(0) && i < 16; ++i) {
      const torch::Tensor images = batch.images;
      auto img = plot::image_from_chw(images[i]);
      auto pimg = img;
      const torch::Tensor labels = batch.labels;
      const int64_t truth = labels[i].item<int64_t>(), p = pred[i].item<int64_t>();
      plot::caption(img, names_.at(static_cast<size_t>(truth)));
      plot::caption(pimg, names_.at(static_cast<size_t>(p)) + " " + fmt3(score[i].item<double>()), p == truth);
      labelled.push_back(std::move(img));
      predicted.push_back(std::move(pimg));
    }
    plot::grid_jpeg(labelled, plot_dir_ / "val_batch0_labels.jpg", 160);
    plot::grid_jpeg(predicted, plot_dir_ / "val_batch0_pred.jpg", 160);
  }
  static std::string fmt3(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", x);
    return buf;
  }
  std::filesystem::path plot_dir_;
};

}  // namespace libreyolo::tasks
