#pragma once
// The ResNet classification family: ResNet-18/34 (basic blocks) and ResNet-50/101 (bottlenecks), the sizes of
// the original's ARCH_DEFS (libreyolo/models/resnet/nn.py), with cross-entropy, on the classification task
// (tasks/classify.hpp: class-named image folders, top-1/top-5, predict). The original's ResNetConfig and
// INPUT_SIZES are the same for every size (224 px).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/resnet/network.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/tasks/classify.hpp>
#include <libreyolo/train/family.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

namespace libreyolo {

class ResNetFamily : public tasks::ClassifyTask<ResNetFamily> {
 public:
  static constexpr std::string_view name = "resnet";
  static constexpr std::array<std::string_view, 4> sizes{"18", "34", "50", "101"};
  struct traits : family_defaults {
    static constexpr bool amp_default = true;
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    // Classification at 224 px; no mosaic, so no no-augmentation tail for the schedule.
    static constexpr std::array<std::string_view, 2> overrides{"imgsz=224", "no_aug_epochs=0"};
  };
  using Network = resnet::ResNet;

  explicit ResNetFamily(std::string size = "18") : ClassifyTask(std::move(size)) {
    families::require_size<ResNetFamily>(size_);
  }

  Network make_network() const { return Network(resnet::ResNetOptions{std::stoi(size_), num_classes()}); }
  static train::LossOutput loss(const torch::Tensor& logits, const Batch& b) { return cross_entropy(logits, b); }
  static std::vector<std::string> loss_names() { return {"loss"}; }
};

}  // namespace libreyolo
