#pragma once
// The ResNet classification family: ResNet-18/34 on class-named image folders, cross-entropy loss,
// top-1/top-5 on the validation split (fitness = top-1).
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/data/classify.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/families/resnet/network.hpp>
#include <libreyolo/train/family.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <array>
#include <string>
#include <string_view>

namespace libreyolo {

class ResNetFamily {
 public:
  static constexpr std::string_view name = "resnet";
  static constexpr std::array<std::string_view, 2> sizes{"18", "34"};
  struct traits : family_defaults {
    static constexpr Task task = Task::classify;
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    // Classification at 224 px; no mosaic, so no no-augmentation tail for the schedule.
    static constexpr std::array<std::string_view, 2> overrides{"imgsz=224", "no_aug_epochs=0"};
  };
  using Network = resnet::ResNet;
  using Dataset = data::ClassifyFolder;
  using Batch = data::ClassifyBatch;

  explicit ResNetFamily(std::string size = "18") : size_(std::move(size)) {
    if (size_ != "18" && size_ != "34")
      throw ConfigError("model=resnet" + size_ + ": unknown ResNet size; allowed: resnet18, resnet34");
  }
  const std::string& size() const { return size_; }

  // Opens the dataset named by cfg.data (a folder with train/ and val/ of class folders).
  void setup(const TrainConfig& cfg) {
    if (cfg.data.empty()) throw ConfigError("data=: a classification dataset folder is required (root/train/<class>/*.jpg)");
    data::ClassifyAugment aug;
    aug.imgsz = cfg.imgsz;
    aug.fliplr = cfg.fliplr;
    aug.scale_min = std::max(0.05, 1.0 - cfg.scale);  // random-resized-crop keeps >= (1 - scale) of the area
    aug.hsv_h = cfg.hsv_h;
    aug.hsv_s = cfg.hsv_s;
    aug.hsv_v = cfg.hsv_v;
    data_ = data::open_classify(cfg.data, cfg.imgsz, aug);
    if (!names_.empty() && names_ != data_.names)
      throw CheckpointError("the checkpoint's classes differ from the dataset's classes in " + cfg.data);
    names_ = data_.names;
  }
  Network make_network() const {
    return Network(resnet::ResNetOptions{std::stoi(size_), static_cast<int64_t>(names_.size())});
  }
  std::shared_ptr<const Dataset> train_set() const { return data_.train; }
  std::shared_ptr<const Dataset> val_set() const { return data_.val; }

  static Batch to_device(const Batch& b, torch::Device d) {
    return Batch{b.images.to(d, /*non_blocking=*/true), b.labels.to(d, /*non_blocking=*/true)};
  }
  // uint8 [B,3,H,W] -> float, ImageNet mean/std normalisation (on the device: 4x less to copy). Scalar
  // ops per channel: no small host-to-device copies (each would stall the host on CUDA).
  static torch::Tensor input(const Batch& b) {
    static constexpr std::array<double, 3> mean{0.485 * 255, 0.456 * 255, 0.406 * 255};
    static constexpr std::array<double, 3> inv_std{1 / (0.229 * 255), 1 / (0.224 * 255), 1 / (0.225 * 255)};
    auto x = b.images.to(torch::kFloat32);
    for (int64_t c = 0; c < 3; ++c) x.select(1, c).sub_(mean[c]).mul_(inv_std[c]);
    return x;
  }
  static train::LossOutput loss(const torch::Tensor& logits, const Batch& b) {
    auto l = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), b.labels);
    return {l, l.detach().reshape({1})};
  }
  static std::vector<std::string> loss_names() { return {"loss"}; }

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
    while (auto batch = loader.next()) {
      auto b = to_device(*batch, dev);
      auto logits = forward(input(b)).to(torch::kFloat32);
      loss_sum += torch::nn::functional::cross_entropy(
                      logits, b.labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .to(torch::kFloat64);
      auto topk = std::get<1>(logits.topk(k, 1));
      auto hit = topk.eq(b.labels.unsqueeze(1));
      correct1 += hit.select(1, 0).sum();
      correct5 += hit.any(1).sum();
      n += b.labels.size(0);
    }
    train::ValResult r;
    if (n == 0) throw DataError("validation split of " + std::string("the dataset") + " has no images");
    double top1 = double(correct1.item<int64_t>()) / double(n);
    double top5 = double(correct5.item<int64_t>()) / double(n);
    r.fitness = top1;
    r.metrics = {{"top1", top1}, {"top5", top5}, {"val_loss", loss_sum.item<double>() / double(n)}};
    r.summary = "top1 " + fmt3(top1) + "  top5 " + fmt3(top5);
    return r;
  }

  nlohmann::json describe() const { return {{"names", names_}, {"nc", names_.size()}, {"size", size_}}; }
  // From a checkpoint: the class names the network was built for.
  void restore(const nlohmann::json& j) { names_ = j.at("names").get<std::vector<std::string>>(); }

 private:
  static std::string fmt3(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", x);
    return buf;
  }
  std::string size_;
  std::vector<std::string> names_;
  data::ClassifyData data_;
};

}  // namespace libreyolo
