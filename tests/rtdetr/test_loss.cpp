// The DETR pieces by hand: the set loss (Hungarian matching, varifocal, L1, GIoU) on a case small
// enough to compute on paper, the contrastive denoising group whose size follows the batch's largest
// ground-truth count, its attention mask, and the decoder's training output with denoising queries.
#include <libreyolo/assign/hungarian.hpp>
#include <libreyolo/nn/detr/criterion.hpp>
#include <libreyolo/nn/detr/decoder.hpp>
#include <libreyolo/nn/detr/denoising.hpp>
#include <libreyolo/nn/detr/dfine_decoder.hpp>
#include <libreyolo/nn/detr/device_targets.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

namespace detr = libreyolo::nn::detr;

namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
// BCE-with-logits of x against target t, weighted (the varifocal element).
double vfl_element(double x, double t, double onehot) {
  const double p = sigmoid(x);
  const double w = 0.75 * p * p * (1 - onehot) + t;
  return -w * (t * std::log(p) + (1 - t) * std::log(1 - p));
}

detr::DetrTarget target(std::vector<int64_t> labels, std::vector<float> boxes) {
  const auto n = static_cast<int64_t>(labels.size());
  return {torch::tensor(labels, torch::kLong), torch::tensor(boxes).view({n, 4})};
}

}  // namespace

TEST_CASE("the set loss on a hand-made case: one target, two queries, two classes") {
  // Target: class 1 at (0.5, 0.5, 0.2, 0.2). Query 1 (0.5, 0.5, 0.2, 0.4) overlaps it (IoU ~ 0.5), query
  // 0 (0.2, 0.2, 0.1, 0.1) does not: the matching takes query 1.
  detr::DetrOutput out;
  out.pred_logits = torch::tensor({1.0f, -1.0f, 0.0f, 2.0f}).view({1, 2, 2});
  out.pred_boxes = torch::tensor({0.2f, 0.2f, 0.1f, 0.1f, 0.5f, 0.5f, 0.2f, 0.4f}).view({1, 2, 4});
  out.pred_logits.requires_grad_(true);
  const std::vector<detr::DetrTarget> t{target({1}, {0.5f, 0.5f, 0.2f, 0.2f})};
  detr::SetCriterionOptions o;
  o.num_classes = 2;
  detr::SetCriterion crit(o);
  const auto idx = crit.match({{out.pred_logits, out.pred_boxes}}, t);
  REQUIRE(idx.size() == 1);
  REQUIRE(idx[0].size() == 1);
  CHECK(idx[0][0].first.item<int64_t>() == 1);
  CHECK(idx[0][0].second.item<int64_t>() == 0);

  const auto l = crit(out, t);
  // Pred xyxy (0.4, 0.3, 0.6, 0.7), target (0.4, 0.4, 0.6, 0.6): intersection 0.04, union 0.08, the
  // enclosing box is the prediction, so GIoU = IoU = 0.04 / (0.08 + 1e-6). L1 = |0.4 - 0.2| = 0.2.
  const double iou = 0.04 / (0.08 + 1e-6);
  const double bbox = 5 * 0.2, giou = 2 * (1 - iou);
  // Varifocal over Q x C = 2 x 2, mean over queries x Q / num_boxes (1) = the plain sum.
  const double vfl = vfl_element(1.0, 0, 0) + vfl_element(-1.0, 0, 0) + vfl_element(0.0, 0, 0) + vfl_element(2.0, iou, 1);
  CHECK(l.items[0].item<double>() == doctest::Approx(vfl).epsilon(1e-5));
  CHECK(l.items[1].item<double>() == doctest::Approx(bbox).epsilon(1e-5));
  CHECK(l.items[2].item<double>() == doctest::Approx(giou).epsilon(1e-5));
  CHECK(l.total.item<double>() == doctest::Approx(vfl + bbox + giou).epsilon(1e-5));
  // It is differentiable in the logits; the matched (query 1, class 1) logit with target ~0.5 and
  // p = sigmoid(2) is pushed down.
  l.total.backward();
  CHECK(out.pred_logits.grad()[0][1][1].item<double>() > 0);

  // An aux output equal to the main one adds the same terms again; no targets at all gives only the
  // varifocal background term (boxes 0).
  detr::DetrOutput two = out;
  two.aux.emplace_back(out.pred_logits.detach(), out.pred_boxes);
  CHECK(crit(two, t).items[1].item<double>() == doctest::Approx(2 * bbox).epsilon(1e-5));
  const auto none = crit(out, {target({}, {})});
  CHECK(none.items[1].item<double>() == 0);
  CHECK(none.items[2].item<double>() == 0);
  CHECK(none.items[0].item<double>() ==
        doctest::Approx(vfl_element(1.0, 0, 0) + vfl_element(-1.0, 0, 0) + vfl_element(0.0, 0, 0) + vfl_element(2.0, 0, 0)).epsilon(1e-5));
}

TEST_CASE("the matching is one-to-one and per image: two images, three targets") {
  detr::SetCriterionOptions o;
  o.num_classes = 3;
  detr::SetCriterion crit(o);
  // Image 0 has targets A (class 0) and B (class 2), image 1 target C (class 1); each image's queries
  // hold the targets' boxes exactly in a shuffled order, plus a distractor.
  auto boxes = torch::tensor({0.7f, 0.7f, 0.2f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.3f, 0.3f, 0.2f, 0.2f,  // image 0: B, x, A
                              0.5f, 0.5f, 0.4f, 0.4f, 0.9f, 0.1f, 0.1f, 0.1f, 0.2f, 0.8f, 0.1f, 0.1f}) // image 1: C, x, x
                   .view({2, 3, 4});
  auto logits = torch::zeros({2, 3, 3});
  std::vector<detr::DetrTarget> t{target({0, 2}, {0.3f, 0.3f, 0.2f, 0.2f, 0.7f, 0.7f, 0.2f, 0.2f}), target({1}, {0.5f, 0.5f, 0.4f, 0.4f})};
  const auto idx = crit.match({{logits, boxes}}, t)[0];
  REQUIRE(idx.size() == 2);
  CHECK(idx[0].first.equal(torch::tensor({0, 2}, torch::kLong)));   // queries ascending
  CHECK(idx[0].second.equal(torch::tensor({1, 0}, torch::kLong)));  // query 0 <- B, query 2 <- A
  CHECK(idx[1].first.equal(torch::tensor({0}, torch::kLong)));
  CHECK(idx[1].second.equal(torch::tensor({0}, torch::kLong)));
  detr::DetrOutput out;
  out.pred_logits = logits;
  out.pred_boxes = boxes;
  const auto l = crit(out, t);
  CHECK(l.items[1].item<double>() == doctest::Approx(0.0).epsilon(1e-6));          // exact boxes: L1 0
  CHECK(l.items[2].item<double>() == doctest::Approx(0.0).scale(1).epsilon(1e-3));  // and GIoU ~1
}

TEST_CASE("denoising: the group count follows the batch's largest ground-truth count") {
  torch::manual_seed(3);
  torch::nn::Embedding embed(torch::nn::EmbeddingOptions(4, 8).padding_idx(3));
  auto boxes = [](int n) {
    std::vector<float> b;
    for (int i = 0; i < n; ++i) b.insert(b.end(), {0.1f + 0.1f * static_cast<float>(i % 8), 0.5f, 0.1f, 0.2f});
    return b;
  };
  auto make = [&](std::vector<int> counts) {
    std::vector<detr::DetrTarget> t;
    for (int n : counts) t.push_back(target(std::vector<int64_t>(static_cast<size_t>(n), 1), boxes(n)));
    return t;
  };
  struct Case {
    std::vector<int> counts;
    int64_t groups, queries;
  };
  for (const Case& c : {Case{{3, 7}, 14, 196}, Case{{1}, 100, 200}, Case{{0, 2, 1}, 50, 200}, Case{{150}, 1, 300},
                        Case{{33, 5}, 3, 198}}) {
    CAPTURE(c.counts.size());
    CAPTURE(c.queries);
    auto t = make(c.counts);
    auto g = detr::contrastive_denoising_group(t, 3, 300, embed, 100, 0.5, 1.0);
    REQUIRE(g.has_value());
    const int64_t G = *std::max_element(c.counts.begin(), c.counts.end());
    CHECK(g->meta.max_gt == G);
    CHECK(g->meta.num_group == c.groups);
    CHECK(g->meta.num_denoising == c.queries);
    CHECK(detr::denoising_query_count(G, 100) == c.queries);
    CHECK(g->query_class.sizes() == torch::IntArrayRef({static_cast<int64_t>(c.counts.size()), c.queries, 8}));
    CHECK(g->query_bbox.sizes() == torch::IntArrayRef({static_cast<int64_t>(c.counts.size()), c.queries, 4}));
    CHECK(g->attn_mask.sizes() == torch::IntArrayRef({c.queries + 300, c.queries + 300}));
    CHECK(g->meta.largest.item<int64_t>() == G);
    CHECK(g->meta.group_count.item<int64_t>() == c.groups);
    CHECK(g->meta.real.all().item<bool>());  // no capacity padding
    // Every box noised into [0, 1] before the inverse sigmoid: finite.
    CHECK(torch::isfinite(g->query_bbox).all().item<bool>());
  }
  CHECK_FALSE(detr::contrastive_denoising_group(make({0, 0}), 3, 300, embed).has_value());
  CHECK_FALSE(detr::contrastive_denoising_group(make({2}), 3, 300, embed, 0).has_value());
}

TEST_CASE("denoising: a negative copy whose corners crossed keeps its size in the D-FINE line, collapses to a point in RT-DETR's") {
  // One box (0.5, 0.5, 0.4, 0.4): 100 groups of a positive and a negative copy. A negative copy moves each
  // corner by 1-2 half-sizes, so x1 + and x2 - (1 in 4 draws per axis) cross: width < 0. The D-FINE line's
  // originals make it positive before the inverse sigmoid (dfine/denoising.py:95, deim/denoising.py:94);
  // RT-DETR's (rtdetr/denoising.py:117-118) do not, and the inverse sigmoid clamps it to 0.
  torch::nn::Embedding embed(torch::nn::EmbeddingOptions(4, 8).padding_idx(3));
  const std::vector<detr::DetrTarget> t{target({1}, {0.5f, 0.5f, 0.4f, 0.4f})};
  const auto padded = detr::pad_targets(t, torch::kCPU);
  torch::manual_seed(11);
  auto kept = detr::contrastive_denoising_group(padded, 3, 300, embed, 100, 0.5, 1.0, 0, /*abs_boxes=*/true);
  torch::manual_seed(11);
  auto plain = detr::contrastive_denoising_group(padded, 3, 300, embed, 100, 0.5, 1.0, 0, /*abs_boxes=*/false);
  REQUIRE(kept.has_value());
  REQUIRE(plain.has_value());
  const auto a = torch::sigmoid(kept->query_bbox[0]).to(torch::kFloat64);  // [200, 4] cxcywh
  const auto b = torch::sigmoid(plain->query_bbox[0]).to(torch::kFloat64);
  const auto collapsed = (b.narrow(1, 2, 2) < 1e-4);                         // the plain form's crossed sides
  const int64_t n = collapsed.sum().item<int64_t>();
  CAPTURE(n);
  CHECK(n > 10);  // about 1 in 4 of 100 negative copies per axis
  CHECK(n < 100);
  // Same draws: the centres are equal everywhere, the sizes wherever nothing crossed.
  CHECK(torch::allclose(a.narrow(1, 0, 2), b.narrow(1, 0, 2), 0, 1e-6));
  const auto sizes_a = a.narrow(1, 2, 2), sizes_b = b.narrow(1, 2, 2);
  CHECK(torch::allclose(sizes_a.masked_select(~collapsed), sizes_b.masked_select(~collapsed), 0, 1e-6));
  // Where the plain form collapsed, the D-FINE line's keeps |x2 - x1| of the crossed corners: x1 = 0.3 + 0.2 p1,
  // x2 = 0.7 - 0.2 p2 with p in [1, 2), so 0.2 (p1 + p2 - 2), in (0, 0.4): above the collapsed 1e-5.
  const auto crossed = sizes_a.masked_select(collapsed);
  CHECK(crossed.min().item<double>() > 1e-4);
  CHECK(crossed.max().item<double>() < 0.4);
  // Positive copies (even queries: G = 1) never cross: their corners move by under one half-size.
  REQUIRE(kept->meta.num_denoising == 200);
  CHECK(collapsed.index_select(0, torch::arange(0, 200, 2)).sum().item<int64_t>() == 0);
  // Which families: every D-FINE-line decoder (D-FINE, DEIM, DEIMv2, RT-DETRv4, EC) and none of RT-DETR's.
  CHECK(detr::DFineDecoderOptions{}.abs_noised_boxes);
  CHECK_FALSE(detr::DetrDecoderOptions{}.abs_noised_boxes);
}

TEST_CASE("denoising attention mask: groups see only themselves, matching queries see no denoising query") {
  // G = 2, 3 groups (12 denoising queries), 5 matching queries.
  auto m = detr::denoising_attn_mask(detr::denoising_meta(2, 3, 12, 5, torch::kCPU), 5, torch::kCPU);
  REQUIRE(m.sizes() == torch::IntArrayRef({17, 17}));
  for (int64_t i = 0; i < 17; ++i)
    for (int64_t j = 0; j < 17; ++j) {
      bool blocked;
      if (j >= 12) blocked = false;  // everyone sees the matching queries
      else if (i >= 12) blocked = true;
      else blocked = i / 4 != j / 4;
      CAPTURE(i);
      CAPTURE(j);
      CHECK(m[i][j].item<bool>() == blocked);
    }
}

TEST_CASE("the decoder's training output carries the denoising part sized by the largest count") {
  torch::manual_seed(0);
  detr::DetrDecoderOptions o;
  o.num_classes = 3;
  o.num_layers = 2;
  detr::DetrDecoder dec(o);
  dec->train();
  // Encoder maps of a 64 px input: 8x8, 4x4, 2x2 = 84 tokens, fewer than 300 queries: all are selected.
  std::vector<torch::Tensor> feats{torch::randn({2, 256, 8, 8}), torch::randn({2, 256, 4, 4}), torch::randn({2, 256, 2, 2})};
  std::vector<detr::DetrTarget> t{target({0, 1, 2, 0}, {0.2f, 0.2f, 0.1f, 0.1f, 0.4f, 0.4f, 0.2f, 0.2f, 0.6f, 0.6f, 0.1f, 0.3f, 0.8f, 0.8f, 0.1f, 0.1f}),
                                  target({1}, {0.5f, 0.5f, 0.5f, 0.5f})};
  const auto out = dec->forward(feats, &t);
  REQUIRE(out.dn_meta.has_value());
  CHECK(out.dn_meta->num_group == 25);  // 100 / 4
  CHECK(out.pred_logits.sizes() == torch::IntArrayRef({2, 84, 3}));
  CHECK(out.aux.size() == 1);
  CHECK(out.enc_aux.size() == 1);
  REQUIRE(out.dn_aux.size() == 2);
  CHECK(out.dn_aux[0].first.sizes() == torch::IntArrayRef({2, 200, 3}));
  CHECK(out.dn_aux[1].second.sizes() == torch::IntArrayRef({2, 200, 4}));
  // The whole loss back-propagates into the denoising class embedding and the heads.
  detr::SetCriterionOptions co;
  co.num_classes = 3;
  auto l = detr::SetCriterion(co)(out, t);
  CHECK(std::isfinite(l.total.item<double>()));
  l.total.backward();
  CHECK(dec->denoising_class_embed->weight.grad().abs().sum().item<double>() > 0);
  CHECK(dec->enc_score_head->weight.grad().abs().sum().item<double>() > 0);
  // Eval: the last layer only, no denoising, no aux.
  dec->eval();
  torch::NoGradGuard ng;
  const auto ev = dec->forward(feats, &t);
  CHECK_FALSE(ev.dn_meta.has_value());
  CHECK(ev.aux.empty());
  CHECK(ev.pred_boxes.sizes() == torch::IntArrayRef({2, 84, 4}));
}

// ---- the fixed-shape loss against a plain reference -------------------------------------------------
// The criterion runs in fixed shapes (targets in [B, M] slots, matches as each slot's query, masked terms:
// the form a step graph holds). The reference below computes the same loss one output and one image at a
// time, straight from the formulas, with ragged per-image tensors: the matching cost (2 focal + 5 L1 +
// 2 (-GIoU)) solved by assign::linear_sum_assignment, varifocal over every (query, class), L1 and GIoU on
// the matched pairs, the denoising queries matched by construction.
namespace {

struct RefLoss {
  torch::Tensor vfl, bbox, giou;
  void add(const torch::Tensor& v, const torch::Tensor& b, const torch::Tensor& g) {
    vfl = vfl.defined() ? vfl + v : v;
    bbox = bbox.defined() ? bbox + b : b;
    giou = giou.defined() ? giou + g : g;
  }
};

// Image i's matched (query, target) pairs of one output by the Hungarian method on its own cost matrix.
std::vector<std::pair<int64_t, int64_t>> ref_match(const torch::Tensor& logits, const torch::Tensor& boxes, const detr::DetrTarget& t) {
  const int64_t n = t.labels.size(0), Q = logits.size(0);
  if (n == 0) return {};
  torch::NoGradGuard ng;
  auto prob = torch::sigmoid(logits).index_select(1, t.labels);  // [Q, n]
  auto neg = 0.75 * prob.pow(2) * (-(1 - prob + 1e-8).log());
  auto pos = 0.25 * (1 - prob).pow(2) * (-(prob + 1e-8).log());
  auto l1 = (boxes.unsqueeze(1) - t.boxes.unsqueeze(0)).abs().sum(-1);
  auto giou = detr::generalized_box_iou(detr::box_cxcywh_to_xyxy(boxes), detr::box_cxcywh_to_xyxy(t.boxes));
  auto cost = (5 * l1 + 2 * (pos - neg) - 2 * giou).to(torch::kFloat64).contiguous();
  const auto a = libreyolo::assign::linear_sum_assignment(cost.data_ptr<double>(), Q, n);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t k = 0; k < a.rows.size(); ++k) out.emplace_back(a.rows[k], a.cols[k]);
  return out;
}

// One output's three terms for given pairs per image, each normalised by `norm`.
void ref_terms(const torch::Tensor& logits, const torch::Tensor& boxes, const std::vector<detr::DetrTarget>& t,
               const std::vector<std::vector<std::pair<int64_t, int64_t>>>& pairs, double norm, RefLoss& r) {
  for (size_t i = 0; i < t.size(); ++i) {
    const auto li = logits[static_cast<int64_t>(i)], bi = boxes[static_cast<int64_t>(i)];
    auto score = torch::zeros_like(li), onehot = torch::zeros_like(li);
    auto l1 = bi.sum() * 0, gi = bi.sum() * 0;
    for (auto [q, j] : pairs[i]) {
      auto s = detr::box_cxcywh_to_xyxy(bi[q].unsqueeze(0)), g = detr::box_cxcywh_to_xyxy(t[i].boxes[j].unsqueeze(0));
      const int64_t c = t[i].labels[j].item<int64_t>();
      score[q][c] = detr::paired_iou(s, g).detach()[0];
      onehot[q][c] = 1;
      l1 = l1 + (bi[q] - t[i].boxes[j]).abs().sum();
      gi = gi + (1 - detr::paired_giou(s, g)[0]);
    }
    auto w = 0.75 * torch::sigmoid(li).detach().pow(2) * (1 - onehot) + score;
    auto vfl = torch::binary_cross_entropy_with_logits(li, score, w, {}, at::Reduction::Sum);
    r.add(vfl / norm, 5 * l1 / norm, 2 * gi / norm);
  }
}

struct RandomDetrCase {
  std::vector<detr::DetrTarget> targets;
  detr::DetrOutput out;
  std::vector<torch::Tensor> leaves;  // every output tensor, for the gradients
};

// B = 3 images with {3, 0, 5} targets (4 classes), a main output and two aux layers of 10 queries, an
// encoder output of 12 (a second stack), and two denoising layers for num_denoising = 10 (2 groups of 2 x 5).
RandomDetrCase random_detr_case(uint64_t seed) {
  torch::manual_seed(seed);
  RandomDetrCase c;
  for (int64_t n : {3, 0, 5}) {
    auto cxcy = torch::rand({n, 2}) * 0.6 + 0.2, wh = torch::rand({n, 2}) * 0.35 + 0.05;
    c.targets.push_back({torch::randint(0, 4, {n}, torch::kLong), torch::cat({cxcy, wh}, 1)});
  }
  auto output = [&](int64_t Q) {
    auto l = torch::randn({3, Q, 4}).requires_grad_(true), b = torch::sigmoid(torch::randn({3, Q, 4})).requires_grad_(true);
    c.leaves.push_back(l), c.leaves.push_back(b);
    return std::make_pair(l, b);
  };
  std::tie(c.out.pred_logits, c.out.pred_boxes) = output(10);
  c.out.aux = {output(10), output(10)};
  c.out.enc_aux = {output(12)};
  c.out.dn_aux = {output(20), output(20)};
  c.out.dn_meta = detr::denoising_meta(5, 2, 20, 10, torch::kCPU);
  return c;
}

RefLoss reference_loss(const RandomDetrCase& c) {
  const double nb = 8;  // 3 + 0 + 5 boxes
  RefLoss r;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> matched{{c.out.pred_logits, c.out.pred_boxes}};
  for (auto& a : c.out.aux) matched.push_back(a);
  for (auto& a : c.out.enc_aux) matched.push_back(a);
  for (auto& [l, b] : matched) {
    std::vector<std::vector<std::pair<int64_t, int64_t>>> pairs;
    for (size_t i = 0; i < c.targets.size(); ++i)
      pairs.push_back(ref_match(l[static_cast<int64_t>(i)], b[static_cast<int64_t>(i)], c.targets[i]));
    ref_terms(l, b, c.targets, pairs, nb, r);
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> dn;
  for (size_t i = 0; i < c.targets.size(); ++i) {
    dn.emplace_back();
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t j = 0; j < c.targets[i].labels.size(0); ++j) dn.back().emplace_back(g * 10 + j, j);
  }
  for (auto& [l, b] : c.out.dn_aux) ref_terms(l, b, c.targets, dn, nb * 2, r);
  return r;
}

}  // namespace

TEST_CASE("the fixed-shape set loss equals a per-image reference, values and gradients, with padding slots") {
  detr::SetCriterionOptions o;
  o.num_classes = 4;
  const detr::SetCriterion crit(o);
  for (uint64_t seed : {0u, 1u, 2u}) {
    CAPTURE(seed);
    auto c = random_detr_case(seed);
    const auto ref = reference_loss(c);
    const auto l = crit(c.out, c.targets);
    CHECK(l.items[0].item<double>() == doctest::Approx(ref.vfl.item<double>()).epsilon(1e-5));
    CHECK(l.items[1].item<double>() == doctest::Approx(ref.bbox.item<double>()).epsilon(1e-5));
    CHECK(l.items[2].item<double>() == doctest::Approx(ref.giou.item<double>()).epsilon(1e-5));
    // Gradients of every output, element by element.
    const auto g = torch::autograd::grad({l.total}, c.leaves);
    const auto gr = torch::autograd::grad({ref.vfl + ref.bbox + ref.giou}, c.leaves);
    for (size_t k = 0; k < c.leaves.size(); ++k) {
      CAPTURE(k);
      CHECK(torch::allclose(g[k], gr[k], 1e-4, 1e-6));
    }
    // More slots than targets (M = 8, as a power-of-two bucket would give): the same matches in the first
    // five slots, -1 after, and the same loss.
    const auto t5 = detr::pad_targets(c.targets, torch::kCPU), t8 = detr::pad_targets(c.targets, torch::kCPU, 8);
    REQUIRE(t5.M == 5);
    REQUIRE(t8.M == 8);
    CHECK(t8.valid.sum().item<int64_t>() == 8);
    const auto m5 = crit.match_slots({{c.out.pred_logits, c.out.pred_boxes}, c.out.enc_aux.front()}, t5);
    const auto m8 = crit.match_slots({{c.out.pred_logits, c.out.pred_boxes}, c.out.enc_aux.front()}, t8);
    for (size_t k = 0; k < 2; ++k) {
      CHECK(m8[k].narrow(1, 0, 5).equal(m5[k]));
      CHECK((m8[k].narrow(1, 5, 3) == -1).all().item<bool>());
      CHECK((m5[k] >= 0).equal(t5.valid));  // every target matched (Q >= n), no padding slot
    }
    const auto l8 = crit(c.out, t8);
    CHECK(torch::allclose(l8.items, l.items, 1e-6, 0));
  }
}

TEST_CASE("the denoising pairs made on the device: slot g * G + j holds query g * 2G + j where target j exists") {
  const auto meta = detr::denoising_meta(3, 2, 12, 10, torch::kCPU);
  const std::vector<detr::DetrTarget> t{target({1, 0}, {0.5f, 0.5f, 0.2f, 0.2f, 0.3f, 0.3f, 0.1f, 0.1f}),
                                        target({2, 2, 1}, {0.4f, 0.4f, 0.2f, 0.2f, 0.6f, 0.6f, 0.1f, 0.1f, 0.2f, 0.7f, 0.1f, 0.2f})};
  const auto p = detr::pad_targets(t, torch::kCPU, 4);
  // Slot p = g * G + j (T / 2 = 6 slots): group g's positive copy of target j.
  const auto dn = detr::set_batch::denoising_slots(meta, p);
  CHECK(dn.qidx.equal(torch::tensor({0, 1, -1, 6, 7, -1,  //
                                     0, 1, 2, 6, 7, 8}, torch::kLong).view({1, 2, 6})));
  CHECK(dn.tcol.equal(torch::tensor({0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, torch::kLong).view({2, 6})));
  // With capacity padding (T = 16 for the same G and groups) the extra slots are empty.
  const auto padded = detr::set_batch::denoising_slots(detr::denoising_meta(3, 2, 16, 10, torch::kCPU), p);
  CHECK(padded.qidx.narrow(2, 0, 6).equal(dn.qidx));
  CHECK((padded.qidx.narrow(2, 6, 2) == -1).all().item<bool>());
  // The padded slots: label 0, box (0.5, 0.5, 1, 1), not valid.
  CHECK(p.labels.equal(torch::tensor({1, 0, 0, 0, 2, 2, 1, 0}, torch::kLong).view({2, 4})));
  CHECK(p.boxes[0][3].equal(torch::tensor({0.5f, 0.5f, 1.f, 1.f})));
  CHECK(p.valid.equal(torch::tensor({1, 1, 0, 0, 1, 1, 1, 0}, torch::kLong).view({2, 4}).to(torch::kBool)));
}

TEST_CASE("denoising padded to a fixed capacity: the real queries' outputs and the loss are unchanged") {
  // Counts {3, 1}: G = 3, 33 groups, 198 tokens; the capacity of 4 target slots is 200 (G = 1, 2 or 4 fill
  // it), so two padding tokens follow the groups. Noise off, so both runs see the same queries.
  CHECK(detr::denoising_capacity(4, 100) == 200);
  CHECK(detr::denoising_capacity(1, 100) == 200);
  CHECK(detr::denoising_capacity(3, 100) == 200);
  CHECK(detr::denoising_capacity(150, 100) == 300);  // more targets than denoising queries: one group of 2G
  detr::DetrDecoderOptions o;
  o.num_classes = 3;
  o.num_layers = 2;
  o.label_noise_ratio = 0;
  o.box_noise_scale = 0;
  torch::manual_seed(0);
  detr::DetrDecoder dec(o);
  dec->train();
  std::vector<torch::Tensor> feats{torch::randn({2, 256, 8, 8}), torch::randn({2, 256, 4, 4}), torch::randn({2, 256, 2, 2})};
  std::vector<detr::DetrTarget> t{target({0, 1, 2}, {0.2f, 0.2f, 0.1f, 0.1f, 0.4f, 0.4f, 0.2f, 0.2f, 0.6f, 0.6f, 0.1f, 0.3f}),
                                  target({1}, {0.5f, 0.5f, 0.5f, 0.5f})};
  const auto exact = dec->forward(feats, &t);
  dec->set_denoising_capacity(200);
  const auto padded = dec->forward(feats, &t);
  dec->set_denoising_capacity(0);
  REQUIRE(exact.dn_meta.has_value());
  REQUIRE(padded.dn_meta.has_value());
  CHECK(exact.dn_meta->num_denoising == 198);
  CHECK(padded.dn_meta->num_denoising == 200);
  CHECK(padded.dn_meta->real.sum().item<int64_t>() == 198);
  CHECK(padded.dn_meta->largest.item<int64_t>() == 3);        // computed on the device from the targets' mask
  CHECK(padded.dn_meta->group_count.item<int64_t>() == 33);
  CHECK(torch::allclose(padded.pred_logits, exact.pred_logits, 1e-5, 1e-5));
  CHECK(torch::allclose(padded.pred_boxes, exact.pred_boxes, 1e-5, 1e-5));
  REQUIRE(padded.dn_aux.size() == exact.dn_aux.size());
  for (size_t l = 0; l < exact.dn_aux.size(); ++l) {
    CHECK(torch::allclose(padded.dn_aux[l].first.narrow(1, 0, 198), exact.dn_aux[l].first, 1e-5, 1e-5));
    CHECK(torch::allclose(padded.dn_aux[l].second.narrow(1, 0, 198), exact.dn_aux[l].second, 1e-5, 1e-5));
    CHECK(torch::isfinite(padded.dn_aux[l].first).all().item<bool>());
  }
  detr::SetCriterionOptions co;
  co.num_classes = 3;
  const detr::SetCriterion crit(co);
  const auto le = crit(exact, t), lp = crit(padded, t);
  CHECK(torch::allclose(lp.items, le.items, 1e-5, 1e-6));

  // A batch without targets: the exact size has no denoising part; the capacity keeps its shape, with no
  // real token, and adds no loss.
  const std::vector<detr::DetrTarget> none{target({}, {}), target({}, {})};
  const auto exact0 = dec->forward(feats, &none);
  dec->set_denoising_capacity(200);
  const auto padded0 = dec->forward(feats, &none);
  dec->set_denoising_capacity(0);
  CHECK_FALSE(exact0.dn_meta.has_value());
  REQUIRE(padded0.dn_meta.has_value());
  CHECK(padded0.dn_meta->num_denoising == 200);
  CHECK_FALSE(padded0.dn_meta->real.any().item<bool>());
  CHECK(torch::isfinite(padded0.dn_aux.back().first).all().item<bool>());
  CHECK(torch::allclose(padded0.pred_logits, exact0.pred_logits, 1e-5, 1e-5));
  CHECK(torch::allclose(crit(padded0, none).items, crit(exact0, none).items, 1e-5, 1e-6));
}

TEST_CASE("padded targets from the batch's device tensor equal those made through the host rows") {
  // Three images' rows (class, x1, y1, x2, y2 in pixels of a 64 x 96 input), with rows a DETR family drops
  // (x2 <= x1, y2 <= y1) in between and the collate's padding rows (class -1) after.
  const double H = 64, W = 96;
  auto cxcywh = [&](const torch::Tensor& c1, const torch::Tensor& r1, const torch::Tensor& c2, const torch::Tensor& r2) {
    auto x1 = c1 / W, y1 = r1 / H, x2 = c2 / W, y2 = r2 / H;
    return torch::stack({(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1}, 1);
  };
  const std::vector<torch::Tensor> rows{
      torch::tensor(std::vector<float>{1, 10, 10, 30, 40, 2, 50, 5, 50, 20, 0, 5, 5, 20, 25, 2, 60, 30, 90, 30, 1, 40, 20, 70, 60}).view({5, 5}),
      torch::zeros({0, 5}),
      torch::tensor(std::vector<float>{3, 0, 0, 96, 64, 0, 12, 12, 11, 30}).view({2, 5})};
  const int64_t M = 6;
  auto targets = torch::zeros({3, M, 5});
  targets.select(2, 0).fill_(-1);
  for (int64_t i = 0; i < 3; ++i)
    if (rows[static_cast<size_t>(i)].size(0) > 0) targets[i].narrow(0, 0, rows[static_cast<size_t>(i)].size(0)).copy_(rows[static_cast<size_t>(i)]);
  const auto [kept, counts] = detr::detr_valid_rows(rows);
  CHECK(counts == std::vector<int64_t>{3, 0, 1});
  const auto ref = detr::pad_targets(detr::detr_targets_of(rows, torch::kCPU, cxcywh), torch::kCPU, M);
  const auto dev = detr::padded_targets_of(targets, counts, cxcywh);
  CHECK(dev.M == M);
  CHECK(dev.counts == ref.counts);
  CHECK(dev.valid.equal(ref.valid));
  CHECK(dev.labels.equal(ref.labels));
  CHECK(torch::allclose(dev.boxes, ref.boxes, 0, 1e-7));
  CHECK_THROWS_AS(detr::padded_targets_of(targets, {3, 0}, cxcywh), std::invalid_argument);
  CHECK_THROWS_AS(detr::padded_targets_of(targets.narrow(2, 0, 4), counts, cxcywh), std::invalid_argument);
}
