#pragma once
// The YOLOv9 detection family: GELAN t/s on YOLO-format datasets, task-aligned assigner + BCE/CIoU/DFL
// loss, COCO mAP on the validation split (fitness = mAP50-95). Traits carry the original's recipe (its
// YOLO9Config, fixtures/libreyolo/yolo9-t/config.json) and declare the whole network as the capture region.
#include <libreyolo/core/config.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/data/detect.hpp>
#include <libreyolo/data/detect_yaml.hpp>
#include <libreyolo/data/loader.hpp>
#include <libreyolo/eval/detection.hpp>
#include <libreyolo/families/yolo9/loss.hpp>
#include <libreyolo/families/yolo9/network.hpp>
#include <libreyolo/families/yolo9/postprocess.hpp>
#include <libreyolo/train/family.hpp>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>

namespace libreyolo {

class Yolo9Family {
 public:
  static constexpr std::string_view name = "yolo9";
  static constexpr std::array<std::string_view, 2> sizes{"t", "s"};
  static constexpr std::array<std::string_view, 3> planned_sizes{"m", "c", "e"};
  struct traits : family_defaults {
    static constexpr Task task = Task::detect;
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    // The original's YOLO9Config: linear schedule with a 3-epoch warm-up from 1e-4 to 1% of lr0, EMA
    // 0.9999, 8 workers, validation every 10 epochs; no gradient clipping, no accumulation (nbs unset);
    // its YOLO9MosaicMixupDataset applies no random affine (the 2S mosaic is resized to S), no mixup, and
    // YOLOX's additive HSV jitter (gains 5, 30, 30, each channel with probability 1/2).
    static constexpr std::array<std::string_view, 13> overrides{
        "scheduler=linear", "warmup_epochs=3", "warmup_lr_start=0.0001", "min_lr_ratio=0.01", "ema_decay=0.9999",
        "workers=8", "eval_interval=10", "affine=false", "mixup=0", "hsv_mode=add", "hsv_h=5", "hsv_s=30", "hsv_v=30"};
  };
  using Network = families::yolo9::Yolo9;
  using Dataset = data::DetectDataset;
  using Batch = data::DetectBatch;

  explicit Yolo9Family(std::string size = "t") : size_(std::move(size)) {
    for (auto p : planned_sizes)
      if (size_ == p) throw ConfigError("model=yolo9" + size_ + ": not implemented yet; available: yolo9t, yolo9s");
    if (size_ != "t" && size_ != "s") throw ConfigError("model=yolo9" + size_ + ": unknown size; available: yolo9t, yolo9s");
  }

  // Opens the dataset YAML named by cfg.data; the augmentation settings come from the config.
  void setup(const TrainConfig& cfg) {
    if (cfg.data.empty()) throw ConfigError("data=: a detection dataset YAML is required (path, train, val, names)");
    auto yaml = data::load_dataset_yaml(cfg.data);
    if (!names_.empty() && names_ != yaml.names)
      throw CheckpointError("the checkpoint's classes differ from the classes of " + cfg.data);
    names_ = yaml.names;
    data::DetectAugment aug = augment_from(cfg);
    train_ = data::DetectDataset::open(yaml, "train", aug);
    aug.train = false;
    aug.multi_scale = false;
    val_ = data::DetectDataset::open(yaml, "val", aug);
  }
  static data::DetectAugment augment_from(const TrainConfig& cfg) {
    data::DetectAugment a;
    a.imgsz = cfg.imgsz;
    a.mosaic = cfg.mosaic;
    a.mixup = cfg.mixup;
    a.degrees = cfg.degrees;
    a.translate = cfg.translate;
    a.scale = cfg.scale;
    a.shear = cfg.shear;
    a.perspective = cfg.perspective;
    a.fliplr = cfg.fliplr;
    a.flipud = cfg.flipud;
    a.hsv_h = cfg.hsv_h;
    a.hsv_s = cfg.hsv_s;
    a.hsv_v = cfg.hsv_v;
    a.hsv_mode = cfg.hsv_mode;
    a.hsv_prob = cfg.hsv_prob;
    a.affine = cfg.affine;
    a.no_aug_epochs = cfg.no_aug_epochs;
    a.epochs = cfg.epochs;
    a.cache = cfg.cache;
    a.multi_scale = cfg.multi_scale;
    return a;
  }
  Network make_network() const {
    return Network(families::yolo9::Yolo9Options{size_, static_cast<int64_t>(names_.size()), 16});
  }
  std::shared_ptr<const Dataset> train_set() const { return train_; }
  std::shared_ptr<const Dataset> val_set() const { return val_; }

  static Batch to_device(const Batch& b, torch::Device d) { return b.to(d, /*non_blocking=*/true); }
  static torch::Tensor input(const Batch& b) { return b.images.to(torch::kFloat32).div(255.0); }

  // The loss is built on first use (it needs the network's strides and the class count).
  train::LossOutput loss(const std::vector<torch::Tensor>& feats, const Batch& b) {
    if (!loss_) loss_ = std::make_unique<families::yolo9::DetectionLoss>(strides(), static_cast<int64_t>(names_.size()));
    auto out = (*loss_)(feats, b.targets);
    return {out.total, out.items};
  }
  static std::vector<std::string> loss_names() { return {"box", "cls", "dfl"}; }

  // COCO mAP (COCOeval's rules, eval/detection.hpp) on the validation split, with the original's
  // validation post-processing: every (box, class) pair above conf 0.001, class-aware NMS at IoU 0.65,
  // 300 detections per image; boxes mapped back to the original image and clipped to it, empty ones
  // dropped. Ground truth is mapped back the same way, so areas are original pixels as COCO's are.
  static families::yolo9::NmsOptions val_nms() {
    families::yolo9::NmsOptions nms;
    nms.conf = 0.001;
    nms.iou = 0.65;
    nms.max_det = 300;
    nms.multi_label = true;
    return nms;
  }
  template <class Forward>
  train::ValResult validate(Forward&& forward, data::Loader<Dataset>& loader, torch::Device dev) const {
    torch::NoGradGuard ng;
    eval::DetectionMetrics metrics;
    const auto nms = val_nms();
    loader.start_epoch(0);
    while (auto batch = loader.next()) {
      auto b = to_device(*batch, dev);
      auto preds = families::yolo9::postprocess(forward(input(b)), strides(), 16, nms);
      const std::array<int64_t, 2> in_hw{b.images.size(2), b.images.size(3)};
      for (size_t i = 0; i < preds.size(); ++i) {
        const auto& lb = batch->letterbox[i];  // orig_h, orig_w, ratio, pad_x, pad_y
        const std::array<int64_t, 2> orig{static_cast<int64_t>(lb[0]), static_cast<int64_t>(lb[1])};
        auto p = families::yolo9::scale_boxes(preds[i].to(torch::kCPU), in_hw, orig, lb[2], {lb[3], lb[4]});
        if (p.size(0) > 0) {
          auto keep = ((p.select(1, 2) > p.select(1, 0)) & (p.select(1, 3) > p.select(1, 1))).nonzero().squeeze(1);
          p = p.index_select(0, keep);
        }
        auto g = batch->boxes[i];
        if (g.size(0) > 0)
          g = torch::cat({g.narrow(1, 0, 1), families::yolo9::scale_boxes(g.narrow(1, 1, 4), in_hw, orig, lb[2], {lb[3], lb[4]})}, 1);
        metrics.add(p, g);
      }
    }
    auto r = metrics.compute();
    train::ValResult v;
    v.fitness = std::max(0.0, r.map50_95);  // COCO's -1 (no ground truth at all) ranks as 0
    v.metrics = {{"mAP50", r.map50}, {"mAP50-95", r.map50_95}, {"mAP75", r.map75},   {"AP_small", r.ap_small},
                 {"AP_medium", r.ap_medium}, {"AP_large", r.ap_large}, {"AR100", r.ar100},
                 {"precision", r.precision}, {"recall", r.recall}};
    char buf[96];
    std::snprintf(buf, sizeof buf, "mAP50 %.4f  mAP50-95 %.4f", r.map50, r.map50_95);
    v.summary = buf;
    return v;
  }

  nlohmann::json describe() const { return {{"names", names_}, {"nc", names_.size()}, {"size", size_}}; }
  void restore(const nlohmann::json& j) { names_ = j.at("names").get<std::vector<std::string>>(); }
  const std::vector<std::string>& names() const { return names_; }
  static std::vector<int64_t> strides() { return {8, 16, 32}; }

 private:
  std::string size_;
  std::vector<std::string> names_;
  std::shared_ptr<Dataset> train_, val_;
  std::unique_ptr<families::yolo9::DetectionLoss> loss_;
};

}  // namespace libreyolo
