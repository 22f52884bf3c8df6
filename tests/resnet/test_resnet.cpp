// ResNet-18/34/50/101 against reference data from the original's own network code (there is no shared fixture
// for this family): tests/resnet/reference/<size>/ in shared/fixtures/libreyolo/README.md's format, written by
// tests/mobilenetv4/make_reference.py (its docstring says how) from the original's libreyolo/models/resnet/
// nn.py (Libre-YOLO/libreyolo 29d59f1) under PyTorch 1.13.1: every state_dict name and shape, the parameter
// count at 1000 and 10 classes, and under the README's deterministic fill and input (160 px) each stage's
// output (layer1 .. layer4) and the logits (tensors over 16384 elements stored as flat[::stride]).
#include <libreyolo/families/resnet/family.hpp>

#include <doctest/doctest.h>

#include "support.hpp"
#include "support_fixture.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace ly = libreyolo;
namespace fx = lry_test::fixture;
using ly::resnet::ResNet;
using ly::resnet::ResNetOptions;

TEST_CASE("resnet fixture: 18, 34, 50, 101 have the original's names, shapes, parameter counts and outputs") {
  for (int depth : {18, 34, 50, 101}) {
    CAPTURE(depth);
    auto opened = fx::Fixture::open(std::string(LIBREYOLO_SOURCE_DIR "/tests/resnet/reference/") + std::to_string(depth));
    REQUIRE(opened.has_value());
    const fx::Fixture& f = *opened;
    ResNet net(ResNetOptions{depth, 1000});
    const auto diffs = fx::name_differences(f, *net);
    CHECK_MESSAGE(diffs.empty(), fx::join_lines(diffs));
    CHECK(fx::parameter_count(*net) == f.n_params());
    CHECK(fx::parameter_count(*ResNet(ResNetOptions{depth, 10})) == f.config.at("n_params_10_classes").get<int64_t>());
    if (!diffs.empty()) continue;
    CHECK(fx::fill(f, *net) > 0);
    net->eval();
    torch::NoGradGuard ng;
    const auto x = f.input();
    std::vector<std::pair<std::string, torch::Tensor>> outs;
    auto y = torch::max_pool2d(torch::relu(net->bn1(net->conv1(x))), 3, 2, 1);
    for (size_t i = 0; i < 4; ++i) {
      y = net->layers[i]->forward(y);
      outs.emplace_back("child.layer" + std::to_string(i + 1), y);
    }
    CHECK(torch::equal(y, net->forward_features(x)));
    outs.emplace_back("output", net->forward(x));
    CHECK(outs.size() == f.ref_order.size());
    std::string report;
    const auto c = fx::compare_all(f, outs, &report);
    CHECK_MESSAGE(c.ok, c.message << "\n" << report);
  }
}

TEST_CASE("resnet-50/101: bottlenecks with the stride on the 3x3 (v1.5), 2048 features, the original's keys") {
  ResNet net(ResNetOptions{50, 10});
  CHECK(net->num_features() == 2048);
  auto* b = net->layers[1][0]->as<ly::resnet::Bottleneck>();
  REQUIRE(b);
  CHECK(b->conv1->options.stride()->at(0) == 1);
  CHECK(b->conv2->options.stride()->at(0) == 2);
  REQUIRE(b->downsample);
  const auto state = fx::named_state(*net);
  CHECK(state.at("layer1.0.downsample.0.weight").sizes() == torch::IntArrayRef({256, 64, 1, 1}));  // width 64 -> 256
  CHECK(state.at("layer2.0.downsample.1.running_var").sizes() == torch::IntArrayRef({512}));
  CHECK(state.count("layer1.1.downsample.0.weight") == 0);
  CHECK(state.at("fc.weight").sizes() == torch::IntArrayRef({10, 2048}));
  CHECK(state.count("layer3.22.conv3.weight") == 0);
  CHECK(fx::named_state(*ResNet(ResNetOptions{101, 10})).count("layer3.22.conv3.weight") == 1);  // 23 blocks
  torch::NoGradGuard ng;
  net->eval();
  CHECK(net->forward(torch::randn({2, 3, 64, 64})).sizes() == torch::IntArrayRef({2, 10}));
  CHECK(net->forward_features(torch::randn({1, 3, 64, 64})).sizes() == torch::IntArrayRef({1, 2048, 2, 2}));
}

TEST_CASE("resnet family: the original's sizes 18, 34, 50, 101 and no other") {
  CHECK(ly::ResNetFamily::sizes == std::array<std::string_view, 4>{"18", "34", "50", "101"});
  for (auto size : ly::ResNetFamily::sizes) CHECK_NOTHROW(ly::ResNetFamily(std::string(size)));
  CHECK_THROWS_WITH_AS(ly::ResNetFamily("152"),
                       "model=resnet152: unknown size; available: resnet18, resnet34, resnet50, resnet101",
                       ly::ConfigError);
  CHECK_THROWS_AS(ResNet(ResNetOptions{152, 10}), ly::ConfigError);
}
