// cuda_graph=step (issue 25), the parts that run on the CPU: the optimizer's, scaler's and EMA's device
// forms against their eager forms (bit for bit), a forced inf/NaN step skipped on the device, the
// padded (bucketed) targets against the unpadded ones in the YOLOv9, YOLOX (SimOTA) and RTMDet
// (soft-label) assignments and losses, the per-shape cache of YOLOX's grids and RTMDet's priors, the
// config key, the static fallback notice, and whole training runs with cuda_graph=step on the CPU (the
// step path without a graph) equal to eager runs exactly.
#include <libreyolo/assign/simota.hpp>
#include <libreyolo/assign/soft_label.hpp>
#include <libreyolo/assign/tal.hpp>
#include <libreyolo/capture/cuda_graph.hpp>
#include <libreyolo/capture/level_cache.hpp>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade
#include "support_extern.hpp"

#include "kit/region_family.hpp"
#include "support.hpp"
#include "support_data.hpp"
#include "support_synth.hpp"

#include "support_doctest.hpp"

#include <functional>
#include <string>
#include <vector>

namespace ly = libreyolo;
namespace cap = ly::capture;
using ly::train::Optimizer;
using ly::train::OptimizerOptions;

namespace {

struct LogCapture {
  std::vector<std::string> lines;
  std::function<void(ly::log::Level, std::string_view)> prev;
  LogCapture() { prev = ly::log::set_sink([this](ly::log::Level, std::string_view m) { lines.emplace_back(m); }); }
  ~LogCapture() { ly::log::set_sink(prev); }
  int count(const std::string& needle) const {
    int n = 0;
    for (auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
};

std::vector<torch::Tensor> make_params(int64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({3, 4}), torch::randn({5}), torch::randn({2, 2, 3}), torch::randn({7})};
}
std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}
std::vector<torch::Tensor> grads_for(const std::vector<torch::Tensor>& ps, int k) {
  torch::manual_seed(2000 + k);
  std::vector<torch::Tensor> gs;
  for (const auto& p : ps) gs.push_back(torch::randn(p.sizes()));
  return gs;
}
void set_grads(std::vector<torch::Tensor>& ps, const std::vector<torch::Tensor>& gs) {
  for (size_t i = 0; i < ps.size(); ++i) ps[i].mutable_grad() = gs[i].clone();
}
bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}
Optimizer make_opt(std::vector<torch::Tensor>& ps, const std::string& name, bool nesterov) {
  OptimizerOptions oo;
  oo.name = name;
  oo.lr0 = name == "SGD" ? 0.05 : 0.01;
  oo.momentum = 0.9;
  oo.nesterov = nesterov;
  oo.beta2 = 0.99;
  return Optimizer({{"decay", {ps[0], ps[2]}, 0.05, 0}, {"bias", {ps[1], ps[3]}, 0, 0}}, oo);
}

}  // namespace

// ---- the optimizer's device form ------------------------------------------------------------------
TEST_CASE("Optimizer::device_step equals step() bit for bit (SGD nesterov/plain, AdamW; lr changes; with and without found_inf)") {
  for (const char* name : {"SGD", "AdamW"})
    for (bool nesterov : {true, false})
      for (bool with_found : {false, true}) {
        if (std::string(name) == "AdamW" && !nesterov) continue;
        CAPTURE(name);
        CAPTURE(nesterov);
        CAPTURE(with_found);
        auto base = make_params(5);
        auto a = clone_params(base), b = clone_params(base);
        Optimizer eager = make_opt(a, name, nesterov), dev = make_opt(b, name, nesterov);
        dev.enable_device_state();
        CHECK(dev.device_state());
        CHECK_FALSE(dev.device_fused());  // CPU: the generic form
        const torch::Tensor found = with_found ? torch::zeros({}) : torch::Tensor();
        for (int k = 0; k < 10; ++k) {
          const double lr = (std::string(name) == "SGD" ? 0.05 : 0.01) * (1.0 + 0.2 * k);  // a warm-up-like ramp
          for (size_t g = 0; g < 2; ++g) eager.set_lr(g, lr * (g + 1)), dev.set_lr(g, lr * (g + 1));
          auto gs = grads_for(base, k);
          set_grads(a, gs);
          set_grads(b, gs);
          eager.step();
          dev.device_step(found);
        }
        CHECK(all_equal(a, b));
        CHECK_FALSE(torch::allclose(a[0], base[0]));  // the parameters really moved
      }
}

TEST_CASE("Optimizer device state: checkpoints carry the device step counts; a loaded optimizer continues exactly") {
  auto base = make_params(9);
  auto a = clone_params(base), b = clone_params(base), c = clone_params(base);
  Optimizer eager = make_opt(a, "AdamW", true), dev = make_opt(b, "AdamW", true);
  dev.enable_device_state();
  for (int k = 0; k < 4; ++k) {
    auto gs = grads_for(base, k);
    set_grads(a, gs);
    set_grads(b, gs);
    eager.step();
    dev.device_step();
  }
  ly::train::Checkpoint ck_e, ck_d;
  eager.save(ck_e, "optim.");
  dev.save(ck_d, "optim.");
  CHECK(ck_e.meta["optim"]["groups"] == ck_d.meta["optim"]["groups"]);  // steps 4, from the device counts
  // Load the device optimizer's checkpoint into a fresh device optimizer at c (params copied from b).
  for (size_t i = 0; i < c.size(); ++i) c[i].data().copy_(b[i].detach());
  Optimizer resumed = make_opt(c, "AdamW", true);
  resumed.enable_device_state();
  resumed.load(ck_d, "optim.");
  for (int k = 4; k < 7; ++k) {
    auto gs = grads_for(base, k);
    set_grads(a, gs);
    set_grads(c, gs);
    eager.step();
    resumed.device_step();
  }
  CHECK(all_equal(a, c));
}

// ---- the scaler's device form: a forced inf step is skipped on the device --------------------------
TEST_CASE("GradScaler device form: a forced inf step is skipped (parameters, state, step counts unchanged), the scale halved") {
  for (const char* name : {"SGD", "AdamW"}) {
    CAPTURE(name);
    auto base = make_params(3);
    auto a = clone_params(base), b = clone_params(base);
    Optimizer eager = make_opt(a, name, true), dev = make_opt(b, name, true);
    dev.enable_device_state();
    ly::precision::GradScalerOptions so;
    so.init_scale = 1024;
    so.growth_interval = 3;
    ly::precision::GradScaler se(so), sd(so);
    const auto loss_like = torch::ones({});
    se.scale(loss_like);
    sd.scale(loss_like);
    std::vector<double> scales_e, scales_d;
    for (int k = 0; k < 8; ++k) {
      auto gs = grads_for(base, k);
      for (auto& g : gs) g.mul_(1024);  // "scaled" grads
      if (k == 2 || k == 5) gs[1][0] = std::numeric_limits<float>::infinity();
      if (k == 6) gs[2][0][1][2] = std::numeric_limits<float>::quiet_NaN();
      set_grads(a, gs);
      set_grads(b, gs);
      std::vector<torch::Tensor> before;
      for (auto& p : b) before.push_back(p.detach().clone());
      const bool stepped = se.step(eager);
      se.update();
      torch::Tensor found = sd.device_unscale_(dev.params());
      dev.device_step(found);
      sd.device_update(found);
      CHECK(stepped == (found.item<float>() == 0.0f));
      if (k == 2 || k == 5 || k == 6) {
        CHECK_FALSE(stepped);
        CHECK(all_equal(before, [&] {
          std::vector<torch::Tensor> v;
          for (auto& p : b) v.push_back(p.detach());
          return v;
        }()));
      }
      scales_e.push_back(se.scale_value());
      scales_d.push_back(sd.scale_value());
    }
    CHECK(scales_e == scales_d);
    CHECK(scales_d[2] == scales_d[1] / 2);  // backed off at the inf step
    CHECK(all_equal(a, b));
    ly::train::Checkpoint ce, cd;
    eager.save(ce, "o.");
    dev.save(cd, "o.");
    CHECK(ce.meta["o"]["groups"] == cd.meta["o"]["groups"]);  // skipped steps are not counted
  }
}

// ---- AdamW's multi-tensor device form (the CUDA default; forced on here) ----------------------------
// The same arithmetic as step() (every form divides the denominator by the step size), so bit for bit; a
// skipped step leaves everything exactly as it was.
TEST_CASE("Optimizer AdamW multi-tensor device form: step() bit for bit, skipped inf/NaN steps change nothing, a grad-less parameter moves its group to the per-tensor form") {
  for (bool with_scaler : {false, true}) {
    CAPTURE(with_scaler);
    auto base = make_params(11);
    auto a = clone_params(base), b = clone_params(base);
    Optimizer eager = make_opt(a, "AdamW", true), dev = make_opt(b, "AdamW", true);
    dev.set_device_multi_tensor(true);
    dev.enable_device_state();
    CHECK(dev.device_multi_tensor());
    CHECK_THROWS_AS(dev.set_device_multi_tensor(false), ly::Error);  // after enable_device_state(): refused
    ly::precision::GradScalerOptions so;
    so.init_scale = 1024;
    so.growth_interval = 3;
    ly::precision::GradScaler se(so), sd(so);
    const auto loss_like = torch::ones({});
    se.scale(loss_like);
    sd.scale(loss_like);
    int skipped = 0;
    for (int k = 0; k < 12; ++k) {
      CAPTURE(k);
      const double lr = 0.01 * (1.0 + 0.2 * k);
      for (size_t g = 0; g < 2; ++g) eager.set_lr(g, lr * (g + 1)), dev.set_lr(g, lr * (g + 1));
      auto gs = grads_for(base, k);
      if (with_scaler) {
        for (auto& g : gs) g.mul_(1024);
        if (k == 0 || k == 4) gs[1][0] = std::numeric_limits<float>::infinity();  // k 0: the very first step skipped
        if (k == 7) gs[2][0][1][2] = std::numeric_limits<float>::quiet_NaN();
      }
      set_grads(a, gs);
      set_grads(b, gs);
      if (k == 9) {  // parameter 3 ("bias" group) has no grad: step() leaves it; the group leaves the multi-tensor form
        a[3].mutable_grad() = torch::Tensor();
        b[3].mutable_grad() = torch::Tensor();
      }
      std::vector<torch::Tensor> before;
      for (auto& p : b) before.push_back(p.detach().clone());
      bool stepped = true;
      if (with_scaler) {
        stepped = se.step(eager);
        se.update();
        torch::Tensor found = sd.device_unscale_(dev.params());
        dev.device_step(found);
        sd.device_update(found);
        CHECK(stepped == (found.item<float>() == 0.0f));
      } else {
        eager.step();
        dev.device_step();
      }
      if (!stepped) {
        ++skipped;
        for (size_t i = 0; i < b.size(); ++i) CHECK(torch::equal(b[i].detach(), before[i]));
      }
      if (k == 9) CHECK(torch::equal(b[3].detach(), before[3]));  // no grad: not moved
      for (size_t i = 0; i < a.size(); ++i) {
        CAPTURE(i);
        CHECK(torch::equal(b[i].detach(), a[i].detach()));
      }
    }
    CHECK(skipped == (with_scaler ? 3 : 0));
    CHECK_FALSE(torch::allclose(b[0].detach(), base[0], 1e-3, 1e-3));  // the parameters really moved
    ly::train::Checkpoint ce, cd;
    eager.save(ce, "o.");
    dev.save(cd, "o.");
    CHECK(ce.meta["o"]["groups"] == cd.meta["o"]["groups"]);  // the device counts: skips and the grad-less step not counted
    CHECK(cd.meta["o"]["groups"][1]["steps"][1].get<int64_t>() == cd.meta["o"]["groups"][1]["steps"][0].get<int64_t>() - 1);
  }
}

// ---- the EMA's device form --------------------------------------------------------------------------
TEST_CASE("ModelEMA device form equals update() bit for bit") {
  torch::manual_seed(1);
  torch::nn::Sequential model(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
  auto copy_a = std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
  auto copy_b = std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
  ly::train::ModelEMA ea(copy_a, *model, 0.999, 5), eb(copy_b, *model, 0.999, 5);
  for (int k = 0; k < 6; ++k) {
    {
      torch::NoGradGuard ng;
      for (auto& p : model->parameters()) p.add_(torch::randn(p.sizes()) * 0.1);
      model->forward(torch::randn({5, 4}));  // BatchNorm statistics move
    }
    ea.update(*model);
    eb.begin_device_update();
    eb.device_update(*model);
  }
  CHECK(ea.updates() == eb.updates());
  CHECK(ea.current_decay() == eb.current_decay());
  for (size_t i = 0; i < copy_a->parameters().size(); ++i) CHECK(copy_a->parameters()[i].equal(copy_b->parameters()[i]));
  for (size_t i = 0; i < copy_a->buffers().size(); ++i) CHECK(copy_a->buffers()[i].equal(copy_b->buffers()[i]));
}

// ---- bucketed targets ------------------------------------------------------------------------------
TEST_CASE("pad_targets_to_bucket: powers of two, class -1 padding rows, the rows kept") {
  auto t = torch::rand({2, 5, 5});
  auto p = ly::data::pad_targets_to_bucket(t);
  CHECK(p.sizes() == torch::IntArrayRef({2, 8, 5}));
  CHECK(p.narrow(1, 0, 5).equal(t));
  CHECK((p.narrow(1, 5, 3).select(2, 0) == -1).all().item<bool>());
  CHECK((p.narrow(1, 5, 3).narrow(2, 1, 4) == 0).all().item<bool>());
  CHECK(ly::data::pad_targets_to_bucket(torch::rand({2, 4, 5})).size(1) == 4);  // already a power of two
  CHECK(ly::data::pad_targets_to_bucket(torch::rand({3, 1, 5})).size(1) == 1);
  CHECK(cap::bucket_rows(0) == 1);
  CHECK(cap::bucket_rows(9) == 16);
  CHECK(cap::bucket_rows(16) == 16);
}

namespace {
// Random targets [B, M, 5]: image b has n_b real boxes (random classes, boxes inside `size`), the rest
// padding (class -1).
torch::Tensor random_targets(int64_t B, int64_t M, int64_t nc, double size, uint64_t seed) {
  torch::manual_seed(static_cast<int64_t>(seed));
  auto t = torch::zeros({B, M, 5});
  t.select(2, 0).fill_(-1);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = torch::randint(0, M + 1, {1}).item<int64_t>();
    for (int64_t m = 0; m < n; ++m) {
      auto xy = torch::rand({2}) * size * 0.7;
      auto wh = torch::rand({2}) * size * 0.3 + 4;
      t[b][m][0] = torch::randint(0, nc, {1}).item<int64_t>();
      t[b][m][1] = xy[0];
      t[b][m][2] = xy[1];
      t[b][m][3] = (xy[0] + wh[0]).clamp_max(size - 1);
      t[b][m][4] = (xy[1] + wh[1]).clamp_max(size - 1);
    }
  }
  return t;
}
}  // namespace

TEST_CASE("padded (bucketed) targets: the same YOLOv9 assignment and loss as the unpadded ones on random batches") {
  const int64_t nc = 3, reg_max = 16, B = 3, S = 64;
  ly::families::yolo9::DetectionLoss loss({8, 16, 32}, nc, reg_max);
  for (uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    CAPTURE(seed);
    const int64_t M = 3 + static_cast<int64_t>(seed) % 6;  // 4 .. 8: some already powers of two
    auto targets = random_targets(B, M, nc, S, seed);
    auto padded = ly::data::pad_targets_to_bucket(targets);
    CHECK(padded.size(1) == cap::bucket_rows(M));
    torch::manual_seed(100 + static_cast<int64_t>(seed));
    std::vector<torch::Tensor> feats;
    for (int64_t s : {8, 16, 32}) feats.push_back(torch::randn({B, 4 * reg_max + nc, S / s, S / s}));
    auto a = loss(feats, targets), b = loss(feats, padded);
    CHECK(torch::allclose(a.items, b.items, /*rtol=*/0, /*atol=*/1e-6));
    CHECK(std::abs(a.total.item<double>() - b.total.item<double>()) <= 1e-6);
    // The assignment itself (BoxMatcher, as the loss calls it).
    auto [pred_dist, logits] = ly::families::yolo9::split_head_outputs(feats, reg_max);
    auto anchors = ly::families::yolo9::make_anchors(feats, {8, 16, 32});
    auto boxes = ly::families::yolo9::dist2bbox(ly::families::yolo9::dfl_decode(pred_dist, reg_max), anchors.points);
    ly::assign::BoxMatcher matcher(nc, ly::assign::BoxMatcherOptions{10, 6.0, 0.5, reg_max});
    auto match = [&](const torch::Tensor& t) {
      auto lab = t.narrow(2, 0, 1), gb = t.narrow(2, 1, 4);
      return matcher(logits.sigmoid(), boxes * anchors.strides, anchors.points * anchors.strides, anchors.strides, lab, gb,
                     (lab >= 0).to(torch::kFloat32));
    };
    auto ma = match(targets), mb = match(padded);
    CHECK(ma.fg_mask.equal(mb.fg_mask));
    CHECK(ma.gt_index.equal(mb.gt_index));
    CHECK(torch::allclose(ma.scores, mb.scores, 0, 1e-6));
    CHECK(torch::allclose(ma.bboxes, mb.bboxes, 0, 1e-6));
    // And the task-aligned assigner (assign/tal.hpp) on the same predictions.
    ly::assign::TaskAlignedAssigner tal(nc);
    auto ta = tal(logits.sigmoid(), boxes * anchors.strides, anchors.points * anchors.strides, targets.narrow(2, 0, 1),
                  targets.narrow(2, 1, 4), (targets.narrow(2, 0, 1) >= 0).to(torch::kFloat32));
    auto tb = tal(logits.sigmoid(), boxes * anchors.strides, anchors.points * anchors.strides, padded.narrow(2, 0, 1),
                  padded.narrow(2, 1, 4), (padded.narrow(2, 0, 1) >= 0).to(torch::kFloat32));
    CHECK(ta.fg_mask.equal(tb.fg_mask));
    CHECK(ta.labels.equal(tb.labels));
    CHECK(ta.gt_index.equal(tb.gt_index));
    CHECK(torch::allclose(ta.scores, tb.scores, 0, 1e-6));
  }
}

namespace {
// Random head maps [B, channels, S/s, S/s] at strides 8, 16, 32; the first `positive` channels drawn from
// [2, 18) instead (RTMDet's box distances in pixels, so that the predictions overlap the ground truths).
std::vector<torch::Tensor> random_maps(int64_t B, int64_t channels, int64_t S, uint64_t seed, int64_t positive = 0) {
  torch::manual_seed(static_cast<int64_t>(seed));
  std::vector<torch::Tensor> feats;
  for (int64_t s : {8, 16, 32}) {
    auto f = torch::randn({B, channels, S / s, S / s});
    if (positive > 0) f.narrow(1, 0, positive).uniform_(2, 18);
    feats.push_back(f);
  }
  return feats;
}
// Box counts of the random batches: 1, 4 and 8 are powers of two already (no padding added).
const std::vector<int64_t> kBoxCounts{1, 3, 4, 5, 7, 8, 9};
bool has_real_box(const torch::Tensor& targets) { return (targets.select(2, 0) >= 0).any().item<bool>(); }
// The padded rows of a [B, M', ...] (dim 1) or [B, A, M'] (dim 2) assignment tensor beyond the first M.
torch::Tensor beyond(const torch::Tensor& t, int64_t dim, int64_t M) { return t.narrow(dim, M, t.size(dim) - M); }
}  // namespace

TEST_CASE("padded (bucketed) targets: the same SimOTA assignment and YOLOX loss (L1 off and on) as the unpadded ones") {
  const int64_t nc = 3, B = 3, S = 64;
  const std::vector<int64_t> strides{8, 16, 32};
  int64_t fg_total = 0;
  for (bool l1 : {false, true})
    for (size_t i = 0; i < kBoxCounts.size(); ++i) {
      const int64_t M = kBoxCounts[i];
      const uint64_t seed = 10 + i;
      CAPTURE(M);
      CAPTURE(l1);
      auto targets = random_targets(B, M, nc, S, seed);
      auto padded = ly::data::pad_targets_to_bucket(targets);
      REQUIRE(padded.size(1) == cap::bucket_rows(M));
      auto feats = random_maps(B, 5 + nc, S, 200 + seed);
      ly::families::yolox::YoloxLoss loss(strides, nc);
      loss.use_l1 = l1;
      auto a = loss(feats, targets), b = loss(feats, padded);
      CHECK(torch::allclose(a.items, b.items, /*rtol=*/0, /*atol=*/1e-6));
      CHECK(std::abs(a.total.item<double>() - b.total.item<double>()) <= 1e-6);
      CHECK(a.num_fg.equal(b.num_fg));
      if (has_real_box(targets)) {
        CHECK(a.num_fg.item<double>() > 0);  // the comparison is not vacuous
        CHECK((a.items[3].item<double>() > 0) == l1);
      }
      fg_total += static_cast<int64_t>(a.num_fg.item<double>());
      // The assignment itself, on the inputs the loss gives it.
      auto rows = ly::families::yolox::flatten_levels(feats);
      auto [grid, stride] = ly::families::yolox::grids_of(feats, strides);
      auto boxes = ly::families::yolox::decode_boxes(rows, grid, stride);
      ly::assign::SimOta simota(nc);
      auto match = [&](const torch::Tensor& t) {
        auto x1y1 = t.narrow(-1, 1, 2), x2y2 = t.narrow(-1, 3, 2);
        auto gt = torch::cat({(x1y1 + x2y2) / 2, x2y2 - x1y1}, -1);
        auto labels = t.select(-1, 0);
        return simota(boxes, rows.narrow(-1, 5, nc), rows.narrow(-1, 4, 1), grid, stride, gt, labels,
                      (labels >= 0).to(torch::kFloat32));
      };
      auto ma = match(targets), mb = match(padded);
      CHECK(ma.fg_mask.equal(mb.fg_mask));
      CHECK(ma.gt_index.equal(mb.gt_index));
      CHECK(torch::allclose(ma.iou, mb.iou, 0, 1e-6));
      CHECK(ma.num_fg.equal(mb.num_fg));
      CHECK(ma.dynamic_k.equal(mb.dynamic_k.narrow(1, 0, M)));
      CHECK(ma.matching.equal(mb.matching.narrow(1, 0, M)));
      CHECK(beyond(mb.dynamic_k, 1, M).sum().item<int64_t>() == 0);  // padding rows match nothing
      CHECK(beyond(mb.matching, 1, M).sum().item<double>() == 0);
    }
  CHECK(fg_total > 0);
}

TEST_CASE("padded (bucketed) targets: the same soft-label assignment and RTMDet loss as the unpadded ones") {
  const int64_t nc = 3, B = 3, S = 64;
  const std::vector<int64_t> strides{8, 16, 32};
  for (size_t i = 0; i < kBoxCounts.size(); ++i) {
    const int64_t M = kBoxCounts[i];
    const uint64_t seed = 30 + i;
    CAPTURE(M);
    auto targets = random_targets(B, M, nc, S, seed);
    auto padded = ly::data::pad_targets_to_bucket(targets);
    REQUIRE(padded.size(1) == cap::bucket_rows(M));
    auto feats = random_maps(B, 4 + nc, S, 400 + seed, /*positive=*/4);
    ly::families::rtmdet::RtmdetLoss loss(strides, nc);
    auto a = loss(feats, targets), b = loss(feats, padded);
    CHECK(torch::allclose(a.items, b.items, /*rtol=*/0, /*atol=*/1e-6));
    CHECK(std::abs(a.total.item<double>() - b.total.item<double>()) <= 1e-6);
    CHECK(a.num_fg.equal(b.num_fg));
    if (has_real_box(targets)) CHECK(a.num_fg.item<double>() > 0);
    // The assignment itself, on the inputs the loss gives it.
    auto rows = ly::families::rtmdet::flatten_levels(feats);
    auto priors = ly::families::rtmdet::make_priors(feats, strides);
    auto boxes = ly::families::rtmdet::distance2bbox(priors.narrow(1, 0, 2), rows.narrow(-1, 0, 4));
    ly::assign::SoftLabelAssigner assigner(nc);
    auto match = [&](const torch::Tensor& t) {
      auto labels = t.select(-1, 0), gt = t.narrow(-1, 1, 4);
      auto valid = (labels >= 0) & (gt.select(-1, 2) > gt.select(-1, 0)) & (gt.select(-1, 3) > gt.select(-1, 1));
      return assigner(boxes, rows.narrow(-1, 4, nc), priors, gt, labels, valid.to(torch::kFloat32));
    };
    auto ma = match(targets), mb = match(padded);
    CHECK(ma.fg_mask.equal(mb.fg_mask));
    CHECK(ma.gt_index.equal(mb.gt_index));
    CHECK(torch::allclose(ma.metrics, mb.metrics, 0, 1e-6));
    CHECK(ma.dynamic_k.equal(mb.dynamic_k.narrow(1, 0, M)));
    CHECK(ma.matching.equal(mb.matching.narrow(2, 0, M)));
    CHECK(beyond(mb.dynamic_k, 1, M).sum().item<int64_t>() == 0);  // padding columns match nothing
    CHECK(beyond(mb.matching, 2, M).sum().item<double>() == 0);
  }
}

TEST_CASE("LevelCache (YOLOX grids, RTMDet priors): one value per map sizes and device, reused; nothing captures on a CPU") {
  cap::LevelCache<torch::Tensor> cache;
  int built = 0;
  auto make = [&] {
    ++built;
    return torch::full({2}, static_cast<double>(built));
  };
  const std::vector<torch::Tensor> a{torch::zeros({1, 2, 8, 8}), torch::zeros({1, 2, 4, 4})};
  const std::vector<torch::Tensor> same_sizes{torch::zeros({3, 7, 8, 8}), torch::zeros({3, 7, 4, 4})};
  const std::vector<torch::Tensor> other{torch::zeros({1, 2, 16, 16}), torch::zeros({1, 2, 8, 8})};
  auto x = cache.get(a, make);
  auto y = cache.get(same_sizes, make);  // batch and channels do not matter
  CHECK(built == 1);
  CHECK(x.is_same(y));
  auto z = cache.get(other, make);
  CHECK(built == 2);
  CHECK(z[0].item<double>() == 2);
  CHECK(cache.size() == 2);
  CHECK_FALSE(ly::compat::cuda_stream_capturing(torch::kCPU));
}

// ---- config and the static fallback ------------------------------------------------------------------
TEST_CASE("cuda_graph accepts true | false | step; anything else is a clear error; step round-trips") {
  auto s = ly::parse_args({"cuda_graph=step"});
  CHECK(s.cuda_graph == ly::GraphMode::step);
  CHECK(ly::to_json(s)["cuda_graph"] == "step");
  auto back = ly::from_json(ly::to_json(s));
  CHECK(back.cuda_graph == ly::GraphMode::step);
  auto t = ly::parse_args({"cuda_graph=step", "cuda_graph=true"});
  CHECK(t.cuda_graph == ly::GraphMode::network);
  CHECK(ly::to_json(t)["cuda_graph"] == true);
  CHECK(ly::from_json(ly::to_json(t)).cuda_graph == ly::GraphMode::network);
  auto f = ly::parse_args({"cuda_graph=false"});
  CHECK(f.cuda_graph == ly::GraphMode::off);
  CHECK(ly::to_json(f)["cuda_graph"] == false);
  CHECK(ly::parse_args({"cuda_graph=STEP"}).cuda_graph == ly::GraphMode::step);
  CHECK(ly::to_string(ly::GraphMode::step) == "step");
  CHECK(ly::to_string(ly::GraphMode::network) == "true");
  CHECK(ly::to_string(ly::GraphMode::off) == "false");
  CHECK_THROWS_WITH_AS(ly::parse_args({"cuda_graph=maybe"}), doctest::Contains("true | false | step"), ly::ConfigError);
  CHECK_THROWS_WITH_AS(ly::parse_args({"cuda_graph=maybe"}), doctest::Contains("maybe"), ly::ConfigError);
  CHECK(ly::parse_args({}).cuda_graph_max_graphs == 4);
  CHECK(ly::parse_args({"cuda_graph_max_graphs=8"}).cuda_graph_max_graphs == 8);
  CHECK_THROWS_AS(ly::parse_args({"cuda_graph_max_graphs=0"}), ly::ConfigError);
}

namespace {
struct NoStepResNet : ly::ResNetFamily {
  static constexpr std::string_view name = "nostep_resnet";
  struct traits : ly::ResNetFamily::traits {
    static constexpr bool step_capturable = false;
  };
};
}  // namespace

static_assert(cap::step_capturable<ly::Yolo9Family>());
static_assert(cap::step_capturable<ly::ResNetFamily>());  // a classification task: yes by default
static_assert(cap::step_capturable<ly::MobileNetV4Family>());
static_assert(!cap::step_capturable<lry_test::TokenFamily>());  // a classifier whose decoder stays eager
static_assert(!cap::step_capturable<NoStepResNet>());
static_assert(cap::step_capturable<ly::YoloxFamily>());  // SimOTA on padded targets
static_assert(cap::step_capturable<ly::FomoFamily>());   // the weighted cross-entropy on the fixed grid
static_assert(cap::step_capturable<ly::RtmdetFamily>());  // the soft-label assigner on padded targets
static_assert(cap::step_capturable<ly::Yolov7Family>());  // SimOTA on padded targets, as YOLOX's
static_assert(!cap::step_capturable<ly::YoloNasFamily>());  // a detection loss not declared fixed-shape
static_assert(cap::step_capturable<ly::RTDETRFamily>());  // in two parts (member::segmented_step)
static_assert(cap::step_capturable<ly::RFDETRFamily>());   // in two parts: the criterion's fixed-slot form

// The scope is static: step -> network for a loss that is not fixed-shape, -> eager without a region.
using StepPolicy = cap::CudaGraph<cap::scope::step>;
static_assert(StepPolicy::whole_step && !cap::CudaGraph<>::whole_step && !cap::Eager::whole_step);
static_assert(std::is_same_v<cap::resolve_t<ly::ResNetFamily, StepPolicy>, StepPolicy>);
static_assert(std::is_same_v<cap::resolve_t<NoStepResNet, StepPolicy>, cap::CudaGraph<>>);
static_assert(std::is_same_v<cap::resolve_t<ly::YoloNasFamily, StepPolicy>, cap::CudaGraph<>>);
static_assert(std::is_same_v<cap::resolve_t<ly::ResNetFamily, StepPolicy, cap::Mode::distributed>, cap::Eager>);
static_assert(std::is_same_v<cap::resolve_t<ly::ResNetFamily, cap::CudaGraph<cap::scope::step, 5>>::network_only,
                             cap::CudaGraph<cap::scope::network, 5>>);
// The blessed aliases: StepTrainer is GraphTrainer itself where the step cannot be captured.
static_assert(std::is_same_v<ly::StepTrainer<ly::YoloNasFamily>, ly::GraphTrainer<ly::YoloNasFamily>>);
static_assert(std::is_same_v<ly::StepTrainer<ly::Yolo9Family>::Capture, StepPolicy>);
static_assert(std::is_same_v<ly::EagerTrainer<ly::Yolo9Family>::Capture, cap::Eager>);

TEST_CASE("cuda_graph=step with a family whose loss is not fixed-shape: the network only, one notice") {
  LogCapture log;
  const auto step_cfg = ly::parse_args({"cuda_graph=step", "device=cpu"});
  for (int i = 0; i < 2; ++i) {
    cap::resolve<NoStepResNet, StepPolicy>::notice(step_cfg);  // what the facade says
    cap::resolve<NoStepResNet, cap::CudaGraph<>>::notice(step_cfg);  // and the resolved trainer: the same line
    cap::CudaGraph<> c;  // the resolved policy
    c.setup(step_cfg, torch::kCPU);
    CHECK_FALSE(c.step_mode());
    CHECK(c.report()["step"]["requested"] == true);
    CHECK(c.report()["step"]["whole_step"] == false);
  }
  CHECK(log.count("cuda_graph=step: the nostep_resnet loss is not declared fixed-shape") == 1);
  CHECK(log.count("capturing the network only, as cuda_graph=true") == 1);
  // A registered family without the declaration.
  cap::resolve<ly::YoloNasFamily, StepPolicy>::notice(step_cfg);
  CHECK(log.count("cuda_graph=step: the yolonas loss is not declared fixed-shape") == 1);
  // A step-capturable family composed with the network scope by hand: told once what runs.
  cap::resolve<ly::ResNetFamily, cap::CudaGraph<>>::notice(step_cfg);
  cap::resolve<ly::ResNetFamily, cap::CudaGraph<>>::notice(step_cfg);
  CHECK(log.count("this trainer's capture policy has the network scope") == 1);
  // Gradient accumulation (batch 4, nominal batch 16: 4 micro-batches) is captured too: two graphs per shape.
  StepPolicy acc;
  acc.setup(ly::parse_args({"cuda_graph=step", "device=cpu", "batch=4", "nbs=16"}), torch::kCPU);
  CHECK(acc.step_mode());
  CHECK(log.count("gradient accumulation") == 0);  // no refusal
  StepPolicy ok;
  ok.setup(step_cfg, torch::kCPU);
  CHECK(ok.step_mode());
  CHECK_FALSE(ok.step_graphs_enabled());  // a CPU: the step path runs eager
  StepPolicy off;  // the type's scope, but capture off in the configuration
  off.setup(ly::parse_args({"cuda_graph=false", "device=cpu"}), torch::kCPU);
  CHECK_FALSE(off.step_mode());
  cap::CudaGraph<> net;
  net.setup(ly::parse_args({"cuda_graph=true", "device=cpu"}), torch::kCPU);
  CHECK_FALSE(net.step_mode());
  CHECK(cap::CudaGraph<>::cannot_run(ly::parse_args({"cuda_graph=true"}), torch::kCPU) ==
        (ly::compat::with_cuda ? "device cpu is not a CUDA device"
                               : "this build has no CUDA support (LIBREYOLO_WITH_CUDA is off)"));
  CHECK(cap::CudaGraph<>::cannot_run(ly::parse_args({"cuda_graph=false"}), torch::kCPU) == "cuda_graph=false");
}

// ---- whole runs on the CPU: cuda_graph=step equals eager exactly ------------------------------------
namespace {
struct Run {
  std::vector<torch::Tensor> losses, params, buffers, ema;
  nlohmann::json report;
  int64_t steps = 0;
};

template <class Capture, class F>
Run train_run(F family, std::vector<std::string> args) {
  ly::Trainer<F, ly::precision::FamilyDefault, Capture> t(ly::parse_args(args), std::move(family));
  Run r;
  struct Losses {
    std::vector<torch::Tensor>* out;
    void operator()(ly::event::step_end, const ly::StepInfo& s) { out->push_back(s.loss_items.detach().clone()); }
  } cb{&r.losses};
  auto res = t.fit(cb);
  r.steps = res.optimizer_steps;
  for (auto& p : t.network()->parameters()) r.params.push_back(p.detach().clone());
  for (auto& b : t.network()->buffers()) r.buffers.push_back(b.detach().clone());
  if (t.ema())
    for (auto& p : t.ema()->module().parameters()) r.ema.push_back(p.detach().clone());
  r.report = t.capture().report();
  return r;
}

void check_same(const Run& e, const Run& s) {
  CHECK(e.steps == s.steps);
  REQUIRE(e.losses.size() == s.losses.size());
  bool losses_equal = true;
  for (size_t i = 0; i < e.losses.size(); ++i) losses_equal = losses_equal && e.losses[i].equal(s.losses[i]);
  CHECK(losses_equal);
  CHECK(all_equal(e.params, s.params));
  CHECK(all_equal(e.buffers, s.buffers));
  CHECK(all_equal(e.ema, s.ema));
  CHECK_FALSE(e.ema.empty());
}
}  // namespace

namespace {
// A 2-epoch CPU ResNet-18 run on the tiny classification set (39 images at batch 8: 4 micro-batches an epoch, the
// partial fifth batch dropped),
// clipping, EMA and warm-up on; `nbs` sets the accumulation, `extra` more keys.
std::vector<std::string> resnet_run_args(const lry_test::TempDir& runs, const std::string& optimizer, const std::string& name,
                                         const std::string& graph, const std::string& nbs,
                                         const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a{"model=resnet18", "data=" + lry_test::tiny_classify_set().string(), "imgsz=32",
                             "batch=8", "nbs=" + nbs, "workers=0", "device=cpu", "warmup_epochs=1",
                             "warmup_lr_start=0.001", "lr0=0.02", "optimizer=" + optimizer,
                             "clip_grad_norm=0.5", "ema=true", "ema_tau=3", "project=" + runs.path.string(),
                             "name=" + name, "seed=4", "val=false", "epochs=2", "cuda_graph=" + graph};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}
}  // namespace

TEST_CASE("cuda_graph=step on the CPU (the step path, no graph) equals eager exactly: ResNet-18, SGD / AdamW, clip, EMA, warm-up") {
  lry_test::TempDir runs("lry_step_cpu");
  for (const char* optimizer : {"SGD", "AdamW"}) {
    CAPTURE(optimizer);
    auto args = [&](const std::string& name, const std::string& graph) {
      return resnet_run_args(runs, optimizer, name, graph, "8", {"max_steps=8"});
    };
    auto e = train_run<cap::Eager>(ly::ResNetFamily("18"), args(std::string("eager_") + optimizer, "false"));
    LogCapture log;
    auto s = train_run<cap::CudaGraph<cap::scope::step>>(ly::ResNetFamily("18"), args(std::string("step_") + optimizer, "step"));
    CHECK(e.steps == 8);
    check_same(e, s);
    CHECK(s.report["step"]["whole_step"] == true);
    CHECK(s.report["eager_steps"] == 8);
    CHECK(s.report["replayed_steps"] == 0);
    CHECK(log.count("cuda_graph training capture disabled, falling back to eager") == 1);  // no CUDA here
  }
}

TEST_CASE("cuda_graph=step on the CPU equals eager exactly under gradient accumulation: ResNet-18, windows of 3 and 1") {
  lry_test::TempDir runs("lry_step_cpu_acc");
  for (const char* optimizer : {"SGD", "AdamW"}) {
    CAPTURE(optimizer);
    // 4 micro-batches an epoch; nbs 24: accumulate 3, windows {1-3} {4} in each epoch.
    auto args = [&](const std::string& name, const std::string& graph) {
      return resnet_run_args(runs, optimizer, name, graph, "24");
    };
    auto e = train_run<cap::Eager>(ly::ResNetFamily("18"), args(std::string("eager_") + optimizer, "false"));
    auto s = train_run<cap::CudaGraph<cap::scope::step>>(ly::ResNetFamily("18"), args(std::string("step_") + optimizer, "step"));
    CHECK(e.steps == 4);
    CHECK(e.losses.size() == 8);
    check_same(e, s);
    CHECK(s.report["step"]["whole_step"] == true);
    CHECK(s.report["eager_steps"] == 8);
  }
}

namespace {
// A 5-step CPU detection run on 15 small synthetic images (12 train: 3 full batches an epoch), EMA and clipping on;
// `graph` is the cuda_graph value, `extra` more keys.
std::vector<std::string> detect_run_args(const std::string& model, const std::filesystem::path& yaml,
                                         const lry_test::TempDir& runs, const std::string& name,
                                         const std::string& graph, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a{"model=" + model, "data=" + yaml.string(), "imgsz=64", "batch=4", "workers=0",
                             "device=cpu", "warmup_epochs=1", "ema=true", "clip_grad_norm=10",
                             "project=" + runs.path.string(), "name=" + name, "seed=2", "val=false", "epochs=2",
                             "max_steps=5", "cuda_graph=" + graph};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A detection family's eager run and its cuda_graph=step run (the step path; no graph on a CPU) over
// detect_run_args with `extra` keys (runs named eager<suffix> / step<suffix>): `steps` optimizer steps, equal to
// the bit, the whole step requested. Returns the step run for the case's own checks.
template <class Make>
Run check_step_path(Make make, const std::string& model, const std::filesystem::path& yaml, const lry_test::TempDir& runs,
                    int64_t steps, const std::vector<std::string>& extra = {}, const std::string& suffix = "") {
  auto e = train_run<cap::Eager>(make(), detect_run_args(model, yaml, runs, "eager" + suffix, "false", extra));
  auto s = train_run<cap::CudaGraph<cap::scope::step>>(make(), detect_run_args(model, yaml, runs, "step" + suffix, "step", extra));
  CHECK(e.steps == steps);
  check_same(e, s);
  CHECK(s.report["step"]["whole_step"] == true);
  return s;
}
}  // namespace

TEST_CASE("cuda_graph=step on the CPU equals eager exactly: YOLOv9-t on a small detection set") {
  lry_test::TempDir runs("lry_step_cpu_y9");
  const auto yaml = lry_test::small_detect_set(runs.path, 15, 5);
  auto make = [] { return ly::Yolo9Family("t"); };
  check_step_path(make, "yolo9t", yaml, runs, 5);
  // Accumulating 2 of the 3 batches an epoch (nbs 8): windows {1-2} {3}, 4 optimizer steps in 2 epochs.
  check_step_path(make, "yolo9t", yaml, runs, 4, {"nbs=8"}, "_acc");
}

TEST_CASE("cuda_graph=step on the CPU equals eager exactly: YOLOX-t, the L1 loss turning on mid-run") {
  lry_test::TempDir runs("lry_step_cpu_yx");
  const auto yaml = lry_test::small_detect_set(runs.path, 15, 5);
  // Epoch 1 (steps 4 and 5) is the last no_aug epoch: the L1 loss is on there.
  const std::vector<std::string> l1{"no_aug_epochs=1"};
  const auto s = check_step_path([] { return ly::YoloxFamily("t"); }, "yoloxt", yaml, runs, 5, l1);
  CHECK(s.report["invalidations"] == 1);  // the L1 switch told the policy
  REQUIRE(s.losses.size() == 5);
  for (size_t i = 0; i < s.losses.size(); ++i) {
    CAPTURE(i);
    CHECK((s.losses[i][3].item<double>() > 0) == (i >= 3));  // the l1 column: 0 in epoch 0, > 0 in epoch 1
  }
}

TEST_CASE("cuda_graph=step on the CPU equals eager exactly: RTMDet-t on a small detection set") {
  lry_test::TempDir runs("lry_step_cpu_rtm");
  const auto yaml = lry_test::small_detect_set(runs.path, 15, 5);
  check_step_path([] { return ly::RtmdetFamily("t"); }, "rtmdett", yaml, runs, 5);
}

TEST_CASE("cuda_graph=step on the CPU equals eager exactly: YOLOv7-b on a small detection set") {
  lry_test::TempDir runs("lry_step_cpu_y7");
  const auto yaml = lry_test::small_detect_set(runs.path, 15, 5);
  check_step_path([] { return ly::Yolov7Family("b"); }, "yolo7b", yaml, runs, 5);
}

TEST_CASE("cuda_graph=step on the CPU equals eager exactly: FOMO-s (point task, float32, EMA on for the check)") {
  lry_test::TempDir runs("lry_step_cpu_fomo");
  const auto data = lry_test::task_set<ly::FomoFamily>(runs.path / "set", 12, 64, 3, 3);
  auto args = [&](const std::string& name, const std::string& graph) {
    return std::vector<std::string>{"model=fomos", "data=" + data.string(), "imgsz=64", "batch=4",
                                    "workers=0", "device=cpu", "ema=true", "project=" + runs.path.string(),
                                    "name=" + name, "seed=2", "val=false", "epochs=3", "max_steps=6",
                                    "cuda_graph=" + graph};
  };
  auto e = train_run<cap::Eager>(ly::FomoFamily("s"), args("eager", "false"));
  auto s = train_run<cap::CudaGraph<cap::scope::step>>(ly::FomoFamily("s"), args("step", "step"));
  CHECK(e.steps == 6);
  check_same(e, s);
  CHECK(s.report["step"]["whole_step"] == true);
}

// ---- The DETR line's segmented step (issue 44) on the CPU ---------------------------------------------
namespace {
// The family's loss and gradients two ways on one batch, the decoder's denoising part at the capacity the
// segmented form gives the batch's M target slots in both: loss(out, b), and match_segment -> the host's
// solve -> loss_given (capture::run_segments, what a recorded step replays). `pad_rows` padding rows (class
// -1) added to the batch's targets tensor make M larger than the batch's largest count. RF-DETR (no denoising
// part) sums its box terms over the fixed slots in another order than its per-image loss: never bit for bit.
template <class F>
void check_segmented_equals_loss(F fam, int64_t pad_rows) {
  constexpr bool denoising = requires(typename F::Network n) { n->decoder->set_denoising_capacity(0); };
  CAPTURE(F::name);
  CAPTURE(pad_rows);
  fam.restore({{"names", std::vector<std::string>{"a", "b"}}});
  torch::manual_seed(3);
  auto net = fam.make_network();
  net->train();
  auto b = lry_test::two_box_batch();
  if (pad_rows > 0) b.targets = torch::cat({b.targets, torch::cat({torch::full({1, pad_rows, 1}, -1.f), torch::zeros({1, pad_rows, 4})}, 2)}, 1);
  const int64_t M = b.targets.size(1);
  if constexpr (denoising) net->decoder->set_denoising_capacity(ly::nn::detr::denoising_capacity(M, 100));
  const auto x = F::input(b);
  std::vector<torch::Tensor> params;
  for (auto& p : net->parameters())
    if (p.requires_grad()) params.push_back(p);
  auto grads = [&](const torch::Tensor& total) {
    auto g = torch::autograd::grad({total}, params, {}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    for (auto& t : g)
      if (!t.defined()) t = torch::zeros({1});
    return g;
  };
  torch::manual_seed(11);
  const auto plain = fam.loss(net->forward(x), b);
  const auto plain_items = plain.items.clone();
  const auto g_plain = grads(plain.total);

  if constexpr (denoising) net->decoder->set_denoising_capacity(0);  // the segmented form sets its capacity itself (fixed)
  torch::manual_seed(11);
  std::optional<decltype(net->forward(x))> out;
  ly::train::LossOutput seg;
  auto part_a = [&](const ly::data::DetectBatch& sb) {
    out.emplace(net->forward(F::input(sb)));
    return fam.match_segment(*out, sb);
  };
  auto part_b = [&](const ly::data::DetectBatch& sb, const torch::Tensor& given) {
    seg = fam.loss_given(*out, sb, given);
    return seg.items;
  };
  const auto items = cap::run_segments(b, part_a, part_b);
  const auto g_seg = grads(seg.total);
  CHECK(items.equal(seg.items));
  if (pad_rows == 0 && denoising) {  // the same shapes throughout: bit for bit
    CHECK(seg.items.equal(plain_items));
    CHECK(all_equal(g_seg, g_plain));
  } else {  // more target slots: the same terms, summed over more (masked) slots
    CHECK(torch::allclose(seg.items, plain_items, 1e-6, 1e-7));
    bool close = true;
    for (size_t k = 0; k < g_seg.size(); ++k) close = close && torch::allclose(g_seg[k], g_plain[k], 1e-5, 1e-7);
    CHECK(close);
  }
  CHECK(torch::isfinite(seg.items).all().item<bool>());
}
}  // namespace

TEST_CASE("segmented DETR step (costs, host solve, loss from the solve) equals the family's loss at the same denoising capacity") {
  for (int64_t pad : {0, 6}) {
    check_segmented_equals_loss(ly::RTDETRFamily("r18"), pad);
    check_segmented_equals_loss(ly::RTDETRv2Family("r18"), pad);
    check_segmented_equals_loss(ly::DFineFamily("n"), pad);
    check_segmented_equals_loss(ly::DEIMFamily("n"), pad);
    check_segmented_equals_loss(ly::RFDETRFamily("n"), pad);
  }
}

TEST_CASE("cuda_graph=step on the CPU with a DETR family: the segmented step path runs, finite losses, step mode reported") {
  lry_test::TempDir runs("lry_step_cpu_detr");
  const auto yaml = lry_test::small_detect_set(runs.path, 15, 5);
  static_assert(cap::step_capturable<ly::DFineFamily>() && cap::step_capturable<ly::RTDETRFamily>());
  static_assert(ly::member::declares<ly::DFineFamily, ly::member::segmented_step>);
  static_assert(std::is_same_v<cap::resolve_t<ly::DFineFamily, cap::CudaGraph<cap::scope::step>>, cap::CudaGraph<cap::scope::step>>);
  const std::vector<std::string> fixed{"multi_scale=false"};
  auto s = train_run<cap::CudaGraph<cap::scope::step>>(ly::DFineFamily("n"), detect_run_args("dfinen", yaml, runs, "step", "step", fixed));
  CHECK(s.steps == 5);
  CHECK(s.report["step"]["whole_step"] == true);
  CHECK(s.report["eager_steps"] == 5);
  REQUIRE(s.losses.size() == 5);
  for (auto& l : s.losses) CHECK(torch::isfinite(l).all().item<bool>());
  auto r = train_run<cap::CudaGraph<cap::scope::step>>(ly::RTDETRFamily("r18"), detect_run_args("rtdetr-r18", yaml, runs, "step_r", "step"));
  CHECK(r.steps == 5);
  CHECK(r.report["step"]["whole_step"] == true);
  for (auto& l : r.losses) CHECK(torch::isfinite(l).all().item<bool>());
  // RF-DETR: its whole training forward (13 groups) in part A, the groups matched as images. nbs=4: one batch per
  // optimizer step.
  auto f = train_run<cap::CudaGraph<cap::scope::step>>(ly::RFDETRFamily("n"),
                                                       detect_run_args("rfdetr-n", yaml, runs, "step_f", "step", {"multi_scale=false", "nbs=4"}));
  CHECK(f.steps == 5);
  CHECK(f.report["step"]["whole_step"] == true);
  CHECK(f.report["eager_steps"] == 5);
  for (auto& l : f.losses) CHECK(torch::isfinite(l).all().item<bool>());
  // At its recipe's nbs 16 (accumulate 4): one window of the epoch's 3 batches, 2 optimizer steps in 2 epochs,
  // the segmented step in both kinds (accumulating, last): parameters, buffers and EMA equal to eager's bit for bit;
  // the loss items to float rounding (the segmented form sums RF-DETR's terms in another order: the
  // "segmented DETR step" case above).
  const std::vector<std::string> recipe{"multi_scale=false"};
  auto fe = train_run<cap::Eager>(ly::RFDETRFamily("n"), detect_run_args("rfdetr-n", yaml, runs, "eager_fa", "false", recipe));
  auto fa = train_run<cap::CudaGraph<cap::scope::step>>(ly::RFDETRFamily("n"),
                                                        detect_run_args("rfdetr-n", yaml, runs, "step_fa", "step", recipe));
  CHECK(fa.steps == 2);
  CHECK(fa.report["step"]["whole_step"] == true);
  CHECK(fa.report["eager_steps"] == 6);
  CHECK(fe.steps == fa.steps);
  REQUIRE(fe.losses.size() == fa.losses.size());
  for (size_t i = 0; i < fe.losses.size(); ++i) CHECK(torch::allclose(fe.losses[i], fa.losses[i], 1e-5, 1e-7));
  CHECK(all_equal(fe.params, fa.params));
  CHECK(all_equal(fe.buffers, fa.buffers));
  CHECK(all_equal(fe.ema, fa.ema));
}
