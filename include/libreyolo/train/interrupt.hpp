#pragma once
// A process-wide "stop requested" flag. The command-line program sets it from SIGINT/SIGTERM; the
// trainer checks it after every step, saves weights/last.ckpt at that exact position and returns, so
// an interrupted run loses nothing and `resume=true` continues from there.
#include <atomic>
#include <csignal>

namespace libreyolo::train {

inline std::atomic<bool>& interrupt_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}
inline void request_stop() { interrupt_flag().store(true); }
inline bool stop_requested() { return interrupt_flag().load(std::memory_order_relaxed); }

// Installs SIGINT/SIGTERM handlers that request a stop; a second signal of either kind ends the
// process the default way (so `timeout` and a double Ctrl-C still work on a stuck run).
inline void install_interrupt_handlers() {
  auto handler = +[](int sig) {
    if (interrupt_flag().exchange(true)) {
      std::signal(sig, SIG_DFL);
      std::raise(sig);
    }
  };
  std::signal(SIGINT, handler);
  std::signal(SIGTERM, handler);
}

}  // namespace libreyolo::train
