// profile::time_steps (the benchmarks' step timing): the traced pass is read out, so its analysis has
// kernels and busy time (a run that only stopped the collector reported 0 kernels and 0 ms for every arm).
#include "support.hpp"

#include <libreyolo/profile/step_timing.hpp>

#include "support_doctest.hpp"

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
