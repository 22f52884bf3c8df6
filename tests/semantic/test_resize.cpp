// nn::bilinear_resize (the semantic families' logits-to-mask resize as two matrix products) against the built-in
// F.interpolate(bilinear, align_corners=false): forward and gradient, upsampling and downsampling, odd ratios.
#include <doctest/doctest.h>
#include <libreyolo/nn/resize.hpp>

#include <torch/torch.h>

#include "support_doctest.hpp"  // doctest's CHECK after c10's

#include <string>
#include <vector>

namespace {

torch::Tensor builtin(const torch::Tensor& x, int64_t H, int64_t W) {
  namespace F = torch::nn::functional;
  return F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{H, W}).mode(torch::kBilinear).align_corners(false));
}

}  // namespace

TEST_CASE("bilinear_resize equals F.interpolate(bilinear, align_corners=false), forward and gradient") {
  struct Case {
    int64_t h, w, H, W;
  };
  // x16 as LingBot's logits at 1/16, odd up-ratios, downsampling (bilinear without antialias), a size-1 axis.
  for (const Case c : std::vector<Case>{{4, 4, 64, 64}, {5, 7, 33, 18}, {16, 16, 7, 9}, {1, 3, 4, 4}, {8, 6, 8, 13}}) {
    CAPTURE(std::to_string(c.h) + "x" + std::to_string(c.w) + " -> " + std::to_string(c.H) + "x" + std::to_string(c.W));
    torch::manual_seed(3);
    auto x1 = torch::randn({2, 3, c.h, c.w}).requires_grad_(true);
    auto x2 = x1.detach().clone().requires_grad_(true);
    const auto g = torch::randn({2, 3, c.H, c.W});
    const auto ref = builtin(x1, c.H, c.W);
    const auto ours = libreyolo::nn::bilinear_resize(x2, c.H, c.W);
    REQUIRE(ours.sizes() == ref.sizes());
    CHECK((ours - ref).abs().max().item<double>() <= 1e-6 * std::max(1.0, ref.abs().max().item<double>()));
    (ref * g).sum().backward();
    (ours * g).sum().backward();
    CHECK((x2.grad() - x1.grad()).abs().max().item<double>() <= 1e-5 * std::max(1.0, x1.grad().abs().max().item<double>()));
  }
  // The same size is the input itself.
  const auto x = torch::randn({1, 2, 5, 5});
  CHECK(libreyolo::nn::bilinear_resize(x, 5, 5).is_same(x));
}
