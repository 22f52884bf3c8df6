#pragma once
// A process-wide "stop requested" flag. The command-line program sets it from SIGINT/SIGTERM/SIGHUP;
// the trainer checks it after every step, saves weights/last.ckpt at that exact position and returns,
// so an interrupted run loses nothing and `resume=true` continues from there. A stop inside a
// gradient-accumulation window first finishes the window (the checkpoint is always at an optimizer
// step); one during validation ends the run after it, at the epoch's checkpoint.
#include <atomic>
#include <csignal>
#include <cstring>

#include <unistd.h>

namespace libreyolo::train {

inline std::atomic<bool>& interrupt_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}
inline void request_stop() { interrupt_flag().store(true); }
inline bool stop_requested() { return interrupt_flag().load(std::memory_order_relaxed); }

// Installs SIGINT/SIGTERM/SIGHUP handlers that request a stop (and say so on stderr, at once: the
// trainer may need a moment to reach the next step boundary); a second signal of any of them ends the
// process the default way (so `timeout` and a double Ctrl-C still work on a stuck run). SIGHUP (the
// terminal closed, an ssh session dropped) saves the run like Ctrl-C instead of losing the epoch.
inline void install_interrupt_handlers() {
  auto handler = +[](int sig) {
    if (interrupt_flag().exchange(true)) {
      std::signal(sig, SIG_DFL);
      std::raise(sig);
      return;
    }
    static const char msg[] =
        "\nlibreyolo: stop requested; saving weights/last.ckpt at the next step boundary (signal again to quit at once)\n";
    [[maybe_unused]] const auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);  // async-signal-safe
  };
  std::signal(SIGINT, handler);
  std::signal(SIGTERM, handler);
  std::signal(SIGHUP, handler);
}

}  // namespace libreyolo::train
