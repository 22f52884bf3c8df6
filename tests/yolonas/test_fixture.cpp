// YOLO-NAS s, m and l against the Python original's architecture fixtures (shared/fixtures/libreyolo/yolonas-<size>):
// the same parameter and buffer names and shapes, the same parameter count, and under the
// deterministic weight fill the same outputs of every direct child module (backbone, neck, heads) and
// of the whole model in eval mode, to 1e-4 relative. Plus the QARepVGG re-parameterisation.
#include "support_fixture.hpp"

#include <libreyolo/families/yolonas/network.hpp>

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

namespace nas = libreyolo::families::yolonas;
namespace fx = lry_test::fixture;

namespace {

void check(const std::string& size, int64_t n_params) {
  const std::string model = "yolonas-" + size;
  CAPTURE(model);
  LRY_OPEN_FIXTURE(f, model);
  nas::YoloNas net(nas::YoloNasOptions{size, 80, 16});

  const auto diffs = fx::name_differences(f, *net);
  CHECK_MESSAGE(diffs.empty(), diffs.size() << " differences from keys.tsv:\n" << fx::join_lines(diffs));
  CHECK(fx::parameter_count(*net) == f.n_params());
  CHECK(f.n_params() == n_params);
  CHECK(net->named_parameters().size() + net->named_buffers().size() == f.keys.size());
  if (!diffs.empty()) return;

  int64_t filled = 0;
  for (const auto& k : f.keys) filled += k.kind != "buffer";
  CHECK(fx::fill(f, *net) == filled);
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  REQUIRE(fx::compare(f, "input", x, 1e-6).ok);

  const auto bb = net->backbone->forward(x);
  const auto nk = net->neck->forward(bb);
  const auto hd = net->heads->forward(nk);
  REQUIRE(hd.size() == 4);
  const auto grid = nas::grid_cell_anchors({{20, 20}, {10, 10}, {5, 5}}, {8, 16, 32}, torch::kCPU);
  CHECK(grid.per_level == std::vector<int64_t>{400, 100, 25});

  std::vector<std::pair<std::string, torch::Tensor>> ours;
  for (int i = 0; i < 4; ++i) ours.emplace_back("child.backbone." + std::to_string(i), bb[i]);
  for (int i = 0; i < 3; ++i) ours.emplace_back("child.neck." + std::to_string(i), nk[i]);
  // The original's heads return ((boxes, scores), (logits, dfl, anchors, points, per_level, strides)).
  for (const std::string p : {"child.heads.", "output."}) {
    ours.emplace_back(p + "0.0", hd[0]);
    ours.emplace_back(p + "0.1", hd[1]);
    ours.emplace_back(p + "1.0", hd[2]);
    ours.emplace_back(p + "1.1", hd[3]);
    ours.emplace_back(p + "1.2", grid.anchors);
    ours.emplace_back(p + "1.3", grid.points);
    ours.emplace_back(p + "1.5", grid.strides);
  }
  CHECK(ours.size() + 1 == f.refs.size());  // every reference but the input
  std::string report;
  const auto result = fx::compare_all(f, ours, &report);
  CHECK_MESSAGE(result.ok, result.message << "\n" << report);
  MESSAGE(model << ": " << result.message);

  const auto direct = net->forward(x);
  REQUIRE(direct.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(torch::equal(direct[i], hd[i]));

  // Re-parameterised (partial, then full): the same outputs to float rounding.
  net->fuse(false);
  auto partial = net->forward(x);
  CHECK(fx::compare(f, "output.0.0", partial[0]).ok);
  CHECK(fx::compare(f, "output.1.0", partial[2]).ok);
  net->fuse(true);
  auto full = net->forward(x);
  CHECK(fx::compare(f, "output.0.0", full[0]).ok);
  CHECK(fx::compare(f, "output.1.0", full[2]).ok);
}

}  // namespace

TEST_CASE("yolonas-s matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("s", 19053888); }
TEST_CASE("yolonas-m matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("m", 51182658); }
TEST_CASE("yolonas-l matches the original parameter for parameter and output for output" * lry_test::needs({lry_test::Need::fixtures})) { check("l", 66976392); }

TEST_CASE("a QARepVGG block gives the same output fused and un-fused (partial and full, with and without identity)") {
  torch::manual_seed(3);
  for (bool residual : {true, false}) {
    for (int64_t stride : {1, 2}) {
      if (residual && stride != 1) continue;
      CAPTURE(residual);
      CAPTURE(stride);
      nas::QARepVGG block(8, 8, stride, residual);
      {
        torch::NoGradGuard ng;  // non-trivial BN statistics and affine parameters in both BNs
        for (auto* bn : {block->branch_3x3->bn.get(), block->post_bn.get()}) {
          bn->running_mean.uniform_(-0.5, 0.5);
          bn->running_var.uniform_(0.5, 2.0);
          bn->weight.uniform_(0.5, 1.5);
          bn->bias.uniform_(-0.3, 0.3);
        }
      }
      block->eval();
      torch::NoGradGuard ng;
      auto x = torch::randn({2, 8, 12, 12});
      auto ref = block->forward(x);
      auto [k, b] = block->equivalent_kernel_bias();
      CHECK(k.sizes() == torch::IntArrayRef({8, 8, 3, 3}));
      nas::QARepVGG copy = std::dynamic_pointer_cast<nas::QARepVGGImpl>(block->clone());
      copy->fuse(false);
      CHECK(copy->fusion() == nas::QARepVGGImpl::Fusion::partial);
      auto partial = copy->forward(x);
      CHECK((partial - ref).abs().max().item<double>() < 1e-5);
      copy->fuse(true);
      CHECK(copy->fusion() == nas::QARepVGGImpl::Fusion::full);
      auto full = copy->forward(x);
      CHECK((full - ref).abs().max().item<double>() < 1e-5);
      // The fusion really replaced the branches: changing the (now unused) 3x3 branch changes nothing,
      // while the original block still depends on it.
      copy->branch_3x3->conv->weight.add_(1.0);
      CHECK(torch::equal(copy->forward(x), full));
      block->branch_3x3->conv->weight.add_(1.0);
      CHECK((block->forward(x) - ref).abs().max().item<double>() > 1e-2);
    }
  }
  // A residual block needs in == out and stride 1.
  CHECK_THROWS_AS(nas::QARepVGG(8, 16, 1, true), libreyolo::ConfigError);
}

TEST_CASE("yolonas: the bottleneck alpha is not trained (the original's optimizer never sees it) and sizes") {
  nas::YoloNas net(nas::YoloNasOptions{"s", 3, 16});
  int alphas = 0;
  for (const auto& p : net->named_parameters()) {
    const auto& n = p.key();
    if (n.size() >= 6 && n.compare(n.size() - 6, 6, ".alpha") == 0) {
      ++alphas;
      CHECK_FALSE(p.value().requires_grad());
      CHECK(p.value().item<float>() == 1.0f);
    }
  }
  CHECK(alphas == (2 + 3 + 5 + 2) + 4 * 2);  // one per bottleneck: backbone stages, 4 neck stages of 2
  auto out = net->forward(torch::rand({2, 3, 64, 96}));
  REQUIRE(out.size() == 4);
  const int64_t A = 8 * 12 + 4 * 6 + 2 * 3;
  CHECK(out[0].sizes() == torch::IntArrayRef({2, A, 4}));
  CHECK(out[1].sizes() == torch::IntArrayRef({2, A, 3}));
  CHECK(out[3].sizes() == torch::IntArrayRef({2, A, 68}));
  CHECK_THROWS_AS(net->forward(torch::rand({1, 3, 48, 64})), libreyolo::ConfigError);
  CHECK_THROWS_AS(nas::YoloNas(nas::YoloNasOptions{"q", 80, 16}), libreyolo::ConfigError);
  // The class prior: bias -log(99) on every class output.
  CHECK(net->heads->heads[0]->cls_pred->bias[0].item<double>() == doctest::Approx(-std::log(99.0)));
}
