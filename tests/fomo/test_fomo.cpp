// FOMO-s: parameter counts against the original's architecture, output shapes at the stride-8 grid, the
// original's state-dict names, SAME padding, the recipe in the traits, sizes.
#include <libreyolo/families/fomo/family.hpp>

#include "support.hpp"

#include <doctest/doctest.h>

#include <map>
#include <string>

namespace ly = libreyolo;
using ly::families::fomo::Fomo;
using ly::families::fomo::FomoOptions;

namespace {
int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}
std::map<std::string, std::vector<int64_t>> shapes(torch::nn::Module& m) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().sizes().vec();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value().sizes().vec();
  return out;
}
}  // namespace

// The reference counts were computed with torch.nn from the original's architecture table
// (libreyolo/models/fomo/nn.py: alpha 0.35, _make_divisible channels 16/8/8/16, expand 6, head from 96
// channels to 1 + nc) by /usr/bin/python3 (torch 1.13): nc 1 -> 16034, 3 -> 16228, 80 -> 23697.
TEST_CASE("fomo-s has the original's parameter count") {
  for (auto [nc, want] : std::vector<std::pair<int64_t, int64_t>>{{1, 16034}, {3, 16228}, {80, 23697}}) {
    CAPTURE(nc);
    Fomo net(FomoOptions{"s", nc});
    CHECK(parameter_count(*net) == want);
  }
}

TEST_CASE("fomo-s outputs 1 + classes logits on the stride-8 grid, any input size") {
  Fomo net(FomoOptions{"s", 3});
  net->eval();
  torch::NoGradGuard ng;
  CHECK(net->forward(torch::randn({2, 3, 96, 96})).sizes() == torch::IntArrayRef({2, 4, 12, 12}));
  CHECK(net->forward(torch::randn({1, 3, 64, 64})).sizes() == torch::IntArrayRef({1, 4, 8, 8}));
  CHECK(net->forward(torch::randn({1, 3, 100, 60})).sizes() == torch::IntArrayRef({1, 4, 13, 8}));  // SAME: ceil
}

TEST_CASE("fomo-s names its parameters as the original's state dict") {
  Fomo net(FomoOptions{"s", 1});
  const auto s = shapes(*net);
  const std::map<std::string, std::vector<int64_t>> want{
      {"backbone.conv1.0.conv.weight", {16, 3, 3, 3}},
      {"backbone.conv1.1.weight", {16}},
      {"backbone.conv1.1.running_var", {16}},
      {"backbone.expanded_conv.conv.0.0.conv.weight", {16, 1, 3, 3}},  // depthwise (expand 1: no 1x1 first)
      {"backbone.expanded_conv.conv.1.0.weight", {8, 16, 1, 1}},       // projection
      {"backbone.expanded_conv.conv.1.1.bias", {8}},
      {"backbone.block_1.conv.0.0.conv.weight", {48, 8, 1, 1}},
      {"backbone.block_1.conv.1.0.conv.weight", {48, 1, 3, 3}},
      {"backbone.block_1.conv.2.0.weight", {8, 48, 1, 1}},
      {"backbone.block_2.conv.0.0.conv.weight", {48, 8, 1, 1}},  // the original's size probe: 48 -> "s"
      {"backbone.block_3.conv.2.0.weight", {16, 48, 1, 1}},
      {"backbone.block_5.conv.2.1.running_mean", {16}},
      {"backbone.block_6_expand.0.conv.weight", {96, 16, 1, 1}},
      {"backbone.block_6_expand.1.num_batches_tracked", {}},
      {"head.weight", {2, 96, 1, 1}},
      {"head.bias", {2}},
  };
  for (const auto& [k, v] : want) {
    CAPTURE(k);
    REQUIRE(s.count(k));
    CHECK(s.at(k) == v);
  }
  int64_t bn = 0;
  for (auto& m : net->modules(false))
    if (auto* b = m->as<ly::nn::BatchNorm2d>()) {
      CHECK(b->options.eps() == 1e-3);
      ++bn;
    }
  CHECK(bn == 19);  // conv1, expanded_conv (2), block_1 .. block_5 (3 each), block_6_expand
}

TEST_CASE("fomo SAME padding: stride 2 on an even side pads only after, on an odd side both") {
  using ly::families::fomo::same_pad;
  CHECK(same_pad(96, 3, 2) == std::pair<int64_t, int64_t>{0, 1});
  CHECK(same_pad(97, 3, 2) == std::pair<int64_t, int64_t>{1, 1});
  CHECK(same_pad(12, 3, 1) == std::pair<int64_t, int64_t>{1, 1});
  CHECK(same_pad(12, 1, 1) == std::pair<int64_t, int64_t>{0, 0});
  ly::families::fomo::SamePadConv c(2, 3, 3, 2, 1);
  torch::NoGradGuard ng;
  auto x = torch::randn({1, 2, 8, 8});
  auto want = torch::conv2d(torch::constant_pad_nd(x, {0, 1, 0, 1}, 0), c->conv->weight, {}, 2);
  CHECK(torch::allclose(c->forward(x), want));
}

TEST_CASE("fomo family: float32, no EMA, the original's recipe, capture of the whole network, sizes") {
  using T = ly::family_traits<ly::FomoFamily>;
  static_assert(!T::amp_default);
  static_assert(T::capture_region == ly::CaptureRegion::network);
  static_assert(T::task == ly::Task::point);
  static_assert(ly::FomoFamily::output_stride == 8);
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, T::overrides);
  CHECK(cfg.ema == false);
  CHECK(cfg.imgsz == 96);
  CHECK(cfg.optimizer == "AdamW");
  CHECK(cfg.weight_decay == 0.0);
  CHECK(cfg.lr0 == doctest::Approx(3e-4));
  CHECK(cfg.scheduler == "cos");
  CHECK(cfg.epochs == 40);
  CHECK(cfg.batch == 32);
  CHECK(cfg.mosaic == 0.0);
  CHECK(cfg.fliplr == 0.0);
  CHECK_THROWS_WITH_AS(ly::FomoFamily("m"), "model=fomom: not implemented yet; available: fomos", ly::ConfigError);
  CHECK_THROWS_WITH_AS(ly::FomoFamily("x"), "model=fomox: unknown size; available: fomos", ly::ConfigError);
  CHECK(ly::FomoFamily::original_key("head.weight") == "head.weight");
}
