// RF-DETR (families/rfdetr/network.hpp), sizes n / s / m / l, against the Python original's architecture
// fixtures rfdetr-<size> (tests/fixtures/libreyolo/, made by scripts/fixtures/make_fixture.py --model
// rfdetr; the fixture module is the original's inner LWDETR, at the size's own resolution: n 384, s 512,
// m 576, l 704): the same parameter names in the same order, shapes and dtypes, the same parameter and
// trainable counts, and under the deterministic fill, in eval mode, per element to 1e-4 relative:
//   child.backbone.0.0.tensors / .mask    the projector's map (and the all-False padding mask),
//   child.backbone.1.0                     the sine position encoding,
//   child.transformer.0 .. 3               hs (every decoder layer through the final norm), the reference
//                                          boxes, the selected tokens' memory and boxes,
//   child.bbox_embed, child.class_embed    the heads on hs,
//   output.*                               pred_logits / pred_boxes, aux_outputs.<i>.*, enc_outputs.*,
// the two-stage query selection forced to the original's (tests/detr_topk/rfdetr-<size>.bin, the
// fixture README's "Decoders and near-ties"), which is checked to be a top-300 of our own scores up to
// rounding; forward == decode(encode(x)) == heads(transform(encode(x))) bit for bit; then our own
// selection (same shapes; the same outputs where it is the same selection). Without the rfdetr fixtures
// (see rfdetr_fixture_present) the cases are skipped, or fail in strict mode.
#include "support_detr_topk.hpp"
#include "support_fixture.hpp"
#include "support_prereq.hpp"

#include <libreyolo/families/rfdetr/network.hpp>

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

using libreyolo::families::rfdetr::RFDETR;
using libreyolo::families::rfdetr::RFDETROptions;
namespace fx = lry_test::fixture;
namespace topk = lry_test::detr_topk;

namespace {

// n_params / n_trainable: the fixture's config.json values, written out so that a changed fixture shows.
void check(const std::string& model, const std::string& size, int64_t n_params, int64_t n_trainable) {
  LRY_OPEN_FIXTURE(f, model);
  CAPTURE(model);
  RFDETROptions o;
  o.size = size;
  o.imagenet_norm = false;  // the fixtures feed the original's network directly
  RFDETR net(o);
  if (!topk::check_state(f, *net, n_params, n_trainable)) return;
  // The state dict's order: every entry is a parameter, in keys.tsv's order.
  {
    const auto params = net->named_parameters();
    REQUIRE(params.size() == f.keys.size());
    size_t out_of_order = 0;
    for (size_t i = 0; i < f.keys.size(); ++i) out_of_order += params[i].key() != f.keys[i].name;
    CHECK_MESSAGE(out_of_order == 0, out_of_order << " names out of keys.tsv's order");
  }
  fx::fill(f, *net);
  net->eval();
  // Our side in float64: the fixture holds the original's float32 outputs, whose own rounding through RF-DETR's
  // decoder reaches 7.4e-5 of the tensor's mean (rfdetr-m); in float32 ours added its own, which depends on the
  // thread count's summation order (session 40, this VM: rfdetr-s 1.17e-4 on one thread, 4.8e-5 on two), so the
  // 1e-4 check passed or failed by machine. In float64 the comparison measures the port, the same everywhere.
  net->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  const auto x = f.input().to(torch::kFloat64);
  REQUIRE(x.size(2) == net->resolution());
  REQUIRE(fx::compare(f, "input", x, 1e-6).ok);

  const auto feats = net->encode(x);
  REQUIRE(feats.srcs.size() == 1);
  // The original's selection, checked against our own top-300 of the group-0 scores, then forced.
  const auto forced = topk::load(model, 300);
  auto memory = feats.srcs[0].flatten(2).transpose(1, 2);
  const auto sel = topk::check_selection(net->transformer->selection_scores(memory, {{feats.srcs[0].size(2), feats.srcs[0].size(3)}}), forced);
  CHECK(sel.max_rel_score <= 1e-5);
  MESSAGE(model << ": the original's selection vs our own top-300: " << sel.differing << " tokens differ, " << sel.moved
                << " positions; sorted scores within " << sel.max_rel_score << " relative");
  net->transformer->forced_topk_indices = forced;
  const auto t = net->transform(feats);
  CHECK(torch::equal(t.topk_ind, forced));
  const auto out = net->heads(t);

  std::vector<std::pair<std::string, torch::Tensor>> ours;
  ours.emplace_back("child.backbone.0.0.tensors", feats.srcs[0]);
  const auto& s0 = feats.srcs[0];
  ours.emplace_back("child.backbone.0.0.mask", torch::zeros({s0.size(0), s0.size(2), s0.size(3)}));
  ours.emplace_back("child.backbone.1.0", feats.pos[0]);
  ours.emplace_back("child.transformer.0", t.hs);
  ours.emplace_back("child.transformer.1", t.references);
  ours.emplace_back("child.transformer.2", t.memory_ts);
  ours.emplace_back("child.transformer.3", t.boxes_ts);
  ours.emplace_back("child.bbox_embed", net->bbox_embed->forward(t.hs));
  ours.emplace_back("child.class_embed", net->class_embed->forward(t.hs));
  ours.emplace_back("output.pred_logits", out.pred_logits);
  ours.emplace_back("output.pred_boxes", out.pred_boxes);
  for (size_t i = 0; i < out.aux_outputs.size(); ++i) {
    ours.emplace_back("output.aux_outputs." + std::to_string(i) + ".pred_logits", out.aux_outputs[i].pred_logits);
    ours.emplace_back("output.aux_outputs." + std::to_string(i) + ".pred_boxes", out.aux_outputs[i].pred_boxes);
  }
  ours.emplace_back("output.enc_outputs.pred_logits", out.enc_outputs.pred_logits);
  ours.emplace_back("output.enc_outputs.pred_boxes", out.enc_outputs.pred_boxes);
  CHECK(ours.size() + 1 == f.refs.size());
  std::string report;
  const auto result = fx::compare_all(f, ours, &report);
  CHECK_MESSAGE(result.ok, result.message << "\n" << report);
  MESSAGE(model << ": " << result.message << "\n" << report);

  // forward == decode(encode(x)) == heads(transform(...)), bit for bit.
  const auto full = net->forward(x);
  const auto split = net->decode(net->encode(x));
  CHECK(torch::equal(full.pred_logits, out.pred_logits));
  CHECK(torch::equal(full.pred_boxes, out.pred_boxes));
  CHECK(torch::equal(split.pred_logits, out.pred_logits));
  CHECK(torch::equal(split.enc_outputs.pred_boxes, out.enc_outputs.pred_boxes));
  CHECK(full.input_hw[0] == f.imgsz);
  CHECK(full.input_hw[1] == f.imgsz);

  // Without the hook, our own selection.
  net->transformer->forced_topk_indices = torch::Tensor();
  const auto own = net->forward(x);
  CHECK(own.pred_logits.sizes() == out.pred_logits.sizes());
  CHECK(own.pred_boxes.sizes() == out.pred_boxes.sizes());
  CHECK(own.enc_outputs.pred_boxes.sizes() == out.enc_outputs.pred_boxes.sizes());
  if (sel.moved == 0) CHECK(torch::equal(own.pred_logits, out.pred_logits));
}

}  // namespace

// The RF-DETR fixtures are not among the shared ones (the original's DINOv2 needs HuggingFace transformers:
// they are made on the CUDA machine and committed to tests/fixtures/libreyolo/ with their selections in
// tests/detr_topk/). Until they are: skipped locally, a failure naming the command in strict mode (CI).
static bool rfdetr_fixture_present(const std::string& model) {
  const bool folder = std::filesystem::is_directory(fx::root() / model) || std::filesystem::is_directory(fx::repo_root() / model);
  return lry_test::have(lry_test::Need::fixtures) && folder && std::filesystem::exists(topk::file(model));
}

#define LRY_RFDETR_FIXTURE_CASE(MODEL, SIZE, N_PARAMS, N_TRAINABLE)                                                   \
  TEST_CASE(MODEL " matches the original parameter for parameter and output for output (its resolution)" *          \
            doctest::skip(!rfdetr_fixture_present(MODEL) && !lry_test::strict())) {                                   \
    LRY_NEED(lry_test::Need::fixtures);                                                                               \
    REQUIRE_MESSAGE(rfdetr_fixture_present(MODEL),                                                                    \
                    "missing: tests/fixtures/libreyolo/" MODEL " and tests/detr_topk/" MODEL ".bin (python3 "          \
                    "scripts/fixtures/make_fixture.py --original <the original> --model rfdetr --size " SIZE          \
                    " --out tests/fixtures/libreyolo/" MODEL " --topk-out tests/detr_topk/" MODEL ".bin, with the "   \
                    "real transformers)");                                                                            \
    check(MODEL, SIZE, N_PARAMS, N_TRAINABLE);                                                                        \
  }

LRY_RFDETR_FIXTURE_CASE("rfdetr-n", "n", 30431318, 30431318)
LRY_RFDETR_FIXTURE_CASE("rfdetr-s", "s", 32075190, 32075190)
LRY_RFDETR_FIXTURE_CASE("rfdetr-m", "m", 33651478, 33651478)
LRY_RFDETR_FIXTURE_CASE("rfdetr-l", "l", 33897238, 33897238)
