#pragma once
// The LingBot-Vision family (semantic segmentation, tasks/semantic.hpp): the original's ViT/16 + 1x1
// dense head (network.hpp) and its recipe (LingBotVisionConfig / LingBotVisionTrainer, the report's
// linear probe): the backbone frozen, only the head trains, AdamW lr 1e-3, weight decay 1e-4 (not on
// 1-D parameters), flat-cosine (flat, then a cosine over the last 15 epochs) after a 1-epoch warm-up from
// 1e-6, EMA 0.999, 512 px, 20 epochs, batch 16, validation every epoch, flips 0.5, no HSV, AMP on, and
// the original's stretch resize (the whole canvas is content; no scale jitter). imgsz must be a multiple
// of 16 (the patch grid). Capture: the whole network (no randomness in it).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/lingbot/network.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/tasks/semantic.hpp>
#include <libreyolo/train/family.hpp>
#include <libreyolo/train/param_groups.hpp>

#include <torch/torch.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo {

class LingBotFamily : public tasks::SemanticTask<LingBotFamily> {
 public:
  static constexpr std::string_view name = "lingbot";
  static constexpr std::array<std::string_view, 4> sizes{"s", "b", "l", "g"};
  struct traits : family_defaults {
    using members = member::list<member::param_groups>;
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<std::string_view, 17> overrides{
        "optimizer=AdamW",  "lr0=1e-3",           "weight_decay=1e-4", "scheduler=flat_cosine", "warmup_epochs=1",
        "warmup_lr_start=1e-6", "min_lr_ratio=0", "no_aug_epochs=15",  "mosaic=0",              "mixup=0",
        "fliplr=0.5",       "hsv_prob=0",         "ema_decay=0.999",   "imgsz=512",             "epochs=20",
        "batch=16",         "eval_interval=1"};
  };
  // The original's semantic_resize_mode = "stretch".
  static constexpr bool semantic_stretch = true;
  static constexpr int64_t imgsz_divisor = 16;

  using Network = lingbot::LingBot;

  explicit LingBotFamily(std::string size = "s") : SemanticTask(std::move(size)) {
    families::require_size<LingBotFamily>(size_);
  }

  Network make_network() const { return Network(size_, num_classes(), /*freeze_backbone=*/true); }
  static train::LossOutput loss(const torch::Tensor& logits, const Batch& b) { return cross_entropy(logits, b); }
  static std::vector<std::string> loss_names() { return {"sem"}; }

  // The original's AdamW groups over the trainable (head) parameters: decay for weights, none for 1-D ones.
  static std::vector<train::ParamGroup> param_groups(torch::nn::Module& net, double weight_decay) {
    std::vector<train::ParamGroup> g{{"decay", {}, weight_decay, 0, 1.0}, {"no_decay", {}, 0.0, 0, 1.0}};
    for (const auto& kv : net.named_parameters()) {
      if (!kv.value().requires_grad()) continue;
      g[kv.value().dim() <= 1 ? 1 : 0].params.push_back(kv.value());
    }
    return g;
  }

  static std::string original_key(const std::string& ours) { return ours; }
};

}  // namespace libreyolo
