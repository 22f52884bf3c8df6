// The dynamic soft-label assigner on hand-worked cases and the RTMDet loss against the original's numbers
// (RTMDetLoss run on the same maps and gts); on CUDA: no host synchronisation.
#include <libreyolo/assign/soft_label.hpp>
#include <libreyolo/core/compat.hpp>
#include <libreyolo/families/rtmdet/loss.hpp>
#include <libreyolo/families/rtmdet/network.hpp>

#include <doctest/doctest.h>

#include "support.hpp"

#include <cmath>
#include <vector>

#if defined(LIBREYOLO_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace rt = libreyolo::families::rtmdet;
using libreyolo::assign::SoftLabelAssigner;

namespace {
// One level of stride 8 on a 4x4 grid; priors at cell corners (x·8, y·8); prior index = y · 4 + x.
torch::Tensor priors4() {
  auto p = torch::empty({16, 3});
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) p[y * 4 + x] = torch::tensor({8.f * x, 8.f * y, 8.f});
  return p;
}
std::vector<int64_t> fg_of(const torch::Tensor& fg) {
  std::vector<int64_t> out;
  for (int64_t a = 0; a < fg.size(0); ++a)
    if (fg[a].item<float>() > 0) out.push_back(a);
  return out;
}
torch::Tensor boxes(double x1, double y1, double x2, double y2) {
  return torch::tensor({x1, y1, x2, y2}, torch::kFloat32).repeat({16, 1});
}
}  // namespace

TEST_CASE("soft-label assigner: candidates inside the gt, dynamic k from the top IoUs, cheapest priors") {
  // gt (4, 4, 20, 20): priors strictly inside are (8,8), (16,8), (8,16), (16,16) = 5, 6, 9, 10.
  auto pred = boxes(100, 100, 102, 102);   // IoU 0
  pred[5] = torch::tensor({4.f, 4.f, 20.f, 20.f});   // IoU 1
  pred[10] = torch::tensor({4.f, 4.f, 20.f, 20.f});  // IoU 1
  pred[6] = torch::tensor({4.f, 4.f, 12.f, 20.f});   // IoU 0.5
  pred[0] = torch::tensor({4.f, 4.f, 20.f, 20.f});   // IoU 1, outside (0 is on the corner): counts for k only
  auto gt = torch::tensor({4.f, 4.f, 20.f, 20.f}).view({1, 1, 4});
  auto m = SoftLabelAssigner(2)(pred.unsqueeze(0), torch::zeros({1, 16, 2}), priors4(), gt, torch::zeros({1, 1}),
                                torch::ones({1, 1}));
  // k = floor(1 + 1 + 1 + 0.5) = 3 (the IoUs of all priors count); the 3 cheapest are the two exact boxes
  // inside and, among the rest, the candidate 6 (IoU 0.5) before the non-candidate 0 (cost 1e8).
  CHECK(m.dynamic_k[0][0].item<int64_t>() == 3);
  CHECK(fg_of(m.fg_mask[0]) == std::vector<int64_t>{5, 6, 10});
  CHECK(m.metrics[0][6].item<float>() == doctest::Approx(0.5));
  CHECK(m.metrics[0][5].item<float>() == doctest::Approx(1.0));
}

TEST_CASE("soft-label assigner: a gt chooses among every candidate prior; conflicts go to the cheaper gt; padding") {
  // gt A (2, 2, 22, 22), centre (12, 12): priors 5 (8,8), 6 (16,8), 9 (8,16), 10 (16,16) inside, all at
  // 0.707 strides (soft prior 10^(0.707 - 3) = 0.0051). gt B (6, 6, 14, 14), centre (10, 10): only prior 5
  // inside, but B's cost is computed over every candidate of the image (distances: 5 -> 0.354 strides,
  // 6 and 9 -> 0.79, 10 -> 1.06). The second image holds only padding.
  auto gt = torch::zeros({2, 2, 4});
  gt[0][0] = torch::tensor({2.f, 2.f, 22.f, 22.f});
  gt[0][1] = torch::tensor({6.f, 6.f, 14.f, 14.f});
  auto labels = torch::tensor({0.f, 0.f, 0.f, -1.f}).view({2, 2});
  auto valid = torch::tensor({1.f, 1.f, 0.f, 0.f}).view({2, 2});
  SoftLabelAssigner assign(2);

  // (a) Prior 10 predicts A exactly and prior 5 predicts B exactly (cross IoUs 64/400): k = 1 each, and
  // each gt takes its exact prediction.
  auto pred = boxes(100, 100, 102, 102);
  pred[10] = torch::tensor({2.f, 2.f, 22.f, 22.f});
  pred[5] = torch::tensor({6.f, 6.f, 14.f, 14.f});
  auto m = assign(pred.unsqueeze(0).repeat({2, 1, 1}), torch::zeros({2, 16, 2}), priors4(), gt, labels, valid);
  CHECK(m.dynamic_k[0][0].item<int64_t>() == 1);
  CHECK(m.dynamic_k[0][1].item<int64_t>() == 1);
  CHECK(m.dynamic_k[1][0].item<int64_t>() == 0);
  CHECK(fg_of(m.fg_mask[0]) == std::vector<int64_t>{5, 10});
  CHECK(m.gt_index[0][5].item<int64_t>() == 1);
  CHECK(m.gt_index[0][10].item<int64_t>() == 0);
  CHECK(m.metrics[0][5].item<float>() == doctest::Approx(1.0));
  CHECK(m.fg_mask[1].sum().item<float>() == 0);

  // (b) No overlap anywhere (IoU cost 3 · -log(1e-7) for all); prior 10's class logit -4 makes it the
  // cheapest for both gts (class cost 0.173 -> 6e-6). A's cost there (soft prior 0.0051) beats B's
  // (0.0115): A keeps 10, B gets nothing.
  pred = boxes(100, 100, 102, 102);
  auto logits = torch::zeros({2, 16, 2});
  logits[0][10][0] = -4.0;
  m = assign(pred.unsqueeze(0).repeat({2, 1, 1}), logits, priors4(), gt, labels, valid);
  CHECK(fg_of(m.fg_mask[0]) == std::vector<int64_t>{10});
  CHECK(m.gt_index[0][10].item<int64_t>() == 0);
  CHECK(m.matching[0].select(1, 1).sum().item<float>() == 0);

  // (c) The cheap class score at prior 5 instead: both claim 5, and B (soft prior 0.0023) beats A (0.0051).
  logits[0][10][0] = 0.0;
  logits[0][5][0] = -4.0;
  m = assign(pred.unsqueeze(0).repeat({2, 1, 1}), logits, priors4(), gt, labels, valid);
  CHECK(fg_of(m.fg_mask[0]) == std::vector<int64_t>{5});
  CHECK(m.gt_index[0][5].item<int64_t>() == 1);
  CHECK(m.matching[0].select(1, 0).sum().item<float>() == 0);
}

TEST_CASE("rtmdet loss equals the original's RTMDetLoss on the same maps and gts") {
  // Maps: level i, element j of [B, 4 + nc, H, W] = 0.8 sin(0.37 j + 1.3 i) (float64 -> float32); the 4
  // distance channels become (0.3 v + 1.2) · stride, as the reference computation.
  std::vector<torch::Tensor> maps;
  int lvl = 0;
  for (int64_t s : {8, 16, 32}) {
    const int64_t h = 64 / s, n = 2 * 7 * h * h;
    auto t = (torch::arange(n, torch::kFloat64) * 0.37 + 1.3 * lvl).sin().to(torch::kFloat32).view({2, 7, h, h}) * 0.8;
    t.narrow(1, 0, 4).mul_(0.3).add_(1.2).mul_(static_cast<double>(s));
    maps.push_back(t);
    ++lvl;
  }
  const double lab[4][5] = {{1, 20, 22, 14, 18}, {2, 40, 40, 30, 20}, {0, 44, 36, 10, 12}, {1, 30, 30, 50, 40}};
  auto targets = torch::full({2, 3, 5}, -1.0f);
  targets.narrow(2, 1, 4).zero_();
  for (int k = 0; k < 4; ++k) {
    const int b = k < 3 ? 0 : 1, r = k < 3 ? k : 0;
    targets[b][r] = torch::tensor({lab[k][0], lab[k][1] - lab[k][3] / 2, lab[k][2] - lab[k][4] / 2,
                                   lab[k][1] + lab[k][3] / 2, lab[k][2] + lab[k][4] / 2}, torch::kFloat64).to(torch::kFloat32);
  }
  rt::RtmdetLoss loss({8, 16, 32}, 3);
  auto out = loss(maps, targets);
  // The original (python3 + torch 1.13, libreyolo/models/rtmdet/loss.py of snapshot c41461e): loss_cls
  // 20.955839157, loss_bbox 0.975058615; 11 positives (7 in image 0, 4 in image 1).
  CHECK(out.items[0].item<double>() == doctest::Approx(20.955839157104492).epsilon(1e-5));
  CHECK(out.items[1].item<double>() == doctest::Approx(0.9750586152076721).epsilon(1e-5));
  CHECK(out.num_fg.item<double>() == 11);
  CHECK(out.total.item<double>() == doctest::Approx(21.930898666381836).epsilon(1e-5));

  // Gradients flow to the distances and the logits; an all-padding batch has no box term.
  for (auto& m : maps) m.requires_grad_(true);
  loss(maps, targets).total.backward();
  CHECK(maps[0].grad().narrow(1, 0, 4).abs().sum().item<double>() > 0);
  CHECK(maps[0].grad().narrow(1, 4, 3).abs().sum().item<double>() > 0);
  auto none = loss(maps, torch::full({2, 1, 5}, -1.0f));
  CHECK(none.items[1].item<double>() == 0);
  CHECK(std::isfinite(none.items[0].item<double>()));
  CHECK_THROWS_AS(loss(maps, torch::zeros({3, 1, 5})), libreyolo::DataError);
}

LRY_GPU_SUITE {
TEST_CASE("rtmdet forward under fp16 autocast + soft-label loss on CUDA: float32 outputs, no host synchronisation") {
  LRY_REQUIRE_CUDA();
#if defined(LIBREYOLO_WITH_CUDA)
  const torch::Device cuda(torch::kCUDA, 0);
  rt::Rtmdet net(rt::RtmdetOptions{"t", 3});
  net->to(cuda);
  net->train();
  rt::RtmdetLoss loss(net->strides(), 3);
  auto image = torch::randn({4, 3, 160, 160}, cuda);
  auto targets = torch::full({4, 6, 5}, -1.0, torch::TensorOptions().device(cuda));
  targets.narrow(2, 1, 4).zero_();
  for (int i = 0; i < 6; ++i)
    targets[3][i] = torch::tensor({double(i % 3), 5.0 + 20 * i, 5.0, 30.0 + 20 * i, 150.0}, torch::kFloat64).to(cuda);
  targets[0][0] = torch::tensor({2.0, 10.0, 20.0, 90.0, 100.0}, torch::kFloat64).to(cuda);
  libreyolo::compat::set_cuda_autocast(true, torch::kHalf);
  auto feats = net->forward(image);
  libreyolo::compat::set_cuda_autocast(false, torch::kHalf);
  at::autocast::clear_cache();
  CHECK((feats[0].scalar_type() == torch::kFloat32));
  loss(feats, targets);
  torch::cuda::synchronize();
  auto& warn = c10::cuda::warning_state();
  warn.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  rt::RtmdetLossOutput out;
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

TEST_CASE("rtmdet under fp16 autocast: the shared convs' gradients do not depend on autocast's weight cache") {
  // The capture policy records with the cache off, eager trains with it on: equal gradients here are what
  // lets a graph run reproduce eager bit for bit (network.hpp, tower()).
  LRY_REQUIRE_CUDA();
  const torch::Device cuda(torch::kCUDA, 0);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  torch::manual_seed(1);
  rt::Rtmdet net(rt::RtmdetOptions{"t", 3});
  net->to(cuda);
  net->train();
  auto x = torch::randn({2, 3, 128, 128}, cuda);
  auto grads = [&](bool cache) {
    for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
    const bool prev = libreyolo::compat::autocast_cache_enabled();
    libreyolo::compat::set_autocast_cache_enabled(cache);
    libreyolo::compat::set_cuda_autocast(true, torch::kHalf);
    auto out = net->forward(x);
    libreyolo::compat::set_cuda_autocast(false, torch::kHalf);
    at::autocast::clear_cache();
    libreyolo::compat::set_autocast_cache_enabled(prev);
    torch::Tensor loss = torch::zeros({}, x.options());
    for (auto& o : out) loss = loss + o.pow(2).mean();
    loss.backward();
    std::vector<torch::Tensor> g;
    for (auto& p : net->head->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    return g;
  };
  auto on = grads(true), off = grads(false);
  REQUIRE(on.size() == off.size());
  for (size_t i = 0; i < on.size(); ++i)
    if (on[i].defined()) CHECK(on[i].equal(off[i]));
  at::globalContext().setDeterministicCuDNN(false);
}
}

