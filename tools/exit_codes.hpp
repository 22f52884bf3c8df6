#pragma once
// The `libreyolo` program's exit codes: one table, printed by --help and documented in README.md.
#include <libreyolo/core/error.hpp>
#include <libreyolo/distributed/launch.hpp>

#include <algorithm>
#include <array>
#include <string>

namespace libreyolo::cli {

namespace exit_code {
inline constexpr int ok = 0;
inline constexpr int failure = 1;      // an unexpected run-time failure (a bug, out of memory, a LibTorch error)
inline constexpr int usage = 2;        // bad arguments or configuration (ConfigError), a bad file given to `profile`
inline constexpr int no_profile = 3;   // `profile run`: the run produced no profile.json
inline constexpr int data = 4;         // the dataset or an input file cannot be used (DataError)
inline constexpr int checkpoint = 5;   // a checkpoint is missing, corrupt or does not fit (CheckpointError)
inline constexpr int setup = 6;        // device / environment (SetupError): no CUDA, no run to resume, ...
inline constexpr int peer_lost = dist::peer_lost_exit_code;      // 75: a distributed rank lost its peers
inline constexpr int interrupted = dist::interrupted_exit_code;  // 130: stopped by Ctrl-C / SIGTERM / SIGHUP, saved
}  // namespace exit_code

struct ExitCodeRow {
  int code;
  const char* meaning;
};
inline constexpr std::array<ExitCodeRow, 9> exit_code_table = {{
    {exit_code::ok, "success"},
    {exit_code::failure, "unexpected run-time failure (out of memory, an internal or LibTorch error)"},
    {exit_code::usage, "usage or configuration error (unknown key, bad value, bad cfg= file; a file given to "
                       "`profile` that is missing or not a profile)"},
    {exit_code::no_profile, "`profile run`: the run produced no profile.json"},
    {exit_code::data, "dataset / input data error (missing or unusable dataset, no usable image, bad labels)"},
    {exit_code::checkpoint, "checkpoint error (missing, corrupt, NaN weights, another family or size)"},
    {exit_code::setup, "device or setup error (device not available, no run to resume, distributed setup)"},
    {exit_code::peer_lost, "distributed training: a rank lost its peers"},
    {exit_code::interrupted, "interrupted (Ctrl-C, SIGTERM, SIGHUP); weights/last.ckpt saved, resume=true continues"},
}};

inline std::string exit_code_help() {
  std::string s = "Exit codes:\n";
  for (const auto& r : exit_code_table) {
    std::string code = std::to_string(r.code);
    s += "  " + std::string(4 - std::min<size_t>(code.size(), 3), ' ') + code + "  " + r.meaning + "\n";
  }
  return s;
}

// The code for an exception that reached main().
inline int exit_code_for(const std::exception& e) {
  if (dynamic_cast<const ConfigError*>(&e)) return exit_code::usage;
  if (dynamic_cast<const DataError*>(&e)) return exit_code::data;
  if (dynamic_cast<const CheckpointError*>(&e)) return exit_code::checkpoint;
  if (dynamic_cast<const SetupError*>(&e)) return exit_code::setup;
  return exit_code::failure;
}

}  // namespace libreyolo::cli
