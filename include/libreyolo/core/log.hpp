#pragma once
// Logging: one line per message on stderr, with a level prefix, and "notice once" for messages that
// must be printed a single time per process (static fallbacks, CPU-instead-of-AMP, ...).
#include <libreyolo/core/api.hpp>

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
LIBREYOLO_INLINE State& state();
}  // namespace detail

inline void set_level(Level l) { detail::state().level = l; }
inline Level level() { return detail::state().level; }

// Replace the output sink (nullptr restores stderr). Returns the previous one.
LIBREYOLO_INLINE std::function<void(Level, std::string_view)> set_sink(std::function<void(Level, std::string_view)> s);

LIBREYOLO_INLINE void write(Level l, std::string_view msg);

// The live status line of a terminal (core/progress.hpp): drawn in place on stderr ("" removes it).
// Log lines written meanwhile appear above it. Not drawn when a sink is installed or below `info`.
LIBREYOLO_INLINE void set_status(std::string_view line);

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
LIBREYOLO_INLINE bool notice_once(const std::string& key, std::string_view msg, Level l = Level::info);
// Tests: forget which once-keys have been printed.
LIBREYOLO_INLINE void reset_once();

}  // namespace libreyolo::log

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/core/log-inl.hpp>
#endif
