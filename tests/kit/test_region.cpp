// Capture regions on the CPU: the encoder boundary of a backbone_encoder network, the trainer composing
// such a family with CudaGraph (the run-time fallback trains eager), and the region's bookkeeping.
#include <doctest/doctest.h>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "kit/region_family.hpp"
#include "support.hpp"
#include "support_data.hpp"

#include <fstream>
#include <set>

namespace ly = libreyolo;
namespace cap = ly::capture;

static_assert(cap::EncoderBoundary<lry_test::TokenNetImpl>);
static_assert(!cap::EncoderBoundary<ly::resnet::ResNetImpl>);
static_assert(ly::family_traits<lry_test::TokenFamily>::capture_region == ly::CaptureRegion::backbone_encoder);
static_assert(std::is_same_v<ly::Trainer<lry_test::TokenFamily, ly::precision::Fp32, cap::CudaGraph<>>::Capture, cap::CudaGraph<>>);

TEST_CASE("a backbone_encoder network: forward = decode(encode(x)); the decoder's token count varies per batch") {
  torch::manual_seed(0);
  lry_test::TokenNet a(3, 16), b(3, 16);
  torch::NoGradGuard ng;
  for (size_t i = 0; i < a->parameters().size(); ++i) b->parameters()[i].copy_(a->parameters()[i]);
  a->eval();
  b->eval();
  std::set<int64_t> tokens;
  for (int i = 0; i < 8; ++i) {
    auto x = torch::randn({2, 3, 32, 32});
    auto y1 = a->forward(x);
    const int64_t k = a->last_tokens;
    auto y2 = b->decode(b->encode(x));
    CHECK(b->last_tokens == k);  // a function of the batch, not of the call
    CHECK(y1.equal(y2));
    CHECK((k - 1) % 3 == 0);
    CHECK(k <= 13);
    tokens.insert(k);
  }
  CHECK(tokens.size() >= 2);
}

TEST_CASE("CudaGraph over a backbone_encoder family on a CPU: eager through the region, the same losses as Eager") {
  lry_test::TempDir runs("lry_kit_region");
  auto args = [&](const std::string& name) {
    return ly::parse_args({"data=" + lry_test::tiny_classify_set().string(), "imgsz=32", "batch=8", "workers=0",
                           "device=cpu", "epochs=1", "val=false", "cuda_graph=true", "seed=2",
                           "project=" + runs.path.string(), "name=" + name});
  };
  ly::Trainer<lry_test::TokenFamily, ly::precision::Fp32, cap::CudaGraph<>> g(args("g"));
  auto rg = g.fit();
  ly::Trainer<lry_test::TokenFamily, ly::precision::Fp32, cap::Eager> e(args("e"));
  auto re = e.fit();
  CHECK(g.capture().report()["eager_steps"] == 4);  // 39 images at batch 8: 4 full batches
  CHECK_FALSE(g.capture().enabled());
  CHECK(g.network()->decode_calls == 4);
  std::ifstream fg(rg.run_dir / "results.json"), fe(re.run_dir / "results.json");
  auto jg = nlohmann::json::parse(fg), je = nlohmann::json::parse(fe);
  CHECK(jg["epochs"][0]["train/loss"].get<double>() == je["epochs"][0]["train/loss"].get<double>());
  CHECK(jg["meta"]["model"] == "tokennetn");  // a hand-composed trainer names its family when model= is unset
}
