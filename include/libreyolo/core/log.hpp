#pragma once
// Logging: one line per message on stderr, with a level prefix, and "notice once" for messages that
// must be printed a single time per process (static fallbacks, CPU-instead-of-AMP, ...).
#include <atomic>
#include <cstdio>
#include <functional>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

namespace libreyolo::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, quiet = 4 };

namespace detail {
struct State {
  std::mutex mu;
  Level level = Level::info;
  // Tests install a sink to capture output; default writes to stderr.
  std::function<void(Level, std::string_view)> sink;
  std::set<std::string> once_keys;
  // A terminal's live status line (core/progress.hpp): a message clears it, prints, and redraws it.
  std::string status;
};
inline State& state() {
  static State s;
  return s;
}
}  // namespace detail

inline void set_level(Level l) { detail::state().level = l; }
inline Level level() { return detail::state().level; }

// Replace the output sink (nullptr restores stderr). Returns the previous one.
inline std::function<void(Level, std::string_view)> set_sink(std::function<void(Level, std::string_view)> s) {
  auto& st = detail::state();
  std::lock_guard<std::mutex> lk(st.mu);
  std::swap(st.sink, s);
  return s;
}

inline void write(Level l, std::string_view msg) {
  auto& st = detail::state();
  if (l < st.level) return;
  std::lock_guard<std::mutex> lk(st.mu);
  if (st.sink) {
    st.sink(l, msg);
    return;
  }
  const char* tag = l == Level::warn ? "WARNING: " : l == Level::error ? "ERROR: " : "";
  if (!st.status.empty()) std::cerr << "\r\033[K";
  std::cerr << tag << msg << '\n';
  if (!st.status.empty()) std::cerr << st.status;
  std::cerr.flush();
}

// The live status line of a terminal (core/progress.hpp): drawn in place on stderr ("" removes it).
// Log lines written meanwhile appear above it. Not drawn when a sink is installed or below `info`.
inline void set_status(std::string_view line) {
  auto& st = detail::state();
  std::lock_guard<std::mutex> lk(st.mu);
  if (st.sink || st.level > Level::info) return;
  if (line.empty() && st.status.empty()) return;
  st.status = std::string(line);
  std::cerr << "\r\033[K" << st.status;
  std::cerr.flush();
}

template <class... A>
std::string cat(A&&... a) {
  std::ostringstream os;
  (os << ... << std::forward<A>(a));
  return os.str();
}

template <class... A> void info(A&&... a) { write(Level::info, cat(std::forward<A>(a)...)); }
template <class... A> void warn(A&&... a) { write(Level::warn, cat(std::forward<A>(a)...)); }
template <class... A> void error(A&&... a) { write(Level::error, cat(std::forward<A>(a)...)); }
template <class... A> void debug(A&&... a) { write(Level::debug, cat(std::forward<A>(a)...)); }

// Prints `msg` the first time `key` is seen in this process; returns whether it printed.
inline bool notice_once(const std::string& key, std::string_view msg, Level l = Level::info) {
  auto& st = detail::state();
  {
    std::lock_guard<std::mutex> lk(st.mu);
    if (!st.once_keys.insert(key).second) return false;
  }
  write(l, msg);
  return true;
}
// Tests: forget which once-keys have been printed.
inline void reset_once() {
  auto& st = detail::state();
  std::lock_guard<std::mutex> lk(st.mu);
  st.once_keys.clear();
}

}  // namespace libreyolo::log
