#pragma once
// One training step of a D-FINE-line network against the original's (tests/fixtures/libreyolo/<model>-train, made
// by scripts/fixtures/make_train_case.py from its source; D-FINE, DEIM, DEIMv2, EC). The architecture fixtures check
// the eval forward; a training step takes another path (BatchNorm on batch statistics; the contrastive
// denoising queries in front of the selected ones with their attention mask; every decoder layer's, the pre
// and the encoder outputs the criterion reads) and then the criterion as the family's trainer builds it. Under
// the deterministic fill, on two images with three targets, with the global generator seeded as the original's
// was (the denoising group is the step's only random draw, in the same order from the same generator):
//   - the backbone's and the encoder's maps in training mode, and four BatchNorm running statistics after it;
//   - our decoder run on the original's encoder maps, under the original's query selection (checked to be our
//     own top-k up to rounding): every output of its training dict and every loss term per element to 1e-4 of
//     their mean magnitude, the gradients of the decoder's parameters to 1e-3;
//   - where our own maps agree with the original's to rounding (through_maps), the backbone's and encoder's gradients too,
//     through our maps from the gradients the decoder gave the original's.
// Why the decoder runs on the original's maps: under the fill, the ViT sizes' training-mode encoder amplifies
// rounding ~10^4-fold (the original's own DEIMv2-s: a 1e-6 relative perturbation of its AIFI output moves the
// maps by 4e-3 / 1.5e-2 / 7e-3; each of its blocks, given the original's input, gives the original's output
// exactly), and the query selection's near-ties would turn that into other queries.
#include "support_detr_topk.hpp"
#include "support_fixture.hpp"
#include "support_prereq.hpp"

#include <libreyolo/nn/detr/dfine_criterion.hpp>
#include <libreyolo/nn/detr/dfine_output.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lry_test::train_case {

namespace fx = lry_test::fixture;
namespace detr = libreyolo::nn::detr;
namespace topk = lry_test::detr_topk;

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

inline void add_layer(Named& v, const std::string& p, const detr::DFineLayerOutput& l) {
  v.emplace_back(p + ".pred_logits", l.pred_logits);
  v.emplace_back(p + ".pred_boxes", l.pred_boxes);
  v.emplace_back(p + ".pred_corners", l.pred_corners);
  v.emplace_back(p + ".ref_points", l.ref_points);
  v.emplace_back(p + ".teacher_corners", l.teacher_corners);
  v.emplace_back(p + ".teacher_logits", l.teacher_logits);
}
inline void add_boxes(Named& v, const std::string& p, const detr::DFineBoxes& b) {
  v.emplace_back(p + ".pred_logits", b.pred_logits);
  v.emplace_back(p + ".pred_boxes", b.pred_boxes);
}

// The training output as the original's dict names it (make_fixture.py's flattening).
inline Named output_tensors(const detr::DFineOutput& o) {
  Named v{{"output.pred_logits", o.pred_logits}, {"output.pred_boxes", o.pred_boxes}, {"output.pred_corners", o.pred_corners},
          {"output.ref_points", o.ref_points},   {"output.up", o.up},                 {"output.reg_scale", o.reg_scale}};
  for (size_t i = 0; i < o.aux_outputs.size(); ++i) add_layer(v, "output.aux_outputs." + std::to_string(i), o.aux_outputs[i]);
  add_boxes(v, "output.pre_outputs", o.pre_outputs);
  for (size_t i = 0; i < o.enc_aux_outputs.size(); ++i) add_boxes(v, "output.enc_aux_outputs." + std::to_string(i), o.enc_aux_outputs[i]);
  for (size_t i = 0; i < o.dn_outputs.size(); ++i) add_layer(v, "output.dn_outputs." + std::to_string(i), o.dn_outputs[i]);
  add_boxes(v, "output.dn_pre_outputs", o.dn_pre_outputs);
  return v;
}

// One intra-op thread while in scope (the fixtures were made with one): float32 reductions split over threads
// sum in another order, and the gradients of this deep a step move by up to 1.6e-2 of their mean magnitude
// with it (the original DEIMv2-atto against itself, 1 vs 2 threads).
struct OneThread {
  int before = torch::get_num_threads();
  OneThread() { torch::set_num_threads(1); }
  ~OneThread() { torch::set_num_threads(before); }
};

inline void check_all(const fx::Fixture& f, const Named& ours, double tol) {
  std::string report;
  const auto c = fx::compare_all(f, ours, &report, tol);
  INFO(report);
  CHECK_MESSAGE(c.ok, c.message);
  if (c.ok) MESSAGE(c.message);
}

// The backbone's maps of `net` (DEIMv2: its two backbone kinds behind backbone_features).
template <class Net>
std::vector<torch::Tensor> backbone_maps(Net& net, const torch::Tensor& x) {
  if constexpr (requires { net->backbone_features(x); }) return net->backbone_features(x);
  else return net->backbone->forward(x);
}

// How closely our own maps must follow the original's (the comment at the top says why they may not).
struct MapTolerances {
  std::vector<double> backbone;   // per backbone map
  std::optional<double> encoder;  // the encoder's maps and its BatchNorms' statistics; nullopt: not compared
  bool through_maps = false;      // also the backbone's and encoder's gradients (where the maps agree to rounding)
};

// The step of the fixture `model` ("<name>-train") for the network `make()` builds (80 classes, no ImageNet
// normalisation inside: the original's network is fed directly) and the criterion options the family trains
// with.
template <class Make>
void check_step(const std::string& model, Make make, const detr::DFineCriterionOptions& criterion, const MapTolerances& tol) {
  const bool through_maps = tol.through_maps;
  LRY_OPEN_FIXTURE(f, model);
  CAPTURE(model);
  OneThread one;
  const auto& tc = f.config.at("train_case");
  auto net = make();
  fx::fill(f, *net);
  net->train();

  const auto x0 = f.input();  // the README's input at ref.json's imgsz; image 1 mirrored left-right
  const auto x = torch::cat({x0, x0.flip({-1})}, 0);
  REQUIRE(fx::compare(f, "input", x).ok);
  std::vector<detr::DetrTarget> targets;
  for (int i = 0; i < 2; ++i) {
    const std::string p = "target." + std::to_string(i);
    targets.push_back({f.full(p + ".labels").to(torch::kLong), f.full(p + ".boxes")});
  }
  {  // The backbone's maps in training mode, on a twin (a forward updates the BatchNorms' running statistics).
    auto twin = make();
    fx::fill(f, *twin);
    twin->train();
    torch::NoGradGuard ng;
    const auto maps = backbone_maps(twin, x);
    REQUIRE(maps.size() == tol.backbone.size());
    for (size_t i = 0; i < maps.size(); ++i) check_all(f, {{"child.backbone." + std::to_string(i), maps[i]}}, tol.backbone[i]);
  }
  // Our whole chain; the maps to the model's tolerance (the comment at the top).
  auto net_out = net->forward(x);
  REQUIRE(net_out.pending());
  Named maps;
  for (size_t i = 0; i < net_out.features.size(); ++i) maps.emplace_back("child.encoder." + std::to_string(i), net_out.features[i]);
  if (tol.encoder) check_all(f, maps, *tol.encoder);
  else MESSAGE(model << ": our own encoder maps not compared (the original's move by O(1) under a 1e-6 perturbation)");
  auto buffers = net->named_buffers();
  // The running statistics after the one forward (momentum 0.1): the backbone's first two, the encoder's two.
  const double loosest_backbone = *std::max_element(tol.backbone.begin(), tol.backbone.end());
  size_t bn_checked = 0;
  for (const auto& [name, r] : f.refs) {
    if (name.rfind("bn.", 0) != 0) continue;
    const auto key = name.substr(3);
    REQUIRE_MESSAGE(buffers.contains(key), name);
    const bool encoder = key.rfind("encoder.", 0) == 0;
    if (encoder && !tol.encoder) continue;
    check_all(f, {{name, buffers[key]}}, encoder ? std::max(1e-4, *tol.encoder) : loosest_backbone);
    ++bn_checked;
  }
  CHECK(bn_checked == (tol.encoder ? 4u : 2u));

  // Our decoder on the original's maps, under the original's selection.
  std::vector<torch::Tensor> given;
  for (size_t i = 0; i < net_out.features.size(); ++i)
    given.push_back(f.full("child.encoder." + std::to_string(i)).requires_grad_(true));
  net_out.features = given;
  {
    torch::NoGradGuard ng;
    topk::force_selection(*net->decoder, given, f.full("selection").to(torch::kLong), model);
  }
  torch::manual_seed(tc.at("seed").get<uint64_t>());
  const auto& out = net_out.run(&targets);
  REQUIRE(out.training);
  // The denoising group: two images with 2 and 1 targets give 100 / 2 = 50 groups of 2 x 2 tokens.
  REQUIRE(out.dn_meta.has_value());
  CHECK(out.dn_meta->num_group == 50);
  CHECK(out.dn_meta->num_denoising == 200);
  net->decoder->forced_topk_indices = torch::Tensor();
  const auto outs = output_tensors(out);
  CHECK(outs.size() == 6 + 6 * out.aux_outputs.size() + 2 + 2 + 6 * out.dn_outputs.size() + 2);
  CHECK(out.dn_outputs.size() == out.aux_outputs.size() + 1);
  check_all(f, outs, 1e-4);

  // The criterion as the family trains the size, epoch 0.
  detr::DFineCriterion crit(criterion);
  const auto l = crit(out, targets);
  CHECK(static_cast<int64_t>(l.terms.size()) == tc.at("num_terms").get<int64_t>());
  Named terms;
  for (const auto& [name, v] : l.terms) terms.emplace_back("loss." + name, v.reshape({1}));
  terms.emplace_back("loss_total", l.total.reshape({1}));
  check_all(f, terms, 1e-4);

  l.total.backward();
  if (through_maps) {  // the chain rule through our own maps, which agree with the original's here
    std::vector<torch::Tensor> grads_of_maps;
    for (const auto& g : given) grads_of_maps.push_back(g.grad());
    std::vector<torch::Tensor> ours;
    for (const auto& [_, m] : maps) ours.push_back(m);
    torch::autograd::backward(ours, grads_of_maps);
  }
  auto params = net->named_parameters();
  Named grads;
  for (const auto& n : tc.at("grads")) {
    const auto name = n.get<std::string>();
    REQUIRE_MESSAGE(params.contains(name), name);
    if (!through_maps && name.rfind("decoder.", 0) != 0) continue;
    REQUIRE_MESSAGE(params[name].grad().defined(), name);
    grads.emplace_back("grad." + name, params[name].grad());
  }
  CHECK(grads.size() == (through_maps ? 10 : 6));
  // Gradients to 1e-3: the backward through training-mode BatchNorms is that sensitive to the order of float32
  // sums (ours vs the original: 2.0e-4 at DEIMv2-atto's last backbone kernel, where the original against itself with 1
  // vs 2 threads moves 8.6e-3).
  check_all(f, grads, 1e-3);
}

}  // namespace lry_test::train_case
