#pragma once
// The original's query selection for the DETR fixture tests (tests/dfine_net/test_fixture.cpp,
// tests/rtdetr/test_fixture.cpp): tests/detr_topk/<model>.bin, made by tests/detr_topk/make_topk.py
// (see tests/detr_topk/README.md). Under the fixtures' fill many encoder tokens score nearly alike, so
// rounding picks other tokens; a test gives these indices to the decoder's forced_topk_indices hook
// and compares the decoder's outputs per element. selection_scores / check_selection show that the
// original's selection is a top-k of OUR scores up to rounding (only near-ties are decided differently).
#include "support_fixture.hpp"

#include <libreyolo/nn/detr/anchors.hpp>

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace lry_test::detr_topk {

inline std::filesystem::path file(const std::string& model) {
  return std::filesystem::path(LIBREYOLO_SOURCE_DIR) / "tests" / "detr_topk" / (model + ".bin");
}

// The selection recorded for `model`: int64 [1, k] (little-endian int64 in the file, best first).
inline torch::Tensor load(const std::string& model, int64_t k = 300) {
  const auto p = file(model);
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (static_cast<int64_t>(bytes.size()) != 8 * k)
    throw std::runtime_error(p.string() + ": " + std::to_string(bytes.size()) + " bytes, expected " + std::to_string(8 * k));
  std::vector<int64_t> v(static_cast<size_t>(k));
  for (size_t i = 0; i < v.size(); ++i) {  // little-endian, whatever the host's order
    uint64_t u = 0;
    for (int b = 7; b >= 0; --b) u = (u << 8) | static_cast<uint8_t>(bytes[8 * i + static_cast<size_t>(b)]);
    std::memcpy(&v[i], &u, 8);
  }
  return torch::tensor(v, torch::kInt64).view({1, k});
}

// Our decoder's selection scores ([B, N]: each encoder token's best class logit), as its forward computes them in
// eval or training mode: the projected maps flattened, invalid cells zeroed, enc_output (where there is one),
// enc_score_head. For the decoders here whose levels are the encoder's maps (no extra strided levels).
template <class Decoder>
torch::Tensor selection_scores(Decoder& d, const std::vector<torch::Tensor>& enc) {
  std::vector<torch::Tensor> proj;
  for (size_t i = 0; i < enc.size(); ++i) {
    auto* s = d.input_proj[i]->template as<torch::nn::SequentialImpl>();
    proj.push_back(s ? s->forward(enc[i]) : enc[i]);  // else Identity
  }
  libreyolo::nn::detr::SpatialShapes shapes;
  auto memory = libreyolo::nn::detr::flatten_levels(proj, shapes);
  // The eval size's precomputed mask where the maps are at that size (else, training at another, the maps' own).
  auto valid = d.valid_mask.defined() && d.valid_mask.size(1) == memory.size(1)
                   ? d.valid_mask
                   : libreyolo::nn::detr::query_anchors(shapes, 1e-2, memory.device()).second;
  auto masked = valid.to(memory.scalar_type()) * memory;
  return std::get<0>(d.enc_score_head->forward(d.enc_output ? d.enc_output->forward(masked) : masked).max(-1));  // EC, DEIMv2: none
}

struct SelectionCheck {
  int64_t differing = 0;     // tokens of the forced selection not in our own top-k
  int64_t moved = 0;         // positions where the two selections differ (order included)
  double max_rel_score = 0;  // max |sorted forced scores - our top-k scores| / mean |top-k scores|
};

// The forced selection against our own top-k of `scores`: how many tokens differ, and how far the
// forced tokens' scores (sorted) are from our top-k values (rounding-sized when only near-ties differ).
inline SelectionCheck check_selection(const torch::Tensor& scores, const torch::Tensor& forced) {
  auto [top_v, top_i] = scores.topk(forced.size(1), 1);
  auto forced_v = std::get<0>(scores.gather(1, forced).sort(1, /*descending=*/true));
  SelectionCheck c;
  c.differing = forced.numel() - torch::isin(forced, top_i).sum().item<int64_t>();
  c.moved = (forced != top_i).sum().item<int64_t>();
  c.max_rel_score = ((forced_v - top_v).abs().max() / top_v.abs().mean().clamp_min(1e-30)).item<double>();
  return c;
}

// In a test case: the original's selection `forced` ([B, k]), checked against our own top-k of the decoder's
// scores on the encoder maps `enc` (sorted scores within 1e-5 relative) and given to the decoder's hook.
template <class Decoder>
SelectionCheck force_selection(Decoder& d, const std::vector<torch::Tensor>& enc, const torch::Tensor& forced, const std::string& model) {
  const auto sel = check_selection(selection_scores(d, enc), forced);
  CHECK(sel.max_rel_score <= 1e-5);
  MESSAGE(model << ": the original's selection vs our own top-" << forced.size(1) << ": " << sel.differing << " tokens differ, "
                << sel.moved << " positions; sorted scores within " << sel.max_rel_score << " relative");
  d.forced_topk_indices = forced;
  return sel;
}
// The same with `model`'s recorded selection (tests/detr_topk/<model>.bin).
template <class Decoder>
SelectionCheck force_original_selection(Decoder& d, const std::vector<torch::Tensor>& enc, const std::string& model, int64_t k = 300) {
  return force_selection(d, enc, load(model, k), model);
}

// A module's parameter count with each tensor once (DEIMv2's shared box head is one tensor under several
// names), of every parameter or of the trainable ones.
inline int64_t unique_parameter_count(torch::nn::Module& m, bool trainable_only = false) {
  std::unordered_set<const void*> seen;
  int64_t n = 0;
  for (auto& p : m.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second && (!trainable_only || p.requires_grad())) n += p.numel();
  return n;
}

// In a test case, the DETR fixture tests' first part (tests/dfine_net, tests/ec, tests/deimv2): `net`'s
// parameters and buffers are keys.tsv's (names, shapes, dtypes; kind "param" exactly the first name of
// each of our parameter tensors: keys.tsv lists a shared tensor's other names as buffers, our aliases),
// n_params and n_trainable (config.json's values, written out in the test so that a changed fixture
// shows) are the fixture's and ours, each tensor counted once. Returns whether the names matched
// (compare outputs only then).
inline bool check_state(const fixture::Fixture& f, torch::nn::Module& net, int64_t n_params, int64_t n_trainable) {
  const auto diffs = fixture::name_differences(f, net);
  CHECK_MESSAGE(diffs.empty(), diffs.size() << " differences from keys.tsv:\n" << fixture::join_lines(diffs));
  CHECK(f.n_params() == n_params);
  CHECK(unique_parameter_count(net) == n_params);
  CHECK(net.named_parameters().size() + net.named_buffers().size() == f.keys.size());
  const auto params = net.named_parameters();
  std::unordered_set<const void*> seen;
  std::map<std::string, bool> first;
  for (const auto& p : params) first[p.key()] = seen.insert(p.value().unsafeGetTensorImpl()).second;
  size_t n_param_keys = 0;
  for (const auto& k : f.keys) {
    if (k.kind != "param") continue;
    ++n_param_keys;
    CHECK_MESSAGE(params.contains(k.name), k.name << " is a parameter in the original");
    CHECK_MESSAGE(first[k.name], k.name << " is the first name of its tensor");
  }
  CHECK(n_param_keys == seen.size());
  if (!diffs.empty()) return false;
  CHECK(f.config.at("n_trainable").get<int64_t>() == n_trainable);
  CHECK(unique_parameter_count(net, /*trainable_only=*/true) == n_trainable);
  return true;
}

// In a test case, after the forced comparison: the hook cleared, the decoder's own selection gives the
// same shapes, and the same outputs as `forced_out` where it is the same selection.
template <class Decoder, class Output>
void check_own_selection(Decoder& d, const std::vector<torch::Tensor>& enc, const Output& forced_out, const SelectionCheck& sel) {
  d.forced_topk_indices = torch::Tensor();
  const auto own = d.forward(enc);
  CHECK(own.pred_logits.sizes() == forced_out.pred_logits.sizes());
  CHECK(own.pred_boxes.sizes() == forced_out.pred_boxes.sizes());
  if (sel.moved == 0) CHECK(torch::equal(own.pred_logits, forced_out.pred_logits));
}

// In a test case, the DETR networks' fixture comparison (tests/rtdetr, tests/dfine_net, tests/ec, tests/deimv2;
// `net` has backbone, decoder, encode, decode, forward; filled already; k its query count): in eval mode,
// the backbone's and the encoder's maps and, under the original's selection (forced), the decoder's logits
// and boxes and the model's output, every one per element to 1e-4 relative; forward == decode(encode(x))
// bit for bit; then our own selection (check_own_selection).
template <class Net>
void check_detr_outputs(const fixture::Fixture& f, Net& net, const std::string& model, int64_t k = 300) {
  net->eval();
  torch::NoGradGuard no_grad;
  const auto x = f.input();
  REQUIRE(fixture::compare(f, "input", x, 1e-6).ok);
  const auto bb = [&] {
    if constexpr (requires { net->backbone_features(x); }) return net->backbone_features(x);  // DEIMv2: its two backbone kinds
    else return net->backbone->forward(x);
  }();
  const auto enc = net->encode(x);
  // The original's selection (checked against ours: the same tokens up to near-ties), forced.
  const auto sel = force_original_selection(*net->decoder, enc, model, k);
  const auto dec = net->decoder->forward(enc);
  if constexpr (requires { dec.training; dec.aux_outputs; }) {  // the D-FINE line's output says more
    CHECK_FALSE(dec.training);
    CHECK(dec.aux_outputs.empty());
  }
  CHECK(dec.pred_logits.size(1) == k);
  CHECK(dec.pred_boxes.sizes() == torch::IntArrayRef({1, k, 4}));
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
  const auto result = fixture::compare_all(f, ours, &report);
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
  check_own_selection(*net->decoder, enc, dec, sel);
}

}  // namespace lry_test::detr_topk
