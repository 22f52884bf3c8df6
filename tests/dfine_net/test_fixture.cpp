// Every size of the D-FINE line (families/dfine/network.hpp): D-FINE n/s/m/l/x, DEIM n/s/m/l/x and
// RT-DETRv4 s/m/l/x against the Python original's architecture fixtures (shared/fixtures/libreyolo/
// <model>, 640 px, the eval size the decoder's anchors are fixed for): the same parameter and buffer
// names, shapes and dtypes (l/x: the backbone's FrozenBatchNorm2d weights as buffers), the same
// parameter and trainable counts, and under the deterministic fill the same outputs of the backbone, the
// hybrid encoder and the decoder (logits and boxes of the 300 selected queries) in eval mode, per
// element to 1e-4 relative; forward == decode(encode(x)) (the capture boundary).
//
// The decoder's query selection meets near-ties: under the fill many encoder tokens score alike to the
// last bits, so rounding differences of 1e-7 in the encoder maps pick other tokens (and order them
// otherwise), and the decoder outputs then differ though every computation matches (the fixture
// README's "Decoders and near-ties"). The decoder is therefore compared with the original's selection
// given to its test hook (forced_topk_indices; tests/detr_topk/<model>.bin, see its README.md), and that
// selection is checked to be a top-k of our own scores up to rounding.
#include "support_detr_topk.hpp"
#include "support_fixture.hpp"
#include "support_prereq.hpp"

#include <libreyolo/families/dfine/network.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

using libreyolo::families::dfine::DFine;
using libreyolo::families::dfine::DFineOptions;
using libreyolo::families::dfine::Variant;
namespace fx = lry_test::fixture;
namespace topk = lry_test::detr_topk;

namespace {

// n_params / n_trainable: the fixture's config.json values, written out so that a changed fixture shows.
void check(const std::string& model, const std::string& size, Variant v, int64_t n_params, int64_t n_trainable) {
  LRY_OPEN_FIXTURE(f, model);
  CAPTURE(model);
  DFine net(DFineOptions{size, 80, v, 640});
  // The trainable count: D-FINE and RT-DETRv4 freeze the backbone's stem (DEIM at l/x only); up and
  // reg_scale never train. l/x: the backbone's FrozenBatchNorm2d weight and bias are buffers there and here.
  if (!topk::check_state(f, *net, n_params, n_trainable)) return;
  // decoder.decoder.up / reg_scale are the decoder's up / reg_scale themselves (one tensor, two names).
  CHECK(net->decoder->decoder->up.is_same(net->decoder->up));
  CHECK(net->decoder->decoder->reg_scale.is_same(net->decoder->reg_scale));

  fx::fill(f, *net);
  topk::check_detr_outputs(f, net, model);
}

}  // namespace

#define LRY_DFINE_FIXTURE_CASE(MODEL, SIZE, VARIANT, N_PARAMS, N_TRAINABLE)                                                     \
  TEST_CASE(MODEL " matches the original parameter for parameter and output for output (640 px)" *                                \
            lry_test::needs({lry_test::Need::fixtures})) {                                                                        \
    LRY_NEED(lry_test::Need::fixtures);                                                                                           \
    check(MODEL, SIZE, VARIANT, N_PARAMS, N_TRAINABLE);                                                                           \
  }

LRY_DFINE_FIXTURE_CASE("dfine-n", "n", Variant::dfine, 3782693, 3776217)
LRY_DFINE_FIXTURE_CASE("dfine-s", "s", Variant::dfine, 10321877, 10315401)
LRY_DFINE_FIXTURE_CASE("dfine-m", "m", Variant::dfine, 19590064, 19575732)
LRY_DFINE_FIXTURE_CASE("dfine-l", "l", Variant::dfine, 31244152, 31219222)
LRY_DFINE_FIXTURE_CASE("dfine-x", "x", Variant::dfine, 62621560, 62596118)
LRY_DFINE_FIXTURE_CASE("deim-n", "n", Variant::deim, 3782693, 3782691)
LRY_DFINE_FIXTURE_CASE("deim-s", "s", Variant::deim, 10321877, 10321875)
LRY_DFINE_FIXTURE_CASE("deim-m", "m", Variant::deim, 19590064, 19590062)
LRY_DFINE_FIXTURE_CASE("deim-l", "l", Variant::deim, 31244152, 31219222)
LRY_DFINE_FIXTURE_CASE("deim-x", "x", Variant::deim, 62621560, 62596118)
LRY_DFINE_FIXTURE_CASE("rtdetrv4-s", "s", Variant::rtdetrv4, 10321877, 10315401)
LRY_DFINE_FIXTURE_CASE("rtdetrv4-m", "m", Variant::rtdetrv4, 19590064, 19575732)
LRY_DFINE_FIXTURE_CASE("rtdetrv4-l", "l", Variant::rtdetrv4, 31244152, 31219222)
LRY_DFINE_FIXTURE_CASE("rtdetrv4-x", "x", Variant::rtdetrv4, 62621560, 62596118)

TEST_CASE("dfine l/x: the backbone's norms are FrozenBatchNorm2d (buffers only, unchanged by a training step), the rest BatchNorm2d") {
  DFine net(DFineOptions{"l", 4, Variant::deim, 640});
  // No backbone parameter is a norm's; the encoder's and decoder's norms still are.
  for (const auto& p : net->named_parameters()) {
    if (p.key().rfind("backbone.", 0) == 0) CHECK_MESSAGE(p.key().find(".bn.") == std::string::npos, p.key());
  }
  CHECK(net->named_parameters().contains("encoder.input_proj.0.norm.weight"));
  const auto buffers = net->named_buffers();
  REQUIRE(buffers.contains("backbone.stages.0.blocks.0.layers.0.bn.weight"));
  CHECK_FALSE(buffers.contains("backbone.stages.0.blocks.0.layers.0.bn.num_batches_tracked"));
  // A training-mode forward: the frozen statistics stay; the encoder's BatchNorm statistics move.
  torch::NoGradGuard ng;
  const auto rv = buffers["backbone.stem.stem1.bn.running_var"].clone();
  const auto enc_rv = buffers["encoder.input_proj.0.norm.running_var"].clone();
  net->train();
  auto x = torch::rand({2, 3, 64, 64});
  net->hybrid_encoder->forward(net->backbone->forward(x));
  CHECK(torch::equal(buffers["backbone.stem.stem1.bn.running_var"], rv));
  CHECK_FALSE(torch::equal(buffers["encoder.input_proj.0.norm.running_var"], enc_rv));
  // Eval: x * weight * rsqrt(var + eps) + (bias - mean * scale).
  libreyolo::nn::detr::FrozenBatchNorm2d bn(3);
  bn->running_mean.copy_(torch::tensor({0.5f, -1.0f, 0.0f}));
  bn->running_var.copy_(torch::tensor({4.0f, 1.0f, 0.25f}));
  bn->weight.copy_(torch::tensor({2.0f, 1.0f, 1.0f}));
  bn->bias.copy_(torch::tensor({0.0f, 1.0f, -1.0f}));
  const auto y = bn->forward(torch::ones({1, 3, 1, 1}));
  const auto eps = 1e-5;
  CHECK(y[0][0][0][0].item<double>() == doctest::Approx(2.0 * 0.5 / std::sqrt(4.0 + eps)));
  CHECK(y[0][1][0][0].item<double>() == doctest::Approx(2.0 / std::sqrt(1.0 + eps) + 1.0));
  CHECK(y[0][2][0][0].item<double>() == doctest::Approx(1.0 / std::sqrt(0.25 + eps) - 1.0));
  // A deep copy (the EMA's) keeps them frozen buffers.
  auto copy = std::dynamic_pointer_cast<libreyolo::families::dfine::DFineImpl>(net->clone());
  REQUIRE(copy);
  CHECK(copy->named_parameters().size() == net->named_parameters().size());
  CHECK(copy->named_buffers().contains("backbone.stem.stem1.bn.weight"));
}
