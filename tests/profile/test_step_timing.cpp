// profile::time_steps (the benchmarks' step timing): the traced pass is read out, so its analysis has
// kernels and busy time (a run that only stopped the collector reported 0 kernels and 0 ms for every arm).
#include "support.hpp"

#include <libreyolo/profile/step_timing.hpp>

#undef CHECK
#include <doctest/doctest.h>

namespace lp = libreyolo::profile;

TEST_CASE("time_steps on the CPU: sorted host times, no trace, no kernels") {
  auto w = torch::randn({64, 64});
  int calls = 0;
  auto t = lp::time_steps([&] { ++calls; (void)w.mm(w).sum(); }, 5, torch::Device(torch::kCPU), 4);
  CHECK(calls == 10);  // the timed pass and the traced pass
  REQUIRE(t.ms.size() == 5);
  CHECK(std::is_sorted(t.ms.begin(), t.ms.end()));
  CHECK(t.min_ms == t.ms.front());
  CHECK_FALSE(t.traced);
  CHECK(t.busy.kernels_per_step == 0);
}

TEST_SUITE("gpu") {
  TEST_CASE("time_steps on CUDA: the traced pass has kernels and GPU busy time, with phases") {
    LRY_REQUIRE_CUDA();
    const torch::Device dev(torch::kCUDA, 0);
    auto w = torch::randn({512, 512}, torch::TensorOptions().device(dev).requires_grad(true));
    auto step = [&](lp::StepPhases& ph) {
      ph.mark(lp::Phase::forward);
      auto loss = torch::relu(torch::randn({256, 512}, dev).mm(w)).mm(w).sum();
      ph.mark(lp::Phase::backward);
      loss.backward();
      ph.mark(lp::Phase::optimizer);
      torch::NoGradGuard g;
      w.sub_(w.grad() * 1e-4);
      w.grad().zero_();
    };
    for (int i = 0; i < 3; ++i) {
      lp::StepPhases warm;
      step(warm);
    }
    auto t = lp::time_steps(step, 6, dev, 256);
    REQUIRE(t.traced);
    CHECK(t.busy.trace_collected);
    CHECK(t.busy.kernels_per_step >= 5);        // randn, 2 mm, relu, sum, backward mms, update
    CHECK(t.busy.gpu_busy_ms_per_step > 0);
    CHECK(t.busy.gpu_busy_ms_per_step < t.median_ms * 3);
    MESSAGE("kernels/step " << t.busy.kernels_per_step << ", busy " << t.busy.gpu_busy_ms_per_step << " ms, median "
                            << t.median_ms << " ms");
  }
}
