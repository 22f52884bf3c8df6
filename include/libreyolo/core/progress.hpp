#pragma once
// Progress of a long loop (a training epoch, validation, `data synth`, building an image cache).
//
// On a terminal (stderr is a TTY) one status line is redrawn in place, at most every 0.2 s:
//   epoch 3/15 [#########...........]  120/400  4.21 it/s  ETA 1m06s  box 1.234  cls 2.345  GPU 3.2G
// and removed when the loop ends (the caller's summary line takes its place); log lines written
// meanwhile appear above it (core/log.hpp). Otherwise (a file, a pipe, CI) a plain line is written at most
// every `interval` seconds (config key progress_interval, default 30; 0 = none), and one at the end
// when the caller asks for it. LIBREYOLO_PROGRESS=terminal|plain|off overrides the choice.
#include <libreyolo/core/log.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>

namespace libreyolo::progress {

enum class Mode { terminal, plain, off };

// How progress is shown: LIBREYOLO_PROGRESS when set, else a terminal when stderr is one, else plain
// lines (off when interval <= 0).
inline Mode choose_mode(double interval_s) {
  if (const char* e = std::getenv("LIBREYOLO_PROGRESS")) {
    const std::string v(e);
    if (v == "terminal") return Mode::terminal;
    if (v == "plain") return interval_s > 0 ? Mode::plain : Mode::off;
    if (v == "off") return Mode::off;
  }
  if (::isatty(STDERR_FILENO)) return Mode::terminal;
  return interval_s > 0 ? Mode::plain : Mode::off;
}

// "45s", "3m05s", "2h07m".
inline std::string duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char b[32];
  const auto t = static_cast<long long>(std::llround(s));
  if (t < 60) std::snprintf(b, sizeof b, "%llds", t);
  else if (t < 3600) std::snprintf(b, sizeof b, "%lldm%02llds", t / 60, t % 60);
  else std::snprintf(b, sizeof b, "%lldh%02lldm", t / 3600, (t % 3600) / 60);
  return b;
}

// The text of one progress line (no newline). `bar_width` 0 leaves the bar out (plain lines).
inline std::string format_line(const std::string& label, int64_t done, int64_t total, double secs, int bar_width,
                               const std::string& tail, const char* unit = "it") {
  std::string s = label;
  if (bar_width > 0 && total > 0) {
    const auto fill = static_cast<int>(std::clamp<double>(double(done) / double(total), 0.0, 1.0) * bar_width);
    s += " [" + std::string(static_cast<size_t>(fill), '#') + std::string(static_cast<size_t>(bar_width - fill), '.') + "]";
  }
  char b[128];
  if (total > 0) {
    std::snprintf(b, sizeof b, "  %lld/%lld", static_cast<long long>(done), static_cast<long long>(total));
    s += b;
    if (bar_width == 0) {
      std::snprintf(b, sizeof b, " (%.0f%%)", 100.0 * double(done) / double(total));
      s += b;
    }
  } else {
    std::snprintf(b, sizeof b, "  %lld", static_cast<long long>(done));
    s += b;
  }
  const double rate = secs > 0 ? double(done) / secs : 0;
  if (rate >= 10) std::snprintf(b, sizeof b, "  %.1f %s/s", rate, unit);
  else std::snprintf(b, sizeof b, "  %.2f %s/s", rate, unit);
  s += b;
  if (total > 0 && done < total && rate > 0) s += "  ETA " + duration(double(total - done) / rate);
  else if (total > 0 && done >= total) s += "  " + duration(secs);
  if (!tail.empty()) s += "  " + tail;
  return s;
}

class Bar {
 public:
  using clock = std::chrono::steady_clock;
  // `total` 0 = unknown. `interval_s`: seconds between plain lines.
  Bar(std::string label, int64_t total, double interval_s, Mode mode, const char* unit = "it")
      : label_(std::move(label)), total_(total), interval_(interval_s), mode_(mode), unit_(unit), t0_(clock::now()),
        last_(t0_) {}
  Bar(std::string label, int64_t total, double interval_s) : Bar(std::move(label), total, interval_s, choose_mode(interval_s)) {}
  Bar(const Bar&) = delete;
  Bar& operator=(const Bar&) = delete;
  ~Bar() { clear(); }

  // `done` items so far; `tail()` gives the line's extra text (losses, memory) and is called only when a
  // line is drawn (it may synchronise the device). Thread-safe: a call that finds another drawing skips.
  void update(int64_t done, const std::function<std::string()>& tail = {}) {
    done_ = done;
    if (mode_ == Mode::off) return;
    const auto now = clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (since < (mode_ == Mode::terminal ? 0.2 : interval_)) return;
    std::unique_lock lk(mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    last_ = now;
    draw(done, tail ? tail() : std::string());
  }
  // The loop ended: a terminal's line is removed; a plain final line is written when `final_line`.
  void finish(bool final_line = false, const std::string& tail = "") {
    std::lock_guard lk(mu_);
    if (mode_ == Mode::terminal) {
      clear();
    } else if (mode_ == Mode::plain && final_line) {
      log::info(format_line(label_, done_.load(), total_, seconds(), 0, tail, unit_));
    }
    finished_ = true;
  }
  double seconds() const { return std::chrono::duration<double>(clock::now() - t0_).count(); }
  int lines_written() const { return lines_; }
  Mode mode() const { return mode_; }

 private:
  void draw(int64_t done, const std::string& tail) {
    ++lines_;
    if (mode_ == Mode::terminal) {
      drawn_ = true;
      log::set_status(format_line(label_, done, total_, seconds(), 20, tail, unit_));
    } else {
      log::info(format_line(label_, done, total_, seconds(), 0, tail, unit_));
    }
  }
  void clear() {
    if (drawn_) log::set_status("");
    drawn_ = false;
  }

  std::string label_;
  int64_t total_;
  double interval_;
  Mode mode_;
  const char* unit_;
  clock::time_point t0_, last_;
  std::mutex mu_;
  std::atomic<int64_t> done_{0};
  int lines_ = 0;
  bool drawn_ = false, finished_ = false;
};

}  // namespace libreyolo::progress
