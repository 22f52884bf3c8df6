#pragma once
// One check that both YAML readers make (the training config, core/config-inl.hpp, and the dataset YAML,
// data/detect_yaml-inl.hpp): a template, so it lives here rather than in either's compiled unit.
#include <libreyolo/core/log.hpp>
#include <libreyolo/core/utf8.hpp>

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <utility>

namespace libreyolo::config_detail {

// yaml-cpp keeps both entries of a key that a mapping gives twice (and `node[key]` reads the first):
// a repeat with another value is an error of type E, a repeat with the same value a warning. `label`
// names the file in the messages ("cfg.yaml", "dataset YAML 'data.yaml'").
template <class E>
void refuse_repeated_yaml_keys(const YAML::Node& map, const std::string& label) {
  std::map<std::string, std::pair<int, std::string>> seen;  // key -> (line, value as YAML)
  auto shown = [](std::string v) {
    while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
    for (auto& ch : v)
      if (ch == '\n') ch = ' ';
    return utf8::escaped(v.size() > 60 ? v.substr(0, 57) + "..." : v);
  };
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    const std::string key = it->first.Scalar();
    const int line = it->first.Mark().line + 1;
    const std::string value = YAML::Dump(it->second);
    const auto [at, fresh] = seen.emplace(key, std::make_pair(line, value));
    if (fresh) continue;
    const std::string where = label + ":" + std::to_string(line) + ": key '" + utf8::escaped(key) +
                              "' is given twice (first on line " + std::to_string(at->second.first) + ")";
    if (at->second.second != value)
      throw E(where + " with another value: '" + shown(at->second.second) + "', then '" + shown(value) +
              "'; allowed: each key once (remove one of them)");
    log::warn(where, " with the same value; the repeat is ignored (remove it)");
  }
}

}  // namespace libreyolo::config_detail
