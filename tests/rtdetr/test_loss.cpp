// The DETR pieces by hand: the set loss (Hungarian matching, varifocal, L1, GIoU) on a case small
// enough to compute on paper, the contrastive denoising group whose size follows the batch's largest
// ground-truth count, its attention mask, and the decoder's training output with denoising queries.
#include <libreyolo/nn/detr/criterion.hpp>
#include <libreyolo/nn/detr/decoder.hpp>
#include <libreyolo/nn/detr/denoising.hpp>

#include <doctest/doctest.h>

#include <cmath>
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
    for (size_t i = 0; i < c.counts.size(); ++i) {
      const auto& pos = g->meta.positive_idx[i];
      CHECK(pos.numel() == c.counts[i] * c.groups);
      if (c.counts[i] > 0) {
        CHECK(pos[0].item<int64_t>() == 0);
        if (c.groups > 1) CHECK(pos[c.counts[i]].item<int64_t>() == 2 * G);  // group 1 starts at 2G
      }
    }
    // Every box noised into [0, 1] before the inverse sigmoid: finite.
    CHECK(torch::isfinite(g->query_bbox).all().item<bool>());
  }
  CHECK_FALSE(detr::contrastive_denoising_group(make({0, 0}), 3, 300, embed).has_value());
  CHECK_FALSE(detr::contrastive_denoising_group(make({2}), 3, 300, embed, 0).has_value());
}

TEST_CASE("denoising attention mask: groups see only themselves, matching queries see no denoising query") {
  // G = 2, 3 groups (12 denoising queries), 5 matching queries.
  auto m = detr::denoising_attn_mask(2, 3, 5, torch::kCPU);
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
