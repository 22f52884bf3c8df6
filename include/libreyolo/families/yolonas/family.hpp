#pragma once
// The YOLO-NAS family (sizes s, m, l) on the detection task: the QARepVGG network (network.hpp, trained
// un-fused; YoloNas::fuse() re-parameterises it for inference), the PP-YOLOE loss (loss.hpp) and the
// original's post-processing. Traits carry the original's recipe (its YOLONASConfig,
// shared/fixtures/libreyolo/yolonas-s/config.json): float32 training by default (amp false), AdamW
// lr0 5e-4 (beta1 0.9), weight decay 1e-5, cosine schedule with 1 warm-up epoch from 1e-6 to a floor
// of 0.1·lr0, no no-aug tail, EMA 0.9997, validation every 10 epochs; its own augmentation pipeline
// (augment.hpp: the original's YOLONASAffineMixupDataset + YOLONASTrainTransform): random affine about
// the top-left corner (translate 0.25, scale 0.5..1.5, no rotation or shear), mixup with probability
// 0.5, YOLOX's additive HSV jitter (gains 5, 30, 30) on half the images, horizontal flips. Its optimizer
// groups are the original's BaseTrainer groups: under AdamW the BatchNorm weights and the biases get
// torch's default decay 0.01. The whole network is the capture region.
//
// Decode (the original's postprocess/yolonas.py): best class per anchor above conf, the 1000 best
// candidates, class-aware NMS, max_det; validation at conf 0.001, IoU 0.65, 300 boxes, single-label.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/families/yolonas/augment.hpp>
#include <libreyolo/families/yolonas/loss.hpp>
#include <libreyolo/families/yolonas/network.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo {

class YoloNasFamily : public tasks::DetectTask<YoloNasFamily> {
 public:
  static constexpr std::string_view name = "yolonas";
  static constexpr std::array<std::string_view, 3> sizes{"s", "m", "l"};
  struct traits : family_defaults {
    using members = member::list<member::param_groups>;
    // The original trains YOLO-NAS in float32 (YOLONASConfig.amp = False).
    static constexpr bool amp_default = false;
    static constexpr std::string_view fp32_reason = "its original trains in float32: YOLONASConfig.amp = False";
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<Task, 1> captured_tasks{Task::detect};
    static constexpr std::array<std::string_view, 20> overrides{
        "optimizer=adamw", "lr0=0.0005",       "momentum=0.9", "weight_decay=0.00001", "scheduler=cos",
        "warmup_epochs=1", "warmup_lr_start=0.000001", "min_lr_ratio=0.1", "no_aug_epochs=0", "ema_decay=0.9997",
        "eval_interval=10", "mosaic=0",        "mixup=0.5",    "translate=0.25",       "scale=0.5",
        "hsv_mode=add",    "hsv_h=5",          "hsv_s=30",     "hsv_v=30",             "hsv_prob=0.5"};
    static constexpr std::string_view fixture_prefix = "yolonas-";
  };
  using Network = families::yolonas::YoloNas;

  explicit YoloNasFamily(std::string size = "s") : DetectTask(std::move(size)) {
    families::require_size<YoloNasFamily>(size_);
  }

  Network make_network() const { return Network(families::yolonas::YoloNasOptions{size_, num_classes(), 16}); }

  train::LossOutput loss(const std::vector<torch::Tensor>& out, const Batch& b) {
    if (!loss_) loss_ = std::make_unique<families::yolonas::PPYoloELoss>(num_classes());
    const int64_t h = b.images.size(2), w = b.images.size(3);
    auto r = (*loss_)(out, {{h / 8, w / 8}, {h / 16, w / 16}, {h / 32, w / 32}}, b.targets);
    return {r.total, r.items};
  }
  static std::vector<std::string> loss_names() { return {"cls", "iou", "dfl"}; }

  // {boxes, scores, ...} -> per image [n, 6] in network-input pixels.
  std::vector<torch::Tensor> decode(const std::vector<torch::Tensor>& out, const tasks::DecodeOptions& o) const {
    torch::NoGradGuard ng;
    auto nms = o;
    nms.max_nms = 1000;  // the original's pre-NMS top-k
    return tasks::detect::non_max_suppression(torch::cat({out[0].to(torch::kFloat32), out[1].to(torch::kFloat32)}, -1), nms);
  }
  // The original validates YOLO-NAS with its own postprocess: best class only, conf 0.001, IoU 0.65.
  static tasks::DecodeOptions val_decode() { return tasks::validation_decode(/*multi_label=*/false); }
  // The original's validation and predict resize the image to a long side of 636 (YOLO_NAS_RESIZE_SIZE,
  // postprocess/yolonas.py:19) and centre it on the 640 canvas (models/yolonas/utils.py preprocess_numpy); its
  // 636 is a constant, which overflows a smaller canvas: here it scales with imgsz (docs/fidelity.md row 21).
  static int letterbox_fit(int imgsz) { return static_cast<int>(std::lround(imgsz * 636.0 / 640.0)); }
  static std::vector<int64_t> strides() { return {8, 16, 32}; }

  // The original's (and SuperGradients') state-dict names equal ours.
  static std::string original_key(const std::string& ours) { return ours; }

  // The original's pipeline (augment.hpp) in place of the built-in one.
  static void adjust_augment(data::DetectAugment& a, const TrainConfig& cfg, const std::string& /*size*/ = {}) {
    families::yolonas::use_affine_mixup_pipeline(a, cfg);
  }

  void setup(const TrainConfig& cfg) {
    adamw_ = config_detail::lower(cfg.optimizer) == "adamw";
    DetectTask::setup(cfg);
  }
  // The original's BaseTrainer groups: under AdamW, decay 0.01 on BatchNorm weights and biases.
  std::vector<train::ParamGroup> param_groups(torch::nn::Module& net, double weight_decay) const {
    return train::original_base_groups(net, weight_decay, adamw_);
  }

 private:
  std::unique_ptr<families::yolonas::PPYoloELoss> loss_;
  bool adamw_ = false;
};

}  // namespace libreyolo
