// RTMDet t, s, m, l and x against the Python original's architecture fixtures (shared/fixtures/libreyolo/
// rtmdet-<size>): names
// and shapes (the only keys of the original's state dict we lack are the 8 aliases of the shared head
// convs), the parameter count, and under the deterministic fill every child output (backbone, neck, head
// class and box maps) and the eval outputs, to 1e-4.
#include "support_fixture.hpp"

#include <libreyolo/families/rtmdet/network.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

using libreyolo::families::rtmdet::Rtmdet;
using libreyolo::families::rtmdet::RtmdetOptions;
namespace fx = lry_test::fixture;

namespace {

void check(const std::string& size, int64_t head_ch, int64_t n_params) {
  const std::string model = "rtmdet-" + size;
  CAPTURE(model);
  LRY_OPEN_FIXTURE(f, model);
  Rtmdet net(RtmdetOptions{size, 80});
  const auto diffs = fx::name_differences(f, *net);
  // The shared convs: levels 1 and 2 reuse level 0's weight; PyTorch's state dict repeats it (kind
  // "buffer" in keys.tsv), ours has it once.
  const std::string shape = "[" + std::to_string(head_ch) + ", " + std::to_string(head_ch) + ", 3, 3]";
  std::set<std::string> aliases;
  for (const char* tower : {"cls", "reg"})
    for (int lvl : {1, 2})
      for (int i : {0, 1}) {
        const std::string name = std::string("head.") + tower + "_convs." + std::to_string(lvl) + "." + std::to_string(i) + ".conv.weight";
        aliases.insert("missing: " + name + " " + shape + " float32");
      }
  std::vector<std::string> other;
  for (const auto& d : diffs)
    if (!aliases.count(d)) other.push_back(d);
  CHECK(diffs.size() == 8);
  CHECK_MESSAGE(other.empty(), other.size() << " differences from keys.tsv:\n" << fx::join_lines(other));
  for (const auto& k : f.keys)
    if (k.name.find(".conv.weight") != std::string::npos && k.name.rfind("head.", 0) == 0 && k.name.find("_convs.0.") == std::string::npos)
      CHECK(k.kind == "buffer");  // the fixture lists the aliases as non-parameters
  CHECK(fx::parameter_count(*net) == f.n_params());
  CHECK(f.n_params() == n_params);
  if (!other.empty()) return;

  fx::fill(f, *net);
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  const auto bb = net->backbone->forward(x);
  const auto nk = net->neck->forward(bb);
  const auto out = net->head->forward(nk);
  std::vector<std::pair<std::string, torch::Tensor>> ours;
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.backbone." + std::to_string(i), bb[i]);
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.neck." + std::to_string(i), nk[i]);
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.head.0." + std::to_string(i), out[i].narrow(1, 4, 80));
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.head.1." + std::to_string(i), out[i].narrow(1, 0, 4));
  for (int i = 0; i < 3; ++i) ours.emplace_back("output.0." + std::to_string(i), out[i].narrow(1, 4, 80));
  for (int i = 0; i < 3; ++i) ours.emplace_back("output.1." + std::to_string(i), out[i].narrow(1, 0, 4));
  CHECK(ours.size() + 1 == f.refs.size());
  std::string report;
  const auto result = fx::compare_all(f, ours, &report);
  CHECK_MESSAGE(result.ok, result.message << "\n" << report);
  MESSAGE(model << ": " << result.message);
  const auto direct = net->forward(x);
  for (int i = 0; i < 3; ++i) CHECK(torch::equal(direct[i], out[i]));
}

}  // namespace

TEST_CASE("rtmdet-t matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("t", 96, 4896168); }
TEST_CASE("rtmdet-s matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("s", 128, 8886924); }
TEST_CASE("rtmdet-m (exp on the box branch) matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("m", 192, 24709188); }
TEST_CASE("rtmdet-l matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("l", 256, 52315804); }
TEST_CASE("rtmdet-x matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("x", 320, 94855572); }

TEST_CASE("rtmdet: the head's convs are shared across levels (one parameter, gradients of all levels), BNs are not") {
  Rtmdet net(RtmdetOptions{"t", 3});
  int64_t head_convs = 0, head_bns = 0;
  for (auto& p : net->head->named_parameters()) {
    head_convs += p.key().find(".conv.weight") != std::string::npos;
    head_bns += p.key().find(".bn.weight") != std::string::npos;
  }
  CHECK(head_convs == 4);   // cls and reg towers, 2 convs each, level 0 only
  CHECK(head_bns == 12);    // 2 towers x 3 levels x 2
  net->train();
  auto x = torch::rand({1, 3, 64, 64});
  auto y = net->forward(x);
  // Only level 2's output: the shared conv still gets a gradient, level 0's BN does not.
  y[2].sum().backward();
  auto shared = net->head->cls_convs->ptr<torch::nn::ModuleListImpl>(0)->ptr<libreyolo::families::rtmdet::ConvBNActImpl>(0);
  CHECK(shared->conv->weight.grad().defined());
  CHECK(shared->conv->weight.grad().abs().sum().item<double>() > 0);
  CHECK((!shared->bn->weight.grad().defined() || shared->bn->weight.grad().abs().sum().item<double>() == 0));
  // A deep copy (the EMA's) keeps the sharing: its forward equals the original's.
  net->eval();
  auto copy = std::dynamic_pointer_cast<libreyolo::families::rtmdet::RtmdetImpl>(net->clone());
  REQUIRE(copy);
  torch::NoGradGuard ng;
  auto a = net->forward(x), b = copy->forward(x);
  for (int i = 0; i < 3; ++i) CHECK(torch::equal(a[i], b[i]));
  CHECK(copy->head->cls_convs->ptr<torch::nn::ModuleListImpl>(0)->ptr<libreyolo::families::rtmdet::ConvBNActImpl>(0)->conv->weight.data_ptr() !=
        shared->conv->weight.data_ptr());
  CHECK_THROWS_AS(Rtmdet(RtmdetOptions{"q", 80}), libreyolo::ConfigError);
}
