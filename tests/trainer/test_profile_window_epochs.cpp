// The profiler window across an epoch boundary: the trainer begins a step before it knows the loader
// is empty; that abandoned step must not be counted nor leave a phase behind.
#include <libreyolo/profile/window.hpp>
#include <libreyolo/profile/writers.hpp>

#include "support.hpp"

#include <doctest/doctest.h>

namespace lp = libreyolo::profile;

TEST_CASE("an abandoned step (loader ran dry) is neither counted nor recorded") {
  lry_test::TempDir dir("lry_window");
  lp::Window<1, 4> w;
  lp::RunContext ctx;
  ctx.run_dir = dir.path;
  ctx.meta = {{"model", "test"}, {"device", "cpu"}};
  w.attach(ctx);
  auto full_step = [&] {
    w.step_begin();
    for (auto ph : {lp::Phase::dataload, lp::Phase::to_device, lp::Phase::forward, lp::Phase::backward,
                    lp::Phase::optimizer})
      auto s = w.phase(ph);
    w.step_end(4);
  };
  full_step();  // warm-up
  full_step();
  w.step_begin();  // end of epoch: next() returned nothing
  { auto s = w.phase(lp::Phase::dataload); }
  full_step();
  REQUIRE(w.record().steps.size() == 2);
  CHECK(w.record().phases.size() == 10);
  for (const auto& p : w.record().phases) CHECK(p.step < 2);
  full_step();
  full_step();
  CHECK(w.finished());
  // No VRAM on a CPU device: reported as n/a (null), not 0 MB.
  REQUIRE(w.analysis().has_value());
  CHECK(lp::profile_json(*w.analysis())["peak_vram_mb"].is_null());
}
