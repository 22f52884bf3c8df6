#pragma once
// The fixed 50-step gradient sequence shared by benchmarks/precision/scaler_reference.py and the C++
// replay tests. Gradients come from a closed-form formula of (step, element index), not from an
// RNG, so C++ and Python produce bit-identical values: every number is a small dyadic fraction, and
// with power-of-two scales and lr the whole run is exact in float32. Keep both files in sync.
#include <libreyolo/precision/grad_scaler.hpp>

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

namespace lry_test::scaler_seq {

inline constexpr int kSteps = 50;
inline constexpr double kLr = 0.25;
inline constexpr double kInitScale = 65536.0;
inline constexpr int64_t kGrowthInterval = 10;
// Three parameter tensors of 4, 3 and 2 elements; q numbers their elements 0..8 in that order.
inline const std::vector<int64_t> kSizes{4, 3, 2};

inline double initial_param(int q) { return (q - 4) / 4.0; }

// d loss / d p_q at step s (unscaled), with the injected non-finite values:
// step 7 element 1 = +inf, step 31 element 5 = NaN, step 32 element 8 = -inf.
inline double coefficient(int s, int q) {
  if (s == 7 && q == 1) return std::numeric_limits<double>::infinity();
  if (s == 31 && q == 5) return std::numeric_limits<double>::quiet_NaN();
  if (s == 32 && q == 8) return -std::numeric_limits<double>::infinity();
  return ((5 * s + 3 * q) % 9 - 4) / 16.0;
}

// Scale after update() of each step, derived by hand from the rules (start 65536, x2 after 10
// clean steps in a row, x0.5 and tracker reset on a non-finite step):
// steps 0-6 clean (tracker 7); 7 inf -> 32768; 8-17 clean -> 65536 at 17; 18-27 clean -> 131072
// at 27; 28-30 clean (tracker 3); 31 NaN -> 65536; 32 -inf -> 32768; 33-42 clean -> 65536 at 42;
// 43-49 clean (tracker 7).
inline std::vector<double> hand_scale_after() {
  std::vector<double> v;
  for (int s = 0; s < kSteps; ++s) {
    double x;
    if (s < 7) x = 65536;
    else if (s < 17) x = 32768;
    else if (s < 27) x = 65536;
    else if (s < 31) x = 131072;
    else if (s == 31) x = 65536;
    else if (s < 42) x = 32768;
    else x = 65536;
    v.push_back(x);
  }
  return v;
}
inline bool hand_stepped(int s) { return s != 7 && s != 31 && s != 32; }
inline constexpr int64_t kHandFinalTracker = 7;

// Final parameters of plain SGD over the clean steps, in double (exact here).
inline std::vector<double> hand_final_params() {
  std::vector<double> p;
  for (int q = 0; q < 9; ++q) {
    double x = initial_param(q);
    for (int s = 0; s < kSteps; ++s)
      if (hand_stepped(s)) x -= kLr * coefficient(s, q);
    p.push_back(x);
  }
  return p;
}

// torch.optim.SGD(lr, momentum=0, foreach=False): p.add_(grad, alpha=-lr).
struct PlainSgd {
  std::vector<torch::Tensor> ps;
  double lr = kLr;
  int steps = 0;
  std::vector<torch::Tensor> params() const { return ps; }
  void step() {
    torch::NoGradGuard no_grad;
    for (auto& p : ps)
      if (p.grad().defined()) p.add_(p.grad(), -lr);
    ++steps;
  }
  void zero_grad() {
    for (auto& p : ps) p.mutable_grad() = torch::Tensor();
  }
};

struct Trajectory {
  std::vector<double> scale_before, scale_after;
  std::vector<bool> stepped;
  std::vector<int64_t> tracker_after;
  std::vector<double> final_params;  // flattened, q order
};

// Replays the sequence through scale(loss).backward(), step(), update() on `device`.
inline Trajectory replay(torch::Device device) {
  using namespace libreyolo::precision;
  GradScalerOptions o;
  o.init_scale = kInitScale;
  o.growth_interval = kGrowthInterval;
  GradScaler scaler(o);
  PlainSgd opt;
  int q0 = 0;
  for (int64_t n : kSizes) {
    auto p = torch::empty({n}, torch::kFloat);
    for (int i = 0; i < n; ++i) p[i] = initial_param(q0 + i);
    opt.ps.push_back(p.to(device).requires_grad_(true));
    q0 += static_cast<int>(n);
  }
  Trajectory tr;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    torch::Tensor loss = torch::zeros({}, torch::TensorOptions().device(device));
    int q = 0;
    for (auto& p : opt.ps) {
      auto c = torch::empty({p.numel()}, torch::kFloat);
      for (int i = 0; i < p.numel(); ++i) c[i] = coefficient(s, q + i);
      loss = loss + (c.to(device) * p).sum();
      q += static_cast<int>(p.numel());
    }
    tr.scale_before.push_back(scaler.scale_value());
    scaler.scale(loss).backward();
    tr.stepped.push_back(scaler.step(opt));
    scaler.update();
    tr.scale_after.push_back(scaler.scale_value());
    tr.tracker_after.push_back(scaler.growth_tracker_value());
  }
  for (auto& p : opt.ps) {
    auto h = p.detach().to(torch::kCPU, torch::kDouble);
    for (int i = 0; i < h.numel(); ++i) tr.final_params.push_back(h[i].item<double>());
  }
  return tr;
}

}  // namespace lry_test::scaler_seq
