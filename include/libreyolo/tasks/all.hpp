#pragma once
// Every task, for the command line (`data synth --task`, help) and the registry.
#include <libreyolo/tasks/classify.hpp>
#include <libreyolo/tasks/detect.hpp>
#include <libreyolo/tasks/point.hpp>
#include <libreyolo/tasks/semantic.hpp>

#include <optional>
#include <string>
#include <tuple>

namespace libreyolo::tasks {

using all_info = std::tuple<DetectInfo, ClassifyInfo, SemanticInfo, PointInfo>;

// The tasks that have a synthetic set (those with content: detect, classify, semantic, point).
inline const std::vector<std::string>& synth_tasks() {
  static const std::vector<std::string> v{std::string(ClassifyInfo::name), std::string(DetectInfo::name),
                                          std::string(SemanticInfo::name), std::string(PointInfo::name)};
  return v;
}
// Writes the synthetic set of the task named `task`.
inline void synth(const std::string& task, const data::SynthOptions& o) {
  if (task == ClassifyInfo::name) return classify::synth(o);
  if (task == DetectInfo::name) return detect::synth(o);
  if (task == SemanticInfo::name) return semantic::synth(o);
  if (task == PointInfo::name) return point::synth(o);
  std::string allowed;
  for (auto& t : synth_tasks()) allowed += (allowed.empty() ? "" : ", ") + t;
  throw ConfigError("--task " + task + ": no synthetic set for this task; allowed: " + allowed);
}

// Task by name ("detect", "classify", ...), for task=.
inline std::optional<Task> parse_task(const std::string& s) {
  std::optional<Task> out;
  std::apply([&](auto... info) { ((s == decltype(info)::name ? (void)(out = decltype(info)::task) : (void)0), ...); }, all_info{});
  return out;
}

}  // namespace libreyolo::tasks
