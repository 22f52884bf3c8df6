// YOLOX n, t, s, m, l and x against the Python original's architecture fixtures (shared/fixtures/libreyolo/
// yolox-<size>): the same parameter and buffer names and shapes, the same parameter count, and under the
// deterministic weight fill the same outputs of the PAFPN (child.backbone.*), the head (child.head.*) and
// the whole model in eval mode (output.*: raw box channels, sigmoid objectness and classes), to 1e-4.
#include "support_fixture.hpp"

#include <libreyolo/families/yolox/network.hpp>

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using libreyolo::families::yolox::Yolox;
using libreyolo::families::yolox::YoloxOptions;
namespace fx = lry_test::fixture;

namespace {

// The original's eval output of one level: [reg, sigmoid(obj), sigmoid(cls)].
torch::Tensor eval_output(const torch::Tensor& raw) {
  return torch::cat({raw.narrow(1, 0, 4), raw.narrow(1, 4, raw.size(1) - 4).sigmoid()}, 1);
}

void check(const std::string& model, const std::string& size) {
  LRY_OPEN_FIXTURE(f, model);
  CAPTURE(model);
  Yolox net(YoloxOptions{size, 80});
  const auto diffs = fx::name_differences(f, *net);
  CHECK_MESSAGE(diffs.empty(), model << ": " << diffs.size() << " differences from keys.tsv:\n" << fx::join_lines(diffs));
  CHECK(fx::parameter_count(*net) == f.n_params());
  CHECK(net->named_parameters().size() + net->named_buffers().size() == f.keys.size());
  // State-dict order too (the fill's index k and checkpoints follow it): parameters, then buffers, per module.
  {
    std::vector<std::string> ours;
    for (auto& p : net->named_parameters()) ours.push_back(p.key());
    size_t i = 0;
    for (const auto& k : f.keys)
      if (k.kind == "param") {
        REQUIRE(i < ours.size());
        CHECK(ours[i++] == k.name);
      }
  }
  if (!diffs.empty()) return;

  fx::fill(f, *net);
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  REQUIRE(fx::compare(f, "input", x, 1e-6).ok);
  const auto pan = net->backbone->forward(x);
  const auto raw = net->head->forward(pan);
  std::vector<std::pair<std::string, torch::Tensor>> ours;
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.backbone." + std::to_string(i), pan[i]);
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.head." + std::to_string(i), eval_output(raw[i]));
  for (int i = 0; i < 3; ++i) ours.emplace_back("output." + std::to_string(i), eval_output(raw[i]));
  CHECK(ours.size() + 1 == f.refs.size());
  std::string report;
  const auto result = fx::compare_all(f, ours, &report);
  CHECK_MESSAGE(result.ok, result.message << "\n" << report);
  MESSAGE(model << ": " << result.message);

  const auto direct = net->forward(x);
  REQUIRE(direct.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(torch::equal(direct[i], raw[i]));
}

}  // namespace

TEST_CASE("yolox-t matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("yolox-t", "t"); }
TEST_CASE("yolox-s matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("yolox-s", "s"); }
TEST_CASE("yolox-n (depthwise) matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("yolox-n", "n"); }
TEST_CASE("yolox-m matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("yolox-m", "m"); }
TEST_CASE("yolox-l matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("yolox-l", "l"); }
TEST_CASE("yolox-x matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("yolox-x", "x"); }

TEST_CASE("yolox: a changed weight is caught, other class counts change only the class outputs, bad sizes throw" * lry_test::needs({lry_test::Need::fixtures})) {
  LRY_OPEN_FIXTURE(f, "yolox-t");
  Yolox net(YoloxOptions{"t", 80});
  fx::fill(f, *net);
  net->eval();
  torch::NoGradGuard no_grad;
  net->backbone->C3_p3->conv3->bn->bias.add_(0.01);
  const auto pan = net->backbone->forward(f.input());
  CHECK_FALSE(fx::compare(f, "child.backbone.0", pan[0]).ok);

  Yolox three(YoloxOptions{"t", 3});
  const auto text = fx::join_lines(fx::name_differences(f, *three), 10000);
  CHECK(text.find("shape: head.cls_preds.0.weight ours [3, 96, 1, 1], original [80, 96, 1, 1]") != std::string::npos);
  CHECK(text.find("missing") == std::string::npos);
  CHECK_THROWS_AS(Yolox(YoloxOptions{"e", 80}), libreyolo::ConfigError);
  CHECK_THROWS_AS(Yolox(YoloxOptions{"q", 80}), libreyolo::ConfigError);
  CHECK_THROWS_AS(net->forward(torch::zeros({1, 3, 40, 40})), libreyolo::ConfigError);
}

TEST_CASE("yolox: initialisation sets the class and objectness priors to -log(99)") {
  Yolox net(YoloxOptions{"t", 4});
  for (size_t i = 0; i < 3; ++i) {
    auto c = net->head->cls_preds->ptr<torch::nn::Conv2dImpl>(i)->bias;
    auto o = net->head->obj_preds->ptr<torch::nn::Conv2dImpl>(i)->bias;
    CHECK(c.sizes() == torch::IntArrayRef{4});
    CHECK(torch::allclose(c, torch::full_like(c, -std::log(99.0))));
    CHECK(torch::allclose(o, torch::full_like(o, -std::log(99.0))));
  }
}
