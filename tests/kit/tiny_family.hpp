// tests/kit/tiny_family.hpp (in the library: include/libreyolo/families/tiny/family.hpp)
#pragma once
#include <libreyolo/core/traits.hpp>
#include <libreyolo/families/sizes.hpp>
#include <libreyolo/tasks/classify.hpp>

#include <torch/torch.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace libreyolo {

struct TinyNetImpl : torch::nn::Module {
  explicit TinyNetImpl(int64_t classes) {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).stride(2)));
    bn = register_module("bn", torch::nn::BatchNorm2d(16));
    fc = register_module("fc", torch::nn::Linear(16, classes));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc->forward(torch::relu(bn->forward(conv->forward(x))).mean({2, 3}));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TinyNet);

class TinyFamily : public tasks::ClassifyTask<TinyFamily> {
 public:
  static constexpr std::string_view name = "tiny";
  static constexpr std::array<std::string_view, 1> sizes{"n"};
  struct traits : family_defaults {
    static constexpr CaptureRegion capture_region = CaptureRegion::network;
    static constexpr std::array<std::string_view, 1> overrides{"imgsz=64"};
  };
  using Network = TinyNet;
  explicit TinyFamily(std::string size = "n") : ClassifyTask(std::move(size)) {
    families::require_size<TinyFamily>(size_);  // "model=tinyx: unknown size; available: tinyn"
  }
  Network make_network() const { return Network(num_classes()); }
  static train::LossOutput loss(const torch::Tensor& logits, const Batch& b) { return cross_entropy(logits, b); }
  static std::vector<std::string> loss_names() { return {"loss"}; }
};

}  // namespace libreyolo
