// The PP-YOLOE loss of YOLO-NAS against the original's numbers, and its assigner on a hand-worked case.
// The reference values come from running the original's PPYoloELoss (libreyolo/models/yolonas/loss.py,
// snapshot c41461e, use_static_assigner=False, use_varifocal_loss=True, as its trainer builds it) under
// PyTorch 1.13.1 on the deterministic inputs built here (the same formulas in float64, cast to float32):
// 2 images of 64 px, 3 classes, 84 anchors, gts image 0: class 1 (8,8,40,36), class 2 (30,20,60,56);
// image 1: class 0 (4,30,28,62); one padding row per image at least.
#include <libreyolo/assign/ppyoloe_tal.hpp>
#include <libreyolo/families/yolonas/family.hpp>
#include <libreyolo/families/yolonas/loss.hpp>

#include <doctest/doctest.h>

#include "support.hpp"

#include <array>
#include <cmath>
#include <vector>

namespace nas = libreyolo::families::yolonas;

namespace {

struct Case {
  double scale_logit, scale_dist, offset, bias;
  double cls, iou, dfl, total, score_sum;
  double grad_logits_sum, grad_logits_abs, grad_dist_abs;
};

const std::vector<std::array<int64_t, 2>> kHw{{8, 8}, {4, 4}, {2, 2}};

torch::Tensor targets() {
  auto t = torch::zeros({2, 3, 5});
  t.select(2, 0).fill_(-1);
  const float rows[3][6] = {{0, 1, 8, 8, 40, 36}, {0, 2, 30, 20, 60, 56}, {1, 0, 4, 30, 28, 62}};
  int next[2] = {0, 0};
  for (const auto& r : rows) {
    const int b = static_cast<int>(r[0]);
    for (int k = 0; k < 5; ++k) t[b][next[b]][k] = r[k + 1];
    ++next[b];
  }
  return t;
}

std::vector<torch::Tensor> outputs(const Case& c, torch::Tensor& logits, torch::Tensor& dist) {
  const int64_t B = 2, A = 84, nc = 3;
  auto j = torch::arange(B * A * nc, torch::kFloat64);
  logits = (c.scale_logit * torch::sin(0.3 * j + 0.7) + c.bias).to(torch::kFloat32).view({B, A, nc}).set_requires_grad(true);
  j = torch::arange(B * A * 68, torch::kFloat64);
  dist = (c.scale_dist * torch::sin(0.11 * j + c.offset)).to(torch::kFloat32).view({B, A, 68}).set_requires_grad(true);
  // The loss reads only the logits (2) and DFL logits (3); 0 and 1 are the decoded boxes and scores.
  return {torch::Tensor(), torch::Tensor(), logits, dist};
}

}  // namespace

TEST_CASE("yolonas loss equals the original's PPYoloELoss: values and gradients") {
  const Case cases[] = {
      {2.0, 1.5, 0.2, -1.5, 30.935462951660156, 1.3347183465957642, 0.8322951197624207, 33.102474212646484, 0.5682790875,
       48.63869136, 48.63869136, 0.5285573672},
      {4.0, 3.0, 1.1, -1.5, 184.5845947265625, 1.0021947622299194, 0.6852814555168152, 186.27207946777344, 0.43167454,
       129.5510708, 129.5510708, 0.3955651936},
      {1.0, 2.0, 0.5, -4.5, 0.05162210017442703, 0.8952791690826416, 0.5718486309051514, 1.5187499523162842,
       0.3833517432, 0.002021970494, 0.01262650691, 0.3528116563},
  };
  nas::PPYoloELoss loss(3);
  for (const auto& c : cases) {
    CAPTURE(c.scale_logit);
    CAPTURE(c.bias);
    torch::Tensor logits, dist;
    auto out = outputs(c, logits, dist);
    auto r = loss(out, kHw, targets());
    CHECK(r.items[0].item<double>() == doctest::Approx(c.cls).epsilon(1e-5));
    CHECK(r.items[1].item<double>() == doctest::Approx(c.iou).epsilon(1e-5));
    CHECK(r.items[2].item<double>() == doctest::Approx(c.dfl).epsilon(1e-5));
    CHECK(r.total.item<double>() == doctest::Approx(c.total).epsilon(1e-5));
    CHECK_FALSE(r.items.requires_grad());
    r.total.backward();
    CHECK(logits.grad().to(torch::kFloat64).sum().item<double>() == doctest::Approx(c.grad_logits_sum).epsilon(1e-4));
    CHECK(logits.grad().to(torch::kFloat64).abs().sum().item<double>() == doctest::Approx(c.grad_logits_abs).epsilon(1e-4));
    CHECK(dist.grad().to(torch::kFloat64).abs().sum().item<double>() == doctest::Approx(c.grad_dist_abs).epsilon(1e-4));
  }
}

TEST_CASE("yolonas loss: the assigner's soft-score total, padding rows, an empty batch") {
  const Case c{2.0, 1.5, 0.2, -1.5, 0, 0, 0, 0, 0.5682790875, 0, 0, 0};
  torch::Tensor logits, dist;
  auto out = outputs(c, logits, dist);
  // The assigner alone gives the original's total soft score.
  auto g = nas::grid_cell_anchors(kHw, {8, 16, 32}, torch::kCPU);
  auto pts = g.points / g.strides;
  auto boxes = nas::distance2bbox(pts, nas::dfl_expectation(dist.detach(), 16)) * g.strides;
  auto t = targets();
  auto valid = (t.narrow(2, 0, 1) >= 0).to(torch::kFloat32);
  libreyolo::assign::PPYoloETaskAlignedAssigner tal(3);
  auto a = tal(logits.detach().sigmoid(), boxes, g.points, t.narrow(2, 0, 1), t.narrow(2, 1, 4) * valid, valid);
  CHECK(a.scores.sum().item<double>() == doctest::Approx(c.score_sum).epsilon(1e-5));
  CHECK(a.labels.sizes() == torch::IntArrayRef({2, 84}));
  // Background anchors carry the background index 3 and zero scores; positives their gt's class.
  auto bg = ~a.fg_mask;
  CHECK((a.labels.masked_select(bg) == 3).all().item<bool>());
  CHECK(a.scores.sum(-1).masked_select(bg).abs().max().item<double>() == 0.0);
  CHECK(a.fg_mask.sum().item<int64_t>() > 0);
  CHECK(a.labels[1].masked_select(a.fg_mask[1]).eq(0).all().item<bool>());

  // More padding rows change nothing.
  nas::PPYoloELoss loss(3);
  auto base = loss(out, kHw, t);
  auto padded = torch::cat({t, torch::cat({torch::full({2, 4, 1}, -1.0), torch::zeros({2, 4, 4})}, 2)}, 1);
  auto more = loss(out, kHw, padded);
  CHECK(torch::allclose(base.items, more.items, 1e-6, 1e-7));
  // No gt at all (M = 0, or only padding): box terms 0, the class term pushes every score down, finite.
  for (const auto& empty : {torch::zeros({2, 0, 5}), torch::cat({torch::full({2, 2, 1}, -1.0), torch::zeros({2, 2, 4})}, 2)}) {
    auto r = loss(out, kHw, empty);
    CHECK(std::isfinite(r.total.item<double>()));
    CHECK(r.items[1].item<double>() == 0.0);
    CHECK(r.items[2].item<double>() == 0.0);
    CHECK(r.items[0].item<double>() > 0.0);
  }
  CHECK_THROWS_AS(loss(out, kHw, torch::zeros({3, 1, 5})), libreyolo::DataError);
}

TEST_CASE("PP-YOLOE assigner on a hand-worked case: top-k inside the gt, shared anchors to the larger IoU") {
  // 4 anchor points on one row (x = 4, 12, 20, 28; y = 4). gt0 class 0 (0,0,16,8) holds anchors 0, 1;
  // gt1 class 1 (8,0,32,8) holds 1, 2, 3. Predictions: anchor 0 = (0,0,8,8), 1 = (8,0,16,8), 2 =
  // (16,0,24,8), 3 = (24,0,32,8). Scores 0.5 everywhere. IoU(gt0, p0) = IoU(gt0, p1) = 0.5;
  // IoU(gt1, p1) = IoU(gt1, p2) = IoU(gt1, p3) = 1/3. top-k 2: gt0 -> {0, 1}; gt1 -> two of {1, 2, 3}
  // (equal metrics). Anchor 1, if claimed by both, goes to gt0 (IoU 0.5 > 1/3).
  auto points = torch::tensor({4.f, 4.f, 12.f, 4.f, 20.f, 4.f, 28.f, 4.f}).view({4, 2});
  auto pred = torch::tensor({0.f, 0.f, 8.f, 8.f, 8.f, 0.f, 16.f, 8.f, 16.f, 0.f, 24.f, 8.f, 24.f, 0.f, 32.f, 8.f}).view({1, 4, 4});
  auto scores = torch::full({1, 4, 2}, 0.5);
  auto gl = torch::tensor({0.f, 1.f}).view({1, 2, 1});
  auto gb = torch::tensor({0.f, 0.f, 16.f, 8.f, 8.f, 0.f, 32.f, 8.f}).view({1, 2, 4});
  auto mask = torch::ones({1, 2, 1});
  libreyolo::assign::PPYoloETaskAlignedAssigner tal(2, {2, 1.0, 6.0, 1e-9});
  auto a = tal(scores, pred, points, gl, gb, mask);
  CHECK(a.fg_mask[0][0].item<bool>());
  CHECK(a.fg_mask[0][1].item<bool>());
  CHECK(a.labels[0][0].item<int64_t>() == 0);
  CHECK(a.labels[0][1].item<int64_t>() == 0);
  // Normalised scores: gt0's metric 0.5·0.5^6 at both its anchors -> metric / max · max IoU = 0.5.
  CHECK(a.scores[0][0][0].item<double>() == doctest::Approx(0.5));
  CHECK(a.scores[0][1][0].item<double>() == doctest::Approx(0.5));
  CHECK(a.scores[0][1][1].item<double>() == 0.0);
  // gt1 keeps at least one of anchors 2, 3 with score 1/3 for class 1.
  const int64_t gt1 = a.labels[0].eq(1).sum().item<int64_t>();
  CHECK(gt1 >= 1);
  CHECK(a.scores[0].select(1, 1).max().item<double>() == doctest::Approx(1.0 / 3));
  CHECK(torch::equal(a.bboxes[0][0], gb[0][0]));
}

TEST_CASE("yolonas GIoU and DFL terms vanish for a perfect prediction") {
  auto box = torch::tensor({1.f, 2.f, 5.f, 7.f});
  CHECK(nas::giou_loss(box, box).item<double>() == doctest::Approx(0.0).epsilon(1e-6));
  // Disjoint: IoU 0, enclosing (0,0,4,1) area 4, union 2 -> GIoU = -0.5, loss 1.5.
  CHECK(nas::giou_loss(torch::tensor({0.f, 0.f, 1.f, 1.f}), torch::tensor({3.f, 0.f, 4.f, 1.f})).item<double>() ==
        doctest::Approx(1.5));
  // DFL with all mass on the two bins around 2.25 (weights 0.75, 0.25) is the entropy-like minimum.
  auto logits = torch::full({1, 4, 17}, -30.0);
  logits.select(2, 2).fill_(std::log(0.75));
  logits.select(2, 3).fill_(std::log(0.25));
  auto target = torch::full({1, 4}, 2.25);
  const double h = -(0.75 * std::log(0.75) + 0.25 * std::log(0.25));
  CHECK(nas::dfl_loss(logits, target).item<double>() == doctest::Approx(h).epsilon(1e-5));
}

TEST_CASE("yolonas-s overfits one synthetic image: the loss falls") {
  libreyolo::YoloNasFamily fam("s");
  fam.restore({{"names", std::vector<std::string>{"a", "b"}}});
  torch::manual_seed(0);
  auto net = fam.make_network();
  net->train();
  libreyolo::data::DetectBatch b;
  b.images = (torch::rand({1, 3, 64, 64}) * 255).to(torch::kUInt8);
  b.targets = torch::tensor({0.f, 8.f, 8.f, 40.f, 36.f, 1.f, 30.f, 20.f, 60.f, 56.f}).view({1, 2, 5});
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0));
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    auto r = fam.loss(net->forward(libreyolo::YoloNasFamily::input(b)), b);
    REQUIRE(std::isfinite(r.total.item<double>()));
    r.total.backward();
    opt.step();
    losses.push_back(r.total.item<double>());
  }
  MESSAGE("yolonas-s one-image loss " << losses.front() << " -> " << losses.back());
  CHECK(losses.back() < 0.5 * losses.front());
  // Decode: rows of x1 y1 x2 y2 score class, at most max_det, the best class only.
  net->eval();
  torch::NoGradGuard ng;
  libreyolo::tasks::DecodeOptions o;
  o.conf = 0.0;
  o.max_det = 7;
  auto det = fam.decode(net->forward(libreyolo::YoloNasFamily::input(b)), o);
  REQUIRE(det.size() == 1);
  CHECK(det[0].size(1) == 6);
  CHECK(det[0].size(0) <= 7);
  CHECK_FALSE(libreyolo::YoloNasFamily::val_decode().multi_label);
}
