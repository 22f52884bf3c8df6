#pragma once
// Self-launch on one host (`libreyolo train … nproc=N`): starts N copies of this program, each with the
// torchrun environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and watches them. When
// one exits with an error or a signal, the others are stopped (SIGTERM, then SIGKILL after a grace
// period) and the launch fails naming that rank — a failing rank never leaves the others hanging.
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace libreyolo::dist {

// A TCP port that was free a moment ago on 127.0.0.1 (the kernel's choice).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw SetupError("distributed: cannot open a socket to pick a free port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  if (port <= 0) throw SetupError("distributed: no free TCP port on 127.0.0.1");
  return port;
}

// Exit code of a rank that stopped because another rank left a collective (dist::PeerLost), so the
// launcher can name the rank that failed first.
inline constexpr int peer_lost_exit_code = 75;
// Exit code of a rank that stopped on request (Ctrl-C / SIGTERM) after saving: not a failure.
inline constexpr int interrupted_exit_code = 130;

struct LaunchResult {
  int exit_code = 0;    // 0 when every rank succeeded; interrupted_exit_code when they stopped on request
  int failed_rank = -1;  // the first rank that failed
  std::string message;
};

// Runs `argv` (argv[0] is the program) as `nproc` ranks and waits for all of them.
inline LaunchResult launch_local(const std::vector<std::string>& argv, int nproc, std::chrono::seconds grace = std::chrono::seconds(10)) {
  if (nproc < 2) throw ConfigError("nproc=" + std::to_string(nproc) + ": a launch needs at least 2 processes");
  const int port = free_port();
  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw SetupError("distributed: fork() failed for rank " + std::to_string(r));
    if (pid == 0) {
      // Its own process group, so a signal for the launcher's group (Ctrl-C, `timeout`) reaches the
      // ranks only through the launcher, once; and it goes down with the launcher if that is killed.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() == 1) _exit(1);  // the launcher died before the line above
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv("/proc/self/exe", args.data());
      _exit(127);  // exec failed
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  log::info("distributed: launched ", nproc, " ranks (rendezvous 127.0.0.1:", port, ")");
  // Ctrl-C and SIGTERM (from the terminal, `timeout`, or a kill of the launcher) are passed on to the
  // ranks, once per signal received: the first makes them stop together after the same step (the
  // trainer's stop agreement) while rank 0 saves; a second one ends them the default way, as it does a
  // single process.
  struct SignalScope {
    struct sigaction old_int {}, old_term {};
    SignalScope() {
      received(SIGINT).store(0);
      received(SIGTERM).store(0);
      struct sigaction count {};
      count.sa_handler = +[](int sig) { received(sig).fetch_add(1); };
      ::sigaction(SIGINT, &count, &old_int);
      ::sigaction(SIGTERM, &count, &old_term);
    }
    ~SignalScope() {
      ::sigaction(SIGINT, &old_int, nullptr);
      ::sigaction(SIGTERM, &old_term, nullptr);
    }
    static std::atomic<int>& received(int sig) {
      static std::atomic<int> n_int{0}, n_term{0};
      return sig == SIGINT ? n_int : n_term;
    }
  } signals;
  int forwarded_int = 0, forwarded_term = 0;
  LaunchResult res;
  int alive = nproc;
  auto rank_of = [&](pid_t p) {
    for (int r = 0; r < nproc; ++r)
      if (pids[static_cast<size_t>(r)] == p) return r;
    return -1;
  };
  struct Failure {
    int rank, status;
  };
  std::vector<Failure> failures;
  auto reap = [&](int flags) {  // one child; false when none was ready
    int status = 0;
    const pid_t p = ::waitpid(-1, &status, flags);
    if (p <= 0) return false;
    if (const int r = rank_of(p); r >= 0) {
      pids[static_cast<size_t>(r)] = -1, --alive;
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      const bool stopped = WIFEXITED(status) && WEXITSTATUS(status) == interrupted_exit_code;
      if (stopped) res.exit_code = interrupted_exit_code;
      else if (!clean) failures.push_back({r, status});
    }
    return true;
  };
  auto reap_until = [&](std::chrono::steady_clock::time_point deadline) {
    while (alive > 0 && std::chrono::steady_clock::now() < deadline)
      if (!reap(WNOHANG)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  // Polled rather than a blocking waitpid: the signal may be handled on any thread of this process,
  // so an interrupted wait cannot be relied on to notice it.
  while (alive > 0 && failures.empty()) {
    for (auto [sig, sent] : {std::pair<int, int*>{SIGINT, &forwarded_int}, {SIGTERM, &forwarded_term}})
      for (; *sent < SignalScope::received(sig).load(); ++*sent)
        for (pid_t q : pids)
          if (q > 0) ::kill(q, sig);
    errno = 0;
    if (reap(WNOHANG)) continue;
    if (errno == ECHILD) break;  // no children left to wait for (not expected while alive > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!failures.empty()) {
    // A rank whose peer died exits with peer_lost_exit_code a moment later, sometimes before the rank
    // that caused it has finished exiting: wait briefly for exits of their own, then stop the rest.
    reap_until(std::chrono::steady_clock::now() + std::chrono::seconds(2));
    for (pid_t q : pids)
      if (q > 0) ::kill(q, SIGTERM);
    const auto n_before_kill = failures.size();
    reap_until(std::chrono::steady_clock::now() + grace);
    for (pid_t q : pids)
      if (q > 0) ::kill(q, SIGKILL);
    while (alive > 0 && reap(0)) {
    }
    Failure culprit = failures.front();
    for (size_t i = 0; i < n_before_kill; ++i)
      if (!(WIFEXITED(failures[i].status) && WEXITSTATUS(failures[i].status) == peer_lost_exit_code)) {
        culprit = failures[i];
        break;
      }
    const int st = culprit.status;
    res.failed_rank = culprit.rank;
    res.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    res.message = "rank " + std::to_string(culprit.rank) + " failed (" +
                  (WIFEXITED(st) ? "exit code " + std::to_string(WEXITSTATUS(st)) : "signal " + std::to_string(WTERMSIG(st))) +
                  "); the other ranks were stopped";
  }
  if (res.failed_rank >= 0) log::error("distributed: ", res.message);
  else if (res.exit_code == interrupted_exit_code)
    log::info("distributed: the ranks stopped on request after the same step; resume=true continues from there");
  return res;
}

}  // namespace libreyolo::dist
