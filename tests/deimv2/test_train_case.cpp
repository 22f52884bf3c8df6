// One DEIMv2 training step against the original's (tests/fixtures/libreyolo/deimv2-<size>-train, made by
// scripts/fixtures/make_train_case.py from its source): the architecture fixtures check the eval forward; a
// training step takes another path (BatchNorm on batch statistics; the contrastive denoising queries in front
// of the selected ones with their attention mask; every decoder layer's, the pre and the encoder outputs the
// criterion reads) and then the criterion as DEIMv2Trainer builds it for the size. Under the deterministic
// fill, on two images with three targets, with the global generator seeded as the original's was (the
// denoising group is the step's only random draw, in the same order from the same generator):
//   - the backbone's and the encoder's maps in training mode, and four BatchNorm running statistics after it;
//   - our decoder run on the original's encoder maps: every output of its training dict and every loss term
//     per element to 1e-4 of their mean magnitude, the gradients of the decoder's parameters to 1e-3;
//   - where our own maps equal the original's (atto), the backbone's and encoder's gradients too, through our
//     maps from the gradients the decoder gave the original's.
// Why the decoder runs on the original's maps: under the fill, the ViT sizes' training-mode encoder amplifies
// rounding ~10^4-fold (the original's own: a 1e-6 relative perturbation of its AIFI output moves s's maps by
// 4e-3 / 1.5e-2 / 7e-3; each of its blocks, given the original's input, gives the original's output exactly),
// and the selection's near-ties would turn that into other queries.
#include "support_fixture.hpp"
#include "support_prereq.hpp"

#include <libreyolo/families/deimv2/family.hpp>
#include <libreyolo/families/deimv2/network.hpp>

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using libreyolo::families::deimv2::DEIMv2;
using libreyolo::families::deimv2::DEIMv2Options;
namespace fx = lry_test::fixture;
namespace detr = libreyolo::nn::detr;

namespace {

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

void add_layer(Named& v, const std::string& p, const detr::DFineLayerOutput& l) {
  v.emplace_back(p + ".pred_logits", l.pred_logits);
  v.emplace_back(p + ".pred_boxes", l.pred_boxes);
  v.emplace_back(p + ".pred_corners", l.pred_corners);
  v.emplace_back(p + ".ref_points", l.ref_points);
  v.emplace_back(p + ".teacher_corners", l.teacher_corners);
  v.emplace_back(p + ".teacher_logits", l.teacher_logits);
}
void add_boxes(Named& v, const std::string& p, const detr::DFineBoxes& b) {
  v.emplace_back(p + ".pred_logits", b.pred_logits);
  v.emplace_back(p + ".pred_boxes", b.pred_boxes);
}

// The training output as the original's dict names it (make_fixture.py's flattening).
Named output_tensors(const detr::DFineOutput& o) {
  Named v{{"output.pred_logits", o.pred_logits}, {"output.pred_boxes", o.pred_boxes}, {"output.pred_corners", o.pred_corners},
          {"output.ref_points", o.ref_points},   {"output.up", o.up},                 {"output.reg_scale", o.reg_scale}};
  for (size_t i = 0; i < o.aux_outputs.size(); ++i) add_layer(v, "output.aux_outputs." + std::to_string(i), o.aux_outputs[i]);
  add_boxes(v, "output.pre_outputs", o.pre_outputs);
  for (size_t i = 0; i < o.enc_aux_outputs.size(); ++i) add_boxes(v, "output.enc_aux_outputs." + std::to_string(i), o.enc_aux_outputs[i]);
  for (size_t i = 0; i < o.dn_outputs.size(); ++i) add_layer(v, "output.dn_outputs." + std::to_string(i), o.dn_outputs[i]);
  add_boxes(v, "output.dn_pre_outputs", o.dn_pre_outputs);
  return v;
}

// One intra-op thread while in scope (the fixture was made with one): float32 reductions split over threads
// sum in another order, and the gradients of this deep a step move by up to 1.6e-2 of their mean magnitude
// with it (the original against itself, 1 vs 2 threads).
struct OneThread {
  int before = torch::get_num_threads();
  OneThread() { torch::set_num_threads(1); }
  ~OneThread() { torch::set_num_threads(before); }
};

void check_all(const fx::Fixture& f, const Named& ours, double tol) {
  std::string report;
  const auto c = fx::compare_all(f, ours, &report, tol);
  INFO(report);
  CHECK_MESSAGE(c.ok, c.message);
  if (c.ok) MESSAGE(c.message);
}

// map_tol: our encoder's maps against the original's; through_maps: also the backbone's and encoder's
// gradients (where the maps agree exactly).
void check_step(const std::string& size, double map_tol, bool through_maps) {
  const std::string model = "deimv2-" + size + "-train";
  LRY_OPEN_FIXTURE(f, model);
  CAPTURE(model);
  OneThread one;
  const auto& tc = f.config.at("train_case");
  DEIMv2 net(DEIMv2Options{size, 80, 0, /*imagenet_norm=*/false});
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
    DEIMv2 twin(DEIMv2Options{size, 80, 0, /*imagenet_norm=*/false});
    fx::fill(f, *twin);
    twin->train();
    torch::NoGradGuard ng;
    const auto maps = twin->backbone_features(x);
    Named bb;
    for (size_t i = 0; i < maps.size(); ++i) bb.emplace_back("child.backbone." + std::to_string(i), maps[i]);
    check_all(f, bb, 1e-4);
  }
  // Our whole chain; the maps to the size's tolerance (the comment at the top).
  auto net_out = net->forward(x);
  REQUIRE(net_out.pending());
  Named maps;
  for (size_t i = 0; i < net_out.features.size(); ++i) maps.emplace_back("child.encoder." + std::to_string(i), net_out.features[i]);
  check_all(f, maps, map_tol);
  auto buffers = net->named_buffers();
  Named bn;  // the running statistics after the one forward (momentum 0.1)
  for (const auto& [name, r] : f.refs) {
    if (name.rfind("bn.", 0) != 0) continue;
    REQUIRE_MESSAGE(buffers.contains(name.substr(3)), name);
    bn.emplace_back(name, buffers[name.substr(3)]);
  }
  CHECK(bn.size() == 4);
  check_all(f, bn, 1e-4);

  // Our decoder on the original's maps.
  std::vector<torch::Tensor> given;
  for (size_t i = 0; i < net_out.features.size(); ++i)
    given.push_back(f.full("child.encoder." + std::to_string(i)).requires_grad_(true));
  net_out.features = given;
  torch::manual_seed(tc.at("seed").get<uint64_t>());
  const auto& out = net_out.run(&targets);
  REQUIRE(out.training);
  // The denoising group: two images with 2 and 1 targets give 100 / 2 = 50 groups of 2 x 2 tokens.
  REQUIRE(out.dn_meta.has_value());
  CHECK(out.dn_meta->num_group == 50);
  CHECK(out.dn_meta->num_denoising == 200);
  const auto outs = output_tensors(out);
  CHECK(outs.size() == 6 + 6 * out.aux_outputs.size() + 2 + 2 + 6 * out.dn_outputs.size() + 2);
  CHECK(out.dn_outputs.size() == out.aux_outputs.size() + 1);
  check_all(f, outs, 1e-4);

  // The criterion as the family trains the size, epoch 0.
  detr::DFineCriterion crit(libreyolo::DEIMv2Family::criterion_options(size, 80));
  const auto l = crit(out, targets);
  CHECK(static_cast<int64_t>(l.terms.size()) == tc.at("num_terms").get<int64_t>());
  Named terms;
  for (const auto& [name, v] : l.terms) terms.emplace_back("loss." + name, v.reshape({1}));
  terms.emplace_back("loss_total", l.total.reshape({1}));
  check_all(f, terms, 1e-4);

  l.total.backward();
  if (through_maps) {  // the chain rule through our own maps, which equal the original's here
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
  // sums (ours vs the original: 2.0e-4 at atto's last backbone kernel, where the original against itself with 1
  // vs 2 threads moves 8.6e-3).
  check_all(f, grads, 1e-3);
}

}  // namespace

TEST_CASE("deimv2-atto: one training step (denoising, every output, the loss terms, gradients) equals the original's" *
          lry_test::needs({lry_test::Need::fixtures})) {
  check_step("atto", 1e-4, true);
}

TEST_CASE("deimv2-s: one training step (ViT + STA, denoising, the local terms on GO-LSD's union) equals the original's" *
          lry_test::needs({lry_test::Need::fixtures})) {
  // The maps to 5e-2: the measured 2.4e-3 / 1.1e-2 / 5.2e-3, the amplification the comment at the top gives.
  check_step("s", 5e-2, false);
}
