// The D-FINE-line network in training mode (families/dfine/network.hpp): the pending decoder, the
// output dict the losses read (nn/detr/dfine_output.hpp) with its shapes, gradients to the trainable
// parameters only, and the eval-mode output shapes away from the fixture's size.
#include "support.hpp"

#include <libreyolo/families/dfine/network.hpp>
#include <libreyolo/nn/detr/dfine_criterion.hpp>
#include <libreyolo/precision/amp.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using libreyolo::families::dfine::DFine;
using libreyolo::families::dfine::DFineOptions;
using libreyolo::families::dfine::Variant;
namespace detr = libreyolo::nn::detr;

namespace {
std::vector<detr::DetrTarget> two_images() {
  detr::DetrTarget a, b;
  a.labels = torch::tensor({0, 2}, torch::kLong);
  a.boxes = torch::tensor({0.3, 0.3, 0.2, 0.2, 0.6, 0.7, 0.3, 0.4}, torch::kFloat32).reshape({2, 4});
  b.labels = torch::tensor({1}, torch::kLong);
  b.boxes = torch::tensor({0.5, 0.5, 0.5, 0.5}, torch::kFloat32).reshape({1, 4});
  return {a, b};
}
bool shape_is(const torch::Tensor& t, std::vector<int64_t> s) { return t.defined() && t.sizes() == torch::IntArrayRef(s); }
}  // namespace

TEST_CASE("D-FINE-n in training mode: the decoder waits for the targets; every output of the dict has its shape") {
  torch::manual_seed(0);
  const int64_t C = 3, Q = 300, R = 32;
  DFine net(DFineOptions{"n", C, Variant::dfine, 640});
  net->train();
  auto x = torch::rand({2, 3, 320, 320});
  const auto out = net->forward(x);
  REQUIRE(out.pending());
  CHECK(out.input_hw == std::array<int64_t, 2>{320, 320});
  REQUIRE(out.features.size() == 2);  // strides 16 and 32
  CHECK(shape_is(out.features[0], {2, 128, 20, 20}));
  CHECK(shape_is(out.features[1], {2, 128, 10, 10}));
  const auto targets = two_images();
  const auto& r = out.run(&targets);
  CHECK_FALSE(out.pending());
  CHECK(&out.run(&targets) == &r);  // runs once
  CHECK(r.training);
  CHECK(shape_is(r.pred_logits, {2, Q, C}));
  CHECK(shape_is(r.pred_boxes, {2, Q, 4}));
  CHECK(shape_is(r.pred_corners, {2, Q, 4 * (R + 1)}));
  CHECK(shape_is(r.ref_points, {2, Q, 4}));
  CHECK(r.reg_max == R);
  CHECK(r.up.item<double>() == doctest::Approx(0.5));
  CHECK(r.reg_scale.item<double>() == doctest::Approx(4.0));
  REQUIRE(r.aux_outputs.size() == 2);  // layers 0, 1 of 3
  for (const auto& a : r.aux_outputs) {
    CHECK(shape_is(a.pred_logits, {2, Q, C}));
    CHECK(shape_is(a.pred_boxes, {2, Q, 4}));
    CHECK(shape_is(a.pred_corners, {2, Q, 4 * (R + 1)}));
    CHECK(a.ref_points.is_same(r.ref_points));
    CHECK(a.teacher_corners.is_same(r.pred_corners));
    CHECK(a.teacher_logits.is_same(r.pred_logits));
  }
  CHECK(shape_is(r.pre_outputs.pred_logits, {2, Q, C}));
  CHECK(shape_is(r.pre_outputs.pred_boxes, {2, Q, 4}));
  REQUIRE(r.enc_aux_outputs.size() == 1);
  CHECK(shape_is(r.enc_aux_outputs[0].pred_logits, {2, Q, C}));
  CHECK(shape_is(r.enc_aux_outputs[0].pred_boxes, {2, Q, 4}));
  CHECK_FALSE(r.class_agnostic);
  // Denoising: the largest image holds 2 boxes -> 100 / 2 = 50 groups of 2 x 2 queries = 200.
  REQUIRE(r.dn_meta.has_value());
  const int64_t D = 200;
  CHECK(r.dn_meta->num_denoising == D);
  CHECK(r.dn_meta->num_group == 50);
  REQUIRE(r.dn_outputs.size() == 3);  // every layer
  for (const auto& a : r.dn_outputs) {
    CHECK(shape_is(a.pred_logits, {2, D, C}));
    CHECK(shape_is(a.pred_boxes, {2, D, 4}));
    CHECK(shape_is(a.pred_corners, {2, D, 4 * (R + 1)}));
    CHECK(shape_is(a.ref_points, {2, D, 4}));
    CHECK(a.teacher_corners.is_same(r.dn_outputs.back().pred_corners));
  }
  CHECK(shape_is(r.dn_pre_outputs.pred_logits, {2, D, C}));
  CHECK(shape_is(r.dn_pre_outputs.pred_boxes, {2, D, 4}));
  // Reference points are detached; boxes and corners carry gradients.
  CHECK_FALSE(r.ref_points.requires_grad());
  CHECK(r.pred_boxes.requires_grad());
  CHECK(r.pred_corners.requires_grad());
  // A backward through every output reaches the trainable parameters, not the frozen stem.
  auto total = r.pred_logits.sum() + r.pred_boxes.sum() + r.pred_corners.sum() + r.pre_outputs.pred_boxes.sum() +
               r.enc_aux_outputs[0].pred_logits.sum() + r.dn_outputs[0].pred_boxes.sum();
  for (const auto& a : r.aux_outputs) total = total + a.pred_logits.sum() + a.pred_boxes.sum();
  total.backward();
  CHECK_FALSE(net->backbone->stem->stem1->conv->weight.grad().defined());
  CHECK(net->backbone->stages[3]->as<detr::HGStageImpl>()->downsample->conv->weight.grad().defined());
  CHECK(net->decoder->enc_score_head->weight.grad().defined());
  CHECK_FALSE(net->decoder->up.grad().defined());
}

TEST_CASE("D-FINE-line training without boxes: no denoising part") {
  DFine net(DFineOptions{"n", 2, Variant::deim, 640});
  net->train();
  detr::DetrTarget empty;
  empty.labels = torch::zeros({0}, torch::kLong);
  empty.boxes = torch::zeros({0, 4});
  const std::vector<detr::DetrTarget> targets{empty};
  const auto out = net->forward(torch::rand({1, 3, 320, 320}));
  const auto& r = out.run(&targets);
  CHECK_FALSE(r.dn_meta.has_value());
  CHECK(r.dn_outputs.empty());
  CHECK_FALSE(r.dn_pre_outputs.defined());
  CHECK(r.aux_outputs.size() == 2);
  CHECK(r.pred_logits.size(1) == 300);
}

TEST_CASE("D-FINE-line eval output: [B, Q, C] logits and [B, Q, 4] boxes; fewer tokens than queries") {
  torch::NoGradGuard ng;
  for (auto [size, variant] : {std::pair{std::string("n"), Variant::dfine}, std::pair{std::string("s"), Variant::rtdetrv4}}) {
    CAPTURE(size);
    DFine net(DFineOptions{size, 5, variant, 640});
    net->eval();
    auto x = torch::rand({2, 3, 320, 320});
    const auto out = net->forward(x);
    REQUIRE_FALSE(out.pending());
    CHECK(shape_is(out.result->pred_logits, {2, 300, 5}));
    CHECK(shape_is(out.result->pred_boxes, {2, 300, 4}));
    CHECK_FALSE(out.result->training);
    CHECK(out.result->aux_outputs.empty());
    CHECK_FALSE(out.result->pred_corners.defined());
    // encode / decode == forward.
    const auto split = net->decode(net->encode(x));
    CHECK(torch::equal(split.result->pred_logits, out.result->pred_logits));
    CHECK(torch::equal(split.result->pred_boxes, out.result->pred_boxes));
  }
  // 160 px on n: 10 x 10 + 5 x 5 = 125 tokens, fewer than the 300 queries: all of them are the queries.
  DFine net(DFineOptions{"n", 5, Variant::dfine, 640});
  net->eval();
  const auto out = net->forward(torch::rand({1, 3, 160, 160}));
  CHECK(shape_is(out.result->pred_logits, {1, 125, 5}));
  CHECK(shape_is(out.result->pred_boxes, {1, 125, 4}));
  CHECK(torch::isfinite(out.result->pred_boxes).all().item<bool>());
}

TEST_CASE("D-FINE network: a clone keeps decoder.decoder.up / reg_scale the decoder's own tensors and the stem frozen") {
  DFine net(DFineOptions{"n", 4, Variant::dfine, 640});
  {
    torch::NoGradGuard ng;
    net->decoder->enc_score_head->bias.fill_(0.25);
  }
  auto copy = std::dynamic_pointer_cast<libreyolo::families::dfine::DFineImpl>(net->clone());
  REQUIRE(copy);
  CHECK(torch::equal(copy->decoder->enc_score_head->bias, net->decoder->enc_score_head->bias));
  CHECK_FALSE(copy->decoder->enc_score_head->bias.is_same(net->decoder->enc_score_head->bias));
  CHECK(copy->named_parameters().size() == net->named_parameters().size());
  CHECK(copy->named_buffers().size() == net->named_buffers().size());
  int64_t trainable = 0, trainable_copy = 0;
  for (auto& p : net->parameters()) trainable += p.requires_grad() ? p.numel() : 0;
  for (auto& p : copy->parameters()) trainable_copy += p.requires_grad() ? p.numel() : 0;
  CHECK(trainable_copy == trainable);
  CHECK_FALSE(copy->backbone->stem->stem1->conv->weight.requires_grad());
  // The chain the capture region reads is the copy's own backbone + encoder.
  CHECK(copy->encoder().named_parameters().size() > 0);
  CHECK(copy->encoder().named_parameters()["backbone.stem.stem1.conv.weight"].is_same(copy->backbone->stem->stem1->conv->weight));
  CHECK(copy->decoder->decoder->up.is_same(copy->decoder->up));
  CHECK(copy->decoder->decoder->reg_scale.is_same(copy->decoder->reg_scale));
  CHECK_FALSE(copy->decoder->up.is_same(net->decoder->up));
  CHECK(torch::equal(copy->decoder->reg_scale, net->decoder->reg_scale));
  CHECK_FALSE(copy->decoder->up.requires_grad());
}

TEST_CASE("D-FINE network: unknown size") {
  CHECK_THROWS_WITH_AS(DFine(DFineOptions{"q", 80, Variant::dfine, 640}), doctest::Contains("allowed: n, s, m, l, x"), libreyolo::ConfigError);
  CHECK_THROWS_AS(DFine(DFineOptions{"b0", 80, Variant::deim, 640}), libreyolo::ConfigError);
}

LRY_GPU_SUITE {
  TEST_CASE("D-FINE-line network on CUDA: eval matches the CPU's encoder maps; a training step under fp16 autocast stays finite") {
    LRY_REQUIRE_CUDA();
    torch::manual_seed(0);
    for (auto [size, variant] : {std::pair{std::string("n"), Variant::dfine}, std::pair{std::string("n"), Variant::deim},
                                 std::pair{std::string("s"), Variant::rtdetrv4}}) {
      CAPTURE(size);
      DFine net(DFineOptions{size, 8, variant, 640});
      auto x = torch::rand({2, 3, 640, 640});
      std::vector<torch::Tensor> cpu_maps;
      {
        torch::NoGradGuard ng;
        net->eval();
        cpu_maps = net->encode(x);
      }
      net->to(torch::kCUDA);
      {
        torch::NoGradGuard ng;
        const auto gx = x.to(torch::kCUDA);
        const auto maps = net->encode(gx);
        REQUIRE(maps.size() == cpu_maps.size());
        for (size_t i = 0; i < maps.size(); ++i) {
          const double rel = ((maps[i].cpu() - cpu_maps[i]).abs().max() / cpu_maps[i].abs().mean()).item<double>();
          CHECK(rel < 2e-2);  // TF32 convolutions allowed
        }
        const auto out = net->forward(gx);
        CHECK(out.result->pred_logits.sizes() == torch::IntArrayRef({2, 300, 8}));
        CHECK(torch::isfinite(out.result->pred_boxes).all().item<bool>());
      }
      net->train();
      std::vector<detr::DetrTarget> targets = two_images();
      for (auto& t : targets) t.labels = t.labels.to(torch::kCUDA), t.boxes = t.boxes.to(torch::kCUDA);
      libreyolo::precision::AutocastGuard guard(torch::kHalf, true);
      const auto out = net->forward(x.to(torch::kCUDA));
      const auto& r = out.run(&targets);
      auto total = r.pred_logits.to(torch::kFloat32).sum() + r.pred_boxes.to(torch::kFloat32).sum() + r.pred_corners.to(torch::kFloat32).sum();
      for (const auto& a : r.aux_outputs) total = total + a.pred_boxes.to(torch::kFloat32).sum();
      for (const auto& a : r.dn_outputs) total = total + a.pred_logits.to(torch::kFloat32).sum();
      CHECK(std::isfinite(total.item<double>()));
      total.backward();
      for (const auto& p : net->named_parameters())
        if (p.value().grad().defined()) {
          CAPTURE(p.key());
          CHECK(torch::isfinite(p.value().grad()).all().item<bool>());
        }
    }
  }
}

LRY_GPU_SUITE {
  // Fidelity row 38: under fp16 autocast the AIFI layer's query is the fp16 map plus the float32 position embedding,
  // summed in float32 (as the original's `src + pos_embed`), and rounded once, by the in-projection's autocast. The
  // layer's output equals the same computation with that query built by hand, and differs from the old one (the
  // embedding rounded to fp16 first), so the test tells the two apart.
  TEST_CASE("AIFI layer under fp16 autocast: the position embedding is added in float32 and rounded once (fidelity row 38)") {
    LRY_REQUIRE_CUDA();
    torch::manual_seed(3);
    detr::TransformerEncoderLayer layer(64, 8, 128, detr::Act::gelu);
    layer->to(torch::kCUDA);
    layer->eval();
    const auto src = torch::randn({2, 49, 64}).to(torch::kCUDA).to(torch::kHalf);
    const auto pos = (torch::randn({1, 49, 64}) * 3.1).to(torch::kCUDA);  // float32, as the 2-d sin-cos embedding
    torch::NoGradGuard ng;
    libreyolo::precision::AutocastGuard guard(torch::kHalf, true);
    auto by_hand = [&](const torch::Tensor& q) {
      auto x = layer->norm1->forward(src + layer->self_attn->forward(q, q, src));
      return layer->norm2->forward(x + layer->linear2->forward(detr::activate(layer->linear1->forward(x), detr::Act::gelu)));
    };
    const auto out = layer->forward(src, pos);
    const auto in_float32 = by_hand(src.to(torch::kFloat32) + pos);
    const auto rounded_first = by_hand(src + pos.to(torch::kHalf));
    CHECK(out.equal(in_float32));
    CHECK_FALSE(out.equal(rounded_first));
  }
}

TEST_CASE("D-FINE decoder: denoising padded to a fixed capacity leaves the real outputs and every loss term unchanged") {
  // Targets {2, 1}: G = 2, 50 groups, 200 tokens -- the capacity of 3 slots is 200 too, so take G = 3
  // ({3, 1}: 33 groups, 198 tokens) against a capacity of 200. Noise off: both runs see the same queries.
  detr::DFineDecoderOptions o;
  o.num_classes = 3;
  o.label_noise_ratio = 0;
  o.box_noise_scale = 0;
  o.eval_spatial_size = 0;
  torch::manual_seed(0);
  detr::DFineDecoder dec(o);
  dec->train();
  std::vector<torch::Tensor> feats{torch::randn({2, 128, 8, 8}), torch::randn({2, 128, 4, 4})};
  auto targets = two_images();
  targets[0].labels = torch::tensor({0, 2, 1}, torch::kLong);
  targets[0].boxes = torch::tensor({0.3, 0.3, 0.2, 0.2, 0.6, 0.7, 0.3, 0.4, 0.2, 0.7, 0.1, 0.2}, torch::kFloat32).reshape({3, 4});
  const auto exact = dec->forward(feats, &targets);
  dec->set_denoising_capacity(detr::denoising_capacity(3, 100));
  const auto padded = dec->forward(feats, &targets);
  REQUIRE(exact.dn_meta.has_value());
  REQUIRE(padded.dn_meta.has_value());
  CHECK(exact.dn_meta->num_denoising == 198);
  CHECK(padded.dn_meta->num_denoising == 200);
  CHECK(torch::allclose(padded.pred_logits, exact.pred_logits, 1e-5, 1e-5));
  CHECK(torch::allclose(padded.pred_corners, exact.pred_corners, 1e-5, 1e-5));
  REQUIRE(padded.dn_outputs.size() == exact.dn_outputs.size());
  for (size_t l = 0; l < exact.dn_outputs.size(); ++l) {
    CHECK(torch::allclose(padded.dn_outputs[l].pred_logits.narrow(1, 0, 198), exact.dn_outputs[l].pred_logits, 1e-5, 1e-5));
    CHECK(torch::allclose(padded.dn_outputs[l].pred_corners.narrow(1, 0, 198), exact.dn_outputs[l].pred_corners, 1e-5, 1e-5));
  }
  // Both criteria kinds (D-FINE's VFL with FGL / DDF, DEIM's MAL): every named term equal.
  for (auto cls : {detr::DFineClassLoss::vfl, detr::DFineClassLoss::mal}) {
    detr::DFineCriterionOptions co;
    co.num_classes = 3;
    co.class_loss = cls;
    if (cls == detr::DFineClassLoss::mal) co.gamma = 1.5;
    const detr::DFineCriterion crit(co);
    const auto le = crit(exact, targets), lp = crit(padded, targets);
    REQUIRE(le.terms.size() == lp.terms.size());
    for (size_t k = 0; k < le.terms.size(); ++k) {
      CAPTURE(le.terms[k].first);
      CHECK(lp.terms[k].first == le.terms[k].first);
      CHECK(lp.terms[k].second.item<double>() == doctest::Approx(le.terms[k].second.item<double>()).epsilon(1e-5).scale(1e-6));
    }
  }
}
