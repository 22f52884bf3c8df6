#pragma once
// Helpers for the hardening regression tests: run a function in a child process (so a crash, a stack
// overflow or a hang fails the test instead of taking the runner down), run the built CLI, and write
// small hostile files.
#include <libreyolo/libreyolo.hpp>
#include <libreyolo/model.hpp>  // every family and the facade
#include <libreyolo/profile/report.hpp>

#include "support.hpp"
#include "support_data.hpp"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

namespace lry_harden {

namespace fs = std::filesystem;

// What a child process did: exited with `code`, or died of `signal`, or ran past the timeout (killed).
struct ChildResult {
  bool exited = false;
  int code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string describe() const {
    if (timed_out) return "timed out (killed)";
    if (exited) return "exit " + std::to_string(code);
    return "killed by signal " + std::to_string(signal);
  }
};

inline ChildResult wait_child(pid_t pid, double timeout_s) {
  ChildResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) r.exited = true, r.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// Runs fn() in a forked child (no LibTorch work inside: only plain C++); its return value is the exit code.
inline ChildResult in_child(const std::function<int()>& fn, double timeout_s = 20) {
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = fn();
    } catch (...) {
      rc = 98;
    }
    std::_Exit(rc);
  }
  return wait_child(pid, timeout_s);
}

// The built command-line program (tools/), found through the build tree.
inline fs::path cli_path() { return fs::path(LIBREYOLO_BINARY_DIR) / "tools" / "libreyolo"; }

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `libreyolo args...` to completion; returns its exit code, and its stdout+stderr in *output.
inline int run_cli(const std::vector<std::string>& args, std::string* output = nullptr, const fs::path& log = {}) {
  lry_test::TempDir tmp("lry_cli");
  const fs::path out = log.empty() ? tmp / "out.txt" : log;
  std::string cmd = shell_quote(cli_path().string());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " > " + shell_quote(out.string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  if (output) {
    std::ifstream f(out);
    std::stringstream ss;
    ss << f.rdbuf();
    *output = ss.str();
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// A PNG chunk: length, type, data, CRC.
inline std::string png_chunk(const std::string& type, const std::string& data) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  const std::string td = type + data;
  const uint32_t crc = static_cast<uint32_t>(::crc32(0L, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size())));
  return be32(static_cast<uint32_t>(data.size())) + td + be32(crc);
}

// A tiny, well-formed PNG whose header claims w x h RGB pixels (a decompression bomb): signature,
// IHDR, one small IDAT, IEND.
inline std::string png_claiming(uint32_t w, uint32_t h) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  std::string ihdr = be32(w) + be32(h) + std::string{8, 2, 0, 0, 0};
  const std::string raw(16, '\0');
  uLongf n = compressBound(raw.size());
  std::string z(n, '\0');
  compress2(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 9);
  z.resize(n);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", z) + png_chunk("IEND", "");
}

}  // namespace lry_harden
