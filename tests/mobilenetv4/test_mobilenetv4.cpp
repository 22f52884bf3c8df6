// MobileNetV4 conv-small: parameter counts against the original's architecture (and timm's published
// 3.77 M), output shapes, the original's (timm's) state-dict names, the UIB variants, the recipe.
#include <libreyolo/families/mobilenetv4/family.hpp>

#include "support.hpp"
#include "support_fixture.hpp"

#include <doctest/doctest.h>

#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ly = libreyolo;
using ly::families::mobilenetv4::MobileNetV4;
using ly::families::mobilenetv4::MobileNetV4Options;

namespace {
int64_t parameter_count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}
}  // namespace

// The reference counts were computed with torch.nn from the original's ARCH_DEFS["s"] (libreyolo/models/
// mobilenetv4/nn.py, timm's mobilenetv4_conv_small) by /usr/bin/python3 (torch 1.13): nc 3 -> 2496867,
// 10 -> 2505834, 1000 -> 3774024 (timm lists mobilenetv4_conv_small at 3.77 M parameters).
TEST_CASE("mobilenetv4-s has the original's parameter count") {
  for (auto [nc, want] : std::vector<std::pair<int64_t, int64_t>>{{3, 2496867}, {10, 2505834}, {1000, 3774024}}) {
    CAPTURE(nc);
    MobileNetV4 net(MobileNetV4Options{"s", nc});
    CHECK(parameter_count(*net) == want);
  }
}

TEST_CASE("mobilenetv4-s: logits per image, features at stride 32 with 960 channels") {
  MobileNetV4 net(MobileNetV4Options{"s", 10});
  net->eval();
  torch::NoGradGuard ng;
  CHECK(net->forward(torch::randn({2, 3, 224, 224})).sizes() == torch::IntArrayRef({2, 10}));
  CHECK(net->forward(torch::randn({1, 3, 64, 64})).sizes() == torch::IntArrayRef({1, 10}));
  auto f = net->forward_blocks(torch::relu(net->bn1->forward(net->conv_stem->forward(torch::randn({1, 3, 224, 224})))));
  CHECK(f.sizes() == torch::IntArrayRef({1, 960, 7, 7}));
}

TEST_CASE("mobilenetv4-s names its parameters as the original's (timm's) state dict") {
  MobileNetV4 net(MobileNetV4Options{"s", 10});
  std::map<std::string, std::vector<int64_t>> s;
  for (const auto& p : net->named_parameters()) s[p.key()] = p.value().sizes().vec();
  for (const auto& b : net->named_buffers()) s[b.key()] = b.value().sizes().vec();
  const std::map<std::string, std::vector<int64_t>> want{
      {"conv_stem.weight", {32, 3, 3, 3}},
      {"bn1.running_mean", {32}},
      {"blocks.0.0.conv.weight", {32, 32, 3, 3}},  // the original's size probe for "s": a cn block first
      {"blocks.0.0.bn1.weight", {32}},
      {"blocks.1.1.conv.weight", {64, 96, 1, 1}},
      {"blocks.2.0.dw_start.conv.weight", {64, 1, 5, 5}},  // a5 k5 e3: both depthwise convs
      {"blocks.2.0.pw_exp.conv.weight", {192, 64, 1, 1}},
      {"blocks.2.0.dw_mid.conv.weight", {192, 1, 5, 5}},
      {"blocks.2.0.pw_proj.bn.weight", {96}},
      {"blocks.2.1.dw_mid.conv.weight", {192, 1, 3, 3}},   // a0 k3: middle depthwise only
      {"blocks.2.5.dw_start.conv.weight", {96, 1, 3, 3}},  // a3 k0: start depthwise only
      {"blocks.3.0.pw_exp.conv.weight", {576, 96, 1, 1}},
      {"blocks.3.5.pw_proj.conv.weight", {128, 512, 1, 1}},
      {"blocks.4.0.conv.weight", {960, 128, 1, 1}},
      {"conv_head.weight", {1280, 960, 1, 1}},
      {"norm_head.running_var", {1280}},
      {"classifier.weight", {10, 1280}},
      {"classifier.bias", {10}},
  };
  for (const auto& [k, v] : want) {
    CAPTURE(k);
    REQUIRE(s.count(k));
    CHECK(s.at(k) == v);
  }
  CHECK(s.count("blocks.2.1.dw_start.conv.weight") == 0);
  CHECK(s.count("blocks.2.5.dw_mid.conv.weight") == 0);
  CHECK(s.count("blocks.3.6.pw_exp.conv.weight") == 0);  // stage 3 has 6 blocks (0 .. 5)
  // The stride of a UIB sits on the middle depthwise when there is one, else on the first.
  auto* stage = net->blocks[2]->as<torch::nn::Sequential>();
  REQUIRE(stage);
  auto* b20 = (*stage)[0]->as<ly::families::mobilenetv4::UniversalInvertedResidual>();
  REQUIRE(b20);
  CHECK(b20->dw_start->conv->options.stride()->at(0) == 1);
  CHECK(b20->dw_mid->conv->options.stride()->at(0) == 2);
}

TEST_CASE("mobilenetv4 family: the original's classification recipe at 224 px, sizes") {
  using T = ly::family_traits<ly::MobileNetV4Family>;
  static_assert(T::amp_default);
  static_assert(T::capture_region == ly::CaptureRegion::network);
  static_assert(T::task == ly::Task::classify);
  ly::TrainConfig cfg;
  ly::apply_overrides(cfg, T::overrides);
  CHECK(cfg.imgsz == 224);
  CHECK(cfg.optimizer == "AdamW");
  CHECK(cfg.lr0 == doctest::Approx(1e-3));
  CHECK(cfg.weight_decay == doctest::Approx(1e-4));
  CHECK(cfg.scheduler == "yoloxwarmcos");
  CHECK(cfg.warmup_epochs == 1);
  CHECK(cfg.min_lr_ratio == doctest::Approx(0.01));
  CHECK(cfg.ema == true);
  CHECK(ly::MobileNetV4Family::sizes == std::array<std::string_view, 3>{"s", "m", "l"});
  for (auto size : ly::MobileNetV4Family::sizes) CHECK_NOTHROW(ly::MobileNetV4Family(std::string(size)));
  CHECK_THROWS_WITH_AS(ly::MobileNetV4Family("x"),
                       "model=mobilenetv4x: unknown size; available: mobilenetv4s, mobilenetv4m, mobilenetv4l",
                       ly::ConfigError);
  CHECK_THROWS_AS(MobileNetV4(MobileNetV4Options{"h", 10}), ly::ConfigError);  // no hybrid size in the original
  // Each size's input size is the original's INPUT_SIZES (s 224, m 224, l 256) unless the user set one.
  for (auto [size, imgsz] : std::vector<std::pair<std::string, int64_t>>{{"s", 224}, {"m", 224}, {"l", 256}}) {
    CAPTURE(size);
    ly::MobileNetV4Family fam(size);
    ly::TrainConfig c;
    ly::apply_overrides(c, T::overrides);
    ly::apply_overrides(c, fam.size_overrides());
    CHECK(c.imgsz == imgsz);
    auto user = ly::parse_args({"imgsz=160"});
    ly::apply_overrides(user, T::overrides);
    ly::apply_overrides(user, fam.size_overrides());
    CHECK(user.imgsz == 160);
  }
}

// The original's every size against reference data from the original's own network code (there is no shared
// fixture for this family): tests/mobilenetv4/reference/<size>/ in shared/fixtures/libreyolo/README.md's
// format, written by tests/mobilenetv4/make_reference.py (its docstring says how) from the original's
// libreyolo/models/mobilenetv4/nn.py (Libre-YOLO/libreyolo 254804d) under PyTorch 1.13.1: every state_dict
// name and shape, the parameter count at 1000 and 10 classes, and under the README's deterministic fill and
// input (160 px) each stage's output and the logits (tensors over 16384 elements stored as flat[::stride]).
TEST_CASE("mobilenetv4 fixture: s, m, l have the original's names, shapes, parameter counts and outputs") {
  namespace fx = lry_test::fixture;
  for (std::string size : {"s", "m", "l"}) {
    CAPTURE(size);
    auto opened = fx::Fixture::open(std::string(LIBREYOLO_SOURCE_DIR "/tests/mobilenetv4/reference/") + size);
    REQUIRE(opened.has_value());
    const fx::Fixture& f = *opened;
    MobileNetV4 net(MobileNetV4Options{size, 1000});
    const auto diffs = fx::name_differences(f, *net);
    CHECK_MESSAGE(diffs.empty(), fx::join_lines(diffs));
    // Same entries in the same order: the deterministic fill indexes them by position.
    std::vector<std::string> ours;
    for (const auto& p : net->named_parameters()) ours.push_back(p.key());
    CHECK(ours.size() == static_cast<size_t>(std::count_if(f.keys.begin(), f.keys.end(),
                                                            [](const fx::Key& k) { return k.kind == "param"; })));
    CHECK(fx::parameter_count(*net) == f.n_params());
    CHECK(fx::parameter_count(*MobileNetV4(MobileNetV4Options{size, 10})) == f.config.at("n_params_10_classes").get<int64_t>());
    if (!diffs.empty()) continue;
    CHECK(fx::fill(f, *net) > 0);
    net->eval();
    torch::NoGradGuard ng;
    const auto x = f.input();
    std::vector<std::pair<std::string, torch::Tensor>> outs;
    auto y = torch::relu(net->bn1->forward(net->conv_stem->forward(x)));
    for (size_t i = 0; i < net->blocks->size(); ++i) {
      y = net->blocks[i]->as<torch::nn::Sequential>()->forward(y);
      outs.emplace_back("child.blocks." + std::to_string(i), y);
    }
    outs.emplace_back("output", net->forward(x));
    CHECK(outs.size() == f.ref_order.size());
    std::string report;
    const auto c = fx::compare_all(f, outs, &report);
    CHECK_MESSAGE(c.ok, c.message << "\n" << report);
  }
}
