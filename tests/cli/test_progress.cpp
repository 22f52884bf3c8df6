// The progress line (core/progress.hpp): its text, and how often plain lines are written.
#include <doctest/doctest.h>

#include <libreyolo/core/progress.hpp>

#include <string>
#include <thread>
#include <vector>

namespace pg = libreyolo::progress;
namespace lg = libreyolo::log;

namespace {
struct Capture {
  std::vector<std::string> lines;
  std::function<void(lg::Level, std::string_view)> old;
  Capture() {
    old = lg::set_sink([this](lg::Level, std::string_view m) { lines.emplace_back(m); });
  }
  ~Capture() { lg::set_sink(old); }
};
}  // namespace

TEST_CASE("progress: the terminal line has the bar, i/n, rate, ETA and the tail; the plain one no bar") {
  const auto t = pg::format_line("epoch 3/15", 100, 400, 25.0, 20, "box 1.2345  GPU 3.21G");
  CHECK(t == "epoch 3/15 [#####...............]  100/400  4.00 it/s  ETA 1m15s  box 1.2345  GPU 3.21G");
  const auto p = pg::format_line("epoch 3/15", 100, 400, 25.0, 0, "box 1.2345");
  CHECK(p == "epoch 3/15  100/400 (25%)  4.00 it/s  ETA 1m15s  box 1.2345");
  // the end: the elapsed time instead of an ETA; fast loops one decimal
  CHECK(pg::format_line("val", 50, 50, 2.0, 0, "") == "val  50/50 (100%)  25.0 it/s  2s");
  CHECK(pg::format_line("synth", 7, 0, 1.0, 0, "", "img") == "synth  7  7.00 img/s");
  CHECK(pg::duration(3725) == "1h02m");
  CHECK(pg::duration(59.4) == "59s");
}

TEST_CASE("progress: plain lines at most every interval, a final line on request, none when off") {
  {
    Capture c;
    pg::Bar bar("epoch 1/1", 1000, 3600, pg::Mode::plain);
    for (int i = 1; i <= 1000; ++i) bar.update(i, [] { return std::string("loss 1.0"); });
    CHECK(c.lines.empty());  // an hour between lines: none yet
    bar.finish(/*final_line=*/true, "done");
    REQUIRE(c.lines.size() == 1);
    CHECK(c.lines[0].rfind("epoch 1/1  1000/1000 (100%)", 0) == 0);
    CHECK(c.lines[0].find("done") != std::string::npos);
  }
  {
    Capture c;
    pg::Bar bar("val", 3, 0.02, pg::Mode::plain);
    int tails = 0;
    for (int i = 1; i <= 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      bar.update(i, [&] { return "n " + std::to_string(++tails); });
    }
    CHECK(c.lines.size() == 3);
    CHECK(tails == 3);  // the tail is computed only for a line that is written
    CHECK(c.lines[2].find("val  3/3 (100%)") == 0);
    bar.finish();
    CHECK(c.lines.size() == 3);
  }
  {
    Capture c;
    pg::Bar bar("x", 3, 0.0, pg::Mode::off);
    int tails = 0;
    for (int i = 1; i <= 3; ++i) bar.update(i, [&] { return std::to_string(++tails); });
    bar.finish(true);
    CHECK(c.lines.empty());
    CHECK(tails == 0);
  }
}

TEST_CASE("progress: LIBREYOLO_PROGRESS overrides the mode; interval 0 turns plain lines off") {
  ::setenv("LIBREYOLO_PROGRESS", "plain", 1);
  CHECK(pg::choose_mode(30) == pg::Mode::plain);
  CHECK(pg::choose_mode(0) == pg::Mode::off);
  ::setenv("LIBREYOLO_PROGRESS", "terminal", 1);
  CHECK(pg::choose_mode(30) == pg::Mode::terminal);
  ::setenv("LIBREYOLO_PROGRESS", "off", 1);
  CHECK(pg::choose_mode(30) == pg::Mode::off);
  ::unsetenv("LIBREYOLO_PROGRESS");
}
