// IoU / CIoU, the task-aligned assigner and the YOLOv9 detection loss, with hand-worked values.
#include <libreyolo/assign/box_ops.hpp>
#include <libreyolo/assign/box_matcher.hpp>
#include <libreyolo/assign/tal.hpp>
#include <libreyolo/families/yolo9/loss.hpp>
#include <libreyolo/families/yolo9/network.hpp>

#include <doctest/doctest.h>

#include "support.hpp"

#include <cmath>

#if defined(LIBREYOLO_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace y9 = libreyolo::families::yolo9;
using libreyolo::assign::ciou;
using libreyolo::assign::iou;

namespace {
torch::Tensor box(double x1, double y1, double x2, double y2) {
  return torch::tensor({x1, y1, x2, y2}, torch::kFloat64);
}
double value(const torch::Tensor& t) { return t.item<double>(); }
}  // namespace

TEST_CASE("iou and ciou of hand-made boxes") {
  // (0,0,4,4) vs (2,2,6,6): intersection 2·2 = 4, union 16 + 16 - 4 = 28 -> IoU 1/7.
  // CIoU: same aspect (v = 0); enclosing box 6x6 -> c² = 72; centres (2,2), (4,4) -> ρ² = 8;
  // CIoU = 1/7 - 8/72 = 0.0317460.
  CHECK(value(iou(box(0, 0, 4, 4), box(2, 2, 6, 6))) == doctest::Approx(1.0 / 7));
  CHECK(value(ciou(box(0, 0, 4, 4), box(2, 2, 6, 6))) == doctest::Approx(1.0 / 7 - 8.0 / 72));
  // (0,0,2,4) vs (0,0,4,2): intersection 4, union 12 -> IoU 1/3. Enclosing 4x4 -> c² = 32; centres
  // (1,2), (2,1) -> ρ² = 2, ρ²/c² = 1/16. v = 4/π² (atan 2 - atan 0.5)² = 0.1678258;
  // alpha = v / (v - 1/3 + 1) = 0.2011113; CIoU = 1/3 - 0.0625 - 0.0337517 = 0.2370817.
  CHECK(value(iou(box(0, 0, 2, 4), box(0, 0, 4, 2))) == doctest::Approx(1.0 / 3));
  CHECK(value(ciou(box(0, 0, 2, 4), box(0, 0, 4, 2))) == doctest::Approx(0.2370817).epsilon(1e-6));
  // Disjoint boxes: IoU 0. Identical boxes: IoU = CIoU = 1.
  CHECK(value(iou(box(0, 0, 1, 1), box(2, 2, 3, 3))) == 0.0);
  CHECK(value(ciou(box(1, 2, 5, 9), box(1, 2, 5, 9))) == doctest::Approx(1.0));
  // Pairwise matrix [2, 3].
  auto a = torch::stack({box(0, 0, 4, 4), box(0, 0, 2, 4)});
  auto b = torch::stack({box(2, 2, 6, 6), box(0, 0, 4, 2), box(0, 0, 4, 4)});
  auto m = libreyolo::assign::box_iou(a, b);
  REQUIRE(m.sizes() == torch::IntArrayRef({2, 3}));
  CHECK(value(m[0][0]) == doctest::Approx(1.0 / 7));
  CHECK(value(m[0][1]) == doctest::Approx(0.5));   // 8 / 16
  CHECK(value(m[1][1]) == doctest::Approx(1.0 / 3));
  CHECK(value(m[1][2]) == doctest::Approx(0.5));   // 8 / 16
}

// 8 anchor points on a 4x2 grid of 8-px cells (x = 4, 12, 20, 28; y = 4, 12), index = 4·row + col.
// gt0 class 0 (0,0,16,16) contains anchors 0, 1, 4, 5; gt1 class 1 (8,0,32,16) contains 1, 2, 3, 5, 6, 7;
// a third row is padding. top-k = 2. Predicted boxes: anchor 0 = gt0, anchor 6 = gt1, anchor 5 =
// (8,0,24,16), all others far away (CIoU < 0 -> overlap 0). Scores: class 0 = 0.25, class 1 = 0.64.
//   CIoU(gt0, p5): IoU 128/384 = 1/3, ρ²/c² = 64/832 -> 0.2564103
//   CIoU(gt1, p5): IoU 256/384 = 2/3, ρ²/c² = 16/832, v·alpha = 0.000714 -> 0.6467216
// metric = score^0.5 · CIoU^6: gt0 -> anchor 0: 0.5, anchor 5: 0.5·0.25641^6 = 1.42e-4 (top-2 {0, 5});
// gt1 -> anchor 6: 0.8, anchor 5: 0.8·0.64672^6 = 0.05853 (top-2 {6, 5}). Anchor 5 is claimed by
// both and goes to gt1 (overlap 0.647 > 0.256). Soft scores: anchor 0: 0.5·1/0.5 = 1; anchor 6: 1;
// anchor 5: 0.05853·1/0.8 = 0.64672^6 = 0.0731651.
TEST_CASE("task-aligned assigner on a tiny hand-worked case, plus an image without boxes") {
  const int64_t A = 8;
  auto anchors = torch::empty({A, 2});
  for (int64_t i = 0; i < A; ++i) {
    anchors[i][0] = 4.0 + 8.0 * static_cast<double>(i % 4);
    anchors[i][1] = 4.0 + 8.0 * static_cast<double>(i / 4);
  }
  auto far = torch::tensor({100.f, 100.f, 101.f, 101.f});
  auto pd_boxes = far.repeat({2, A, 1});
  pd_boxes[0][0] = torch::tensor({0.f, 0.f, 16.f, 16.f});
  pd_boxes[0][5] = torch::tensor({8.f, 0.f, 24.f, 16.f});
  pd_boxes[0][6] = torch::tensor({8.f, 0.f, 32.f, 16.f});
  auto pd_scores = torch::tensor({0.25f, 0.64f}).repeat({2, A, 1});
  // Image 1 has only padding rows.
  auto gt_labels = torch::tensor({0.f, 1.f, -1.f, -1.f, -1.f, -1.f}).view({2, 3, 1});
  auto gt_boxes = torch::zeros({2, 3, 4});
  gt_boxes[0][0] = torch::tensor({0.f, 0.f, 16.f, 16.f});
  gt_boxes[0][1] = torch::tensor({8.f, 0.f, 32.f, 16.f});
  auto mask_gt = (gt_labels >= 0).to(torch::kFloat32);

  libreyolo::assign::TaskAlignedAssigner tal(2, {/*topk=*/2, 0.5, 6.0, 1e-9});
  auto r = tal(pd_scores, pd_boxes, anchors, gt_labels, gt_boxes, mask_gt);
  REQUIRE(r.fg_mask.sizes() == torch::IntArrayRef({2, A}));
  CHECK(torch::equal(r.fg_mask[0], torch::tensor({1, 0, 0, 0, 0, 1, 1, 0}).to(torch::kBool)));
  CHECK_FALSE(r.fg_mask[1].any().item<bool>());
  CHECK(r.labels[0][0].item<int64_t>() == 0);
  CHECK(r.labels[0][5].item<int64_t>() == 1);
  CHECK(r.labels[0][6].item<int64_t>() == 1);
  CHECK(r.gt_index[0][5].item<int64_t>() == 1);
  CHECK(torch::equal(r.bboxes[0][0], torch::tensor({0.f, 0.f, 16.f, 16.f})));
  CHECK(torch::equal(r.bboxes[0][5], torch::tensor({8.f, 0.f, 32.f, 16.f})));
  CHECK(r.scores[0][0][0].item<double>() == doctest::Approx(1.0));
  CHECK(r.scores[0][0][1].item<double>() == 0.0);
  CHECK(r.scores[0][6][1].item<double>() == doctest::Approx(1.0));
  CHECK(r.scores[0][5][1].item<double>() == doctest::Approx(0.0731651).epsilon(1e-4));
  CHECK(r.scores[0][5][0].item<double>() == 0.0);
  // Background anchors and the empty image carry no target score at all.
  CHECK(r.scores.sum().item<double>() == doctest::Approx(2.0731651).epsilon(1e-4));
  CHECK(r.scores[1].abs().sum().item<double>() == 0.0);

  // M = 0 for the whole batch: everything background, shapes intact.
  auto r0 = tal(pd_scores, pd_boxes, anchors, torch::zeros({2, 0, 1}), torch::zeros({2, 0, 4}), torch::zeros({2, 0, 1}));
  CHECK(r0.scores.sizes() == torch::IntArrayRef({2, A, 2}));
  CHECK(r0.bboxes.sizes() == torch::IntArrayRef({2, A, 4}));
  CHECK_FALSE(r0.fg_mask.any().item<bool>());
}

TEST_CASE("distribution focal loss on a known distribution") {
  // Probabilities (0.1, 0.2, 0.3, 0.4) over 4 bins, target 1.25: bins 1 (weight 0.75) and 2 (0.25):
  // -0.75·ln 0.2 - 0.25·ln 0.3 = 1.5080716. Uniform logits, any target: ln 4 = 1.3862944.
  auto p = torch::tensor({0.1, 0.2, 0.3, 0.4}, torch::kFloat64).log();
  auto uniform = torch::zeros({4}, torch::kFloat64);
  auto pred = torch::cat({p, p, uniform, uniform}).view({1, 16});
  auto target = torch::tensor({1.25, 1.25, 0.5, 2.9}, torch::kFloat64).view({1, 4});
  auto loss = y9::distribution_focal_loss(pred, target, 4);
  const double expected = (2 * 1.5080716 + 2 * std::log(4.0)) / 4;
  CHECK(loss.item<double>() == doctest::Approx(expected).epsilon(1e-6));
}

namespace {
const std::vector<int64_t> kStrides{8, 16, 32};
// Random head maps for a 64x64 input: [B, 4·16 + nc, 8|4|2, 8|4|2].
std::vector<torch::Tensor> random_feats(int64_t batch, int64_t nc, bool grad = true) {
  std::vector<torch::Tensor> f;
  for (int64_t s : kStrides) f.push_back(torch::randn({batch, 64 + nc, 64 / s, 64 / s}).requires_grad_(grad));
  return f;
}
}  // namespace

TEST_CASE("detection loss: boxes, empty images, M = 0, uneven batches, gradients") {
  torch::manual_seed(1);
  const int64_t nc = 3;
  y9::DetectionLoss loss(kStrides, nc);
  auto feats = random_feats(2, nc);
  auto targets = torch::full({2, 5, 5}, -1.0);
  targets[0][0] = torch::tensor({1.0, 8.0, 8.0, 40.0, 36.0});
  for (int i = 0; i < 5; ++i) targets[1][i] = torch::tensor({double(i % nc), 4.0 + 10 * i, 6.0, 14.0 + 10 * i, 50.0});

  auto out = loss(feats, targets);
  CHECK(out.total.dim() == 0);
  CHECK(std::isfinite(out.total.item<double>()));
  CHECK(out.total.item<double>() > 0);
  REQUIRE(out.items.sizes() == torch::IntArrayRef({3}));
  CHECK_FALSE(out.items.requires_grad());
  for (int i = 0; i < 3; ++i) CHECK(out.items[i].item<double>() > 0);
  CHECK(out.total.item<double>() == doctest::Approx(out.items.sum().item<double>()));  // a mean: not × batch
  out.total.backward();
  for (const auto& f : feats) {
    REQUIRE(f.grad().defined());
    CHECK(torch::isfinite(f.grad()).all().item<bool>());
    CHECK(f.grad().abs().sum().item<double>() > 0);
  }

  // Extra padding rows change nothing.
  auto padded = torch::cat({targets, torch::full({2, 3, 5}, -1.0)}, 1);
  CHECK(torch::allclose(loss(feats, padded).items, out.items));

  // No boxes at all: only the class term, equal to Σ softplus(logit) (BCE against 0) times its gain.
  auto empty = torch::full({2, 2, 5}, -1.0);
  auto none = loss(feats, empty);
  CHECK(none.items[0].item<double>() == 0.0);
  CHECK(none.items[2].item<double>() == 0.0);
  double softplus_sum = 0;
  for (const auto& f : feats) softplus_sum += torch::softplus(f.narrow(1, 64, nc)).sum().item<double>();
  CHECK(none.items[1].item<double>() == doctest::Approx(0.5 * softplus_sum).epsilon(1e-5));
  // M = 0 gives the same.
  auto m0 = loss(feats, torch::zeros({2, 0, 5}));
  CHECK(torch::allclose(m0.items, none.items));
  m0.total.backward();

  // bfloat16 maps (autocast output) are computed in float32.
  std::vector<torch::Tensor> half;
  for (const auto& f : feats) half.push_back(f.detach().to(torch::kBFloat16));
  auto hb = loss(half, targets);
  CHECK((hb.total.scalar_type() == torch::kFloat32));
  CHECK(std::isfinite(hb.total.item<double>()));

  CHECK_THROWS_AS(loss(feats, torch::zeros({2, 3, 4})), libreyolo::DataError);
  CHECK_THROWS_AS(loss(random_feats(2, nc + 1), targets), libreyolo::ConfigError);
}

// Head maps that already predict the gt exactly: every anchor of the 8x8 level gets one-hot DFL logits
// at its integer distances to the box (16,16,48,40); box and DFL terms then vanish.
TEST_CASE("detection loss is ~0 for box and DFL terms when predictions match the target") {
  const int64_t nc = 2;
  y9::DetectionLoss loss(kStrides, nc);
  auto feats = random_feats(1, nc, false);
  auto p3 = torch::full({1, 64 + nc, 8, 8}, 0.0);
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 0; x < 8; ++x) {
      // In grid units the box is (2, 2, 6, 5) and the anchor is (x + 0.5, y + 0.5); distances are
      // non-integer there, so use cells whose distances are exact: shift the box by half a cell.
      const double ax = x + 0.5, ay = y + 0.5;
      const double d[4] = {ax - 2.5, ay - 2.5, 6.5 - ax, 5.5 - ay};
      for (int side = 0; side < 4; ++side) {
        const auto bin = static_cast<int64_t>(std::clamp(d[side], 0.0, 15.0));
        p3[0][side * 16 + bin][y][x] = 60.0;
      }
    }
  feats[0] = p3;
  feats[1].narrow(1, 64, nc).fill_(-20);  // keep other levels' class logits quiet
  feats[2].narrow(1, 64, nc).fill_(-20);
  auto targets = torch::tensor({1.0, 20.0, 20.0, 52.0, 44.0}).view({1, 1, 5});  // (2.5,2.5,6.5,5.5)·8
  auto out = loss(feats, targets);
  CHECK(out.items[0].item<double>() < 1e-4);
  CHECK(out.items[2].item<double>() < 1e-4);
  CHECK(out.items[1].item<double>() > 0);
  // Moving the gt by a few pixels makes both terms clearly positive.
  auto moved = loss(feats, torch::tensor({1.0, 26.0, 22.0, 56.0, 44.0}).view({1, 1, 5}));
  CHECK(moved.items[0].item<double>() > 0.05);
  CHECK(moved.items[2].item<double>() > 0.05);
}

TEST_CASE("yolo9-t overfits one synthetic 128 px image with two boxes") {
  torch::manual_seed(0);
  const int64_t nc = 2;
  y9::Yolo9 net(y9::Yolo9Options{"t", nc, 16});
  net->train();
  y9::DetectionLoss loss(net->strides(), nc);
  auto image = torch::full({1, 3, 128, 128}, 0.5);
  image.index_put_({0, 0, torch::indexing::Slice(16, 64), torch::indexing::Slice(20, 76)}, 1.0);  // red-ish box
  image.index_put_({0, 2, torch::indexing::Slice(72, 120), torch::indexing::Slice(64, 112)}, 0.0);
  auto targets = torch::tensor({0.0, 20.0, 16.0, 76.0, 64.0, 1.0, 64.0, 72.0, 112.0, 120.0}).view({1, 2, 5});
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(2e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    auto out = loss(net->forward(image), targets);
    out.total.backward();
    opt.step();
    if (step == 0) first = out.total.item<double>();
    last = out.total.item<double>();
  }
  MESSAGE("overfit loss " << first << " -> " << last);
  CHECK(std::isfinite(last));
  CHECK(last < 0.5 * first);
}

LRY_GPU_SUITE {
TEST_CASE("yolo9 forward under fp16 autocast + loss on CUDA: float32, finite, no host synchronisation") {
  LRY_REQUIRE_CUDA();
#if defined(LIBREYOLO_WITH_CUDA)
  torch::manual_seed(0);
  const torch::Device cuda(torch::kCUDA, 0);
  const int64_t nc = 3;
  y9::Yolo9 net(y9::Yolo9Options{"s", nc, 16});
  net->to(cuda);
  net->train();
  y9::DetectionLoss loss(net->strides(), nc);
  auto image = torch::rand({4, 3, 160, 160}, cuda);
  auto targets = torch::full({4, 6, 5}, -1.0, torch::TensorOptions().device(cuda));
  targets[0][0] = torch::tensor({2.0, 10.0, 20.0, 90.0, 100.0}, torch::kFloat64).to(cuda);  // before sync checks
  for (int i = 0; i < 6; ++i)
    targets[3][i] = torch::tensor({double(i % nc), 5.0 + 20 * i, 5.0, 30.0 + 20 * i, 150.0}, torch::kFloat64).to(cuda);
  torch::cuda::synchronize();

  libreyolo::compat::set_cuda_autocast(true, torch::kHalf);
  auto feats = net->forward(image);
  libreyolo::compat::set_cuda_autocast(false, torch::kHalf);
  at::autocast::clear_cache();
  CHECK((feats[0].scalar_type() == torch::kHalf));

  // Any device->host synchronisation inside the assigner or the loss throws here.
  auto& warn = c10::cuda::warning_state();
  warn.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  y9::DetLossOutput out;
  bool threw = false;
  try {
    out = loss(feats, targets);
    loss(feats, torch::zeros({4, 0, 5}, targets.options()));  // M = 0
  } catch (const std::exception& e) {
    threw = true;
    MESSAGE("synchronised: " << std::string(e.what()));
  }
  warn.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  REQUIRE_FALSE(threw);
  CHECK((out.total.scalar_type() == torch::kFloat32));
  CHECK(std::isfinite(out.total.item<double>()));
  out.total.backward();
  for (const auto& p : net->parameters()) {
    if (!p.grad().defined()) continue;
    CHECK(torch::isfinite(p.grad()).all().item<bool>());
  }
  auto dets = y9::postprocess(feats, net->strides(), 16, {0.001, 0.7, 300, 30000, false, false});
  REQUIRE(dets.size() == 4);
  CHECK(dets[0].device() == cuda);
  CHECK(dets[0].size(1) == 6);
#endif
}
}

// ---- the original's BoxMatcher ---------------------------------------------------------------------
namespace {
// One image, anchors on a line at stride 8: points (4 + 8 i, 4), i = 0..A-1.
struct Line {
  torch::Tensor anchors, strides;
  explicit Line(int64_t A) {
    anchors = torch::stack({torch::arange(A, torch::kFloat32) * 8 + 4, torch::full({A}, 4.f)}, 1);
    strides = torch::full({A}, 8.f);
  }
};
}  // namespace

TEST_CASE("BoxMatcher: candidates need the point inside (boundary included) and the far side within reg_max - 1.01 strides") {
  using libreyolo::assign::BoxMatcher;
  using libreyolo::assign::BoxMatcherOptions;
  const int64_t A = 12;
  Line line(A);
  BoxMatcherOptions o;
  o.topk = 12;
  o.reg_max = 4;  // far side at most 2.99 strides = 23.92 px away
  BoxMatcher m(1, o);
  // gt (4, 0, 40, 8): points x = 4..36 inside (x = 4 on the left edge counts); for the far side:
  // anchor x=4: right side 36 px = 4.5 strides > 2.99 -> out; x=20: 20 px = 2.5 -> in; x=36: left 32 px -> out.
  auto gt = torch::tensor({4.f, 0.f, 40.f, 8.f}).view({1, 1, 4});
  auto pred = gt.expand({1, A, 4}).clone();  // every prediction equals the gt: CIoU 1
  auto scores = torch::full({1, A, 1}, 0.25f);
  auto r = m(scores, pred, line.anchors, line.strides, torch::zeros({1, 1, 1}), gt, torch::ones({1, 1, 1}));
  // Candidates: max(x - 4, 40 - x, 4, 4) / 8 <= 2.99 -> 16.08 <= x <= 27.92: anchors x = 20 only (i = 2).
  // Points x = 12 (right 28 px = 3.5) and 28 (left 24 px = 3.0 > 2.99) are out.
  std::vector<float> fg(r.fg_mask[0].data_ptr<float>(), r.fg_mask[0].data_ptr<float>() + A);
  for (int64_t i = 0; i < A; ++i) CHECK_MESSAGE(fg[i] == (i == 2 ? 1.f : 0.f), "anchor " << i);
  // Soft score: alignment / best alignment (1) × best IoU (1) = 1.
  CHECK(r.scores[0][2][0].item<float>() == doctest::Approx(1.0));
  CHECK(r.bboxes[0][2][2].item<float>() == doctest::Approx(40.0));
}

TEST_CASE("BoxMatcher: top-k by iou^6 * score^0.5, normalised by the best alignment and the best IoU") {
  using libreyolo::assign::BoxMatcher;
  using libreyolo::assign::BoxMatcherOptions;
  const int64_t A = 4;
  Line line(A);
  BoxMatcherOptions o;
  o.topk = 2;
  BoxMatcher m(2, o);
  auto gt = torch::tensor({0.f, 0.f, 32.f, 8.f}).view({1, 1, 4});  // all 4 anchors are candidates
  auto pred = gt.expand({1, A, 4}).clone();
  auto scores = torch::zeros({1, A, 2});
  // class 1's scores 0.04, 0.16, 0.36, 0.64 -> alignment (IoU 1) = 0.2, 0.4, 0.6, 0.8: top-2 = anchors 3, 2.
  for (int64_t i = 0; i < A; ++i) scores[0][i][1] = std::pow(0.2 * (i + 1), 2);
  auto r = m(scores, pred, line.anchors, line.strides, torch::ones({1, 1, 1}), gt, torch::ones({1, 1, 1}));
  CHECK(r.fg_mask[0][0].item<float>() == 0);
  CHECK(r.fg_mask[0][1].item<float>() == 0);
  CHECK(r.fg_mask[0][2].item<float>() == 1);
  CHECK(r.fg_mask[0][3].item<float>() == 1);
  CHECK(r.scores[0][3][1].item<float>() == doctest::Approx(1.0));   // 0.8 / 0.8 × 1
  CHECK(r.scores[0][2][1].item<float>() == doctest::Approx(0.75));  // 0.6 / 0.8 × 1
  CHECK(r.scores[0][2][0].item<float>() == 0);                     // one-hot on the gt's class
}

TEST_CASE("BoxMatcher: a gt with no candidate gets its best anchor anywhere; shared anchors go to the larger IoU") {
  using libreyolo::assign::BoxMatcher;
  using libreyolo::assign::BoxMatcherOptions;
  const int64_t A = 4;
  Line line(A);
  BoxMatcherOptions o;
  o.topk = 1;
  BoxMatcher m(1, o);
  // gt 0 (9, 5, 11, 7): a 2 px box containing no anchor point -> no candidate; gt 1 (0, 0, 32, 8).
  auto gts = torch::tensor({9.f, 5.f, 11.f, 7.f, 0.f, 0.f, 32.f, 8.f}).view({1, 2, 4});
  auto pred = torch::zeros({1, A, 4});
  pred[0][1] = torch::tensor({9.f, 5.f, 11.f, 7.f});  // anchor 1 predicts gt 0 exactly: IoU 1 with gt 0
  pred[0][0] = torch::tensor({0.f, 0.f, 32.f, 8.f});  // anchor 0 predicts gt 1 exactly
  pred[0][2] = torch::tensor({1.f, 1.f, 2.f, 2.f});
  pred[0][3] = torch::tensor({1.f, 1.f, 2.f, 2.f});
  auto scores = torch::full({1, A, 1}, 0.5f);
  auto r = m(scores, pred, line.anchors, line.strides, torch::zeros({1, 2, 1}), gts, torch::ones({1, 2, 1}));
  // gt 0 has no candidate, so its best anchor over all anchors (anchor 1, IoU 1) is taken.
  CHECK(r.fg_mask[0][1].item<float>() == 1);
  CHECK(r.gt_index[0][1].item<int64_t>() == 0);
  // gt 1's top-1 among its candidates is anchor 0 (IoU 1).
  CHECK(r.fg_mask[0][0].item<float>() == 1);
  CHECK(r.gt_index[0][0].item<int64_t>() == 1);
  CHECK(r.fg_mask[0][2].item<float>() == 0);
  CHECK(r.fg_mask[0][3].item<float>() == 0);
  // Padding gts (mask 0) claim nothing, and M = 0 gives empty targets of the right shapes.
  auto r2 = m(scores, pred, line.anchors, line.strides, torch::zeros({1, 2, 1}), gts, torch::zeros({1, 2, 1}));
  CHECK(r2.fg_mask.sum().item<float>() == 0);
  auto r3 = m(scores, pred, line.anchors, line.strides, torch::zeros({1, 0, 1}), torch::zeros({1, 0, 4}),
              torch::zeros({1, 0, 1}));
  CHECK(r3.scores.sizes() == torch::IntArrayRef({1, A, 1}));
  CHECK(r3.fg_mask.sum().item<float>() == 0);
}

TEST_CASE("BoxMatcher: an anchor picked by two gts goes to the one with the larger IoU") {
  using libreyolo::assign::BoxMatcher;
  using libreyolo::assign::BoxMatcherOptions;
  const int64_t A = 2;
  Line line(A);
  BoxMatcherOptions o;
  o.topk = 1;
  BoxMatcher m(1, o);
  // Both gts contain both anchors. Anchor 0's prediction is gt 1 exactly (IoU 1 with gt 1, ~0.8 with gt 0);
  // anchor 1's prediction is far off. Both gts pick anchor 0 (top-1): it goes to gt 1; gt 0 keeps nothing.
  auto gts = torch::tensor({0.f, 0.f, 16.f, 8.f, 0.f, 0.f, 16.f, 10.f}).view({1, 2, 4});
  auto pred = torch::zeros({1, A, 4});
  pred[0][0] = torch::tensor({0.f, 0.f, 16.f, 10.f});
  pred[0][1] = torch::tensor({14.f, 6.f, 15.f, 7.f});
  auto r = m(torch::full({1, A, 1}, 0.5f), pred, line.anchors, line.strides, torch::zeros({1, 2, 1}), gts,
             torch::ones({1, 2, 1}));
  CHECK(r.fg_mask[0][0].item<float>() == 1);
  CHECK(r.gt_index[0][0].item<int64_t>() == 1);
}
