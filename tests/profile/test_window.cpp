// The Window policy on CPU: a fake training loop with sleeps drives it through warm-up, the
// unsynchronised and synchronised halves, the report, the artifacts and the detach.
#include "support.hpp"

#include <libreyolo/profile/step_timing.hpp>
#include <libreyolo/profile/window.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

// Last: LibTorch 2.x (c10/util/logging_is_not_google_glog.h) defines CHECK too; doctest's must win.
#include <doctest/doctest.h>

using namespace libreyolo::profile;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {
// Captures log lines for the lifetime of the object.
struct LogCapture {
  std::vector<std::string> lines;
  LogCapture() {
    libreyolo::log::set_sink([this](libreyolo::log::Level, std::string_view m) { lines.emplace_back(m); });
  }
  ~LogCapture() { libreyolo::log::set_sink(nullptr); }
  size_t count(const std::string& needle) const {
    size_t n = 0;
    for (const auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
};

void sleep_ms(double v) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(v * 1000))); }

// One fake training step as the trainer runs it; dataload dominates on purpose.
template <class P>
void fake_step(P& prof, int images = 8) {
  prof.step_begin();
  { [[maybe_unused]] auto s = prof.phase(Phase::dataload); sleep_ms(3); }
  { [[maybe_unused]] auto s = prof.phase(Phase::to_device); }
  { [[maybe_unused]] auto s = prof.phase(Phase::forward); sleep_ms(1); }
  { [[maybe_unused]] auto s = prof.phase(Phase::backward); sleep_ms(0.5); }
  { [[maybe_unused]] auto s = prof.phase(Phase::optimizer); }
  prof.step_end(images);  // zero_grad / EMA / LR would run before this
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

RunContext context(const fs::path& dir, int accumulate = 1) {
  RunContext c;
  c.run_dir = dir;
  c.meta = {{"model", "fake-net"}, {"device", "cpu"}, {"batch", 8}, {"imgsz", 64}, {"amp", false}};
  c.accumulate = accumulate;
  return c;
}
}  // namespace

static_assert(ProfilerPolicy<Off>);
static_assert(ProfilerPolicy<Window<5, 20>>);
static_assert(!Off::enabled && Window<>::enabled);
static_assert(std::is_empty_v<Off> && std::is_empty_v<Off::Scope>);

TEST_CASE("Window<5,20> on CPU: warm-up discarded, 20 measured, report, artifacts, detach") {
  lry_test::TempDir dir{"lry_window"};
  LogCapture logs;
  Window<5, 20> prof;
  prof.attach(context(dir.path));
  int64_t window_opened_at = 0;
  for (int i = 0; i < 25; ++i) {
    CHECK_FALSE(prof.finished());
    if (i == 5) window_opened_at = host_now_ns();
    fake_step(prof);
  }
  REQUIRE(prof.finished());
  CHECK(prof.produced());
  const auto& rec = prof.record();
  REQUIRE(rec.steps.size() == 20);
  CHECK(rec.phases.size() == 100);
  CHECK(rec.steps.front().start_ns >= window_opened_at);  // the 5 warm-up steps are not in the record
  for (int i = 0; i < 20; ++i) CHECK(rec.steps[i].synced == (i >= 10));
  for (const auto& p : rec.phases) CHECK(p.synced == rec.steps[p.step].synced);
  CHECK_FALSE(rec.trace_collected);  // CPU: host timings only
  REQUIRE(prof.analysis().has_value());
  const auto& a = *prof.analysis();
  CHECK(a.real_steps == 10);
  CHECK(a.synced_steps == 10);
  CHECK(a.dataload_ms >= 3.0);
  CHECK(a.step_ms >= a.dataload_ms + 1.5);
  CHECK(a.dataload_frac > 0.2);
  CHECK(a.verdict.bound == bound::dataloader);
  CHECK(a.img_per_s == doctest::Approx(8.0 / (a.step_ms / 1000.0)));
  for (const char* f : {"profile.json", "profile_summary.json", "profile_trace.json", "timeline.html"}) {
    CAPTURE(f);
    CHECK(fs::exists(dir / f));
  }
  const json p = json::parse(slurp(dir / "profile.json"));
  CHECK(p["bound"] == "dataloader");
  CHECK(p["window"]["real_steps"] == 10);
  CHECK(p["config"]["model"] == "fake-net");
  CHECK(logs.count(">> BOUND: dataloader") == 1);
  CHECK(logs.count("AMP is off") == 0);  // meta amp=false, but a CPU device: no Tensor-Core note
  CHECK(logs.count("training continues") == 1);

  // Detached: later steps change nothing.
  const std::string before = slurp(dir / "profile.json");
  const auto log_lines = logs.lines.size();
  for (int i = 0; i < 5; ++i) fake_step(prof);
  CHECK(prof.record().steps.size() == 20);
  CHECK(slurp(dir / "profile.json") == before);
  CHECK(logs.lines.size() == log_lines);
}

TEST_CASE("Window with accumulation rounds warm-up and window to whole optimizer steps") {
  lry_test::TempDir dir{"lry_window_acc"};
  LogCapture logs;
  Window<> prof;
  prof.set_window(3, 3);
  prof.attach(context(dir.path, 2));
  CHECK(prof.plan().warmup == 4);
  CHECK(prof.plan().active == 4);
  CHECK(prof.plan().unsynced == 2);
  CHECK(prof.plan().traced == 2);  // the default 2 traced steps: one whole optimizer step
  for (int i = 0; i < 7; ++i) {
    fake_step(prof, 4);
    CHECK_FALSE(prof.finished());
  }
  fake_step(prof, 4);
  CHECK(prof.finished());
  CHECK(prof.record().steps.size() == 4);
  CHECK(prof.record().warmup == 4);
}

TEST_CASE("Window: invalid sizes are ConfigErrors naming the value") {
  Window<> prof;
  CHECK_THROWS_WITH_AS(prof.set_window(5, 1), doctest::Contains("active=1"), libreyolo::ConfigError);
  CHECK_THROWS_WITH_AS(prof.set_window(-1, 20), doctest::Contains("warmup=-1"), libreyolo::ConfigError);
  CHECK_THROWS_WITH_AS(prof.set_traced_steps(-1), doctest::Contains("traced steps=-1"), libreyolo::ConfigError);
  lry_test::TempDir dir{"lry_window_cfg"};
  LogCapture logs;
  prof.attach(context(dir.path));
  CHECK_THROWS_AS(prof.set_window(5, 20), libreyolo::ConfigError);  // too late
  CHECK_THROWS_AS(prof.set_traced_steps(2), libreyolo::ConfigError);
  CHECK_THROWS_WITH_AS(prof.set_background_readout(false), doctest::Contains("before attach()"), libreyolo::ConfigError);
  CHECK(prof.background_readout());  // the default for eager runs
  Window<> graphed;  // runs that replay CUDA graphs read the trace out on the training thread
  auto c = context(dir.path);
  c.graphs = true;
  graphed.attach(c);
  CHECK_FALSE(graphed.background_readout());
}

TEST_CASE("Window traces the last profile_trace_steps of the synchronised half (default 2; 0 = all)") {
  for (const auto& [traced, expect_from] : std::vector<std::pair<int, int>>{{-2, 18}, {4, 16}, {0, 10}, {50, 10}}) {
    CAPTURE(traced);
    lry_test::TempDir dir{"lry_window_traced"};
    LogCapture logs;
    Window<> prof;  // 5 warm-up, 20 measured: 10 unsynchronised, then 10 synchronised
    if (traced >= 0) prof.set_traced_steps(traced);  // -2: keep the default
    prof.attach(context(dir.path));
    for (int i = 0; i < 25; ++i) fake_step(prof);
    REQUIRE(prof.finished());
    CHECK(prof.record().traced_from == expect_from);
    CHECK(prof.record().steps.size() == 20);
  }
}

TEST_CASE("Window in distributed training: one log line, never attaches") {
  lry_test::TempDir dir{"lry_window_ddp"};
  LogCapture logs;
  Window<0, 2> prof;
  auto c = context(dir.path);
  c.distributed = true;
  prof.attach(c);
  for (int i = 0; i < 4; ++i) fake_step(prof);
  CHECK(prof.finished());
  CHECK_FALSE(prof.produced());
  CHECK(prof.record().steps.empty());
  CHECK(logs.lines.size() == 1);
  CHECK(logs.count("ignored in distributed training") == 1);
  CHECK_FALSE(fs::exists(dir / "profile.json"));
}

TEST_CASE("Window: a run that ends before the window fills writes nothing and says so") {
  lry_test::TempDir dir{"lry_window_short"};
  LogCapture logs;
  {
    Window<1, 10> prof;
    prof.attach(context(dir.path));
    for (int i = 0; i < 4; ++i) fake_step(prof);
    CHECK_FALSE(prof.finished());
  }
  CHECK(logs.count("training ended after 3 of 10 window steps") == 1);
  CHECK_FALSE(fs::exists(dir / "profile.json"));
}

TEST_CASE("Off compiles to no-ops") {
  Off prof;
  prof.attach(RunContext{});
  fake_step(prof);
  CHECK(prof.finished());
}

LRY_GPU_SUITE {
  TEST_CASE("Window on CUDA collects a kernel trace with correlation-attributed phases") {
    LRY_REQUIRE_CUDA();
    lry_test::TempDir dir{"lry_window_gpu"};
    Window<2, 6> prof;
    auto c = context(dir.path);
    c.device = torch::Device(torch::kCUDA, 0);
    prof.attach(c);
    auto w = torch::randn({512, 512}, torch::TensorOptions().device(c.device).requires_grad(true));
    for (int i = 0; i < 14; ++i) {  // 2 warm-up, 6 measured, 6 after the window
      prof.step_begin();
      torch::Tensor x, loss;
      { auto s = prof.phase(Phase::dataload); x = torch::randn({256, 512}); }
      { auto s = prof.phase(Phase::to_device); x = x.to(c.device, /*non_blocking=*/true); }
      { auto s = prof.phase(Phase::forward); loss = torch::relu(x.mm(w)).mm(w).sum(); }
      { auto s = prof.phase(Phase::backward); loss.backward(); }
      { auto s = prof.phase(Phase::optimizer); torch::NoGradGuard g; w.sub_(w.grad() * 1e-4); }
      w.grad().zero_();
      prof.step_end(256);
    }
    REQUIRE(prof.finished());
    const auto& a = *prof.analysis();
    CHECK(a.trace_collected);
    CHECK(a.kernels_per_step > 3);
    CHECK(a.phases[int(Phase::forward)].kernels_per_step >= 3);
    CHECK(a.phases[int(Phase::backward)].kernels_per_step >= 2);
    CHECK(a.phases[int(Phase::to_device)].gpu_ms_per_step > 0);
    CHECK(a.verdict.bound != bound::unknown_no_trace);
    // Only the last 2 (the default) of the 3 synchronised steps (window steps 3-5) ran under the tracer,
    // which was set up and attached just before the first of them.
    const auto& rec = prof.record();
    CHECK(rec.traced_from == 4);
    CHECK(a.traced_steps == 2);
    CHECK(rec.tracer_setup_ms > 0);
    CHECK(rec.tracer_readout_ms > 0);
    // The training thread only detached the tracer; Kineto's read-out ran on the report thread while the
    // steps after the window ran, and whatever it saw of them was left out.
    CHECK(rec.tracer_detach_ms < rec.tracer_readout_ms);
    for (const auto& g : rec.gpu) CHECK(g.start_ns <= rec.steps.back().end_ns);
    for (const auto& call : rec.runtime) CHECK(call.start_ns <= rec.steps.back().end_ns);
#if defined(CUDART_VERSION) && CUDART_VERSION >= 12060
    // CUPTI is torn down after the window (unless the user chose otherwise), so later steps do not pay for it.
    const char* teardown = std::getenv("TEARDOWN_CUPTI");
    REQUIRE(teardown != nullptr);
    CHECK(std::string(teardown) == "1");
#endif
    REQUIRE(!rec.runtime.empty());
    for (const auto& call : rec.runtime)  // (the synchronisation that opens step 4 comes just before it)
      if (call.name.find("Synchronize") == std::string::npos) CHECK(call.start_ns >= rec.steps[4].start_ns);
    // On the GPU machine, keep the real record and artifacts for inspection when asked to.
    if (const char* keep = std::getenv("LRY_PROFILE_GPU_OUT")) {
      std::ofstream(fs::path(keep) / "gpu_record.json") << to_json(prof.record()).dump();
      for (const char* f : {"profile.json", "timeline.html"}) std::ofstream(fs::path(keep) / f) << slurp(dir / f);
    }
  }
}

// ---- profile::time_steps (the benchmarks' step timing) on CUDA: its traced pass is read out, so the
// analysis has kernels and busy time (it used to stop the collector without the read-out: 0 kernels).
namespace lp = libreyolo::profile;
LRY_GPU_SUITE {
  TEST_CASE("time_steps on CUDA (after the Window case: each traces in its own Collector): kernels and busy time, twice") {
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
    auto again = lp::time_steps(step, 6, dev, 256);  // step_bench traces twice in one process
    CHECK(again.busy.kernels_per_step == doctest::Approx(t.busy.kernels_per_step));
    REQUIRE(t.traced);
    CHECK(t.busy.trace_collected);
    CHECK(t.busy.kernels_per_step >= 5);        // randn, 2 mm, relu, sum, backward mms, update
    CHECK(t.busy.gpu_busy_ms_per_step > 0);
    CHECK(t.busy.gpu_busy_ms_per_step < t.median_ms * 3);
    MESSAGE("kernels/step " << t.busy.kernels_per_step << ", busy " << t.busy.gpu_busy_ms_per_step << " ms, median "
                            << t.median_ms << " ms");
  }
}
