// D-FINE-n, DEIM-n and RT-DETRv4-s (families/dfine/network.hpp) against the Python original's
// architecture fixtures (shared/fixtures/libreyolo/{dfine-n,deim-n,rtdetrv4-s}, 640 px, the eval size
// the decoder's anchors are fixed for): the same parameter and buffer names, shapes and dtypes, the same
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

#include <string>
#include <utility>
#include <vector>

using libreyolo::families::dfine::DFine;
using libreyolo::families::dfine::DFineOptions;
using libreyolo::families::dfine::Variant;
namespace fx = lry_test::fixture;
namespace topk = lry_test::detr_topk;

namespace {

void check(const std::string& model, const std::string& size, Variant v) {
  LRY_OPEN_FIXTURE(f, model);
  CAPTURE(model);
  DFine net(DFineOptions{size, 80, v, 640});
  const auto diffs = fx::name_differences(f, *net);
  CHECK_MESSAGE(diffs.empty(), model << ": " << diffs.size() << " differences from keys.tsv:\n" << fx::join_lines(diffs));
  CHECK(fx::parameter_count(*net) == f.n_params());
  CHECK(net->named_parameters().size() + net->named_buffers().size() == f.keys.size());
  if (!diffs.empty()) return;
  // The trainable count: D-FINE and RT-DETRv4 freeze the backbone's stem; up and reg_scale never train.
  int64_t trainable = 0;
  for (auto& p : net->parameters()) trainable += p.requires_grad() ? p.numel() : 0;
  CHECK(trainable == f.config.at("n_trainable").get<int64_t>());
  // decoder.decoder.up / reg_scale are the decoder's up / reg_scale themselves (one tensor, two names).
  CHECK(net->decoder->decoder->up.is_same(net->decoder->up));
  CHECK(net->decoder->decoder->reg_scale.is_same(net->decoder->reg_scale));

  fx::fill(f, *net);
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  REQUIRE(fx::compare(f, "input", x, 1e-6).ok);
  const auto bb = net->backbone->forward(x);
  const auto enc = net->hybrid_encoder->forward(bb);
  // The original's selection (checked against ours: the same tokens up to near-ties), forced.
  const auto sel = topk::force_original_selection(*net->decoder, enc, model);
  const auto dec = net->decoder->forward(enc);
  CHECK_FALSE(dec.training);
  CHECK(dec.aux_outputs.empty());
  std::vector<std::pair<std::string, torch::Tensor>> ours;
  for (size_t i = 0; i < bb.size(); ++i) ours.emplace_back("child.backbone." + std::to_string(i), bb[i]);
  for (size_t i = 0; i < enc.size(); ++i) ours.emplace_back("child.encoder." + std::to_string(i), enc[i]);
  ours.emplace_back("child.decoder.pred_logits", dec.pred_logits);
  ours.emplace_back("child.decoder.pred_boxes", dec.pred_boxes);
  const auto full = net->forward(x);
  REQUIRE_FALSE(full.pending());
  ours.emplace_back("output.pred_logits", full.result->pred_logits);
  ours.emplace_back("output.pred_boxes", full.result->pred_boxes);
  CHECK(ours.size() + 1 == f.refs.size());
  // Every output per element, in order (the first mismatch names the part that differs).
  std::string report;
  const auto result = fx::compare_all(f, ours, &report);
  CHECK_MESSAGE(result.ok, result.message << "\n" << report);
  MESSAGE(model << ": " << result.message << "\n" << report);
  // forward == decode(encode(x)) (the capture boundary), bit for bit.
  const auto split = net->decode(net->encode(x));
  CHECK(torch::equal(split.result->pred_logits, dec.pred_logits));
  CHECK(torch::equal(split.result->pred_boxes, dec.pred_boxes));
  CHECK(torch::equal(full.result->pred_logits, dec.pred_logits));
  CHECK(full.input_hw[0] == f.imgsz);
  CHECK(split.input_hw[1] == f.imgsz);
  // Without the hook, our own selection.
  topk::check_own_selection(*net->decoder, enc, dec, sel);
}

}  // namespace

TEST_CASE("dfine-n matches the original parameter for parameter and output for output (640 px)" *
          lry_test::needs({lry_test::Need::fixtures})) {
  LRY_NEED(lry_test::Need::fixtures);
  check("dfine-n", "n", Variant::dfine);
}
TEST_CASE("deim-n matches the original parameter for parameter and output for output (640 px)" *
          lry_test::needs({lry_test::Need::fixtures})) {
  LRY_NEED(lry_test::Need::fixtures);
  check("deim-n", "n", Variant::deim);
}
TEST_CASE("rtdetrv4-s matches the original parameter for parameter and output for output (640 px)" *
          lry_test::needs({lry_test::Need::fixtures})) {
  LRY_NEED(lry_test::Need::fixtures);
  check("rtdetrv4-s", "s", Variant::rtdetrv4);
}
