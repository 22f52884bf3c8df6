// GradScaler: the state machine on synthetic gradients (generic path on CPU, fused ops on CUDA),
// unscale before clipping, checkpoint round trip, the disabled pass-through, and the 50-step
// trajectory against the hand derivation and PyTorch's recorded one.
#include <libreyolo/precision/grad_scaler.hpp>
#include <libreyolo/io/checkpoint.hpp>
#include <libreyolo/train/clip.hpp>

#include "scaler_sequence.hpp"
#include "support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

using namespace libreyolo;
using namespace libreyolo::precision;
using lry_test::scaler_seq::PlainSgd;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

GradScaler make_scaler(int64_t interval, double init = 65536.0) {
  GradScalerOptions o;
  o.init_scale = init;
  o.growth_interval = interval;
  return GradScaler(o);
}

// One step of loss = sum(c * p): backward of the scaled loss, step, update. Returns whether it stepped.
bool one_step(GradScaler& s, PlainSgd& opt, const torch::Tensor& c) {
  opt.zero_grad();
  s.scale((c * opt.ps[0]).sum()).backward();
  const bool stepped = s.step(opt);
  s.update();
  return stepped;
}

PlainSgd sgd_on(torch::Device d, std::vector<float> init) {
  PlainSgd opt;
  opt.lr = 0.5;
  opt.ps.push_back(torch::tensor(init).to(d).requires_grad_(true));
  return opt;
}

// Growth after N clean steps, backoff and a skipped step (params unchanged) on +inf and NaN.
void check_state_machine(torch::Device d) {
  GradScaler s = make_scaler(3, 1024.0);
  PlainSgd opt = sgd_on(d, {1.0f, 2.0f});
  const auto opts = torch::TensorOptions().device(d);
  const auto clean = torch::tensor({0.5f, -0.25f}, opts);
  CHECK(one_step(s, opt, clean));
  CHECK(one_step(s, opt, clean));
  CHECK(s.scale_value() == 1024.0);
  CHECK(s.growth_tracker_value() == 2);
  CHECK(one_step(s, opt, clean));  // third clean step in a row: x2
  CHECK(s.scale_value() == 2048.0);
  CHECK(s.growth_tracker_value() == 0);
  // After three SGD steps of lr 0.5: p = p0 - 1.5 * c (the grads reached the optimizer unscaled).
  auto p = opt.ps[0].detach().cpu();
  CHECK(p[0].item<float>() == 1.0f - 0.75f);
  CHECK(p[1].item<float>() == 2.0f + 0.375f);
  CHECK(one_step(s, opt, clean));
  CHECK(s.growth_tracker_value() == 1);

  const auto before = opt.ps[0].detach().clone();
  CHECK_FALSE(one_step(s, opt, torch::tensor({kInf, 1.0f}, opts)));
  CHECK(torch::equal(opt.ps[0].detach(), before));
  CHECK(s.scale_value() == 1024.0);
  CHECK(s.growth_tracker_value() == 0);
  CHECK(opt.steps == 4);
  CHECK_FALSE(one_step(s, opt, torch::tensor({0.0f, std::nanf("")}, opts)));
  CHECK(torch::equal(opt.ps[0].detach(), before));
  CHECK(s.scale_value() == 512.0);
  CHECK(one_step(s, opt, clean));
  CHECK(s.scale_value() == 512.0);
  CHECK(s.growth_tracker_value() == 1);
  CHECK(opt.steps == 5);
}

void check_trajectory_against_hand(const lry_test::scaler_seq::Trajectory& tr) {
  namespace sq = lry_test::scaler_seq;
  const auto hand = sq::hand_scale_after();
  REQUIRE(tr.scale_after.size() == hand.size());
  for (int s = 0; s < sq::kSteps; ++s) {
    CAPTURE(s);
    CHECK(tr.scale_after[s] == hand[s]);
    CHECK(tr.stepped[s] == sq::hand_stepped(s));
    CHECK(tr.scale_before[s] == (s == 0 ? sq::kInitScale : hand[s - 1]));
  }
  CHECK(tr.tracker_after.back() == sq::kHandFinalTracker);
  const auto fp = sq::hand_final_params();
  REQUIRE(tr.final_params.size() == fp.size());
  for (size_t q = 0; q < fp.size(); ++q) CHECK(tr.final_params[q] == fp[q]);  // exact: dyadic values
}

// Compares with torch.amp.GradScaler's recorded run; returns false when the fixture is absent.
bool check_trajectory_against_pytorch(const lry_test::scaler_seq::Trajectory& tr) {
  const std::filesystem::path f =
      std::filesystem::path(LIBREYOLO_SOURCE_DIR) / "tests/data/precision/scaler_reference.json";
  if (!std::filesystem::exists(f)) return false;
  std::ifstream in(f);
  const auto ref = nlohmann::json::parse(in);
  REQUIRE(ref.at("steps").size() == tr.scale_after.size());
  for (size_t s = 0; s < tr.scale_after.size(); ++s) {
    CAPTURE(s);
    const auto& r = ref["steps"][s];
    CHECK(tr.scale_before[s] == r.at("scale_before").get<double>());
    CHECK(tr.scale_after[s] == r.at("scale_after").get<double>());
    CHECK(tr.stepped[s] == r.at("stepped").get<bool>());
    CHECK(tr.tracker_after[s] == r.at("growth_tracker_after").get<int64_t>());
  }
  const auto fp = ref.at("final_params").get<std::vector<double>>();
  REQUIRE(fp.size() == tr.final_params.size());
  for (size_t q = 0; q < fp.size(); ++q) CHECK(tr.final_params[q] == fp[q]);
  return true;
}

}  // namespace

TEST_CASE("GradScaler defaults are PyTorch's") {
  GradScaler s;
  CHECK(s.options().init_scale == 65536.0);
  CHECK(s.options().growth_factor == 2.0);
  CHECK(s.options().backoff_factor == 0.5);
  CHECK(s.options().growth_interval == 2000);
  CHECK(s.enabled());
  CHECK(s.scale_value() == 65536.0);
  CHECK(s.scale(torch::tensor(3.0f)).item<float>() == 3.0f * 65536.0f);
  GradScalerOptions bad;
  bad.backoff_factor = 1.5;
  CHECK_THROWS_AS(GradScaler{bad}, ConfigError);
}

TEST_CASE("GradScaler state machine on CPU (generic path): growth, backoff, skipped steps on inf and NaN") {
  check_state_machine(torch::kCPU);
}

TEST_CASE("a grown scale that is not finite in float32 is not taken (as _amp_update_scale_)") {
  GradScaler s = make_scaler(1, std::ldexp(1.0, 127));
  PlainSgd opt = sgd_on(torch::kCPU, {1.0f});
  CHECK(one_step(s, opt, torch::tensor({0.0f})));
  CHECK(s.scale_value() == std::ldexp(1.0, 127));  // 2^128 overflows float32
  CHECK(s.growth_tracker_value() == 0);
}

TEST_CASE("unscale_ before clipping gives the same clipped gradient as float32 without a scaler") {
  const auto g_true = torch::tensor({3.0f, -4.0f, 12.0f});  // norm 13
  auto p_ref = torch::zeros({3}).requires_grad_(true);
  (g_true * p_ref).sum().backward();
  const auto norm_ref = train::clip_grad_norm({p_ref}, 6.5);

  GradScaler s = make_scaler(2000);
  PlainSgd opt = sgd_on(torch::kCPU, {0.0f, 0.0f, 0.0f});
  s.scale((g_true * opt.ps[0]).sum()).backward();
  CHECK(opt.ps[0].grad()[2].item<float>() == 12.0f * 65536.0f);
  s.unscale_(opt);
  const auto norm = train::clip_grad_norm(opt.params(), 6.5);
  CHECK(norm.item<float>() == doctest::Approx(13.0));
  CHECK(norm.item<float>() == norm_ref.item<float>());
  CHECK(torch::equal(opt.ps[0].grad(), p_ref.grad()));
  CHECK(opt.ps[0].grad()[0].item<float>() == doctest::Approx(1.5));  // 3 * 6.5/13
  // step() after unscale_() must not unscale again.
  CHECK(s.step(opt));
  CHECK(torch::allclose(opt.ps[0].detach(), -0.5 * p_ref.grad()));
  s.update();
}

TEST_CASE("GradScaler misuse is reported like PyTorch's") {
  GradScaler s;
  PlainSgd opt = sgd_on(torch::kCPU, {1.0f});
  CHECK_THROWS_WITH_AS(s.unscale_(opt), doctest::Contains("scale(loss)"), Error);
  CHECK_THROWS_AS(s.update(), Error);
  s.scale((torch::tensor({1.0f}) * opt.ps[0]).sum()).backward();
  s.unscale_(opt);
  CHECK_THROWS_WITH_AS(s.unscale_(opt), doctest::Contains("already been called"), Error);
  s.step(opt);
  CHECK_THROWS_WITH_AS(s.step(opt), doctest::Contains("already been called"), Error);
  CHECK_THROWS_WITH_AS(s.unscale_(opt), doctest::Contains("after step()"), Error);
  s.update();
  CHECK_NOTHROW(s.unscale_(opt));  // a new iteration after update()
  PlainSgd empty = sgd_on(torch::kCPU, {1.0f});  // no grads at all
  CHECK_THROWS_WITH_AS(s.step(empty), doctest::Contains("no inf checks"), Error);
}

TEST_CASE("GradScaler state survives a checkpoint file round trip") {
  GradScaler s = make_scaler(4, 1024.0);
  PlainSgd opt = sgd_on(torch::kCPU, {1.0f});
  one_step(s, opt, torch::tensor({kInf}));  // 512
  one_step(s, opt, torch::tensor({1.0f}));
  one_step(s, opt, torch::tensor({1.0f}));  // tracker 2
  REQUIRE(s.scale_value() == 512.0);
  REQUIRE(s.growth_tracker_value() == 2);
  train::Checkpoint ck;
  s.save(ck, "precision.");
  lry_test::TempDir dir("lry_prec");
  train::save_checkpoint(ck, dir / "a.ckpt");
  const auto back = train::load_checkpoint(dir / "a.ckpt");

  GradScaler r = make_scaler(2000);  // interval comes from the checkpoint's meta
  r.load(back, "precision.");
  CHECK(r.scale_value() == 512.0);
  CHECK(r.growth_tracker_value() == 2);
  CHECK(r.options().growth_interval == 4);
  one_step(r, opt, torch::tensor({1.0f}));
  CHECK(r.scale_value() == 512.0);
  one_step(r, opt, torch::tensor({1.0f}));  // fourth clean step since the backoff
  CHECK(r.scale_value() == 1024.0);

  train::Checkpoint bad_meta = back;
  bad_meta.meta["precision.grad_scaler"]["growth_interval"] = 0;
  CHECK_THROWS_WITH_AS(r.load(bad_meta, "precision."), doctest::Contains("growth_interval"), CheckpointError);
  train::Checkpoint broken = back;
  broken.tensors["precision.grad_scaler.scale"] = torch::tensor({-1.0f});
  CHECK_THROWS_WITH_AS(r.load(broken, "precision."), doctest::Contains("precision.grad_scaler.scale"),
                       CheckpointError);
  broken.tensors.erase("precision.grad_scaler.scale");
  CHECK_THROWS_AS(r.load(broken, "precision."), CheckpointError);
  train::Checkpoint none;
  GradScaler fresh;
  CHECK_NOTHROW(fresh.load(none, "precision."));  // from an fp32 run: keeps the initial scale
  CHECK(fresh.scale_value() == 65536.0);
}

TEST_CASE("a disabled GradScaler is a pass-through") {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler s(o);
  PlainSgd opt = sgd_on(torch::kCPU, {1.0f});
  const auto loss = (torch::tensor({2.0f}) * opt.ps[0]).sum();
  const auto scaled = s.scale(loss);
  CHECK(scaled.unsafeGetTensorImpl() == loss.unsafeGetTensorImpl());
  scaled.backward();
  s.unscale_(opt);
  CHECK(opt.ps[0].grad().item<float>() == 2.0f);  // not divided
  opt.ps[0].mutable_grad().fill_(kInf);
  CHECK(s.step(opt));  // no inf check: it steps
  CHECK(opt.steps == 1);
  CHECK_NOTHROW(s.update());
  CHECK(s.scale_value() == 1.0);
  train::Checkpoint ck;
  s.save(ck, "precision.");
  CHECK(ck.tensors.empty());
}

TEST_CASE("the 50-step reference sequence on CPU matches the hand-derived trajectory (and PyTorch's, if recorded)") {
  const auto tr = lry_test::scaler_seq::replay(torch::kCPU);
  check_trajectory_against_hand(tr);
  if (!check_trajectory_against_pytorch(tr))
    MESSAGE("tests/data/precision/scaler_reference.json not recorded yet: compared with the hand derivation only");
}

LRY_GPU_SUITE {
  TEST_CASE("GradScaler on CUDA (fused ops): an injected inf skips exactly that step and halves the scale") {
    LRY_REQUIRE_CUDA();
    check_state_machine(torch::Device(torch::kCUDA, 0));
  }

  TEST_CASE("the fused CUDA unscale and the generic path agree") {
    LRY_REQUIRE_CUDA();
    const torch::Device d(torch::kCUDA, 0);
    auto g = torch::randn({1000}, torch::TensorOptions().device(d)) * 4096;
    auto a = g.clone(), b = g.clone();
    auto inv = torch::full({}, 1.0f / 4096, torch::TensorOptions().device(d));
    auto fa = torch::zeros({}, inv.options()), fb = torch::zeros({}, inv.options());
    at::_amp_foreach_non_finite_check_and_unscale_(std::vector<torch::Tensor>{a}, fa, inv);
    std::vector<torch::Tensor> bl{b};
    precision::detail::non_finite_check_and_unscale(bl, fb, inv);
    CHECK(torch::equal(a, b));
    CHECK(fa.item<float>() == 0.0f);
    CHECK(fb.item<float>() == 0.0f);
    b[7] = kInf;
    precision::detail::non_finite_check_and_unscale(bl, fb, inv);
    CHECK(fb.item<float>() == 1.0f);
  }

  TEST_CASE("the 50-step reference sequence on CUDA matches torch.amp.GradScaler's recorded trajectory") {
    LRY_REQUIRE_CUDA();
    const auto tr = lry_test::scaler_seq::replay(torch::Device(torch::kCUDA, 0));
    check_trajectory_against_hand(tr);
    CHECK_MESSAGE(check_trajectory_against_pytorch(tr),
                  "tests/data/precision/scaler_reference.json missing: run benchmarks/precision/scaler_reference.py");
  }
}
