#pragma once
// Text of the `libreyolo profile summary|phases|kernels` subcommands, made from a profile.json
// document, and the loader that checks a file is one (see report.hpp for the run_* entry points).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/profile/events.hpp>
#include <libreyolo/profile/kernel_names.hpp>
#include <libreyolo/profile/verdict.hpp>

#include <nlohmann/json.hpp>
#if defined(LIBREYOLO_WITH_RE2)
#include <re2/re2.h>
#endif

#include <algorithm>
#include <cctype>
#include <array>
#include <initializer_list>
#include <memory>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace libreyolo::profile {

// The phases a profile.json knows: the five of a step, and `outside` (zero_grad, EMA, LR).
inline constexpr std::array<std::string_view, 6> report_phases = {"dataload", "to_device", "forward",
                                                                  "backward", "optimizer", "outside"};
// Metrics aggregated over repeat trials and compared between runs.
inline constexpr std::array<const char*, 7> repeat_metrics = {
    "img_per_s", "step_ms", "gpu_util", "gpu_busy_ms_per_step", "kernels_per_step", "host_overhead_ms_per_step",
    "dataload_ms"};

// Longest --grep pattern accepted (RE2 compiles it within its default memory budget).
inline constexpr size_t max_grep_length = 4096;

struct KernelQuery {
  int top = 20;
  std::string category;  // empty: all
  std::string grep;      // regular expression (RE2 syntax) on the raw kernel name, case-insensitive; empty: all
  bool tensorcore_only = false;
  std::string sort = "time";  // time | count | name
  std::string phase;          // empty: whole step
};

namespace detail {
LIBREYOLO_INLINE std::string num(const nlohmann::json& v, int decimals);
LIBREYOLO_INLINE std::string num_at(const nlohmann::json& j, const char* key, int decimals);
// The value with its unit ("612 MB"), or a bare "n/a" when there is none (no "n/a MB").
LIBREYOLO_INLINE std::string num_at(const nlohmann::json& j, const char* key, int decimals, std::string_view unit);
LIBREYOLO_INLINE std::string pct(const nlohmann::json& v);
LIBREYOLO_INLINE std::string joined(const std::vector<std::string>& parts, const char* sep);

// --grep. With RE2 (LIBREYOLO_WITH_RE2): a regular expression matched in time linear in the name,
// without recursion, so a hostile pattern or a shared profile.json with huge kernel names cannot hang
// or overflow the stack (std::regex could). Without RE2: plain text, case-insensitive substrings with
// '|' between alternatives; other regex syntax is refused rather than silently taken literally.
class NameMatcher {
 public:
  explicit NameMatcher(const std::string& pattern);
  bool operator()(const std::string& name) const;

 private:
  static std::string lower(std::string s);
  std::string pattern_;
#if defined(LIBREYOLO_WITH_RE2)
  std::shared_ptr<re2::RE2> re_;
#else
  std::vector<std::string> alternatives_;
#endif
};
}  // namespace detail

// Reads a JSON file whose "schema" is one of `schemas`; DataError names the file and what is wrong.
LIBREYOLO_INLINE nlohmann::json load_profile_file(const std::filesystem::path& path,
                                        std::initializer_list<std::string_view> schemas = {analysis_schema});

// The convolution time of a profile's kernel list ("kernels": ms_per_step, raw_name) by algorithm family
// (conv_algorithm), largest first, and its total: the summary's "convolutions:" line and `profile convs`.
struct ConvFamilies {
  double conv_ms = 0;
  std::vector<std::pair<std::string, double>> families;  // (family, ms per step)
};
LIBREYOLO_INLINE ConvFamilies conv_ms_by_family(const nlohmann::json& kernels);

LIBREYOLO_INLINE std::string summary_text(const nlohmann::json& p);

LIBREYOLO_INLINE std::string phases_text(const nlohmann::json& p);

// Throws ConfigError for a bad query (unknown phase/category/sort, bad regex, top < 1).
LIBREYOLO_INLINE std::string kernels_text(const nlohmann::json& p, const KernelQuery& q);

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/report_text-inl.hpp>
#endif
