#pragma once
// The verdict of a profile: exactly one of memory-pressure, dataloader, compute, host/launch (checked
// in that order, SPEC §2.1) — or, when no GPU kernel trace exists, only what the unsynchronised host
// timings can support: memory-pressure from allocator counts, dataloader, else
// `unknown (no GPU trace)`. A bound is never inferred from zero traced kernels.
#include <libreyolo/core/api.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace libreyolo::profile {

inline constexpr double mallocs_per_step_limit = 5.0;  // >= this: memory pressure
inline constexpr double raw_util_limit = 1.05;         // > this: kernels outlast the step (allocator stalls)
inline constexpr double dataload_frac_limit = 0.2;     // >= this: dataloader-bound
inline constexpr double compute_util_limit = 0.8;      // >= this: compute-bound

namespace bound {
inline constexpr const char* memory_pressure = "memory-pressure";
inline constexpr const char* dataloader = "dataloader";
inline constexpr const char* compute = "compute";
inline constexpr const char* host_launch = "host/launch";
inline constexpr const char* unknown_no_trace = "unknown (no GPU trace)";
inline constexpr const char* mixed = "mixed";  // repeat trials disagree
}  // namespace bound

struct VerdictInputs {
  bool trace_collected = false;
  double mallocs_per_step = 0;
  double gpu_util_raw = 0;
  double dataload_frac = 0;
  double step_ms = 0;
  double gpu_busy_ms_per_step = 0;
  double host_overhead_ms_per_step = 0;
  double launches_per_step = 0;
  std::optional<bool> amp;          // from the run's meta; nullopt when unknown
  std::optional<bool> cuda_device;  // from the run's meta "device"; nullopt when unknown
};

struct Verdict {
  std::string bound;
  std::string why;
  std::vector<std::string> levers;
  std::vector<std::string> notes;  // extra lines: fp32 note, no-trace note
};

namespace detail {
LIBREYOLO_INLINE std::string fmt(const char* f, double a, double b = 0, double c = 0);
}  // namespace detail

LIBREYOLO_INLINE Verdict decide_verdict(const VerdictInputs& in);

}  // namespace libreyolo::profile

#if LIBREYOLO_HEADER_ONLY
#include <libreyolo/profile/verdict-inl.hpp>
#endif
