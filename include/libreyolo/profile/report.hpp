#pragma once
// The `libreyolo profile` subcommands as functions for the CLI: each reads its files, writes its text
// to `out` and problems to `err`, and returns the exit code (0 ok, 2 bad input: missing file, not JSON,
// not a v1 profile, unknown phase/category/sort, bad regex). Also the --repeat aggregation.
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/profile/report_text.hpp>

namespace libreyolo::profile {

// Mean / population std of each repeat metric over the trials (null values, i.e. no trace, skipped),
// the per-trial values, and `bound` = the common verdict or `mixed`.
LIBREYOLO_INLINE nlohmann::json aggregate_repeat(const std::vector<nlohmann::json>& trials);

namespace detail {
struct MetricSample {
  double mean = 0, sd = 0;
  size_t n = 0;
};
// One metric of a profile.json (n = 1) or profile_repeat.json (n = trials with a value). A repeat
// metric with a mean must carry a numeric std and a count n >= 1 (DataError otherwise: the files are
// shared, so a hand-edited or truncated one must fail with its name, not read a missing key).
LIBREYOLO_INLINE MetricSample metric_sample(const nlohmann::json& doc, const char* key);
// Checks every metric of a document compare_text reads; DataError names the file.
LIBREYOLO_INLINE void check_metrics(const nlohmann::json& doc, const std::filesystem::path& file);
}  // namespace detail

// Deltas b - a; significant when |delta| > 2 sqrt(sa^2/na + sb^2/nb), which needs n >= 2 on both sides.
LIBREYOLO_INLINE std::string compare_text(const nlohmann::json& a, const nlohmann::json& b);

namespace detail {
// Runs `body`, turning libreyolo errors into a message on `err` and exit code 2 (a file given on the
// command line that is not a usable profile is a bad argument). A JSON field of the wrong type in a
// (shared, untrusted) profile file is reported naming the file(s) too.
template <class F>
int guarded(std::ostream& err, const std::vector<std::filesystem::path>& files, F&& body) {
  try {
    body();
    return 0;
  } catch (const Error& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  } catch (const nlohmann::json::exception& e) {
    std::string names;
    for (const auto& f : files) names += (names.empty() ? "'" : ", '") + f.string() + "'";
    err << "error: profile " << names << ": a field is missing or has the wrong type (" << e.what() << ")\n";
    return 2;
  }
}
}  // namespace detail

LIBREYOLO_INLINE int run_summary(const std::filesystem::path& profile, std::ostream& out, std::ostream& err);
LIBREYOLO_INLINE int run_phases(const std::filesystem::path& profile, std::ostream& out, std::ostream& err);
LIBREYOLO_INLINE int run_kernels(const std::filesystem::path& profile, const KernelQuery& query, std::ostream& out, std::ostream& err);
LIBREYOLO_INLINE int run_compare(const std::filesystem::path& a, const std::filesystem::path& b, std::ostream& out, std::ostream& err);
// Reads the trials' profile.json files, writes profile_repeat.json to `out_file`, prints a short line.
LIBREYOLO_INLINE int run_aggregate_repeat(const std::vector<std::filesystem::path>& trials, const std::filesystem::path& out_file,
                                std::ostream& out, std::ostream& err);

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/report-inl.hpp>
#endif
