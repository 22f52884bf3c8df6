#pragma once
// The four profiler artifacts (SPEC §2.1): profile.json (self-contained analysis, schema
// libreyolo.profile.analysis/v1), profile_summary.json, profile_trace.json (Chrome Trace Event
// format) and timeline.html (see timeline_html.hpp).
#include <libreyolo/core/api.hpp>
#include <libreyolo/core/atomic_file.hpp>
#include <libreyolo/core/error.hpp>
#include <libreyolo/profile/analysis.hpp>
#include <libreyolo/profile/timeline_html.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_map>
#include <string>

namespace libreyolo::profile {

inline constexpr int top_kernel_count = 10;

namespace detail {
// Peak VRAM is known on a CUDA device whether or not a kernel trace was collected; elsewhere it is n/a
// (null), not a misleading 0 MB.
LIBREYOLO_INLINE nlohmann::json vram_value(const Analysis& a);
using nlohmann::json;
// GPU-derived figures are null without a kernel trace: zero would read as a measurement.
LIBREYOLO_INLINE json gpu_value(const Analysis& a, double v);

LIBREYOLO_INLINE json kernel_json(const KernelStat& k);
LIBREYOLO_INLINE json op_json(const OpStat& o);
LIBREYOLO_INLINE json top_kernels_json(const Analysis& a);
LIBREYOLO_INLINE json categories_json(const Analysis& a);
// The headline values shared by profile.json's top level and its `metrics` copy.
LIBREYOLO_INLINE json headline_json(const Analysis& a);
}  // namespace detail

LIBREYOLO_INLINE nlohmann::json profile_json(const Analysis& a);

LIBREYOLO_INLINE nlohmann::json summary_json(const Analysis& a);

// Chrome Trace Event format: host tracks (steps, phases, CPU ops, CUDA runtime) in pid 1, one GPU
// track per stream in pid 2, and a flow arrow from each launch to its kernel.
LIBREYOLO_INLINE nlohmann::json chrome_trace_json(const WindowRecord& rec);

// Writes via a temporary file and a rename, so a crash never leaves half an artifact.
LIBREYOLO_INLINE void write_text_file(const std::filesystem::path& path, const std::string& text);

inline const std::array<const char*, 4> artifact_names = {"profile.json", "profile_summary.json",
                                                          "profile_trace.json", "timeline.html"};

LIBREYOLO_INLINE void write_artifacts(const std::filesystem::path& run_dir, const WindowRecord& rec, const Analysis& a);

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/writers-inl.hpp>
#endif
