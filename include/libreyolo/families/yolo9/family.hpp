#pragma once
// The YOLOv9 family: GELAN t/s/m/c, task-aligned assigner + BCE/CIoU/DFL loss (BoxMatcher assignment), on the
// detection task (tasks/detect.hpp: YOLO-format data, COCO mAP, predict). Traits carry the original's
// recipe (its YOLO9Config, fixtures/libreyolo/yolo9-t/config.json; one recipe for every size: the
// yolo9-s/m/c config.json files hold the same trainer_defaults) and declare the whole network as the
// capture region. The classification task (Yolo9Classify) joins task_policies when its network lands.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/families/yolo9/loss.hpp>
#include <libreyolo/families/yolo9/network.hpp>
#include <libreyolo/families/yolo9/postprocess.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/train/family.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <string_view>

namespace libreyolo {

class Yolo9Family : public tasks::DetectTask<Yolo9Family> {
 public:
  static constexpr std::string_view name = "yolo9";
  // The original pads right and below (its YOLO9ValPreprocessor, YOLO9TrainTransform and predict preprocess):
  // its own validator's mAP of a checkpoint is reproduced only so (docs/fidelity.md row 18).
  static constexpr data::LetterboxPlace letterbox_place = data::LetterboxPlace::top_left;
  static constexpr auto sizes = families::yolo9::kSizes;  // t, s, m, c
  // YOLOv9-e: the original (snapshot c41461e) has no such size (its YOLO9_CONFIGS holds t, s, m, c).
  static constexpr auto planned_sizes = families::yolo9::kPlannedSizes;
  struct traits : family_defaults {
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<Task, 1> captured_tasks{Task::detect};
    // Its loss (BoxMatcher assignment on padded targets, masks instead of boolean indexing) has fixed
    // shapes and reads nothing back: cuda_graph=step records the whole step.
    static constexpr bool step_capturable = true;
    // The original's YOLO9Config: linear schedule with a 3-epoch warm-up from 1e-4 to 1% of lr0, EMA
    // 0.9999, 8 workers, validation every 10 epochs; no gradient clipping, no accumulation (nbs unset);
    // its YOLO9MosaicMixupDataset applies no random affine (the 2S mosaic is resized to S), no mixup, and
    // YOLOX's additive HSV jitter (gains 5, 30, 30, each channel with probability 1/2).
    static constexpr std::array<std::string_view, 13> overrides{
        "scheduler=linear", "warmup_epochs=3", "warmup_lr_start=0.0001", "min_lr_ratio=0.01", "ema_decay=0.9999",
        "workers=8", "eval_interval=10", "affine=false", "mixup=0", "hsv_mode=add", "hsv_h=5", "hsv_s=30", "hsv_v=30"};
    static constexpr std::string_view fixture_prefix = "yolo9-";
  };
  using Network = families::yolo9::Yolo9;

  explicit Yolo9Family(std::string size = "t") : DetectTask(std::move(size)) {
    families::require_size<Yolo9Family>(size_);
  }

  Network make_network() const { return Network(families::yolo9::Yolo9Options{size_, num_classes(), 16}); }

  // The loss is built on first use (it needs the network's strides and the class count).
  train::LossOutput loss(const std::vector<torch::Tensor>& feats, const Batch& b) {
    if (!loss_) loss_ = std::make_unique<families::yolo9::DetectionLoss>(strides(), num_classes());
    auto out = (*loss_)(feats, b.targets);
    return {out.total, out.items};
  }
  static std::vector<std::string> loss_names() { return {"box", "cls", "dfl"}; }

  // Raw head maps -> per-image detections in network-input pixels (DFL decode, then NMS).
  std::vector<torch::Tensor> decode(const std::vector<torch::Tensor>& feats, const tasks::DecodeOptions& o) const {
    return families::yolo9::postprocess(feats, strides(), 16, o);
  }
  static std::vector<int64_t> strides() { return {8, 16, 32}; }

  // Loading the original's PyTorch .pt checkpoints (io/): the original's state-dict names equal ours.
  static std::string original_key(const std::string& ours) { return ours; }

 private:
  std::unique_ptr<families::yolo9::DetectionLoss> loss_;
};

}  // namespace libreyolo
