#pragma once
// A small test family whose capture region is its encoder boundary (CaptureRegion::backbone_encoder), as
// an encoder-decoder DETR's is: a conv + BatchNorm encoder (graphed) and a decoder that reads a token
// count that changes from batch to batch (eager: no fixed-shape graph could hold it). Classification
// task, so it trains on the task's synthetic set.
#include <libreyolo/capture/region.hpp>
#include <libreyolo/core/traits.hpp>
#include <libreyolo/tasks/classify.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

namespace lry_test {

struct TokenNetImpl : torch::nn::Module {
  explicit TokenNetImpl(int64_t classes = 3, int64_t width = 16) {
    enc = register_module("enc", torch::nn::Sequential(
                                     torch::nn::Conv2d(torch::nn::Conv2dOptions(3, width, 3).stride(2).padding(1).bias(false)),
                                     torch::nn::BatchNorm2d(width), torch::nn::ReLU(),
                                     torch::nn::Conv2d(torch::nn::Conv2dOptions(width, width, 3).stride(2).padding(1).bias(false)),
                                     torch::nn::BatchNorm2d(width), torch::nn::ReLU()));
    proj = register_module("proj", torch::nn::Linear(width, width));
    head = register_module("head", torch::nn::Linear(width, classes));
  }
  // The encoder boundary (capture/region.hpp).
  torch::nn::Module& encoder() { return *enc; }
  torch::Tensor encode(const torch::Tensor& x) { return enc->forward(x); }
  // Tokens = feature-map cells; this batch's decoder reads the first 1, 4, 7, 10 or 13 of them.
  torch::Tensor decode(const torch::Tensor& f) {
    const int64_t cells = f.size(2) * f.size(3);
    // The count comes from the features themselves (the cell where channel 0 of sample 0 peaks), not
    // from a call counter: a step re-run after a failed replay must see the same count as eager.
    ++decode_calls;
    const int64_t pick = f[0][0].flatten().argmax().item<int64_t>();
    last_tokens = std::min<int64_t>(cells, 1 + (pick % 5) * 3);
    auto t = f.flatten(2).transpose(1, 2).narrow(1, 0, last_tokens);  // [B, k, C], k varies per batch
    return head->forward(torch::relu(proj->forward(t)).mean(1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return decode(encode(x)); }

  torch::nn::Sequential enc{nullptr};
  torch::nn::Linear proj{nullptr}, head{nullptr};
  int64_t decode_calls = 0;
  int64_t last_tokens = 0;
};
TORCH_MODULE(TokenNet);

class TokenFamily : public libreyolo::tasks::ClassifyTask<TokenFamily> {
 public:
  static constexpr std::string_view name = "tokennet";
  static constexpr std::array<std::string_view, 1> sizes{"n"};
  struct traits : libreyolo::family_defaults {
    static constexpr libreyolo::CaptureRegion capture_region = libreyolo::CaptureRegion::backbone_encoder;
  };
  using Network = TokenNet;
  explicit TokenFamily(std::string size = "n") : ClassifyTask(std::move(size)) {}
  Network make_network() const { return Network(num_classes(), 16); }
  static libreyolo::train::LossOutput loss(const torch::Tensor& logits, const Batch& b) { return cross_entropy(logits, b); }
  static std::vector<std::string> loss_names() { return {"loss"}; }
};

}  // namespace lry_test
