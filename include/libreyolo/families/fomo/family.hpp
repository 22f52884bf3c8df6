#pragma once
// The FOMO family (point task, tasks/point.hpp): FOMO s/m/l, a MobileNetV2 (alpha 0.35 / 0.50 / 1.00)
// truncated at stride 8 plus a 1x1 head, trained with the weighted cross-entropy (foreground weight 100).
// Traits carry the original's FOMOConfig recipe: float32 (no AMP), no EMA, Adam lr 3e-4 without weight
// decay, cosine to 5% with no warm-up, 40 epochs of batch 32, no augmentation; the whole network is the
// capture region. The input size is per size (size_overrides): the original's CONFIGS imgsz, s 96, m 192,
// l 224, which its LibreFOMO.train() sets from the size (libreyolo/models/fomo/nn.py, model.py).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/fomo/network.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/tasks/point.hpp>
#include <libreyolo/train/family.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

namespace libreyolo {

class FomoFamily : public tasks::PointTask<FomoFamily> {
 public:
  static constexpr std::string_view name = "fomo";
  static constexpr std::array<std::string_view, 3> sizes{"s", "m", "l"};
  static constexpr int output_stride = 8;
  struct traits : family_defaults {
    using members = member::list<member::size_overrides>;
    static constexpr bool amp_default = false;  // FOMOConfig.amp = False
    static constexpr std::string_view fp32_reason = "its original trains in float32: FOMOConfig.amp = False";
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    // The weighted cross-entropy over the fixed target grid has fixed shapes and reads nothing back: the
    // whole step can be one graph (cuda_graph=step).
    static constexpr bool step_capturable = true;
    // FOMOConfig: optimizer "adam" (torch's Adam, betas 0.9 / 0.999, no weight decay = AdamW with
    // weight_decay 0), lr0 3e-4, scheduler cos, no warm-up, min_lr_ratio 0.05, no mosaic / mixup / HSV /
    // flip / affine, EMA and AMP off, 40 epochs, batch 32, validation every epoch, SyncBN under DDP;
    // imgsz from CONFIGS["s"] (96); the other sizes' imgsz comes from size_overrides() below.
    static constexpr std::array<std::string_view, 23> overrides{
        "imgsz=96",     "epochs=40",      "batch=32",       "optimizer=AdamW", "momentum=0.9",  "lr0=0.0003",
        "weight_decay=0", "scheduler=cos", "warmup_epochs=0", "warmup_lr_start=0", "min_lr_ratio=0.05",
        "no_aug_epochs=0", "ema=false",   "mosaic=0",       "mixup=0",         "hsv_prob=0",    "fliplr=0",
        "degrees=0",    "translate=0",    "scale=0",        "shear=0",         "eval_interval=1", "sync_bn=true"};
  };
  using Network = families::fomo::Fomo;

  explicit FomoFamily(std::string size = "s") : PointTask(std::move(size)) {
    families::require_size<FomoFamily>(size_);
  }

  // The size's part of the recipe, applied after traits::overrides to the keys the user did not set: the
  // original's native input size (CONFIGS[size]["imgsz"]; LibreFOMO.train() passes it as imgsz).
  std::array<std::string, 1> size_overrides() const {
    return {"imgsz=" + std::to_string(families::fomo::fomo_imgsz(size_))};
  }

  Network make_network() const { return Network(families::fomo::FomoOptions{size_, num_classes()}); }
  static train::LossOutput loss(const torch::Tensor& logits, const Batch& b) { return weighted_cross_entropy(logits, b); }
  static std::vector<std::string> loss_names() { return {"ce"}; }

  // Loading the original's .pt checkpoints: the original's state-dict names equal ours.
  static std::string original_key(const std::string& ours) { return ours; }
};

}  // namespace libreyolo
