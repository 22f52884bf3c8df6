// SimOTA on hand-worked cases (centre prior, dynamic k, conflicts, the 1e6 penalty, padding), the YOLOX
// loss against the original's numbers (YOLOXHead.get_losses run on the same raw maps and labels), and on
// CUDA: no host synchronisation in the assigner or the loss.
#include <libreyolo/assign/simota.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/families/yolox/loss.hpp>
#include <libreyolo/families/yolox/network.hpp>

#include <doctest/doctest.h>

#include "support.hpp"

#include <cmath>
#include <vector>

#if defined(LIBREYOLO_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace yx = libreyolo::families::yolox;
using libreyolo::assign::SimOta;

namespace {
// One level of stride 8 on a 4x4 grid (a 32-px image): anchor index = y * 4 + x.
struct Grid4 {
  torch::Tensor grid = torch::empty({16, 2});
  torch::Tensor strides = torch::full({16}, 8.0);
  Grid4() {
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) {
        grid[y * 4 + x][0] = x;
        grid[y * 4 + x][1] = y;
      }
  }
};
torch::Tensor boxes_like(double cx, double cy, double w, double h, int64_t n = 16) {
  return torch::tensor({cx, cy, w, h}, torch::kFloat32).repeat({n, 1});
}
std::vector<int64_t> fg_anchors(const torch::Tensor& fg) {
  std::vector<int64_t> out;
  for (int64_t a = 0; a < fg.size(0); ++a)
    if (fg[a].item<float>() > 0) out.push_back(a);
  return out;
}
}  // namespace

TEST_CASE("simota: the centre prior limits candidates and dynamic k = floor(sum of the top IoUs)") {
  Grid4 g;
  // gt (16, 16, 16 x 16): anchor centres 12 and 20 lie within 1.5 strides (12 px) of 16 on each axis,
  // 4 and 28 do not -> candidates are cells (1,1), (2,1), (1,2), (2,2) = anchors 5, 6, 9, 10.
  auto pred = boxes_like(100, 100, 2, 2);  // far away: IoU 0
  pred[5] = torch::tensor({16.f, 16.f, 16.f, 16.f});   // IoU 1
  pred[6] = torch::tensor({16.f, 16.f, 16.f, 16.f});   // IoU 1
  pred[9] = torch::tensor({16.f, 16.f, 16.f, 8.f});    // IoU 0.5
  pred[0] = torch::tensor({16.f, 16.f, 16.f, 16.f});   // IoU 1 but outside the centre prior: never counted
  auto cls = torch::zeros({1, 16, 2}), obj = torch::zeros({1, 16, 1});
  auto gt = torch::tensor({16.f, 16.f, 16.f, 16.f}).view({1, 1, 4});
  auto m = SimOta(2)(pred.unsqueeze(0), cls, obj, g.grid, g.strides, gt, torch::zeros({1, 1}), torch::ones({1, 1}));
  CHECK(m.dynamic_k[0][0].item<int64_t>() == 2);  // floor(1 + 1 + 0.5 + 0) over the 4 candidates
  CHECK(fg_anchors(m.fg_mask[0]) == std::vector<int64_t>{5, 6});
  CHECK(m.num_fg.item<float>() == 2);
  CHECK(m.iou[0][5].item<float>() == doctest::Approx(1.0));
  CHECK(m.iou[0][0].item<float>() == 0);
  CHECK(m.gt_index[0][5].item<int64_t>() == 0);

  // A worse prediction everywhere: the sum falls below 1 and k is clamped to 1 (the best candidate).
  pred[6] = torch::tensor({16.f, 16.f, 8.f, 8.f});    // IoU 0.25
  pred[5] = torch::tensor({16.f, 16.f, 16.f, 8.f});   // IoU 0.5
  pred[9] = torch::tensor({16.f, 16.f, 4.f, 4.f});    // IoU 1/16
  m = SimOta(2)(pred.unsqueeze(0), cls, obj, g.grid, g.strides, gt, torch::zeros({1, 1}), torch::ones({1, 1}));
  CHECK(m.dynamic_k[0][0].item<int64_t>() == 1);
  CHECK(fg_anchors(m.fg_mask[0]) == std::vector<int64_t>{5});
  CHECK(m.iou[0][5].item<float>() == doctest::Approx(0.5));
}

TEST_CASE("simota: an anchor claimed by two gts goes to the cheaper one, which may leave a gt without anchors") {
  Grid4 g;
  // G0 (16, 16, 16x16), G1 (20, 16, 16x16), same class. Anchor 5 predicts (17, 16, 16x16): IoU 240/272 with
  // G0, 208/304 with G1; every other prediction is far away. Both gts have k = 1 and pick anchor 5; G0's
  // cost is lower (larger IoU, equal class cost), so it keeps it and G1 gets none.
  auto pred = boxes_like(100, 100, 2, 2);
  pred[5] = torch::tensor({17.f, 16.f, 16.f, 16.f});
  auto gt = torch::tensor({16.f, 16.f, 16.f, 16.f, 20.f, 16.f, 16.f, 16.f}).view({1, 2, 4});
  auto m = SimOta(1)(pred.unsqueeze(0), torch::zeros({1, 16, 1}), torch::zeros({1, 16, 1}), g.grid, g.strides, gt,
                     torch::zeros({1, 2}), torch::ones({1, 2}));
  CHECK(m.dynamic_k[0][0].item<int64_t>() == 1);
  CHECK(m.dynamic_k[0][1].item<int64_t>() == 1);
  CHECK(fg_anchors(m.fg_mask[0]) == std::vector<int64_t>{5});
  CHECK(m.gt_index[0][5].item<int64_t>() == 0);
  CHECK(m.iou[0][5].item<float>() == doctest::Approx(240.0 / 272.0));
  CHECK(m.matching[0][1].sum().item<float>() == 0);
}

TEST_CASE("simota: dynamic k of 10 reaches past the gt's centre region (1e6 penalty); padding and empty images") {
  Grid4 g;
  // A = (12, 12, 16x16), class 0: centre region x, y cells 0..2 -> 9 anchors. B = (28, 28, 4x4), class 1:
  // cells 2..3 -> anchors 10, 11, 14, 15 (10 shared). Every prediction is A's box, except 14 and 15 shifted
  // by 1 px: A sees ten IoUs of 1 (its 9 + anchor 11), so k_A = 10 and it takes its 9 anchors plus 11
  // (outside its centre region, +1e6, but the cheapest of the rest). B overlaps nothing: k_B = 1, and
  // anchor 15, whose class-1 logit is 3, is its cheapest.
  auto pred = boxes_like(12, 12, 16, 16);
  pred[14] = torch::tensor({13.f, 12.f, 16.f, 16.f});
  pred[15] = torch::tensor({12.f, 13.f, 16.f, 16.f});
  auto cls = torch::zeros({2, 16, 2});
  cls[0][15][1] = 3.0;
  auto gt = torch::zeros({2, 3, 4});
  gt[0][0] = torch::tensor({12.f, 12.f, 16.f, 16.f});
  gt[0][1] = torch::tensor({28.f, 28.f, 4.f, 4.f});
  auto labels = torch::tensor({0.f, 1.f, -1.f, -1.f, -1.f, -1.f}).view({2, 3});
  auto valid = (labels >= 0).to(torch::kFloat32);
  auto m = SimOta(2)(pred.unsqueeze(0).repeat({2, 1, 1}), cls, torch::zeros({2, 16, 1}), g.grid, g.strides, gt, labels,
                     valid);
  CHECK(m.dynamic_k[0][0].item<int64_t>() == 10);
  CHECK(m.dynamic_k[0][1].item<int64_t>() == 1);
  CHECK(m.dynamic_k[0][2].item<int64_t>() == 0);  // padding
  CHECK(fg_anchors(m.fg_mask[0]) == std::vector<int64_t>{0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 15});
  for (int64_t a : {0, 1, 2, 4, 5, 6, 8, 9, 10, 11}) CHECK(m.gt_index[0][a].item<int64_t>() == 0);
  CHECK(m.gt_index[0][15].item<int64_t>() == 1);
  CHECK(m.iou[0][15].item<float>() == 0);
  // The second image has only padding rows: nothing is foreground.
  CHECK(m.fg_mask[1].sum().item<float>() == 0);
  CHECK(m.num_fg.item<float>() == 11);
}

namespace {
// The raw maps of the reference computation: level i, element j of [B, 5 + nc, H, W] in row-major order =
// 0.8 sin(0.37 j + 1.3 i) (in float64, then float32); `big` rescales the log-size channels to
// 0.2 sin + 1.1 (boxes about 3 strides wide, so gts get several anchors).
std::vector<torch::Tensor> reference_maps(int64_t B, int64_t nc, int64_t S, bool big) {
  std::vector<torch::Tensor> out;
  int i = 0;
  for (int64_t s : {8, 16, 32}) {
    const int64_t h = S / s, n = B * (5 + nc) * h * h;
    auto t = (torch::arange(n, torch::kFloat64) * 0.37 + 1.3 * i).sin().to(torch::kFloat32).view({B, 5 + nc, h, h}) * 0.8;
    if (big) t.narrow(1, 2, 2).mul_(0.25).add_(1.1);
    out.push_back(t);
    ++i;
  }
  return out;
}
}  // namespace

TEST_CASE("yolox loss equals the original's get_losses on the same maps and labels (with and without L1)") {
  // Labels as the original takes them (class, cx, cy, w, h) -> ours (class, x1, y1, x2, y2), padded with -1.
  const double lab[4][5] = {{1, 20, 22, 14, 18}, {2, 40, 40, 30, 20}, {0, 44, 36, 10, 12}, {1, 30, 30, 50, 40}};
  auto targets = torch::full({2, 3, 5}, -1.0f);
  targets.narrow(2, 1, 4).zero_();
  for (int k = 0; k < 4; ++k) {
    const int b = k < 3 ? 0 : 1, r = k < 3 ? k : 0;
    targets[b][r] = torch::tensor({lab[k][0], lab[k][1] - lab[k][3] / 2, lab[k][2] - lab[k][4] / 2,
                                   lab[k][1] + lab[k][3] / 2, lab[k][2] + lab[k][4] / 2}, torch::kFloat64).to(torch::kFloat32);
  }
  // The original's outputs (python3 with torch 1.13, libreyolo/models/yolox/nn.py of snapshot c41461e):
  // {iou ×5, obj, cls, l1}, and num_fg / num_gts.
  struct Ref {
    bool big;
    double iou, obj, cls, l1, fg_per_gt;
  };
  const Ref refs[] = {{false, 4.700817584991455, 31.664684295654297, 2.3604981899261475, 1.97517991065979, 1.0},
                      {true, 4.324857234954834, 14.28452205657959, 2.087103843688965, 1.9061224460601807, 2.25}};
  for (const auto& r : refs) {
    CAPTURE(r.big);
    auto maps = reference_maps(2, 3, 64, r.big);
    yx::YoloxLoss loss({8, 16, 32}, 3);
    auto a = loss(maps, targets);
    CHECK(a.items[0].item<double>() == doctest::Approx(r.iou).epsilon(1e-5));
    CHECK(a.items[1].item<double>() == doctest::Approx(r.obj).epsilon(1e-5));
    CHECK(a.items[2].item<double>() == doctest::Approx(r.cls).epsilon(1e-5));
    CHECK(a.items[3].item<double>() == 0);
    CHECK(a.num_fg.item<double>() / 4 == doctest::Approx(r.fg_per_gt));
    CHECK(a.total.item<double>() == doctest::Approx(r.iou + r.obj + r.cls).epsilon(1e-5));
    loss.use_l1 = true;
    auto b = loss(maps, targets);
    CHECK(b.items[3].item<double>() == doctest::Approx(r.l1).epsilon(1e-5));
    CHECK(b.total.item<double>() == doctest::Approx(r.iou + r.obj + r.cls + r.l1).epsilon(1e-5));
  }
}

TEST_CASE("yolox loss: gradients reach every output channel; no gts gives only the objectness term; bad input throws") {
  auto maps = reference_maps(2, 3, 64, true);
  for (auto& m : maps) m.requires_grad_(true);
  auto targets = torch::full({2, 1, 5}, -1.0f);
  targets[0][0] = torch::tensor({1.f, 10.f, 10.f, 40.f, 30.f});
  yx::YoloxLoss loss({8, 16, 32}, 3);
  loss.use_l1 = true;
  auto out = loss(maps, targets);
  out.total.backward();
  auto g = maps[0].grad();
  for (int64_t c = 0; c < 8; ++c) CHECK(g.select(1, c).abs().sum().item<double>() > 0);

  auto none = loss(reference_maps(2, 3, 64, true), torch::full({2, 1, 5}, -1.0f));
  CHECK(none.num_fg.item<double>() == 0);
  CHECK(none.items[0].item<double>() == 0);
  CHECK(none.items[2].item<double>() == 0);
  CHECK(none.items[3].item<double>() == 0);
  CHECK(none.items[1].item<double>() > 0);
  CHECK(std::isfinite(loss(reference_maps(2, 3, 64, true), torch::zeros({2, 0, 5})).total.item<double>()));
  CHECK_THROWS_AS(loss(reference_maps(2, 4, 64, true), targets), libreyolo::ConfigError);
  CHECK_THROWS_AS(loss(maps, torch::zeros({3, 1, 5})), libreyolo::DataError);
}

LRY_GPU_SUITE {
TEST_CASE("yolox forward under fp16 autocast + SimOTA loss on CUDA: finite, no host synchronisation") {
  LRY_REQUIRE_CUDA();
#if defined(LIBREYOLO_WITH_CUDA)
  torch::manual_seed(0);
  const torch::Device cuda(torch::kCUDA, 0);
  yx::Yolox net(yx::YoloxOptions{"t", 3});
  net->to(cuda);
  net->train();
  yx::YoloxLoss loss(net->strides(), 3);
  loss.use_l1 = true;
  auto image = torch::rand({4, 3, 160, 160}, cuda) * 255;
  auto targets = torch::full({4, 6, 5}, -1.0, torch::TensorOptions().device(cuda));
  targets.narrow(2, 1, 4).zero_();
  for (int i = 0; i < 6; ++i)
    targets[3][i] = torch::tensor({double(i % 3), 5.0 + 20 * i, 5.0, 30.0 + 20 * i, 150.0}, torch::kFloat64).to(cuda);
  targets[0][0] = torch::tensor({2.0, 10.0, 20.0, 90.0, 100.0}, torch::kFloat64).to(cuda);
  torch::cuda::synchronize();
  libreyolo::compat::set_cuda_autocast(true, torch::kHalf);
  auto feats = net->forward(image);
  libreyolo::compat::set_cuda_autocast(false, torch::kHalf);
  at::autocast::clear_cache();
  loss(feats, targets);  // first call builds the grid cache
  torch::cuda::synchronize();
  auto& warn = c10::cuda::warning_state();
  warn.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  yx::YoloxLossOutput out;
  bool threw = false;
  try {
    out = loss(feats, targets);
  } catch (const std::exception& e) {
    threw = true;
    MESSAGE("synchronised: " << std::string(e.what()));
  }
  warn.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  REQUIRE_FALSE(threw);
  CHECK(std::isfinite(out.total.item<double>()));
  out.total.backward();
  for (const auto& p : net->parameters())
    if (p.grad().defined()) CHECK(torch::isfinite(p.grad()).all().item<bool>());
#endif
}
}
