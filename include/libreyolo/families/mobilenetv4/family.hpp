#pragma once
// The MobileNetV4 family: conv-small, conv-medium and conv-large (mobilenetv4s, mobilenetv4m, mobilenetv4l: the
// sizes of the original's ARCH_DEFS, libreyolo/models/mobilenetv4/nn.py) with cross-entropy, on the
// classification task (tasks/classify.hpp: class-named image folders, top-1/top-5, predict). Traits carry the
// original's MobileNetV4Config, the same for every size: 224 px,
// AdamW lr 1e-3 (torch's default betas 0.9 / 0.999) with weight decay 1e-4, the yoloxwarmcos schedule
// (a 1-epoch quadratic warm-up from 0, a cosine to 1% of lr0, no flat tail), EMA on, 100 epochs of batch
// 64, 8 workers; the whole network is the capture region. The original's one per-size difference is its
// input size (LibreMobileNetV4.INPUT_SIZES: s 224, m 224, l 256, the imgsz its train() uses when none is
// given), applied here by size_overrides() (imgsz=256 for l when the user gives none), and its eval crop
// (CROP_PCT s 0.875, m/l 0.95), which predict's centre crop does not follow yet.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/mobilenetv4/network.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/tasks/classify.hpp>
#include <libreyolo/train/family.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

namespace libreyolo {

class MobileNetV4Family : public tasks::ClassifyTask<MobileNetV4Family> {
 public:
  static constexpr std::string_view name = "mobilenetv4";
  static constexpr std::array<std::string_view, 3> sizes{"s", "m", "l"};
  struct traits : family_defaults {
    using members = member::list<member::size_overrides>;
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<std::string_view, 12> overrides{
        "imgsz=224",         "epochs=100",      "batch=64",        "optimizer=AdamW", "momentum=0.9",
        "lr0=0.001",         "weight_decay=0.0001", "scheduler=yoloxwarmcos", "warmup_epochs=1",
        "no_aug_epochs=0",   "min_lr_ratio=0.01", "workers=8"};
  };
  using Network = families::mobilenetv4::MobileNetV4;

  explicit MobileNetV4Family(std::string size = "s") : ClassifyTask(std::move(size)) {
    families::require_size<MobileNetV4Family>(size_);
  }

  // The size's part of the recipe, applied after traits::overrides to the keys the user did not set: the
  // original's INPUT_SIZES (s 224, m 224, l 256), the imgsz its train() uses when none is given.
  std::array<std::string, 1> size_overrides() const { return {size_ == "l" ? "imgsz=256" : "imgsz=224"}; }

  Network make_network() const { return Network(families::mobilenetv4::MobileNetV4Options{size_, num_classes()}); }
  static train::LossOutput loss(const torch::Tensor& logits, const Batch& b) { return cross_entropy(logits, b); }
  static std::vector<std::string> loss_names() { return {"ce"}; }

  // Loading the original's .pt checkpoints: the original's (timm's) state-dict names equal ours.
  static std::string original_key(const std::string& ours) { return ours; }
};

}  // namespace libreyolo
