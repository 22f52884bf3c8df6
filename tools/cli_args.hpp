#pragma once
// The `libreyolo` program's key=value arguments: a key typed twice is a slip the user would want to know
// about (the library's parse_args lets a later value win, which programs building argument lists use).
#include <libreyolo/core/error.hpp>
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/utf8.hpp>

#include <map>
#include <string>
#include <vector>

namespace libreyolo::cli {

// A key given twice with different values is a usage error naming both; with the same value, a warning
// (and the arguments without the repeat).
inline std::vector<std::string> refuse_repeated_keys(const std::vector<std::string>& args, const std::string& command) {
  std::map<std::string, std::string> seen;
  std::vector<std::string> kept;
  for (const auto& a : args) {
    const auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {  // parse_args names a malformed argument
      kept.push_back(a);
      continue;
    }
    const std::string key = a.substr(0, eq), value = a.substr(eq + 1);
    const auto [at, fresh] = seen.emplace(key, value);
    if (fresh) {
      kept.push_back(a);
      continue;
    }
    const std::string k = utf8::escaped(key);
    if (at->second != value)
      throw ConfigError("libreyolo " + command + ": key '" + k + "' is given twice: " + k + "=" + utf8::escaped(at->second) +
                        " and " + k + "=" + utf8::escaped(value) + "; allowed: each key once");
    log::warn("libreyolo ", command, ": key '", k, "' is given twice with the same value (", k, "=", utf8::escaped(value),
              "); the repeat is ignored");
  }
  return kept;
}

}  // namespace libreyolo::cli
