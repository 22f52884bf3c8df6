#pragma once
// Definitions of log.hpp (core/api.hpp): included by log.hpp when header-only, compiled once otherwise.
#include <libreyolo/core/log.hpp>

namespace libreyolo::log::detail {

LIBREYOLO_INLINE State& state() {
  static State s;
  return s;
}

}  // namespace libreyolo::log::detail

namespace libreyolo::log {

LIBREYOLO_INLINE std::function<void(Level, std::string_view)> set_sink(std::function<void(Level, std::string_view)> s) {
  auto& st = detail::state();
  std::lock_guard<std::mutex> lk(st.mu);
  std::swap(st.sink, s);
  return s;
}

LIBREYOLO_INLINE void write(Level l, std::string_view msg) {
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

LIBREYOLO_INLINE void set_status(std::string_view line) {
  auto& st = detail::state();
  std::lock_guard<std::mutex> lk(st.mu);
  if (st.sink || st.level > Level::info) return;
  if (line.empty() && st.status.empty()) return;
  st.status = std::string(line);
  std::cerr << "\r\033[K" << st.status;
  std::cerr.flush();
}

LIBREYOLO_INLINE bool notice_once(const std::string& key, std::string_view msg, Level l) {
  auto& st = detail::state();
  {
    std::lock_guard<std::mutex> lk(st.mu);
    if (!st.once_keys.insert(key).second) return false;
  }
  write(l, msg);
  return true;
}

LIBREYOLO_INLINE void reset_once() {
  auto& st = detail::state();
  std::lock_guard<std::mutex> lk(st.mu);
  st.once_keys.clear();
}

}  // namespace libreyolo::log
