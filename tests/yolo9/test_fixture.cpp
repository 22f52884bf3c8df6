// YOLOv9 against the Python original's architecture fixtures (shared/fixtures/libreyolo/yolo9-t,
// yolo9-s, yolo9-m, yolo9-c, yolo9-t-classify): the same parameter and buffer names and shapes, the same parameter
// count, and under the deterministic weight fill the same outputs of every direct child module
// (backbone, neck, head) and of the whole model in eval mode, to 1e-4 relative.
#include "support_fixture.hpp"

#include <libreyolo/families/yolo9/classify_network.hpp>
#include <libreyolo/families/yolo9/network.hpp>
#include <libreyolo/families/yolo9/postprocess.hpp>

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using libreyolo::families::yolo9::Yolo9;
using libreyolo::families::yolo9::Yolo9Classify;
using libreyolo::families::yolo9::Yolo9ClassifyOptions;
using libreyolo::families::yolo9::Yolo9Options;
namespace fx = lry_test::fixture;

namespace {

int64_t fixture_param_numel(const fx::Fixture& f) {
  int64_t n = 0;
  for (const auto& k : f.keys)
    if (k.kind == "param") n += k.numel;
  return n;
}

// Names/shapes, counts, then every child output and the eval outputs (the original's dict
// {predictions, raw_outputs, x8/x16/x32.features}, flattened as in ref.json).
void check_detect(const std::string& model, const std::string& size) {
  LRY_OPEN_FIXTURE(f, model);
  CAPTURE(model);
  Yolo9 net(Yolo9Options{size, 80, 16});

  const auto diffs = fx::name_differences(f, *net);
  CHECK_MESSAGE(diffs.empty(), model << ": " << diffs.size() << " differences from keys.tsv:\n" << fx::join_lines(diffs));
  CHECK(fx::parameter_count(*net) == f.n_params());
  CHECK(fixture_param_numel(f) == f.n_params());
  CHECK(net->named_parameters().size() + net->named_buffers().size() == f.keys.size());
  if (!diffs.empty()) return;

  int64_t filled = 0;  // every parameter and running statistic; num_batches_tracked stays
  for (const auto& k : f.keys) filled += k.kind != "buffer";
  CHECK(fx::fill(f, *net) == filled);
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  REQUIRE(fx::compare(f, "input", x, 1e-6).ok);

  const auto bb = net->backbone->forward(x);
  const auto nk = net->neck->forward(bb);
  const auto raw = net->head->forward({nk[0], nk[1], nk[2]});
  // The original's DDetect eval output [B, 4 + nc, A]; decode_predictions gives [B, A, 4 + nc].
  const auto predictions = libreyolo::families::yolo9::decode_predictions(raw, net->strides(), 16).permute({0, 2, 1});

  std::vector<std::pair<std::string, torch::Tensor>> ours;
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.backbone." + std::to_string(i), bb[i]);
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.neck." + std::to_string(i), nk[i]);
  ours.emplace_back("child.head.0", predictions);
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.head.1." + std::to_string(i), raw[i]);
  ours.emplace_back("output.predictions", predictions);
  for (int i = 0; i < 3; ++i) ours.emplace_back("output.raw_outputs." + std::to_string(i), raw[i]);
  const char* levels[3] = {"x8", "x16", "x32"};
  for (int i = 0; i < 3; ++i) ours.emplace_back(std::string("output.") + levels[i] + ".features", nk[i]);
  // Every reference of ref.json is compared.
  CHECK(ours.size() + 1 == f.refs.size());

  std::string report;
  const auto result = fx::compare_all(f, ours, &report);
  CHECK_MESSAGE(result.ok, result.message << "\n" << report);
  MESSAGE(model << ": " << result.message);

  // The network's own forward is backbone -> neck -> head.
  const auto direct = net->forward(x);
  REQUIRE(direct.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(torch::equal(direct[i], raw[i]));
}

}  // namespace

TEST_CASE("yolo9-t matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check_detect("yolo9-t", "t"); }

TEST_CASE("yolo9-s matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check_detect("yolo9-s", "s"); }

// m: a GELAN after the stem, one RepNCSP bottleneck per GELAN, AConv downsampling (neck: 184 / 240).
TEST_CASE("yolo9-m matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check_detect("yolo9-m", "m"); }

// c: as m, with ADown downsampling and GELANs whose part width differs from their output width.
TEST_CASE("yolo9-c matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check_detect("yolo9-c", "c"); }

TEST_CASE("yolo9-t-classify matches the original's classification network" * lry_test::needs({lry_test::Need::fixtures})) {
  LRY_OPEN_FIXTURE(f, "yolo9-t-classify");
  Yolo9Classify net(Yolo9ClassifyOptions{"t", 80});
  const auto diffs = fx::name_differences(f, *net);
  CHECK_MESSAGE(diffs.empty(), diffs.size() << " differences from keys.tsv:\n" << fx::join_lines(diffs));
  CHECK(fx::parameter_count(*net) == f.n_params());
  CHECK(f.n_params() == 977600);
  if (!diffs.empty()) return;

  fx::fill(f, *net);
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  const auto bb = net->backbone->forward(x);
  const auto logits = net->forward(x);
  std::vector<std::pair<std::string, torch::Tensor>> ours{{"child.backbone.0", bb[0]},
                                                          {"child.backbone.1", bb[1]},
                                                          {"child.backbone.2", bb[2]},
                                                          {"child.head", net->head->forward(bb[2])},
                                                          {"output", logits}};
  CHECK(ours.size() + 1 == f.refs.size());
  std::string report;
  const auto result = fx::compare_all(f, ours, &report);
  CHECK_MESSAGE(result.ok, result.message << "\n" << report);
  MESSAGE("yolo9-t-classify: " << result.message);
}

TEST_CASE("the fixture harness reports a changed weight, a wrong shape and differing names" * lry_test::needs({lry_test::Need::fixtures})) {
  LRY_OPEN_FIXTURE(f, "yolo9-t");
  Yolo9 net(Yolo9Options{"t", 80, 16});
  fx::fill(f, *net);
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  {
    auto ok = fx::compare(f, "child.backbone.0", net->backbone->forward(x)[0]);
    CHECK(ok.ok);
  }
  // The last BN shift of the stride-8 GELAN moved by 0.01: its map differs, and the report names it.
  net->backbone->elan2->cv4->bn->bias.add_(0.01);
  const auto bb = net->backbone->forward(x);
  const auto r = fx::compare_all(f, {{"child.backbone.0", bb[0]}, {"child.backbone.2", bb[2]}});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("first mismatch: DIFF child.backbone.0") == 0);
  CHECK(r.rel_max_diff > 1e-4);
  // A wrong shape is a mismatch too.
  CHECK_FALSE(fx::compare(f, "child.backbone.0", bb[0].flatten(2)).ok);

  // Another class count: the class towers' shapes differ, listed with both shapes.
  Yolo9 three(Yolo9Options{"t", 3, 16});
  auto text = fx::join_lines(fx::name_differences(f, *three), 10000);
  CHECK(text.find("shape: head.cv3.0.2.weight ours [3, 64, 1, 1], original [80, 80, 1, 1]") != std::string::npos);
  CHECK(text.find("shape: head.cv3.2.0.conv.weight ours [64, 128, 3, 3], original [80, 128, 3, 3]") != std::string::npos);
  CHECK(text.find("missing") == std::string::npos);
  // The classification network against the detection fixture: the neck and detection head are
  // missing, the classifier is unexpected, the shared backbone is neither.
  Yolo9Classify cls(Yolo9ClassifyOptions{"t", 80});
  const auto diffs = fx::name_differences(f, *cls);
  text = fx::join_lines(diffs, 10000);
  CHECK(text.find("missing: neck.elan_up1.cv1.conv.weight [96, 224, 1, 1] float32") != std::string::npos);
  CHECK(text.find("missing: head.cv2.0.2.bias [64] float32") != std::string::npos);
  CHECK(text.find("unexpected: head.linear.weight [80, 1280] float32") != std::string::npos);
  CHECK(text.find("unexpected: head.conv.bn.num_batches_tracked [] int64") != std::string::npos);
  CHECK(text.find("backbone.") == std::string::npos);
}
