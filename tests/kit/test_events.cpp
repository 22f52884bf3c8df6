// Events keyed by tag types: the static checks that make a misspelt or mistyped hook a compile error,
// run-time subscriptions, and the order in which the trainer raises them.
#include <doctest/doctest.h>
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade

#include "support.hpp"
#include "support_data.hpp"

#include <string>
#include <vector>

namespace ly = libreyolo;
namespace ev = ly::events;

namespace {
struct Good {
  void operator()(ly::event::epoch_end, const ly::EpochInfo&) {}
};
struct WrongArgs {  // a handler for step_end that takes an EpochInfo: a compile error for fit()
  void operator()(ly::event::step_end, const ly::EpochInfo&) {}
};
struct NoHandler {  // a misspelt old-style hook: handles nothing
  void after_setp(const ly::StepInfo&) {}
};
struct Generic {
  template <class E, class A>
  void operator()(E, const A&) {}
};

// What check_subscriber's static_asserts test (it cannot be called on the failing ones here: a failing
// static_assert stops the build, which is the point).
static_assert(ev::handles<Good, ly::event::epoch_end>);
static_assert(!ev::handles<Good, ly::event::step_end>);
static_assert(ev::detail::declares_handler<WrongArgs, ly::event::step_end>());
static_assert(!ev::handles<WrongArgs, ly::event::step_end>);
static_assert(!ev::detail::declares_handler<NoHandler, ly::event::step_end>() &&
              !ev::detail::declares_handler<NoHandler, ly::event::epoch_begin>() &&
              !ev::detail::declares_handler<NoHandler, ly::event::epoch_end>());
static_assert(ev::handles<Generic, ly::event::step_end> && ev::handles<Generic, ly::event::epoch_end>);
static_assert(ly::check_callback<Good>() && ly::check_callback<Generic&>());
static_assert(ly::events::Event<ly::event::phase_begin> && ly::events::Event<ly::event::step_begin>);

struct Recorder {
  std::vector<std::string>* log;
  void operator()(ly::event::epoch_begin, const ly::EpochInfo& e) { log->push_back("begin " + std::to_string(e.epoch)); }
  void operator()(ly::event::step_end, const ly::StepInfo& s) { log->push_back("step " + std::to_string(s.iteration)); }
  void operator()(ly::event::epoch_end, const ly::EpochInfo& e) {
    log->push_back("end " + std::to_string(e.epoch) + (e.row.contains("train/loss") ? " row" : ""));
  }
};

// Counts the phase events it sees, as the profiler and the capture policy do (a capture policy stand-in).
struct PhaseCounter : ly::capture::Eager {
  int steps = 0, begins = 0, ends = 0, done_images = 0;
  void operator()(ly::event::step_begin) { ++steps; }
  void operator()(ly::event::phase_begin, ly::profile::Phase) { ++begins; }
  void operator()(ly::event::phase_end, ly::profile::Phase) { ++ends; }
  void operator()(ly::event::step_done, int images) { done_images += images; }
};
}  // namespace

TEST_CASE("a run-time event system calls the handlers of the raised event only, in order") {
  ly::LoopEvents sys;
  std::vector<int> seen;
  sys.on(ly::event::step_end{}, [&](const ly::StepInfo& s) { seen.push_back(static_cast<int>(s.iteration)); });
  sys.on(ly::event::step_end{}, [&](const ly::StepInfo& s) { seen.push_back(100 + static_cast<int>(s.iteration)); });
  sys.on(ly::event::epoch_end{}, [&](const ly::EpochInfo&) { seen.push_back(-1); });
  CHECK(sys.count(ly::event::step_end{}) == 2);
  CHECK(sys.count(ly::event::epoch_begin{}) == 0);
  ly::StepInfo s;
  s.iteration = 3;
  sys.raise(ly::event::step_end{}, s);
  sys.raise(ly::event::epoch_begin{}, ly::EpochInfo{});
  CHECK(seen == std::vector<int>{3, 103});
}

TEST_CASE("the trainer raises loop events to callbacks and subscriptions, phase events to its clients") {
  lry_test::TempDir runs("lry_kit_events");
  auto cfg = ly::parse_args({"data=" + lry_test::tiny_classify_set().string(), "imgsz=32", "batch=8", "workers=0",
                             "device=cpu", "epochs=2", "val=false", "project=" + runs.path.string(), "name=ev"});
  ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, PhaseCounter> t(cfg);
  std::vector<std::string> log;
  int subscribed = 0;
  t.events().on(ly::event::step_end{}, [&](const ly::StepInfo&) { ++subscribed; });
  Recorder rec{&log};
  t.fit(rec);
  // 39 images / batch 8: 4 steps per epoch (the partial fifth batch is dropped, as the originals' loaders do).
  REQUIRE(log.size() == 2 * (1 + 4 + 1));
  CHECK(log[0] == "begin 0");
  CHECK(log[1] == "step 1");  // iteration: micro-batches done
  CHECK(log[4] == "step 4");
  CHECK(log[5] == "end 0 row");
  CHECK(log[6] == "begin 1");
  CHECK(log[11] == "end 1 row");
  CHECK(subscribed == 8);
  // Each step: dataload, to_device, forward, backward, optimizer; plus the dataload that finds the epoch's end.
  CHECK(t.capture().steps == 8 + 2);
  CHECK(t.capture().begins == t.capture().ends);
  CHECK(t.capture().begins == 8 * 5 + 2);
  CHECK(t.capture().done_images == 2 * 32);
}

TEST_CASE("a hand-composed trainer takes the profiler window from the config") {
  lry_test::TempDir runs("lry_kit_window");
  auto cfg = ly::parse_args({"data=" + lry_test::tiny_classify_set().string(), "imgsz=32", "batch=8", "workers=0",
                             "device=cpu", "profile=true", "profile_warmup=2", "profile_steps=7",
                             "profile_trace_steps=3", "project=" + runs.path.string(), "name=w"});
  ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, ly::capture::Eager, ly::profile::Window<>> t(cfg);
  t.setup();  // attaches the profiler: its plan is the config's window
  CHECK(t.profiler().plan().warmup == 2);
  CHECK(t.profiler().plan().active == 7);
  CHECK(t.profiler().plan().traced == 3);
  // Keys the config leaves alone keep the policy's own window.
  auto partial = ly::parse_args({"data=" + lry_test::tiny_classify_set().string(), "imgsz=32", "batch=8", "workers=0",
                                 "device=cpu", "profile=true", "profile_steps=9", "project=" + runs.path.string(), "name=w2"});
  ly::Trainer<ly::ResNetFamily, ly::precision::Fp32, ly::capture::Eager, ly::profile::Window<3, 6>> t2(partial);
  t2.setup();
  CHECK(t2.profiler().plan().warmup == 3);
  CHECK(t2.profiler().plan().active == 9);
}
