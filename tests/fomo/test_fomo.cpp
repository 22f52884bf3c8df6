// FOMO s/m/l: parameter counts against the original's architecture, output shapes at the stride-8 grid,
// the original's state-dict names, SAME padding, the recipe in the traits (per size: the input size),
// sizes; and every size against reference data made from the original's network (tests/fomo/reference/,
// written by tests/fomo/make_reference.py: the original's LibreFOMOModel of libreyolo/models/fomo/nn.py,
// newer than the fixtures' snapshot, built at 80 classes under PyTorch 1.13.1, the shared fixtures' format
// and deterministic fill): names, shapes, the exact parameter count and, under the fill, the backbone's and
// the head's outputs per element at the size's native input size.
#include <libreyolo/families/fomo/family.hpp>

#include "support.hpp"
#include "support_fixture.hpp"

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

// The original's counts at 1, 3 and 80 classes for every size (tests/fomo/reference/fomo-<size>/config.json,
// n_params_by_classes), and our network's.
TEST_CASE("fomo s, m and l have the original's parameter counts at 1, 3 and 80 classes") {
  const std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> want{
      {"s", {{1, 16034}, {3, 16228}, {80, 23697}}},
      {"m", {{1, 21922}, {3, 22116}, {80, 29585}}},
      {"l", {{1, 62402}, {3, 62788}, {80, 77649}}},
  };
  for (const auto& [size, rows] : want) {
    auto f = lry_test::fixture::Fixture::open(LIBREYOLO_SOURCE_DIR "/tests/fomo/reference/fomo-" + size);
    REQUIRE(f.has_value());
    for (auto [nc, n] : rows) {
      CAPTURE(size);
      CAPTURE(nc);
      CHECK(f->config.at("n_params_by_classes").at(std::to_string(nc)).get<int64_t>() == n);
      Fomo net(FomoOptions{size, nc});
      CHECK(parameter_count(*net) == n);
    }
  }
}

namespace {
namespace fx = lry_test::fixture;

// One size against its reference folder: names and shapes, the parameter count, then under the
// deterministic fill the backbone's output (child.backbone), the head's (child.head) and the model's
// (output), per element to 1e-4 of the mean |x|, at the original's native input size.
void check_reference(const std::string& size, int64_t imgsz, int64_t n_params) {
  const std::string dir = LIBREYOLO_SOURCE_DIR "/tests/fomo/reference/fomo-" + size;
  CAPTURE(dir);
  auto opt = fx::Fixture::open(dir);
  REQUIRE_MESSAGE(opt.has_value(), "the reference folder " << dir << " is missing");
  const fx::Fixture& f = *opt;
  Fomo net(FomoOptions{size, 80});
  const auto diffs = fx::name_differences(f, *net);
  CHECK_MESSAGE(diffs.empty(), diffs.size() << " differences from keys.tsv:\n" << fx::join_lines(diffs));
  CHECK(f.keys.size() == 116);
  CHECK(net->named_parameters().size() + net->named_buffers().size() == f.keys.size());
  CHECK(f.n_params() == n_params);
  CHECK(fx::parameter_count(*net) == f.n_params());
  CHECK(f.imgsz == imgsz);
  CHECK(ly::families::fomo::fomo_imgsz(size) == imgsz);
  if (!diffs.empty()) return;

  CHECK(fx::fill(f, *net) == 97);  // every parameter and running statistic (19 num_batches_tracked left)
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  CHECK(fx::compare(f, "input", x).ok);
  const auto feats = net->backbone->forward(x);
  const auto logits = net->head->forward(feats);
  std::vector<std::pair<std::string, torch::Tensor>> ours{
      {"child.backbone", feats}, {"child.head", logits}, {"output", logits}};
  CHECK(ours.size() + 1 == f.refs.size());
  std::string report;
  const auto result = fx::compare_all(f, ours, &report);
  CHECK_MESSAGE(result.ok, result.message << "\n" << report);
  MESSAGE("fomo-" << size << ": " << result.message);
  CHECK(torch::equal(net->forward(x), logits));
}
}  // namespace

TEST_CASE("fomo-s matches the original's network parameter for parameter and output for output (reference)") {
  check_reference("s", 96, 23697);
}
TEST_CASE("fomo-m matches the original's network parameter for parameter and output for output (reference)") {
  check_reference("m", 192, 29585);
}
TEST_CASE("fomo-l matches the original's network parameter for parameter and output for output (reference)") {
  check_reference("l", 224, 77649);
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
  CHECK(ly::FomoFamily::sizes == std::array<std::string_view, 3>{"s", "m", "l"});
  CHECK_THROWS_WITH_AS(ly::FomoFamily("x"), "model=fomox: unknown size; available: fomos, fomom, fomol",
                       ly::ConfigError);
  CHECK(ly::FomoFamily::original_key("head.weight") == "head.weight");
}

// The original trains each size at its CONFIGS imgsz (LibreFOMO.train() sets imgsz from the size): the
// family's size_overrides, applied after the traits' overrides as the trainer applies them, give s 96,
// m 192, l 224, and leave an imgsz the user set alone.
TEST_CASE("fomo family: each size's input size is the original's (s 96, m 192, l 224), unless the user set one") {
  using T = ly::family_traits<ly::FomoFamily>;
  for (auto [size, imgsz] : std::vector<std::pair<std::string, int64_t>>{{"s", 96}, {"m", 192}, {"l", 224}}) {
    CAPTURE(size);
    ly::FomoFamily fam(size);
    ly::TrainConfig cfg;
    ly::apply_overrides(cfg, T::overrides);
    ly::apply_overrides(cfg, fam.size_overrides());
    CHECK(cfg.imgsz == imgsz);
    CHECK(cfg.epochs == 40);
    CHECK(cfg.lr0 == doctest::Approx(3e-4));
    auto user = ly::parse_args({"imgsz=64"});
    ly::apply_overrides(user, T::overrides);
    ly::apply_overrides(user, fam.size_overrides());
    CHECK(user.imgsz == 64);
    // the network built for the size gives its stride-8 grid at that size
    Fomo net(FomoOptions{size, 1});
    net->eval();
    torch::NoGradGuard ng;
    CHECK(net->forward(torch::zeros({1, 3, imgsz, imgsz})).sizes() == torch::IntArrayRef({1, 2, imgsz / 8, imgsz / 8}));
  }
}
