#pragma once
// Shared by the install-area tests: run a shell command with its output in a log file, read a file back.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace lry_test {
inline int sh(const std::string& cmd, const std::filesystem::path& log) {
  return std::system((cmd + " > " + log.string() + " 2>&1").c_str());
}
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace lry_test
